"""eval_frame: the user-facing switches around the C frame hook (`optimize`, `disable`, `reset`).

`optimize(fn)` returns a wrapper that sets this thread's `_C` callback for the duration of each
call and restores the previous setting in `finally`, so only frames started under the wrapper are
intercepted and nesting composes (an inner `disable` sets the callback to None and back).

Invariants:
- The compile callback comes from `pydynamo.convert_frame.make_callback(...)`, imported lazily at
  the first call of a wrapper (the executor layers are not needed to import this module).
- This module's own wrapper code objects are marked "skip" in `_C`, so an outer optimize context
  never tries to trace them; `reset()` re-marks them after clearing every cache.
- `reset()` clears the C caches and then runs every function registered with `on_reset`.
- The settings of an optimize() call are part of its cache entries' key (convert_frame's
  COMPILE_SETTINGS guard on the callback); a fullgraph wrapper clears a "skip" mark on its
  function's own code before each call, so it traces (and raises) where another optimize()
  of the same function gave up.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
from typing import Any, Callable, Optional

from pydynamo import _C

__all__ = ["optimize", "disable", "reset", "on_reset"]

_reset_hooks: list[Callable[[], None]] = []


def on_reset(fn: Callable[[], None]) -> Callable[[], None]:
    """Register `fn` to run on every `reset()` (usable as a decorator)."""
    _reset_hooks.append(fn)
    return fn


def reset() -> None:
    """Drop every cache entry and code mark, then run the registered reset hooks."""
    _C.clear_all()
    _mark_own_code_skipped()
    for hook in list(_reset_hooks):
        hook()


class _CallbackScope:
    """Sets one `_C` callback around each call of wrapped functions, and around `with` blocks.

    `callback` is the `_C` setting (None = off, False = run-only, or a callable); with
    `make_kwargs`, it is built by convert_frame.make_callback(**make_kwargs) on first use.
    """

    def __init__(self, callback: Any = None, make_kwargs: Optional[dict] = None):
        self._callback = callback
        self._make_kwargs = make_kwargs
        self._saved = threading.local()  # per thread: settings to restore, `with` blocks LIFO
        self._fullgraph = bool(make_kwargs and make_kwargs.get("fullgraph"))

    def callback(self) -> Any:
        if self._make_kwargs is not None:
            self._callback = _make_callback(self._make_kwargs)
            self._make_kwargs = None
        return self._callback

    def wrap(self, fn: Callable, code: Any = None) -> Callable:
        """`code`: the user code the call enters (a module's forward), when not fn's own."""
        scope = self
        # fullgraph: the function's own code is traced (and a break raises) even where an
        # optimize() with other settings gave up on it and marked it skip
        top = (code or _code_of(fn)) if self._fullgraph else None

        @functools.wraps(fn)
        def _pydynamo_wrapper(*args, **kwargs):
            if top is not None and _C.get_code_state(top) == "skip":
                _C.set_code_state(top, "default")
            prev = _C.set_eval_frame(scope.callback())
            try:
                return fn(*args, **kwargs)
            finally:
                _C.set_eval_frame(prev)

        return _pydynamo_wrapper

    def __call__(self, fn: Callable) -> Callable:
        return _wrap_target(self, fn)

    def __enter__(self):
        stack = self._saved.__dict__.setdefault("stack", [])
        stack.append(_C.set_eval_frame(self.callback()))
        return self

    def __exit__(self, *exc_info) -> None:
        _C.set_eval_frame(self._saved.stack.pop())


def _code_of(fn: Callable) -> Any:
    fn = inspect.unwrap(fn)
    fn = getattr(fn, "__func__", fn)
    return getattr(fn, "__code__", None)


def _is_nn_module(obj: Any) -> bool:
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(obj, torch.nn.Module)


def _wrap_target(scope: _CallbackScope, fn: Callable) -> Callable:
    if _is_nn_module(fn):
        return _optimized_module(scope, fn)
    if not callable(fn):
        raise TypeError(f"pydynamo.optimize expects a function or nn.Module, got {type(fn).__name__}")
    if inspect.isclass(fn):
        raise TypeError("pydynamo.optimize cannot wrap a class; wrap an instance or a function")
    return scope.wrap(fn)


def _optimized_module(scope: _CallbackScope, mod: Any) -> Any:
    """An nn.Module whose calls run `mod(...)` under the scope; parameters stay shared."""
    import torch

    class OptimizedModule(torch.nn.Module):
        def __init__(self, orig):
            super().__init__()
            self._orig_mod = orig
            self._call = scope.wrap(orig.__call__, _code_of(getattr(orig, "forward", None)))

        def forward(self, *args, **kwargs):
            return self._call(*args, **kwargs)

        def __getattr__(self, name):
            if name == "_orig_mod":
                return self._modules["_orig_mod"]
            return getattr(self._modules["_orig_mod"], name)

    return OptimizedModule(mod)


def optimize(
    fn: Optional[Callable] = None,
    *,
    backend: Any = "codegen",
    fullgraph: bool = False,
    dynamic: Optional[bool] = None,
    mode: Optional[str] = None,
    options: Optional[dict] = None,
):
    """Compile `fn` (a function or nn.Module) on its calls; without `fn`, a decorator that is
    also a context manager (`with pydynamo.optimize(...):`)."""

    kwargs = dict(backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options)
    scope = _CallbackScope(make_kwargs=kwargs)
    return scope if fn is None else scope(fn)


def _make_callback(kwargs: dict) -> Any:
    # Imported at first use: the executor layers are not needed to import or wrap.
    from pydynamo.convert_frame import make_callback

    return make_callback(**kwargs)


def _optimize_with_callback(fn: Optional[Callable], callback: Any):
    """Same wrapper machinery as `optimize`, with an explicit `_C` callback (tests, tools):
    a callable (compile mode), False (run-only) or None (off)."""
    scope = _CallbackScope(callback)
    return scope if fn is None else scope(fn)


def disable(fn: Optional[Callable] = None):
    """Never intercept `fn` or anything it calls (decorator; without `fn`, a context manager)."""
    scope = _CallbackScope(None)
    if fn is None:
        return scope
    wrapper = scope(fn)
    wrapper.__pydynamo_disabled__ = True
    return wrapper


def _mark_own_code_skipped() -> None:
    codes = [
        _CallbackScope().wrap(len).__code__,
        _CallbackScope.__enter__.__code__,
        _CallbackScope.__exit__.__code__,
        _CallbackScope.callback.__code__,
        _make_callback.__code__,
    ]
    for code in codes:
        _C.set_code_state(code, "skip")


_mark_own_code_skipped()

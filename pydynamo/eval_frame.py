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
- Under the "force_eager" stance (pydynamo.stance) a compile wrapper or optimize() block sets
  the hook off for its call, so neither compiling nor cached code happens beneath it.
- disable() scopes are counted per thread (`_disabled`): a compile wrapper called, or an
  optimize() context entered, inside one leaves the hook off, so nothing under a disable
  compiles. optimize() validates its arguments when called (backends.check_settings).
- An exception leaving a wrapper or an optimize()/disable() block has pydynamo's frames trimmed
  from its traceback (user_errors.strip_own_frames; the wrapper's own entry too, as it
  re-raises with a bare `raise`), unless config.verbose.
"""
from __future__ import annotations

import functools
import inspect
import sys
import threading
import time
import warnings
from typing import Any, Callable, Optional

from pydynamo import _C, config, logs
from pydynamo import stance as _stance
from pydynamo.versions import unsupported_python
from pydynamo.user_errors import strip_own_frames

__all__ = ["optimize", "disable", "reset", "on_reset"]

_reset_hooks: list[Callable[[], None]] = []


def on_reset(fn: Callable[[], None]) -> Callable[[], None]:
    """Register `fn` to run on every `reset()` (usable as a decorator)."""
    _reset_hooks.append(fn)
    return fn


def reset() -> None:
    """Forget everything compiled (cache entries, guards, recompile counts, warnings already
    given), so the next calls compile afresh; the equivalent of torch.compile's reset."""
    _C.clear_all()
    _mark_own_code_skipped()
    for hook in list(_reset_hooks):
        hook()


class _CallbackScope:
    """Sets one `_C` callback around each call of wrapped functions, and around `with` blocks.

    `callback` is the `_C` setting (None = off, False = run-only, or a callable); with
    `make_kwargs`, it is built by convert_frame.make_callback(**make_kwargs) on first use.
    """

    def __init__(self, callback: Any = None, make_kwargs: Optional[dict] = None, disables: bool = False):
        self._callback = callback
        self._make_kwargs = make_kwargs
        self._saved = threading.local()  # per thread: settings to restore, `with` blocks LIFO
        self._fullgraph = bool(make_kwargs and make_kwargs.get("fullgraph"))
        # a disable() scope: while one is active on a thread, compiled wrappers called inside
        # it run their function uncompiled (`with pydynamo.disable(): compiled(x)`)
        self._disables = disables

    perf = False   # the `perf` log channel was on when the callback was made: time each call

    def callback(self) -> Any:
        if self._make_kwargs is not None:
            self._callback = _make_callback(self._make_kwargs)
            self._make_kwargs = None
            self.perf = logs.enabled("perf")
        return self._callback

    def hook_setting(self) -> Any:
        """What `_C` is set to for a call: the callback, or off under the "force_eager" stance
        (no compiling and no cached code: the function runs as written)."""
        if not self._disables and _stance.current() == "force_eager":
            return None
        return self.callback()

    def wrap(self, fn: Callable, code: Any = None, module_call: bool = False) -> Callable:
        """`code`: the user code the call enters (a module's forward), when not fn's own;
        `module_call`: fn is a module's `__call__` (its frames are trimmed from tracebacks as
        the compiled module's own `__call__` shows them once)."""
        scope = self
        # fullgraph: the function's own code is traced (and a break raises) even where an
        # optimize() with other settings gave up on it and marked it skip
        top = (code or _code_of(fn)) if self._fullgraph else None

        disables = self._disables
        calls = _CallTimes(getattr(fn, "__qualname__", None) or type(fn).__qualname__)

        @functools.wraps(fn)
        def _pydynamo_wrapper(*args, **kwargs):
            if not disables and _disabled.depth:
                return fn(*args, **kwargs)   # inside disable(): the hook is already off
            if top is not None and _C.get_code_state(top) == "skip":
                _C.set_code_state(top, "default")
            prev = _C.set_eval_frame(scope.hook_setting())
            _disabled.depth += disables
            t0 = scope.perf and time.perf_counter()
            try:
                return fn(*args, **kwargs)
            except BaseException as e:
                # this frame's entry and pydynamo's below it leave the traceback: the bare
                # raise re-raises with e.__traceback__ as trimmed (user_errors.strip_own_frames)
                if not config.verbose:
                    strip_own_frames(e, config.cache_dir, module_call)
                raise
            finally:
                _disabled.depth -= disables
                _C.set_eval_frame(prev)
                if t0:
                    calls.record(time.perf_counter() - t0)

        return _pydynamo_wrapper

    def __call__(self, fn: Callable) -> Callable:
        return _wrap_target(self, fn)

    def __enter__(self):
        stack = self._saved.__dict__.setdefault("stack", [])
        if not self._disables and _disabled.depth:
            stack.append(_UNCHANGED)     # inside disable(): stays off
            return self
        stack.append(_C.set_eval_frame(self.hook_setting()))
        _disabled.depth += self._disables
        return self

    def __exit__(self, *exc_info) -> None:
        if exc_info[1] is not None and not config.verbose:
            # as the wrapper does: the with-statement re-raises it with the trimmed traceback
            strip_own_frames(exc_info[1], config.cache_dir)
        prev = self._saved.stack.pop()
        if prev is not _UNCHANGED:
            _disabled.depth -= self._disables
            _C.set_eval_frame(prev)


class _CallTimes:
    """Per-call wall times of one wrapper, logged on the `perf` channel at calls 1, 10, 100, ...
    (the first call includes compiling; later figures are the median and minimum since the last
    report)."""

    def __init__(self, name: str):
        self.name, self.count, self.times, self.next_report = name, 0, [], 1

    def record(self, seconds: float) -> None:
        self.count += 1
        self.times.append(seconds)
        if self.count < self.next_report:
            return
        if self.count == 1:
            logs.log("perf", "%s: call 1 (compiles): %.1f ms", self.name, seconds * 1e3)
        else:
            times = sorted(self.times)
            logs.log("perf", "%s: calls %d-%d: median %.1f us, min %.1f us per call", self.name,
                     self.count - len(times) + 1, self.count, times[len(times) // 2] * 1e6, times[0] * 1e6)
        self.times = []
        self.next_report *= 10


class _Depth(threading.local):
    depth = 0


_disabled = _Depth()   # per thread: how many disable() scopes are active
_UNCHANGED = object()


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
            # forward is the compile wrapper itself (an instance attribute, no frame of this
            # module's making): a traceback through it shows the frames an eager call shows
            self.forward = scope.wrap(orig.__call__, _code_of(getattr(orig, "forward", None)),
                                      module_call=True)

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
    recompile_limit: Optional[int] = None,
):
    """Compile `fn` (a function or an nn.Module) when it is called; pydynamo's torch.compile.

    `pydynamo.optimize(fn, ...)` returns a wrapper (for a module, an nn.Module sharing its
    parameters); without `fn` it returns a decorator that is also a context manager
    (`@pydynamo.optimize(backend="eager")`, `with pydynamo.optimize():`). Each call traces the
    Python bytecode of `fn` and of what it calls into torch.fx graphs, hands each graph to the
    backend, and caches the result under guards (input dtypes, shapes, globals read, grad mode);
    later calls whose guards pass reuse it, others compile again (a recompile). Every argument
    is checked here, at the call of optimize(), not at the first call of the wrapper.

    backend: "codegen" (default: fused C++/OpenMP kernels on CPU, Triton on CUDA; "inductor" is
        an alias of it, so torch.compile call sites port unchanged — it is pydynamo's code
        generator, not PyTorch's Inductor), "eager" (run each captured graph as is: checks
        capture alone), "aot_eager" (the training path's joint forward/backward graphs, run
        eagerly), "cudagraphs" (CUDA-graph replay of each graph's eager ops on CUDA inputs;
        plain eager execution elsewhere), a name registered with pydynamo.register_backend, or any callable
        `backend(gm, example_inputs) -> callable`. See pydynamo.list_backends(). An unknown
        name raises pydynamo.exc.InvalidBackend (a RuntimeError, like torch.compile's).
    mode: None / "default", "reduce-overhead" (CUDA-graph replay of the compiled calls on GPU),
        "max-autotune" (Triton kernels autotuned over configurations) or
        "max-autotune-no-cudagraphs" (the same; codegen's max-autotune uses no CUDA graphs).
        Another value raises RuntimeError listing these. Only the codegen backend uses it;
        "eager" and "aot_eager" warn that they ignore it.
    options: codegen options (fields of codegen.Options): fuse, backend_kernels ("cpp" or
        "triton"), cudagraphs, max_autotune, cpp_tanh, omp_schedule, vector_width,
        triton_fast_launch, strict, dynamic, mode. An unknown name raises RuntimeError listing
        the known ones (as torch.compile does), a bad value ValueError. Unlike torch.compile,
        mode and options may be given together. A callable backend gets them as keywords.
    fullgraph: True raises pydynamo.exc.FullGraphError (with the user's file:line and a hint)
        where the function would need a graph break, instead of running that part in Python;
        pydynamo.error_on_graph_break(True/False) does the same for a region (and, False,
        allows breaks again in a sub-call when fullgraph is False).
    dynamic: None (default: automatic — a size that changes between calls is recompiled once
        as a symbol), True (every size symbolic from the first call), False (every size
        specialized; each new shape recompiles). pydynamo.mark_dynamic(x, dim) and
        mark_static mark single dimensions.

    recompile_limit: how many compiled entries one function (code object) may have under these
        settings; at the limit it warns once (pydynamo.exc.RecompileLimitWarning, naming the last
        failing guard) and new inputs run eagerly while existing entries keep serving. None
        (default): pydynamo.config.recompile_limit (PYDYNAMO_RECOMPILE_LIMIT, 8), read at each
        miss. torch.compile has the same global limit. pydynamo.set_stance
        changes what a miss does ("eager_on_recompile", "fail_on_recompile") or turns compiled
        code off ("force_eager").

    Training: a graph whose inputs require grad is compiled as a joint forward/backward graph
    (pydynamo/aot), so `loss.backward()` on a compiled model's output runs compiled backward
    kernels; optimizer steps stay in Python unless compiled themselves.

    Graph breaks: code that cannot be put in a graph (print, .item(), a branch on a tensor's
    value, an unsupported library call) runs in Python between graphs; each distinct
    (reason, line) warns once with pydynamo.exc.GraphBreakWarning at the user's line
    (filter it with the warnings module). pydynamo.explain(fn)(*args) reports graphs,
    breaks with reasons and hints, guards and recompiles without warning.
    pydynamo.disable and pydynamo.graph_break() are breaks asked for: they do not warn.

    Logs: PYDYNAMO_LOGS=graph_breaks,recompiles,guards,graph_code,output_code,bytecode,aot,perf
    (or "all") logs those channels to stderr through the `logging` loggers `pydynamo.<channel>`;
    pydynamo.config.logs can be set at run time. Generated code is written to
    pydynamo.config.cache_dir (PYDYNAMO_CACHE_DIR). The user guide is docs/USER_GUIDE.md.
    """
    from pydynamo.backends import check_settings   # (deferred: importing this module stays torch-free)

    check_settings(backend, mode, options, fullgraph, dynamic)
    if recompile_limit is not None and (isinstance(recompile_limit, bool) or not isinstance(recompile_limit, int)
                                        or recompile_limit < 0):
        raise ValueError(f"recompile_limit must be None or an int >= 0, got {recompile_limit!r}")
    kwargs = dict(backend=backend, fullgraph=fullgraph, dynamic=dynamic, mode=mode, options=options,
                  recompile_limit=recompile_limit)
    scope = _CallbackScope(make_kwargs=kwargs)
    if config.warm_start:
        _prepare_warm_start()
    return scope if fn is None else scope(fn)


def _prepare_warm_start() -> None:
    """With the warm cache on, a first call may load its frame from disk instead of tracing it:
    what that load needs is imported and set up here, when optimize() wraps, as torch.compile
    imports its stack when it wraps, not inside the first call (convert_frame and through it
    the warm cache's reading half, guards, codegen's runtime; then warm_cache.prepare).
    Without the warm cache the first call traces, and imports what tracing needs then."""
    if unsupported_python() is not None:
        return      # (the first call runs eagerly and says why)
    from pydynamo import convert_frame     # (deferred: importing this module stays torch-free)
    convert_frame.warm_cache.prepare()


_version_warned = False


def _make_callback(kwargs: dict) -> Any:
    why = unsupported_python()
    if why is not None:  # the bytecode layer does not know this interpreter: run eagerly, say so once
        global _version_warned
        if not _version_warned:
            _version_warned = True
            warnings.warn(why, RuntimeWarning, stacklevel=5)  # wrapper, hook_setting, callback, here
        return False  # run-only: with no cache entries every frame runs as it is
    # Imported at first use: the executor layers are not needed to import or wrap.
    from pydynamo.convert_frame import make_callback

    return make_callback(**kwargs)


def _optimize_with_callback(fn: Optional[Callable], callback: Any):
    """Same wrapper machinery as `optimize`, with an explicit `_C` callback (tests, tools):
    a callable (compile mode), False (run-only) or None (off)."""
    scope = _CallbackScope(callback)
    return scope if fn is None else scope(fn)


def disable(fn: Optional[Callable] = None):
    """Run `fn`, and everything it calls, uncompiled (a decorator; without `fn`, a context manager:
    `with pydynamo.disable(): ...`).

    A compiled function calling a disabled one breaks its graph there, without a warning (the
    break was asked for). Inside a disable scope, compiled wrappers (pydynamo.optimize results)
    run their function uncompiled too: `with pydynamo.disable(): compiled(x)` is eager.
    """
    scope = _CallbackScope(None, disables=True)
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
        _CallbackScope.hook_setting.__code__,
        _make_callback.__code__,
    ]
    for code in codes:
        _C.set_code_state(code, "skip")


_mark_own_code_skipped()

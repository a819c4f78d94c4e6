"""stance: how compiled functions behave right now (`pydynamo.set_stance`, torch.compiler.set_stance).

One process-wide value, `current()`, read where it takes effect:
  * "default": compile on a cache miss, run cached code on a hit.
  * "force_eager": compiled wrappers (and `with optimize():` blocks) run their function as
    written: nothing compiles and no cached code runs (eval_frame turns the hook off for the call).
  * "eager_on_recompile": cached code still runs on a hit; a miss runs the frame eagerly instead
    of compiling it (convert_frame's callback answers "run as is, ask again next time").
  * "fail_on_recompile": cached code still runs on a hit; a miss raises exc.RecompileError naming
    the function and each failing guard (recompiles.explain_recompile).
As in torch.compile, a miss is a "recompile" under the last two even for a frame never compiled
before (warm everything up under "default" first).

`set_stance(...)` sets the stance at once (a plain call), and its result restores the stance that
was in force before it on leaving a `with` block; as a decorator it undoes its own setting and
sets the stance only for each call of the function. It may not be called inside compiled code
(torch.compile forbids it too): the translator breaks the graph at it (it is marked as pydynamo's
own, like `disable`), and the call then raises. "Inside" is read from the thread's hook setting,
so the body of a `with pydynamo.optimize():` block counts as inside too.
`error_on_graph_break(on)` (torch.compile has the same switch) is the other switch here: a
graph break under it raises instead of breaking. Run in Python (around a compiled call, a
decorated function's call) it sets a per-thread value, the start value of every frame compiled
then; inside traced code the translator keeps its own stack of it (executor/variables/strict.py,
on the root translator), and a break records the value in force where it happened
(translator.graph_break_handler), which convert_frame turns into FullGraphError.
A leaf: imports nothing of the project but the C hook (to tell whether a compiled region is active).
"""
from __future__ import annotations

import functools
import threading
from typing import Callable

from pydynamo import _C

STANCES = ("default", "force_eager", "eager_on_recompile", "fail_on_recompile")

_current = "default"


def current() -> str:
    return _current


def _set(stance: str) -> str:
    global _current
    prev, _current = _current, stance
    return prev


class _StanceScope:
    """What set_stance returns: already in force; a context manager and a decorator."""

    def __init__(self, stance: str):
        self.stance = stance
        self.prev = _set(stance)

    def __enter__(self):
        _set(self.stance)
        return self

    def __exit__(self, *exc_info) -> None:
        _set(self.prev)

    def __call__(self, fn: Callable) -> Callable:
        _set(self.prev)   # decorating is not a plain call: the stance applies to fn's calls only
        stance = self.stance

        @functools.wraps(fn)
        def _pydynamo_stance_wrapper(*args, **kwargs):
            _check_outside_compiled_code()
            prev = _set(stance)
            try:
                return fn(*args, **kwargs)
            finally:
                _set(prev)

        _pydynamo_stance_wrapper.__pydynamo_disabled__ = True   # a break, then the check below raises
        return _pydynamo_stance_wrapper

    def __repr__(self) -> str:
        return f"pydynamo.set_stance({self.stance!r})"


def set_stance(stance: str = "default") -> _StanceScope:
    """Set how compiled functions behave (torch.compiler.set_stance): "default",
    "force_eager" (run everything uncompiled, ignoring compiled code), "eager_on_recompile"
    (use compiled code that fits, run eagerly where a call would compile) or "fail_on_recompile"
    (use compiled code that fits, raise pydynamo.exc.RecompileError where a call would compile).

    A plain call sets it for the process; `with pydynamo.set_stance(...):` sets it for the block
    and restores the previous one after; `@pydynamo.set_stance(...)` sets it for each call of the
    decorated function. Calling it inside a compiled function raises RuntimeError.
    """
    if stance not in STANCES:
        raise RuntimeError(f"invalid pydynamo stance {stance!r}; valid: {', '.join(STANCES)}")
    _check_outside_compiled_code()
    return _StanceScope(stance)


set_stance.__pydynamo_disabled__ = True


def _check_outside_compiled_code() -> None:
    """A compile callback set on this thread means we run inside a compiled wrapper's call."""
    cb = _C.get_eval_frame()
    if cb is not None and cb is not False:
        raise RuntimeError("pydynamo.set_stance cannot be called inside a compiled function "
                           "(torch.compiler.set_stance cannot either): set it before the call")


# --- error_on_graph_break ---------------------------------------------------------------------

class _Strict(threading.local):
    on = False


_strict = _Strict()   # per thread: the switch as set by blocks and decorators run in Python


def error_on_graph_break_now() -> bool:
    """The switch where Python code (not traced code) sets it: the start value of each frame
    compiled now."""
    return _strict.on


class _ErrorOnGraphBreak:
    """What error_on_graph_break(on) returns. Run in Python it sets the per-thread switch for a
    block or a decorated call; traced, the translator models it (executor/variables/strict.py)
    and this object is only rebuilt, never entered, so its __exit__ then restores nothing."""

    def __init__(self, on: bool):
        self.on = bool(on)
        self._prev = []

    def __enter__(self):
        self._prev.append(_strict.on)
        _strict.on = self.on
        return self

    def __exit__(self, *exc_info) -> None:
        if self._prev:
            _strict.on = self._prev.pop()

    def __call__(self, fn: Callable) -> Callable:
        on = self.on

        @functools.wraps(fn)
        def _pydynamo_error_on_graph_break_wrapper(*args, **kwargs):
            prev, _strict.on = _strict.on, on
            try:
                return fn(*args, **kwargs)
            finally:
                _strict.on = prev

        _pydynamo_error_on_graph_break_wrapper.__pydynamo_error_on_graph_break__ = on
        return _pydynamo_error_on_graph_break_wrapper

    def __repr__(self) -> str:
        return f"pydynamo.error_on_graph_break({self.on})"


def error_on_graph_break(on: bool) -> _ErrorOnGraphBreak:
    """With `on`, a graph break in compiled code raises pydynamo.exc.FullGraphError instead of
    running that part in Python (fullgraph=True for a region); with False, breaks are allowed
    again (as torch.compile's switch of that name). A context manager or a decorator, usable inside
    compiled code (switch it off for one sub-call) and around compiled calls. fullgraph=True
    cannot be switched off by it (as in torch.compile).
    Limitation: after a graph break taken inside an `error_on_graph_break(False)` block, the rest
    of the frame (its resume function) starts from the switch as set outside compiled code."""
    return _ErrorOnGraphBreak(on)


error_on_graph_break.__pydynamo_error_on_graph_break__ = "factory"

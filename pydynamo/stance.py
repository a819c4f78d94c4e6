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
own, like `disable`), and the call then raises.
A leaf: imports nothing of the project but the C hook (to tell whether a compiled region is active).
"""
from __future__ import annotations

import functools
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

"""Vocabulary of the dynamic-shape corpus: a case is a function (or nn.Module) and a SEQUENCE of
calls whose input sizes change, registered once per compile mode.

Built on tests/compat/compat_case.py (the same `Case`, input specs `t(...)`, `kw`, `under`,
`factory`, normalization and comparison); only the registration differs:
  * `@dyn_case(call1, call2, ...)`: each call is an args tuple (or `kw(...)` / `under(...)`) of
    specs; call 1 is `Case.inputs`, the rest are `Case.changes`, and the runner sets
    compat_case.N_CALLS = 1 so every call of the sequence runs exactly once, in order;
  * the case is registered as `<module>.<name>@<mode>` for each mode in `modes` (MODES below), so
    one process per engine runs every mode and a record is per (function, mode);
  * `marked(spec, dim)`: an input whose dim is marked dynamic with the engine's own mark_dynamic
    (the runner points MARK at torch._dynamo.mark_dynamic or pydynamo.mark_dynamic).
"""
from __future__ import annotations

import dataclasses
import sys
import os
from typing import Optional

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat"))

import compat_case as cc  # noqa: E402
from compat_case import factory, kw, t, under  # noqa: E402,F401  (re-exported for the corpus)


@dataclasses.dataclass(frozen=True)
class Mode:
    dynamic: Optional[bool]   # optimize(dynamic=...) / torch.compile(dynamic=...)
    backend: str              # "eager": the counting backend alone; "codegen": pydynamo's own
                              # codegen behind the counting backend (torch keeps the counting one)


MODES = {"auto": Mode(None, "eager"), "dynamic": Mode(True, "eager"), "codegen": Mode(None, "codegen"),
         "codegen_dynamic": Mode(True, "codegen")}
# codegen: pydynamo's own backend behind the counting one, so CI runs every case through symbolic
# kernels too: after the first size change (automatic dynamic) and from the first call (dynamic=True)
DEFAULT_MODES = ("auto", "dynamic", "codegen", "codegen_dynamic")

# The engine's mark_dynamic(t, dim); None under eager (marking means nothing there).
MARK: list = [None]


def mode_of(name: str) -> Mode:
    return MODES[name.rsplit("@", 1)[1]]


def marked(spec: cc.T, dim: int):
    """A random tensor of `spec` with `dim` marked dynamic by the engine under test."""
    def make(g):
        x = spec.make(g)
        if MARK[0] is not None:
            MARK[0](x, dim)
        return x
    return factory(make)


def _register(fn, make, filename, lineno, calls, modes):
    mod = fn.__module__.rsplit(".", 1)[-1]
    specs = [cc._inputs(c) for c in calls]
    for m in modes:
        assert m in MODES, m
        cc._register(cc.Case(f"{mod}.{fn.__name__}@{m}", make, specs[0], tuple(specs[1:]),
                             filename=filename, lineno=lineno))


def dyn_case(*calls, modes=DEFAULT_MODES):
    """Register a function run over `calls` (at least two, with changing sizes) per mode."""
    assert len(calls) >= 2, "a dynamic case needs a sequence of calls"

    def deco(fn):
        _register(fn, lambda: fn, fn.__code__.co_filename, fn.__code__.co_firstlineno, calls, modes)
        return fn
    return deco


def dyn_module_case(*calls, modes=DEFAULT_MODES):
    """Register an nn.Module class (built with no arguments, eval mode) run over `calls`."""
    assert len(calls) >= 2, "a dynamic case needs a sequence of calls"

    def deco(cls):
        code = cls.forward.__code__
        _register(cls, lambda: cls().eval(), code.co_filename, code.co_firstlineno, calls, modes)
        return cls
    return deco

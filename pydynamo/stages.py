"""The heavy stages of a compile, bound where they are used but imported at their first use.

A process that only runs code compiled by an earlier one (a warm-start hit, pydynamo/warm_cache.py)
needs the frame hook, guards, the warm cache and the compiled code's runtime: not tracing (the
executor, its shape symbols: sympy, about 0.3 s to import), not training (pydynamo.aot), not
lowering (codegen's pipeline). The modules on that path name those stages at their top as

    translator = stages.lazy("pydynamo.executor.translator")    # the tracing stage

and use `translator.InstructionTranslator` where they trace; the module is imported at the first
attribute read (then it is sys.modules' own, one dict lookup a read).

Invariants:
  * A stage is bound lazily only to keep it off the warm path, never to break an import circle:
    the same `import` at the top of the binding module would work (a stage never imports the
    module that binds it, directly or not).
  * A stage is a whole module, read through attributes: no value is copied out of it, so
    monkeypatching the module is seen by every binder.
  * A leaf: imports nothing of the project.
"""
from __future__ import annotations

import importlib
import sys

# the stages a warm hit must not import (tests/cache/test_warm_start.py checks a hit's process)
HEAVY = ("sympy", "pydynamo.executor.translator", "pydynamo.aot", "codegen.pipeline", "pydynamo.bytecode")


class Stage:
    """A module imported on first attribute access (see the module docstring)."""
    __slots__ = ("_name",)

    def __init__(self, name: str):
        object.__setattr__(self, "_name", name)

    def __getattr__(self, attr: str):
        mod = sys.modules.get(self._name)
        if mod is None:
            mod = importlib.import_module(self._name)
        return getattr(mod, attr)

    def __setattr__(self, attr: str, value) -> None:
        raise AttributeError(f"set {attr} on the module {self._name} itself, not on its stage")

    def __repr__(self) -> str:
        return f"<stage {self._name}{'' if self._name in sys.modules else ' (not imported)'}>"


def lazy(name: str) -> Stage:
    """The module `name`, imported when first read (see the module docstring)."""
    return Stage(name)

"""Define-by-run `ops`: loop bodies are Python functions that call `ops.<name>(...)`.

A body never builds an expression tree itself; whichever handler is installed with
`set_handler` decides what a call means: `DepsHandler` records the buffers and indices a body
reads, the C++ printer (codegen/cpp.py) emits one C++ statement per call, a Triton printer can
emit Triton. Values passed between ops are opaque to the body; every handler must accept the
values it itself returned.

Vocabulary (the contract a printer implements):
  load(name, index) / store(name, index, value)   index: sympy expr in loop/size variables
  constant(value, dtype)  index_expr(expr, dtype)  to_dtype(x, dtype)
  scalar(name, dtype)   a runtime float input (codegen/scalars.py, a kernel argument) as
                        `dtype`, converted the way eager converts a Python scalar operand
  indirect_indexing(value, size, check) -> sympy symbol usable inside later indices; a
                        value out of [0, size) after wrapping flags error code `check`
                        (ERR_INDEX / ERR_INDEX_IN_SELF, codegen/runtime.py: which family of op
                        indexed, so the wrapper raises that op's exception even where a kernel
                        fuses several indexing ops; True means ERR_INDEX)
  every pointwise primitive of codegen/primitives.py (PRIMITIVES: name, arity, dtype rule).
Operands of binary ops always share one dtype (lowering inserts casts); comparison and logical
ops return bool.
"""
from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from typing import Any, List, Set, Tuple

import sympy

from codegen.primitives import PRIMITIVES
from codegen.runtime import ERR_INDEX, ERR_INDEX_IN_SELF, ERR_ZERO_DIV  # (the codes a kernel flags)
from pydynamo.symbols import index_symbol


def index_error_code(check) -> int:
    """The code an indirect_indexing(..., check) flags for an out-of-range value."""
    return ERR_INDEX if check is True else int(check)


class _Local(threading.local):
    handler: Any = None


_local = _Local()


@contextlib.contextmanager
def set_handler(handler):
    prev = _local.handler
    _local.handler = handler
    try:
        yield handler
    finally:
        _local.handler = prev


class _OpsProxy:
    """`ops.exp(x)` forwards to the installed handler."""

    def __getattr__(self, name):
        # late-bound: `fn = ops.exp` may be taken at lowering time and called under any handler
        def call(*args, **kwargs):
            h = _local.handler
            if h is None:
                raise RuntimeError("no ops handler installed")
            return getattr(h, name)(*args, **kwargs)
        call.__name__ = name
        return call


ops = _OpsProxy()


class HandlerBase:
    """Routes every primitive name to `self.op(name, *args)`."""

    def __getattr__(self, name):
        if name in PRIMITIVES:
            return lambda *args: self.op(name, *args)
        raise AttributeError(name)

    def op(self, name, *args):
        raise NotImplementedError


@dataclass
class ReadRecord:
    name: str
    index: sympy.Expr


@dataclass
class DepsHandler(HandlerBase):
    """Interprets a body to list what it reads and how big it is (op count)."""
    reads: List[ReadRecord] = field(default_factory=list)
    writes: List[ReadRecord] = field(default_factory=list)
    indirect: int = 0
    checks: int = 0          # ops that can raise at run time (integer division)
    n_ops: int = 0

    def op(self, name, *args):
        self.n_ops += 1
        if PRIMITIVES[name].raises:
            self.checks += 1
        return None

    @property
    def may_raise(self) -> bool:
        return bool(self.indirect or self.checks)

    def load(self, name, index):
        self.reads.append(ReadRecord(name, sympy.sympify(index)))
        return None

    def store(self, name, index, value):
        self.writes.append(ReadRecord(name, sympy.sympify(index)))

    def constant(self, value, dtype):
        return None

    def index_expr(self, expr, dtype):
        return None

    def scalar(self, name, dtype):
        return None

    def to_dtype(self, x, dtype):
        return None

    def indirect_indexing(self, value, size, check=True):
        self.indirect += 1
        return index_symbol(f"i{self.indirect - 1}_dep")

    @property
    def read_names(self) -> Set[str]:
        return {r.name for r in self.reads}


def collect_deps(fn, *args) -> DepsHandler:
    h = DepsHandler()
    with set_handler(h):
        fn(*args)
    return h


@dataclass
class SimpleLoad:
    """Result of `as_single_load`: the body is exactly one load of `name` at `index`."""
    name: str
    index: sympy.Expr


class _SingleLoadProbe:
    """Records the loads of a body; any other op (a primitive, constant, cast...) sets `other`."""

    def __init__(self):
        self.loads: List[Tuple[str, Any]] = []
        self.other = False

    def load(self, name, index):
        self.loads.append((name, sympy.sympify(index)))
        return ("load", len(self.loads) - 1)

    def indirect_indexing(self, value, size, check=True):
        self.other = True
        return index_symbol("i_probe")

    def __getattr__(self, name):
        def other(*args, **kwargs):
            self.other = True
        return other


def as_single_load(loader, index):
    """If `loader(index)` is exactly one load (a pure view of a buffer), describe it."""
    p = _SingleLoadProbe()
    with set_handler(p):
        out = loader(index)
    if p.other or len(p.loads) != 1 or out != ("load", 0):
        return None
    return SimpleLoad(*p.loads[0])


class TreeRecorder(HandlerBase):
    """Records a body's value as a nested tuple, so two bodies (or a body and a pattern) can be
    compared: ("load", name, index), ("const", value, dtype), ("cast", x, dtype),
    ("index", expr, dtype), ("scalar", name, dtype), (primitive name, *operands). A body that
    indexes indirectly records None (its loads depend on values, not only on indices)."""

    def __init__(self):
        self.indirect = False

    def op(self, name, *args):
        return (name,) + args

    def load(self, name, index):
        return ("load", name, sympy.sympify(index))

    def constant(self, value, dtype):
        return ("const", value, dtype)

    def to_dtype(self, x, dtype):
        return ("cast", x, dtype)

    def index_expr(self, expr, dtype):
        return ("index", sympy.sympify(expr), dtype)

    def scalar(self, name, dtype):
        return ("scalar", name, dtype)

    def indirect_indexing(self, value, size, check=True):
        self.indirect = True
        return index_symbol("i_tree")


def record_tree(fn, *args):
    """`fn(*args)`'s value as TreeRecorder's tuple, or None where it indexes indirectly."""
    h = TreeRecorder()
    with set_handler(h):
        out = fn(*args)
    return None if h.indirect else out

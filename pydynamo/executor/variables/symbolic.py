"""SymNodeVariable: a symbolic Python number (a size of a dynamic dim, or arithmetic on sizes).

It holds a `shapes.SymInt` / `SymFloat` / `SymBool` of the frame's ShapeEnv. Arithmetic builds
sympy expressions (no guard); comparisons and branches decide on the hints and record a guard in
the ShapeEnv; bool() used as a value stays a symbolic SymBool (a relation that becomes an FX
comparison node, as torch.compile keeps a SymBool) until something branches on it; int() stays symbolic (`sym_int`, as torch.compile does); anything that needs a real
Python value (a list index, range(), a format string) specializes it to the hint (guarded, so
correct, only less general).

Invariants:
  * Frames without symbolic dims never see one (the concrete path is unchanged).
  * Used as a graph argument, the value becomes FX nodes computed from the graph's int
    placeholders (OutputGraph.sym_node), so the graph is right at every size the guards admit.
  * If it escapes the frame, the output code recomputes it from the inputs' sizes (no graph).
"""
from __future__ import annotations

import operator

from pydynamo import shapes
from pydynamo.exc import Unsupported
from pydynamo.executor.variables import base
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.executor.variables.containers import SizeVariable
from pydynamo.symbols import sympy_str

# Python operators a SymInt implements symbolically (the rest specialize first).
SYM_BINARY = {operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv,
              operator.mod, operator.pow}
SYM_COMPARE = {operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne}


class SymNodeVariable(VariableTracker):
    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value   # shapes.SymInt, shapes.SymFloat or shapes.SymBool

    @staticmethod
    def wrap(value, source=None) -> VariableTracker:
        """A tracker for a Python number that may be symbolic."""
        if isinstance(value, (shapes._SymNumber, shapes.SymBool)):
            return SymNodeVariable(value, source)
        return ConstantVariable(value, source)

    def python_type(self):
        if isinstance(self.value, shapes.SymBool):
            return bool
        return int if isinstance(self.value, shapes.SymInt) else float

    @property
    def expr(self):
        return self.value.expr

    def specialize(self):
        """The hint as a plain number, guarded (the value is pinned for this entry)."""
        if isinstance(self.value, shapes.SymBool):
            return bool(self.value)
        return int(self.value) if isinstance(self.value, shapes.SymInt) else float(self.value)

    def as_python_constant(self):
        # callers that need a real value (indices, ranges, constant folding) get the hint, with
        # an equality guard: correct, less general. A mere probe (is_python_constant) says no.
        if base.PROBING[0]:
            raise Unsupported("not_constant", "a symbolic size")
        return self.specialize()

    def truthy(self, tx):
        return bool(self.value)

    def var_getattr(self, tx, name):
        raise Unsupported("sym_attr", f"attribute {name!r} of a symbolic size")

    def call_method(self, tx, name, args, kwargs):
        fn = getattr(operator, name.strip("_"), None) if name.startswith("__") else None
        if fn in SYM_BINARY or fn in SYM_COMPARE:
            return sym_binary(tx, fn, self, args[0])
        return ConstantVariable(self.specialize()).call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        env = self.value.env
        names = {sym: cg.load_source(src) for sym, src in env.var_to_source.items()}
        text = "(" + sympy_str(env.simplify(self.expr), names) + ")"
        # a float whose expression is integral (`2.0 + n` is `2 + n` to sympy) stays a float
        return f"float{text}" if self.python_type() is float else text

    def __repr__(self):
        return f"SymNodeVariable({self.value!r})"


def sym_number(v):
    """The number a tracker stands for: a SymInt/SymFloat as is, a SymBool decided (guarded),
    a constant's value."""
    if isinstance(v, SymNodeVariable):
        # a SymBool has no arithmetic: a number is needed, so it is decided (guarded)
        return v.specialize() if isinstance(v.value, shapes.SymBool) else v.value
    return v.as_python_constant()


def sym_binary(tx, fn, a, b):
    """`a fn b` where one side is symbolic: arithmetic stays symbolic, comparisons are guarded;
    None when the other side is not a plain number (the caller goes on with its own rules)."""
    for v in (a, b):
        if not (isinstance(v, SymNodeVariable) or
                (isinstance(v, ConstantVariable) and type(v.value) in (int, float, bool))):
            return None
    try:
        if fn not in SYM_BINARY and fn not in SYM_COMPARE:  # bit operations & co: pinned
            return ConstantVariable(fn(a.as_python_constant(), b.as_python_constant()))
        res = fn(sym_number(a), sym_number(b))
    except (ZeroDivisionError, ValueError, TypeError) as e:
        raise Unsupported("constant_raises", f"{fn.__name__} on symbolic sizes raised "
                          f"{type(e).__name__}: {e}") from None
    return SymNodeVariable.wrap(res)


def size_variable(sizes) -> VariableTracker:
    """`x.shape` / `x.size()`: a torch.Size whose items may be symbolic."""
    return SizeVariable([SymNodeVariable.wrap(d) for d in sizes])


SymNodeVariable.SYM_TYPES = (shapes.SymInt, shapes.SymFloat, shapes.SymBool)

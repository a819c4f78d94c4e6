"""Runtime scalars: Python float graph inputs that kernels take as arguments.

A float placeholder (the executor's dynamic float, or any float example input) becomes a real,
non-integer sympy symbol `f0`, `f1`, ... in the IR, bound in the wrapper to the argument
(`f0 = arg1`). Python arithmetic on such floats in the graph (`2 * f + 1`, also mixed with size
symbols) is not folded into a sympy expression (sympy reorders and rounds differently from
Python, op by op): each such node becomes one more symbol, computed by the wrapper with the
node's own Python op on the call's values (`f1 = 2 * f0`), so it is exact as eager.

Kernels read a scalar through `ops.scalar(name, dtype)`: a `double` parameter (C++) or an fp64
scalar (Triton), converted to the compute dtype the way eager converts a wrapped number (an fp32
op rounds the double to fp32 first). Externs receive the wrapper's local, the runtime value.

A scalar symbol is told apart from a size symbol by its assumptions (sizes are integer), never
by its name. Where a float would end up in something a kernel argument cannot represent (a
size, a stride, an index), lowering raises `SpecializeFloats`: compile_fx lowers the graph again
with every float a compile-time constant checked at each call (a new value then runs the graph
eagerly, counted as `float_specialized_graphs` at compile time and `input_mismatch_calls`).
"""
from __future__ import annotations

import math
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List

import sympy

from pydynamo.symbols import float_symbol


class SpecializeFloats(Exception):
    """A runtime float reached a place only a compile-time constant can go (reason)."""


def is_scalar_symbol(s) -> bool:
    """A real symbol not known to be an integer (sizes, loop and index variables are)."""
    return isinstance(s, sympy.Symbol) and s.is_real is True and s.is_integer is not True


def has_scalar(x) -> bool:
    """Whether `x` (a sympy expression, else anything) mentions a runtime scalar symbol."""
    return isinstance(x, sympy.Basic) and any(is_scalar_symbol(s) for s in x.free_symbols)


def scalar_symbols(exprs) -> set:
    out = set()
    for e in exprs:
        if isinstance(e, sympy.Basic):
            out |= {s for s in e.free_symbols if is_scalar_symbol(s)}
    return out


def scalar_name(e) -> str:
    """The parameter a kernel reads for runtime-float expression `e`: only a bare symbol is
    one (arithmetic a lowering did on it in sympy would round unlike eager)."""
    if not is_scalar_symbol(e):
        raise SpecializeFloats(f"expression {e} of a float input in a kernel")
    return e.name


# Python ops printed infix in the wrapper (anything else is called through `_consts`)
_INFIX = {operator.add: "+", operator.sub: "-", operator.mul: "*", operator.truediv: "/",
          operator.floordiv: "//", operator.mod: "%", operator.pow: "**"}
_PREFIX = {operator.neg: "-", operator.pos: "+"}


@dataclass
class ScalarArg:
    symbol: sympy.Symbol
    source: str           # Python the wrapper evaluates once per call, in order
    hint: float           # the value in the example inputs


@dataclass
class RuntimeScalars:
    args: List[ScalarArg] = field(default_factory=list)
    hints: Dict[sympy.Symbol, float] = field(default_factory=dict)
    inputs: Dict[int, sympy.Symbol] = field(default_factory=dict)    # placeholder pos -> symbol
    callables: List[Any] = field(default_factory=list)   # non-infix targets, for the wrapper

    def _new(self, hint: float, source: str) -> sympy.Symbol:
        s = float_symbol(f"f{len(self.args)}")
        self.args.append(ScalarArg(s, source, hint))
        self.hints[s] = hint
        return s

    def input(self, pos: int, value: float) -> sympy.Symbol:
        s = self._new(float(value), f"arg{pos}")
        self.inputs[pos] = s
        return s

    def computed(self, target, args, kwargs, size_hint, py) -> sympy.Symbol:
        """A Python op over runtime scalars (and sizes, constants): computed by the wrapper.
        `size_hint(e)` gives a size expression's example value, `py(e)` its wrapper source."""
        def hint(a):
            if isinstance(a, sympy.Basic) and not a.is_number:
                if a in self.hints:
                    return self.hints[a]
                v = size_hint(a)      # a size, or a true division of sizes (a float)
                return int(v) if v.is_Integer else float(v)
            return a

        def src(a):
            if isinstance(a, sympy.Basic) and not a.is_number:
                if a in self.hints:
                    return a.name
                num, den = sympy.fraction(sympy.together(a))
                return py(a) if den == 1 else f"{py(num)} / {py(den)}"
            if isinstance(a, float) and not math.isfinite(a):
                return f"float({str(a)!r})"
            if isinstance(a, (bool, int, float)):
                return repr(a)
            raise SpecializeFloats(f"operand {type(a).__name__} of a float expression")
        if kwargs:
            raise SpecializeFloats("keyword arguments in a float expression")
        try:
            value = target(*[hint(a) for a in args])
        except Exception as e:       # (f / 0.0 ...): leave the decision to the constant path
            raise SpecializeFloats(f"{getattr(target, '__name__', target)} fails on the "
                                   f"example floats: {e}")
        if type(value) is not float:
            # an int or bool from floats (round, comparisons) may steer sizes or control flow
            raise SpecializeFloats(f"{getattr(target, '__name__', target)} of a float gives "
                                   f"{type(value).__name__}")
        parts = [src(a) for a in args]
        if target in _INFIX and len(parts) == 2:
            source = f"{parts[0]} {_INFIX[target]} {parts[1]}"
        elif target in _PREFIX and len(parts) == 1:
            source = f"{_PREFIX[target]}{parts[0]}"
        else:
            if target not in self.callables:
                self.callables.append(target)
            source = f"_scalar_fns[{self.callables.index(target)}]({', '.join(parts)})"
        return self._new(value, source)

    def hint_of(self, e):
        """A runtime-scalar expression on the example values (for meta-tensor runs)."""
        v = sympy.sympify(e).xreplace({s: sympy.Float(h, 53) for s, h in self.hints.items()})
        return float(v)

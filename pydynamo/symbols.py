"""The symbolic vocabulary shared by the executor's ShapeEnv (pydynamo/shapes.py) and codegen:
symbols, integer functions, and their spellings in Python, C++ and Triton. A leaf (it imports
only sympy): codegen imports it without importing the executor.

Symbols: a sympy Symbol is its name plus its assumptions (same name, other assumptions: another
symbol), so every symbol is made here, by kind: `size_symbol` (a dynamic size `s0`, or a
positive extent: integer, positive), `int_symbol` (a dynamic Python int: integer, any sign),
`float_symbol` (a dynamic Python float, codegen's runtime scalar `f0`: real), `index_symbol`
(a kernel's loop or indirect-index variable `x0`, `r0`, `i0`: integer, non-negative).

`FloorDiv(a, b)` is Python's `a // b`; `ModIdx(a, div, mod)` is `(a // div) % mod` for a >= 0
and div, mod > 0 (the index maps of views). The executor's `%` stays `sympy.Mod`;
`canonical_size` rewrites Mod, floor and ceiling into FloorDiv/ModIdx, the only forms the
index printers and codegen's simplifier (codegen/sizevars.py) know. They print them for
non-negative operands only (sizes and indices), where C's truncating `/` is floor division.

`broadcast` is the broadcasting algorithm of both the executor's shape rules (which decide on the
hints and guard) and codegen's lowerings (which decide on the example sizes and assume).

Printers: `sympy_str` is readable Python text of any expression or relation (guards, logs;
`/` is true division); `pyexpr` (the wrapper), `cexpr` and `TritonExprPrinter` print integer
size/index expressions exactly, and raise their `unsupported` error on anything else.
"""
from __future__ import annotations

import functools
from typing import Optional

import sympy
from sympy.printing.str import StrPrinter


# ---------------------------------------------------------------------------------------------
# Symbols

def size_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, positive=True)


def int_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True)


def float_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, real=True)


@functools.lru_cache(None)
def index_symbol(name: str) -> sympy.Symbol:
    return sympy.Symbol(name, integer=True, nonnegative=True)


def loop_vars(prefix: str, n: int) -> list:
    return [index_symbol(f"{prefix}{i}") for i in range(n)]


# ---------------------------------------------------------------------------------------------
# Integer functions

class FloorDiv(sympy.Function):
    """Python `a // b` on integers (sympy's floor(a/b) prints and simplifies poorly)."""

    nargs = 2
    is_integer = True

    def _eval_is_nonnegative(self):
        a, b = self.args
        return True if a.is_nonnegative and b.is_positive else None

    @classmethod
    def eval(cls, a, b):
        if b == 0:
            raise ZeroDivisionError("integer division by zero in a symbolic size")
        if b == 1:
            return a
        if a == 0:
            return sympy.Integer(0)
        if a.is_Integer and b.is_Integer:
            return sympy.Integer(int(a) // int(b))
        if a == b:
            return sympy.Integer(1)
        q = sympy.cancel(a / b)
        if q.is_integer:
            return q
        # floor(floor(t / m) / n) == floor(t / (m * n)) for positive integers m, n
        if isinstance(a, FloorDiv) and _positive_int(b) and _positive_int(a.args[1]):
            return FloorDiv(a.args[0], a.args[1] * b)
        return None


def _positive_int(e) -> bool:
    return bool(e.is_integer and e.is_positive)


class ModIdx(sympy.Function):
    """(a // div) % mod for a >= 0, div > 0, mod > 0."""
    is_integer = True
    is_nonnegative = True

    @classmethod
    def eval(cls, a, div, mod):
        if mod == 1 or a == 0:
            return sympy.Integer(0)
        if a.is_Integer and div.is_Integer and mod.is_Integer:
            return sympy.Integer((int(a) // int(div)) % int(mod))
        # one base per flat index: (t // m // div) % mod is (t // (m * div)) % mod, so the
        # terms a view chain leaves over a loop variable share their base and recombine
        # (codegen/sizevars.py `_combine_terms`)
        if isinstance(a, FloorDiv) and _positive_int(a.args[1]) and _positive_int(div):
            return ModIdx(a.args[0], a.args[1] * div, mod)
        return None


def canonical_size(e) -> sympy.Expr:
    """A size/stride expression from the executor in the index vocabulary: `Mod` becomes
    `ModIdx`, `floor(p/q)` and `ceiling(p/q)` become `FloorDiv`. Sizes are non-negative, where
    floor division and C/Triton division agree."""
    def fix(x):
        if isinstance(x, sympy.Mod):
            return ModIdx(x.args[0], sympy.Integer(1), x.args[1])
        num, den = sympy.fraction(sympy.together(x.args[0]))
        if not den.is_positive:
            raise NotImplementedError(f"size expression {x}")
        if isinstance(x, sympy.ceiling):
            num = num + den - 1
        return FloorDiv(sympy.expand(num), den)
    return sympy.sympify(e).replace(lambda x: isinstance(x, (sympy.Mod, sympy.floor, sympy.ceiling)), fix)


# ---------------------------------------------------------------------------------------------
# Broadcasting

def broadcast(shapes, is_one, equal, decide_uniform: bool = True) -> Optional[list]:
    """Right-aligned broadcasting of `shapes` (sequences of ints and sympy sizes): the result's
    dims, or None when two dims neither match nor broadcast. The caller decides (and records)
    each symbolic question: `is_one(d)`, does dim `d` broadcast; `equal(a, b)`. Their order
    decides which guards are recorded (so recompile counts): per dim, operands left to right;
    a literal 1 is skipped; while the result is 1 an operand is asked `is_one`, else it becomes
    the result; then an operand must be `equal` to the result, or else `is_one`.
    `decide_uniform=False` (codegen): a dim all operands give the same size is that size,
    nothing asked; the executor asks anyway (is `s0 - 1` 1?), as torch's infer_size guards."""
    ndim = max((len(s) for s in shapes), default=0)
    out = []
    for i in range(ndim):
        dims = [s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0]
        if not decide_uniform and all(d == dims[0] for d in dims):
            out.append(dims[0])
            continue
        result = 1
        for d in dims:
            if d == 1:              # a literal 1 (sympy's == compares structurally)
                continue
            if result == 1:
                if not is_one(d):
                    result = d
            elif not equal(result, d) and not is_one(d):
                return None
        out.append(result)
    return out


# ---------------------------------------------------------------------------------------------
# Readable Python text (guards, logs)

class _GuardPrinter(StrPrinter):
    """Prints with Python operators (==, //, %, min, max) and symbols replaced by source text."""

    def __init__(self, names: dict):
        super().__init__({"order": "none"})
        self._names = names

    def _print_Symbol(self, expr):
        return self._names.get(expr, expr.name)

    def _print_Relational(self, expr):
        op = {"==": "==", "!=": "!=", "<": "<", "<=": "<=", ">": ">", ">=": ">="}[expr.rel_op]
        return f"{self._print(expr.lhs)} {op} {self._print(expr.rhs)}"

    def _print_FloorDiv(self, expr):
        a, b = expr.args
        return f"({self.parenthesize(a, 50)}//{self.parenthesize(b, 50)})"

    def _print_Mod(self, expr):
        a, b = expr.args
        return f"({self.parenthesize(a, 50)} % {self.parenthesize(b, 50)})"

    def _print_Min(self, expr):   # Min -> min(...), Max -> max(...)
        return f"{type(expr).__name__.lower()}({', '.join(self._print(a) for a in expr.args)})"

    _print_Max = _print_Min

    def _print_Not(self, expr):
        return f"not ({self._print(expr.args[0])})"

    def _print_And(self, expr):   # And -> (a) and (b), Or -> (a) or (b)
        return f" {type(expr).__name__.lower()} ".join(f"({self._print(a)})" for a in expr.args)

    _print_Or = _print_And

    def _print_BooleanTrue(self, expr):
        return "True"

    def _print_BooleanFalse(self, expr):
        return "False"


def sympy_str(expr, names=None) -> str:
    """Python-syntax text of a size expression or relation."""
    return _GuardPrinter(names or {}).doprint(expr)


# ---------------------------------------------------------------------------------------------
# Integer size/index expressions as Python, C++ and Triton source

class IndexPrinter:
    """The common form: fully parenthesized, sums in sympy's sort order, symbols by name.
    A language sets its floor-division operator, min/max spelling and integer literals."""

    floordiv = "//"
    max_fn, min_fn = "max", "min"

    def __init__(self, unsupported=NotImplementedError):
        self.unsupported = unsupported

    def __call__(self, expr) -> str:
        return self.p(sympy.sympify(expr))

    def integer(self, n: int) -> str:
        return str(n)

    def minmax(self, fn: str, args) -> str:
        out = self.p(args[0])
        for a in args[1:]:
            out = f"{fn}({out}, {self.p(a)})"
        return out

    def other(self, e) -> str:
        raise self.unsupported(f"cannot print index expression {e!r}")

    def p(self, e) -> str:
        if e.is_Integer:
            return self.integer(int(e))
        if isinstance(e, sympy.Symbol):
            return e.name
        if isinstance(e, FloorDiv):
            return f"({self.p(e.args[0])} {self.floordiv} {self.p(e.args[1])})"
        if isinstance(e, ModIdx):
            a, d, m = e.args
            inner = self.p(a) if d == 1 else f"({self.p(a)} {self.floordiv} {self.p(d)})"
            return f"({inner} % {self.p(m)})"
        if isinstance(e, sympy.Add):
            return "(" + " + ".join(self.p(a) for a in sorted(e.args, key=sympy.default_sort_key)) + ")"
        if isinstance(e, sympy.Mul):
            return "(" + " * ".join(self.p(a) for a in e.args) + ")"
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return "(" + " * ".join([self.p(e.base)] * int(e.exp)) + ")"
        if isinstance(e, (sympy.Max, sympy.Min)):
            return self.minmax(self.max_fn if isinstance(e, sympy.Max) else self.min_fn, e.args)
        return self.other(e)


class PyExprPrinter(IndexPrinter):
    """Size expressions as Python source for the wrapper (size symbols are its locals); it also
    takes the executor's forms (Mod, floor, ceiling, a rational coefficient)."""

    def minmax(self, fn, args):
        return f"{fn}({', '.join(self.p(a) for a in args)})"

    def p(self, e) -> str:
        if isinstance(e, sympy.Mod):
            return f"({self.p(e.args[0])} % {self.p(e.args[1])})"
        if isinstance(e, sympy.Mul):
            coeff, rest = e.as_coeff_Mul()
            if coeff.is_Rational and not coeff.is_Integer:   # (p/q)*x: exact only as (p*x)//q
                num, den = sympy.fraction(e)
                return f"({self.p(num)} // {self.p(den)})"
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            return self.p(canonical_size(e))
        return super().p(e)

    def other(self, e):
        raise self.unsupported(f"cannot print size expression {e!r}")


class CExprPrinter(IndexPrinter):
    """Index expressions as C++ int64 arithmetic."""

    floordiv = "/"
    max_fn, min_fn = "std::max<int64_t>", "std::min<int64_t>"

    def integer(self, n):
        return f"{n}L" if abs(n) > 2**31 - 1 else str(n)


class TritonExprPrinter(IndexPrinter):
    """Index expressions (non-negative) as Triton integer arithmetic."""

    max_fn, min_fn = "tl.maximum", "tl.minimum"


pyexpr = PyExprPrinter()
cexpr = CExprPrinter()

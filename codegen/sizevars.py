"""Sympy index arithmetic for the loop IR.

Every size, stride and index in codegen is a sympy expression over the symbols of
pydynamo/symbols.py: loop and indirect-index variables (x0.., r0.., i0..: non-negative) and size
variables (s0..: positive). Index maps of views use its `FloorDiv` and `ModIdx`
(= (a // div) % mod), on non-negative operands, which is what loop indices are. `simplify_index`
folds the div/mod patterns that reshapes of contiguous data produce back into plain affine
expressions, using the loop ranges it is given; anything it cannot prove it leaves alone (still
correct, only slower).
"""
from __future__ import annotations

from typing import Dict, Iterable, Sequence

import sympy

from pydynamo.symbols import FloorDiv, ModIdx


def _is_int_poly(e) -> bool:
    e = sympy.sympify(e)
    if e.is_Integer:
        return True
    if e.is_Rational:
        return False
    for t in sympy.Add.make_args(e):
        coeff, _ = t.as_coeff_Mul()
        if not coeff.is_Integer:
            return False
        if any(isinstance(f, sympy.Pow) and f.exp < 0 for f in sympy.Mul.make_args(t)):
            return False
    return True


def product(xs: Iterable) -> sympy.Expr:
    out = sympy.Integer(1)
    for x in xs:
        out = out * x
    return out


def contiguous_strides(size: Sequence) -> list:
    strides, acc = [], sympy.Integer(1)
    for s in reversed(list(size)):
        strides.append(acc)
        acc = acc * s
    return list(reversed(strides))


def flat_index(index: Sequence, strides: Sequence, offset=0) -> sympy.Expr:
    return sympy.Add(sympy.sympify(offset), *[i * s for i, s in zip(index, strides)])


def decompose(vars_, ranges, flat) -> dict:
    """Each loop variable over `ranges` (row-major) as a function of one flat index `flat`
    (0 <= flat < product(ranges)): how the Triton printer iterates, and the form in which the
    scheduler proves a fused read is the element its own lane stored."""
    out = {}
    for v, size, st in zip(vars_, ranges, contiguous_strides(ranges)):
        out[v] = ModIdx(flat, st, size) if size != 1 else sympy.Integer(0)
    return out


def static_int(e):
    """The int value of `e` if it is a constant, else None."""
    e = sympy.sympify(e)
    return int(e) if e.is_Integer else None


def upper_bound(expr, ranges: Dict[sympy.Symbol, sympy.Expr]):
    """An upper bound (exclusive) of a non-negative affine expression, or None if unknown."""
    expr = sympy.expand(expr)
    total = sympy.Integer(1)
    for t in sympy.Add.make_args(expr):
        coeff, rest = t.as_coeff_Mul()
        if rest == 1:
            total += coeff
            continue
        # c * v, or c * v * (a size: non-negative, free of loop variables)
        factors = sympy.Mul.make_args(rest)
        var = [f for f in factors if f in ranges]
        scale = sympy.Mul(*[f for f in factors if f not in ranges])
        if len(var) != 1 or coeff < 0 or scale.free_symbols & set(ranges) or \
                not scale.is_nonnegative:
            return None
        total += coeff * scale * (ranges[var[0]] - 1)
    return total


def is_zero(e) -> bool:
    """Cheap exact test (expand, no sympy.simplify: that is slow and imports half of sympy)."""
    e = sympy.sympify(e)
    return e == 0 or sympy.expand(e) == 0


def equals(a, b) -> bool:
    return a == b or is_zero(sympy.sympify(a) - sympy.sympify(b))


def _provably_le(a, b) -> bool:
    a, b = sympy.sympify(a), sympy.sympify(b)
    if sympy.expand(b - a).is_nonnegative:
        return True
    # a // k <= a / k: where `a` grows with each FloorDiv in it (every term holding one has a
    # positive coefficient; sizes are positive), a bound with them relaxed bounds `a` too
    # (2 * (s0 // 2) <= s0: an unflatten of a symbolic size)
    divs = {f for f in sympy.expand(a).atoms(FloorDiv)}
    if not divs or any(t.atoms(FloorDiv) and t.as_coeff_Mul()[0] <= 0
                       for t in sympy.Add.make_args(sympy.expand(a))):
        return False
    relaxed = a.xreplace({f: f.args[0] / f.args[1] for f in divs})
    return bool(sympy.expand(b - relaxed).is_nonnegative)


def simplify_index(expr, ranges: Dict[sympy.Symbol, sympy.Expr]) -> sympy.Expr:
    """Fold FloorDiv / ModIdx patterns given loop-variable ranges (exclusive upper bounds)."""
    expr = sympy.expand(sympy.sympify(expr))
    for _ in range(8):
        new = _simplify_once(expr, ranges)
        if new == expr:
            break
        expr = new
    return expr


def _simplify_once(expr, ranges):
    # Innermost first.
    def rewrite(e):
        if isinstance(e, ModIdx):
            a, d, m = (simplify_index(x, ranges) for x in e.args)
            ub = upper_bound(a, ranges)
            if ub is not None and _provably_le(ub, d):
                return sympy.Integer(0)
            if ub is not None and _provably_le(ub, d * m):
                return FloorDiv(a, d)
            return ModIdx(a, d, m)
        if isinstance(e, FloorDiv):
            a, d = (simplify_index(x, ranges) for x in e.args)
            ub = upper_bound(a, ranges)
            if ub is not None and _provably_le(ub, d):
                return sympy.Integer(0)
            return FloorDiv(a, d)
        return None

    def rewritten(e):
        r = rewrite(e)
        return e if r is None else r     # (a fold to 0 is falsy: `rewrite(e) or e` lost it)
    expr = expr.replace(lambda e: isinstance(e, (ModIdx, FloorDiv)), rewritten)
    expr = sympy.expand(expr)
    return _combine_terms(expr)


def _as_modidx(t):
    """term -> (coeff, base, div, mod or None) when t is c*ModIdx(...) or c*FloorDiv(...) or c*x."""
    coeff, rest = t.as_coeff_Mul()
    # symbolic coefficients: split factors
    factors = sympy.Mul.make_args(rest)
    core = [f for f in factors if isinstance(f, (ModIdx, FloorDiv))]
    if len(core) != 1:
        return None
    c = coeff * sympy.Mul(*[f for f in factors if f is not core[0]])
    f = core[0]
    if isinstance(f, ModIdx):
        return c, f.args[0], f.args[1], f.args[2]
    return c, f.args[0], f.args[1], None


def _combine_terms(expr):
    """c*ModIdx(a,d,m) + c*m*ModIdx(a,d*m,m2) -> c*ModIdx(a,d,m*m2); FloorDiv is mod=None.

    Also c*ModIdx(a,1,m)/FloorDiv parts that sum to c*a collapse to c*a.
    """
    terms = list(sympy.Add.make_args(expr))
    changed = True
    while changed:
        changed = False
        parsed = [_as_modidx(t) for t in terms]
        for i, pi in enumerate(parsed):
            if pi is None:
                continue
            for j, pj in enumerate(parsed):
                if i == j or pj is None:
                    continue
                ci, ai, di, mi = pi
                cj, aj, dj, mj = pj
                if ai != aj or mi is None:
                    continue
                if not is_zero(dj - di * mi) or not is_zero(cj - ci * mi):
                    continue
                if mj is None:
                    new = ci * FloorDiv(ai, di)
                else:
                    new = ci * ModIdx(ai, di, mi * mj)
                terms = [t for k, t in enumerate(terms) if k not in (i, j)] + [new]
                changed = True
                break
            if changed:
                break
    return sympy.Add(*terms)

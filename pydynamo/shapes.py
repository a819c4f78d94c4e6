"""Symbolic sizes on sympy: the ShapeEnv, SymInt values, shape guards, and dynamic-dim policy.

A `ShapeEnv` lives for one translation. It hands out sympy symbols (`s0`, `s1`, ...) for dynamic
sizes, each with its hint (the value seen now) and the source it was read from; evaluates every
Python decision on a symbolic value on the hints; and records that decision as a guard (a sympy
relation) so the compiled code is only reused where the decision would come out the same.

Invariants:
- Sizes 0 and 1 are never symbolic (they change broadcasting and contiguity); a dynamic size
  gets the range [2, oo), and those lower bounds are guards too.
- Duck shaping: equal hints share one symbol; every further source of a symbol is guarded equal
  to the first (`L['x'].size()[0] == L['y'].size()[1]`). As in torch.compile, only sizes made
  dynamic by dynamic=True are duck-shaped: automatic dynamic and mark_dynamic give each dim its
  own symbol, and a dynamic int argument gets a symbol of any sign (no 0/1 pinning, no range).
- A guard `Eq(symbol, value)` is also a replacement: later expressions are simplified with it,
  so a specialized symbol never appears in a graph again. Specializing a dim that the user marked
  dynamic raises `ConstraintViolation` naming the user line that did it.
- Every guard is true on the hints by construction; a guard that the known ranges already decide
  is not recorded. `make_check_fn()` reads each source once and checks all guards in plain Python.

Wiring (what the executor does with this module):
  env = ShapeEnv(origin_fn=lambda: "file.py:LINE of the instruction being traced")
  input tensor t from source src:
      dims = dynamic_dims(t, dynamic=<optimize's dynamic>,
                          changed_dims=auto.observe(src.name(), t.shape))   (at compile time)
      shape, stride, offset = env.create_tensor_sizes(t, src, dims, marked_dims=marked_dynamic_dims(t))
      meta.TensorMeta.from_tensor(t, shape=shape, stride=stride, storage_offset=offset)
  torch calls: meta.propagate(target, args, kwargs, env); sizes come back as SymInt.
  builtins: min/max -> sym_min/sym_max, int() -> sym_int (no guard, as torch.compile does);
      comparisons, bool(), range() and indexing just work (guarded / specialized).
  graph: one int placeholder per symbol, made on first use (OutputGraph.sym_input), reloaded
      from env.var_to_source[sym]; node metadata holds sympy shapes.
  guards: env.make_check_fn() is one SHAPE_ENV guard; env.guard_texts() / produce_guards() for
      logs and explain; env.explain_failure(L, G) lists what failed. Tensor guards must skip
      symbolic sizes/strides (entries that are not ints): these guards cover them.
"""
from __future__ import annotations

import collections
import dataclasses
import math
import operator
from typing import Any, Callable, Iterable, Optional

import sympy

from pydynamo.exc import PydynamoError
from pydynamo.sources import Source
from pydynamo.symbols import FloorDiv, float_symbol, int_symbol, size_symbol, sympy_str


def _sym(x) -> sympy.Expr:
    if isinstance(x, _SymNumber):
        return x.expr
    if isinstance(x, bool):
        return sympy.Integer(int(x))
    if isinstance(x, int):
        return sympy.Integer(x)
    if isinstance(x, float):
        if not math.isfinite(x):
            raise ValueError("non-finite float in a symbolic expression")
        return sympy.Rational(x)  # exact: a float is a binary fraction
    if isinstance(x, sympy.Basic):
        return x
    return sympy.Integer(operator.index(x))


def _py_number(e):
    return int(e) if e.is_Integer else float(e)


def _integral(rel):
    """A relation with rational coefficients or positive denominators (`s0/2 < 13/2`,
    `s0/s1 >= 3`) rewritten over integers (`s0 < 13`, `s0 >= 3*s1`), so guards are exact in
    Python and single-symbol bounds are recognized."""
    if not isinstance(rel, sympy.core.relational.Relational):
        return rel
    diff = rel.lhs - rel.rhs
    if not diff.has(sympy.Rational) and not any(p.exp.is_negative for p in diff.atoms(sympy.Pow)):
        return rel
    if all(a.is_Integer for a in diff.atoms(sympy.Rational)) and \
            not any(p.exp.is_negative for p in diff.atoms(sympy.Pow)):
        return rel
    num, den = sympy.fraction(sympy.together(diff))
    if not den.is_positive:
        return rel
    num = sympy.expand(num)
    const = num.as_coeff_Add()[0]
    return type(rel)(num - const, -const)


def _constant_right(rel):
    """`s0 - 2 != 0` (bool() of a size expression) as `s0 != 2`, as torch prints it."""
    if not isinstance(rel, sympy.core.relational.Relational) or rel.rhs != 0 or not rel.lhs.is_Add:
        return rel
    const, rest = rel.lhs.as_coeff_Add()
    return type(rel)(rest, -const) if const != 0 else rel


def _pyint(e):
    """sympy constant → Python int; anything else unchanged."""
    if isinstance(e, sympy.Basic) and e.is_Integer:
        return int(e)
    return e


# ---------------------------------------------------------------------------------------------
# Records


class TextSource:
    """A source given by its guard text (`L['n']`), for tests and callers without Source objects."""

    def __init__(self, text: str):
        self.text = text

    def name(self) -> str:
        return self.text

    def __repr__(self):
        return self.text


@dataclasses.dataclass(frozen=True)
class TensorPropertySource(Source):
    """`src.size()[dim]` / `src.stride()[dim]` of a tensor source, named as torch names it
    (`L['x'].size()[0]`); a pydynamo.sources.Source, so guards and reload code render it."""

    src: Any    # the tensor's Source (anything with name() works for naming)
    prop: str   # "size" or "stride"
    dim: int

    @property
    def base(self):
        return self.src if isinstance(self.src, Source) else None

    def render(self, local, glob, fast):
        inner = self.src.render(local, glob, fast) if isinstance(self.src, Source) else self.src.name()
        return f"{inner}.{self.prop}()[{self.dim}]"


def size_source(tensor_source, dim: int) -> TensorPropertySource:
    return TensorPropertySource(tensor_source, "size", dim)


def stride_source(tensor_source, dim: int) -> TensorPropertySource:
    return TensorPropertySource(tensor_source, "stride", dim)


def _source_code(source) -> str:
    guard_expr = getattr(source, "guard_expr", None)
    return guard_expr() if guard_expr is not None else source.name()


@dataclasses.dataclass(frozen=True)
class ShapeGuard:
    """One recorded relation among symbols, true on the hints when it was recorded."""

    expr: sympy.Basic
    origin: Optional[str] = None   # user "file:line" that made the decision
    replaced: Optional[sympy.Symbol] = None  # an Eq guard that became a replacement of this symbol


@dataclasses.dataclass(frozen=True)
class SourceEquality:
    """`source` reads the value `expr` (in symbols): a duck-shaped size (`expr` is the symbol
    first read elsewhere) or a dense tensor's stride (`L['y'].stride()[0] == L['y'].size()[1]`)."""

    source: Any
    expr: sympy.Expr


class ConstraintViolation(PydynamoError):
    """A dim marked dynamic (mark_dynamic) had to be specialized."""


@dataclasses.dataclass
class _Range:
    lo: Any        # int or -oo
    hi: Any        # int or oo
    lo_guarded: bool = False   # lo comes from a recorded guard (not just "sizes are >= 2")
    origin: Optional[str] = None   # user line of the guard that last tightened the range


# ---------------------------------------------------------------------------------------------
# The environment


class ShapeEnv:
    def __init__(self, *, duck_shape: bool = True, specialize_zero_one: bool = True,
                 origin_fn: Optional[Callable[[], Optional[str]]] = None):
        self.duck_shape = duck_shape
        self.specialize_zero_one = specialize_zero_one
        # the executor sets this to report the user file:line being traced
        self.origin_fn = origin_fn
        self.var_to_hint: dict = {}            # Symbol → sympy.Integer
        self.var_to_source: dict = {}          # Symbol → first source
        self.hint_to_var: dict = {}            # int → Symbol (duck shaping)
        self.source_equalities: list = []      # SourceEquality
        self.replacements: dict = {}           # Symbol → Expr (from Eq guards)
        self.ranges: dict = {}                 # Symbol → _Range
        self.marked_dynamic: set = set()       # symbols the user asked to keep dynamic
        self.guards: list = []                 # ShapeGuard, in recording order
        self._guard_set: set = set()
        self.stats: collections.Counter = collections.Counter()
        self.specialized_ops: collections.Counter = collections.Counter()

    # -- symbols -------------------------------------------------------------------------------
    def create_symbol(self, hint: int, source, *, positive: bool = True, duck: Optional[bool] = None,
                      marked_dynamic: bool = False):
        """A symbol for a dynamic size read from `source` (anything with .name()). Returns an int
        for sizes 0/1 (specialized), else a sympy expression (a symbol, or the expression an
        earlier symbol of the same hint was replaced by)."""
        hint = operator.index(hint)
        if self.specialize_zero_one and hint in (0, 1) and positive:
            if marked_dynamic:
                raise ConstraintViolation(
                    f"{source.name()} was marked dynamic but has size {hint}; sizes 0 and 1 are "
                    f"always specialized. Use an example input with a size of at least 2.")
            return hint
        # a dim the user marked dynamic gets a symbol of its own (no duck sharing), as in torch:
        # equal example sizes must not tie it to another dim
        duck = (self.duck_shape and not marked_dynamic) if duck is None else duck
        if duck and positive and hint in self.hint_to_var:
            sym = self.hint_to_var[hint]
            self.source_equalities.append(SourceEquality(source, sym))
            if marked_dynamic:
                self.marked_dynamic.add(sym)
            return _pyint(self.simplify(sym))
        name = f"s{len(self.var_to_hint)}"
        sym = size_symbol(name) if positive else int_symbol(name)
        self.var_to_hint[sym] = sympy.Integer(hint)
        self.var_to_source[sym] = source
        self.ranges[sym] = _Range(2 if positive and self.specialize_zero_one else (1 if positive else -sympy.oo),
                                  sympy.oo)
        if duck and positive:
            self.hint_to_var[hint] = sym
        if marked_dynamic:
            self.marked_dynamic.add(sym)
        return sym

    def create_symint(self, hint: int, source, **kw):
        """Like create_symbol, wrapped as an executor value (SymInt, or int when specialized)."""
        return self.symint(self.create_symbol(hint, source, **kw))

    def create_symfloat(self, hint: float, source):
        """A real symbol for a dynamic Python float argument (automatic dynamic or dynamic=True),
        wrapped as a SymFloat. Its hint is the float's exact binary fraction; it has no range
        (integer range reasoning never applies to it)."""
        sym = float_symbol(f"s{len(self.var_to_hint)}")
        self.var_to_hint[sym] = sympy.Rational(hint)
        self.var_to_source[sym] = source
        return SymFloat(sym, self)

    def symint(self, expr):
        expr = self.simplify(_sym(expr))
        return int(expr) if expr.is_Integer else SymInt(expr, self)

    def symfloat(self, expr, py: Optional[float] = None):
        """`py`: the value Python computes for it (rounded op by op), when it differs from the
        exact hint: a float argument's arithmetic."""
        expr = self.simplify(_sym(expr))
        if expr.is_number:
            return py if py is not None else float(expr)
        return SymFloat(expr, self, py)

    def create_tensor_sizes(self, tensor, source, dynamic_dims: Iterable[int],
                            marked_dims: Iterable[int] = (), size_source_fn=None, duck: Optional[bool] = None):
        """Symbolic (shape, stride, storage_offset) for a real tensor whose `dynamic_dims` are
        dynamic. Strides of a dense tensor are derived from the symbolic sizes (and guarded
        equal to them); other strides >= 2 become symbols read from `x.stride()[i]`. The storage
        offset stays concrete. `duck=False`: the sizes get symbols of their own (automatic
        dynamic does not duck-shape, as in torch.compile)."""
        size_source_fn = size_source_fn or size_source
        dynamic_dims, marked_dims = set(dynamic_dims), set(marked_dims)
        shape = []
        for i, d in enumerate(tensor.shape):
            if i in dynamic_dims or i in marked_dims:
                shape.append(_pyint(self.create_symbol(d, size_source_fn(source, i), duck=duck,
                                                       marked_dynamic=i in marked_dims)))
            else:
                shape.append(int(d))
        shape = tuple(shape)
        stride = tuple(tensor.stride())
        if any(isinstance(d, sympy.Basic) for d in shape):
            dense = dense_strides_like(shape, tuple(tensor.shape), stride)
            if dense is not None:
                stride = dense
                for i, st in enumerate(stride):
                    if isinstance(st, sympy.Basic) and not st.is_number:
                        # the tensor guard cannot pin a symbolic stride; this equality does
                        self.source_equalities.append(SourceEquality(stride_source(source, i), st))
            else:
                # a strided view (x[:, ::2], a column): strides read as symbols of their own
                # (duck-shaped like sizes, so a stride equal to a size shares its symbol)
                stride = tuple(_pyint(self.create_symbol(st, stride_source(source, i)))
                               for i, st in enumerate(stride))
        return shape, stride, tensor.storage_offset()

    # -- values --------------------------------------------------------------------------------
    def size_hint(self, expr) -> int:
        return int(self.value_hint(expr))

    def value_hint(self, expr) -> sympy.Expr:
        """The exact (sympy Integer or Rational) value of an expression on the hints."""
        expr = _sym(expr)
        if expr.is_number:
            return expr
        val = expr.xreplace(self.var_to_hint)
        if not val.is_number:
            val = sympy.simplify(val)
        if not val.is_number:
            raise ValueError(f"no hint for {expr} (unknown symbols {val.free_symbols})")
        return val

    def simplify(self, expr):
        expr = _sym(expr)
        if self.replacements and not expr.is_number:
            expr = expr.xreplace(self.replacements)
        return expr

    def source_names(self, code: bool = False) -> dict:
        name = _source_code if code else (lambda s: s.name())
        return {sym: name(src) for sym, src in self.var_to_source.items()}

    # -- decisions -----------------------------------------------------------------------------
    def evaluate(self, rel, origin: Optional[str] = None) -> bool:
        """Decide a relation on the hints, record the decision as a guard, return it."""
        rel = _constant_right(_integral(self.simplify(rel)))
        if rel is sympy.true or rel is sympy.false:
            return bool(rel)
        static = self._static_eval(rel)
        if static is not None:
            return static
        value = bool(rel.xreplace(self.var_to_hint))
        guard = rel if value else _negate(rel)
        self._record(guard, origin)
        return value

    def specialize(self, expr, reason: str = "", origin: Optional[str] = None):
        """Pin a symbolic value to its hint (guarded); returns the int (a float for a
        non-integer rational value)."""
        expr = self.simplify(_sym(expr))
        if expr.is_number:
            return _py_number(expr)
        value = self.value_hint(expr)
        self.stats["specializations"] += 1
        if reason:
            self.stats[f"specialized: {reason}"] += 1
        self.evaluate(sympy.Eq(expr, value), origin)
        return _py_number(value)

    def count_specialized_op(self, op_name: str) -> None:
        self.specialized_ops[op_name] += 1
        self.stats["specialized_ops"] += 1

    def _origin(self, origin):
        if origin is None and self.origin_fn is not None:
            try:
                origin = self.origin_fn()
            except Exception:  # an origin is a nicety; never fail a guard for it
                origin = None
        return origin

    def _record(self, guard, origin) -> None:
        origin = self._origin(origin)
        replaced = self._add_replacement(guard, origin) if isinstance(guard, sympy.Eq) else None
        if guard not in self._guard_set:
            self._guard_set.add(guard)
            self.guards.append(ShapeGuard(guard, origin, replaced))
        self._update_range(guard, origin)

    def _add_replacement(self, eq, origin) -> Optional[sympy.Symbol]:
        diff = sympy.expand(eq.lhs - eq.rhs)
        # solve for the newest symbol with coefficient ±1 so older names survive
        for sym in sorted(diff.free_symbols, key=_sym_index, reverse=True):
            if sym not in self.var_to_hint:
                continue
            coeff = diff.coeff(sym)
            if coeff not in (1, -1) or (diff - coeff * sym).has(sym):
                continue
            solution = sympy.expand(-(diff - coeff * sym) / coeff)
            if solution.is_number and sym in self.marked_dynamic:
                src = self.var_to_source[sym].name()
                where = f" at {origin}" if origin else ""
                raise ConstraintViolation(
                    f"{src} was marked dynamic, but the code{where} specialized it to "
                    f"{solution} ({sympy_str(eq, self.source_names())}). Remove mark_dynamic for "
                    f"this dim or change the code so it does not depend on the exact size.")
            self.replacements = {k: v.xreplace({sym: solution}) for k, v in self.replacements.items()}
            self.replacements[sym] = solution
            if solution.is_number:
                self.stats["specialized_symbols"] += 1
            return sym
        return None

    def _update_range(self, guard, origin=None) -> None:
        bound = _single_symbol_bound(guard)
        if bound is None:
            return
        sym, lo, hi = bound
        r = self.ranges.get(sym)
        if r is None:
            return
        if lo is not None and lo > r.lo:
            r.lo, r.lo_guarded, r.origin = lo, True, origin or r.origin
        if hi is not None and hi < r.hi:
            r.hi, r.origin = hi, origin or r.origin

    def _static_eval(self, rel) -> Optional[bool]:
        """Decide `rel` from symbol ranges alone, for linear and monotone product forms."""
        if not isinstance(rel, sympy.core.relational.Relational):
            return None
        diff = sympy.expand(rel.lhs - rel.rhs)
        lo, hi = self._bounds(diff)
        if lo is None:
            return None
        op = rel.rel_op
        if op == ">":
            return True if lo > 0 else (False if hi <= 0 else None)
        if op == ">=":
            return True if lo >= 0 else (False if hi < 0 else None)
        if op == "<":
            return True if hi < 0 else (False if lo >= 0 else None)
        if op == "<=":
            return True if hi <= 0 else (False if lo > 0 else None)
        if op == "==":
            return False if (lo > 0 or hi < 0) else (True if lo == hi == 0 else None)
        if op == "!=":
            return True if (lo > 0 or hi < 0) else (False if lo == hi == 0 else None)
        return None

    def _bounds(self, expr):
        """(lo, hi) of a sum of c*monomial terms over symbol ranges, or (None, None)."""
        lo = hi = sympy.Integer(0)
        for term, coeff in expr.as_coefficients_dict().items():
            if term == 1:
                tlo = thi = sympy.Integer(1)
            else:
                tlo, thi = self._monomial_bounds(term)
                if tlo is None:
                    return None, None
            if coeff >= 0:
                lo, hi = lo + coeff * tlo, hi + coeff * thi
            else:
                lo, hi = lo + coeff * thi, hi + coeff * tlo
        if lo is sympy.nan or hi is sympy.nan:
            return None, None
        return lo, hi

    def _monomial_bounds(self, term):
        lo = hi = sympy.Integer(1)
        for base, exp in term.as_powers_dict().items():
            r = self.ranges.get(base)
            if r is None or not (isinstance(exp, sympy.Integer) and exp > 0) or r.lo < 0:
                return None, None
            lo, hi = lo * r.lo ** exp, hi * r.hi ** exp
        return lo, hi

    # -- guards out ----------------------------------------------------------------------------
    def produce_guards(self) -> list:
        """The final guards, in checking order: duck-shaping source equalities, then recorded
        relations (simplified; single-symbol bounds are folded into ranges), then one range
        guard per live symbol (`2 <= s`, `8 <= s <= 20`), as torch prints them. Items are
        `_GuardOut(expr, text, origin)` where text names sources."""
        out = []
        names = self.source_names()
        for eq in self.source_equalities:
            target = self.simplify(eq.expr)
            out.append(_GuardOut(None, f"{eq.source.name()} == {sympy_str(target, names)}", None,
                                 eq.source, target))
        seen: set = set()
        for g in self.guards:
            if g.replaced is not None:
                # the guard that removed a symbol: keep the symbol, show what it became
                expr = sympy.Eq(g.replaced, self.simplify(g.replaced), evaluate=False)
            else:
                expr = self.simplify(g.expr)
                if expr is sympy.true or _single_symbol_bound(expr) is not None:
                    continue
            if expr in seen:
                continue
            seen.add(expr)
            out.append(_GuardOut(expr, sympy_str(expr, names), g.origin))
        for sym, r in self.ranges.items():
            if sym in self.replacements:
                out.extend(self._replaced_range_guards(sym, r, names))
                continue
            rels, text = [], names[sym]
            if r.lo != -sympy.oo:
                rels.append(sympy.Ge(sym, r.lo))
                text = f"{r.lo} <= {text}"
            if r.hi != sympy.oo:
                rels.append(sympy.Le(sym, r.hi))
                text = f"{text} <= {r.hi}"
            if rels:
                out.append(_GuardOut(sympy.And(*rels), text, r.origin))
        return out

    def _replaced_range_guards(self, sym, r: "_Range", names) -> list:
        """Bounds learned about a symbol before it was replaced by an expression still hold for
        that expression; keep those the other symbols' ranges do not already imply."""
        value = self.simplify(sym)
        out = []
        for rel in ([sympy.Ge(value, r.lo)] if r.lo_guarded else []) + \
                   ([sympy.Le(value, r.hi)] if r.hi != sympy.oo else []):
            if rel is sympy.true or self._static_eval(rel) is True:
                continue
            out.append(_GuardOut(rel, sympy_str(rel, names), r.origin))
        return out

    def guard_texts(self) -> list:
        return [g.text for g in self.produce_guards()]

    def make_check_fn(self, scope_names: tuple = ("L", "G")) -> Callable:
        """`check(L, G=None) -> bool`: reads each symbol's source once, then tests every guard
        in plain Python (no sympy at check time)."""
        guards = self.produce_guards()
        code_names = {sym: f"_s{_sym_index(sym)}" for sym in self.var_to_source}
        lines = [f"def __shape_guard({', '.join(n + '=None' for n in scope_names)}):"]
        # sources of symbols that are still alive in some guard
        live = set()
        for g in guards:
            if g.expr is not None:
                live |= g.expr.free_symbols
            else:
                live |= getattr(g.target, "free_symbols", set())
        try_body = []
        for sym in sorted(live, key=_sym_index):
            try_body.append(f"{code_names[sym]} = {_source_code(self.var_to_source[sym])}")
        checks = [_guard_code(g, code_names) for g in guards]
        lines.append("    try:")  # an input of another rank or type simply fails the guards
        lines.append("        pass")
        lines += [f"        {b}" for b in try_body]
        for c in checks:
            lines.append(f"        if not ({c}):")
            lines.append("            return False")
        lines.append("    except Exception:")
        lines.append("        return False")
        lines.append("    return True")
        src = "\n".join(lines)
        scope: dict = {"min": min, "max": max}
        exec(compile(src, "<shape guards>", "exec"), scope)
        fn = scope["__shape_guard"]
        fn.__source__ = src
        return fn

    def explain_failure(self, L, G=None) -> list:
        """Texts of the guards that fail for new inputs (for recompile explanations)."""
        failing = []
        code_names = self.source_names(code=True)
        for g in self.produce_guards():
            code = _guard_code(g, code_names)
            try:
                ok = eval(code, {"min": min, "max": max}, {"L": L, "G": G})
            except Exception as e:  # a missing input or another rank fails its guard
                ok = False
                failing.append(f"{g.text} ({type(e).__name__}: {e})")
                continue
            if not ok:
                failing.append(g.text)
        return failing


@dataclasses.dataclass(frozen=True)
class _GuardOut:
    expr: Optional[sympy.Basic]
    text: str
    origin: Optional[str]
    source: Any = None        # source equalities only
    target: Any = None


def _guard_code(g: "_GuardOut", code_names: dict) -> str:
    if g.expr is None:
        return f"({_source_code(g.source)}) == ({sympy_str(g.target, code_names)})"
    return sympy_str(g.expr, code_names)


def _sym_index(sym) -> int:
    try:
        return int(sym.name[1:])
    except ValueError:
        return -1


def _negate(rel):
    return {
        sympy.Eq: sympy.Ne, sympy.Ne: sympy.Eq,
        sympy.Lt: sympy.Ge, sympy.Ge: sympy.Lt,
        sympy.Gt: sympy.Le, sympy.Le: sympy.Gt,
    }[type(rel)](rel.lhs, rel.rhs)


def _single_symbol_bound(rel):
    """(sym, lo, hi) if rel is `a*s + b OP 0` for one symbol s with integer a; bounds as ints."""
    if not isinstance(rel, (sympy.Lt, sympy.Le, sympy.Gt, sympy.Ge)):
        return None
    diff = sympy.expand(rel.lhs - rel.rhs)
    syms = diff.free_symbols
    if len(syms) != 1:
        return None
    (sym,) = syms
    if not sym.is_integer:  # a float symbol: integer bounds would be wrong, the guard stays
        return None
    a = diff.coeff(sym)
    b = diff - a * sym
    if not (a.is_Integer and b.is_number and b.is_Integer) or a == 0:
        return None
    a, b = int(a), int(b)
    # a*s + b OP 0  →  s OP' -b/a
    op = rel.rel_op
    if a < 0:
        op = {"<": ">", "<=": ">=", ">": "<", ">=": "<="}[op]
    t = sympy.Rational(-b, a)
    if op == ">":
        return sym, math.floor(t) + 1, None
    if op == ">=":
        return sym, math.ceil(t), None
    if op == "<":
        return sym, None, math.ceil(t) - 1
    return sym, None, math.floor(t)


def dense_strides_like(sym_shape: tuple, shape: tuple, stride: tuple) -> Optional[tuple]:
    """Symbolic strides for a tensor laid out densely (some dim permutation of contiguous);
    None if (shape, stride) is not dense."""
    n = len(shape)
    if n == 0:
        return ()
    if 0 in shape:
        return None
    order = sorted(range(n), key=lambda i: (-stride[i], -i))
    acc = 1
    for i in reversed(order):
        if shape[i] != 1 and stride[i] != acc:
            return None
        acc *= shape[i]
    out = [0] * n
    acc_s = sympy.Integer(1)
    for i in reversed(order):
        # a size-1 dim laid out in place has the stride of the dims inside it: symbolic too, or
        # its concrete value would pin the inner sizes through the tensor guard
        out[i] = _pyint(acc_s) if shape[i] != 1 or stride[i] == acc else stride[i]
        acc_s = acc_s * _sym(sym_shape[i])
    return tuple(out)


# ---------------------------------------------------------------------------------------------
# SymInt: what the executor holds for a symbolic Python int


class _SymValue:
    """A sympy expression of the ShapeEnv's symbols held as a Python value. Unhashable, like
    torch.SymInt, because equality is a guarded decision."""

    __slots__ = ("expr", "env")
    __pydynamo_symint__ = True   # metadata code treats it as a symbolic scalar argument

    def __init__(self, expr, env: ShapeEnv):
        self.expr = expr
        self.env = env

    @property
    def free_symbols(self):
        return self.expr.free_symbols

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.expr}, hint={self.hint})"

    def __str__(self) -> str:
        return str(self.expr)

    __hash__ = None  # type: ignore[assignment]


class _SymNumber(_SymValue):
    """Shared behaviour of SymInt and SymFloat: arithmetic builds sympy expressions (no guards);
    comparisons and bool() decide on hints and record guards."""

    __slots__ = ()

    def _operand(self, other):
        """sympy form of an operand, or None if it is not a number we can combine."""
        if isinstance(other, _SymNumber):
            return other.expr
        if isinstance(other, float) and not math.isfinite(other):
            return None
        if isinstance(other, (int, float, sympy.Basic)):
            return _sym(other)
        return None

    # -- decisions (guarded) -------------------------------------------------------------------
    def _cmp(self, other, rel):
        o = self._operand(other)
        if o is None:
            if isinstance(other, float):  # inf / nan: decided by the value alone
                return rel(sympy.Float(float(self.hint)), sympy.Float(other)) == sympy.true
            return NotImplemented
        if _rounded(self.expr) or _rounded(o):
            # float arithmetic rounds op by op; the exact expression could decide otherwise
            # near the boundary: pin the symbols and decide as Python does
            _pin(self.env, self.expr, o)
            return _PY_REL[rel](_py_value(self), _py_value(other))
        return self.env.evaluate(rel(self.expr, o))

    def __lt__(self, o):
        return self._cmp(o, sympy.Lt)

    def __le__(self, o):
        return self._cmp(o, sympy.Le)

    def __gt__(self, o):
        return self._cmp(o, sympy.Gt)

    def __ge__(self, o):
        return self._cmp(o, sympy.Ge)

    def __eq__(self, o):
        return self._cmp(o, sympy.Eq)

    def __ne__(self, o):
        return self._cmp(o, sympy.Ne)

    def __bool__(self):
        return self._cmp(0, sympy.Ne)

    # -- arithmetic shared by both (result type follows Python's) ------------------------------
    def _arith(self, other, fn, reflected=False):
        o = self._operand(other)
        if o is None:
            return NotImplemented
        is_float = isinstance(self, SymFloat) or isinstance(other, (float, SymFloat))
        expr = fn(o, self.expr) if reflected else fn(self.expr, o)
        if not is_float:
            return self.env.symint(expr)
        a, b = _py_value(self), _py_value(other)
        return self.env.symfloat(expr, fn(b, a) if reflected else fn(a, b))

    def __add__(self, o):
        return self._arith(o, operator.add)

    def __radd__(self, o):
        return self._arith(o, operator.add, True)

    def __sub__(self, o):
        return self._arith(o, operator.sub)

    def __rsub__(self, o):
        return self._arith(o, operator.sub, True)

    def __mul__(self, o):
        return self._arith(o, operator.mul)

    def __rmul__(self, o):
        return self._arith(o, operator.mul, True)

    def __truediv__(self, o):
        return self._div(o, False)

    def __rtruediv__(self, o):
        return self._div(o, True)

    def _div(self, other, reflected):
        o = self._operand(other)
        if o is None:
            return NotImplemented
        num, den = (o, self.expr) if reflected else (self.expr, o)
        if self.env.value_hint(den) == 0:
            raise ZeroDivisionError("division by zero")
        a, b = _py_value(self), _py_value(other)
        return self.env.symfloat(num / den, b / a if reflected else a / b)

    def __neg__(self):
        if isinstance(self, SymFloat):
            return self.env.symfloat(-self.expr, -_py_value(self))
        return self.env.symint(-self.expr)

    def __pos__(self):
        return self

    def __abs__(self):
        if self >= 0:
            return self
        return -self


class SymInt(_SymNumber):
    """A symbolic int: + - * // % ** build expressions; int()/index() specialize (guarded).
    `/` gives a SymFloat, as in Python. `int(x)` must return a real int in CPython, so it
    specializes; an executor that wants torch's behaviour maps builtin int() to `sym_int`."""

    __slots__ = ()

    @property
    def hint(self) -> int:
        return self.env.size_hint(self.expr)

    def _intop(self, other, fn, reflected=False):
        if isinstance(other, (float, SymFloat)):  # float floor-division/modulo/power: pinned
            a, b = float(self), float(other)
            return fn(b, a) if reflected else fn(a, b)
        if not isinstance(other, (int, SymInt, sympy.Basic)):
            return NotImplemented
        a, b = self.expr, _sym(other)
        return self.env.symint(fn(b, a) if reflected else fn(a, b))

    def __floordiv__(self, o):
        return self._intop(o, FloorDiv if not isinstance(o, (float, SymFloat)) else operator.floordiv)

    def __rfloordiv__(self, o):
        return self._intop(o, FloorDiv if not isinstance(o, (float, SymFloat)) else operator.floordiv, True)

    def __mod__(self, o):
        return self._intop(o, _mod if not isinstance(o, (float, SymFloat)) else operator.mod)

    def __rmod__(self, o):
        return self._intop(o, _mod if not isinstance(o, (float, SymFloat)) else operator.mod, True)

    def __pow__(self, o):
        if isinstance(o, SymInt) and o >= 0:  # a size: decided by its range, no guard
            return self._intop(o, _pow)
        if isinstance(o, int) and o >= 0:
            return self._intop(o, _pow)
        return float(self) ** (float(o) if isinstance(o, SymFloat) else o)

    def __rpow__(self, o):
        if isinstance(o, int):
            return self._intop(o, _pow, True)
        return (float(o) if isinstance(o, SymFloat) else o) ** float(self)

    def __int__(self):
        return self.env.specialize(self.expr, reason="int()")

    def __index__(self):
        return self.env.specialize(self.expr, reason="used as an index")

    def __float__(self):
        return float(int(self))

    def __trunc__(self):
        return self

    def __floor__(self):
        return self

    def __ceil__(self):
        return self

    def __round__(self, ndigits=None):
        return self


class SymFloat(_SymNumber):
    """A symbolic float: from sizes (`x.shape[0] / 2`, exact rational expression), or a dynamic
    float argument (a real symbol) and arithmetic on it. float() specializes (guarded).
    `py` is the value Python computes (rounded op by op) where that may differ from the exact
    hint; decisions on such values pin the symbols and use it."""

    __slots__ = ("py",)

    def __init__(self, expr, env: ShapeEnv, py: Optional[float] = None):
        super().__init__(expr, env)
        self.py = py

    @property
    def hint(self) -> float:
        return float(self.env.value_hint(self.expr))

    def __float__(self):
        if _rounded(self.expr):
            _pin(self.env, self.expr)
            return _py_value(self)
        return float(self.env.specialize(self.expr, reason="float()"))

    def __int__(self):
        return int(float(self))

    def __floordiv__(self, o):
        return float(self) // (float(o) if isinstance(o, _SymNumber) else o)

    def __rfloordiv__(self, o):
        return o // float(self)

    def __mod__(self, o):
        return float(self) % (float(o) if isinstance(o, _SymNumber) else o)

    def __rmod__(self, o):
        return o % float(self)

    def __pow__(self, o):
        if isinstance(o, int) and o >= 0:
            return self.env.symfloat(self.expr ** o, _py_value(self) ** o)
        return float(self) ** (float(o) if isinstance(o, _SymNumber) else o)

    def __rpow__(self, o):
        return o ** float(self)


class SymBool(_SymValue):
    """A symbolic truth value: `bool()` of a symbolic number that the program uses as a value
    (`x + bool(n - 2)`), kept as the sympy relation so one graph serves both outcomes.
    Branching on it (`__bool__`, what CPython's jumps call) decides on the hints and records
    the guard, exactly as a comparison does. No arithmetic: a caller that needs a number
    decides it first (guarded)."""

    __slots__ = ()

    @property
    def hint(self) -> bool:
        """The value on the hints (a Python bool: type promotion sees a bool scalar)."""
        return bool(self.expr.xreplace(self.env.var_to_hint))

    def __bool__(self):
        return self.env.evaluate(self.expr)


def is_truth_expr(e) -> bool:
    """A sympy truth value (a relation, And/Or/Not, true/false), not a number: a SymBool's
    expression. (sympy Symbols are Booleans too, hence the Expr test.)"""
    return isinstance(e, sympy.logic.boolalg.Boolean) and not isinstance(e, sympy.Expr)


def sym_bool(x):
    """bool() of a number that may be symbolic, without deciding it: a SymBool of `x != 0`, or
    a plain bool when the ranges already decide it (`bool(n)` of a size, n >= 2)."""
    if isinstance(x, SymBool):
        return x
    if not isinstance(x, _SymNumber) or _rounded(x.expr):
        return bool(x)   # plain, or float arithmetic (decided as Python rounds it)
    rel = _constant_right(_integral(x.env.simplify(sympy.Ne(x.expr, 0))))
    if rel is sympy.true or rel is sympy.false:
        return bool(rel)
    static = x.env._static_eval(rel)
    if static is not None:
        return static
    return SymBool(rel, x.env)


_PY_REL = {sympy.Lt: operator.lt, sympy.Le: operator.le, sympy.Gt: operator.gt, sympy.Ge: operator.ge,
           sympy.Eq: operator.eq, sympy.Ne: operator.ne}


def _py_value(x):
    """The value Python computes for x: a float argument's arithmetic rounds op by op."""
    if isinstance(x, SymFloat):
        return x.py if x.py is not None else x.hint
    if isinstance(x, SymInt):
        return x.hint
    return x


def _rounded(expr) -> bool:
    """Whether an expression over float symbols is more than one symbol: its exact value may
    differ from what Python's float arithmetic gives (a lone symbol or constant never does)."""
    return not (expr.is_Symbol or expr.is_number) and any(not s.is_integer for s in expr.free_symbols)


def _pin(env, *exprs) -> None:
    """Specialize every symbol of `exprs` (guarded): the decision made on them is then exact."""
    for sym in sorted(set().union(*(e.free_symbols for e in exprs)), key=str):
        env.specialize(sym, reason="float arithmetic decided")


def sym_int(x):
    """int() as torch.compile does it: a SymInt stays symbolic (no guard); a SymFloat that is an
    integer expression over a positive integer (`n / 2`) truncates symbolically to `n // 2`
    when the numerator is >= 0 (decided by ranges, or guarded). Other floats are pinned."""
    if isinstance(x, SymInt):
        return x
    if isinstance(x, SymFloat):
        num, den = sympy.fraction(sympy.together(x.expr))
        if den.is_Integer and den > 0 and num.is_integer and x.env.evaluate(sympy.Ge(num, 0)):
            return x.env.symint(FloorDiv(num, den))
    return int(x)  # pinned (guarded)


def _mod(a, b):
    if b == 0:
        raise ZeroDivisionError("integer modulo by zero in a symbolic size")
    return sympy.Mod(_without_inner_mods(a, b), b)


class _Keep(Exception):
    """_without_inner_mods: `a` has a Mod outside a polynomial position; keep it as it is."""


def _without_inner_mods(a, b):
    """`a` with each `Mod(x, q)` (q a multiple of the integer b) in a polynomial position
    (sums, products, non-negative integer powers, integer coefficients) replaced by x: the same
    value mod b. Why: sympy 1.14 simplifies Mod(2*Mod(s, 3), 3) to 2*Mod(s, 3), 4 instead of 1
    at s = 2 (tests/shapes/test_shapes.py's soundness property found it); Mod(2*s, 3) it keeps.
    Anything else (a floor division, a rational coefficient) leaves `a` as it is."""
    if not (isinstance(b, sympy.Basic) and b.is_Integer and b != 0) or not a.has(sympy.Mod):
        return a

    def walk(e):
        if isinstance(e, sympy.Mod) and e.args[1].is_Integer and e.args[1] % b == 0:
            return walk(e.args[0])
        if isinstance(e, (sympy.Add, sympy.Mul)):
            return e.func(*[walk(x) for x in e.args])
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp >= 0:
            return sympy.Pow(walk(e.base), e.exp)
        if e.is_Number and not e.is_Integer:
            raise _Keep
        if e.has(sympy.Mod):
            raise _Keep             # a Mod under something else: not a polynomial position
        return e
    try:
        return walk(a)
    except _Keep:
        return a


def _pow(a, b):
    if b.is_number and b < 0:
        raise ValueError("negative exponent of a symbolic int gives a float; not supported")
    return a ** b


def sym_min(a, b):
    """min() without a guard: a Min expression (plain min for plain ints)."""
    env = _env_of(a, b)
    if env is None:
        return min(a, b)
    return _wrap_like(env, sympy.Min(_sym(a), _sym(b)), a, b)


def sym_max(a, b):
    env = _env_of(a, b)
    if env is None:
        return max(a, b)
    return _wrap_like(env, sympy.Max(_sym(a), _sym(b)), a, b)


def _wrap_like(env, expr, *operands):
    if any(isinstance(v, (float, SymFloat)) for v in operands):
        return env.symfloat(expr)
    return env.symint(expr)


def _env_of(*values):
    for v in values:
        if isinstance(v, _SymNumber):
            return v.env
    return None


def symbols_of(*values) -> list:
    """Free symbols of sizes/TensorMetas/SymInts (nested in lists, tuples, dicts, slices), in
    creation order: those an op over these values touches."""
    found: set = set()

    def visit(v):
        if isinstance(v, _SymValue):
            found.update(v.expr.free_symbols)
        elif isinstance(v, sympy.Basic):
            found.update(v.free_symbols)
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, slice):
            visit((v.start, v.stop, v.step))
        elif callable(getattr(v, "free_symbols", None)):  # a meta.TensorMeta
            found.update(v.free_symbols())
    visit(values)
    return sorted(found, key=_sym_index)


def is_symbolic(x) -> bool:
    return isinstance(x, _SymValue) or (isinstance(x, sympy.Basic) and not x.is_number)


# ---------------------------------------------------------------------------------------------
# Dynamic-dim policy


_DYN_ATTR = "_pydynamo_dynamic_dims"
_STATIC_ATTR = "_pydynamo_static_dims"


def _dims(t, dim) -> list:
    if dim is None:
        return list(range(t.dim()))
    dims = [dim] if isinstance(dim, int) else list(dim)
    out = []
    for d in dims:
        if not -t.dim() <= d < t.dim():
            raise IndexError(f"dim {d} out of range for a {t.dim()}-d tensor")
        out.append(d % t.dim())
    return out


def mark_dynamic(t, dim) -> None:
    """Compile `t`'s dim(s) symbolically from the first call; specializing them is an error."""
    dims = _dims(t, dim)
    current = set(getattr(t, _DYN_ATTR, ()))
    static = set(getattr(t, _STATIC_ATTR, ())) - set(dims)
    setattr(t, _DYN_ATTR, current | set(dims))
    setattr(t, _STATIC_ATTR, static)


def mark_static(t, dim=None) -> None:
    """Never make `t`'s dim(s) symbolic (all dims when dim is None), whatever `dynamic` says."""
    dims = _dims(t, dim)
    setattr(t, _STATIC_ATTR, set(getattr(t, _STATIC_ATTR, ())) | set(dims))
    setattr(t, _DYN_ATTR, set(getattr(t, _DYN_ATTR, ())) - set(dims))


def marked_dynamic_dims(t) -> set:
    return set(getattr(t, _DYN_ATTR, ()))


def marked_static_dims(t) -> set:
    return set(getattr(t, _STATIC_ATTR, ()))


def dynamic_dims(t, *, dynamic: Optional[bool], changed_dims: Iterable[int] = ()) -> set:
    """Which dims of input tensor `t` to make symbolic. Precedence: mark_static, then
    mark_dynamic, then dynamic=False (none) / dynamic=True (all), then automatic dynamic (the
    dims seen to change between calls of this code)."""
    static = marked_static_dims(t)
    marked = marked_dynamic_dims(t) - static
    if dynamic is False:
        base: set = set()
    elif dynamic is True:
        base = set(range(t.dim()))
    else:
        base = set(changed_dims)
    return (base | marked) - static


class AutomaticDynamic:
    """Per-code memory of input sizes: a dim whose size differed between two calls is dynamic
    from then on (automatic dynamic). Keyed by the input's source name."""

    def __init__(self):
        self.seen: dict = {}       # name → tuple of sizes (None where it changed)

    def observe(self, name: str, sizes: tuple) -> set:
        """Record this call's sizes; return the dims that have changed at some point."""
        sizes = tuple(s if type(s) is float else int(s) for s in sizes)  # a float argument: as is
        old = self.seen.get(name)
        if old is None:
            self.seen[name] = sizes
            return set()
        if len(old) != len(sizes):
            self.seen[name] = tuple(None for _ in sizes)  # rank changed: everything is dynamic
            return set(range(len(sizes)))
        merged = tuple(o if o == s else None for o, s in zip(old, sizes))
        self.seen[name] = merged
        return {i for i, m in enumerate(merged) if m is None}

    def changed_dims(self, name: str) -> set:
        old = self.seen.get(name)
        return set() if old is None else {i for i, m in enumerate(old) if m is None}

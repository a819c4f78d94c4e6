"""Symbolic sizes of one compiled graph: which symbols exist, their example values, where the
wrapper reads each one at call time, and what it must re-check before running the kernels.

Symbols come from two places and share one namespace (sympy `s0`, `s1`, ... integer, positive):
the executor (pydynamo.shapes: tensor placeholders whose metadata has sympy sizes/strides, int
placeholders whose meta["val"] is the symbol) and codegen's own `dynamic={input: [dims]}` option
(duck-shaped: equal example sizes share one symbol, the rule pydynamo.shapes applies under
dynamic=True).

Invariants:
- Every symbol that any size, stride or index mentions has a hint (its value in the example
  inputs) and exactly one binding: Python source the wrapper evaluates once per call
  (`arg2`, `arg0.shape[1]`, `arg0.stride()[0]`). Other places a symbol could be read from
  become consistency checks, never second bindings.
- The wrapper checks static sizes/strides exactly and symbolic ones by evaluating their
  expressions from the bound symbols (`arg0.shape != (s0, 16)`); relations between symbols are
  the executor's guards' business, except the `assumptions` lowerings made here (a slice end
  within its dim, a broadcast between two symbols, ...: `same_size`, `size_is_one` below),
  which the wrapper checks too unless they hold for every admitted size. Any failure runs the
  graph eagerly (counted; the warning names the relation).
- An extern op's output sizes are symbolic: from the node's symbolic metadata when the
  executor gave it, else matched against the argument sizes on the hints and confirmed by
  re-running the op on meta tensors with one symbol, then each group of equal-hint symbols,
  set to other values (a group the op refuses is pinned to its hint by an assumption); a
  view's strides (the argument's strides, or sums of two: a diagonal) are confirmed the same
  way. The wrapper still compares the real result's shape (`_ensure`) and re-runs the graph
  eagerly if it differs, or if a view result has other strides than planned (a copy would
  not alias what eager's view does), so a wrong guess costs time, never correctness.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional, Tuple

import sympy
import torch

from codegen.ir import current
from codegen.sizevars import contiguous_strides, equals, product
from pydynamo.symbols import canonical_size, size_symbol


def as_sympy(v):
    """A size-like value (int, sympy expression, pydynamo SymInt) as sympy, else None."""
    expr = getattr(v, "expr", None)       # pydynamo.shapes.SymInt wraps its sympy expression
    if isinstance(expr, sympy.Basic):
        v = expr
    if isinstance(v, sympy.Basic):
        return canonical_size(v)
    if isinstance(v, int) and not isinstance(v, bool):
        return sympy.Integer(v)
    return None


def is_symbolic(v) -> bool:
    e = as_sympy(v)
    return e is not None and not e.is_number


def meta_stride(m):
    st = getattr(m, "stride", None)
    if callable(st):
        st = st()
    return None if st is None else tuple(st)


@dataclass
class SizeCheck:
    """`source` (Python, e.g. `arg0.shape`) must equal `expected` (sizes) at call time."""
    source: str
    expected: Any       # a sympy expression or a tuple of them


@dataclass
class SymbolicSizes:
    hints: Dict[sympy.Symbol, int] = field(default_factory=dict)
    bindings: Dict[sympy.Symbol, str] = field(default_factory=dict)
    from_tensor: set = field(default_factory=set)       # bound from a tensor's shape/stride
    checks: List[SizeCheck] = field(default_factory=list)
    assumptions: List[sympy.Basic] = field(default_factory=list)
    taken: set = field(default_factory=set)             # symbol names in use (executor's too)
    ducks: List[sympy.Symbol] = field(default_factory=list)   # dynamic= size symbols

    # ------------------------------------------------------------------ symbols
    def new_symbol(self, hint: int, source: str, duck: bool = False) -> sympy.Symbol:
        """A fresh symbol read from `source`. `duck`: a size equal to an earlier duck size
        shares its symbol (DESIGN.md 5's duck shaping; the wrapper checks the equality)."""
        if duck:
            for s in self.ducks:
                if self.hints[s] == int(hint):
                    self.bind(s, source, tensor=True)
                    return s
        k = 0
        while f"s{k}" in self.taken:
            k += 1
        s = size_symbol(f"s{k}")
        self.taken.add(s.name)
        self.hints[s] = int(hint)
        self.bind(s, source, tensor=True)
        if duck:
            self.ducks.append(s)
        return s

    def bind(self, s: sympy.Symbol, source: str, tensor: bool):
        if tensor:
            self.from_tensor.add(s)
        if s not in self.bindings:
            self.bindings[s] = source
            return
        if self.bindings[s] == source:
            return
        if not tensor and "." in self.bindings[s]:
            # an int argument is the cheapest read: it becomes the binding
            self.bindings[s], source, tensor = source, self.bindings[s], True
        if not tensor:     # tensor reads are covered by that input's whole-shape check
            self.checks.append(SizeCheck(source, s))

    def learn(self, expr, value: int, source: str, tensor=True):
        """`expr` was read as `value` from `source`: a bare symbol gets hint and binding."""
        if isinstance(expr, sympy.Symbol):
            self.hints.setdefault(expr, int(value))
            self.taken.add(expr.name)
            self.bind(expr, source, tensor)

    def hint(self, expr):
        e = sympy.sympify(expr)
        if e.is_number:
            return e
        return canonical_size(e).xreplace({s: sympy.Integer(v) for s, v in self.hints.items()})

    def unbound(self, exprs) -> set:
        out = set()
        for e in exprs:
            out |= {s for s in sympy.sympify(e).free_symbols if s not in self.bindings}
        return out

    def assume(self, rel) -> bool:
        """Record a relation a lowering relies on (checked by the wrapper at each call). Returns
        whether it holds on the hints; a relation false there is not recorded."""
        rel = sympy.sympify(rel)
        if rel is sympy.true:
            return True
        if rel is sympy.false or not bool(self.hint_rel(rel)):
            return False
        if rel not in self.assumptions and not self._always(rel):
            self.assumptions.append(rel)
        return True

    def _always(self, rel) -> bool:
        """`rel` (<, <=, >, >=) holds for every size the wrapper admits: with each symbol at
        its lower bound plus a non-negative t (2 for tensor dims, which the wrapper checks, 1
        for others), the difference is a polynomial with non-negative coefficients. (The
        ShapeEnv's `_static_eval` is another prover on purpose: docs/INTERNALS.md section 0.)"""
        if isinstance(rel, (sympy.Lt, sympy.Le)):
            d = rel.rhs - rel.lhs - (1 if isinstance(rel, sympy.Lt) else 0)
        elif isinstance(rel, (sympy.Gt, sympy.Ge)):
            d = rel.lhs - rel.rhs - (1 if isinstance(rel, sympy.Gt) else 0)
        else:
            return False
        if not all(isinstance(a, (sympy.Symbol, sympy.Number, sympy.Add, sympy.Mul, sympy.Pow))
                   for a in sympy.preorder_traversal(d)):
            return False      # FloorDiv, Min, ...: not attempted
        shift = {x: sympy.Dummy(nonnegative=True) + (2 if x in self.from_tensor else 1)
                 for x in d.free_symbols}
        poly = sympy.expand(d.xreplace(shift))
        return all(c >= 0 for c in sympy.Poly(poly, *poly.free_symbols).coeffs()) \
            if poly.free_symbols else bool(poly >= 0)

    def hint_rel(self, rel):
        return rel.xreplace({s: sympy.Integer(v) for s, v in self.hints.items()})

    # ------------------------------------------------------------------ inputs
    def input_layout(self, pos: int, ex: torch.Tensor, meta, dims) -> Tuple[list, list]:
        """Symbolic (size, stride) of tensor input `pos`: sympy sizes/strides from its meta
        (the executor's) or symbols for the `dims` the dynamic= option names."""
        arg = f"arg{pos}"
        given = list(getattr(meta, "shape", ()) or ()) if meta is not None else []
        given_st = meta_stride(meta) if meta is not None else None
        size = []
        for d, n in enumerate(ex.shape):
            g = as_sympy(given[d]) if d < len(given) else None
            if g is not None and not g.is_number:
                self.learn(g, n, f"{arg}.shape[{d}]")
                size.append(g)
            elif d in dims and n > 1:        # 0 and 1 stay specialized, as in DESIGN.md 5
                size.append(self.new_symbol(n, f"{arg}.shape[{d}]", duck=True))
            else:
                size.append(sympy.Integer(n))
        if given_st is not None and len(given_st) == ex.dim() and \
                any(is_symbolic(s) for s in given_st):
            stride = []
            for d, st in enumerate(given_st):
                e = as_sympy(st)
                self.learn(e, ex.stride(d), f"{arg}.stride()[{d}]")
                stride.append(e)
        elif all(s.is_number for s in size):
            stride = [sympy.Integer(s) for s in ex.stride()]
        else:
            stride = dense_strides(size, ex)
            if stride is None:
                # a strided view: every stride a size argument of its own
                stride = [sympy.Integer(st) if st < 2 else
                          self.new_symbol(st, f"{arg}.stride()[{d}]")
                          for d, st in enumerate(ex.stride())]
        if not all(s.is_number for s in size + stride):
            self.checks.append(SizeCheck(f"{arg}.shape", tuple(size)))
            self.checks.append(SizeCheck(f"{arg}.stride()", tuple(stride)))
        return size, stride

    def int_input(self, pos: int, ex, meta) -> Optional[sympy.Expr]:
        """An int placeholder standing for a symbol (meta["val"] symbolic): the symbol."""
        e = as_sympy(meta)
        if e is None or e.is_number or isinstance(ex, bool) or not isinstance(ex, int):
            return None
        if isinstance(e, sympy.Symbol):
            self.learn(e, ex, f"arg{pos}", tensor=False)
        else:
            self.checks.append(SizeCheck(f"arg{pos}", e))
        return e


def dense_strides(size, ex) -> Optional[list]:
    """Symbolic strides of `ex` (a tensor or a static record) if it is dense in some dim order
    (contiguous, transposed, channels-last), derived from the symbolic sizes in that order;
    else None."""
    shape, st = tuple(ex.shape), meta_stride(ex)
    order = sorted(range(len(shape)), key=lambda d: (st[d], shape[d]))
    out: List[Any] = [None] * len(shape)
    acc, acc_int = sympy.Integer(1), 1
    for d in order:
        if shape[d] == 1:
            out[d] = sympy.Integer(st[d])
            continue
        if st[d] != acc_int:
            return None
        out[d] = acc
        acc, acc_int = acc * size[d], acc_int * shape[d]
    return out


# ---------------------------------------------------------------------- extern outputs
def _leaves(m, path=()):
    if isinstance(m, (list, tuple)) and not hasattr(m, "dtype"):
        for i, x in enumerate(m):
            yield from _leaves(x, path + (i,))
    else:
        yield path, m


def symbolic_extern_layouts(sizes: SymbolicSizes, run_meta, refs, scalars, concrete, node_meta):
    """{output path: (size, stride)} in symbols for an extern whose arguments have symbolic
    sizes. `run_meta(assign)` runs the op on meta tensors with the symbols set to `assign`;
    `concrete` is its result on the hints. Raises LookupError when no consistent guess exists."""
    given = {p: m for p, m in _leaves(node_meta)} if node_meta is not None else {}
    cands: List[sympy.Expr] = []
    for r in refs:
        # (sums of two strides: a diagonal's stride)
        pairs = [a + b for i, a in enumerate(r.stride) for b in r.stride[i + 1:]]
        for e in list(r.size) + list(r.stride) + [product(r.size)] + pairs:
            e = sympy.sympify(e)
            if not e.is_number and e not in cands:
                cands.append(e)
    cands += [s for s in scalars if s not in cands]

    def options(v):
        return [e for e in cands if sizes.hint(e) == v] + [sympy.Integer(v)]

    out, guessed = {}, {}
    for path, m in _leaves(concrete):
        if m is None or not hasattr(m, "shape"):
            continue
        g = given.get(path)
        gshape = [as_sympy(x) for x in getattr(g, "shape", ())] if g is not None else []
        if len(gshape) == len(m.shape) and all(x is not None for x in gshape) and \
                [sizes.hint(x) for x in gshape] == list(m.shape) and not sizes.unbound(gshape):
            size = gshape
        else:       # the executor's symbolic metadata is trusted; guesses are confirmed
            guessed[path] = [options(int(v)) for v in m.shape]
            size = _confirm(sizes, run_meta, path, guessed[path])
        out[path] = (size, _stride_guess(sizes, run_meta, path, size, m, options))
    return out


def _stride_guess(sizes, run_meta, path, size, m, options):
    """Contiguous or dense strides follow the sizes; others (a view's: the input's strides)
    are matched on the hints and confirmed on other sizes like the sizes are. A stride that
    still differs at run time costs a copy in `_ensure` (or, for a view the caller gets, an
    eager run), never a wrong value."""
    st = meta_stride(m)
    if st == tuple(int(x) for x in contiguous_strides(list(m.shape))):
        return contiguous_strides(size)
    dense = dense_strides(size, m)
    if dense is not None:
        return dense
    guess = [options(int(v)) for v in st]
    try:
        return _confirm(sizes, run_meta, path, guess, meta_stride)
    except LookupError:
        return [opts[0] for opts in guess]     # the hints' match


def _confirm(sizes, run_meta, path, dims, attr=lambda m: tuple(m.shape)) -> list:
    """Pick, for each output dim, the first candidate expression that also gives the op's size
    (or `attr`: its stride) when the symbols of one hint group (equal hints stay equal) take
    another value. A group the op rejects at another value (`x @ w` with x's symbolic K
    against w's static K) is pinned to its hint by a checked assumption."""
    groups: Dict[int, list] = {}
    for s in sorted(sizes.hints, key=lambda s: s.name):
        groups.setdefault(sizes.hints[s], []).append(s)
    # one symbol at a time first (tells apart symbols that share a hint; an op may refuse),
    # then each hint group together (must be accepted, else the group is pinned)
    trials = [([s], False) for g in groups.values() if len(g) > 1 for s in g] + \
        [(g, True) for g in groups.values()]
    for group, required in trials:
        hint = sizes.hints[group[0]]
        alt = dict(sizes.hints)
        alt.update({s: 2 * hint + 3 for s in group})
        try:
            other = dict(_leaves(run_meta(alt)))
        except Exception:
            for s in group if required else ():
                sizes.assume(sympy.Eq(s, hint))
            continue
        m = other.get(path)
        if m is None or len(attr(m)) != len(dims):
            raise LookupError("output structure changes with the sizes")
        subs = {s: sympy.Integer(v) for s, v in alt.items()}
        dims = [[e for e in opts if int(sympy.sympify(e).xreplace(subs)) == int(n)]
                for opts, n in zip(dims, attr(m))]
        if not all(dims):
            raise LookupError(f"output sizes of {path} not confirmed on other sizes")
    return [opts[0] for opts in dims]


# ---------------------------------------------------------------------- decisions in lowerings
def _graph_sizes() -> Optional[SymbolicSizes]:
    return getattr(current.graph, "sizes", None)


def size_hint(e):
    """`e` on the example sizes (itself when it is a number or no graph is being lowered)."""
    sizes, e = _graph_sizes(), sympy.sympify(e)
    return e if e.is_number or sizes is None else sizes.hint(e)


def same_size(a, b) -> bool:
    """a == b, provably or on the example sizes; the latter is recorded as an assumption the
    wrapper checks at every call (a call where it fails runs eagerly)."""
    a, b = sympy.sympify(a), sympy.sympify(b)
    if equals(a, b):
        return True
    sizes = _graph_sizes()
    if sizes is None or (a.is_number and b.is_number):
        return False
    return sizes.assume(sympy.Eq(a, b))


def size_is_one(d) -> bool:
    """Is dim size `d` 1 (broadcasts)? Bare size symbols are >= 2 (0 and 1 are specialized);
    a symbolic expression (`s0 - 1`) is decided on the example sizes and assumed."""
    d = sympy.sympify(d)
    if d.is_number or isinstance(d, sympy.Symbol):
        return d == 1
    sizes = _graph_sizes()
    if sizes is None:
        return False
    if sizes.assume(sympy.Eq(d, 1)):
        return True
    sizes.assume(sympy.Ne(d, 1))
    return False

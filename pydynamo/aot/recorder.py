"""The joint graph: the executor's torch-level graph run forward and backward on stand-ins, every
aten op recorded into one functional FX graph.

Why a recorder: derivatives come from PyTorch's own autograd formulas. The torch-level graph is
interpreted on stand-in tensors (`_Traced`: a wrapper that reports the input's real device and
holds a meta tensor of its size and strides), with autograd on; `torch.autograd.grad` is then
called with tangent stand-ins. A TorchDispatchMode sees every aten op below autograd, forward and
backward, runs it on the meta tensors and appends it to one FX graph. Because the stand-ins say
they live on the real device, torch's own autocast layer casts them (a `torch.autocast` region in
the graph is recorded with its casts and their backward) and composite ops take their
device's path (CPU dropout = empty_like + bernoulli_ + div_ + mul, as eager runs it).

Functionalization happens here, once, for every backend: an in-place aten op is recorded as its
functional form and the written tensor is rebound to the new value.
  * Each stand-in storage has a root (a graph input, or the first tensor an op created on it).
    While no view of a storage exists, a write just rebinds the written tensor (`x.add_(y)` ->
    `add = aten.add(x, y)`; later uses of x read `add`).
  * Once views exist, the storage's value is kept as a flat tensor in storage order (the root
    permuted to descending strides and flattened: the root must be dense); a write through any
    view scatters the new values into it (`aten.as_strided_scatter`) and bumps the storage's
    generation; a tensor read after a newer generation is re-derived from the flat value
    (`aten.as_strided` with its own size, stride and offset).
  * Ops with no functional twin of the same overload are mapped by `_FUNCTIONAL` (batch norm's
    running statistics, bernoulli_), else the written argument is cloned first and the op
    writes the clone (never a graph input).
  * Layout changes in place (t_, resize_, as_strided_, set_ ...), `out=` overloads and graph
    inputs that share storage are refused (`Unsupported`): the graph then runs with eager
    autograd, warned.
The record says, per graph input, whether its data was written (its final value is a joint
output; the runtime copies it back), and per graph output whether it is an input, a view of an
input, or a view of another output (the runtime rebuilds those as views of the real tensors).

Every node carries `meta["val"]` (a pydynamo.meta.TensorMeta on the real device, or a tuple of
them for a multi-output op) and `meta["stack_trace"]`: the user's line of the torch-level node
being run, and in the backward the line of the forward op whose derivative is running (found by
the autograd node's sequence number).

Sizes: a graph whose placeholders have symbolic sizes (dynamic=True, mark_dynamic, automatic
dynamic), a training joint or a functionalized inference graph, is recorded once over the
graph's own symbols (pydynamo/symbols.py): the stand-ins' meta tensors have torch.SymInt sizes
backed by `_SymNode` (a sympy expression and its hint at the example), torch's Python meta kernels and decompositions run (the C++ ones of some
ops take concrete sizes only), each size an op takes becomes graph nodes (the symbol read from
its input: an int placeholder or `primal.size(d)`; arithmetic with operator.add/mul/floordiv/mod),
and node records hold sympy sizes, so codegen compiles the forward and backward with sizes as
kernel arguments. Every decision a kernel or derivative formula takes on a size is answered on
the hints and recorded: `Joint.sizes.admits(args)` checks a call's sizes against them and against
each input's recorded layout (runtime.py records again for sizes that break one: specialized,
never wrong). A write through a view is recorded over the symbols too: the flat value's
scatter and the reads from it take symbolic sizes, strides and storage offsets (codegen hands
the scatter a new tensor for the flat value's clone at every size, codegen/graph.py;
tests/aot/test_dynamic_view_writes.py). Where the symbolic recording fails (an op whose kernel
needs concrete sizes, a symbolic float argument), the graph is recorded at the example's sizes,
per size, as any graph without symbolic sizes is (logged on the "aot" channel; runtime counts
"joint_concrete"); a write through a view of a non-dense input is refused at any size.
"""
from __future__ import annotations

import bisect
import contextlib
import dataclasses
import operator
from typing import Any, Dict, List, Optional

import torch
import torch.fx
from torch.utils._python_dispatch import TorchDispatchMode, _disable_current_modes

import sympy
from torch._dispatch.python import enable_python_dispatcher

from pydynamo import logs
from pydynamo import meta_direct as _direct
from pydynamo.meta import TensorMeta, device_results
from pydynamo.mutation import mutation_of
from pydynamo.symbols import FloorDiv, sympy_str

aten = torch.ops.aten


class Unsupported(Exception):
    """The graph cannot be recorded exactly; it runs with eager autograd (reason in the message)."""


# mutating ops whose functional twin has another name or overload: (functional op, how the
# functional op's outputs map: the op's own outputs, then {written arg position: output index})
_FUNCTIONAL = {
    aten.native_batch_norm.default: (aten._native_batch_norm_legit_functional.default, 3, {3: 3, 4: 4}),
    aten.bernoulli_.float: (aten.bernoulli.p, 1, {0: 0}),
}


def _written(func, args, kwargs) -> list:
    """Positions of the arguments `func` writes: pydynamo.mutation's one record of in-place
    semantics (schema annotations, and batch norm's unmarked running statistics). A layout
    change in place (t_, squeeze_, resize_ ...) or an out= argument is refused."""
    m = mutation_of("call_function", func, args, kwargs)
    if m is None:
        return []
    if m.metadata or any(isinstance(w, str) for w in m.mutated):
        raise Unsupported(f"{func} changes a tensor's layout in place or writes out=")
    return list(m.mutated)


def _unmarked(func, i) -> bool:
    """The schema does not say argument i is written (batch norm's running statistics): eager
    writes it without a version bump."""
    return func._schema.arguments[i].alias_info is None


# ops whose result has its argument's value, size and strides (a new tensor object aliasing it)
_SAME_VALUE = {aten.detach.default, aten.alias.default}

class _Traced(torch.Tensor):
    """A stand-in: says it lives on `device` (autocast and device-specific composites see the real
    device), holds the meta tensor `elem` that does the work. Outside the recorder's mode (only
    while stand-ins are prepared) an op simply runs on the meta tensors."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device, requires_grad: bool = False):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, device=device, requires_grad=requires_grad)
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    def __repr__(self):
        return f"_Traced({tuple(self.shape)}, {self.dtype}, {self.device})"

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        device = next(a.device for a in _leaves((args, kwargs)) if isinstance(a, _Traced))
        out = func(*_map(_elem, args), **_map(_elem, kwargs))
        return _map(lambda t: _Traced(t, device) if isinstance(t, torch.Tensor) else t, out)


def _elem(v):
    """What an op runs on: a stand-in's meta tensor; a real tensor (a constant the graph made,
    `torch.tensor(...)`: recorded as a constant) as a meta tensor of its size."""
    if isinstance(v, _Traced):
        return v.elem
    if isinstance(v, torch.Tensor) and v.device.type != "meta":
        return v.to("meta")
    return v


def _map(fn, v):
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        items = [_map(fn, x) for x in v]
        if type(v) in (list, tuple) or not hasattr(type(v), "_fields"):
            return type(v)(items)          # list, tuple, torch.return_types (a structseq)
        return type(v)(*items)             # a namedtuple
    if isinstance(v, dict):
        return {k: _map(fn, x) for k, x in v.items()}
    return fn(v)


def _leaves(v):
    out: list = []
    _map(out.append, v)
    return out


def _storage_key(t: torch.Tensor) -> int:
    return t.untyped_storage()._cdata


@dataclasses.dataclass
class _Storage:
    root: torch.Tensor              # the stand-in owning the storage (an input or an op's result)
    input_index: Optional[int]      # the graph input whose storage this is
    has_views: bool = False
    flat: Optional[torch.fx.Node] = None   # the storage's value in storage order, once needed
    generation: int = 0


@dataclasses.dataclass
class OutputAlias:
    """A graph output that eager returns as (a view of) a graph input or of another output."""
    kind: str                 # "input" (the input itself), "input_view", "output_view"
    source: int               # input index, or index of the computed output it views
    size: tuple = ()
    stride: tuple = ()
    offset: int = 0           # storage offset relative to the source's
    detached: bool = False    # eager's output does not require grad where its source does
    at: Optional[Any] = None  # symbolic sizes: args -> (size, stride, offset) of this call

    def geometry(self, args) -> tuple:
        """(size, stride, offset) of the view at this call's sizes."""
        return self.at(args) if self.at is not None else (self.size, self.stride, self.offset)


@dataclasses.dataclass
class Joint:
    """The recorded joint graph and what the runtime needs to replay eager around it.

    gm's placeholders: one per graph input (`primal_i`, the same order; ints stay placeholders),
    then one tangent per differentiable computed output. gm's output: the computed outputs, then
    one gradient per graph input (None where it has none)."""
    gm: torch.fx.GraphModule
    num_inputs: int
    computed: List[torch.fx.Node]          # forward results the runtime receives
    differentiable: List[bool]             # per computed output: gets a tangent
    mutated: List[tuple]                   # (input index, computed index, bumps the version)
                                           #   written back in place
    user_outputs: List[Any]                # per torch-level output: ("computed", k) |
                                           #   ("alias", OutputAlias) | ("const", value)
    grad_inputs: List[bool]                # per input: receives a gradient
    num_tangents: int
    view_bases: Dict[int, tuple]           # computed index -> (size, stride) its views assume
    sizes: Optional["SizeSpec"] = None     # recorded with symbolic sizes: the calls it serves
    view_bases_at: Optional[Any] = None    # symbolic sizes: args -> view_bases of this call

    def bases(self, args) -> Dict[int, tuple]:
        return self.view_bases_at(args) if self.view_bases_at is not None else self.view_bases


# --- symbolic sizes --------------------------------------------------------------------------
# A graph with symbolic sizes is recorded once for all of them: the stand-ins' meta tensors have
# torch.SymInt sizes whose nodes (`_SymNode`) hold the graph's own sympy expressions (the
# executor's symbols, pydynamo/symbols.py) and their values at the example (hints). Every size
# arithmetic of a meta kernel or derivative formula builds an expression; every decision one
# takes on a size (`if size == 1`, a contiguity test, `int(size)`) is answered on the hints and
# recorded as a relation (`SizeSpec.decisions`). The joint then serves any call whose sizes
# bind the symbols to values that satisfy every recorded relation and give each input the
# recorded layout (`SizeSpec.admits`); another call records again (a specialization, never a
# wrong answer). A size an op takes becomes a node of the graph: a symbol is read from the
# input it came from (an int placeholder, or `primal.size(d)`), an expression is computed from
# the symbols with operator.add/mul/floordiv/mod.

class _SymNode:
    """The node protocol torch.SymInt/SymBool/SymFloat call (C++ and torch's Python layers): an
    expression, its hint, and the recording `SizeEnv` that keeps each decision taken on it. A
    method this class lacks raises AttributeError in the op asking: the recording then fails
    and the graph is recorded at concrete sizes."""

    def __init__(self, expr, hint, env: "SizeEnv"):
        self.expr = sympy.sympify(expr)
        self._hint = hint
        self.env = env

    # kind
    def is_int(self):
        return isinstance(self._hint, int) and not isinstance(self._hint, bool)

    def is_bool(self):
        return isinstance(self._hint, bool)

    def is_float(self):
        return isinstance(self._hint, float)

    def is_symbolic(self):
        return not self.expr.is_number

    def is_nested_int(self):
        return False

    def is_constant(self):
        return False

    def has_hint(self):
        return True

    @property
    def hint(self):
        return self._hint

    def require_hint(self, fallback=None):
        return self._hint

    def maybe_as_int(self):
        return int(self.expr) if self.expr.is_Integer else None

    def maybe_as_bool(self):
        return bool(self.expr) if self.expr in (sympy.true, sympy.false) else None

    def maybe_as_float(self):
        return None

    def str(self):
        return str(self.expr)

    __str__ = _graph_repr = str

    def __repr__(self):
        return f"_SymNode({self.expr}, hint={self._hint})"

    def clone(self):
        return self

    def wrap_int(self, n):
        return _SymNode(sympy.Integer(n), int(n), self.env)

    def wrap_bool(self, b):
        return _SymNode(sympy.true if b else sympy.false, bool(b), self.env)

    def wrap_float(self, f):
        return _SymNode(sympy.Float(f), float(f), self.env)

    # arithmetic: (sympy of the two expressions, Python on the two hints)
    def _op(self, other, expr, hint):
        return _SymNode(expr, hint, self.env)

    def add(self, o):
        return self._op(o, self.expr + o.expr, self._hint + o._hint)

    def sub(self, o):
        return self._op(o, self.expr - o.expr, self._hint - o._hint)

    def mul(self, o):
        return self._op(o, self.expr * o.expr, self._hint * o._hint)

    def neg(self):
        return _SymNode(-self.expr, -self._hint, self.env)

    def sym_sum(self, terms):
        """torch.sym_sum: the sum of `terms` (this node is the first symbolic one of them)."""
        return _SymNode(sympy.Add(*(o.expr for o in terms)), sum(o._hint for o in terms), self.env)

    def floordiv(self, o):
        if not (self.is_int() and o.is_int()):
            raise NotImplementedError("float floor division of sizes")
        return self._op(o, FloorDiv(self.expr, o.expr), self._hint // o._hint)

    int_floordiv = floordiv

    def truediv(self, o):
        return self._op(o, self.expr / o.expr, self._hint / o._hint)

    def pow(self, o):
        return self._op(o, self.expr ** o.expr, self._hint ** o._hint)

    def sym_float(self):
        return _SymNode(self.expr, float(self._hint), self.env)

    def mod(self, o):
        return self._op(o, sympy.Mod(self.expr, o.expr), self._hint % o._hint)

    def sym_max(self, o):
        return self._op(o, sympy.Max(self.expr, o.expr), max(self._hint, o._hint))

    def sym_min(self, o):
        return self._op(o, sympy.Min(self.expr, o.expr), min(self._hint, o._hint))

    # relations and logic
    def _rel(self, o, rel, hint):
        return _SymRelation(rel, self.expr, o.expr, bool(hint), self.env)

    def eq(self, o):
        return self._rel(o, sympy.Eq, self._hint == o._hint)

    def ne(self, o):
        return self._rel(o, sympy.Ne, self._hint != o._hint)

    def lt(self, o):
        return self._rel(o, sympy.Lt, self._hint < o._hint)

    def le(self, o):
        return self._rel(o, sympy.Le, self._hint <= o._hint)

    def gt(self, o):
        return self._rel(o, sympy.Gt, self._hint > o._hint)

    def ge(self, o):
        return self._rel(o, sympy.Ge, self._hint >= o._hint)

    def sym_not(self):
        return _SymNode(sympy.Not(self.expr), not self._hint, self.env)

    def sym_and(self, o):
        return _SymNode(sympy.And(self.expr, o.expr), self._hint and o._hint, self.env)

    def sym_or(self, o):
        return _SymNode(sympy.Or(self.expr, o.expr), self._hint or o._hint, self.env)

    and_, or_ = sym_and, sym_or

    # decisions: answered on the hint, recorded
    def _decide(self, *args):
        return self.env.decide(self.expr, self._hint)

    guard_bool = guard_or_false = guard_or_true = guard_size_oblivious = expect_true = _decide

    def guard_int(self, *args):
        self.env.decide(sympy.Eq(self.expr, self._hint), True)
        return int(self._hint)

    def guard_float(self, *args):
        self.env.decide(sympy.Eq(self.expr, sympy.Rational(self._hint)), True)
        return float(self._hint)

    def expect_size(self, *args):
        self.env.decide(sympy.Ge(self.expr, 0), True)
        return True

    def statically_known_true(self, *args):
        return self.expr is sympy.true

    def int_(self):
        return self.guard_int()

    def bool_(self):
        return self._decide()


class _SymRelation(_SymNode):
    """A relation between two size expressions, built as sympy only when needed: meta kernels
    ask thousands of them (`size == 1` per dim per op), mostly the same few, and sympy's
    relational evaluation dominated the recording. A decision on one is recorded once."""

    def __init__(self, rel, a, b, hint: bool, env: "SizeEnv"):
        self.key = (rel, a, b)
        self._expr = None
        self._hint = hint
        self.env = env

    @property
    def expr(self):
        if self._expr is None:
            rel, a, b = self.key
            self._expr = sympy.true if a == b and rel in (sympy.Eq, sympy.Le, sympy.Ge) else rel(a, b)
        return self._expr

    def _decide(self, *args):
        known = self.env.decided.get(self.key)
        if known is None:
            known = self.env.decided[self.key] = self.env.decide(self.expr, self._hint)
        return known

    guard_bool = guard_or_false = guard_or_true = guard_size_oblivious = expect_true = _decide


class SizeEnv:
    """The symbols of one recording: their hints, the decisions taken on them, and the graph
    node each size expression is read or computed from."""

    def __init__(self):
        self.hints: Dict[sympy.Symbol, int] = {}
        self.decisions: Dict[Any, bool] = {}       # relation -> its value at the hints
        self.decided: Dict[tuple, bool] = {}       # (relation type, a, b) -> its decision
        self.nodes: Dict[Any, torch.fx.Node] = {}  # expression -> graph node computing it
        self.sources: Dict[sympy.Symbol, tuple] = {}   # symbol -> (input, "size"|"stride"|"int", dim)

    def symint(self, expr, hint) -> torch.SymInt:
        expr = sympy.sympify(expr)
        if expr.is_Integer:
            return int(expr)
        return torch.SymInt(_SymNode(expr, int(hint), self))

    def decide(self, rel, hint: bool) -> bool:
        rel = sympy.sympify(rel)
        if rel in (sympy.true, sympy.false):
            return bool(rel)
        if rel.free_symbols - set(self.hints):
            raise Unsupported(f"a decision on {rel} (symbols of no graph input)")
        self.decisions[rel] = bool(hint)
        return bool(hint)


def _sympy_of(v):
    """A size of a stand-in or a node record: sympy (or int) for a SymInt, else as is."""
    if isinstance(v, (torch.SymInt, torch.SymFloat, torch.SymBool)):
        e = v.node.expr
        return int(e) if e.is_Integer else e
    return v


def _expr(v):
    """A placeholder record's size (int, sympy, pydynamo.shapes.SymInt) as int or sympy."""
    v = getattr(v, "expr", v)
    if isinstance(v, sympy.Basic) and v.is_Integer:
        return int(v)
    return v


def _dims(ds) -> tuple:
    return tuple(_sympy_of(d) for d in ds)


@dataclasses.dataclass
class SizeSpec:
    """When a joint recorded with symbolic sizes serves a call: `admits(args)` binds each symbol
    from the input it was read from and checks every input's sizes and strides against the
    recorded expressions and every recorded decision (generated Python, `source`)."""
    symbols: Dict[sympy.Symbol, tuple]
    decisions: Dict[Any, bool]
    source: str
    admits: Any = None

    @staticmethod
    def build(values: list, env: SizeEnv) -> "SizeSpec":
        names = {s: s.name for s in env.sources}
        lines = ["def admits(args):"] + _bindings(env.sources)
        checks = []
        for i, v in enumerate(values):
            if isinstance(v, torch.Tensor):
                shape = ", ".join(_py_size(d, names) for d in v.shape)
                stride = ", ".join(_py_size(d, names) for d in v.stride())
                checks.append(f"tuple(args[{i}].shape) == ({shape}{',' if v.dim() == 1 else ''})")
                checks.append(f"args[{i}].stride() == ({stride}{',' if v.dim() == 1 else ''})")
            elif isinstance(v, torch.SymInt):
                checks.append(f"args[{i}] == {_py_size(v, names)}")
            elif isinstance(v, (bool, int, float)):
                # a number the graph does not read as a symbol is a constant of the recording
                checks.append(f"args[{i}] == {v!r}" if v == v and abs(v) != float("inf") else "False")
        for rel, value in env.decisions.items():
            text = sympy_str(rel, names)
            checks.append(f"({text})" if value else f"not ({text})")
        lines.append("    return " + " and \\\n        ".join(checks or ["True"]))
        source = "\n".join(lines)
        return SizeSpec(dict(env.sources), dict(env.decisions), source, _function(source, "admits"))

    def function(self, exprs):
        """args -> `exprs` (nested tuples of sizes) evaluated at the call's sizes."""
        names = {s: s.name for s in self.symbols}

        def text(e):
            if isinstance(e, (tuple, list)):
                return "(" + "".join(text(x) + ", " for x in e) + ")"
            return _py_size(e, names)
        source = "\n".join(["def at(args):"] + _bindings(self.symbols) + ["    return " + text(exprs)])
        return _function(source, "at")


def attach_sizes(joint: Joint, spec: SizeSpec) -> None:
    """`joint` serves the calls `spec` admits: the geometry of its aliased outputs and of its
    views' bases as functions of a call's sizes. Also how the warm cache rebuilds a stored
    joint (pydynamo/warm_cache.py: the spec stored without its generated functions, which
    are made again here from its source and expressions)."""
    if spec.admits is None:
        spec.admits = _function(spec.source, "admits")
    joint.sizes = spec
    for kind, a in joint.user_outputs:
        if kind == "alias" and a.kind != "input":
            a.at = spec.function((a.size, a.stride, a.offset))
    if joint.view_bases:
        keys = list(joint.view_bases)
        at = spec.function(tuple(joint.view_bases[k] for k in keys))
        joint.view_bases_at = lambda args: dict(zip(keys, at(args)))


def _bindings(sources) -> list:
    """Lines of generated Python reading each symbol from the call's arguments."""
    return [f"    {s.name} = " + {"size": f"args[{i}].shape[{d}]", "stride": f"args[{i}].stride({d})",
                                   "int": f"args[{i}]"}[kind]
            for s, (i, kind, d) in sources.items()]


def _function(source: str, name: str):
    scope: dict = {}
    exec(compile(source, f"<pydynamo joint sizes: {name}>", "exec"), scope)
    return scope[name]


def _py_size(d, names) -> str:
    e = _sympy_of(d)
    return str(e) if isinstance(e, int) else sympy_str(e, names)


def size_node(graph: torch.fx.Graph, expr, nodes: Dict[Any, torch.fx.Node], before=None):
    """The graph node computing the size expression `expr` from the nodes of its symbols
    (`nodes`: expression -> node, extended with what this adds); an int stays an int."""
    expr = sympy.sympify(expr)
    if expr.is_Integer:
        return int(expr)
    if expr in nodes:
        return nodes[expr]
    if isinstance(expr, sympy.Symbol):
        raise Unsupported(f"size symbol {expr} has no source in the graph")
    if isinstance(expr, (sympy.Add, sympy.Mul)):
        op = operator.add if isinstance(expr, sympy.Add) else operator.mul
        args = sorted(expr.args, key=sympy.default_sort_key)
        node, acc = size_node(graph, args[0], nodes, before), args[0]
        for a in args[1:]:
            acc = op(acc, a)
            node = _int_op(graph, op, node, size_node(graph, a, nodes, before), before)
            node.meta["val"] = acc
    elif isinstance(expr, FloorDiv):
        node = _int_op(graph, operator.floordiv, *(size_node(graph, a, nodes, before)
                                                   for a in expr.args), before)
    elif isinstance(expr, sympy.Mod):
        node = _int_op(graph, operator.mod, *(size_node(graph, a, nodes, before)
                                              for a in expr.args), before)
    elif isinstance(expr, (sympy.Max, sympy.Min)):
        fn = max if isinstance(expr, sympy.Max) else min
        args = sorted(expr.args, key=sympy.default_sort_key)
        node, acc = size_node(graph, args[0], nodes, before), args[0]
        for a in args[1:]:
            acc = type(expr)(acc, a)
            node = _int_op(graph, fn, node, size_node(graph, a, nodes, before), before)
            node.meta["val"] = acc
    elif isinstance(expr, sympy.Pow) and expr.exp.is_Integer and expr.exp > 0:
        base = size_node(graph, expr.base, nodes, before)
        node = base
        for _ in range(int(expr.exp) - 1):
            node = _int_op(graph, operator.mul, node, base, before)
    else:
        raise Unsupported(f"size expression {expr} in an op's arguments")
    if isinstance(node, torch.fx.Node):
        node.meta["val"] = expr
        nodes[expr] = node
    return node


def _int_op(graph, op, a, b, before):
    ctx = graph.inserting_before(before) if before is not None else contextlib.nullcontext()
    with ctx:
        n = graph.call_function(op, (a, b))
    return n


class _Mode(TorchDispatchMode):
    def __init__(self, recorder: "Recorder"):
        super().__init__()
        self.recorder = recorder


def _mode_dispatch(self, func, types, args=(), kwargs=None):
    return self.recorder.dispatch(func, args, kwargs or {})


# set after the class statement, not in it: torch wraps a __torch_dispatch__ defined in a mode's
# class body (at class creation) in a function whose first call imports torch's own tracing
# frontend (1.5-2.6 s of a cold training compile, issue 20); pydynamo never runs under that
# frontend, so the wrapper has nothing to do here (tests/cache/test_cold_imports.py)
_Mode.__torch_dispatch__ = _mode_dispatch


class Recorder:
    """Builds one Joint from a torch-level GraphModule and example inputs."""

    def __init__(self, gm: torch.fx.GraphModule, example_inputs: list, with_grad: bool = True,
                 symbolic: bool = False):
        self.source_gm = gm
        self.sizes: Optional[SizeEnv] = SizeEnv() if symbolic else None
        self.with_grad = with_grad
        self.examples = list(example_inputs)
        self.graph = torch.fx.Graph()
        self.root = torch.nn.Module()
        self.node_of: Dict[int, torch.fx.Node] = {}
        self.gen_of: Dict[int, int] = {}
        self.alive: list = []                  # every stand-in made: ids stay unique
        self.storages: Dict[int, _Storage] = {}
        self.constants: Dict[int, torch.fx.Node] = {}
        self.stack_trace: Optional[str] = None
        self.traces: List[tuple] = []          # (last autograd sequence nr of a node, its trace)
        self.placeholders: List[torch.fx.Node] = []
        self.bumped: set = set()               # storages an in-place op wrote visibly

    # --- stand-ins ---------------------------------------------------------------------------
    def _standins(self):
        """(values the graph runs on, tensors gradients are taken for) per graph input."""
        values, grad_wrt = [], []
        seen: Dict[int, int] = {}
        layouts = self._symbolic_layouts() if self.sizes is not None else {}
        for i, x in enumerate(self.examples):
            node = self.graph.placeholder(f"primal_{i}")
            self.placeholders.append(node)
            if not isinstance(x, torch.Tensor):
                if i in layouts:      # a symbolic int: the graph's symbol, read from this input
                    node.meta["val"] = layouts[i]
                    self.sizes.nodes.setdefault(layouts[i], node)
                    x = self.sizes.symint(layouts[i], x)
                else:
                    node.meta["val"] = x
                values.append(x)
                grad_wrt.append(None)
                continue
            if x.layout != torch.strided or x.is_quantized or x.is_nested or type(x) not in (
                    torch.Tensor, torch.nn.Parameter, torch.nn.Buffer):
                raise Unsupported(f"input {i}: {type(x).__name__} {x.layout}")
            key = _storage_key(x)
            if key in seen:
                raise Unsupported(f"inputs {seen[key]} and {i} share storage")
            seen[key] = i
            if i in layouts:
                shape, stride = layouts[i]
                elem = torch.empty_strided([self.sizes.symint(e, h) for e, h in zip(shape, x.shape)],
                                           [self.sizes.symint(e, h) for e, h in zip(stride, x.stride())],
                                           dtype=x.dtype, device="meta")
            else:
                elem = torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta")
            grad = x.requires_grad and self.with_grad
            leaf = _Traced(elem, x.device, requires_grad=grad)
            # a non-leaf input may be written in place, as in eager: run on a non-leaf clone
            # of the leaf gradients are taken for (made before recording: not in the graph)
            value = leaf.clone() if grad and x.grad_fn is not None else leaf
            self._bind(value, node, new_storage=True, input_index=i)
            node.meta["val"] = self._record(value.elem, x.device)
            values.append(value)
            grad_wrt.append(leaf if grad else None)
        return values, grad_wrt

    def _record(self, meta_t, device, is_view=False):
        if self.sizes is None:
            return TensorMeta.from_tensor(meta_t, device=device, is_view=is_view)
        return TensorMeta.from_tensor(meta_t, shape=_dims(meta_t.shape), stride=_dims(meta_t.stride()),
                                      storage_offset=_sympy_of(meta_t.storage_offset()),
                                      device=device, is_view=is_view)

    def _symbolic_layouts(self) -> dict:
        """Per graph input with symbolic sizes: (sizes, strides) as the forward graph's
        placeholders record them (a symbolic int input: its symbol). Each symbol gets its hint
        and the input it is read from (an int input first: the cheapest read); a graph node
        reads it there (`primal_i`, or `primal_i.size(d)` made here)."""
        env = self.sizes
        metas = [n.meta.get("val") for n in self.source_gm.graph.nodes if n.op == "placeholder"]
        if len(metas) != len(self.examples):
            raise Unsupported("placeholders and example inputs differ in number")
        layouts: dict = {}
        for i, (x, m) in enumerate(zip(self.examples, metas)):
            e = _expr(m)
            if isinstance(x, int) and not isinstance(x, bool) and isinstance(e, sympy.Symbol):
                layouts[i] = e
                env.sources.setdefault(e, (i, "int", None))
                env.hints.setdefault(e, x)
        for i, (x, m) in enumerate(zip(self.examples, metas)):
            if not isinstance(x, torch.Tensor) or not hasattr(m, "shape"):
                continue
            shape = [_expr(d) for d in m.shape]
            stride = m.stride() if callable(m.stride) else m.stride
            stride = [_expr(d) for d in stride]
            if len(shape) != x.dim() or len(stride) != x.dim():
                raise Unsupported(f"input {i}: its record's rank differs from the example's")
            if all(isinstance(d, int) for d in shape + stride):
                continue
            for kind, exprs, real in (("size", shape, x.shape), ("stride", stride, x.stride())):
                for d, (e, v) in enumerate(zip(exprs, real)):
                    if isinstance(e, sympy.Symbol) and e not in env.sources:
                        env.sources[e] = (i, kind, d)
                        env.hints[e] = int(v)
            layouts[i] = (shape, stride)
        for i, lay in layouts.items():
            pairs = [(lay, self.examples[i])] if isinstance(lay, sympy.Basic) else \
                list(zip(lay[0], self.examples[i].shape)) + list(zip(lay[1], self.examples[i].stride()))
            for e, v in pairs:
                e = sympy.sympify(e)
                if e.free_symbols - set(env.hints) or e.xreplace(env.hints) != v:
                    raise Unsupported(f"input {i}: size {e} is not {v} at the example")
        return layouts

    def _size_sources(self):
        """Graph nodes reading the symbols no int input gives (`primal_i.size(d)`), after the
        placeholders."""
        env = self.sizes
        for s, (i, kind, d) in env.sources.items():
            if s in env.nodes:
                continue
            node = self.graph.call_method(kind, (self.placeholders[i], d))
            node.meta["val"] = s
            env.nodes[s] = node

    def _bind(self, t: _Traced, node, *, new_storage=False, input_index=None):
        self.alive.append(t)
        self.node_of[id(t)] = node
        key = _storage_key(t.elem)
        st = self.storages.get(key)
        if st is None or new_storage:
            st = self.storages[key] = _Storage(t, input_index)
        self.gen_of[id(t)] = st.generation

    # --- reading a stand-in's current value ----------------------------------------------------
    def _storage(self, t: _Traced) -> _Storage:
        return self.storages[_storage_key(t.elem)]

    def current(self, t: _Traced) -> torch.fx.Node:
        st = self._storage(t)
        if self.gen_of[id(t)] == st.generation:
            return self.node_of[id(t)]
        # written through another alias since this value was taken: re-derive it
        offset = t.elem.storage_offset() - st.root.elem.storage_offset()
        node = self._call(aten.as_strided.default,
                          (st.flat, list(t.shape), list(t.stride()), offset), {},
                          self._record(t.elem, t.device, is_view=True))
        self.node_of[id(t)] = node
        self.gen_of[id(t)] = st.generation
        return node

    def _fresh(self, t: _Traced) -> torch.fx.Node:
        """t's current value as a tensor of its own: a value re-derived from its storage after a
        write through a view is a view of that storage; eager's is not."""
        node = self.current(t)
        if node.target is aten.as_strided.default and not t.elem._is_view():
            node = self._call(aten.clone.default, (node,), {}, self._record(t.elem, t.device))
        return node

    def _flat(self, st: _Storage) -> torch.fx.Node:
        if st.flat is not None:
            return st.flat
        root = st.root
        order = sorted(range(root.dim()), key=lambda d: -root.stride(d))
        dense = root.elem.permute(order).is_contiguous()
        if not dense:
            raise Unsupported("write through a view of a non-dense tensor")
        node = self.current(root)
        flat_meta = root.elem.permute(order).reshape(-1)
        if order != list(range(root.dim())):
            perm_meta = root.elem.permute(order)
            node = self._call(aten.permute.default, (node, order), {},
                              self._record(perm_meta, root.device, True))
        flat = self._call(aten.reshape.default, (node, [-1]), {},
                          self._record(flat_meta, root.device, True))
        # a fresh copy: as_strided_scatter and as_strided take offsets into the storage of the
        # tensor they are given, and a reshaped input keeps its own storage offset at run time
        st.flat = self._call(aten.clone.default, (flat,), {"memory_format": torch.contiguous_format},
                             self._record(flat_meta.contiguous(), root.device))
        return st.flat

    # --- recording --------------------------------------------------------------------------
    def _call(self, target, args, kwargs, val):
        if self.sizes is not None:      # a size of a stand-in (as_strided's): its graph node
            args, kwargs = self._sizes_in(args), self._sizes_in(kwargs)
        node = self.graph.call_function(target, tuple(args), dict(kwargs))
        node.meta["val"] = val
        node.meta["stack_trace"] = self._trace()
        return node

    def _sizes_in(self, v):
        if isinstance(v, torch.SymInt):
            return size_node(self.graph, v.node.expr, self.sizes.nodes)
        if isinstance(v, (list, tuple)):
            return type(v)(self._sizes_in(x) for x in v) if not hasattr(v, "_fields") else v
        if isinstance(v, dict):
            return {k: self._sizes_in(x) for k, x in v.items()}
        return v

    def _trace(self) -> Optional[str]:
        if self.stack_trace is not None:
            return self.stack_trace
        ag = torch._C._current_autograd_node()
        if ag is None or not self.traces:
            return None
        seq = ag._sequence_nr()
        i = bisect.bisect_left(self.traces, (seq, ""))
        return self.traces[min(i, len(self.traces) - 1)][1]

    def _arg(self, v):
        if isinstance(v, _Traced):
            return self.current(v)
        if isinstance(v, torch.Tensor):
            node = self.constants.get(id(v))
            if node is None:
                name = f"_tensor_constant{len(self.constants)}"
                setattr(self.root, name, v)
                with self.graph.inserting_before(self._first_op()):
                    node = self.graph.get_attr(name)
                node.meta["val"] = self._record(v.to("meta"), v.device)
                self.constants[id(v)] = node
                self.alive.append(v)
            return node
        if isinstance(v, torch.device) and v.type == "meta":
            raise Unsupported("an op named the meta device")
        if isinstance(v, torch.Size) and self.sizes is not None:
            return [self._arg(d) for d in v]
        if isinstance(v, torch.SymInt):
            return size_node(self.graph, v.node.expr, self.sizes.nodes)
        if isinstance(v, (torch.SymFloat, torch.SymBool)):
            raise Unsupported(f"a symbolic {type(v).__name__} argument")
        return v

    def _first_op(self):
        for n in self.graph.nodes:
            if n.op not in ("placeholder", "get_attr"):
                return n
        return None

    def dispatch(self, func, args, kwargs):
        writes = _written(func, args, kwargs)
        tensors = [a for a in _leaves((args, kwargs)) if isinstance(a, _Traced)]
        # the result's device: the op's device argument, else its first tensor argument's
        # (a constant the graph made counts: lift_fresh of a CUDA tensor answers on CUDA)
        first = next((a for a in _leaves((args, kwargs)) if isinstance(a, torch.Tensor)), None)
        device = kwargs.get("device") or (first.device if first is not None else torch.device("cpu"))
        meta_kwargs = dict(kwargs)
        if "device" in meta_kwargs:
            meta_kwargs["device"] = torch.device("meta")
        try:
            m_args, m_kwargs = _map(_elem, args), _map(_elem, meta_kwargs)
            # eager's answer without torch's Python references (whose first call imports torch's
            # tracing frontend: seconds of a cold training compile), where meta_direct knows it
            # (not with size symbols: its size comparisons would be recorded as decisions)
            out = _direct.call_aten(func, m_args, m_kwargs) if self.sizes is None else \
                func(*m_args, **m_kwargs)
        except Exception as e:
            raise Unsupported(f"{func} on meta tensors: {type(e).__name__}: {e}") from e
        # where the meta kernel answers for another device, the record follows the device
        out = device_results(func, args, torch.device(device), out)
        try:
            fargs, fkwargs = _map(self._arg, args), _map(self._arg, kwargs)
        except Unsupported as e:
            raise Unsupported(f"{func}: {e}") from None
        if writes:
            return self._mutation(func, args, kwargs, fargs, fkwargs, writes, out, device)
        return self._result(func, fargs, fkwargs, out, tensors, device)

    def _result(self, func, fargs, fkwargs, out, tensors, device):
        """A functional op: one node, its tensor results wrapped (views share their storage)."""
        in_storages = {_storage_key(t.elem) for t in tensors}
        outs = _leaves(out)
        vals = tuple(self._record(o, device, _storage_key(o) in in_storages)
                     if isinstance(o, torch.Tensor) else _sympy_of(o) for o in outs)
        if not isinstance(out, (tuple, list)):
            if not isinstance(out, torch.Tensor):
                raise Unsupported(f"{func} answers a {type(out).__name__}")
            if func in _SAME_VALUE and isinstance(fargs[0], torch.fx.Node):
                # autograd detaches what it saves: the same value, no node (the partition then
                # saves one tensor, not the tensor and its detached alias)
                return self._wrap(out, fargs[0], device, in_storages)
            node = self._call(func, fargs, fkwargs, vals[0])
            return self._wrap(out, node, device, in_storages)
        node = self._call(func, fargs, fkwargs, vals)
        wrapped = []
        for i, o in enumerate(out):
            if isinstance(o, torch.Tensor):
                item = self._call(operator.getitem, (node, i), {}, vals[i])
                wrapped.append(self._wrap(o, item, device, in_storages))
            else:
                wrapped.append(o)
        return type(out)(wrapped)

    def _wrap(self, o, node, device, in_storages):
        if o.is_conj() or o.is_neg():
            # a lazy conjugate/negative view (torch.conj of a complex tensor, fft.ifft's
            # internals): the stand-in would not carry the bit, and later ops would miss it
            raise Unsupported("a lazily conjugated or negated tensor (conj/neg bit)")
        t = _Traced(o, device)
        is_view = _storage_key(o) in in_storages
        if is_view:
            self._storage_of_meta(o).has_views = True
        self._bind(t, node, new_storage=not is_view)
        return t

    def _storage_of_meta(self, o):
        return self.storages[_storage_key(o)]

    def _mutation(self, func, args, kwargs, fargs, fkwargs, writes, out, device):
        """An op that writes some of its arguments: record its functional form, rebind each
        written stand-in to its new value."""
        written = [args[i] for i in writes]
        if not all(isinstance(w, _Traced) for w in written):
            raise Unsupported(f"{func} writes a tensor the graph does not own")
        for w in written:
            for a in _leaves((args, kwargs)):
                if isinstance(a, _Traced) and not any(a is x for x in written) and \
                        _storage_key(a.elem) == _storage_key(w.elem) and not _same_geometry(a, w):
                    # eager reads elements this op has already written (`x.add_(x[:, 0])`):
                    # its answer depends on the kernel's order, which no functional form keeps
                    raise Unsupported(f"{func} reads a tensor that overlaps the one it writes")
        functional = _FUNCTIONAL.get(func)
        own_outputs = None
        if functional is not None:      # the twin takes as positional what the op defaulted
            args, fargs = _with_defaults(func, args), _with_defaults(func, fargs)
        if functional is not None:
            op, n_own, where = functional
            res = op(*_map(_elem, args), **_map(_elem, kwargs))
            node = self._call(op, fargs, fkwargs, tuple(self._record(r, device) for r in res)
                              if isinstance(res, (tuple, list)) else self._record(res, device))
            if isinstance(res, (tuple, list)):
                items = [self._call(operator.getitem, (node, k), {}, self._record(r, device))
                         for k, r in enumerate(res)]
            else:
                items = [node]
            new_values = {i: items[where[i]] for i in writes}
            own_outputs = items[:n_own]
        else:
            twin = _twin(func)
            if twin is not None and writes == [0]:
                res = twin(*_map(_elem, args), **_map(_elem, kwargs))
                new_node = self._call(twin, fargs, fkwargs, self._record(res, device))
                new_node = self._keep_layout(args[0], new_node, res, device)
                new_values = {0: new_node}
                own_outputs = [new_node]
            else:
                # no functional form: the op writes a fresh clone of each written argument
                fargs = list(fargs)
                for i in writes:
                    w = args[i]
                    fargs[i] = self._call(aten.clone.default, (fargs[i],), {},
                                          self._record(w.elem, device))
                node = self._call(func, fargs, fkwargs, None)
                new_values = {i: fargs[i] for i in writes}
                if isinstance(out, (tuple, list)):
                    own_outputs = [self._call(operator.getitem, (node, k), {},
                                              self._record(o, device) if isinstance(o, torch.Tensor) else o)
                                   for k, o in enumerate(out)]
                else:
                    own_outputs = [node]
                # a written argument the op returns is read through the op's result, so every
                # later reader depends on the write (ordering, dead-code elimination)
                for k, r in enumerate(func._schema.returns):
                    if r.alias_info is not None and r.alias_info.is_write and k < len(own_outputs):
                        for i in writes:
                            if func._schema.arguments[i].alias_info.before_set == r.alias_info.before_set:
                                new_values[i] = own_outputs[k]
        for i, new in new_values.items():
            self._write(args[i], new)
            if not _unmarked(func, i):   # eager's in-place op bumps the version; batch norm's stats not
                self.bumped.add(_storage_key(args[i].elem))
        # the op's result: the written argument itself where the schema says so, else new tensors
        results = list(out) if isinstance(out, (tuple, list)) else [out]
        wrapped = []
        for k, (o, r) in enumerate(zip(results, func._schema.returns)):
            if r.alias_info is not None and r.alias_info.is_write:
                src = next(args[i] for i in writes
                           if func._schema.arguments[i].alias_info.before_set == r.alias_info.before_set)
                wrapped.append(src)
            elif isinstance(o, torch.Tensor):
                wrapped.append(self._wrap(o, own_outputs[k], device, set()))
            else:
                wrapped.append(o)
        if isinstance(out, (tuple, list)):
            return type(out)(wrapped)
        return wrapped[0] if wrapped else None

    def _keep_layout(self, w: _Traced, node, res, device):
        """The functional result in the written tensor's layout and dtype (eager writes in
        place: later ops see the written tensor's strides, and its dtype: `logical_not_` of an
        int64 tensor stays int64 where `logical_not` is bool); aten.copy keeps its first
        argument's layout and dtype."""
        if res.dtype == w.elem.dtype and (res.stride() == w.elem.stride() or w.numel() <= 1):
            return node
        return self._call(aten.copy.default, (self.current(w), node), {},
                          self._record(w.elem, device))

    def _write(self, w: _Traced, new: torch.fx.Node):
        st = self._storage(w)
        if not st.has_views and w is st.root:
            self.node_of[id(w)] = new        # no alias can see the old value: rebind
            return
        flat = self._flat(st)
        offset = w.elem.storage_offset() - st.root.elem.storage_offset()
        st.flat = self._call(aten.as_strided_scatter.default,
                             (flat, new, list(w.shape), list(w.stride()), offset), {},
                             flat.meta["val"])
        st.generation += 1
        self.node_of[id(w)] = new
        self.gen_of[id(w)] = st.generation

    # --- the whole recording -----------------------------------------------------------------
    def record(self) -> Joint:
        values, grad_wrt = self._standins()
        recorder = self

        class Run(torch.fx.Interpreter):
            def run_node(self, n):
                recorder.stack_trace = n.meta.get("stack_trace")
                try:
                    result = super().run_node(n)
                finally:
                    recorder.stack_trace = None
                for t in _leaves(result):
                    if isinstance(t, torch.Tensor) and t.grad_fn is not None:
                        recorder.traces.append((t.grad_fn._sequence_nr(), n.meta.get("stack_trace") or ""))
                return result

            def call_function(self, target, args, kwargs):
                if target in _MATMULS and _vector_operand(args, kwargs):
                    return _matmul_of_vectors(*args)
                return super().call_function(target, args, kwargs)

            def call_method(self, target, args, kwargs):
                if target in ("matmul", "__matmul__") and _vector_operand(args, kwargs):
                    return _matmul_of_vectors(*args)
                return super().call_method(target, args, kwargs)

        if self.sizes is not None:
            self._size_sources()
        grad_mode = torch.is_grad_enabled()
        try:
            with contextlib.ExitStack() as stack:
                if self.sizes is not None:
                    # torch's Python meta kernels and decompositions: the C++ ones of several
                    # ops (expand, ...) take concrete sizes only
                    stack.enter_context(enable_python_dispatcher())
                stack.enter_context(_Mode(self))
                stack.enter_context(torch.set_grad_enabled(self.with_grad))
                stack.enter_context(user_hooks_hidden())
                outs = Run(self.source_gm).run(*values)
                outs = list(outs) if isinstance(outs, (tuple, list)) else [outs]
                joint = self._finish(values, grad_wrt, outs)
        finally:
            torch.set_grad_enabled(grad_mode)
        if self.sizes is not None:
            attach_sizes(joint, SizeSpec.build(values, self.sizes))
            joint.gm.meta["size_hints"] = dict(self.sizes.hints)
            joint.gm.meta["size_nodes"] = {s: self.sizes.nodes[s] for s in self.sizes.sources}
        return joint

    def _finish(self, values, grad_wrt, outs) -> Joint:
        self.traces.sort()
        computed: List[torch.fx.Node] = []
        differentiable: List[bool] = []
        diff_values: List[torch.Tensor] = []
        mutated = []
        # inputs written in place: their final values are computed outputs
        for i, v in enumerate(values):
            if isinstance(v, _Traced):
                node = self.current(v)
                if node is not self.placeholders[i]:
                    mutated.append((i, len(computed), _storage_key(v.elem) in self.bumped))
                    computed.append(node)
                    d = v.requires_grad and v.dtype.is_floating_point
                    differentiable.append(d)
                    diff_values.append(v)
        user_outputs: List[Any] = []
        base_of: Dict[int, int] = {}            # storage -> computed index of its root
        view_bases: Dict[int, tuple] = {}       # computed index -> (size, stride) views assume
        for o in outs:
            if not isinstance(o, _Traced):
                if isinstance(o, torch.Tensor):
                    raise Unsupported("the graph returns a tensor it did not trace")
                user_outputs.append(("const", o))
                continue
            if o.requires_grad and o.grad_fn is None and not any(o is g for g in grad_wrt):
                # `t.requires_grad_()` in the graph: eager returns a new leaf, whose .grad the
                # backward fills; a Function's output never is one
                raise Unsupported("the graph returns a leaf it made (requires_grad_)")
            st = self._storage(o)
            rel = o.elem.storage_offset() - st.root.elem.storage_offset()
            if o.dtype != st.root.dtype and (st.input_index is not None or st.has_views):
                raise Unsupported("an output views its storage as another dtype (view_as_complex)")
            if st.input_index is not None:
                src = values[st.input_index]
                if o is src:
                    user_outputs.append(("alias", OutputAlias("input", st.input_index)))
                else:
                    user_outputs.append(("alias", OutputAlias(
                        "input_view", st.input_index, _dims(o.shape), _dims(o.stride()), _sympy_of(rel),
                        detached=src.requires_grad and not o.requires_grad)))
                continue
            if o is st.root and not st.has_views:
                user_outputs.append(("computed", len(computed)))
                computed.append(self._fresh(o))
                differentiable.append(_differentiable(o))
                diff_values.append(o)
                continue
            # a tensor whose storage other tensors share: eager's value is its storage's root or
            # a view of it; the root is computed (returned or not) and each output on it is
            # rebuilt as its view, so outputs alias each other as in eager, `_base` included
            key = _storage_key(o.elem)
            if key not in base_of:
                base_of[key] = len(computed)
                computed.append(self._fresh(st.root))
                differentiable.append(_differentiable(st.root))
                diff_values.append(st.root)
                view_bases[base_of[key]] = (_dims(st.root.shape), _dims(st.root.stride()))
            k = base_of[key]
            if o is st.root:
                user_outputs.append(("computed", k))
            else:
                user_outputs.append(("alias", OutputAlias(
                    "output_view", k, _dims(o.shape), _dims(o.stride()), _sympy_of(rel),
                    detached=st.root.requires_grad and not o.requires_grad)))
        # tangents, then the backward
        tangents, outputs = [], []
        first = self._first_op()
        for k, (d, v) in enumerate(zip(differentiable, diff_values)):
            if not d:
                continue
            with _disable_current_modes():     # a stand-in, not an op of the graph
                elem = torch.empty(v.shape, dtype=v.dtype, device="meta")
                t = _Traced(elem, v.device)
            with self.graph.inserting_before(first):
                node = self.graph.placeholder(f"tangent_{len(tangents)}")
            node.meta["val"] = self._record(elem, v.device)
            self._bind(t, node, new_storage=True)
            tangents.append(t)
            outputs.append(v)
        wrt = [g for g in grad_wrt if g is not None]
        grads: List[Optional[torch.Tensor]] = []
        if outputs and wrt:
            grads = list(torch.autograd.grad(outputs, wrt, tangents, allow_unused=True))
        grad_nodes: List[Optional[torch.fx.Node]] = []
        it = iter(grads)
        for g in grad_wrt:
            if g is None:
                grad_nodes.append(None)
                continue
            r = next(it, None)
            grad_nodes.append(self.current(r) if isinstance(r, _Traced) else None)
        self.graph.output(tuple(computed) + tuple(grad_nodes))
        gm = torch.fx.GraphModule(self.root, self.graph)
        return Joint(gm, len(values), computed, differentiable, mutated, user_outputs,
                     [g is not None for g in grad_nodes], len(tangents), view_bases)


_MATMULS = (torch.matmul, torch.Tensor.matmul, torch.Tensor.__matmul__, __import__("operator").matmul)


@contextlib.contextmanager
def user_hooks_hidden():
    """The user's saved-tensor hooks (activation offloading, checkpointing) are for the tensors
    autograd saves when compiled code runs, not for tracing's meta examples or the recorder's
    stand-ins: called on those, a hook reading data raised at every op (a graph break each) and
    its own frame was traced. They are taken off autograd's stack for the while and put back.
    (Not replaced by identity hooks: with any hooks autograd skips its check that a saved
    tensor was not modified in place, and the recorder relies on eager's error there.)"""
    ag = torch._C._autograd
    taken = []
    while ag._top_saved_tensors_default_hooks(False) is not None:
        taken.append(ag._top_saved_tensors_default_hooks(False))
        ag._pop_saved_tensors_default_hooks()
    try:
        yield
    finally:
        for pack, unpack in reversed(taken):
            ag._push_saved_tensors_default_hooks(pack, unpack)


def _vector_operand(args, kwargs) -> bool:
    return not kwargs and len(args) == 2 and all(isinstance(a, torch.Tensor) for a in args) and \
        any(a.dim() == 1 for a in args)


def _matmul_of_vectors(a, b):
    """matmul with a 1-D operand, as its documented semantics (a vector gets a dim of size 1,
    removed from the result) in out-of-place ops: eager's own composite squeezes a fresh result
    in place (`squeeze_`), a layout change the recorder cannot follow on its stand-ins."""
    if a.dim() == 1 and b.dim() == 1:
        return torch.dot(a, b)
    if a.dim() == 1:
        return torch.matmul(a.unsqueeze(0), b).squeeze(-2)
    return torch.matmul(a, b.unsqueeze(-1)).squeeze(-1)


def _same_geometry(a: torch.Tensor, b: torch.Tensor) -> bool:
    return a.shape == b.shape and a.stride() == b.stride() and \
        a.elem.storage_offset() == b.elem.storage_offset()


def _differentiable(t: torch.Tensor) -> bool:
    return t.requires_grad and (t.dtype.is_floating_point or t.dtype.is_complex)


def _with_defaults(func, args) -> tuple:
    """`args` extended with the schema's defaults of the positional arguments not given."""
    out = list(args)
    for a in func._schema.arguments[len(out):]:
        if a.kwarg_only:
            break
        out.append(a.default_value)
    return tuple(out)


def _order(t: torch.Tensor) -> list:
    return sorted(range(t.dim()), key=lambda d: -t.stride(d))


def _twin(func):
    """The functional overload of an in-place op: `add_.Tensor` -> `add.Tensor` (same arguments)."""
    name = func.overloadpacket.__name__
    if not name.endswith("_") or name.endswith("__"):
        return None
    packet = getattr(aten, name[:-1], None)
    if packet is None:
        return None
    twin = getattr(packet, func._overloadname, None)
    if twin is None:
        return None
    a, b = func._schema.arguments, twin._schema.arguments
    if [x.name for x in a] != [x.name for x in b]:
        return None
    return twin


def record(gm: torch.fx.GraphModule, example_inputs: list, with_grad: bool = True) -> Joint:
    """The joint graph of `gm` at `example_inputs` (raises Unsupported). `with_grad=False`: the
    forward alone, functionalized, for inference (no tangents, no gradients). A graph whose
    placeholders have symbolic sizes, training or inference, is recorded over its symbols
    (`Joint.sizes` says which calls it serves); where that recording fails, at the example's
    sizes (logged)."""
    if has_symbolic_inputs(gm):
        try:
            return Recorder(gm, example_inputs, with_grad, symbolic=True).record()
        except Exception as e:
            logs.log("aot", "joint graph recorded at concrete sizes: symbolic recording failed "
                     "(%s: %s)", type(e).__name__, e)
    return Recorder(gm, example_inputs, with_grad).record()



def has_symbolic_inputs(gm) -> bool:
    """Whether a placeholder's record has a symbolic size or is a symbolic int."""
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(_expr(v), sympy.Basic) and not isinstance(_expr(v), sympy.Integer):
            return True
        dims = tuple(getattr(v, "shape", ()) or ())
        st = getattr(v, "stride", ()) or ()
        dims += tuple(st() if callable(st) else st)
        if any(isinstance(_expr(d), sympy.Basic) for d in dims):
            return True
    return False

"""GraphLowering: walks an FX graph and builds the loop IR.

One handler per FX node kind (placeholder, get_attr, call_*, output). A call node is
canonicalized, lowered, and its result checked against the node's metadata (shape and dtype
from `meta["val"]` when the tracer supplied it, else from `propagate_meta`, a run on meta
tensors or copies: the user's tensors only ever go through the compiled code); any failure
or mismatch turns that node into an extern call of the eager op, so the graph always
compiles. Mutations are functionalized for unaliased values: an in-place op on a graph input
rebinds the input's value and records a write-back the wrapper performs after all kernels
ran; mutations we cannot prove safe (on views, on aliased tensors, setitem, out=) raise
`EagerFallback` for the whole graph.
"""
from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import sympy
import torch
import torch.fx
from torch.fx.passes.shape_prop import TensorMetadata

from codegen.canonical import OPERATORS, VIEW_OPS, Canonical, _canon_name, canonicalize
from pydynamo import meta_direct as _direct
from pydynamo.meta import device_results
from pydynamo.mutation import node_mutation
from codegen.ir import (ArgRef, ComputedBuffer, ExternBuffer, ExternCall, InputBuffer, Layout,
                        NewViewRef,
                        NotLowered, TensorValue, current, realize, strided_view_of)
from codegen.lowering import LOWERINGS
from codegen.view_lowerings import _decided, view_strides
from codegen.ops import as_single_load, collect_deps
from codegen.scalars import RuntimeScalars, SpecializeFloats, has_scalar, scalar_symbols
from codegen.sizevars import contiguous_strides, product
from pydynamo.symbols import FloorDiv, canonical_size, loop_vars, pyexpr
from codegen.symbolic import SymbolicSizes, as_sympy, meta_stride, symbolic_extern_layouts

log = logging.getLogger("pydynamo.codegen")


class EagerFallback(Exception):
    """The whole graph must run eagerly (reason in the message)."""


# what a lowering raises for an op it cannot express (a symbolic count, an unsupported
# argument): the op then runs as an extern
_LOWERING_ERRORS = (NotLowered, TypeError, ValueError, IndexError, KeyError, NotImplementedError,
                    AttributeError, ZeroDivisionError, RuntimeError)


@dataclass
class Mutation:
    position: int           # placeholder index
    value: TensorValue      # final value to write back


@dataclass
class LoweringStats:
    native: int = 0
    extern: int = 0
    extern_reasons: Dict[str, str] = field(default_factory=dict)


def _node_meta(node):
    val = node.meta.get("val")
    if val is not None:
        return val
    return node.meta.get("tensor_meta")


def propagate_meta(gm, example_inputs) -> Dict[torch.fx.Node, Any]:
    """{node: its result's metadata (meta tensors)} for a graph that carries none, from a run
    on stand-ins for the example inputs, never on the inputs themselves: the graph's in-place
    ops would then run on the user's tensors (and parameters) once here and again in the
    compiled code. Stand-ins are meta tensors of the inputs' size, stride and storage offset;
    where an op cannot run on meta (data-dependent sizes, .item(), a module with real
    parameters), copies of the inputs, with the RNG state restored afterwards. The result is
    kept beside the graph, never written into its nodes (a later compile of the same graph
    with other inputs must not read it as the tracer's)."""
    with torch.no_grad():
        try:
            return _MetaProp(gm, on_meta=True).propagate(example_inputs)
        except Exception as e:
            log.debug("codegen: metadata on meta tensors failed (%s); using copies", e)
        devices = sorted({t.device.index or 0 for t in example_inputs
                          if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices):
            return _MetaProp(gm, on_meta=False).propagate(example_inputs)


class _MetaProp(torch.fx.Interpreter):
    """Runs a graph on stand-ins (see propagate_meta) and records each node's result as meta
    tensors. Constants (get_attr) get stand-ins too, so no op here writes a real tensor."""

    def __init__(self, gm, on_meta: bool):
        super().__init__(gm)
        self.on_meta = on_meta
        self.meta: Dict[torch.fx.Node, Any] = {}

    def propagate(self, example_inputs):
        # the device the graph's ops run on: where a meta kernel answers for another device
        # (norm statistics of half inputs on CPU), pydynamo.meta.device_results corrects it
        self.device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)),
                           None)
        self.run(*[_stand_in(x, self.on_meta) for x in example_inputs])
        return self.meta

    def call_function(self, target, args, kwargs):
        out = super().call_function(target, args, kwargs)
        return device_results(target, args, self.device, out) if self.on_meta else out

    def run_node(self, n):
        result = super().run_node(n)
        if _has_real_tensor(result):
            self.meta[n] = _as_meta(result)
        return result

    def get_attr(self, target, args, kwargs):
        return _stand_in(super().get_attr(target, args, kwargs), self.on_meta)


def _stand_in(x, on_meta: bool):
    """A tensor of `x`'s size, stride, storage offset and dtype: on meta, or a copy of `x`'s
    values in fresh memory."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.layout != torch.strided:
        return x.clone() if not on_meta else x.to("meta")
    numel = x.untyped_storage().nbytes() // max(x.element_size(), 1)
    base = torch.empty(numel, dtype=x.dtype, device="meta" if on_meta else x.device)
    out = base.as_strided(x.shape, x.stride(), x.storage_offset())
    if not on_meta:
        try:
            out.copy_(x)
        except RuntimeError:       # an overlapping layout (expanded): a dense copy will do
            out = x.clone()
    return out


def _as_meta(r):
    if isinstance(r, torch.Tensor):
        if r.layout != torch.strided:
            return r.to("meta")
        return torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device="meta")
    if isinstance(r, (list, tuple)):
        return tuple(_as_meta(x) for x in r) if hasattr(r, "_fields") else \
            type(r)(_as_meta(x) for x in r)
    return r


def _has_real_tensor(r) -> bool:
    if isinstance(r, torch.Tensor):
        return True
    return isinstance(r, (list, tuple)) and any(_has_real_tensor(x) for x in r)


# lowerings that are extern calls: their arguments are materialized in memory
# `x @ w` reaches the graph as operator.matmul: lowered by codegen/gemm.py's matmul (its
# (..., M, K) @ (K, N) cases; the rest raise NotLowered and stay eager's)
OPERATORS.setdefault(operator.matmul, "matmul")
# the most ops a value with several readers may cost and still be recomputed by each reader
# (`_recomputed_by_readers`): GELU's tanh chain over its input is 6
RECOMPUTE_COST = 8
EXTERN_LOWERINGS = ("linear", "addmm", "mm", "matmul", "scaled_dot_product_attention")


class GraphLowering:
    def __init__(self, gm: torch.fx.GraphModule, example_inputs: List[Any], dynamic=None,
                 specialize_floats=False, backend=None):
        self.gm = gm
        # the kernel target (codegen/pipeline.py Backend): the dtypes and device types that lower
        # natively (others stay extern), the device factories may name, and the decomposition
        # choices (read as current.graph.backend)
        self.backend = backend
        self.devices, self.device = backend.devices, backend.device
        # float inputs: kernel arguments (codegen/scalars.py), or, when a float reached a size
        # or index on the first attempt, compile-time constants checked at each call
        self.specialize_floats = specialize_floats
        self.scalars = RuntimeScalars()
        # {placeholder index: [dims]} whose sizes are symbols s0, s1, ... in the IR (kernels
        # take them as arguments); placeholder meta["val"] with sympy sizes does the same.
        self.dynamic = dict(dynamic or {})
        self.sizes = SymbolicSizes()
        for n in gm.graph.nodes:       # executor symbol names are taken before ours are made
            if n.op == "placeholder":
                self.sizes.taken |= {s.name for s in _meta_symbols(n.meta.get("val"))}
        self.example_inputs = list(example_inputs)
        self.buffers: List[Any] = []          # ComputedBuffer / ExternCall, in program order
        self.buffers_by_name: Dict[str, Any] = {}
        self.inputs: List[InputBuffer] = []   # placeholders (tensor ones)
        self.scalar_inputs: Dict[int, Any] = {}
        self.size_args: Dict[int, sympy.Expr] = {}    # int placeholders that are size symbols
        self.constants: List[InputBuffer] = []
        self._const_ids: Dict[int, InputBuffer] = {}
        self.env: Dict[torch.fx.Node, Any] = {}
        # epilogue nodes a GEMM extern computes (codegen/gemm.py): node -> the fused value
        self.absorbed: Dict[torch.fx.Node, Any] = {}
        self.outputs: List[Any] = []
        self.mutations: Dict[int, Mutation] = {}
        self.input_alias: Dict[torch.fx.Node, int] = {}   # node -> placeholder it is (in place)
        self.stats = LoweringStats()
        self.current_node: Optional[torch.fx.Node] = None
        self._n = 0
        self.needs_grad_params = False
        self._concrete_meta = False
        self.prop_meta: Dict[torch.fx.Node, Any] = {}   # propagate_meta's, for a bare graph

    def _meta(self, node):
        """The node's result metadata: the tracer's, or propagate_meta's."""
        m = _node_meta(node)
        return m if m is not None else self.prop_meta.get(node)

    @property
    def size_hints(self) -> Dict[sympy.Symbol, int]:
        return self.sizes.hints

    @property
    def size_bindings(self) -> Dict[sympy.Symbol, str]:
        """symbol -> Python source the wrapper reads it from (`arg0.shape[1]`, `arg2`)"""
        return self.sizes.bindings

    # ------------------------------------------------------------ buffers
    def _name(self, prefix="buf"):
        self._n += 1
        return f"{prefix}{self._n - 1}"

    def _origins(self):
        return [self.current_node] if self.current_node is not None else []

    def new_computed(self, size, dtype, data, origins=None) -> ComputedBuffer:
        origins = list(origins or [])
        for o in self._origins():
            if o not in origins:
                origins.append(o)
        buf = ComputedBuffer(self._name(), Layout.contiguous(size, dtype), origins, data)
        self.buffers.append(buf)
        self.buffers_by_name[buf.name] = buf
        return buf

    def new_aux(self, owner: ComputedBuffer) -> ComputedBuffer:
        aux = ComputedBuffer(self._name(), Layout.contiguous(owner.layout.size, owner.dtype),
                             owner.origins, None)
        self.buffers_by_name[aux.name] = aux
        return aux

    def constant_tensor(self, t: torch.Tensor) -> TensorValue:
        key = id(t)
        if key not in self._const_ids:
            if t.dtype not in self.backend.dtypes or t.device.type not in self.devices or t.is_sparse:
                raise NotLowered("constant dtype/device")
            if t.requires_grad:
                self.needs_grad_params = True
            buf = InputBuffer(self._name("const"), Layout([sympy.Integer(s) for s in t.shape],
                                                          [sympy.Integer(s) for s in t.stride()],
                                                          t.dtype), [], "constant", -1, t)
            self.constants.append(buf)
            self._const_ids[key] = buf
            self.buffers_by_name[buf.name] = buf
        return TensorValue.of_buffer(self._const_ids[key])

    # ------------------------------------------------------------ externs
    def _recomputed_by_readers(self, v: TensorValue, node) -> bool:
        """A value with several readers left inlined in each (Backend.recompute_shared): at
        most RECOMPUTE_COST ops over one buffer, nothing that can raise or index indirectly,
        and no reader larger than the value: a broadcast one (a rotary table read by every
        head's query and key) would be computed again for every element it is spread over
        (Llama's rotary kernel took 117 us instead of 71 on an H100)."""
        if not self.backend.recompute_shared or v.cost > RECOMPUTE_COST:
            return False
        size = self.hint(product(v.size))
        for u in node.users:
            shape = getattr(self._meta(u), "shape", None)
            if shape is None or self.hint(product(list(shape))) > size:
                return False
        deps = collect_deps(v.loader, loop_vars("q", v.ndim))
        return len(deps.read_names) <= 1 and not deps.may_raise

    def to_arg(self, v):
        """A lowering value -> what an extern call receives (ArgRef for tensors)."""
        if isinstance(v, TensorValue):
            ref = strided_view_of(v)
            if ref is None and v.view_of is not None:
                source, view = v.view_of
                ref = strided_view_of(view(realize(source)))
            if ref is None or any(self.hint(st) < 0 for st in ref.stride):
                ref = strided_view_of(realize(v))   # (torch.as_strided refuses negative strides)
            return ref
        if isinstance(v, (list, tuple)):
            return type(v)(self.to_arg(x) for x in v)
        if isinstance(v, dict):
            return {k: self.to_arg(x) for k, x in v.items()}
        if isinstance(v, slice):
            return slice(self.to_arg(v.start), self.to_arg(v.stop), self.to_arg(v.step))
        if isinstance(v, sympy.Expr):
            if has_scalar(v):
                if not isinstance(v, sympy.Symbol):
                    raise NotLowered(f"expression {v} of a runtime float")
                return v                  # the wrapper's local: this call's value
            if v.is_Integer:
                return int(v)
            if v.is_Float:
                return float(v)
            if not v.is_integer:
                raise NotLowered("symbolic non-integer argument to extern")
            return canonical_size(v)      # computed by the wrapper from the size symbols
        return v

    def call_extern(self, target, args, kwargs, meta=None):
        """Run `target` eagerly from the wrapper; returns TensorValue(s) over its outputs."""
        args, kwargs = self.to_arg(tuple(args)), self.to_arg(dict(kwargs))
        call = ExternCall(target, args, kwargs, self.current_node)
        out_meta = self._extern_meta(target, args, kwargs, meta)
        symbolic = self._symbolic_extern(target, args, kwargs, out_meta, meta)

        def build(m, path):
            if isinstance(m, (list, tuple)) and not _is_tensor_meta(m):
                return type(m)(build(x, path + (i,)) for i, x in enumerate(m))
            if path and (m is None or isinstance(m, (int, float, bool))):
                return m   # None or a scalar beside tensors (attention's max_q): not a tensor output
            if m is None or not _is_tensor_meta(m):
                raise NotLowered("extern returned a non-tensor")
            stride = meta_stride(m)
            if getattr(m, "layout", torch.strided) != torch.strided or \
                    len(stride or ()) != len(m.shape):
                raise EagerFallback("an op returns a non-strided (sparse/nested) tensor")
            size, stride = symbolic.get(path, (m.shape, stride))
            lay = Layout([sympy.sympify(s) for s in size], [sympy.sympify(s) for s in stride],
                         m.dtype)
            b = ExternBuffer(self._name(), lay, self._origins(), call, path)
            call.outputs.append(b)
            self.buffers_by_name[b.name] = b
            return TensorValue.of_buffer(b)
        result = build(out_meta, ())
        self.buffers.append(call)
        return result

    def bias_in_extern(self) -> bool:
        """Add a matmul's row bias inside the extern (cuBLAS's bias epilogue, free) rather than as
        pointwise work, when the biased product has to be written to memory anyway: some consumer
        (through views) is another extern (attention, a matmul) or a graph output. When every
        consumer is a kernel, the add fuses into it instead (GELU, residual + LayerNorm), which
        saves the extern's extra read. Backend.extern_epilogues (CPU's addmm and cuBLAS alike);
        asked by the linear/addmm decompositions about the node being lowered."""
        return self.written_anyway(self.current_node)

    @staticmethod
    def canon_name(node):
        return _canon_name(node)

    def written_anyway(self, node) -> bool:
        """Must `node`'s result be written to memory whatever the fusion (some consumer, through
        views, is an extern or the graph's output)? Then a pointwise epilogue on it is a kernel
        of its own unless the extern producing it takes it (codegen/gemm.py's rule)."""
        if not self.backend.extern_epilogues or node is None:
            return False
        todo, seen = list(node.users), set()
        while todo:
            u = todo.pop()
            if u in seen:
                continue
            seen.add(u)
            name = _canon_name(u) if u.op in ("call_function", "call_method") else None
            if u.op == "call_function" and u.target is operator.getitem or name in VIEW_OPS:
                todo.extend(u.users)
            elif name is None or name in EXTERN_LOWERINGS:
                return True             # an extern, a module call or the output reads it
        return False

    def _extern_meta(self, target, args, kwargs, meta):
        probed = _probe_layout(target, args, kwargs, self.device or torch.device("cpu"))
        if probed is not None:
            return probed
        if meta is not None and isinstance(target, torch._ops.OpOverload) and \
                not _symbolic_record(meta):
            # a recorded aten graph's record follows the device's kernel where its meta
            # kernel disagrees (CPU batch norm's empty saved statistics in evaluation); one
            # recorded with symbolic sizes is run on meta tensors at the hints, like the op
            # of any graph, and its record says the symbolic sizes (_symbolic_extern)
            return meta
        try:
            return self._run_on_meta(target, args, kwargs, self.size_hints)
        except Exception:
            if meta is None:
                raise NotLowered("extern output layout unknown")
            return meta

    def _run_on_meta(self, target, args, kwargs, assign):
        """`target` on meta tensors, with size symbols set to `assign`."""
        subs = {s: sympy.Integer(v) for s, v in assign.items()}

        def num(e):
            if has_scalar(e):
                return self.scalars.hint_of(e)
            return int(sympy.sympify(e).xreplace(subs))

        def to_meta(a):
            if isinstance(a, ArgRef):
                return torch.empty_strided([num(s) for s in a.size], [num(s) for s in a.stride],
                                           dtype=a.buffer.dtype, device="meta")
            if isinstance(a, sympy.Expr):
                return num(a)
            if isinstance(a, (list, tuple)):
                return type(a)(to_meta(x) for x in a)
            if isinstance(a, dict):
                return {k: to_meta(x) for k, x in a.items()}
            if isinstance(a, slice):
                return slice(to_meta(a.start), to_meta(a.stop), to_meta(a.step))
            return a
        margs = to_meta(args)
        device = self.backend.device or torch.device(self.devices[0])
        # where the meta kernel answers for another device (norm statistics of half inputs on
        # CPU), the layout follows the device's kernel, as the graph's metadata does
        mkwargs = to_meta(kwargs)
        out = _direct.run(target, margs, mkwargs)   # eager's answer without torch's Python refs
        return _as_meta(device_results(target, margs, device,
                                       target(*margs, **mkwargs) if out is None else out))

    def _symbolic_extern(self, target, args, kwargs, out_meta, meta):
        """{output path: (size, stride)} in size symbols when the arguments have symbolic
        sizes (codegen/symbolic.py); the wrapper re-checks the real result's shape."""
        refs = _refs((args, kwargs))
        scalars = [x for x in _flat((args, kwargs)) if isinstance(x, sympy.Expr) and not x.is_number
                   and not has_scalar(x)]
        if not scalars and all(sympy.sympify(x).is_number for r in refs
                               for x in r.size + r.stride + (r.offset,)):
            return {}
        try:
            return symbolic_extern_layouts(
                self.sizes, lambda assign: self._run_on_meta(target, args, kwargs, assign),
                refs, scalars, out_meta, None if self._concrete_meta else meta)
        except Exception as e:
            raise EagerFallback(f"extern {getattr(target, '__name__', target)} on dynamic sizes: "
                                f"output sizes unknown ({e})")

    # ------------------------------------------------------------ driver
    def run(self):
        self._check_global_state()
        self._check_mutations()
        if not any("val" in n.meta or "tensor_meta" in n.meta for n in self.gm.graph.nodes
                   if n.op.startswith("call")):
            # a foreign graph without metadata (fx.symbolic_trace, a hand-built one)
            self.prop_meta = propagate_meta(self.gm, self.example_inputs)
            self._concrete_meta = True     # example sizes only: never symbolic evidence
        prev = current.graph
        current.graph = self
        try:
            for node in self.gm.graph.nodes:
                self.current_node = node
                if node in self.absorbed:      # an epilogue a GEMM extern took (codegen/gemm.py)
                    self.env[node] = self.absorbed.pop(node)
                    continue
                self.env[node] = HANDLERS[node.op](self, node)
        finally:
            current.graph = prev
            self.current_node = None
        floats = scalar_symbols(x for b in self.buffers_by_name.values()
                                for x in list(b.layout.size) + list(b.layout.stride) +
                                [b.layout.offset])
        if floats:
            raise SpecializeFloats(f"float inputs {sorted(s.name for s in floats)} in a tensor size")
        loose = self.sizes.unbound(x for b in self.buffers_by_name.values()
                                   for x in list(b.layout.size) + list(b.layout.stride))
        if loose:
            raise EagerFallback(f"size symbols {sorted(s.name for s in loose)} cannot be read "
                                f"from the inputs")
        return self

    def _check_global_state(self):
        """Kernels are lowered with the dtypes of a graph without autocast; a graph that enters
        an autocast region (torch.autocast traced: its ops' casts happen in the dispatcher, not
        in the graph) runs eagerly, which reproduces eager's dtypes exactly."""
        for n in self.gm.graph.nodes:
            if n.op == "call_function" and getattr(n.target, "__name__", "") in _AUTOCAST_NODES:
                raise EagerFallback("the graph enters a torch.autocast region")
        if torch._C._is_any_autocast_enabled():
            # traced (and, by the tracer's guards, always called) under an ambient autocast
            raise EagerFallback("the graph is compiled under torch.autocast")

    def _check_mutations(self):
        """Refuse graphs whose mutations we cannot functionalize exactly."""
        aliased = set()
        for n in self.gm.graph.nodes:
            if n.op in ("call_method", "call_function") and _canon_name(n) in VIEW_OPS:
                aliased.add(n)
                for a in n.all_input_nodes:
                    aliased.add(a)
            elif n.op in ("call_method", "call_function", "call_module") and \
                    _canon_name(n) is None and n.target is not operator.getitem:
                # unknown ops may return views of their inputs
                aliased.add(n)
                aliased.update(n.all_input_nodes)
        for n in self.gm.graph.nodes:
            mutation = node_mutation(n, self.gm)   # pydynamo's one record of in-place semantics
            if mutation is None:
                continue
            why = _mutates_arguments(n, mutation)
            if why:
                raise EagerFallback(why)
            target = n.args[0] if n.args else None
            if not isinstance(target, torch.fx.Node) or target in aliased or \
                    target.op == "get_attr" or _canon_name(n) is None:
                raise EagerFallback(f"in-place {n.target} on a value that may be aliased")

    # ------------------------------------------------------------ node handlers
    def placeholder(self, node):
        pos = len(self.inputs) + len(self.scalar_inputs)
        ex = self.example_inputs[pos]
        if not isinstance(ex, torch.Tensor):
            self.scalar_inputs[pos] = ex
            if type(ex) is float and not self.specialize_floats:
                return self.scalars.input(pos, ex)
            symbol = self.sizes.int_input(pos, ex, node.meta.get("val"))
            if symbol is not None:        # an int placeholder the executor made for a size
                self.size_args[pos] = symbol
                return symbol
            return ex
        if ex.dtype not in self.backend.dtypes or ex.device.type not in self.devices or ex.layout != torch.strided:
            # a CPU scalar in a device graph is split off first (codegen/host_scalars.py): why not
            why = self.gm.meta.get("host_scalar_refusal")
            raise EagerFallback(f"input {node.name}: {ex.dtype} on {ex.device}" +
                                (f" (not split off as a host scalar: {why})" if why else ""))
        buf = InputBuffer(f"arg{pos}", self._input_layout(node, pos, ex), [node], "input", pos)
        self.inputs.append(buf)
        self.buffers_by_name[buf.name] = buf
        self.input_alias[node] = pos
        return TensorValue.of_buffer(buf)

    def _input_layout(self, node, pos, ex) -> Layout:
        meta = node.meta.get("val")
        if meta is None:
            meta = node.meta.get("tensor_meta")
        size, stride = self.sizes.input_layout(pos, ex, meta, set(self.dynamic.get(pos, ())))
        return Layout(size, stride, ex.dtype)

    def hint(self, expr) -> Any:
        """The example value of a size expression."""
        return self.sizes.hint(expr)

    def get_attr(self, node):
        val = _fetch_attr(self.gm, node.target)
        if isinstance(val, torch.Tensor):
            return self.constant_tensor(val)
        return val

    def call(self, node):
        args, kwargs = self._eval_args(node.args), self._eval_args(node.kwargs)
        if not _all_tensor_meta(self._meta(node)) and not _has_tensor((args, kwargs)) and \
                any(has_scalar(x) for x in _flat((args, kwargs))):
            # Python arithmetic on runtime floats: the wrapper computes it, as Python does
            return self.scalars.computed(node.target if node.op == "call_function" else
                                         _MethodCaller(node.target), args, kwargs,
                                         self.hint, pyexpr)
        if self._is_size_arithmetic(node, args, kwargs):
            return self._eval_size(node, args, kwargs)
        if self._is_non_tensor(node, args, kwargs):    # sizes, dtypes, numbers
            return self._eval_static(node.target if node.op == "call_function" else
                                     _MethodCaller(node.target), args, kwargs, node)
        canon = None
        try:
            canon = canonicalize(node, self.gm, args, kwargs)
            if canon is not None:
                canon.args = self._tensors_to_values(canon.args)
                canon.kwargs = self._tensors_to_values(canon.kwargs)
                result = self._lower(canon, node)
                if isinstance(result, TensorValue) and result.buffer is None:
                    result.origins = _origins_of((args, kwargs)) + [node]
                if isinstance(result, TensorValue) and result.buffer is None and \
                        _value_readers(node) > 1 and (
                            result.cost > 1 and not self._recomputed_by_readers(result, node) or (
                            any(u.op == "output" for u in node.users) and not may_alias(node))):
                    # shared by several users: compute once (unless each reader's kernel can
                    # recompute it more cheaply than a write and a read: _recomputed_by_readers);
                    # a new tensor the graph returns and also views (`return v, v.view(-1)`):
                    # one buffer, so the returned views share its memory as eager's do
                    result = realize(result)
                elif isinstance(result, TensorValue) and self._eager_new_tensor(node):
                    # eager's reshape copies: a new tensor, never a view of its input's buffer
                    # (which an in-place update of the input after a graph break would change)
                    result = realize(TensorValue(list(result.size), result.dtype, result.loader,
                                                 None, result.cost, list(result.origins)))
                self.stats.native += 1
                return self._finish(node, canon, result)
        except _LOWERING_ERRORS as e:
            reason = f"{type(e).__name__}: {e}"
        else:
            reason = "no lowering"
        if canon is not None and canon.inplace:
            raise EagerFallback(f"in-place {node.target} could not be lowered ({reason})")
        self.stats.extern += 1
        self.stats.extern_reasons[node.name] = f"{_target_name(node)}: {reason}"
        result = self._extern_node(node, args, kwargs)
        return result

    def _is_size_arithmetic(self, node, args, kwargs) -> bool:
        """A call over size symbols and ints: the executor's (meta["val"] is a sympy
        expression) or, in a graph without metadata for it, any with a symbolic argument."""
        if node.op != "call_function" or _has_tensor((args, kwargs)):
            return False
        return as_sympy(node.meta.get("val")) is not None or self._meta(node) is None and \
            any(isinstance(x, sympy.Expr) and not x.is_number for x in _flat((args, kwargs)))

    def _is_non_tensor(self, node, args, kwargs) -> bool:
        """No tensor metadata: a non-tensor result, except in a graph whose tracer gives
        metadata but left a tensor op without it (lowered then, with unchecked metadata)."""
        return self._meta(node) is None and (
            self._concrete_meta or not _has_tensor((args, kwargs)) or _is_size_query(node))

    def _lower(self, canon: Canonical, node):
        fn = LOWERINGS[canon.name]
        for v in _flat((canon.args, list(canon.kwargs.values()))):
            if isinstance(v, TensorValue) and v.dtype not in self.backend.dtypes:
                # an extern's result of a dtype the kernels cannot load (fp16 on the C++ path)
                raise NotLowered(f"operand dtype {v.dtype}")
        result = fn(*canon.args, **canon.kwargs)
        if canon.inplace:
            target = canon.args[0]
            if not isinstance(result, TensorValue) or not isinstance(target, TensorValue):
                raise NotLowered("in-place result")
            if list(result.size) != list(target.size):
                raise NotLowered("in-place broadcast changes shape")
            result = LOWERINGS["to"](result, target.dtype)
        self._check_meta(node, result)
        return result

    def _finish(self, node, canon, result):
        if canon.inplace:
            src = node.args[0]
            self.env[src] = result
            if src in self.input_alias:
                pos = self.input_alias[src]
                self.mutations[pos] = Mutation(pos, result)
                self.input_alias[node] = pos
        return result

    def _check_meta(self, node, result):
        meta = self._meta(node)
        if meta is None:
            return

        def check(m, r):
            if isinstance(m, (list, tuple)) and not _is_tensor_meta(m):
                if not isinstance(r, (list, tuple)) or len(m) != len(r):
                    raise NotLowered("result structure differs from eager")
                for a, b in zip(m, r):
                    check(a, b)
                return
            if _is_tensor_meta(m):
                if not isinstance(r, TensorValue):
                    raise NotLowered("result is not a tensor")
                if r.dtype != m.dtype:
                    raise NotLowered(f"dtype {r.dtype} != eager {m.dtype}")
                if [self.hint(s) for s in m.shape] != [self.hint(s) for s in r.size]:
                    raise NotLowered(f"shape {r.size} != eager {list(m.shape)}")
        check(meta, result)

    def _extern_node(self, node, args, kwargs):
        if node.op == "call_function":
            target = node.target
        elif node.op == "call_method":
            target = _MethodCaller(node.target)
        else:
            target = self.gm.get_submodule(node.target)
            for p in target.parameters():
                if p.requires_grad:
                    self.needs_grad_params = True
        meta = self._meta(node)
        if meta is not None and not _all_tensor_meta(meta) and not (
                isinstance(target, torch._ops.OpOverload) and _tensors_beside_scalars(meta)):
            # non-tensor results (sizes, python scalars) are computed now, at compile time
            return self._eval_static(target, args, kwargs, node)
        if meta is None and not _has_tensor(args) and not _has_tensor(kwargs):
            return self._eval_static(target, args, kwargs, node)
        if _target_name(node) in _STORAGE_OFFSET_OPS and args and isinstance(args[0], TensorValue) \
                and isinstance(node.args[0], torch.fx.Node) and node.args[0].op != "placeholder" \
                and _view_flag(self._meta(node.args[0])) is False:
            # as_strided's offsets count in its argument's storage: where eager's argument is a
            # new tensor (a clone this lowering folded into its input), hand the op a new one
            a0 = args[0]
            args = (realize(TensorValue(list(a0.size), a0.dtype, a0.loader, None, a0.cost)),
                    *args[1:])
        return self.call_extern(target, args, kwargs, meta)

    def _eval_static(self, target, args, kwargs, node):
        if _has_tensor(args) or _has_tensor(kwargs):
            if node.op == "call_method" and node.target in ("size", "dim", "numel") or \
                    node.op == "call_function" and node.target in (torch.numel,):
                return _static_size_query(node.target, args, kwargs)
            if node.op == "call_function" and node.target is getattr and args[1] in ("shape", "ndim", "dtype"):
                x = args[0]
                if args[1] == "shape":
                    return _static_size_query("size", (x,), {})
                return {"ndim": x.ndim, "dtype": x.dtype}[args[1]]
            raise EagerFallback(f"non-tensor result of {_target_name(node)} depends on tensor data")
        return target(*args, **kwargs)

    def _eval_size(self, node, args, kwargs):
        """operator.mul/floordiv/... and min/max over size symbols -> a sympy size."""
        fn = SIZE_FUNCTIONS.get(node.target, node.target)
        if node.target in _SIZE_COMPARISONS and any(isinstance(x, sympy.Expr) and not x.is_number
                                                    for x in _flat((args, kwargs))):
            # a truth value of sizes (the executor's `bool(n - 2)` used as a value): sympy would
            # answer structurally, and kernels take no per-call booleans; the graph runs eagerly
            raise EagerFallback(f"symbolic truth value {_target_name(node)} of sizes in the graph")
        try:
            out = fn(*args, **kwargs)
        except TypeError as e:
            raise EagerFallback(f"size arithmetic {_target_name(node)}: {e}")
        e = as_sympy(out)
        if e is None:
            return out
        given = as_sympy(node.meta.get("val"))
        want = self.hint(given) if given is not None else None
        if want is not None and self.hint(e) != want:
            raise EagerFallback(f"size arithmetic {_target_name(node)} gives {self.hint(e)}, "
                                f"the executor says {want}")
        return int(e) if e.is_Integer else e

    def output(self, node):
        # seen: buffer name -> the node whose eager tensor that buffer is (its owner); a
        # returned view hands out its base's buffer under the base's name, so a new tensor
        # returned in any order after it is that buffer only if it is the base itself
        seen, done = {}, {}
        self._shared_view_roots(node)

        def finalize(n):
            if n in done:          # the same node twice: the same tensor twice, as in eager
                return done[n]
            r = _finalize(n)
            if isinstance(r, ArgRef) and isinstance(r.buffer, InputBuffer) and \
                    n.op != "placeholder" and r.buffer.position not in self.mutations and \
                    not self._returns_the_input(n):
                r = NewViewRef(r.buffer, r.size, r.stride, r.offset,   # a view op's new tensor
                               _canon_name(n) == "detach")
            done[n] = r
            return r

        def _finalize(n):
            pos = self.input_alias.get(n)
            if pos is not None and pos in self.mutations:
                return self.to_arg(self._input_value(pos))   # the mutated input itself
            if n in self._root_refs:     # a root computed in eager's order: its view back
                ref = self._root_refs[n]
                seen.setdefault(ref.buffer.name, n)
                return ref
            v = self.env[n]
            if isinstance(v, (list, tuple)):
                return self._nested_output(v, seen)
            aliasing = may_alias(n)
            w = self._view_of_written_input(n, v) if aliasing else v
            of_input, v = w is not v, w     # lowered again over a base: no copy on its chain
            if aliasing and isinstance(v, TensorValue) and v.buffer is None and \
                    strided_view_of(v) is None:
                if _view_flag(self._meta(n)) is not False and self._reads_visible(n, v, node):
                    # eager returns a view of an input or of another output: a copy would
                    # not share its memory, so the index map must fold to strides
                    raise EagerFallback(f"output {n.name}: a view whose strides the "
                                        f"lowering cannot derive")
                aliasing = False     # a new tensor either way (a cast, a copying reshape)
            if aliasing and not of_input and self._copy_in_chain(n, node) and \
                    isinstance(v, TensorValue):
                # eager copies unless the input already has the layout asked for: the
                # result (or a view of that copy) is a new tensor, never the input's buffer
                v, aliasing = TensorValue(list(v.size), v.dtype, v.loader, None, v.cost), False
            if not aliasing:
                ref = self._output_in_eager_order(v, self._meta(n), seen, n)
                if ref is not None:
                    return ref
            return self._fresh_output(v, aliasing, seen, self._view_base(n, v) if aliasing else n)
        self.outputs = torch.fx.node.map_arg(node.args[0], finalize)
        for m in self.mutations.values():
            m.value = self.to_arg(m.value)
        return None

    def _returns_the_input(self, n) -> bool:
        """Is eager's value of `n` the graph input object itself (`x.contiguous()` of a contiguous
        x, `x.to(x.dtype)`, `x.type_as(x)`), rather than a new tensor viewing it (`x.detach()`,
        `x[:]`, `x.view_as(x)`)? The chain of calls from the input is run on stand-ins of the
        example inputs (other arguments: constants or graph inputs); where that cannot be
        decided the answer is yes (the input object, as before)."""
        inputs = [p for p in self.gm.graph.nodes if p.op == "placeholder"]
        chain = []
        while n.op in ("call_function", "call_method"):
            if not n.args or not isinstance(n.args[0], torch.fx.Node):
                return True
            chain.append(n)
            n = n.args[0]
        if n.op != "placeholder":
            return True
        try:
            stand_ins = {p: _stand_in(x, on_meta=True) for p, x in zip(inputs, self.example_inputs)}

            def value(a):
                if a.op != "placeholder":
                    raise NotLowered("an argument computed in the graph")
                return stand_ins[a]
            t = stand_ins[n]
            with torch.no_grad():
                for c in reversed(chain):
                    rest, kwargs = torch.fx.node.map_arg((c.args[1:], c.kwargs), value)
                    fn = c.target if c.op == "call_function" else getattr(type(t), c.target)
                    r = fn(t, *rest, **kwargs)
                    if r is not t:
                        return False
                    t = r
        except Exception:
            return True
        return True

    def _eager_new_tensor(self, n) -> bool:
        """Does eager's reshape `n` copy? torch's reshape copies where its input's eager layout
        (the tracer's strides) cannot give the new shape (`minimum` of a permuted input keeps
        that order, so its reshape copies), even where this lowering's contiguous buffer could
        be viewed (device sweep seed 4364). The view rule is decided on the example sizes,
        each relation re-checked at every call."""
        if _canon_name(n) not in ("reshape", "flatten", "unflatten", "reshape_as") or \
                not n.args or not isinstance(n.args[0], torch.fx.Node):
            return False
        meta, have = self._meta(n), self._meta(n.args[0])
        if not _is_tensor_meta(meta) or not _is_tensor_meta(have) or not have.shape:
            return False
        size = [sympy.sympify(d) for d in have.shape]
        if any(self.hint(d) == 0 for d in size):
            return False
        stride = meta_stride(have)
        return view_strides(size, [sympy.sympify(d) for d in stride],
                            [sympy.sympify(d) for d in meta.shape], _decided) is None

    def _nested_output(self, v, seen):
        if isinstance(v, (list, tuple)):
            return type(v)(self._nested_output(x, seen) for x in v)
        return self._fresh_output(v, False, seen, None)

    def _view_of_written_input(self, n, v):
        """A returned view of an input written in place (`x.add_(1); return x[1:]`): eager's
        is a view of the input, which holds the new values once the wrapper's write-backs ran
        (they precede the return). The view chain is lowered again over the input itself, a
        view op the lowerings cannot express (a diagonal of symbolic sizes) as its extern over
        the input (a view, so it shows the write-backs too); `v` (a view of the new values'
        computation) is kept where that is not possible."""
        chain = []
        root = self._eager_view_root(n) if self._view_roots else None
        while n.op in ("call_function", "call_method") and self.input_alias.get(n) is None \
                and (n is not root or root not in self._view_roots):
            name = _canon_name(n)
            if name not in VIEW_OPS or not n.args or \
                    not isinstance(n.args[0], torch.fx.Node) or \
                    name == "contiguous" and not self._same_eager_strides(n, n.args[0]) or \
                    name == "getitem" and any(isinstance(a, torch.fx.Node) and
                                              _is_tensor_meta(self._meta(a))
                                              for a in _flat(n.args[1:])):
                return v     # (a tensor index: advanced indexing, a copy)
            chain.append(n)
            n = n.args[0]
        pos = self.input_alias.get(n)
        if chain and n is root and root in self._view_roots:
            env = {n: self.env[n]}
        elif not chain or pos is None or pos not in self.mutations:
            return v
        else:
            env = {n: self._input_value(pos)}
        try:
            for node in reversed(chain):
                args = torch.fx.node.map_arg(node.args, lambda a: env.get(a, self.env[a]))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env.get(a, self.env[a]))
                canon = canonicalize(node, self.gm, args, kwargs)
                if canon is None or canon.inplace:
                    return v
                try:
                    env[node] = LOWERINGS[canon.name](*self._tensors_to_values(canon.args),
                                                      **self._tensors_to_values(canon.kwargs))
                except _LOWERING_ERRORS:     # as call(): an unbind of a symbolic size
                    env[node] = self._extern_node(node, args, kwargs)
        except (NotLowered, TypeError, ValueError, IndexError, KeyError):
            return v
        out = env[chain[0]]
        if not isinstance(out, TensorValue) or out.dtype != v.dtype or \
                [self.hint(a) for a in out.size] != [self.hint(b) for b in v.size] or \
                strided_view_of(out) is None:
            return v
        return out

    def _same_eager_strides(self, a, b) -> bool:
        """Do eager's tensors of nodes `a` and `b` (the tracer's metadata) have the same
        strides in every dim above size 1 (a `contiguous()` that returns its input itself)?
        Unknown metadata: no."""
        ma, mb = self._meta(a), self._meta(b)
        if not (_is_tensor_meta(ma) and _is_tensor_meta(mb)) or len(ma.shape) != len(mb.shape):
            return False
        sa = meta_stride(ma)
        sb = meta_stride(mb)
        return all(self.hint(x) == self.hint(y) for x, y, d in zip(sa, sb, ma.shape)
                   if self.hint(d) != 1)

    def _copy_in_chain(self, n, output_node) -> bool:
        """Is eager's value of the returned view `n` a `contiguous()` that copies, or a view
        of one (`x.contiguous().view(-1)`), reached through view ops? Then it shares memory
        with nothing below that copy. A copy another output also holds (the copy itself, or
        a view between it and `n`) would have to be shared: the graph runs eagerly."""
        chain = []
        while n.op in ("call_function", "call_method") and n.args and \
                isinstance(n.args[0], torch.fx.Node) and _canon_name(n) in VIEW_OPS:
            chain.append(n)
            if _canon_name(n) == "contiguous" and self._needs_copy(n, self.env.get(n)):
                others = [m for m in _flat(torch.fx.node.map_arg(output_node.args[0],
                                                                 lambda m: m))
                          if isinstance(m, torch.fx.Node)]
                if any(m in others for m in chain[1:]):
                    raise EagerFallback(f"output {chain[0].name}: a view of a copy "
                                        f"{n.name} another output holds")
                return True
            n = n.args[0]
        return False

    _view_roots = frozenset()
    _root_refs: Dict[torch.fx.Node, ArgRef] = {}

    def _shared_view_roots(self, output_node):
        """Intermediates (new tensors in eager) that two or more returned tensors are, or are
        views of: eager's outputs share that tensor's storage, at offsets and strides within
        it. Each is realized whole and its returned views are lowered again over it
        (_view_of_written_input), so they are strided views of one buffer, as in eager
        (a view here of a loader would be a separate copy of just the view)."""
        self._view_roots, self._root_refs = set(), {}
        outs = {m for m in _flat(torch.fx.node.map_arg(output_node.args[0], lambda m: m))
                if isinstance(m, torch.fx.Node)}
        count = {}
        for m in outs:
            r = self._eager_view_root(m)
            if r is not None:
                count[r] = count.get(r, 0) + 1
        for r, k in count.items():
            v = self.env.get(r)
            if k < 2 or not isinstance(v, TensorValue):
                continue
            meta = self._meta(r)
            if self._meta_contiguous(meta):
                self.env[r] = realize(v)
                self._view_roots.add(r)
                continue
            # a buffer is contiguous (ir.py's invariant): a root eager lays out in another
            # dense order (`relu` of a permuted input keeps its order) is computed permuted,
            # contiguously, and its value is the view back, at eager's strides (seed 5313)
            stride = meta_stride(meta)
            order = _dense_order([self.hint(x) for x in meta.shape],
                                 [self.hint(x) for x in stride])
            if order is None or v.buffer is not None:
                continue
            buf = realize(LOWERINGS["permute"](v, order)).buffer
            back = [order.index(d) for d in range(len(order))]
            self.env[r] = LOWERINGS["permute"](TensorValue.of_buffer(buf), back)
            self._root_refs[r] = strided_view_of(self.env[r])
            self._view_roots.add(r)

    def _meta_contiguous(self, meta) -> bool:
        stride = meta_stride(meta)
        want = 1
        for d, st in reversed(list(zip(meta.shape, stride))):
            if self.hint(d) != 1 and self.hint(st) != want:
                return False
            want *= self.hint(d)
        return True

    def _eager_view_root(self, n):
        """The intermediate node whose new tensor eager's value of `n` is or is a view of,
        through view ops (by the tracer's meta tensors); None for inputs or when unknown."""
        def views(n, m):  # a view, or views (split, unbind, chunk: indexed by getitem)
            if isinstance(m, (list, tuple)):
                return len(m) > 0 and all(views(n, x) for x in m)
            src = self._meta(n.args[0]) if n.args and isinstance(n.args[0], torch.fx.Node) \
                else None
            flag = _view_flag(m)
            if flag or flag is not None and _view_flag(src) is not None:
                return flag
            # a record whose view flag holds on the example sizes only (symbolic shapes; a
            # static result of a symbolic input), or none: ops that always view, a reshape
            # where torch's view rule on eager's layout allows (re-checked at every call)
            name = _canon_name(n)
            if name in ("reshape", "flatten", "unflatten", "reshape_as"):
                return not self._eager_new_tensor(n)
            return name in _ALWAYS_VIEWS and not any(
                isinstance(a, torch.fx.Node) and _is_tensor_meta(self._meta(a))
                for a in _flat((n.args[1:], n.kwargs)))     # x[idx]: advanced indexing copies
        while n.op in ("call_function", "call_method") and _canon_name(n) in VIEW_OPS and \
                views(n, self._meta(n)) and n.args and isinstance(n.args[0], torch.fx.Node):
            n = n.args[0]
        meta = self._meta(n)
        if n.op not in ("call_function", "call_method") or \
                _canon_name(n) in VIEW_OPS and not self._new_tensor_of_view_op(n, meta) or \
                not _is_tensor_meta(meta) or _view_flag(meta) \
                or self.input_alias.get(n) is not None:
            return None
        return n

    def _new_tensor_of_view_op(self, n, meta) -> bool:
        """Is eager's value of `n`, an op that may return a view or its input (`to`, `float`,
        `type_as`), a new tensor at every size? Yes where it casts to another dtype (a copy:
        `x.float()` of a bool x, seed 150930, whose views returned beside it share its
        storage). A `contiguous()` that copies is left to _copy_in_chain."""
        src = self._meta(n.args[0]) if n.args and isinstance(n.args[0], torch.fx.Node) else None
        return _is_tensor_meta(meta) and _is_tensor_meta(src) and meta.dtype != src.dtype

    def _needs_copy(self, n, v) -> bool:
        """Is eager's `contiguous(...)` (node `n`, value `v`) a new tensor? Eager returns its
        input itself when that already has the asked-for layout (the tracer's strides,
        else contiguous): it copies when eager's input has other strides (the input's
        meta), and here the value is a new tensor too when the lowered input lacks them."""
        if not isinstance(v, TensorValue):
            return False
        meta, src = self._meta(n), self._meta(n.args[0])
        if _is_tensor_meta(meta) and _is_tensor_meta(src):
            want = meta_stride(meta)
            have = meta_stride(src)
            if any(self.hint(a) != self.hint(b) for a, b, d in zip(have, want, meta.shape)
                   if self.hint(d) != 1):
                return True
        ref = strided_view_of(v)
        if ref is None:
            return True
        if _is_tensor_meta(meta) and _is_tensor_meta(src):
            # eager returns its input itself: so does this lowering where the lowered input
            # has eager's strides (a view of an input at an offset: the same view, seed 5371)
            want = meta_stride(meta)
            return any(self.hint(a) != self.hint(b) for a, b, d in zip(ref.stride, want, ref.size)
                       if self.hint(d) != 1)
        lay = ref.buffer.layout
        if list(ref.size) != list(lay.size) or list(ref.stride) != list(lay.stride) or \
                ref.offset != lay.offset:
            return True      # a view: eager's input may be a view of the buffer, not the buffer
        return not lay.is_contiguous()

    def _reads_visible(self, n, v: TensorValue, output_node) -> bool:
        """Is `v` (node `n`'s value) a load of a tensor the caller can see (an input, a
        constant, an output)? (A view of an intermediate shares memory with nothing the
        caller holds.)"""
        probe = as_single_load(v.loader, loop_vars("v", v.ndim))
        if probe is None:
            return False
        buf = self.buffers_by_name[probe.name]
        if self._buffer_visible(buf):
            return self._views_all_the_way(n)
        outs = torch.fx.node.map_arg(output_node.args[0], lambda n: n)
        return any(isinstance(self.env.get(n), TensorValue) and
                   self.env[n].buffer is buf for n in _flat(outs) if isinstance(n, torch.fx.Node))

    def _buffer_visible(self, buf) -> bool:
        """An input or constant, or an extern's result that may be a view of one (a view op
        run eagerly: its result is never copied to a planned layout, see wrapper._extern)."""
        if isinstance(buf, InputBuffer):
            return True
        call = getattr(buf, "call", None)
        return call is not None and call.origin is not None and may_alias(call.origin) and \
            any(self._buffer_visible(r.buffer) for r in _refs((call.args, call.kwargs)))

    def _views_all_the_way(self, n) -> bool:
        """Does eager's value of `n` share memory with a graph input, through ops that return
        views? A copy on the way (a contiguous() that copies, a cast to another dtype, an op
        that computes) makes it a new tensor; an unknown op or a reshape (a view where the
        layout allows) counts as a view."""
        while n.op not in ("placeholder", "get_attr"):
            name = _canon_name(n)
            if name is None and n.target is not operator.getitem:
                return True             # unknown: may be a view of anything
            if name is not None and name not in VIEW_OPS:
                return False            # computes a new tensor
            src = next((a for a in n.args if isinstance(a, torch.fx.Node)), None)
            if src is None:
                return True
            out, inp = self.env.get(n), self.env.get(src)
            if name == "contiguous" and self._needs_copy(n, out) or \
                    isinstance(out, TensorValue) and isinstance(inp, TensorValue) and \
                    out.dtype != inp.dtype:
                return False
            n = src
        return True

    def _view_base(self, n, v):
        """The node whose eager tensor a returned view `n` (value `v`) shares memory with:
        the deepest node down its chain of view ops whose value is `v`'s buffer (`v[0]` of a
        realized `v`: `v`), else `n` itself (a buffer no other node's value is)."""
        ref = strided_view_of(v) if isinstance(v, TensorValue) else None
        owner = n
        while ref is not None and n.op in ("call_function", "call_method"):
            val = self.env.get(n)
            if isinstance(val, TensorValue) and val.buffer is ref.buffer or \
                    n in self._root_refs and self._root_refs[n].buffer is ref.buffer:
                owner = n
            if _canon_name(n) not in VIEW_OPS or not n.args or \
                    not isinstance(n.args[0], torch.fx.Node):
                break
            n = n.args[0]
        return owner

    def _output_in_eager_order(self, v, meta, seen, owner) -> Optional[ArgRef]:
        """A new output tensor in eager's memory order. Eager gives the result of a pointwise
        op the dim order of its input (a transposed or channels_last input gives a transposed
        or channels_last result: TensorIterator's rule, which the tracer's meta tensor
        follows); a buffer here is contiguous (ir.py's invariant), so an output whose eager
        strides are dense in another order is computed as the permuted value, contiguously,
        and handed out as the permuted view of it. Only outputs not computed yet (a
        loader): one already realized (a reduction, a value with other users) keeps the
        contiguous layout rather than pay a copy."""
        if not isinstance(v, TensorValue) or v.buffer is not None or not _is_tensor_meta(meta):
            return None
        stride = meta_stride(meta)
        order = _dense_order([self.hint(x) for x in meta.shape], [self.hint(x) for x in stride])
        if order is None or order == sorted(order):
            return None
        permuted = LOWERINGS["permute"](v, order)
        buf = realize(permuted).buffer
        out = [None] * v.ndim
        for d, st in zip(order, buf.layout.stride):
            out[d] = st
        seen[buf.name] = owner
        return ArgRef(buf, tuple(v.size), tuple(out), sympy.Integer(0))

    def _fresh_output(self, v, aliasing, seen, owner):
        """Outputs of non-view ops must be new tensors, as in eager: a new tensor (`owner`
        its node, None: a list element) gets a buffer already handed out only when that
        buffer is its own (claimed by a returned view of it, `return v[0], v`)."""
        if not isinstance(v, TensorValue):
            return v
        ref = self.to_arg(v)
        name = ref.buffer.name
        taken = name in seen and (owner is None or seen[name] is not owner)
        # a new tensor that is part of a larger buffer (a padded GEMM's result, codegen/gemm.py)
        # is copied out: eager's is dense
        partial = list(ref.size) != list(ref.buffer.layout.size) and not _whole(ref)
        if not aliasing and (not isinstance(ref.buffer, ComputedBuffer) or taken or partial):
            if not isinstance(ref.buffer, ExternBuffer) or taken or partial:
                copy = TensorValue(list(v.size), v.dtype, v.loader, None, v.cost)
                ref = self.to_arg(realize(copy))
        seen.setdefault(ref.buffer.name, owner)
        return ref

    # ------------------------------------------------------------ helpers
    def _input_value(self, pos):
        return TensorValue.of_buffer(next(b for b in self.inputs if b.position == pos))

    def _eval_args(self, a):
        return torch.fx.node.map_arg(a, lambda n: self.env[n])

    def _tensors_to_values(self, a):
        if isinstance(a, torch.Tensor):
            return self.constant_tensor(a)
        if isinstance(a, (list, tuple)):
            return type(a)(self._tensors_to_values(x) for x in a)
        if isinstance(a, dict):
            return {k: self._tensors_to_values(v) for k, v in a.items()}
        return a


@dataclass(frozen=True)
class _InputRef:
    pos: int


class _MethodCaller:
    """Calls tensor method `name` on its first argument (extern target for call_method)."""

    def __init__(self, name):
        self.name = name
        self.__name__ = f"Tensor.{name}"

    def __call__(self, self_, *args, **kwargs):
        return getattr(self_, self.name)(*args, **kwargs)

    def __repr__(self):
        return f"Tensor.{self.name}"


def _static_size_query(name, args, kwargs):
    x = args[0]
    if name == "size":
        sizes = [int(s) if s.is_Integer else s for s in x.size]
        d = args[1] if len(args) > 1 else kwargs.get("dim")
        return torch.Size(sizes) if d is None and all(isinstance(s, int) for s in sizes) else (
            sizes[d] if d is not None else tuple(sizes))
    if name == "dim":
        return x.ndim
    n = product(x.size)
    return int(n) if n.is_Integer else n


# (op, argument position)s that read only the argument's metadata: a user through one does not
# count when deciding to compute a shared value once (a vocabulary-wide log-softmax that
# nll_loss_backward takes for its shape stays inlined in the one op that reads it, instead of a
# float32 buffer written and read back: GPT-2's loss backward on an H100)
_aten = torch.ops.aten
_SHAPE_ONLY = {(_aten.nll_loss_backward.default, 1), (_aten.nll_loss2d_backward.default, 1),
               (_aten.zeros_like.default, 0), (_aten.ones_like.default, 0),
               (_aten.empty_like.default, 0), (_aten.full_like.default, 0),
               (torch.zeros_like, 0), (torch.ones_like, 0), (torch.empty_like, 0),
               (torch.full_like, 0)}


def _value_readers(node) -> int:
    n = 0
    for u in node.users:
        positions = [i for i, a in enumerate(u.args) if a is node]
        if u.op != "call_function" or u.kwargs and node in u.kwargs.values() or not positions or \
                any((u.target, i) not in _SHAPE_ONLY for i in positions):
            n += 1
    return n


def _is_size_query(node) -> bool:
    return node.op == "call_method" and node.target in ("size", "dim", "numel", "stride") or \
        node.op == "call_function" and (node.target in (torch.numel, len) or
                                        node.target is getattr)


def _fetch_attr(gm, target):
    obj = gm
    for part in target.split("."):
        obj = getattr(obj, part)
    return obj


# ops whose arguments name storage offsets (absolute in their tensor argument's storage)
_STORAGE_OFFSET_OPS = {"as_strided", "as_strided_scatter", "as_strided_copy", "as_strided_",
                       "as_strided.default", "as_strided_scatter.default", "as_strided_copy.default"}


def _target_name(node):
    t = node.target
    return t if isinstance(t, str) else getattr(t, "__name__", repr(t))


# view ops whose result is a view of their input whatever its layout (reshape, a cast, a
# contiguous() may copy)
_ALWAYS_VIEWS = {"view", "permute", "transpose", "swapaxes", "swapdims", "t", "movedim",
                 "moveaxis", "unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to",
                 "select", "narrow", "getitem", "split", "split_with_sizes", "chunk", "unbind",
                 "detach", "alias", "diagonal", "unflatten"}


def _whole(ref) -> bool:
    """Is `ref` its buffer's whole storage, contiguously, in another shape (a GEMM's rows
    folded back to (..., M, N))? Eager's result of that shape is the same dense tensor."""
    lay = ref.buffer.layout
    return sympy.sympify(ref.offset) == 0 and lay.is_contiguous() and \
        sympy.sympify(product(ref.size) - product(lay.size)) == 0 and \
        [sympy.sympify(s) for s in ref.stride] == \
        [sympy.sympify(s) for s in contiguous_strides(list(ref.size))]


def may_alias(node) -> bool:
    """Could eager's result of this node share storage with another tensor?"""
    if node.op in ("placeholder", "get_attr"):
        return True
    name = _canon_name(node)
    return name is None or name in VIEW_OPS


def _dense_order(size, stride) -> Optional[List[int]]:
    """The dims from outermost to innermost of a dense, non-overlapping layout (a permutation
    of a contiguous one, size-1 dims kept in place), or None."""
    big = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -stride[d])
    expect = 1
    for d in reversed(big):
        if stride[d] != expect:
            return None
        expect *= size[d]
    # size-1 dims go back to their own place among the others (no stride to order them by)
    out, it = [], iter(big)
    for d in range(len(size)):
        out.append(d if size[d] == 1 else next(it))
    return out


def _view_flag(m) -> Optional[bool]:
    """Does eager's value share storage with the op's tensor argument (a view of it, or the
    argument itself)? The tracer's static record says (pydynamo.meta.TensorMeta.is_view, from
    the meta run), as does a meta tensor (`_is_view()`: propagate_meta's, which are never
    views); None (unknown: may be a view) for records without the flag, or symbolic ones
    (theirs holds on the example sizes only)."""
    if isinstance(m, torch.Tensor):
        return m._is_view()
    flag = getattr(m, "is_view", None)
    return flag if isinstance(flag, bool) and not _meta_symbols(m) else None


def _mutates_arguments(node, mutation) -> Optional[str]:
    """Why a mutating node is not the in-place form the lowering functionalizes (writes
    args[0], returns it, spelled so canonicalize sees it), or None."""
    if mutation.mutated != (0,) or mutation.returns != 0:
        if node.target is operator.setitem or _target_name(node) == "__setitem__":
            return "setitem mutates a tensor in place"
        if "out" in mutation.mutated:
            return "out= argument"
        if node.op == "call_module" or node.target in _STATS_UPDATING:
            return f"{_target_name(node)} in training mode updates its running statistics"
        return f"{_target_name(node)} writes into its arguments"
    name = _target_name(node)
    if node.op != "call_module" and not node.kwargs.get("inplace") and \
            not (name.endswith("_") or node.target in _INPLACE_OPERATORS):
        return f"{name}: in-place flag passed positionally"
    return None


_INPLACE_OPERATORS = {getattr(operator, f"i{n}") for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
    "rshift", "matmul")}
_STATS_UPDATING = {torch.nn.functional.batch_norm, torch.batch_norm, torch.nn.functional.instance_norm,
                   torch.instance_norm}


def _is_tensor_meta(m):
    """A meta tensor, ShapeProp's record, or anything shaped like one (pydynamo.meta.TensorMeta)."""
    if isinstance(m, (TensorMetadata, torch.Tensor)):
        return True
    return not isinstance(m, (tuple, list, sympy.Basic)) and hasattr(m, "shape") and \
        hasattr(m, "dtype") and hasattr(m, "stride")


def _meta_symbols(m) -> set:
    """Free symbols in a placeholder's metadata (a size symbol or a tensor's sizes/strides)."""
    e = as_sympy(m)
    if e is not None:
        return set(e.free_symbols)
    if not _is_tensor_meta(m):
        return set()
    st = meta_stride(m)
    out = set()
    for x in list(m.shape) + list(st or ()):
        x = as_sympy(x)
        if x is not None:
            out |= x.free_symbols
    return out


def _flat(a) -> list:
    if isinstance(a, (list, tuple)):
        return [y for x in a for y in _flat(x)]
    if isinstance(a, slice):
        return _flat([a.start, a.stop, a.step])
    if isinstance(a, dict):
        return _flat(list(a.values()))
    return [a]


def _size_mod(a, b):
    return canonical_size(sympy.Mod(sympy.sympify(a), sympy.sympify(b)))


# size arithmetic the executor emits over int placeholders, as sympy (Python's min/max and
# // would ask sympy for a truth value or give floor(a/b))
SIZE_FUNCTIONS = {operator.floordiv: FloorDiv, operator.mod: _size_mod,
                  min: lambda *a: sympy.Min(*a), max: lambda *a: sympy.Max(*a)}


# graph nodes that switch autocast (pydynamo's, and torch.amp's spelling in other tracers' graphs)
_AUTOCAST_NODES = {"enter_autocast", "exit_autocast", "_enter_autocast", "_exit_autocast"}

_SIZE_COMPARISONS = {operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge}


# ops whose output strides depend on the kernel the device picks (CUDA's memory-efficient
# attention and CPU's flash attention write (batch, seq, heads, dim) and return it transposed;
# meta tensors say contiguous; the training graph's aten forms and their backwards are probed
# too, and a kernel may choose its layouts by whether q, k and v share storage): their layout is
# learnt from one call on zeros whose arguments share storage as the graph's do, so the result
# is used as it is (no copy to a guessed layout on every call, and the usual transpose back to
# (batch, seq, hidden) is a view)
_aten = torch.ops.aten
LAYOUT_PROBED = {torch.nn.functional.scaled_dot_product_attention,
                 _aten.scaled_dot_product_attention.default} | {
    getattr(_aten, name).default for name in (
        "_scaled_dot_product_efficient_attention", "_scaled_dot_product_efficient_attention_backward",
        "_scaled_dot_product_flash_attention", "_scaled_dot_product_flash_attention_backward",
        "_scaled_dot_product_flash_attention_for_cpu",
        "_scaled_dot_product_flash_attention_for_cpu_backward",
        "_scaled_dot_product_cudnn_attention", "_scaled_dot_product_cudnn_attention_backward")
    if hasattr(_aten, name)}


def _probe_layout(target, args, kwargs, device):
    if target not in LAYOUT_PROBED:
        return None
    refs = _refs([args, kwargs])
    if any(hasattr(x, "free_symbols") and not getattr(x, "is_number", True)
           for r in refs for x in (*r.size, *r.stride, r.offset)):
        return None               # symbolic sizes: meta's layout is used
    # one zero-filled base per buffer, so arguments viewing one buffer share storage in the
    # probe as in the compiled call (the fused backward packs its gradients only then)
    extent: Dict[int, int] = {}
    for r in refs:
        need = int(r.offset) + 1 + sum((int(n) - 1) * int(st) for n, st in zip(r.size, r.stride))
        extent[id(r.buffer)] = max(extent.get(id(r.buffer), 1), need)
    bases = {k: torch.zeros(n, dtype=r.buffer.dtype, device=device)
             for r in refs for k, n in extent.items() if k == id(r.buffer)}

    def real(a):
        if isinstance(a, ArgRef):
            return bases[id(a.buffer)].as_strided([int(x) for x in a.size],
                                                  [int(x) for x in a.stride], int(a.offset))
        if isinstance(a, (list, tuple)):
            return type(a)(real(x) for x in a)
        if isinstance(a, dict):
            return {k: real(x) for k, x in a.items()}
        if hasattr(a, "free_symbols"):
            raise TypeError("symbolic")
        return a
    try:
        with torch.no_grad():
            out = target(*real(args), **real(kwargs))
    except (TypeError, RuntimeError, ValueError, NotImplementedError):
        return None               # symbolic sizes, or the op refuses: meta's layout is used
    return out


def _symbolic_record(m) -> bool:
    """A node's record (a TensorMeta or a structure of them) has a symbolic size or stride."""
    if isinstance(m, (list, tuple)):
        return any(_symbolic_record(x) for x in m)
    return any(as_sympy(d) is not None and not as_sympy(d).is_number
               for d in tuple(getattr(m, "shape", ()) or ()) + tuple(meta_stride(m) or ()))


def _tensors_beside_scalars(m) -> bool:
    """An aten op's tuple result of tensors with Python scalars among them (the fused attention
    ops' max_q/max_k): the recorded training graphs are specialized to their sizes, so the
    scalars are the recorded constants."""
    return isinstance(m, (list, tuple)) and any(_is_tensor_meta(x) for x in m) and \
        all(x is None or isinstance(x, (int, float, bool)) or _is_tensor_meta(x) for x in m)


def _all_tensor_meta(m):
    """Tensors, possibly nested, with None allowed beside them (`mha(...)` -> (out, None))."""
    if _is_tensor_meta(m):
        return True
    if isinstance(m, (list, tuple)):
        return any(_all_tensor_meta(x) for x in m) and \
            all(x is None or _all_tensor_meta(x) for x in m)
    return False


def _refs(a) -> list:
    if isinstance(a, ArgRef):
        return [a]
    if isinstance(a, (list, tuple)):
        return [r for x in a for r in _refs(x)]
    if isinstance(a, dict):
        return _refs(list(a.values()))
    return []


def _origins_of(a) -> list:
    out = []
    if isinstance(a, TensorValue):
        out = list(a.origins)
    elif isinstance(a, (list, tuple)):
        for x in a:
            out += [o for o in _origins_of(x) if o not in out]
    elif isinstance(a, dict):
        out = _origins_of(list(a.values()))
    return out


def _has_tensor(a):
    if isinstance(a, TensorValue):
        return True
    if isinstance(a, (list, tuple)):
        return any(_has_tensor(x) for x in a)
    if isinstance(a, dict):
        return any(_has_tensor(x) for x in a.values())
    return False


HANDLERS = {
    "placeholder": GraphLowering.placeholder,
    "get_attr": GraphLowering.get_attr,
    "call_function": GraphLowering.call,
    "call_method": GraphLowering.call,
    "call_module": GraphLowering.call,
    "output": GraphLowering.output,
}

"""GraphLowering: walks an FX graph and builds the loop IR.

One handler per FX node kind (placeholder, get_attr, call_*, output). A call node is
canonicalized, lowered, and its result checked against the node's metadata (shape and dtype
from `meta["val"]` when the tracer supplied it, else from `propagate_meta`, a run on meta
tensors or copies: the user's tensors only ever go through the compiled code; both in
codegen/node_meta.py); any failure or mismatch (codegen/fallback.py's `_LOWERING_ERRORS`)
turns that node into an extern call of the eager op, so the graph always compiles. A value not
computed yet is realized once where several nodes read it, unless each reader's kernel can
recompute it more cheaply (`_recomputed_by_readers`, RECOMPUTE_COST). Mutations are
functionalized for unaliased values: an in-place op on a graph input rebinds the input's value
and records a write-back the wrapper performs after all kernels ran; mutations we cannot prove
safe (on views, on aliased tensors, setitem, out=) raise `EagerFallback` for the whole graph.
The `output` handler and eager's aliasing rules for returned tensors are GraphOutputs
(codegen/graph_outputs.py), which GraphLowering inherits.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass, field
from typing import Any, Dict, List, Optional

import sympy
import torch
import torch.fx

from codegen.canonical import OPERATORS, VIEW_OPS, Canonical, _canon_name, canonicalize
from pydynamo import meta_direct as _direct
from pydynamo.meta import device_results
from pydynamo.mutation import node_mutation
from codegen.fallback import _LOWERING_ERRORS, EagerFallback
from codegen.graph_args import _flat, _has_tensor, _origins_of, _refs
from codegen.graph_outputs import GraphOutputs, may_alias
from codegen.ir import (ArgRef, ComputedBuffer, ExternBuffer, ExternCall, InputBuffer, Layout,
                        NotLowered, TensorValue, current, realize, strided_view_of)
from codegen.decompositions import align_bias_argument
from codegen.derived import Derivation, derive
from codegen.lowering import LOWERINGS
from codegen.region_calls import RegionCall
from codegen.node_meta import (_all_tensor_meta, _as_meta, _fresh_at_every_size, _is_tensor_meta,
                               _meta_symbols, _node_meta, _symbolic_record,
                               _tensors_beside_scalars, _view_flag, propagate_meta)
from codegen.ops import collect_deps
from codegen.scalars import RuntimeScalars, SpecializeFloats, has_scalar, scalar_symbols
from codegen.sizevars import product, static_int
from pydynamo.symbols import FloorDiv, canonical_size, loop_vars, pyexpr
from codegen.symbolic import SymbolicSizes, as_sympy, meta_stride, symbolic_extern_layouts


@dataclass
class Mutation:
    position: int           # placeholder index
    value: TensorValue      # final value to write back


@dataclass
class LoweringStats:
    native: int = 0
    extern: int = 0
    extern_reasons: Dict[str, str] = field(default_factory=dict)


# lowerings that are extern calls: their arguments are materialized in memory
# `x @ w` reaches the graph as operator.matmul: lowered by codegen/gemm.py's matmul (its
# (..., M, K) @ (K, N) cases; the rest raise NotLowered and stay eager's)
OPERATORS.setdefault(operator.matmul, "matmul")
# the most ops a value with several readers may cost and still be recomputed by each reader
# (`_recomputed_by_readers`): GELU's tanh chain over its input is 6
RECOMPUTE_COST = 8
EXTERN_LOWERINGS = ("linear", "addmm", "mm", "matmul", "scaled_dot_product_attention")


class GraphLowering(GraphOutputs):
    def __init__(self, gm: torch.fx.GraphModule, example_inputs: List[Any], dynamic=None,
                 specialize_floats=False, backend=None, measure_gemms=False, group_gemms=True):
        self.gm = gm
        # mode="max-autotune": choose how each GEMM runs by timing the ways on the device
        # (codegen/gemm_timing.py) rather than by codegen/gemm.py's rules
        self.measure_gemms = measure_gemms
        # Options.group_gemms: sibling products may run as one (codegen/gemm_group.py)
        self.group_gemms = group_gemms
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
        # values computed from parameters, kept across calls (codegen/derived.py)
        self.derivations: List[Derivation] = []
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

    # ------------------------------------------------------------ derived values
    def parameter_view(self, v: TensorValue) -> Optional[tuple]:
        """(input buffer, (size, stride, offset)) where `v` is a static strided view of a graph
        input whose example value was an nn.Parameter (a tensor the model keeps across calls:
        codegen/derived.py's sources), else None."""
        ref = strided_view_of(v) if isinstance(v, TensorValue) else None
        if ref is None or not isinstance(ref.buffer, InputBuffer) or ref.buffer.kind != "input" \
                or v.dtype != ref.buffer.dtype:
            return None
        ex = self.example_inputs[ref.buffer.position]
        geom = [static_int(x) for x in (*ref.size, *ref.stride, ref.offset,
                                        *ref.buffer.layout.size, *ref.buffer.layout.stride)]
        if not isinstance(ex, torch.nn.Parameter) or None in geom:
            return None
        n = len(ref.size)
        return ref.buffer, (tuple(geom[:n]), tuple(geom[n:2 * n]), geom[2 * n])

    def derived(self, kind: str, sources: List[InputBuffer], shape, views=()) -> TensorValue:
        """A value computed from parameter inputs once and kept across calls while they are
        unchanged (codegen/derived.py): an extern the wrapper calls with the whole inputs."""
        d = Derivation(kind, [b.position for b in sources], [int(s) for s in shape], views)
        self.derivations.append(d)
        meta = torch.empty(d.shape, dtype=sources[0].dtype, device="meta")
        return self.call_extern(derive, (d,) + tuple(TensorValue.of_buffer(b) for b in sources),
                                {}, out_meta=meta)

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

    def call_extern(self, target, args, kwargs, meta=None, out_meta=None):
        """Run `target` eagerly from the wrapper; returns TensorValue(s) over its outputs
        (`out_meta`: their metadata where the caller knows it, else probed or run on meta)."""
        args, kwargs = self.to_arg(tuple(args)), self.to_arg(dict(kwargs))
        call = ExternCall(target, args, kwargs, self.current_node)
        if out_meta is None:
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
        saves the extern's extra read, except for a product of at least
        Backend.gemm_bias_min_numel elements (CPU: a beta-0 GEMM is the slower one there, see
        codegen/pipeline.py). Backend.extern_epilogues (CPU's addmm and cuBLAS alike); asked by
        the linear/addmm decompositions about the node being lowered."""
        node = self.current_node
        if self.written_anyway(node):
            return True
        bound = self.backend.gemm_bias_min_numel
        if bound is None or not self.backend.extern_epilogues or node is None:
            return False
        numel = _static_numel(self._meta(node))
        return numel is not None and numel >= bound

    @staticmethod
    def canon_name(node):
        return _canon_name(node)

    def written_anyway(self, node) -> bool:
        """Must `node`'s result be written to memory whatever the fusion (some consumer, through
        views, is an extern or the graph's output)? Then a pointwise epilogue on it is a kernel
        of its own unless the extern producing it takes it (codegen/gemm.py's rule)."""
        if not self.backend.extern_epilogues or node is None:
            return False
        return any(name is None or name in EXTERN_LOWERINGS     # an extern, a module call or
                   for _, name in _readers(node))               # the output reads it

    @staticmethod
    def is_output(node) -> bool:
        """Is `node`'s value, itself or through getitems and views, a graph output?"""
        return node is not None and any(u.op == "output" for u, _ in _readers(node))

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
        if node.op == "call_function" and isinstance(node.target, RegionCall):
            return self._region_call(node, args)
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

    def _region_call(self, node, args):
        """An outlined region (codegen/region_calls.py): an extern call of its sub-graph,
        compiled once per template through the same pipeline (RegionCall.compiled); its results
        are new tensors of the template's result metadata (the node's). Arguments in another
        layout than the sub-graph was traced for: the sub-graph runs eagerly instead."""
        refs = [self.to_arg(a) for a in args]
        if not all(isinstance(r, ArgRef) for r in refs):
            raise NotLowered("region argument is not a tensor")
        layouts = [(tuple(self.hint(s) for s in r.size), tuple(self.hint(s) for s in r.stride),
                    r.buffer.dtype) for r in refs]
        device = self.backend.device or torch.device(self.devices[0])
        target = node.target.compiled(layouts, device) or node.target
        self.stats.extern += 1
        return self.call_extern(target, refs, {}, out_meta=tuple(node.meta["val"]))

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
                and (_view_flag(self._meta(node.args[0])) is False or
                     _fresh_at_every_size(node.args[0])):
            # as_strided's offsets count in its argument's storage: where eager's argument is a
            # new tensor (a clone this lowering folded into its input), hand the op a new one.
            # With symbolic sizes the record's view flag is unknown (None); a clone is still new
            # (the recorder's flat value of a written input that starts at an offset: its
            # scatter at offset 0 wrote before the input's start; test_dynamic_view_writes.py)
            a0 = args[0]
            args = (realize(TensorValue(list(a0.size), a0.dtype, a0.loader, None, a0.cost)),
                    *args[1:])
        args, kwargs = align_bias_argument(target, args, kwargs)
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


def _static_numel(meta) -> Optional[int]:
    """The element count of a tensor result's metadata (its sizes at the example), or None."""
    shape = getattr(meta, "shape", None)
    try:
        return None if shape is None else static_int(product(int(s) for s in shape))
    except (TypeError, ValueError):
        return None


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


def _readers(node):
    """(user, canonical name or None) of each node reading `node`'s value other than through a
    getitem or a view (those are followed to their own readers)."""
    todo, seen = list(node.users), set()
    while todo:
        u = todo.pop()
        if u in seen:
            continue
        seen.add(u)
        name = _canon_name(u) if u.op in ("call_function", "call_method") else None
        if u.op == "call_function" and u.target is operator.getitem or name in VIEW_OPS:
            todo.extend(u.users)
        else:
            yield u, name


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


HANDLERS = {
    "placeholder": GraphLowering.placeholder,
    "get_attr": GraphLowering.get_attr,
    "call_function": GraphLowering.call,
    "call_method": GraphLowering.call,
    "call_module": GraphLowering.call,
    "output": GraphLowering.output,
}

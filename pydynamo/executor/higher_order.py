"""Higher-order functions: a traced function as a sub-graph, called by one node (torch.vmap).

`torch.vmap(fn, in_dims, out_dims, randomness)` (also torch.func.vmap) is a `VmapVariable`;
calling it traces `fn` ONCE, inlined as any user function, on per-example values: each batched
tensor argument stands for one slice of it (its in_dim removed: exactly the shape, strides and
dtype `fn` sees under eager's vmap). The nodes that trace adds to the frame's graph are then
moved into a sub-graph (`torch.fx.GraphModule`): its inputs are the per-example values, then
whatever it read from outside the call (closure and global tensors, unbatched arguments, size
placeholders), passed unbatched. The frame's graph gets one node in their place whose target is
a `VmapCall`: at run time `torch.vmap(sub_graph, flat in_dims, flat out_dims, randomness)`,
the public transform over the very ops `fn` performed, so batching (in_dims, unbatched values
broadcast, randomness, eager's own errors) is torch's and never re-derived here. Nested vmaps
nest: the inner call's node is one of the outer sub-graph's nodes. Backends see an ordinary
call_function node (codegen runs it as an extern, aot records the batched aten ops torch's
batching rules produce).

The node's metadata comes from the same transform run on meta examples (`VmapCall.on_meta`:
the sub-graph with every device argument moved to the meta device, under `torch.device("meta")`
for factories); with symbolic sizes a shape rule registered for the call (each output is its
per-example shape, from the trace, with the batch size inserted at its out_dim) keeps them
symbolic where meta.propagate finds it agrees with the run on hints and the result is dense;
otherwise the sizes it touches are specialized (guarded), as for any op without a rule.

Never a wrong answer: what cannot be represented so is Unsupported (a graph break at the call:
the transform runs eagerly) — a construct inside `fn` that cannot be traced (the error it
raises passes through), a mode left changed (grad, inference, autocast), an in-place op on
anything but a tensor `fn` made itself, not a view (it would write an argument or a tensor of
the frame behind the graph's back), an output that is not tensors in
tuples/lists, `chunk_size` (fn's Python would run once per chunk), `.cuda()`/`.cpu()` inside,
arguments vmap itself rejects (eager raises its error). A per-example value that outlives the
call (stored into a container: eager leaks a dead BatchedTensor) is marked `dead` on its
tracker; using it in the graph or the output code is Unsupported (output_graph.to_fx,
reconstruct.load_tensor).

A torch Python function given a traced function as an argument (`associative_scan(combine_fn,
...)`: a graph node cannot take a function) is inlined rather than made a node
(`takes_function`), so the transforms it applies are traced here too.
"""
from __future__ import annotations

import inspect
import itertools

import torch
import torch.fx

from pydynamo import _C
from pydynamo import meta as _meta
from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.containers import ListVariable, TupleVariable
from pydynamo.executor.variables.functions import BaseUserFunctionVariable, PartialVariable
from pydynamo.executor.variables.symbolic import SymNodeVariable
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.meta import TensorMeta
from pydynamo.mutation import node_mutation

VMAP_FNS = {torch.vmap, torch.func.vmap}
_VMAP_SIGNATURE = inspect.signature(torch.vmap)
_ids = itertools.count()


def _per_example(batched, dim):
    """Marker target of a per-example argument's node while `fn` is traced (replaced by a
    placeholder of the sub-graph before the graph is used)."""
    raise AssertionError("a per-example vmap argument left in a graph")


class VmapCall:
    """A graph node's target: torch.vmap over a traced sub-graph (flat tensor inputs/outputs)."""

    def __init__(self, gm: torch.fx.GraphModule, in_dims: tuple, out_dims: tuple, randomness: str,
                 meta_gm: torch.fx.GraphModule):
        self.gm, self.in_dims, self.out_dims, self.randomness = gm, in_dims, out_dims, randomness
        self.meta_gm = meta_gm
        self.__name__ = self.__qualname__ = f"vmap_{next(_ids)}"   # how FX spells the target

    def __call__(self, *args):
        # torch's vmap frames and the sub-graph's are not user code: the hook stays off
        prev = _C.set_eval_frame(None)
        try:
            return torch.vmap(self.gm, in_dims=self.in_dims, out_dims=self.out_dims,
                              randomness=self.randomness)(*args)
        finally:
            _C.set_eval_frame(prev)

    def on_meta(self, *args):
        """The call on meta examples (the node's metadata)."""
        with torch.device("meta"):
            return torch.vmap(self.meta_gm, in_dims=self.in_dims, out_dims=self.out_dims,
                              randomness=self.randomness)(*args)

    def __repr__(self):
        return f"{self.__name__}(in_dims={self.in_dims}, out_dims={self.out_dims})"


_C.set_code_state(VmapCall.__call__.__code__, "skip")


class VmapVariable(VariableTracker):
    """`torch.vmap(fn, ...)`: calling it traces fn once on per-example values (module doc)."""

    def __init__(self, fn: VariableTracker, in_dims, out_dims, randomness):
        super().__init__()
        self.fn, self.in_dims, self.out_dims, self.randomness = fn, in_dims, out_dims, randomness

    @staticmethod
    def build(args: list, kwargs: dict) -> "VmapVariable":
        try:
            bound = _VMAP_SIGNATURE.bind(*args, **kwargs)
        except TypeError as e:
            raise Unsupported("vmap", f"torch.vmap(): {e}") from None
        bound.apply_defaults()
        a = dict(bound.arguments)
        fn = a.pop("func")
        try:
            consts = {k: v.as_python_constant() if isinstance(v, VariableTracker) else v for k, v in a.items()}
        except Unsupported:
            raise Unsupported("vmap", "torch.vmap's in_dims/out_dims/randomness are not constants") from None
        if consts.get("chunk_size") is not None:
            raise Unsupported("vmap", "torch.vmap with chunk_size (fn's Python runs once per chunk)")
        return VmapVariable(fn, consts["in_dims"], consts["out_dims"], consts["randomness"])

    def python_type(self):
        return type(lambda: None)

    def call_function(self, tx, args, kwargs):
        return _trace_vmap(tx, self, list(args), dict(kwargs))

    def reconstruct(self, cg):
        """torch.vmap(fn, ...) again (a break at the call hands the transform to eager)."""
        return (f"{cg.load_const(torch.vmap)}({cg.reconstruct(self.fn)}, in_dims={cg.load_const(self.in_dims)}, "
                f"out_dims={cg.load_const(self.out_dims)}, randomness={cg.load_const(self.randomness)})")

    def __repr__(self):
        return f"VmapVariable({self.fn}, in_dims={self.in_dims}, out_dims={self.out_dims})"


def takes_function(args, kwargs) -> bool:
    """A traced function among the arguments (a graph node cannot take one)."""
    kinds = (BaseUserFunctionVariable, PartialVariable, VmapVariable)

    def has(v):
        if isinstance(v, kinds):
            return True
        return type(v) in (TupleVariable, ListVariable) and any(has(i) for i in v.items)
    return any(has(a) for a in itertools.chain(args, kwargs.values()))


# --- the trace --------------------------------------------------------------------------------

def _mode_state(root):
    return (root.grad_enabled_, root.inference_mode_, repr(root.autocast_))


def _trace_vmap(tx, spec: VmapVariable, args: list, kwargs: dict):
    og, root = tx.output, tx.root
    in_dims = spec.in_dims
    if in_dims is None or isinstance(in_dims, int):
        dims = [in_dims] * len(args)
    elif isinstance(in_dims, tuple) and len(in_dims) == len(args):
        dims = list(in_dims)
    else:
        raise Unsupported("vmap", f"torch.vmap: in_dims {in_dims!r} for {len(args)} arguments")
    if not isinstance(spec.randomness, str):
        raise Unsupported("vmap", "torch.vmap: randomness is not a string")
    last = next(iter(reversed(og.graph.nodes)), None)
    state = _mode_state(root)
    batched: list = []          # (outer tracker, its dim, the per-example tracker)
    inner_args = [_bind_example(og, a, d, batched) for a, d in zip(args, dims)]
    if not batched:
        raise Unsupported("vmap", "torch.vmap: no tensor argument is batched")
    regions, root.regions = root.regions, None     # templates would hold nodes moved away below
    try:
        out = spec.fn.call_function(tx, inner_args, kwargs)
    finally:
        root.regions = regions
    if _mode_state(root) != state:
        raise Unsupported("vmap", "torch.vmap: the function leaves a grad/inference/autocast mode changed")
    leaves, rebuild = _flatten_output(out)
    out_dims = _flat_dims(spec.out_dims, out, "out_dims")
    region = _nodes_after(og.graph, last)
    _check_writes(region)
    shapes = [tuple(leaf.meta.shape) if leaf.meta is not None else tuple(leaf.example.shape) for leaf in leaves]
    call, outer = _extract(og, region, [e for _, _, e in batched], leaves,
                           tuple(d for _, d, _ in batched), out_dims, spec.randomness)
    flat_in = [b for b, _, _ in batched] + outer
    # with symbolic sizes: each output is its per-example shape with the batch size inserted at
    # its out_dim (meta.propagate checks that against the run on hints and derives dense strides;
    # anything else specializes). The rule lives only while this call's metadata is made.
    _meta.RULES[call.on_meta] = _meta.Rule(_batched_shapes(shapes, out_dims, batched[0][1]))
    try:
        res = og.call(tx, "call_function", call, flat_in, {}, meta_target=call.on_meta)
    finally:
        del _meta.RULES[call.on_meta]
    return rebuild(list(tx.unpack(res)))


def _batched_shapes(shapes, out_dims, in_dim0):
    def rule(ctx, first, *rest):
        batch = first.shape[in_dim0]
        out = []
        for shape, d in zip(shapes, out_dims):
            if d is None:
                raise _meta.NoRule()
            d %= len(shape) + 1
            out.append(shape[:d] + (batch,) + shape[d:])
        return tuple(out)
    return rule


def _check_writes(region) -> None:
    """In-place ops inside the function may write only tensors it made itself (not views): a
    write to an argument or a value of the frame would happen behind the graph's back."""
    own = {n for n in region if n.op != "placeholder" and n.target is not _per_example}
    for n in own:
        mutation = node_mutation(n)
        if mutation is None:
            continue
        for w in mutation.written(n.args, n.kwargs):
            record = w.meta.get("val") if isinstance(w, torch.fx.Node) else None
            if w not in own or not isinstance(record, TensorMeta) or record.is_view:
                raise Unsupported("vmap", f"torch.vmap: in-place {getattr(n.target, '__name__', n.target)} "
                                  "on an argument, a view or a tensor of the frame inside the function")


def _bind_example(og, v, d, batched):
    """`v` as fn sees it under vmap with in_dim `d`: batched tensors become per-example ones."""
    if isinstance(v, TensorVariable):
        if d is None:
            return v
        if not isinstance(d, int) or isinstance(d, bool):
            raise Unsupported("vmap", f"torch.vmap: in_dim {d!r} for a tensor")
        nd = v.example.dim()
        if not -nd <= d < nd:
            raise Unsupported("vmap", f"torch.vmap: in_dim {d} of a {nd}-d tensor")
        d %= nd
        ex = _example(og, v, d)
        batched.append((v, d, ex))
        return ex
    if type(v) in (TupleVariable, ListVariable):
        container = tuple if type(v) is TupleVariable else list
        ds = d if isinstance(d, container) else [d] * len(v.items) if d is None or isinstance(d, int) else None
        if ds is None or len(ds) != len(v.items):
            raise Unsupported("vmap", f"torch.vmap: in_dims {d!r} do not match the argument's structure")
        return type(v)([_bind_example(og, x, dd, batched) for x, dd in zip(v.items, ds)])
    if d is None:
        return v
    raise Unsupported("vmap", f"torch.vmap: in_dim {d!r} for a {v.type_name()} argument")


def _example(og, v: TensorVariable, d: int) -> TensorVariable:
    """A per-example tracker of batched `v` (dim `d` removed), on a marker node."""
    record = v.meta if v.meta is not None else TensorMeta.from_tensor(v.example, device=v.device)
    record = record.replace(shape=record.shape[:d] + record.shape[d + 1:],
                            stride=record.stride[:d] + record.stride[d + 1:], storage_offset=0,
                            is_view=False, is_leaf=False, is_parameter=False, memory_format=None)
    node = og.graph.create_node("call_function", _per_example, (v.node, d), {})
    _meta.set_node_meta(node, record)
    example = record.to_meta_tensor(og.shape_env.size_hint) if record.is_symbolic else \
        torch.empty_strided(record.shape, record.stride, dtype=record.dtype, device="meta",
                            requires_grad=record.requires_grad)
    var = TensorVariable(node, example, v.device, meta=record, env=og.shape_env)
    og.by_example[id(example)] = var
    return var


def _flatten_output(out):
    """(tensor leaves, rebuild(results) -> the output's structure)."""
    if isinstance(out, TensorVariable):
        return [out], lambda res: res[0]
    if type(out) in (TupleVariable, ListVariable):
        parts = [_flatten_output(x) for x in out.items]
        leaves = [leaf for p, _ in parts for leaf in p]

        def rebuild(res):
            items, i = [], 0
            for p, r in parts:
                items.append(r(res[i:i + len(p)]))
                i += len(p)
            return type(out)(items)
        return leaves, rebuild
    raise Unsupported("vmap", f"torch.vmap: the function returned a {out.type_name()} (vmap's "
                      "outputs are tensors)")


def _flat_dims(dims, out, what):
    if dims is None or isinstance(dims, int) and not isinstance(dims, bool):
        return tuple([dims] * len(_flatten_output(out)[0]))
    if type(out) in (TupleVariable, ListVariable) and isinstance(dims, (tuple, list)) and \
            len(dims) == len(out.items):
        return tuple(d for x, dd in zip(out.items, dims) for d in _flat_dims(dd, x, what))
    raise Unsupported("vmap", f"torch.vmap: {what} {dims!r} do not match the function's output")


def _nodes_after(graph, last) -> list:
    nodes, n = [], (last.next if last is not None else next(iter(graph.nodes), None))
    root = graph._root
    while n is not None and n is not root:
        nodes.append(n)
        n = n.next
    return nodes


def _extract(og, region, examples, leaves, in_dims, out_dims, randomness):
    """Move the traced nodes into a sub-graph; returns (its VmapCall, the outer trackers it reads
    besides the batched arguments). The frame's graph keeps no node of the region."""
    inside = {n for n in region if n.op != "placeholder"}
    markers = [e.node for e in examples]
    lifted: dict = {}           # outer node -> None (an ordered set)
    for n in region:
        if n in inside and n.target is not _per_example:
            for a in n.all_input_nodes:
                if a not in inside:
                    lifted[a] = None
    for leaf in leaves:
        if leaf.dead is not None:
            raise Unsupported("vmap", f"torch.vmap: the function returned {leaf.dead}")
        if leaf.node not in inside:
            lifted[leaf.node] = None
    trackers = {}
    for var in og.by_example.values():
        trackers.setdefault(var.node, var)
    outer = [_outer_tracker(og, n, trackers) for n in lifted]
    sub = torch.fx.Graph()
    env = {}
    for i, m in enumerate(markers):
        env[m] = sub.placeholder(f"x{i}")
        env[m].meta = dict(m.meta)
    for i, n in enumerate(lifted):
        env[n] = sub.placeholder(f"c{i}")
        env[n].meta = dict(n.meta)
    for n in region:
        if n in inside and n not in env:
            env[n] = sub.node_copy(n, lambda a: env[a])
    sub.output(tuple(env[leaf.node] for leaf in leaves))
    gm = torch.fx.GraphModule(torch.nn.Module(), sub)
    call = VmapCall(gm, in_dims + (None,) * len(outer), out_dims, randomness,
                    torch.fx.GraphModule(torch.nn.Module(), _meta_graph(sub)))
    # the region leaves the frame's graph; trackers of its values are dead from here on
    for key, var in list(og.by_example.items()):
        if var.node in inside:
            var.dead = "a value computed inside torch.vmap's function (it escaped the call)"
            del og.by_example[key]
    og.forget_nodes(inside)
    for n in reversed(region):
        if n in inside:
            og.graph.erase_node(n)
    return call, outer


def _outer_tracker(og, node, trackers) -> VariableTracker:
    var = trackers.get(node)
    if var is not None:
        return var
    val = node.meta.get("val")
    if val is not None and not isinstance(val, TensorMeta) and hasattr(val, "free_symbols"):
        return SymNodeVariable(og.shape_env.symint(val))
    raise Unsupported("vmap", f"torch.vmap: the function reads {node.name}, which is not a tensor "
                      "or size of the frame")


_META = torch.device("meta")


def _meta_graph(graph: torch.fx.Graph) -> torch.fx.Graph:
    """A copy of `graph` that runs on meta examples: device arguments name the meta device, a
    nested VmapCall runs its own meta graph."""
    g = torch.fx.Graph()
    env = {}
    for n in graph.nodes:
        new = g.node_copy(n, lambda a: env[a])
        if n.op == "call_method" and n.target in ("cuda", "cpu", "type"):
            raise Unsupported("vmap", f"torch.vmap: Tensor.{n.target}() inside the function")
        if isinstance(n.target, VmapCall):
            new.target = VmapCall(n.target.meta_gm, n.target.in_dims, n.target.out_dims,
                                  n.target.randomness, n.target.meta_gm)
        moves = n.op == "call_method" and n.target == "to"
        new.args = tuple(_to_meta(a, moves) for a in new.args)
        new.kwargs = {k: _to_meta(v, moves or k == "device") for k, v in new.kwargs.items()}
        env[n] = new
    return g


def _to_meta(v, device_strings: bool):
    if isinstance(v, torch.device):
        return _META
    if device_strings and isinstance(v, str):
        try:
            torch.device(v)
        except RuntimeError:
            return v
        return "meta"
    if isinstance(v, (tuple, list)):
        return type(v)(_to_meta(x, device_strings) for x in v)
    return v

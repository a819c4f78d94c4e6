"""Splitting the joint graph into a forward and a backward graph.

The forward graph takes the primals and returns the computed outputs, then the values the
backward needs ("saved"); the backward graph takes the saved values, then the tangents, and
returns the gradients of the inputs that receive one (runtime.py maps them back).

Which nodes go where:
  * a node that depends on a tangent is backward work;
  * every other node the backward needs is computed in the forward and saved, unless it is
    cheaper to recompute in the backward.
The recompute rule: the backward may recompute a forward value when its op is cheap and fusible
(pointwise, a view, a layout or dtype copy, a constant fill, a softmax along one dimension;
never random, never another reduction, matmul, convolution or attention). Among the choices of
what to save and what to recompute from it, the partition takes one of fewest saved bytes (a
minimum cut, `_choose_saved`), counting an input or a view of one as free (alive anyway); ties
go to less recomputation. So a chain of pointwise ops collapses onto the expensive result it
starts from (`gelu(addmm(...))` saves the addmm result only), a float32 upcast of a bfloat16
tensor saves the bfloat16 one, a weight's autocast copy is recast from the weight, and a
log-softmax over a vocabulary saves its (narrower) logits and its row statistic (the log-softmax
is split first for codegen, `_split_log_softmax`). Saved bytes never exceed "save
everything the backward reads", and recomputed ops fuse into the backward kernels. In the
backward graph each recomputed value comes right before the first backward node that needs it,
so it is not alive from the backward's start (its memory peak) to its use. Random ops
always stay in the forward: the backward sees the forward's random values.

Sizes of a joint recorded over size symbols: a symbol's node (an int input, `primal.size(d)`)
is saved as an int (SymInts saved); size arithmetic over symbols is recomputed where it is used
and never saved, so the backward's int placeholders are bare symbols (which codegen binds) and
its sizes are computed from them. The symbols of the tangents' shapes are always saved (a
backward variant for an absent tangent makes its zeros from them).
"""
from __future__ import annotations

import operator
from typing import Dict, List, Optional, Set, Tuple

import sympy
import torch
import torch.fx

from pydynamo.aot.mincut import INF, FlowGraph
from pydynamo.aot.recorder import size_node
from pydynamo.meta import contiguous_strides

aten = torch.ops.aten

# cheap ops that are not tagged pointwise and not views
_CHEAP = {aten.clone.default, aten._to_copy.default, aten.full.default, aten.zeros.default,
          aten.ones.default, aten.full_like.default, aten.zeros_like.default,
          aten.ones_like.default, aten.scalar_tensor.default, aten.copy.default,
          aten.expand.default, aten.view.default, aten._unsafe_view.default,
          aten.reshape.default, aten.t.default, aten.permute.default, aten.transpose.int,
          aten.unsqueeze.default, aten.squeeze.dim, aten.detach.default, aten.alias.default,
          aten.where.self, aten.fill.Scalar,
          # one pass over what they read, fused with their consumer in the backward
          aten._softmax.default, aten._log_softmax.default}


def _is_random(target) -> bool:
    return isinstance(target, torch._ops.OpOverload) and \
        torch.Tag.nondeterministic_seeded in target.tags


# size arithmetic (a joint graph recorded with symbolic sizes computes the sizes its ops take
# from the size symbols): recomputed where needed, never saved, so a backward receives the
# symbols themselves (saved ints) and computes its sizes from them
_SIZE_OPS = {operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, max, min}


def _size_arithmetic(node: torch.fx.Node) -> bool:
    return node.op == "call_function" and node.target in _SIZE_OPS and \
        not isinstance(node.meta.get("val"), torch.Tensor) and not hasattr(node.meta.get("val"), "shape")


def recomputable(node: torch.fx.Node) -> bool:
    if node.op != "call_function":
        return False
    t = node.target
    if _size_arithmetic(node):
        return True
    if t is operator.getitem:
        return False        # part of a multi-output op: the op itself decides
    if not isinstance(t, torch._ops.OpOverload) or _is_random(t):
        return False
    if any(a.alias_info is not None and a.alias_info.is_write for a in t._schema.arguments):
        return False
    return t in _CHEAP or torch.Tag.pointwise in t.tags or t.is_view


def nbytes(node: torch.fx.Node) -> int:
    """Bytes of the node's value; symbolic sizes at the joint's example (its graph module's
    meta["size_hints"])."""
    v = node.meta.get("val")
    if v is None or not hasattr(v, "shape"):
        return 8
    n = 1
    for d in v.shape:
        if not isinstance(d, int):
            owner = node.graph.owning_module
            hints = owner.meta.get("size_hints", {}) if owner is not None else {}
            d = sympy.sympify(d).xreplace(hints)
        n *= int(d)
    return n * torch.empty((), dtype=v.dtype).element_size()


def _free(node: torch.fx.Node) -> bool:
    """Saving it costs no memory the forward does not keep anyway: an input, a constant, or a
    view of one."""
    if node.op in ("placeholder", "get_attr"):
        return True
    t = node.target
    return isinstance(t, torch._ops.OpOverload) and t.is_view and \
        all(_free(a) for a in node.all_input_nodes)


def _views_written(node: torch.fx.Node, written: Set[torch.fx.Node]) -> bool:
    """A written input or a view of one: its value when the backward runs is the written one,
    not the forward's (the runtime copies the input's final value in after the forward)."""
    if node in written:
        return True
    t = node.target
    return node.op == "call_function" and isinstance(t, torch._ops.OpOverload) and t.is_view and \
        any(_views_written(a, written) for a in node.all_input_nodes)


def partition(joint_gm: torch.fx.GraphModule, num_computed: int, num_tangents: int,
              num_inputs: int, written_inputs=frozenset(), split_statistics: bool = False):
    """(forward GraphModule, backward GraphModule, saved names, grad positions).

    forward: primals -> computed outputs + saved; backward: saved + tangents -> the non-None
    gradients, in input order (`grad positions` lists the inputs they belong to). A graph input
    the runtime writes back after the forward (`written_inputs`, by position), or a view of
    one, is saved as a copy: the backward needs its value before the write. `split_statistics`: for a compiler
    that fuses pointwise work into its kernels (codegen), a log-softmax the backward reads is
    split first (`_split_log_softmax`); aot_eager keeps eager's ops, and its gradients bit for
    bit."""
    graph = joint_gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    primals, tangents = placeholders[:num_inputs], placeholders[num_inputs:]
    backward = _backward_work(graph, tangents)
    if split_statistics and _split_log_softmax(graph, backward):
        backward = _backward_work(graph, tangents)
    nodes = list(graph.nodes)
    output = next(n for n in nodes if n.op == "output")
    outs = list(output.args[0])
    computed, grads = outs[:num_computed], outs[num_computed:]
    # ops that write an argument (the recorder's fallback for an in-place op without a
    # functional twin writes a fresh clone) stay in their graph, in order, used or not
    writers = [n for n in nodes if _writes(n)]
    bw_writers = [n for n in writers if n in backward]
    # what the gradients need
    needed_by_bw = _ancestors(list(grads) + bw_writers)
    bw_nodes = needed_by_bw & backward
    saved: Set[torch.fx.Node] = set()
    for n in bw_nodes:
        for a in n.all_input_nodes:
            if a not in backward:
                saved.add(a)
    for g in grads:       # a gradient that needs no tangent (rare): computed forward, saved
        if isinstance(g, torch.fx.Node) and g not in backward:
            saved.add(g)
    # the size symbols of the tangents' shapes: a backward variant for an absent tangent makes
    # its zeros from them (runtime._zero_tangents)
    size_nodes = joint_gm.meta.get("size_nodes", {})
    for t in tangents:
        for d in getattr(t.meta.get("val"), "shape", ()):
            for sym in getattr(d, "free_symbols", ()):
                saved.add(size_nodes[sym])

    order = {n: i for i, n in enumerate(nodes)}
    saved, recompute = _choose_saved(saved, backward, set(grads), primals, written_inputs)
    saved_list = sorted(saved, key=lambda n: order[n])

    # forward graph
    fw = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    fw_needed = _ancestors(computed + saved_list + [w for w in writers if w not in backward])
    for n in nodes:
        if n.op == "placeholder" and n in primals:
            env[n] = fw.node_copy(n)
        elif n in fw_needed and n.op in ("call_function", "call_method", "get_attr"):
            env[n] = fw.node_copy(n, lambda a: env[a])
    written = {p for k, p in enumerate(primals) if k in written_inputs}
    saved_meta = {s: dict(s.meta) for s in saved_list}

    def saved_value(s):
        if s in written:
            copy = fw.call_function(aten.clone.default, (env[s],))
            copy.meta = dict(s.meta)
            return copy
        if _views_written(s, written):
            # a view of a written input (`x[1:, 1:].mul_(w)` saves the slice's old value): a
            # dense copy, taken before the runtime writes the input back
            copy = fw.call_function(aten.clone.default, (env[s],),
                                    {"memory_format": torch.contiguous_format})
            v = s.meta["val"]
            copy.meta = saved_meta[s] = dict(s.meta, val=v.replace(
                stride=contiguous_strides(v.shape), storage_offset=0, is_view=False))
            return copy
        return env[s]
    fw.output(tuple(env[c] for c in computed) + tuple(saved_value(s) for s in saved_list))
    fw_gm = torch.fx.GraphModule(joint_gm, fw)
    fw_gm.graph.eliminate_dead_code()
    fw_gm.recompile()

    # backward graph
    bw = torch.fx.Graph()
    benv: Dict[torch.fx.Node, torch.fx.Node] = {}
    for i, s in enumerate(saved_list):
        p = bw.placeholder(f"saved_{i}_{s.name}")
        p.meta = dict(saved_meta[s])
        benv[s] = p
    for t in tangents:
        benv[t] = bw.node_copy(t)

    positions = [i for i, g in enumerate(grads) if isinstance(g, torch.fx.Node)]
    # the backward's nodes, copied in the joint graph's order (a writer before its readers),
    # each recomputed forward value just before the first backward node that needs it: copied
    # in forward order, the recomputation of every layer would come first and its results
    # stay alive through the whole backward, at its memory peak
    needed = _ancestors([grads[i] for i in positions] + bw_writers, stop=benv)

    def copy_with_inputs(n):
        stack = [n]
        while stack:
            m = stack[-1]
            missing = [a for a in m.all_input_nodes if a not in benv]
            if missing:
                stack.extend(missing)
                continue
            stack.pop()
            if m not in benv:
                assert m.op == "get_attr" or m in recompute or m in backward, m
                benv[m] = bw.node_copy(m, lambda a: benv[a])
    for n in nodes:
        if n in needed and n not in benv and n in backward:
            copy_with_inputs(n)
    for n in nodes:
        if n in needed and n not in benv:
            copy_with_inputs(n)
    bw.output(tuple(benv[grads[i]] for i in positions))
    bw_gm = torch.fx.GraphModule(joint_gm, bw)
    bw_gm.graph.eliminate_dead_code()
    bw_gm.recompile()
    return fw_gm, bw_gm, saved_list, positions, recompute


def _backward_work(graph: torch.fx.Graph, tangents) -> Set[torch.fx.Node]:
    """Whatever depends on a tangent."""
    backward: Set[torch.fx.Node] = set(tangents)
    for n in graph.nodes:
        if n.op == "call_function" and any(a in backward for a in n.all_input_nodes):
            backward.add(n)
    return backward


def _split_log_softmax(graph: torch.fx.Graph, backward: Set[torch.fx.Node]) -> bool:
    """A forward log-softmax the backward reads becomes `x - logsumexp(x, dim, keepdim)`.

    As one op it is either saved whole (as large as its input) or recomputed whole, its two row
    reductions included, in the backward. Split, the min cut can save the row statistic (one
    value per row, a reduction: never recomputed) and recompute the subtraction, which fuses
    into the backward's kernel: the LM loss over a vocabulary reads its logits once in the
    backward instead of three times. Only float32/float64 ones: a half-precision log-softmax
    (or half_to_float's) is computed in float and rounded once, while a split one would round
    its statistic to the half type first (an error of the statistic's last place in every
    value: tests/aot/test_autocast_training.py's CPU bf16 softmax case). Eager's kernel computes the same
    formula ((x - max) - log(sum(exp(x - max)))); the split form rounds max + log(sum) once
    more, within one ulp of the row statistic."""
    changed = False
    for n in list(graph.nodes):
        if n.op != "call_function" or n.target is not aten._log_softmax.default or \
                n in backward or not any(u in backward for u in n.users):
            continue
        x, dim, half_to_float = n.args
        v = n.meta.get("val")
        if half_to_float or not isinstance(x, torch.fx.Node) or \
                getattr(v, "dtype", None) not in (torch.float32, torch.float64):
            continue
        d = dim % len(v.shape) if v.shape else 0
        shape = tuple(1 if i == d else s for i, s in enumerate(v.shape))
        with graph.inserting_before(n):
            lse = graph.call_function(aten.logsumexp.default, (x, [dim], True))
            lse.meta = dict(n.meta, val=v.replace(shape=shape, stride=contiguous_strides(shape),
                                                  storage_offset=0, is_view=False))
            out = graph.call_function(aten.sub.Tensor, (x, lse))
            out.meta = dict(n.meta)
        n.replace_all_uses_with(out)
        graph.erase_node(n)
        changed = True
    return changed


def _choose_saved(needed: Set[torch.fx.Node], backward: Set[torch.fx.Node], grads,
                  primals, written_inputs) -> Tuple[Set[torch.fx.Node], Set[torch.fx.Node]]:
    """(saved, recomputed): a cheapest set of forward values to save such that every value in
    `needed` (forward values the backward reads) is saved or recomputable from saved ones.

    A minimum cut: every forward node v is two vertices, v.in -> v.out with capacity "bytes to
    save v" (0 for an input or a view of one: kept alive anyway; a written input or a view of one
    costs its copy;
    a tuple-valued node cannot be saved). The source feeds v.in for every node the backward may
    not recompute (not `recomputable`, or a gradient computed in the forward); an edge u.out ->
    v.in (infinite) for each use; v.out feeds the sink for every needed v. A node whose v.in is
    on the sink side is recomputed, so all it reads is saved or recomputed in turn; a node whose
    cut edge is crossed is saved. Of the cheapest cuts, the one nearest the sink (least
    recomputation)."""
    relevant = _ancestors(list(needed), stop=backward)
    flow = FlowGraph()
    SRC, SINK = "source", "sink"
    written = {p for k, p in enumerate(primals) if k in written_inputs}
    for n in relevant:
        if _is_multi_output(n) or _size_arithmetic(n):
            cost = INF
        elif _views_written(n, written) or not _free(n):
            cost = nbytes(n)
        else:
            cost = 0
        flow.add_edge((n, "in"), (n, "out"), cost)
        if not recomputable(n) or n in grads:
            flow.add_edge(SRC, (n, "in"), INF)
        for a in n.all_input_nodes:
            flow.add_edge((a, "out"), (n, "in"), INF)
        if n in needed:
            flow.add_edge((n, "out"), SINK, INF)
    _, sink_side = flow.min_cut(SRC, SINK)
    saved = {n for n in relevant if (n, "in") not in sink_side and (n, "out") in sink_side}
    recompute = {n for n in relevant if (n, "in") in sink_side}
    return saved, recompute


def shape_arg(graph: torch.fx.Graph, shape, before: torch.fx.Node) -> list:
    """`shape` as an op's argument in a partitioned graph: a symbolic size is computed (before
    `before`) from the graph's placeholders of the size symbols (saved ints)."""
    nodes = {n.meta["val"]: n for n in graph.nodes
             if n.op == "placeholder" and isinstance(n.meta.get("val"), sympy.Symbol)}
    return [d if isinstance(d, int) else size_node(graph, d, nodes, before) for d in shape]


def fit_unit_strides(gm: torch.fx.GraphModule, example_args) -> None:
    """A symbolic backward's placeholders take the stride 0 the forward gave a dim of size 1
    (codegen's forward returns a keepdim statistic as a view of the reduced buffer, stride 0
    there; the recording says the meta kernel's stride): the stride of a size-1 dim is never
    read, and the compiled backward checks its inputs' strides exactly."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for p, a in zip(placeholders, example_args):
        v = p.meta.get("val")
        if not isinstance(a, torch.Tensor) or not hasattr(v, "shape") or len(v.shape) != a.dim():
            continue
        stride = list(v.stride)
        for d, size in enumerate(v.shape):
            if isinstance(size, int) and size == 1 and a.stride(d) == 0:
                stride[d] = 0
        if stride != list(v.stride):
            p.meta["val"] = v.replace(stride=tuple(stride))


def _is_multi_output(node: torch.fx.Node) -> bool:
    return any(u.target is operator.getitem for u in node.users)


def _writes(node: torch.fx.Node) -> bool:
    t = node.target
    return node.op == "call_function" and isinstance(t, torch._ops.OpOverload) and \
        any(a.alias_info is not None and a.alias_info.is_write for a in t._schema.arguments)


def _ancestors(roots, stop=()) -> Set[torch.fx.Node]:
    """The nodes `roots` are computed from (themselves included), not walking past `stop`."""
    seen: Set[torch.fx.Node] = set()
    stack = [r for r in roots if isinstance(r, torch.fx.Node)]
    while stack:
        n = stack.pop()
        if n in seen or n in stop:
            continue
        seen.add(n)
        stack.extend(n.all_input_nodes)
    return seen

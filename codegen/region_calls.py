"""Regional compilation, level C (issue 20): a repeated region compiled once, called per instance.

The tracer's region templates (pydynamo/executor/regions.py) mark every node a template made
with `node.meta["pd_region"]`, its marks (template uid, instance, position in the template),
outermost template first; the graph handed to backends is the flat graph either way. With the
codegen option `compile_regions`, the pipeline (codegen/pipeline.py) first `outline`s a copy of
the graph: each instance of a template with two or more instances (the outermost such
template: a model's layers, not their attention modules, and not a one-instance module around
the layers; never a one-node module, MIN_NODES) becomes one call_function node whose target is
the template's `RegionCall` (one sub-GraphModule, built from the first instance's nodes, whose
placeholders are the instance's arguments and parameters), plus one getitem per result.
GraphLowering lowers that node (codegen/graph.py `_region_call`) as an extern call of the
sub-graph compiled through the same pipeline once (`RegionCall.compiled`; shared process-wide
by signature and compile settings, `_CACHE`): graph passes, lowering, codegen and the
C++/Triton build run once per template instead of once per layer.

Invariants (never a wrong answer; anything else stays flat, i.e. level B):
  * an instance is outlined only when it is structurally the first instance's: the same nodes
    (op, target, constants) in the same order, contiguous in the graph, wired the same way to
    the same number of outside values (external nodes) of the same metadata, with the same
    per-node metadata and the same results (nodes read outside the instance);
  * no node of the instance writes in place (node_mutation), so the extern is pure, as the
    wrapper and the scheduler assume of every extern;
  * every result is a new tensor (eager's is no view, storage offset 0) and every external a
    tensor: the extern's outputs are fresh buffers with the results' metadata, aliasing nothing;
  * the sub-graph's node metadata is eager's for the first instance's argument layouts: an
    instance whose arguments arrive in another layout runs the sub-graph eagerly (`__call__`).
A `RegionCall` called directly runs its sub-graph eagerly (an interpreter of the outlined graph,
the lowering's fallback). The outlined graph exists only inside one compile_graph call; the
compiled wrapper's eager escapes run the flat graph.
"""
from __future__ import annotations

import collections
import operator
from typing import Any, Callable, Dict, List, Optional

import torch
import torch.fx

from codegen.runtime import counters
from pydynamo.meta import TensorMeta
from pydynamo.mutation import node_mutation

# the tracer's node.meta key (pydynamo/executor/regions.py REGION_META; not imported: codegen
# does not load the tracing stage)
REGION_META = "pd_region"
# the fewest nodes an instance outlines: a one-op module (nn.Linear, nn.LayerNorm) as a region
# is one more call and one more compile for nothing
MIN_NODES = 2


# compiled sub-graphs by (signature, compile settings, device), process-wide: a recompile of the
# graph around the layers (another guard failed) finds its regions compiled. The signature
# (`_shape`) names everything the sub-graph computes: targets (by identity), constants, wiring,
# every node's and argument's metadata.
_CACHE: Dict[Any, Callable] = {}


class Pending:
    """A region's sub-graph compiled up to its kernels' source, which goes into the library of
    the graph calling it (`SharedLibrary`: one g++ run for both); `fn` is its compiled callable
    once that library loaded. Until then, and for good if that compile fails, a call runs the
    sub-graph eagerly."""
    __name__ = "region"

    def __init__(self, sub):
        self.fn = None
        self.sub = sub

    def __call__(self, *args):
        return (self.fn or self.sub)(*args)


class SharedLibrary:
    """The C++ kernels of one outer graph and of the region sub-graphs it calls, built as one
    library (codegen/pipeline.py `build`): a sub-graph's build `defer`s its kernels (renamed
    with a prefix of their own, so names never clash) and the rest of its build; the outer
    graph's build appends their source to its own (`source`), loads it once and finishes them
    (`done`). `abort` forgets the unfinished ones (the outer graph compiles flat instead)."""

    def __init__(self):
        self.pending: List[tuple] = []      # (kernels' source, finish(module, path), Pending)

    def prefix(self) -> str:
        return f"r{len(self.pending)}_"

    def defer(self, source: str, finish: Callable, sub) -> Pending:
        holder = Pending(sub)
        self.pending.append((source, finish, holder))
        return holder

    def source(self, own: str, preamble: str) -> str:
        """`own` (the outer graph's source) and the deferred kernels without their preamble
        (the same text: one backend, one set of options)."""
        parts = [own]
        for src, _, _ in self.pending:
            if not src.startswith(preamble):
                raise RuntimeError("a region's kernels were printed with another preamble")
            parts.append(src[len(preamble):])
        return "".join(parts)

    def done(self, module, path) -> None:
        for _, finish, holder in self.pending:
            holder.fn = finish(module, path)

    def abort(self) -> None:
        unfinished = {id(h) for _, _, h in self.pending if h.fn is None}
        for key in [k for k, fn in _CACHE.items() if id(fn) in unfinished]:
            del _CACHE[key]


def clear_cache() -> None:
    """Forget the compiled sub-graphs (tests: counting compiles from a clean state)."""
    _CACHE.clear()


class RegionCall:
    """One template's sub-graph: called by the outlined graph's node for every instance."""

    def __init__(self, uid: int, sub: torch.fx.GraphModule, compile_fn: Callable, key=None):
        self.uid = uid
        self.sub = sub
        self.__name__ = f"region_{uid}"
        self._compile_fn = compile_fn     # (sub, example inputs) -> callable: the pipeline's
        self._compiled: Dict[Any, Callable] = {}
        self.key = key                    # (signature, compile settings), or None: not shared
        self.layouts = [_layout(p.meta["val"]) for p in sub.graph.nodes if p.op == "placeholder"]

    def compiled(self, layouts, device: torch.device) -> Optional[Callable]:
        """The sub-graph compiled for arguments of `layouts` ((size, stride, dtype) each), once;
        None where they are not the layouts its metadata was traced for."""
        counters["region_calls"] += 1
        if list(layouts) != self.layouts:
            counters["region_layout_mismatches"] += 1
            return None
        fn = self._compiled.get(device)
        shared = None if self.key is None else (self.key, device)
        if fn is None and shared in _CACHE:
            fn = _CACHE[shared]
            fn = self._compiled[device] = fn.fn if isinstance(fn, Pending) and fn.fn else fn
            counters["region_cache_hits"] += 1
        if fn is None:
            examples = [torch.empty_strided(size, stride, dtype=dtype, device=device)
                        for size, stride, dtype in layouts]
            fn = self._compiled[device] = self._compile_fn(self.sub, examples)
            counters["region_graphs_compiled"] += 1
            if shared is not None:
                _CACHE[shared] = fn
        return fn

    def __call__(self, *args):
        return self.sub(*args)

    def __repr__(self):
        return f"<region {self.uid}: {len(self.sub.graph.nodes)} nodes>"


def _layout(m):
    return (tuple(m.shape), tuple(m.stride), m.dtype)


def outline(gm: torch.fx.GraphModule, compile_fn: Callable, settings=None
            ) -> Optional[torch.fx.GraphModule]:
    """A copy of `gm` with each outlinable instance replaced by one RegionCall node (None: no
    template has two outlinable instances). `compile_fn(sub, examples)` compiles a sub-graph;
    `settings` (hashable: backend, options) what it depends on besides the sub-graph, so
    compiled sub-graphs are shared process-wide (None: not shared)."""
    # uid -> instance -> [(node, position)]; a uid's depth: where its marks sit in the stacks
    groups: Dict[int, Dict[Any, list]] = collections.defaultdict(dict)
    depth: Dict[int, int] = {}
    for n in gm.graph.nodes:
        for d, (uid, inst, j) in enumerate(n.meta.get(REGION_META, ())):
            groups[uid].setdefault(inst, []).append((n, j))
            depth[uid] = min(depth.get(uid, d), d)
    chosen = []         # (uid, [(instance nodes, externals, outputs)], signature)
    claimed: set = set()    # nodes of an instance chosen already (an enclosing region's)
    for uid in sorted(groups, key=lambda u: depth[u]):     # outermost regions first
        instances = [m for m in groups[uid].values() if not any(n in claimed for n, _ in m)]
        if len(instances) < 2 or all(len(m) < MIN_NODES for m in instances):
            continue
        shaped = [([n for n, _ in m], _shape(m)) for m in instances]
        first = next((s for _, s in shaped if s is not None), None)
        same = [(nodes, s[1], s[2]) for nodes, s in shaped if s is not None and s[0] == first[0]]
        if len(same) >= 2:
            chosen.append((uid, same, first[0]))
            for nodes, _, _ in same:
                claimed.update(nodes)
        counters["region_instances_flat"] += len(shaped) - len(same) if len(same) >= 2 else len(shaped)
    if not chosen:
        return None
    graph = torch.fx.Graph()
    graph._codegen = gm.graph._codegen
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    out = graph.graph_copy(gm.graph, env)
    old_out = next(n for n in reversed(gm.graph.nodes) if n.op == "output")
    graph.output(out).meta = dict(old_out.meta)
    for uid, same, sig in chosen:
        nodes, externals, outputs = same[0]
        key = None if settings is None else (sig, settings)
        try:
            hash(key)
        except TypeError:       # an unhashable constant or setting: compiled for this graph only
            key = None
        target = RegionCall(uid, _sub_graph(nodes, externals, outputs), compile_fn, key)
        for nodes, externals, outputs in same:
            items = _replace(graph, target, [env[n] for n in nodes], [env[x] for x in externals],
                             [env[o] for o in outputs])
            env.update(zip(outputs, items))     # (a later instance's argument)
            counters["region_instances_outlined"] += 1
    graph.lint()
    outlined = torch.fx.GraphModule(gm, graph)
    outlined.meta.update(gm.meta)
    return outlined


def _shape(marked):
    """(signature, externals, outputs) of one instance's nodes ((node, position in the
    template), graph order), or None where it cannot be one call (not contiguous, a write in
    place, a non-tensor external or result, a result that is a view)."""
    nodes = [n for n, _ in marked]
    positions = [j for _, j in marked]
    inside = {n: i for i, n in enumerate(nodes)}
    if positions != sorted(set(positions)) or any(a.next is not b for a, b in zip(nodes, nodes[1:])):
        return None
    externals: Dict[torch.fx.Node, int] = {}

    def arg(a):
        if isinstance(a, torch.fx.Node):
            if a in inside:
                return ("n", inside[a])
            return ("x", externals.setdefault(a, len(externals)))
        if isinstance(a, (tuple, list)):
            return (type(a).__name__,) + tuple(arg(x) for x in a)
        if isinstance(a, dict):
            return ("d",) + tuple((k, arg(v)) for k, v in a.items())
        if isinstance(a, slice):
            return ("s", arg(a.start), arg(a.stop), arg(a.step))
        # (a float by its text too: -0.0 == 0.0, and their products' signs differ)
        return ("c", type(a), repr(a) if isinstance(a, float) else a)

    sig = []
    for n, j in zip(nodes, positions):
        if n.op not in ("call_function", "call_method") or node_mutation(n) is not None:
            return None
        sig.append((j, n.op, n.target, arg(n.args), arg(n.kwargs), n.meta.get("val")))
    outputs = [n for n in nodes if any(u not in inside for u in n.users)]
    for o in outputs:
        m = o.meta.get("val")
        if not isinstance(m, TensorMeta) or m.is_view or m.storage_offset != 0 or \
                m.layout != torch.strided or not _static(m):
            return None
    ext = list(externals)
    for x in ext:
        m = x.meta.get("val")
        if not isinstance(m, TensorMeta) or m.layout != torch.strided or not _static(m):
            return None
    sig.append(("out", tuple(inside[o] for o in outputs),
                tuple(_layout(x.meta["val"]) + (x.meta["val"].device,) for x in ext)))
    return tuple(sig), ext, outputs


def _static(m: TensorMeta) -> bool:
    return all(type(s) is int for s in (*m.shape, *m.stride, m.storage_offset))


def _sub_graph(nodes, externals, outputs) -> torch.fx.GraphModule:
    g = torch.fx.Graph()
    env = {}
    for k, x in enumerate(externals):
        p = env[x] = g.placeholder(f"arg{k}")
        p.meta["val"] = x.meta["val"]
    for n in nodes:
        c = env[n] = g.node_copy(n, lambda a: env[a])
        c.meta.pop(REGION_META, None)
    g.output(tuple(env[o] for o in outputs))
    return torch.fx.GraphModule(torch.nn.Module(), g)


def _replace(graph, target: RegionCall, nodes, externals, outputs) -> list:
    """One instance's nodes -> a call of `target` and a getitem per result (returned)."""
    items = []
    with graph.inserting_before(nodes[0]):
        call = graph.call_function(target, tuple(externals))
        call.meta["val"] = tuple(o.meta["val"] for o in outputs)
        for i, o in enumerate(outputs):
            item = graph.call_function(operator.getitem, (call, i))
            item.meta["val"] = o.meta["val"]
            o.replace_all_uses_with(item)
            items.append(item)
    for n in reversed(nodes):
        graph.erase_node(n)
    return items

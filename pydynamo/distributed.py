"""Distributed training: compiled graphs under DistributedDataParallel, and ranks that agree.

DDP. DistributedDataParallel overlaps gradient all-reduce with the backward: its reducer hooks
each parameter's gradient accumulator and launches a bucket's all-reduce as soon as every
gradient of the bucket is ready. A compiled training graph is one autograd Function
(aot/runtime.py) whose backward returns all its parameters' gradients at its end: every bucket
would become ready at once, after the whole backward, and no communication would overlap it.
So a graph compiled while DDP's forward runs (DDP.forward is library code: it runs eagerly and
calls the traced module inside `_inside_ddp_forward`, which makes
`DistributedDataParallel._get_active_ddp_module()` the DDP module) is split at bucket boundaries
before the backend sees it (`ddp_aware`, wrapped around the backend by the compile
callback, convert_frame): `bucket_pieces` walks the graph from its output back, assigning each
node to the current bucket and the parameters it reads first to that bucket's bytes, and starts
a new bucket at a node that reads a new parameter once the current one holds the DDP module's
`bucket_bytes_cap` (the first, DDP's `first_bucket_bytes_cap`): the buckets DDP itself forms,
parameters in reverse order of use. Each bucket's nodes become one GraphModule (a bucket
is a contiguous range of the node order, so a piece reads only placeholders and earlier pieces'
values), compiled by the backend at its first call with that call's real inputs, so a training
piece is its own autograd Function: when its backward finishes, autograd accumulates its
parameters' gradients and DDP's hooks fire, while the earlier pieces' backwards still run.
(DDP rebuilds its buckets after the first step in the order gradients became ready; with the
pieces that order is the pieces' order, so its buckets and the pieces stay aligned.)
`counters["ddp_pieces"]` counts the pieces compiled, `counters["ddp_unsplit"]` graphs under DDP
compiled whole (one bucket, or a graph that switches grad or autocast mode part way, whose
pieces would not know the mode: compiled whole, correct, without overlap, warned once).
no_sync, find_unused_parameters, static_graph and gradient accumulation need nothing here: DDP's
own eager forward and reducer decide them, and see the pieces as ordinary autograd nodes whose
inputs are the parameters the graph reads. `pydynamo.config.optimize_ddp = False` turns the
split off.

Ranks agree. What a guard checks is rank-local: the shapes and strides of input tensors (an
uneven last batch, a rank-dependent sequence length), Python values read from the frame, its
globals and modules (a `rank` or `world_size` variable, a flag set on one rank), device indices
(cuda:rank: consistent per rank, not a divergence). Where one rank's guards fail and another's
pass, the first recompiles and the second does not: with automatic dynamic the first then runs
a different graph, and under DDP or FSDP a different sequence of collectives can deadlock.
`pydynamo.config.distributed_guard_check = True` (opt-in: one small all-gather per call of a
compiled frame) makes every rank agree on each guard outcome: the guards of each compiled entry
are wrapped (`checked_guard`) so that a cache hit all-gathers (this code's fingerprint, the
entry's number) and a miss (the compile callback, `check_miss`) all-gathers (fingerprint, -1);
ranks that disagree raise GuardDivergence on every rank at once, naming each rank's outcome and
the guards that failed, instead of deadlocking later. The first compile of a code is not
checked (no entry yet: every rank compiles it). Like any collective, the check needs every rank
to call the compiled frames in the same order (a frame called more often on one rank pairs its
check with another frame's, which reads as a divergence, or with a collective of another kind).
Cost: one all-gather of 2 int64 per call (gloo on loopback, this 2-core machine under load:
about 1.4 ms per call against 0.04-0.07 ms without).
"""
from __future__ import annotations

import collections
import functools
import warnings
import zlib
from typing import Callable, Optional

import torch
import torch.fx
from torch.nn.parallel import DistributedDataParallel

from pydynamo import autocast as _autocast
from pydynamo import config
from pydynamo.stages import lazy

aot = lazy("pydynamo.aot")     # the training stage (pydynamo/stages.py: off a warm hit's path)

# "ddp_pieces": pieces compiled from graphs split at DDP's buckets; "ddp_split_graphs": graphs
# split; "ddp_unsplit": graphs under DDP compiled whole; "guard_checks": collective checks run
counters: collections.Counter = collections.Counter()


class GuardDivergence(RuntimeError):
    """Ranks took different guard outcomes for the same call of a compiled frame."""


# ---- DDP ---------------------------------------------------------------------------------------

def active_ddp_module():
    """The DistributedDataParallel module whose forward is running, or None."""
    if not torch.distributed.is_available():
        return None
    get = getattr(DistributedDataParallel, "_get_active_ddp_module", None)
    return get() if get is not None else None


def ddp_aware(backend: Callable) -> Callable:
    """`backend`, splitting at DDP's buckets the graphs compiled inside a DDP forward (the
    compile callback hands the executor this; pydynamo.config.optimize_ddp False: no split)."""
    @functools.wraps(backend, updated=())
    def wrapped(gm, example_inputs):
        # (only a training graph has a backward to overlap)
        ddp = active_ddp_module() if config.optimize_ddp else None
        if ddp is None or not aot.needs_autograd(example_inputs):
            return backend(gm, example_inputs)
        return compile_ddp_graph(gm, example_inputs, ddp, backend)
    return wrapped


def ddp_bucket_caps(ddp) -> tuple:
    """(first bucket's bytes, later buckets' bytes) of a DDP module, as its reducer builds them."""
    cap = int(getattr(ddp, "bucket_bytes_cap", 25 * 1024 * 1024))
    cfg = getattr(ddp, "_bucket_config", None)
    first = getattr(cfg, "first_bucket_bytes_cap", None)
    return (int(first) if first is not None else cap), cap


def ddp_parameters(ddp) -> dict:
    """id -> bytes of the parameters DDP reduces (requires_grad, not in parameters_to_ignore)."""
    ignore = getattr(ddp, "parameters_to_ignore", set())
    return {id(p): p.numel() * p.element_size() for n, p in ddp.module.named_parameters()
            if p.requires_grad and n not in ignore}


def _mode_switches(gm) -> bool:
    """The graph changes grad mode or enters/leaves autocast: a piece would not see the mode the
    node before it set."""
    state = {torch._C._set_grad_enabled, *_autocast.GRAPH_NODES}
    return any(n.op == "call_function" and n.target in state for n in gm.graph.nodes)


def bucket_pieces(gm: torch.fx.GraphModule, example_inputs, params: dict, caps: tuple) -> dict:
    """node -> piece number (0 first in forward order) for `gm`'s computing nodes: buckets of
    parameter bytes formed from the output back, as DDP buckets gradients in reverse order of
    use. `params`: id -> bytes of the parameters DDP reduces; `caps`: (first, later) bucket
    bytes."""
    param_of = {}
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    for node, value in zip(placeholders, example_inputs):
        if isinstance(value, torch.Tensor) and id(value) in params:
            param_of[node] = params[id(value)]
    bucket, size, seen, where = 0, 0, set(), {}
    for node in reversed(list(gm.graph.nodes)):
        if node.op in ("placeholder", "output"):
            continue
        new = [p for p in node.all_input_nodes if p in param_of and p not in seen]
        if new and size >= (caps[0] if bucket == 0 else caps[1]):
            bucket, size = bucket + 1, 0
        for p in new:
            seen.add(p)
            size += param_of[p]
        where[node] = bucket
    return {n: bucket - b for n, b in where.items()}


_warned: set = set()


def _warn_once(key: str, text: str) -> None:
    if key not in _warned:
        _warned.add(key)
        warnings.warn(text, stacklevel=3)


def compile_ddp_graph(gm: torch.fx.GraphModule, example_inputs, ddp, backend: Callable) -> Callable:
    """The callable for a graph traced inside `ddp`'s forward: one piece per DDP bucket, each
    compiled by `backend` at its first call; the whole graph by `backend` where it is one bucket
    or cannot be split."""
    pieces = bucket_pieces(gm, example_inputs, ddp_parameters(ddp), ddp_bucket_caps(ddp))
    n = max(pieces.values(), default=0) + 1
    if n > 1 and _mode_switches(gm):
        _warn_once("mode", "pydynamo: a graph under DistributedDataParallel switches grad or "
                   "autocast mode; it is compiled whole, so its gradients' all-reduce starts "
                   "after its whole backward (no overlap)")
        n = 1
    if n == 1:
        counters["ddp_unsplit"] += 1
        return backend(gm, example_inputs)
    try:
        run = _split(gm, pieces, n, backend)
    except Exception as e:     # never worse than no split: the graph compiled whole
        _warn_once("split", f"pydynamo: a graph under DistributedDataParallel could not be split at "
                   f"DDP's buckets ({type(e).__name__}: {e}); it is compiled whole (no overlap)")
        counters["ddp_unsplit"] += 1
        return backend(gm, example_inputs)
    counters["ddp_split_graphs"] += 1
    return run


class _Piece:
    """One bucket's nodes as a GraphModule of their own (inputs: the placeholders and earlier
    pieces' values they read; outputs, a tuple: their values that later pieces or the graph's
    output read), compiled by the backend at its first call, with that call's real inputs."""

    def __init__(self, gm, nodes: list, later_reads: set, backend: Callable):
        graph = torch.fx.Graph()
        env: dict = {}
        inputs, own = [], set(nodes)
        for node in nodes:
            for a in node.all_input_nodes:
                if a not in own and a not in inputs:
                    inputs.append(a)
        for a in inputs:
            env[a] = graph.placeholder(a.name)
            env[a].meta = dict(a.meta)
        for node in nodes:
            env[node] = graph.node_copy(node, lambda a: env[a])
        self.inputs = inputs
        self.outputs = [node for node in nodes if node in later_reads]
        graph.output(tuple(env[node] for node in self.outputs))
        self.gm = torch.fx.GraphModule(gm, graph)     # get_attr targets resolve in gm
        self.backend = backend
        self.fn: Optional[Callable] = None

    def __call__(self, env: dict):
        args = [env[a] for a in self.inputs]
        if self.fn is None:
            self.fn = self.backend(self.gm, list(args))
            counters["ddp_pieces"] += 1
        return self.fn(*args)


def _split(gm: torch.fx.GraphModule, piece_of: dict, n: int, backend: Callable) -> Callable:
    """The graph as `n` pieces run in order; a piece's values are dropped after their last
    reader ran, so activations live as long as in the whole graph."""
    groups: list = [[] for _ in range(n)]
    output = None
    for node in gm.graph.nodes:
        if node.op == "output":
            output = node
        elif node.op != "placeholder":
            groups[piece_of[node]].append(node)
    last_reader: dict = {}
    for node in gm.graph.nodes:
        for a in node.all_input_nodes:
            last_reader[a] = n if node.op == "output" else piece_of[node]
    later_reads = {a for a, k in last_reader.items() if a.op != "placeholder" and
                   (k == n or k > piece_of[a])}
    pieces = [_Piece(gm, nodes, later_reads, backend) for nodes in groups]
    placeholders = [node for node in gm.graph.nodes if node.op == "placeholder"]
    drop_after = [[a for a, k in last_reader.items() if k == i] for i in range(n)]

    def run(*args):
        env = dict(zip(placeholders, args))
        del args
        for i, piece in enumerate(pieces):
            env.update(zip(piece.outputs, piece(env)))
            for a in drop_after[i]:
                env.pop(a, None)
        return torch.fx.node.map_arg(output.args[0], lambda a: env[a])
    run.pieces = pieces
    return run


# ---- ranks agree -------------------------------------------------------------------------------

def _group_active() -> bool:
    d = torch.distributed
    return d.is_available() and d.is_initialized() and d.get_world_size() > 1


def _fingerprint(code) -> int:
    return zlib.crc32(f"{code.co_filename}:{code.co_firstlineno}:{code.co_qualname if hasattr(code, 'co_qualname') else code.co_name}".encode())


def _agree(code, outcome: int, describe: Callable[[], str]) -> None:
    """All-gather (code fingerprint, outcome) and raise GuardDivergence on every rank if the
    ranks differ (outcome: the entry number of a hit, -1 a miss)."""
    d = torch.distributed
    counters["guard_checks"] += 1
    mine = torch.tensor([_fingerprint(code), outcome], dtype=torch.int64)
    gathered = [torch.empty_like(mine) for _ in range(d.get_world_size())]
    d.all_gather(gathered, mine)
    if all(torch.equal(g, gathered[0]) for g in gathered):
        return
    texts = [None] * d.get_world_size()
    d.all_gather_object(texts, f"{_outcome_text(code, outcome)}{describe()}")
    lines = "\n".join(f"  rank {r}: {t}" for r, t in enumerate(texts))
    raise GuardDivergence(
        f"pydynamo: ranks disagree on the guards of a compiled frame (distributed_guard_check):\n"
        f"{lines}\nA recompile on some ranks only would run different graphs (and different "
        "collectives) per rank. Make the inputs' shapes and the values the code reads equal on "
        "every rank (pad the last batch, mark_dynamic the varying dim), or turn "
        "pydynamo.config.distributed_guard_check off.")


def _outcome_text(code, outcome: int) -> str:
    where = f"{code.co_name} ({code.co_filename}:{code.co_firstlineno})"
    return f"{where}: " + (f"compiled entry {outcome} passes its guards" if outcome >= 0 else
                           "no compiled entry passes its guards (recompiles)")


_ENTRY_NUMBERS: "collections.defaultdict" = collections.defaultdict(int)


class CheckedGuard:
    """A compiled entry's guard that, on a pass, checks with every rank that they pass the same
    entry (a rank whose guards fail all-gathers its miss from the compile callback). Attributes
    (the Guard list, the callback) are the wrapped guard's."""

    def __init__(self, guard, code):
        self.__dict__["_guard"] = guard
        self.__dict__["_code"] = code
        key = _fingerprint(code)
        self.__dict__["_number"] = _ENTRY_NUMBERS[key]
        _ENTRY_NUMBERS[key] += 1

    def __call__(self, frame_locals):
        ok = self._guard(frame_locals)
        if ok and _group_active():
            _agree(self._code, self._number, lambda: "")
        return ok

    def __getattr__(self, name):
        return getattr(self._guard, name)

    def __setattr__(self, name, value):
        setattr(self._guard, name, value)


def checked_guard(guard, code):
    """`guard` wrapped for the collective check when pydynamo.config.distributed_guard_check is
    on and a process group of more than one rank is initialized, else `guard` itself."""
    if not (config.distributed_guard_check and _group_active()):
        return guard
    return CheckedGuard(guard, code)


def check_miss(code, entries: list, explain: Callable[[], str]) -> None:
    """Called by the compile callback when this rank's compiled entries all fail their guards:
    agree with the other ranks (who call this or a CheckedGuard) that every rank recompiles.
    `explain()`: this rank's failing guards, for the error."""
    if entries and config.distributed_guard_check and _group_active() and \
            any(isinstance(g, CheckedGuard) for g, _ in entries):
        _agree(code, -1, lambda: "\n      " + explain().replace("\n", "\n      "))


__all__ = ["GuardDivergence", "active_ddp_module", "bucket_pieces", "check_miss", "checked_guard",
           "compile_ddp_graph", "counters", "ddp_aware"]

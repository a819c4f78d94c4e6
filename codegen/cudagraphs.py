"""CUDA-graph capture and replay of one compiled graph (mode="reduce-overhead").

`CudaGraphRunner(fn, ...)` behaves like `fn` (the generated wrapper's `call`):
  * captures are grouped by size bucket: one bucket per distinct static shape set (shape,
    stride, dtype, device of every tensor input, plus the non-tensor inputs). A wrapper of a
    graph without size symbols has one valid set, which its generated `matches(...)` (the entry
    checks) recognizes faster than a key of every input's metadata (a call that fails it runs the
    wrapper plainly); a graph with size symbols (automatic dynamic: a decode loop at batch 1 then
    batch 8) gets a bucket per concrete shape set, at most MAX_BUCKETS of them;
  * the first WARMUP calls of a bucket run plainly (Triton compiles, cuBLAS picks its kernels,
    the caching allocator settles); the next call captures `fn` into a torch.cuda.CUDAGraph
    drawing from one memory pool shared by the runner's graphs;
  * which tensor arguments a capture reads in place (at the caller's address) and which it copies
    into a static buffer is decided per argument from the addresses of the call before: an
    argument at the same address in both calls (a parameter, a static KV cache, a tensor the
    caller reuses) is read in place; one that moved (a fresh `input_ids` per decode step) gets a
    static buffer that each replay copies it into. A capture is replayed whenever every in-place
    argument is back at its captured address (no copy; sound without holding the tensor: the
    bytes at that address are the argument's current contents, whoever owns them); a call that
    fits no capture runs plainly once and the next such call captures again with the roles its
    addresses give (a new cache per `generate` call, read in place again), keeping at most
    MAX_CAPTURES per bucket (the least recently used goes);
  * values the wrapper derives from parameters and keeps across calls (codegen/derived.py: a
    concatenated or padded weight) are read by a capture at their fixed address; a replay runs
    no host code, so each is refreshed (recomputed in place if a parameter moved) before it;
  * inputs the graph mutates in place: an in-place argument is written by the replay itself (the
    static KV cache updated inside the graph); a copied one is copied back to the caller's tensor;
  * outputs the caller copies into an input after the call (`copy_back`: pydynamo/aot's
    write-backs of a functionalized graph, such as a cache's `cumulative_length.add_`) are
    copied into that input by the captured work itself, and the input is returned in their
    place: the caller's copy is onto itself (skipped by torch), so no launch is left outside
    the graph;
  * outputs: one that shares storage with an argument comes back as the same view of the
    caller's argument (eager's aliasing); any other is handed out as the graph's own memory, no
    copy (Options.cudagraph_outputs, "static" by default): a tensor on its own storage object
    that aliases the static buffer and keeps it alive (so no later capture can take that memory
    while the caller holds it). A later replay of this runner (any of its graphs: they share one
    pool, so one graph's scratch memory may be another's output) overwrites that memory, so
    before every replay each output handed out by the previous one is looked at (a weak
    reference to its storage; the storage's use count counts the returned tensor, every view the
    caller derived from it and any storage object of it):
      - dropped (count 0): nothing to do (a loop that discards or replaces its outputs: no cost);
      - held, and an argument of this call (`x = f(x)`; the caller evidently still uses it):
        copied out (see "copy-out" below), so it keeps its values at a new address;
      - held, and handed out in the current step once pydynamo.cudagraph_mark_step_begin() has
        been called (codegen/cudagraph_steps.py: `f(x) + f(y)`, outputs kept within one
        iteration): copied out likewise;
      - held otherwise (`out = f(x)` in a loop holds the previous `out` during the call):
        invalidated where torch's storage-wide access error exists (CUDA builds): reading it, or
        any view of it, raises STALE_OUTPUT (telling the user to `.clone()` it; torch.compile's
        reduce-overhead raises likewise), at no cost; copied out like the above where it does
        not (the simulated device of the tests, CPU builds), or with cudagraph_outputs=
        "copy_held" (never raises; costs a copy per held output and replay);
    no stale value is ever read. Copy-out, where torch swaps a storage's memory
    (UntypedStorage._swap_data_ptr_): the storage's memory is swapped for a fresh copy, so the
    tensor and every view of it follow. Where it does not (torch 2.11's CUDA build): each
    handed-out tensor object the runner can still reach (it keeps weak references to them) is
    `set_` onto one fresh copy of the storage (offsets kept, so outputs sharing a storage still
    alias each other; autograd's version counter kept, so a saved activation stays usable); if
    the old memory is then still referenced by something the runner cannot reach (a view the
    caller made, a bare storage object, a copy autograd made of a tensor), this call runs
    plainly (the replay would overwrite that memory; a plain call draws fresh memory), the
    runner copies every output from then on (no new static output can be caught so), and it
    replays again once every such memory is dropped (or invalidated, when a later call finds it
    held but no longer to be kept). Never an error for an output the policy keeps.
    A training backward (Options.boxed) gets "copy_held": autograd keeps gradients as .grad and
    accumulates into them (without swapping: a gradient autograd took over as .grad is a tensor
    object the runner did not make, so one still held at the next backward replay, as in
    gradient accumulation, turns that runner to copying, after one plain call).
    cudagraph_outputs="copy" keeps copying every output out at each call (the runner's
    default: the "cudagraphs" backend, pydynamo/cudagraphs.py, promises fresh outputs); so does
    a torch with neither swapping nor a version-preserving `set_`;
  * a graph that cannot be captured launches plainly from then on (counted in
    `codegen.counters["cudagraph_plain_launch"]`, said once in the perf log): a CPU sync such
    as .item() or nonzero is found by the warm-up call under torch's sync debug mode (graphs
    that mutate inputs skip that check: a re-run would apply the mutation twice), anything
    else by a failed capture.
The device calls (pool, capture, sync check, the access error) go through a `Device` object, so
the bookkeeping above runs on the CPU with a simulated graph in the tests
(tests/models/test_decode.py; outputs: tests/operating/test_cudagraph_outputs.py).
Default: on for mode="reduce-overhead" or options={"cudagraphs": True}; off for mode=None (see
benchmarks/results/GPU.md for the measurement behind that choice: the warm-up, and the output copy
this runner made before handing out static outputs, made it a loss for graphs with large outputs).
"""
from __future__ import annotations

import collections
import logging
import weakref
from typing import Any, Callable, Dict, List, Optional

import torch

from codegen import cudagraph_steps as steps
from codegen.options import CUDAGRAPH_OUTPUTS as OUTPUT_POLICIES, Options
from codegen.runtime import counters

perf_log = logging.getLogger("pydynamo.perf")
WARMUP = 1
MAX_CAPTURES = 8      # per bucket: address sets of the in-place arguments kept captured
MAX_BUCKETS = 64      # per runner: concrete shape sets of a graph with size symbols
STALE_OUTPUT = (
    "pydynamo: this tensor is an output of a CUDA-graph replay (mode='reduce-overhead') that a "
    "later call of the same compiled function has overwritten. To keep an output past the next "
    "call, clone it before that call (`out = compiled(x).clone()`), or compile with "
    "options={'cudagraph_outputs': 'copy_held'}. See docs/USER_GUIDE.md, 'GPU and CUDA graphs'.")
_use_count = torch._C._storage_Use_Count
_weak_ref = torch.UntypedStorage._weak_ref
_from_weak = torch.UntypedStorage._new_with_weak_ptr
_free_weak = torch.UntypedStorage._free_weak_ref
# copy-out by swapping a storage's memory (views follow); read when a runner is made (tests set it)
CAN_SWAP = hasattr(torch.UntypedStorage, "_swap_data_ptr_")
# copy-out without it: Tensor.set_ onto a copy, keeping autograd's version counter (set_ bumps it,
# and a saved activation whose version moved fails the backward)
_preserve_version = getattr(torch.autograd, "_unsafe_preserve_version_counter", None)


def maybe_wrap(call, gm, g, options: Options, stats, matches=None):
    if not options.use_cudagraphs:
        return call
    scalars = getattr(g, "scalars", None)
    if scalars is not None and scalars.args:
        # one kernel serves all float values: a capture per value would bake each one in
        counters["cudagraph_plain_launch"] += 1
        perf_log.warning("pydynamo cudagraphs: graph has float inputs; launching plainly")
        return call
    # inputs the wrapper writes: its own write-backs, and scatters written into an input whose
    # new value the caller would copy in (codegen/reinplace.py)
    mutated = sorted({m.position for m in g.mutations.values()} |
                     set(gm.meta.get("written_inputs", ())))
    # a training backward (boxed: pydynamo/aot's) returns gradients autograd may keep as .grad
    # and add the next backward's into (accumulation): held ones are copied, never invalidated
    outputs = options.cudagraph_outputs
    if options.boxed and outputs == "static":
        outputs = "copy_held"
    # size symbols: no `matches` (it knows one shape set); a bucket per concrete shape set
    return CudaGraphRunner(call, mutated, None if getattr(g, "size_bindings", None) else matches,
                           copy_back=gm.meta.get("copied_back", ()), outputs=outputs,
                           derived=getattr(g, "derivations", ()))


def bucket_key(args):
    """The size bucket of a call: every tensor's shape, stride, dtype and device, the values
    of the other arguments."""
    return tuple((a.shape, a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor)
                 else ("const", type(a), a) for a in args)


def ptrs_of(args):
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args)


def in_place_roles(ptrs, previous) -> tuple:
    """Per argument: True when a capture reads it in place (a tensor at the same address as in
    the call before), False when it gets a static buffer (a tensor that moved), None for a
    non-tensor."""
    return tuple(None if p is None else (previous is not None and p == previous[i])
                 for i, p in enumerate(ptrs))


class Device:
    """The CUDA calls the runner makes (tests substitute a simulated graph)."""

    # storage-wide access error (CUDA builds of torch): (storage address, message); every tensor
    # on that storage raises the message when its data is read. None: held outputs are copied
    # out instead
    invalidate = getattr(torch._C, "_set_storage_data_ptr_access_error_msg", None)

    def pool(self):
        return torch.cuda.graph_pool_handle()

    def capture(self, fn, args, pool):
        """(graph, outputs): `fn(*args)` recorded into a graph (not yet replayed)."""
        graph = torch.cuda.CUDAGraph()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, pool=pool):
            outs = fn(*args)
        return graph, outs

    def failed(self):
        torch.cuda.synchronize()

    def checking_syncs(self, fn, args):
        """fn(*args) with CPU syncs raising (RuntimeError mentioning a synchronization)."""
        prev = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return fn(*args)
        finally:
            torch.cuda.set_sync_debug_mode(prev)


class _Graph:
    """One capture: the graph, the roles of the arguments, the captured addresses, the static
    buffers of the copied arguments, the outputs (static, or views of an argument)."""

    def __init__(self, graph, roles, ptrs, static, outputs, aliases, written, shared, passed):
        self.graph, self.roles, self.ptrs, self.static = graph, roles, ptrs, static
        self.outputs, self.aliases = outputs, aliases
        self.written = written      # argument positions the captured work writes
        self.copies = sum(1 for r in roles if r is False)
        # per tensor output: None, or a byte view of the static storage it shares with another
        # output (handed out as views of one storage, so they alias each other as eager's do)
        self.shared = shared
        # argument positions that may hold an output this runner handed out: the copied ones,
        # and in-place ones whose captured address was in such an output
        self.passed = passed

    def fits(self, ptrs) -> bool:
        return all(p == q for r, p, q in zip(self.roles, ptrs, self.ptrs) if r)


class _Bucket:
    def __init__(self):
        self.calls = 0
        self.plain = False
        self.previous: Optional[tuple] = None     # the addresses of the last call
        # least recently used first; fewest copies tried first
        self.graphs: "collections.OrderedDict[int, _Graph]" = collections.OrderedDict()
        self.missed = False     # the last call fitted no capture and ran plainly


def _output_alias(o, args):
    """(argument position, storage-offset delta) when output `o` shares an argument's storage
    with its dtype, else None. (A delta of None, set for copy_back: the argument itself.)"""
    if not isinstance(o, torch.Tensor):
        return None
    s = o.untyped_storage().data_ptr()
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor) and a.dtype == o.dtype and \
                a.untyped_storage().data_ptr() == s:
            return i, o.storage_offset() - a.storage_offset()
    return None


def _alias_of(t):
    """A tensor on a new storage object aliasing `t`'s memory, that keeps `t` alive (DLPack)."""
    return torch._C._from_dlpack(torch._C._to_dlpack(t))


def _fresh_copy(storage):
    fresh = torch.empty(storage.nbytes(), dtype=torch.uint8, device=storage.device)
    fresh = fresh.untyped_storage()
    fresh.copy_(storage)
    return fresh


def _copy_out(storage):
    """Moves `storage` (every tensor and view on it) to a fresh copy of its bytes."""
    storage._swap_data_ptr_(_fresh_copy(storage))   # the temporary now holds the alias: freed


def _set_out(h: "_Handed") -> bool:
    """Copy-out without swapping: every handed-out tensor of `h` still alive and on its storage
    is `set_` onto one fresh copy (same offsets). False when none was left to move."""
    live = [t for t in (r() for r in h.tensors) if t is not None]
    live = [t for t in live if t.untyped_storage()._cdata == h.addr]
    if not live:
        return False
    fresh = _fresh_copy(live[0].untyped_storage())
    for t in live:
        try:
            if t.is_inference():         # (no version counter; written only in inference mode)
                with torch.inference_mode():
                    t.set_(fresh, t.storage_offset(), t.shape, t.stride())
            else:
                with torch.no_grad(), _preserve_version(t):
                    t.set_(fresh, t.storage_offset(), t.shape, t.stride())
        except RuntimeError:    # left on the old memory: the caller sees it still referenced
            pass
    return True


class _Handed:
    """A storage the last replay handed out as the graph's memory: a weak reference to it, its
    address (the StorageImpl's, for the use count), its byte range, the step it was handed out
    in, and weak references to the tensor objects handed out on it (moved by `set_` where the
    storage's memory cannot be swapped)."""
    __slots__ = ("ref", "addr", "lo", "hi", "step", "tensors")

    def __init__(self, storage, step):
        self.ref, self.addr = _weak_ref(storage), storage._cdata
        self.lo = storage.data_ptr()
        self.hi, self.step, self.tensors = self.lo + storage.nbytes(), step, []


def _shared_storages(outs, aliases):
    """Per tensor output: a byte view of its static storage when another handed-out output
    shares that storage, else None."""
    flat: List[torch.Tensor] = []
    _map(outs, flat.append)
    keys = [o.untyped_storage()._cdata if a is None else None for o, a in zip(flat, aliases)]
    count = collections.Counter(k for k in keys if k is not None)
    bases: Dict[int, torch.Tensor] = {}
    for o, k in zip(flat, keys):
        if k is not None and count[k] > 1 and k not in bases:
            bases[k] = torch.empty(0, dtype=torch.uint8, device=o.device).set_(
                o.untyped_storage())
    return [bases.get(k) for k in keys]


def _map(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_map(o, fn) for o in out)
    return out


class CudaGraphRunner:
    """See the module docstring."""

    def __init__(self, fn, mutated_positions=(), matches=None, device: Optional[Device] = None,
                 copy_back=(), outputs="copy", derived=()):
        if outputs not in OUTPUT_POLICIES:
            raise ValueError(f"outputs={outputs!r}: expected one of {OUTPUT_POLICIES}")
        self.fn = fn
        # how outputs of a replay are handed out (module docstring)
        self.outputs = outputs
        # copy-out by swapping storages' memory, else by `set_` (module docstring)
        self.swap = CAN_SWAP
        # copy every output: the policy, or neither way of copying out exists, or a held output
        # could not be moved once (module docstring)
        self.copying = outputs == "copy" or not (self.swap or _preserve_version)
        # each storage the last replays handed out as the graph's memory that may still be held
        self.handed: List[_Handed] = []
        self.mutated = list(mutated_positions)
        # (output index, input position): outputs the caller copies into those inputs after
        # the call (pydynamo/aot's write-backs); a capture does the copy itself, at the end of
        # its work, and returns the input (the caller's copy is then onto itself)
        self.copy_back = list(copy_back)
        # values the wrapper derives from parameters and keeps (codegen/derived.py): a replay
        # runs no host code, so each is refreshed (in place, if a parameter moved) before it
        self.derived = list(derived)
        # the wrapper's own entry checks (static graphs): calls that pass them share one
        # bucket, calls that fail them go to the wrapper, which runs the graph eagerly
        self.matches = matches
        self.device = device or Device()
        self.entries: Dict[Any, _Bucket] = {}
        self.pool = None
        self.cg_stats = {"captures": 0, "replays": 0, "plain_calls": 0, "input_copies": 0,
                         "evictions": 0, "output_copies": 0, "outputs_invalidated": 0,
                         "held_plain_calls": 0}

    def __getattr__(self, name):       # kernel_count, stats, wrapper_path, ... of the wrapper
        if name in ("fn", "matches", "device", "entries", "handed"):   # before __init__
            raise AttributeError(name)
        return getattr(self.fn, name)

    def __del__(self, _free=_free_weak):       # (bound now: module globals go at exit)
        for h in getattr(self, "handed", ()):
            _free(h.ref)

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return self.fn(*args)      # the wrapper's own autograd fallback
        if self.matches is None:
            key = bucket_key(args)
        elif self.matches(*args):
            key = "static"
        else:
            return self.fn(*args)
        e = self.entries.get(key)
        if e is None:
            if len(self.entries) >= MAX_BUCKETS:
                if not self.cg_stats.get("buckets_full"):
                    perf_log.warning("pydynamo cudagraphs: %d size buckets captured; new sizes "
                                     "launch plainly", MAX_BUCKETS)
                self.cg_stats["buckets_full"] = 1
                return self._plain(args)
            e = self.entries[key] = _Bucket()
        ptrs = ptrs_of(args)
        if e.plain:
            return self._plain(args)
        if e.calls < WARMUP:
            e.calls += 1
            e.previous = ptrs
            self.cg_stats["plain_calls"] += 1
            return self._warmup(e, args)
        g = self._find(e, ptrs)
        if g is not None:
            e.previous, e.missed = ptrs, False
            return self._replay(g, args)
        # no capture fits: an argument read in place moved. The first such call runs plainly,
        # the next one captures with the roles the two calls' addresses give (a new KV cache
        # per generate call is read in place again; an argument fresh on every call is copied)
        roles = in_place_roles(ptrs, e.previous)
        first_miss = bool(e.graphs) and not e.missed
        e.previous, e.missed = ptrs, first_miss
        if first_miss:
            return self._plain(args)
        return self._capture(e, args, roles)

    def _plain(self, args):
        self.cg_stats["plain_calls"] += 1
        return self.fn(*args)

    def _find(self, e: _Bucket, ptrs) -> Optional[_Graph]:
        best = None
        for g in e.graphs.values():
            if g.fits(ptrs) and (best is None or g.copies < best.copies):
                best = g
        if best is not None:
            e.graphs.move_to_end(id(best))
        return best

    def _release(self, g: _Graph, args) -> bool:
        """Before a replay: every output the last replay handed out that the caller still holds
        is copied out or invalidated (module docstring); the rest are forgotten. False when one
        to be kept could not be moved (no swap, and referenced beyond the runner's reach): the
        call must run plainly, and nothing was invalidated."""
        handed, self.handed = self.handed, []
        current = steps.step
        invalidate, blocked = [], []
        for h in handed:
            if _use_count(h.addr) > 0:       # the tensor, a view of it, or its storage object
                passed = any(isinstance(args[i], torch.Tensor) and
                             h.lo <= args[i].data_ptr() < h.hi for i in g.passed)
                # an output of the step marked current (cudagraph_steps) is kept valid
                same_step = current and h.step == current
                if self.device.invalidate is not None and self.outputs == "static" and \
                        not passed and not same_step:
                    invalidate.append(h)
                    continue
                if self.swap:
                    _copy_out(_from_weak(h.ref))
                    self._count_copy()
                else:
                    if _set_out(h):
                        self._count_copy()
                    if _use_count(h.addr) > 0:   # held beyond the tensors handed out
                        blocked.append(h)
                        continue
            _free_weak(h.ref)
        if blocked:
            # the replay would overwrite memory still read: run plainly (fresh memory), keep
            # watching it, and copy every output from now on (module docstring)
            self.handed = blocked + invalidate
            self.cg_stats["held_plain_calls"] += 1
            counters["cudagraph_held_plain_calls"] += 1
            if not self.copying:
                self.copying = True
                perf_log.warning("pydynamo cudagraphs: an output kept past a replay is still "
                                 "referenced by a view or storage the runner cannot move (this "
                                 "torch cannot swap storage memory): calls run without the "
                                 "graph while it is held, and outputs are copied from now on")
            return False
        for h in invalidate:
            self.device.invalidate(h.addr, STALE_OUTPUT)
            self.cg_stats["outputs_invalidated"] += 1
            counters["cudagraph_outputs_invalidated"] += 1
            _free_weak(h.ref)
        return True

    def _count_copy(self):
        self.cg_stats["output_copies"] += 1
        counters["cudagraph_output_copies"] += 1

    def _hand_out(self, storage) -> _Handed:
        h = _Handed(storage, steps.step)
        self.handed.append(h)
        return h

    def _replay(self, g: _Graph, args, copy_in=True):
        if self.handed and not self._release(g, args):
            return self._plain(args)
        for a, s in zip(args, g.static):
            if copy_in and s is not None and a.data_ptr() != s.data_ptr():
                s.copy_(a)
                self.cg_stats["input_copies"] += 1
        for d in self.derived:
            d.refresh(args)
        g.graph.replay()
        for i in g.written:         # in-place writes to copied inputs: back to the caller's
            s = g.static[i]
            if s is not None and args[i].data_ptr() != s.data_ptr():
                args[i].copy_(s)
        self.cg_stats["replays"] += 1
        return self._outputs(g, args)

    def _outputs(self, g: _Graph, args):
        aliases, shared = iter(g.aliases), iter(g.shared)
        made: Dict[int, Any] = {}       # per shared static storage: (storage, _Handed)

        def fresh(t):
            alias, base = next(aliases), next(shared)
            if alias is None:
                if self.copying:
                    self.cg_stats["output_copies"] += 1
                    return t.clone()
                try:
                    if base is None:
                        out = _alias_of(t)
                        self._hand_out(out.untyped_storage()).tensors.append(weakref.ref(out))
                        return out
                    if id(base) not in made:
                        storage = _alias_of(base).untyped_storage()
                        made[id(base)] = storage, self._hand_out(storage)
                except (RuntimeError, TypeError, BufferError):   # a dtype DLPack lacks: a copy
                    self.cg_stats["output_copies"] += 1
                    return t.clone()
                storage, h = made[id(base)]
                out = torch.empty(0, dtype=t.dtype, device=t.device).set_(
                    storage, t.storage_offset(), t.shape, t.stride())
                h.tensors.append(weakref.ref(out))
                return out
            i, delta = alias
            a = args[i]
            if delta is None or delta == 0 and t.shape == a.shape and t.stride() == a.stride():
                return a        # the input itself (a cache written in place)
            return torch.as_strided(a, t.shape, t.stride(), a.storage_offset() + delta)
        return _map(g.outputs, fresh)

    def _warmup(self, e: _Bucket, args):
        """A plain call that also finds CPU syncs (.item(), nonzero, ...) without capturing:
        a failed capture can leave CUDA RNG state unusable, a sync check cannot."""
        if self.mutated:
            return self.fn(*args)
        try:
            return self.device.checking_syncs(self.fn, args)
        except RuntimeError as ex:
            if "synchroniz" not in str(ex).lower():
                raise
            e.plain = True
            counters["cudagraph_plain_launch"] += 1
            perf_log.warning("pydynamo cudagraphs: graph syncs with the CPU (%s); launching "
                             "plainly", str(ex).splitlines()[0][:200])
        return self.fn(*args)

    def _capture(self, e: _Bucket, args, roles):
        if self.pool is None:
            self.pool = self.device.pool()
        static = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                      device=a.device).copy_(a) if r is False else None
                  for a, r in zip(args, roles)]
        call_args = [s if s is not None else a for a, s in zip(args, static)]
        applied = []        # the copy_back pairs this capture does

        def work(*a):
            outs = self.fn(*a)
            if isinstance(outs, (list, tuple)) and \
                    not any(isinstance(o, (list, tuple)) for o in outs):
                for k, i in self.copy_back:
                    o = outs[k] if k < len(outs) else None
                    if isinstance(o, torch.Tensor) and o.shape == a[i].shape and \
                            o.dtype == a[i].dtype and o.device == a[i].device:
                        a[i].copy_(o)
                        applied.append((k, i))
            return outs
        try:
            graph, outs = self.device.capture(work, call_args, self.pool)
        except Exception as ex:       # uncapturable op: launch plainly from now on
            e.plain = True
            counters["cudagraph_plain_launch"] += 1
            perf_log.warning("pydynamo cudagraphs: graph not captured (%s: %s); launching "
                             "plainly", type(ex).__name__, str(ex).splitlines()[0][:200])
            self.device.failed()
            return self.fn(*args)
        self.cg_stats["captures"] += 1
        counters["cudagraph_captures"] += 1
        aliases = []
        _map(outs, lambda o: aliases.append(_output_alias(o, call_args)))
        for k, i in applied:
            aliases[k] = (i, None)          # the input itself, which holds the new value
        written = sorted(set(self.mutated) | {i for _, i in applied})
        ranges = [(h.lo, h.hi) for h in self.handed]
        passed = [i for i, (r, p) in enumerate(zip(roles, ptrs_of(args))) if r is False or
                  (r and any(lo <= p < hi for lo, hi in ranges))]
        g = _Graph(graph, roles, ptrs_of(call_args), static, outs, aliases, written,
                   _shared_storages(outs, aliases), passed)
        if len(e.graphs) >= MAX_CAPTURES:
            e.graphs.popitem(last=False)
            self.cg_stats["evictions"] += 1
        e.graphs[id(g)] = g
        return self._replay(g, args, copy_in=False)

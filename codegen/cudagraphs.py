"""CUDA-graph capture and replay of one compiled graph (mode="reduce-overhead").

`CudaGraphRunner(fn, ...)` behaves like `fn` (the generated wrapper's `call`):
  * the first WARMUP calls of each static shape set run plainly (Triton compiles, cuBLAS picks
    its kernels, the caching allocator settles); the next call captures `fn` into a
    torch.cuda.CUDAGraph drawing from one memory pool shared by the runner's graphs;
  * one capture per distinct static shape set (shape, stride, dtype, device of every tensor
    input, plus the non-tensor inputs); a wrapper of a graph without size symbols has one
    valid set, which its generated `matches(...)` (the entry checks) recognizes faster than a
    key of every input's metadata; a call that fails it runs the wrapper plainly;
  * parameters and buffers held by the wrapper are read in place; the first capture reads the
    tensor arguments in place too, at the addresses they had, and is replayed whenever all
    arguments come back at those addresses (no copy); arguments at other addresses are copied
    into static buffers that a second capture reads (a copy only where an address differs);
  * inputs the graph mutates in place are copied back to the caller's tensors after replay;
  * outputs are copied out of the graph's static buffers before they are returned, so a later
    replay never overwrites a tensor the caller holds (the copy is the price of that rule);
  * a graph that cannot be captured launches plainly from then on (counted in
    `codegen.counters["cudagraph_plain_launch"]`, said once in the perf log): a CPU sync such
    as .item() or nonzero is found by the warm-up call under torch's sync debug mode (graphs
    that mutate inputs skip that check: a re-run would apply the mutation twice), anything
    else by a failed capture.
Default: on for mode="reduce-overhead" or options={"cudagraphs": True}; off for mode=None (see
benchmarks/results/GPU.md for the measurement behind that choice: the output copy and the warm-up
make it a loss for graphs with large outputs, a win only for launch-bound ones).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch

from codegen.options import Options
from codegen.pipeline import counters

perf_log = logging.getLogger("pydynamo.perf")
WARMUP = 1


def maybe_wrap(call, gm, g, options: Options, stats, matches=None):
    if not options.use_cudagraphs:
        return call
    scalars = getattr(g, "scalars", None)
    if getattr(g, "size_bindings", None) or (scalars is not None and scalars.args):
        # one kernel serves all sizes and float values: no capture per shape or per value
        counters["cudagraph_plain_launch"] += 1
        perf_log.warning("pydynamo cudagraphs: graph has symbolic sizes or float inputs; "
                         "launching plainly")
        return call
    mutated = sorted(m.position for m in g.mutations.values())
    return CudaGraphRunner(call, mutated, matches)


def _key(args):
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor)
                 else ("const", type(a), a) for a in args)


def _map(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_map(o, fn) for o in out)
    return out


class _Graph:
    """One capture: the graph, the tensors it reads (held only for a copied capture), their
    addresses, and the static outputs."""

    def __init__(self, graph, args, ptrs, outputs, hold):
        self.graph, self.ptrs, self.outputs = graph, ptrs, outputs
        self.args = args if hold else None


class _Entry:
    def __init__(self):
        self.calls = 0
        self.plain = False
        self.direct: Optional[_Graph] = None     # reads the caller's tensors where they were
        self.copied: Optional[_Graph] = None     # reads static buffers inputs are copied into


def _ptrs(args):
    return tuple(a.data_ptr() if isinstance(a, torch.Tensor) else None for a in args)


class CudaGraphRunner:
    """See the module docstring. Soundness of the direct capture: it is replayed only when every
    tensor argument lives at the captured address with the captured shape, stride and dtype, so
    the bytes it reads are exactly the arguments' current contents (whoever owns them)."""

    def __init__(self, fn, mutated_positions=(), matches=None):
        self.fn = fn
        self.mutated = list(mutated_positions)
        # the wrapper's own entry checks (static graphs): calls that pass them share one
        # shape set, calls that fail them go to the wrapper, which runs the graph eagerly
        self.matches = matches
        self.entries: Dict[tuple, _Entry] = {}
        self.pool = None
        self.cg_stats = {"captures": 0, "replays": 0, "plain_calls": 0, "input_copies": 0}

    def __getattr__(self, name):       # kernel_count, stats, wrapper_path, ... of the wrapper
        return getattr(self.fn, name)

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return self.fn(*args)      # the wrapper's own autograd fallback
        if self.matches is None:
            key = _key(args)
        elif self.matches(*args):
            key = "static"
        else:
            return self.fn(*args)
        e = self.entries.get(key)
        if e is None:
            e = self.entries[key] = _Entry()
        if e.plain:
            self.cg_stats["plain_calls"] += 1
            return self.fn(*args)
        if e.calls < WARMUP:
            e.calls += 1
            self.cg_stats["plain_calls"] += 1
            return self._warmup(e, args)
        ptrs = _ptrs(args)
        if e.direct is None:
            e.direct = self._capture(e, list(args), hold=False)
            if e.direct is None:
                return self.fn(*args)
            g = e.direct
        elif ptrs == e.direct.ptrs:
            g = e.direct
            g.graph.replay()
        else:
            if e.copied is None:
                static = [torch.empty_strided(a.shape, a.stride(), dtype=a.dtype,
                                              device=a.device).copy_(a)
                          if isinstance(a, torch.Tensor) else a for a in args]
                e.copied = self._capture(e, static, hold=True)
                if e.copied is None:
                    return self.fn(*args)
            g = e.copied
            if g.ptrs != ptrs:
                for a, s in zip(args, g.args):
                    if isinstance(a, torch.Tensor) and a.data_ptr() != s.data_ptr():
                        s.copy_(a)
                        self.cg_stats["input_copies"] += 1
            g.graph.replay()
            for i in self.mutated:      # in-place ops on inputs: back to the caller's tensor
                if args[i].data_ptr() != g.args[i].data_ptr():
                    args[i].copy_(g.args[i])
        self.cg_stats["replays"] += 1
        return _map(g.outputs, lambda t: t.clone())

    def _warmup(self, e: _Entry, args):
        """A plain call that also finds CPU syncs (.item(), nonzero, ...) without capturing:
        a failed capture can leave CUDA RNG state unusable, a sync check cannot."""
        if self.mutated:
            return self.fn(*args)
        prev = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("error")
        try:
            return self.fn(*args)
        except RuntimeError as ex:
            if "synchroniz" not in str(ex).lower():
                raise
            e.plain = True
            counters["cudagraph_plain_launch"] += 1
            perf_log.warning("pydynamo cudagraphs: graph syncs with the CPU (%s); launching "
                             "plainly", str(ex).splitlines()[0][:200])
        finally:
            torch.cuda.set_sync_debug_mode(prev)
        return self.fn(*args)

    def _capture(self, e: _Entry, args, hold) -> Optional[_Graph]:
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, pool=self.pool):
                outs = self.fn(*args)
        except Exception as ex:       # uncapturable op: launch plainly from now on
            e.plain = True
            counters["cudagraph_plain_launch"] += 1
            perf_log.warning("pydynamo cudagraphs: graph not captured (%s: %s); launching "
                             "plainly", type(ex).__name__, str(ex).splitlines()[0][:200])
            torch.cuda.synchronize()
            return None
        self.cg_stats["captures"] += 1
        counters["cudagraph_captures"] += 1
        graph.replay()
        return _Graph(graph, args, _ptrs(args), outs, hold)

"""CUDA-graph capture and replay of one compiled graph (mode="reduce-overhead").

`CudaGraphRunner(fn, ...)` behaves like `fn` (the generated wrapper's `call`):
  * the first WARMUP calls of each static shape set run plainly (Triton compiles, cuBLAS picks
    its kernels, the caching allocator settles); the next call captures `fn` into a
    torch.cuda.CUDAGraph drawing from one memory pool shared by the runner's graphs;
  * one capture per distinct static shape set (shape, stride, dtype, device of every tensor
    input, plus the non-tensor inputs);
  * parameters and buffers held by the wrapper are read in place; tensor inputs that are
    nn.Parameters are read in place too (a new address recaptures, counted); every other input
    is copied into the graph's static buffer, unless it already lives there;
  * inputs the graph mutates in place are copied back to the caller's tensors after replay;
  * outputs are copied out of the graph's static buffers before they are returned, so a later
    replay never overwrites a tensor the caller holds (the copy is the price of that rule);
  * a graph that cannot be captured (a CPU sync such as .item(), an uncapturable extern op,
    symbolic sizes) launches plainly from then on: counted in `codegen.counters` under
    "cudagraph_plain_launch" and said once in the perf log.
Default: on for mode="reduce-overhead" or options={"cudagraphs": True}; off for mode=None (see
benchmarks/results/ for the measurement behind that choice: the output copy and the warm-up
make it a loss for graphs with large outputs, a win only for launch-bound ones).
"""
from __future__ import annotations

import logging
from typing import Any, Dict, List, Optional

import torch

perf_log = logging.getLogger("pydynamo.perf")
WARMUP = 1


def enabled(options) -> bool:
    flag = options.get("cudagraphs")
    if flag is not None:
        return bool(flag)
    return options.get("mode") == "reduce-overhead"


def maybe_wrap(call, gm, g, options, stats):
    if not enabled(options):
        return call
    mutated = sorted(m.position for m in g.mutations.values())
    return CudaGraphRunner(call, mutated)


def _key(args):
    return tuple((tuple(a.shape), a.stride(), a.dtype, a.device) if isinstance(a, torch.Tensor)
                 else ("const", type(a), a) for a in args)


def _map(out, fn):
    if isinstance(out, torch.Tensor):
        return fn(out)
    if isinstance(out, (list, tuple)):
        return type(out)(_map(o, fn) for o in out)
    return out


class _Entry:
    def __init__(self):
        self.calls = 0
        self.graph: Optional[torch.cuda.CUDAGraph] = None
        self.static_args: List[Any] = []
        self.param_ptrs: Dict[int, int] = {}
        self.outputs = None
        self.plain = False


class CudaGraphRunner:
    def __init__(self, fn, mutated_positions=()):
        self.fn = fn
        self.mutated = list(mutated_positions)
        self.entries: Dict[tuple, _Entry] = {}
        self.pool = None
        self.stats = {"captures": 0, "replays": 0, "plain_calls": 0, "input_copies": 0,
                      "recaptures": 0}

    def __getattr__(self, name):       # kernel_count, stats, wrapper_path, ... of the wrapper
        return getattr(self.fn, name)

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(isinstance(a, torch.Tensor) and a.requires_grad
                                           for a in args):
            return self.fn(*args)      # the wrapper's own autograd fallback
        key = _key(args)
        e = self.entries.get(key)
        if e is None:
            e = self.entries[key] = _Entry()
        if e.plain or e.calls < WARMUP:
            e.calls += 1
            self.stats["plain_calls"] += 1
            return self.fn(*args)
        if e.graph is not None and any(args[i].data_ptr() != p for i, p in e.param_ptrs.items()):
            self.stats["recaptures"] += 1
            e.graph = None
        if e.graph is None:
            if not self._capture(e, args):
                return self.fn(*args)
        else:
            for i, (a, s) in enumerate(zip(args, e.static_args)):
                if isinstance(a, torch.Tensor) and i not in e.param_ptrs and \
                        a.data_ptr() != s.data_ptr():
                    s.copy_(a)
                    self.stats["input_copies"] += 1
            e.graph.replay()
        self.stats["replays"] += 1
        for i in self.mutated:
            if args[i].data_ptr() != e.static_args[i].data_ptr():
                args[i].copy_(e.static_args[i])
        return _map(e.outputs, lambda t: t.clone())

    def _capture(self, e: _Entry, args) -> bool:
        from codegen import counters
        static = []
        for i, a in enumerate(args):
            if isinstance(a, torch.nn.Parameter):
                e.param_ptrs[i] = a.data_ptr()
                static.append(a)
            elif isinstance(a, torch.Tensor):
                s = torch.empty_strided(a.shape, a.stride(), dtype=a.dtype, device=a.device)
                s.copy_(a)
                static.append(s)
            else:
                static.append(a)
        if self.pool is None:
            self.pool = torch.cuda.graph_pool_handle()
        graph = torch.cuda.CUDAGraph()
        try:
            torch.cuda.synchronize()
            with torch.cuda.graph(graph, pool=self.pool):
                outs = self.fn(*static)
        except Exception as ex:       # CPU sync, uncapturable op: launch plainly from now on
            e.plain = True
            counters["cudagraph_plain_launch"] += 1
            perf_log.warning("pydynamo cudagraphs: graph not captured (%s: %s); launching "
                             "plainly", type(ex).__name__, str(ex).splitlines()[0][:200])
            torch.cuda.synchronize()
            return False
        e.graph, e.static_args, e.outputs = graph, static, outs
        self.stats["captures"] += 1
        counters["cudagraph_captures"] += 1
        graph.replay()
        return True

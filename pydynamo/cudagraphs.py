"""The "cudagraphs" backend: CUDA-graph replay of a captured graph's eager ops (torch.compile's
backend="cudagraphs").

Each graph runs as is (no code generation): on CUDA, gm.forward is handed to codegen's
CudaGraphRunner (codegen/cudagraphs.py, the replay mode="reduce-overhead" uses: warm-up,
one capture per input layout, arguments read in place or copied into static buffers, fresh
outputs, plain launches for a graph that cannot be captured), so later calls are one replay
instead of one launch per op.

Invariants (never a wrong answer): the graph runs eagerly (gm.forward) instead when replay
could change what it computes or returns, or cannot apply: inputs that need autograd (the
training path), tensor inputs not all on one CUDA device (CPU included), a graph that writes
in place (a write into an input would land in a static copy), an output that shares storage
with an input (checked on the first call, which runs plainly: a replay would return a copy, not
the caller's view), or codegen not importable.
Written without a GPU at hand: the CPU paths are tested (tests/operating/test_cudagraphs.py),
its CUDA tests were not run by its author.
"""
from __future__ import annotations

import torch

from pydynamo.mutation import node_mutation
from pydynamo.stages import lazy

aot = lazy("pydynamo.aot")     # the training stage (pydynamo/stages.py)


def cudagraphs(gm: torch.fx.GraphModule, example_inputs: list):
    if eager_reason(gm, example_inputs) is not None:
        return gm.forward
    try:   # optional: without codegen, graphs run as they are
        from codegen.cudagraphs import CudaGraphRunner
    except ImportError:
        return gm.forward
    return _FirstCallChecked(gm.forward, CudaGraphRunner(gm.forward))


def eager_reason(gm: torch.fx.GraphModule, example_inputs: list):
    """Why this graph runs eagerly rather than replayed (None: it is replayed)."""
    if aot.needs_autograd(example_inputs):
        return "inputs need autograd"
    tensors = [t for t in example_inputs if isinstance(t, torch.Tensor)]
    devices = {t.device for t in tensors}
    if not tensors or len(devices) != 1 or next(iter(devices)).type != "cuda":
        return "inputs not on one CUDA device"
    if any(node_mutation(n, gm) is not None for n in gm.graph.nodes
           if n.op in ("call_function", "call_method", "call_module")):
        return "writes in place"
    return None


class _FirstCallChecked:
    """Runs the first call plainly and keeps running plainly if an output shares storage with
    an input; hands every later call to the runner otherwise."""

    def __init__(self, plain, runner):
        self.plain, self.runner = plain, runner
        self.target = None

    def __call__(self, *args):
        if self.target is not None:
            return self.target(*args)
        out = self.plain(*args)
        inputs = {a.untyped_storage().data_ptr() for a in args if isinstance(a, torch.Tensor)}
        aliased = any(isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in inputs
                      for o in _flat(out))
        self.target = self.plain if aliased else self.runner
        return out


def _flat(outputs):
    if isinstance(outputs, (list, tuple)):
        for o in outputs:
            yield from _flat(o)
    else:
        yield outputs

"""The "cudagraphs" backend: CUDA-graph replay of a captured graph's eager ops (torch.compile's
backend="cudagraphs").

Each graph runs as is (no code generation); on CUDA its ops are recorded once per input layout
into a torch.cuda.CUDAGraph over static copies of the tensor inputs, and later calls copy their
inputs in and replay the recording: one launch instead of one per op.

Invariants (never a wrong answer):
- Outputs are fresh tensors (clones of the recording's static outputs): a later replay never
  overwrites what an earlier call returned.
- A graph runs eagerly (gm.forward) instead when recording could change what it computes or
  returns: inputs that need autograd (the training path), a tensor input not on one CUDA
  device (CPU included), a graph that writes into an input in place, an output that is an
  input or a view of one, or a recording that fails (an op that synchronizes or reads data);
  the last says so once per graph with a warning.
- Parameters are recorded in place (not copied); a call with another parameter object than
  the recording's runs eagerly.
- A recording is keyed by the inputs' shapes, strides, dtypes and non-tensor values; a call
  with another key records again, up to MAX_RECORDINGS per graph, then runs eagerly.
Untested on a GPU by its author; its CPU fallback is tested (tests/operating/test_cudagraphs.py).
"""
from __future__ import annotations

import warnings

import torch

from pydynamo import aot
from pydynamo.exc import PydynamoWarning
from pydynamo.mutation import node_mutation

MAX_RECORDINGS = 8
WARMUP_RUNS = 2   # eager runs on a side stream before recording (lazy inits, cuBLAS workspaces)


def cudagraphs(gm: torch.fx.GraphModule, example_inputs: list):
    reason = eager_reason(gm, example_inputs)
    if reason is not None:
        return gm.forward
    return _Replayer(gm)


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


def _key(args) -> tuple:
    return tuple((tuple(a.shape), a.stride(), a.dtype) if isinstance(a, torch.Tensor) else (type(a), a)
                 for a in args)


def _in_place(a) -> bool:
    """Parameters are recorded at their own address (not copied at every call: an optimizer
    updates them in place, and a replay reads their values then)."""
    return isinstance(a, torch.nn.Parameter)


class _Recording:
    def __init__(self, gm, args):
        self.static_inputs = [a if _in_place(a) else a.clone() if isinstance(a, torch.Tensor) else a
                              for a in args]
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            for _ in range(WARMUP_RUNS):
                gm.forward(*self.static_inputs)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self.graph):
            self.static_outputs = gm.forward(*self.static_inputs)
        if _aliases_input(self.static_outputs, self.static_inputs):
            raise _Unreplayable("an output is an input or a view of one")

    def run(self, args):
        """The outputs, or None where a parameter moved since the recording."""
        for static, a in zip(self.static_inputs, args):
            if static is a:
                continue
            if _in_place(static):
                return None
            if isinstance(static, torch.Tensor):
                static.copy_(a)
        self.graph.replay()
        return _fresh(self.static_outputs)


class _Unreplayable(Exception):
    pass


def _aliases_input(outputs, inputs) -> bool:
    storages = {t.untyped_storage().data_ptr() for t in inputs if isinstance(t, torch.Tensor)}
    return any(isinstance(o, torch.Tensor) and o.untyped_storage().data_ptr() in storages
               for o in _flat(outputs))


def _flat(outputs):
    if isinstance(outputs, (list, tuple)):
        for o in outputs:
            yield from _flat(o)
    else:
        yield outputs


def _fresh(outputs):
    if isinstance(outputs, torch.Tensor):
        return outputs.clone()
    if isinstance(outputs, (list, tuple)):
        return type(outputs)(_fresh(o) for o in outputs)
    return outputs


class _Replayer:
    """The callable the backend returns: replays a recording per input key, else runs eagerly."""

    def __init__(self, gm):
        self.gm = gm
        self.recordings: dict = {}
        self.eager = False
        self.replays = 0

    def __call__(self, *args):
        if self.eager or torch.is_grad_enabled() and any(
                isinstance(a, torch.Tensor) and a.requires_grad for a in args):
            return self.gm.forward(*args)
        key = _key(args)
        rec = self.recordings.get(key)
        if rec is None:
            if len(self.recordings) >= MAX_RECORDINGS:
                return self.gm.forward(*args)
            try:
                rec = self.recordings[key] = _Recording(self.gm, args)
            except Exception as e:   # an op that cannot be recorded: this graph runs eagerly
                self.eager = True
                warnings.warn(f"pydynamo: cudagraphs backend: a graph cannot be recorded "
                              f"({type(e).__name__}: {e}); running it eagerly", PydynamoWarning)
                return self.gm.forward(*args)
        out = rec.run(args)
        if out is None:
            return self.gm.forward(*args)
        self.replays += 1
        return out

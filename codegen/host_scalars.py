"""Host scalars: CPU 0-d tensor inputs of a device graph, computed on the host and uploaded.

transformers' StaticCache keeps each layer's `cumulative_length` as a CPU int64 0-d tensor; a
decode step reads it (`arange(n, device=cuda) + cumulative_length`: eager treats a CPU 0-d
tensor as a number in a device op) and advances it (`cumulative_length.add_(n)`, which
pydynamo/aot's functionalization turns into an output `cumulative_length + n` that the caller
copies back into the input). The kernels cannot read host memory, and a CUDA graph would bake
in a value passed as a kernel argument, so such a graph is split (`split(...)`) into
  * the host part: every node whose tensor inputs are all host values (host scalar inputs or
    host nodes, at least one) and whose result is a CPU tensor, run by eager torch on the host
    in the graph's own order before the device part (the advance `cumulative_length + n`):
    eager's exact ops on eager's values, and its outputs stay CPU tensors as eager's, so the
    caller's write-back is a CPU copy, never a device-to-host one (no sync);
  * uploads: each host value a device node reads, packed per dtype by the host part into one
    CPU vector (`aten.stack`) that each call copies, non-blocking, into one persistent device
    buffer of this compiled graph (one host-to-device copy per dtype and call, from pageable
    memory: staged by the driver at the call, no device sync). The device part reads it as an
    ordinary input (`select(buffer, 0, j)` where the host value was): the same address on every
    call, so the CUDA-graph runner (codegen/cudagraphs.py) reads it in place, and a replay reads
    the value the copy just wrote (stream order: the copy is enqueued before the replay on the
    same stream, after the previous call's kernels that read the old value);
  * the device part: every other node, compiled as any graph (codegen/pipeline.py, with the
    runner around it under mode="reduce-overhead"); the host part and the upload run outside
    it, on every call, so no host computation is ever captured.
`HostScalarCall` runs the three and assembles the outputs in the graph's order.

Invariants (never a wrong answer): the split happens only when every host value a device node
reads is 0-d, no node writes a host value in place (a host part run first would change what an
earlier device read sees), no host node draws random numbers (the order of draws is kept), every
node reading a host value whose result is a CPU tensor is itself in the host part (otherwise the
device would compute a CPU result), and the graph returns a flat tuple or list; else nothing is
split and the graph keeps its refusal (codegen/graph.py: it runs eagerly). Host inputs that
require grad under grad mode run the original graph eagerly. A device output sharing the upload
buffer's memory is cloned (a later call rewrites the buffer). The upload buffer is written on the
current stream: the graph's kernels must run on the stream it was called on (as every wrapper's).

Tests (no GPU): `SIMULATE = True` treats CPU 0-d inputs of a Triton-interpreter graph (whose
device is the CPU) as host scalars, so the split, the uploads and the runner's roles run on the
CPU with the simulated CUDA graph (tests/models/test_decode.py,
tests/codegen_triton/test_host_scalars.py).
"""
from __future__ import annotations

import logging
import operator
from dataclasses import dataclass, replace
from typing import Any, Dict, List, Optional, Tuple

import torch
import torch.fx

from codegen.pipeline import compile_graph
from codegen.runtime import counters
from pydynamo.meta import TensorMeta
from pydynamo.mutation import node_mutation

log = logging.getLogger("pydynamo.codegen")
aten = torch.ops.aten

SIMULATE = False    # tests: the interpreter's CPU graphs get host scalars too (see the docstring)


def is_host_scalar(x, device: torch.device) -> bool:
    """A CPU 0-d strided tensor input of a graph on `device` (another device, or under
    SIMULATE any)."""
    return isinstance(x, torch.Tensor) and type(x) is torch.Tensor and x.device.type == "cpu" \
        and x.dim() == 0 and x.layout == torch.strided and (device.type != "cpu" or SIMULATE)


@dataclass
class Split:
    host_gm: torch.fx.GraphModule      # (*args) -> (one packed vector per dtype..., outputs...)
    device_gm: torch.fx.GraphModule    # (*device args, *upload buffers) -> device outputs
    device_positions: List[int]        # the original positions the device part takes
    host_positions: List[int]          # the host scalar inputs
    groups: List[Tuple[torch.dtype, int]]   # per upload buffer: dtype, length
    outputs: List[Tuple[str, Any]]     # per graph output: ("dev", k) | ("host", j) | ("const", v)
    sequence: type                     # tuple or list, as the graph returns


def _val(n):
    return n.meta.get("val") if isinstance(n, torch.fx.Node) else None


def _is_tensor_meta(v) -> bool:
    return isinstance(v, (torch.Tensor, TensorMeta))


def _cpu_results(v) -> bool:
    """A tensor result (or tuple of them) on the CPU."""
    if isinstance(v, (tuple, list)):
        return bool(v) and all(_cpu_results(x) for x in v)
    return _is_tensor_meta(v) and torch.device(v.device).type == "cpu"


def _random(n) -> bool:
    tags = getattr(n.target, "tags", ())
    return torch.Tag.nondeterministic_seeded in tags


def _scalar_meta(v) -> bool:
    return _is_tensor_meta(v) and tuple(v.shape) == ()


def _refuse(gm, why: str) -> None:
    """No split: the reason goes to gm.meta, which codegen/graph.py's refusal of the CPU input
    quotes."""
    gm.meta["host_scalar_refusal"] = why
    return None


def split(gm: torch.fx.GraphModule, example_inputs, device: torch.device) -> Optional[Split]:
    """The host/device split of `gm` (module docstring), or None where there is nothing to
    split or it cannot be split exactly."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    if len(placeholders) != len(example_inputs):
        return None
    host_inputs = {p for p, x in zip(placeholders, example_inputs) if is_host_scalar(x, device)}
    if not host_inputs:
        return None
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    if not isinstance(outs, (tuple, list)):
        return _refuse(gm, "the graph returns no tuple")
    # placeholders' metadata: the tracer's, else the example's
    vals = {p: _val(p) if _val(p) is not None else x for p, x in zip(placeholders, example_inputs)}
    host = set(host_inputs)             # host values: inputs and host nodes
    for n in gm.graph.nodes:
        if n.op not in ("call_function", "call_method"):
            continue
        ins = n.all_input_nodes
        reads_host = any(a in host for a in ins)
        if not reads_host:
            continue
        if node_mutation(n, gm) is not None:
            return _refuse(gm, f"{n.name} writes a host value in place")
        if _val(n) is None:
            return _refuse(gm, f"{n.name} reads a host value and has no metadata")
        if all(a in host or a.op == "placeholder" and not _is_tensor_meta(vals.get(a)) for a in ins) \
                and (_cpu_results(_val(n)) or n.target is operator.getitem and ins[0] in host):
            if _random(n):
                return _refuse(gm, f"{n.name} draws random numbers from host values")
            host.add(n)
        elif _cpu_results(_val(n)) and device.type != "cpu":
            return _refuse(gm, f"{n.name} makes a CPU tensor from host and device values")
    host_nodes = [n for n in gm.graph.nodes if n in host and n.op != "placeholder"]
    # host values a device node reads: uploaded (0-d only)
    uploads: List[torch.fx.Node] = []
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in host:
            continue
        for a in n.all_input_nodes:
            if a in host and a not in uploads:
                if not _scalar_meta(vals.get(a, _val(a))):
                    return _refuse(gm, f"{n.name} reads {a.name}, a host value that is no scalar")
                uploads.append(a)
    groups: Dict[torch.dtype, List[torch.fx.Node]] = {}
    for a in uploads:
        groups.setdefault(vals.get(a, _val(a)).dtype, []).append(a)

    # the host part: every argument in, the packed uploads and the host outputs out
    hg = torch.fx.Graph()
    env: Dict[torch.fx.Node, torch.fx.Node] = {}
    for p in placeholders:
        env[p] = hg.node_copy(p)
    for n in host_nodes:
        env[n] = hg.node_copy(n, lambda a: env[a])
    host_outs = [hg.call_function(aten.stack.default, ([env[a] for a in members],))
                 for members in groups.values()]
    plan: List[Tuple[str, Any]] = []
    dev_outs = []
    for o in outs:
        if isinstance(o, torch.fx.Node) and o in host:
            plan.append(("host", len(host_outs)))
            host_outs.append(env[o])
        elif isinstance(o, torch.fx.Node):
            plan.append(("dev", len(dev_outs)))
            dev_outs.append(o)
        else:
            plan.append(("const", o))
    hg.output(tuple(host_outs))

    # the device part: the other inputs in order, then one buffer per dtype
    dg = torch.fx.Graph()
    denv: Dict[torch.fx.Node, torch.fx.Node] = {}
    device_positions = [i for i, p in enumerate(placeholders) if p not in host_inputs]
    for i in device_positions:
        denv[placeholders[i]] = dg.node_copy(placeholders[i])
    bufs = []
    for k, (dtype, members) in enumerate(groups.items()):
        b = dg.placeholder(f"host_scalars_{k}")
        b.meta["val"] = TensorMeta(shape=(len(members),), stride=(1,), dtype=dtype,
                                   device=device)
        bufs.append((b, members))
    for b, members in bufs:
        for j, a in enumerate(members):
            s = dg.call_function(aten.select.int, (b, 0, j))
            s.meta["val"] = TensorMeta(shape=(), stride=(), dtype=b.meta["val"].dtype,
                                       device=device, storage_offset=j, is_view=True)
            denv[a] = s
    for n in gm.graph.nodes:
        if n.op in ("placeholder", "output") or n in host:
            continue
        denv[n] = dg.node_copy(n, lambda a: denv[a])
    dg.output(tuple(denv[o] for o in dev_outs))
    return Split(torch.fx.GraphModule(gm, hg), torch.fx.GraphModule(gm, dg), device_positions,
                 [i for i, p in enumerate(placeholders) if p in host_inputs],
                 [(d, len(m)) for d, m in groups.items()], plan, type(outs))


class HostScalarCall:
    """Runs a split graph: host part, uploads, device part (module docstring)."""

    def __init__(self, gm, s: Split, device_call, device: torch.device):
        self.gm = gm                    # the original graph (grad-mode escape)
        self.split = s
        self.host_fn = s.host_gm.forward      # (not Module.__call__: no hooks to run)
        self.device_call = device_call
        self.device_positions = s.device_positions
        self.host_positions = s.host_positions
        self.buffers = [torch.empty(n, dtype=d, device=device) for d, n in s.groups]
        self.buffer_ptrs = {b.untyped_storage().data_ptr() for b in self.buffers}
        self.plan = s.outputs
        self.sequence = s.sequence

    def __getattr__(self, name):        # kernel_count, stats, wrapper_path, ... of the device part
        if name in ("device_call", "split"):
            raise AttributeError(name)
        return getattr(self.device_call, name)

    def __call__(self, *args):
        if torch.is_grad_enabled() and any(args[i].requires_grad for i in self.host_positions):
            return self.gm(*args)
        host = self.host_fn(*args)
        for b, packed in zip(self.buffers, host):
            b.copy_(packed, non_blocking=True)
        dev = self.device_call(*[args[i] for i in self.device_positions], *self.buffers)
        result = []
        for kind, v in self.plan:
            if kind == "dev":
                o = dev[v]
                if isinstance(o, torch.Tensor) and \
                        o.untyped_storage().data_ptr() in self.buffer_ptrs:
                    o = o.clone()       # the next call rewrites the buffer
                result.append(o)
            elif kind == "host":
                result.append(host[v])
            else:
                result.append(v)
        return self.sequence(result)


def remap_options(options, s: Split):
    """The options of the device part: write-backs and dynamic dims at its own positions (a
    host output's write-back into a host input is the caller's CPU copy; dropped here)."""
    pos = {old: new for new, old in enumerate(s.device_positions)}
    out = {k: v for k, (kind, v) in enumerate(s.outputs) if kind == "dev"}
    written = tuple((out[k], pos[i]) for k, i in options.written_back if k in out and i in pos)
    dynamic = options.dynamic
    if dynamic:
        dynamic = {pos[i]: d for i, d in dynamic.items() if i in pos}
    return replace(options, written_back=written, dynamic=dynamic)


def compile_split(gm, example_inputs, backend, options):
    """The split graph's callable, or None (compile the graph as it is) when the backend is not
    the Triton one, or nothing can be split."""
    if backend.name != "triton" or options.boxed or backend.device is None:
        return None
    try:
        s = split(gm, example_inputs, backend.device)
    except Exception as e:              # a graph this pass does not understand: as before
        if options.strict:
            raise
        log.debug("host scalar split failed", exc_info=True)
        return _refuse(gm, f"internal error: {type(e).__name__}: {e}")
    if s is None:
        return None
    counters["host_scalar_graphs"] += 1
    counters["host_scalar_inputs"] += len(s.host_positions)
    call = HostScalarCall(gm, s, None, backend.device)
    with torch.no_grad():               # the examples' own values in the buffers (a compile
        for b, packed in zip(call.buffers, s.host_gm.forward(*example_inputs)):  # may run them)
            b.copy_(packed)
    examples = [example_inputs[i] for i in s.device_positions] + call.buffers
    call.device_call = compile_graph(s.device_gm, examples, backend, remap_options(options, s))
    return call

"""Sibling products of one input as one GEMM (issue 18): `q = x @ Wq.T; k = x @ Wk.T; v = x @
Wv.T` (a Llama block's projections, its MLP's gate and up) run as one product of x and the
weights concatenated along N, each result a column slice of it (no copy: its readers take the
slice's strides). The concatenated weight is a derived value (codegen/derived.py): made once,
kept while the parameters are unchanged, recomputed in place when one is written.

When (measured on an H200, `python benchmarks/gpu/horizontal_gemm.py`, session 20; median us
of CUDA-graph replays, separate / concatenated):
  - a decode step's few rows read each weight once however it is split, and the separate
    products each pay a launch and an underfilled GPU: M 8, Llama q/k/v (768 -> 3 x 768) 27.4 /
    7.3 float32, 11.5 / 3.3 bfloat16; gate/up (768 -> 2 x 2048) 12.2 / 8.8 and 6.7 / 3.4;
    a 1B-sized block (2048 -> 2048 + 2 x 512, 2048 -> 2 x 5632) 1.5-3.0x;
  - at M 2048 it pays where each separate product leaves SMs idle: q/k/v 768 wide, 207.9 /
    191.8 float32 and 17.9 / 12.9 bfloat16 (96 output tiles of 128 x 128 for 132 SMs); where a
    product fills the GPU by itself it is even or worse (gate/up 2 x 2048: 1.015 / 1.08; the
    1B block's q/k/v, 256 tiles for q: 0.881 float32; its gate/up: 0.963 bfloat16).
So the rule: every sibling's result has fewer than GROUP_TILE x GROUP_TILE-element tiles than
the device has SMs (M x N_i < GROUP_TILE**2 x SMs). On the CPU the concatenated product gained
nothing (BERT's q/k/v at 128 and 256 rows, two threads: 0.98-1.02), so only GPU graphs group
(`device_sms`: no SM count, no grouping), and options={"group_gemms": False} turns it off.

What groups: linear nodes (no bias, or every one with a bias) reading the same input (the same
node, or in an aten graph views of one node to one shape: `mm(view(x, [-1, K]), t(w))`), each
weight (and bias) a whole parameter input (nn.Parameter, contiguous, static), of one dtype and
inner size, every N_i and K a multiple of 8 (each slice starts 16-byte aligned: no padding
interplay), at least two distinct weights (a weight read twice gets one slice), and no node
between the first and the last writes in place (each product reads its input and weight at its
own place in the graph). The first sibling lowered computes the group; the others take their
slices (GraphLowering.absorbed). Memory: the concatenated weights are a second copy of the
grouped parameters, held with the compiled graph (one copy for all graphs over them).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional

import torch
import torch.fx

from codegen.sizevars import contiguous_strides, product, static_int
from pydynamo.mutation import node_mutation

GROUP_TILE = 128          # the output tile edge the SM-count rule counts in
GROUP_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
ALIGN = 8


@dataclass
class Sibling:
    node: torch.fx.Node
    weight: object        # the weight's input buffer
    bias: object          # the bias's input buffer, or None
    n: int                # the sibling's output columns


def device_sms(device) -> Optional[int]:
    """The device's SM count (None off CUDA: the rule never groups there)."""
    if device is None or device.type != "cuda":
        return None
    return torch.cuda.get_device_properties(device).multi_processor_count


def plan(g, node, x, bias) -> Optional[List[Sibling]]:
    """The siblings (this product `node` first, in graph order) that one product computes, or
    None (the module docstring's rule). `x`: the node's input value; `bias`: its bias value."""
    a = _input_node(g, node) if node is not None and node.op == "call_function" else None
    if not g.group_gemms or a is None or x.dtype not in GROUP_DTYPES or x.ndim < 2:
        return None
    k, rows = static_int(x.size[-1]), g.hint(product(x.size[:-1]))
    sms = device_sms(g.device)
    if sms is None or k is None or k % ALIGN:
        return None
    order = _order(g)
    same = _same_values(g, a)
    users = sorted({u for n in same for u in n.users
                    if order.get(u, -1) >= order[node] and _input_node(g, u) in same},
                   key=order.get)
    group: List[Sibling] = []
    for u in users:
        s = _sibling(g, u, x.dtype, k, with_bias=bias is not None)
        if s is None:
            continue
        if rows * s.n >= GROUP_TILE * GROUP_TILE * sms:
            return None      # this product fills the GPU by itself: grouping would not pay
        group.append(s)
    if len(group) < 2 or group[0].node is not node:
        return None     # (a weight read twice alone is no group: checked on return)
    m = node.next
    while m is not group[-1].node:      # nothing in between writes (its input, a weight)
        if node_mutation(m, g.gm) is not None:
            group = [s for s in group if order[s.node] < order[m]]
            break
        m = m.next
    return group if len({s.weight.name for s in group}) >= 2 else None


_VIEWS = ("view", "reshape")


def _same_values(g, a) -> set:
    """`a` and the views of a's source to a's shape: the same value (an aten graph views the
    input anew for each linear: `mm(view(x, [-1, K]), t(w))`, a view node per product)."""
    root = a
    while root.op == "call_function" and g.canon_name(root) in _VIEWS and root.args and \
            isinstance(root.args[0], torch.fx.Node):
        root = root.args[0]
    shape = _shape(g, a)
    same, todo = {a}, [root]
    while todo:
        n = todo.pop()
        if n is not root and shape is not None and _shape(g, n) == shape:
            same.add(n)
        todo.extend(u for u in n.users if u.op == "call_function" and
                    g.canon_name(u) in _VIEWS and u.args[0] is n)
    return same


def _shape(g, n):
    meta = g._meta(n)
    return tuple(meta.shape) if meta is not None and hasattr(meta, "shape") else None


def _input_node(g, u) -> Optional[torch.fx.Node]:
    """The product's input node x: linear(x, ..), mm(x, ..), addmm(b, x, ..)."""
    name = g.canon_name(u) if u.op == "call_function" else None
    i = {"linear": 0, "mm": 0, "addmm": 1}.get(name)
    x = u.args[i] if i is not None and len(u.args) > i else None
    return x if isinstance(x, torch.fx.Node) else None


def _transposed_weight(g, arg):
    """W where `arg` is t(W) (an aten graph's linear weight), else None."""
    if isinstance(arg, torch.fx.Node) and arg.op == "call_function" and \
            g.canon_name(arg) == "t" and arg.args:
        return arg.args[0]
    return None


def _sibling(g, u, dtype, k, with_bias) -> Optional[Sibling]:
    """`u` as a sibling: linear(x, W[, b]) (a torch-level graph), mm(x, t(W)) or addmm(b, x,
    t(W)) (an aten one), W (and b) whole contiguous parameters; else None."""
    if u.op != "call_function" or u.kwargs:
        return None
    name = g.canon_name(u)
    if name == "linear" and len(u.args) in (2, 3):
        weight, b_arg = u.args[1], u.args[2] if len(u.args) == 3 else None
    elif name == "mm" and len(u.args) == 2 and _transposed_weight(g, u.args[1]) is not None:
        weight, b_arg = _transposed_weight(g, u.args[1]), None
    elif name == "addmm" and len(u.args) == 3 and _transposed_weight(g, u.args[2]) is not None:
        weight, b_arg = _transposed_weight(g, u.args[2]), u.args[0]
    else:
        return None
    if (b_arg is not None) != with_bias:
        return None
    w = _whole_parameter(g, weight, 2, dtype)
    b = _whole_parameter(g, b_arg, 1, dtype) if with_bias else None
    if w is None or with_bias and b is None or static_int(w.layout.size[1]) != k:
        return None
    n = static_int(w.layout.size[0])
    if n % ALIGN or with_bias and static_int(b.layout.size[0]) != n:
        return None
    return Sibling(u, w, b, n)


def _whole_parameter(g, arg, ndim, dtype):
    """The input buffer of a parameter input `arg` (a placeholder: lowered before any product)
    read whole and contiguous, or None."""
    v = g.env.get(arg) if isinstance(arg, torch.fx.Node) and arg.op == "placeholder" else None
    p = g.parameter_view(v) if v is not None else None
    if p is None or v.dtype != dtype or len(p[1][0]) != ndim:
        return None
    buf, (size, stride, offset) = p
    contiguous = tuple(stride) == tuple(contiguous_strides(size))
    whole = tuple(size) == tuple(static_int(s) for s in buf.layout.size)
    return buf if contiguous and whole and offset == 0 else None


def _order(g):
    order = g.__dict__.get("_node_order")
    if order is None:
        order = g._node_order = {n: i for i, n in enumerate(g.gm.graph.nodes)}
    return order

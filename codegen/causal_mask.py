"""Attention masks that are the causal mask, handed to attention as `is_causal=True`.

A causal language model in transformers builds its attention mask inside the compiled forward:
under a compiler it may not read the padding mask's values to decide that the mask is plain
causal (masking_utils' `_ignore_causal_mask_sdpa`), so eager's `is_causal=True` becomes an
explicit (batch, 1, L, S) boolean mask built from `arange`s and comparisons. That mask is a
constant of the graph: nothing in it reads an input. Given it, the fused attention kernels
(flash, memory-efficient, the CPU flash kernel) add it to every block of scores; given
`is_causal=True` they skip the blocks above the diagonal, nearly half of the work at L == S.

`causal_attention(gm)` evaluates each attention mask that is such a constant, once, at compile
time, and where it equals the top-left causal mask that `is_causal=True` stands for (keep
`[.., i, j]` exactly where j <= i, at every batch and head) passes `is_causal=True` and no mask;
the mask's nodes that nothing else reads are removed.

Invariants (never a wrong answer):
  * a mask is evaluated only when every node it depends on is a call from `PURE_FUNCTIONS` /
    `PURE_METHODS` (deterministic, no writes, no inputs read): no placeholder, attribute,
    random or unknown call is an ancestor, so its value is the same at every call of this graph (the graph's guards fix the
    Python constants and sizes it was built from; a size symbol is a placeholder ancestor);
  * the test is exact: a boolean mask equal to `tril` of ones (L, S) broadcast to the mask's
    shape, or a float mask equal to 0 there and -inf elsewhere (the same additive mask sdpa
    builds from `is_causal`); anything else, including a finite "minus infinity", is left alone;
  * only calls with `is_causal=False` and a mask whose broadcast shape ends in (L, S) of the
    query and key; the query and key sizes come from the node's recorded metadata;
  * a mask is not evaluated where a value it is made from would hold more than `MAX_ELEMENTS`
    elements or has no recorded size (compile-time memory; an `expand` is a view, its input's
    elements counted), and it is compared without its expanded (stride 0) dimensions.
The rewritten graph is also what an eager fallback runs: `is_causal=True` is eager's own call.
"""
from __future__ import annotations

import operator
from typing import Dict, List, Optional, Tuple

import torch
import torch.fx

MAX_ELEMENTS = 1 << 26
EXPANDS = frozenset({"expand", "expand_as", torch.broadcast_to})

ATTENTION = (torch.nn.functional.scaled_dot_product_attention,
             torch.ops.aten.scaled_dot_product_attention.default)

# Calls a mask's ancestors may be: each is deterministic, writes nothing and reads only its
# arguments (tensor factories take sizes and constants).
PURE_FUNCTIONS = frozenset({
    operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.neg,
    operator.and_, operator.or_, operator.xor, operator.invert, operator.not_,
    operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne,
    operator.getitem,
    torch.arange, torch.ones, torch.zeros, torch.full, torch.ones_like, torch.zeros_like,
    torch.full_like, torch.tril, torch.triu, torch.where, torch.diff, torch.cumsum,
    torch.logical_and, torch.logical_or, torch.logical_not, torch.bitwise_and,
    torch.bitwise_or, torch.bitwise_not, torch.eq, torch.ne, torch.lt, torch.le, torch.gt,
    torch.ge, torch.add, torch.sub, torch.mul, torch.unsqueeze, torch.reshape,
    torch.broadcast_to, torch.masked_fill,
})
PURE_METHODS = frozenset({
    "view", "reshape", "expand", "expand_as", "unsqueeze", "squeeze", "to", "bool", "float",
    "long", "int", "new_ones", "new_zeros", "new_full", "cumsum", "diff", "masked_fill",
    "tril", "triu", "__and__", "__or__", "__invert__", "logical_and", "logical_or",
    "logical_not", "eq", "ne", "lt", "le", "gt", "ge", "add", "sub", "mul", "type_as",
    "contiguous", "clone",
})


def _mask_argument(node: torch.fx.Node):
    """An attention call's mask argument (a keyword or its fourth positional), or None."""
    if "attn_mask" in node.kwargs:
        return node.kwargs["attn_mask"]
    return node.args[3] if len(node.args) > 3 else None


def _is_causal_flag(node: torch.fx.Node):
    if "is_causal" in node.kwargs:
        return node.kwargs["is_causal"]
    return node.args[5] if len(node.args) > 5 else False


def _ancestors(mask: torch.fx.Node) -> Optional[List[torch.fx.Node]]:
    """The nodes `mask` depends on (itself included) in graph order, or None where any is not
    a `PURE_FUNCTIONS` / `PURE_METHODS` call."""
    seen: Dict[torch.fx.Node, None] = {}
    stack = [mask]
    while stack:
        n = stack.pop()
        if n in seen:
            continue
        pure = (n.op == "call_function" and n.target in PURE_FUNCTIONS) or \
            (n.op == "call_method" and n.target in PURE_METHODS)
        if not pure:
            return None
        seen[n] = None
        stack.extend(n.all_input_nodes)
    order = {n: i for i, n in enumerate(mask.graph.nodes)}
    return sorted(seen, key=order.__getitem__)


def _evaluate(nodes: List[torch.fx.Node]):
    env: Dict[torch.fx.Node, object] = {}
    for n in nodes:
        args = torch.fx.node.map_arg(n.args, env.__getitem__)
        kwargs = torch.fx.node.map_arg(n.kwargs, env.__getitem__)
        if n.op == "call_method":
            env[n] = getattr(args[0], n.target)(*args[1:], **kwargs)
        else:
            env[n] = n.target(*args, **kwargs)
    return env[nodes[-1]]


def _small(nodes) -> bool:
    for n in nodes:
        if n.target in EXPANDS:
            continue
        val = n.meta.get("val")
        if val is None:
            return False
        shape = getattr(val, "shape", None)
        if shape is None:       # (a Python number, a tuple of sizes)
            continue
        numel = 1
        for s in shape:
            if not isinstance(s, int):
                return False
            numel *= s
        if numel > MAX_ELEMENTS:
            return False
    return True


def is_causal_mask(mask: torch.Tensor, q_len: int, k_len: int) -> bool:
    """Whether `mask`, as sdpa broadcasts it over (.., q_len, k_len), is exactly the mask
    `is_causal=True` stands for."""
    try:
        shape = torch.broadcast_shapes(mask.shape, (q_len, k_len))
    except RuntimeError:
        return False
    if tuple(shape[-2:]) != (q_len, k_len):
        return False
    # an expanded dimension holds one value: compare that one (a model's (batch, 1, L, S) mask
    # expanded over the batch is read once, not batch times)
    mask = mask[tuple(slice(0, 1) if st == 0 else slice(None) for st in mask.stride())]
    shape = torch.broadcast_shapes(mask.shape, (q_len, k_len))
    keep = torch.ones(q_len, k_len, dtype=torch.bool, device=mask.device).tril()
    if mask.dtype == torch.bool:
        return torch.equal(mask.expand(shape), keep.expand(shape))
    if mask.dtype.is_floating_point:
        want = torch.zeros(q_len, k_len, dtype=mask.dtype, device=mask.device)
        want.masked_fill_(~keep, -float("inf"))
        return torch.equal(mask.expand(shape), want.expand(shape))
    return False


def causal_attention(gm: torch.fx.GraphModule) -> int:
    """Rewrite attention calls whose mask is a graph constant equal to the causal mask into
    `is_causal=True` calls without it; returns how many were rewritten."""
    # (mask node, L, S) -> the mask's nodes where it is the causal mask, else None
    causal: Dict[Tuple[torch.fx.Node, int, int], Optional[List[torch.fx.Node]]] = {}
    dropped, rewritten = set(), 0
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in ATTENTION:
            continue
        mask = _mask_argument(node)
        if not isinstance(mask, torch.fx.Node) or _is_causal_flag(node) is not False:
            continue
        qv, kv = node.args[0].meta.get("val"), node.args[1].meta.get("val")
        if qv is None or kv is None or len(qv.shape) < 2 or len(kv.shape) < 2:
            continue
        key = (mask, qv.shape[-2], kv.shape[-2])
        if not (isinstance(key[1], int) and isinstance(key[2], int)):
            continue
        if key not in causal:
            causal[key] = _causal_nodes(*key)
        if causal[key] is None:
            continue
        args, kwargs = list(node.args), dict(node.kwargs)
        if "attn_mask" in kwargs:
            kwargs["attn_mask"] = None
        else:
            args[3] = None
        if len(args) > 5:
            args[5] = True
        else:
            kwargs["is_causal"] = True
        node.args, node.kwargs = tuple(args), kwargs
        dropped.update(causal[key])
        rewritten += 1
    if dropped:     # the masks' nodes nothing reads any more (each a pure call), last first
        for n in reversed(list(gm.graph.nodes)):
            if n in dropped and not n.users:
                gm.graph.erase_node(n)
        gm.recompile()
    return rewritten


def _causal_nodes(mask: torch.fx.Node, q_len: int, k_len: int) -> Optional[List[torch.fx.Node]]:
    """The nodes `mask` is made of where it is a constant equal to the causal mask of
    (q_len, k_len), else None (not pure, too large, not causal, or not replayable here)."""
    nodes = _ancestors(mask)
    if nodes is None or not _small(nodes):
        return None
    try:
        with torch.no_grad():
            value = _evaluate(nodes)
    except Exception:       # a call this cannot replay: leave the mask alone
        return None
    ok = isinstance(value, torch.Tensor) and is_causal_mask(value, q_len, k_len)
    return nodes if ok else None

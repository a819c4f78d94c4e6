"""Writing a functional scatter straight into the input its result is copied back to.

A graph that updates an input in place (a static KV cache: `keys.index_copy_(2, pos, k)`)
reaches codegen functionalized (pydynamo/aot): the graph computes `index_copy(keys, 2, pos, k)`,
a new cache-sized tensor, returns it, and the caller copies it into `keys`: per layer and per
decode step, the whole cache read and written twice to change one row. `Options.written_back`
says which outputs the caller copies into which inputs; `reinplace` turns such an output, when
it is `aten.index_copy` / `aten.index_put` (accumulate=False) of that very input, into a call
that writes the input and returns it (`index_copy_into`, `index_put_into`): the extern then
writes one row, and the caller's copy is a copy of a tensor onto itself, which torch skips.

Invariants (never a wrong answer):
  * only an output the caller copies into the same input (written_back) whose node takes that
    input's placeholder as the written tensor, with the same layout as the placeholder's;
  * the placeholder has no other user: nothing in the graph reads the old contents, so the
    write cannot be seen early, and replaying the graph eagerly after an error (the in-place
    write already done) writes the same values again (index_copy and index_put without
    accumulation are idempotent when their index and values do not read the written tensor);
  * the new callables' names do not end in an underscore: pydynamo.mutation does not take them
    for an in-place op to write back (the write is the plan, and the graph's result is the input).
The CUDA-graph runner is told the written positions (`gm.meta["written_inputs"]`), so an input
it copies into a static buffer is copied back after a replay (codegen/cudagraphs.py).

`accumulate_embedding_grads` does the same for a backward's tied weight: GPT-2's token embedding
is also its LM head, so its gradient is `add(lm_head_grad, embedding_dense_backward(...))`: the
embedding's gradient written out as a whole vocabulary-sized tensor (zeros but for the rows
seen) and a third vocabulary-sized pass to add them. Where the other operand is a product this
graph made and nothing else reads (a GEMM's result, through views), the rows are added into it
in place (`embedding_grad_into`: index_add_), which reads and writes only the rows seen.
Invariants: only padding_idx -1 and scale_grad_by_freq False (the rows added are exactly the
ones eager's kernel sums); the written product and every view between it and the add have one
user; not under torch.use_deterministic_algorithms (CUDA's index_add_ accumulates with atomics:
its sum order, like torch.compile's scatter-add, is not eager's fixed one; the values agree to
rounding, as any reordered float sum does).
"""
from __future__ import annotations

from typing import List, Sequence, Tuple

import torch
import torch.fx

aten = torch.ops.aten


def index_copy_into(self, dim, index, source):
    """`aten.index_copy` written into `self`, which it returns."""
    return self.index_copy_(dim, index, source)


def index_put_into(self, indices, values, accumulate=False):
    """`aten.index_put` (no accumulation) written into `self`, which it returns."""
    return self.index_put_(indices, values, accumulate)


def embedding_grad_into(grad, grad_output, indices):
    """`grad + embedding_dense_backward(grad_output, indices, grad.shape[0], -1, False)`,
    written into `grad` (a product nothing else reads), which it returns."""
    rows = indices.reshape(-1)
    return grad.index_add_(0, rows, grad_output.reshape(rows.numel(), grad.shape[1]))


def _into(node: torch.fx.Node):
    if node.op != "call_function":
        return None
    if node.target is aten.index_copy.default:
        return index_copy_into
    if node.target is aten.index_put.default and not _accumulates(node):
        return index_put_into
    return None


def _accumulates(node) -> bool:
    acc = node.kwargs.get("accumulate", node.args[3] if len(node.args) > 3 else False)
    return acc is not False


def _layout(node):
    v = node.meta.get("val")
    if v is None:
        return None
    stride = v.stride() if callable(getattr(v, "stride", None)) else getattr(v, "stride", None)
    return tuple(v.shape), tuple(stride) if stride is not None else None, v.dtype


def reinplace(gm: torch.fx.GraphModule, written_back: Sequence[Tuple[int, int]]) -> List[int]:
    """Rewrite each eligible (output index, input position) pair of `written_back` in `gm`
    (see the module docstring); returns the input positions now written in place."""
    if not written_back:
        return []
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    outs = list(outs) if isinstance(outs, (list, tuple)) else [outs]
    done = []
    for k, i in written_back:
        if not (0 <= k < len(outs) and 0 <= i < len(placeholders)):
            continue
        n, p = outs[k], placeholders[i]
        if not isinstance(n, torch.fx.Node) or not n.args or n.args[0] is not p or \
                outs.count(n) != 1:     # another output of the same value stays a new tensor
            continue
        into = _into(n)
        if into is None or len(p.users) != 1:
            continue
        lay, want = _layout(n), _layout(p)
        if lay is None or lay != want or None in lay:
            continue
        n.target = into
        done.append(i)
    if done:
        gm.recompile()
    return done


def copied_back(gm: torch.fx.GraphModule, written_back: Sequence[Tuple[int, int]],
                written: Sequence[int]) -> List[Tuple[int, int]]:
    """The (output index, input position) pairs of `written_back` not written in place that a
    CUDA graph may copy into their input itself, at the end of the captured work (the caller's
    copy is then onto itself): an output that is no input and no other output, of the input's
    shape and dtype (codegen/cudagraphs.py)."""
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    output = next(n for n in gm.graph.nodes if n.op == "output")
    outs = output.args[0]
    if not isinstance(outs, (list, tuple)):
        return []
    outs = list(outs)
    pairs = []
    for k, i in written_back:
        if i in written or not (0 <= k < len(outs) and 0 <= i < len(placeholders)):
            continue
        n = outs[k]
        if not isinstance(n, torch.fx.Node) or n.op == "placeholder" or outs.count(n) != 1:
            continue
        lay, want = _layout(n), _layout(placeholders[i])
        if lay is None or want is None or lay[0] != want[0] or lay[2] != want[2]:
            continue
        pairs.append((k, i))
    return pairs


# views that never copy, between a product and the add that takes it
_PURE_VIEWS = (aten.t.default, aten.view.default, aten._unsafe_view.default, aten.permute.default)
_PRODUCTS = (aten.mm.default, aten.addmm.default)


def _owned_product(node) -> bool:
    """node is a GEMM's result (through views) that nothing but this chain reads."""
    while isinstance(node, torch.fx.Node) and len(node.users) == 1:
        if node.op == "call_function" and node.target in _PRODUCTS:
            return True
        if node.op != "call_function" or node.target not in _PURE_VIEWS:
            return False
        node = node.args[0]
    return False


def accumulate_embedding_grads(gm: torch.fx.GraphModule) -> int:
    """Rewrite `add(product, embedding_dense_backward(g, idx, N, -1, False))` into
    `embedding_grad_into(product, g, idx)` (see the module docstring); returns how many."""
    if torch.are_deterministic_algorithms_enabled():
        return 0
    done = 0
    for n in list(gm.graph.nodes):
        if n.op != "call_function" or n.target is not aten.add.Tensor or len(n.args) != 2 or \
                n.kwargs.get("alpha", 1) != 1:
            continue
        for mine, other in ((0, 1), (1, 0)):
            e, t = n.args[other], n.args[mine]
            if not (isinstance(e, torch.fx.Node) and e.op == "call_function" and
                    e.target is aten.embedding_dense_backward.default and len(e.users) == 1):
                continue
            g, idx, num, pad, scale = (list(e.args) + [None] * 5)[:5]
            lay_t, lay_n = _layout(t) if isinstance(t, torch.fx.Node) else None, _layout(n)
            if pad != -1 or scale is not False or lay_t is None or lay_t != lay_n or \
                    len(lay_n[0]) != 2 or not _owned_product(t):
                continue
            n.target, n.args, n.kwargs = embedding_grad_into, (t, g, idx), {}
            gm.graph.erase_node(e)
            done += 1
            break
    if done:
        gm.recompile()
    return done

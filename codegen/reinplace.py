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

"""What eager's result of an FX node looks like, as the lowering reads it.

A node's record is the tracer's `meta["val"]` (pydynamo.meta.TensorMeta, a meta tensor, a sympy
size) or fx ShapeProp's `meta["tensor_meta"]` (`_node_meta`); a foreign graph that carries none
(fx.symbolic_trace, a hand-built one) gets its records from `propagate_meta`, a run on meta
tensors or copies: the user's tensors only ever go through the compiled code. The predicates
below answer questions about a record (a tensor? symbolic sizes? a view of its argument?) for any
of those spellings. Invariant: nothing here writes a node's meta or a real tensor the caller
holds.
"""
from __future__ import annotations

import logging
from typing import Any, Dict, Optional

import sympy
import torch
import torch.fx
from torch.fx.passes.shape_prop import TensorMetadata

from pydynamo.meta import device_results
from codegen.symbolic import as_sympy, meta_stride

log = logging.getLogger("pydynamo.codegen")


def _node_meta(node):
    val = node.meta.get("val")
    if val is not None:
        return val
    return node.meta.get("tensor_meta")


def propagate_meta(gm, example_inputs) -> Dict[torch.fx.Node, Any]:
    """{node: its result's metadata (meta tensors)} for a graph that carries none, from a run
    on stand-ins for the example inputs, never on the inputs themselves: the graph's in-place
    ops would then run on the user's tensors (and parameters) once here and again in the
    compiled code. Stand-ins are meta tensors of the inputs' size, stride and storage offset;
    where an op cannot run on meta (data-dependent sizes, .item(), a module with real
    parameters), copies of the inputs, with the RNG state restored afterwards. The result is
    kept beside the graph, never written into its nodes (a later compile of the same graph
    with other inputs must not read it as the tracer's)."""
    with torch.no_grad():
        try:
            return _MetaProp(gm, on_meta=True).propagate(example_inputs)
        except Exception as e:
            log.debug("codegen: metadata on meta tensors failed (%s); using copies", e)
        devices = sorted({t.device.index or 0 for t in example_inputs
                          if isinstance(t, torch.Tensor) and t.device.type == "cuda"})
        with torch.random.fork_rng(devices=devices):
            return _MetaProp(gm, on_meta=False).propagate(example_inputs)


class _MetaProp(torch.fx.Interpreter):
    """Runs a graph on stand-ins (see propagate_meta) and records each node's result as meta
    tensors. Constants (get_attr) get stand-ins too, so no op here writes a real tensor."""

    def __init__(self, gm, on_meta: bool):
        super().__init__(gm)
        self.on_meta = on_meta
        self.meta: Dict[torch.fx.Node, Any] = {}

    def propagate(self, example_inputs):
        # the device the graph's ops run on: where a meta kernel answers for another device
        # (norm statistics of half inputs on CPU), pydynamo.meta.device_results corrects it
        self.device = next((x.device for x in example_inputs if isinstance(x, torch.Tensor)),
                           None)
        self.run(*[_stand_in(x, self.on_meta) for x in example_inputs])
        return self.meta

    def call_function(self, target, args, kwargs):
        out = super().call_function(target, args, kwargs)
        return device_results(target, args, self.device, out) if self.on_meta else out

    def run_node(self, n):
        result = super().run_node(n)
        if _has_real_tensor(result):
            self.meta[n] = _as_meta(result)
        return result

    def get_attr(self, target, args, kwargs):
        return _stand_in(super().get_attr(target, args, kwargs), self.on_meta)


def _stand_in(x, on_meta: bool):
    """A tensor of `x`'s size, stride, storage offset and dtype: on meta, or a copy of `x`'s
    values in fresh memory."""
    if not isinstance(x, torch.Tensor):
        return x
    if x.layout != torch.strided:
        return x.clone() if not on_meta else x.to("meta")
    numel = x.untyped_storage().nbytes() // max(x.element_size(), 1)
    base = torch.empty(numel, dtype=x.dtype, device="meta" if on_meta else x.device)
    out = base.as_strided(x.shape, x.stride(), x.storage_offset())
    if not on_meta:
        try:
            out.copy_(x)
        except RuntimeError:       # an overlapping layout (expanded): a dense copy will do
            out = x.clone()
    return out


def _as_meta(r):
    if isinstance(r, torch.Tensor):
        if r.layout != torch.strided:
            return r.to("meta")
        return torch.empty_strided(r.shape, r.stride(), dtype=r.dtype, device="meta")
    if isinstance(r, (list, tuple)):
        return tuple(_as_meta(x) for x in r) if hasattr(r, "_fields") else \
            type(r)(_as_meta(x) for x in r)
    return r


def _has_real_tensor(r) -> bool:
    if isinstance(r, torch.Tensor):
        return True
    return isinstance(r, (list, tuple)) and any(_has_real_tensor(x) for x in r)


def _is_tensor_meta(m):
    """A meta tensor, ShapeProp's record, or anything shaped like one (pydynamo.meta.TensorMeta)."""
    if isinstance(m, (TensorMetadata, torch.Tensor)):
        return True
    return not isinstance(m, (tuple, list, sympy.Basic)) and hasattr(m, "shape") and \
        hasattr(m, "dtype") and hasattr(m, "stride")


def _meta_symbols(m) -> set:
    """Free symbols in a placeholder's metadata (a size symbol or a tensor's sizes/strides)."""
    e = as_sympy(m)
    if e is not None:
        return set(e.free_symbols)
    if not _is_tensor_meta(m):
        return set()
    st = meta_stride(m)
    out = set()
    for x in list(m.shape) + list(st or ()):
        x = as_sympy(x)
        if x is not None:
            out |= x.free_symbols
    return out


def _view_flag(m) -> Optional[bool]:
    """Does eager's value share storage with the op's tensor argument (a view of it, or the
    argument itself)? The tracer's static record says (pydynamo.meta.TensorMeta.is_view, from
    the meta run), as does a meta tensor (`_is_view()`: propagate_meta's, which are never
    views); None (unknown: may be a view) for records without the flag, or symbolic ones
    (theirs holds on the example sizes only)."""
    if isinstance(m, torch.Tensor):
        return m._is_view()
    flag = getattr(m, "is_view", None)
    return flag if isinstance(flag, bool) and not _meta_symbols(m) else None


def _fresh_at_every_size(node) -> bool:
    """Eager's value of `node` is a new tensor (its own storage, offset 0) whatever the sizes:
    aten's clone. The record's view flag cannot say so where sizes are symbolic (it holds at the
    example sizes only: a reshape is a view at some sizes, a copy at others), and an op's schema
    is no proof either (`_unsafe_view` returns an alias unannotated). The recorder's flat value
    of a written storage is such a clone (pydynamo/aot/recorder.py)."""
    return node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload) and \
        node.target.overloadpacket is torch.ops.aten.clone


def _symbolic_record(m) -> bool:
    """A node's record (a TensorMeta or a structure of them) has a symbolic size or stride."""
    if isinstance(m, (list, tuple)):
        return any(_symbolic_record(x) for x in m)
    return any(as_sympy(d) is not None and not as_sympy(d).is_number
               for d in tuple(getattr(m, "shape", ()) or ()) + tuple(meta_stride(m) or ()))


def _tensors_beside_scalars(m) -> bool:
    """An aten op's tuple result of tensors with Python scalars among them (the fused attention
    ops' max_q/max_k): the recorded training graphs are specialized to their sizes, so the
    scalars are the recorded constants."""
    return isinstance(m, (list, tuple)) and any(_is_tensor_meta(x) for x in m) and \
        all(x is None or isinstance(x, (int, float, bool)) or _is_tensor_meta(x) for x in m)


def _all_tensor_meta(m):
    """Tensors, possibly nested, with None allowed beside them (`mha(...)` -> (out, None))."""
    if _is_tensor_meta(m):
        return True
    if isinstance(m, (list, tuple)):
        return any(_all_tensor_meta(x) for x in m) and \
            all(x is None or _all_tensor_meta(x) for x in m)
    return False

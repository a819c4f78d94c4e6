"""Attention biases handed to fused attention kernels in the layout those kernels require.

CUDA's memory-efficient attention (and cuDNN's) reads its additive bias (`attn_bias`, the float
mask) with vector loads: every stride but the last must be a multiple of 16 bytes, or the call
fails ("attn_bias is not correctly aligned"). torch's own `scaled_dot_product_attention`
satisfies it by padding the mask's last dimension and slicing it back (a copy per call); a graph
recorded at the dispatcher (training joints, functionalized inference graphs) holds that pad and
slice as ops, and codegen folding them into one kernel wrote a dense `[..., N]` bias whose rows
start at unaligned offsets: a static-cache decode step (key length 23) then failed its CUDA-graph
capture and launched plainly (found in session 17; tests/codegen_triton/test_gpu.py
`test_decode_mask_of_odd_length_is_captured`).

`aligned_bias(v)` returns v when it is already a view of a buffer with aligned strides, else v
written once into a buffer whose rows are padded to a multiple of ALIGN elements, as a view of
its first N columns (the padding is never read); a bias computed per batch row and broadcast
over the heads (`TensorValue.view_of`) is padded before the broadcast. Values are unchanged, so every attention
kernel (and eager's composite, which then skips its own pad copy) computes the same result.
Only a static last size is padded; a symbolic one is passed as before.

`BIAS_ARGUMENT` names the bias argument of each fused attention op whose call codegen emits.
"""
from __future__ import annotations

import torch

from codegen.ir import TensorValue, realize, strided_view_of
from codegen.lowering import LOWERINGS as L
from codegen.sizevars import static_int

# elements: 16 covers 16-byte vectors down to 8-bit types, as torch's own pad of the mask does
ALIGN = 16

_aten = torch.ops.aten
BIAS_ARGUMENT = {
    op: name for op, name in (
        (getattr(_aten, "_scaled_dot_product_efficient_attention", None), "attn_bias"),
        (getattr(_aten, "_scaled_dot_product_efficient_attention_backward", None), "attn_bias"),
        (getattr(_aten, "_efficient_attention_forward", None), "bias"),
        (getattr(_aten, "_efficient_attention_backward", None), "bias"),
        (getattr(_aten, "_scaled_dot_product_cudnn_attention", None), "attn_bias"),
        (getattr(_aten, "_scaled_dot_product_cudnn_attention_backward", None), "attn_bias"),
    ) if op is not None
}
BIAS_ARGUMENT = {getattr(packet, "default"): name for packet, name in BIAS_ARGUMENT.items()
                 if hasattr(packet, "default")}


def _aligned(v: TensorValue) -> bool:
    ref = strided_view_of(v)
    if ref is None:
        return False
    strides = [static_int(s) for s in ref.stride]
    offset = static_int(ref.offset)
    if offset is None or None in strides or strides[-1] != 1 and static_int(v.size[-1]) != 1:
        return False
    return offset % ALIGN == 0 and all(s % ALIGN == 0 for s in strides[:-1])


def aligned_bias(v):
    """v (an attention bias) as a view the fused kernels accept; see the module docstring."""
    if not isinstance(v, TensorValue) or v.ndim < 2 or _aligned(v):
        return v
    n = static_int(v.size[-1])
    if n is None:
        return v                        # a symbolic key length: as before
    if v.view_of is not None:           # a bias broadcast over heads stays a stride-0 view
        source, view = v.view_of
        out = view(aligned_bias(source))
        if _aligned(out):
            return out
    padded = -(-n // ALIGN) * ALIGN
    if padded == n:     # a fresh dense buffer of it is aligned (a view of another may not be)
        return realize(TensorValue(list(v.size), v.dtype, v.loader, None, v.cost))
    return L["narrow"](realize(L["constant_pad_nd"](v, [0, padded - n], 0.0)), -1, 0, n)


def align_bias_argument(target, args, kwargs):
    """(args, kwargs) of an extern call of `target` with its attention bias aligned."""
    name = BIAS_ARGUMENT.get(target)
    if name is None:
        return args, kwargs
    if name in kwargs:
        return args, {**kwargs, name: aligned_bias(kwargs[name])}
    names = [a.name for a in target._schema.arguments]
    i = names.index(name)
    if i < len(args):
        args = (*args[:i], aligned_bias(args[i]), *args[i + 1:])
    return args, kwargs

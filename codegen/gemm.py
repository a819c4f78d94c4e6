"""Matrix products: mm, addmm and linear as extern GEMM calls, with their operands padded where
cuBLAS would otherwise take its slow unaligned kernels.

A product's bias and scale stay pointwise work that fuses into its consumers, except a row
bias added inside the extern (cuBLAS's epilogue) where the product is written to memory anyway
(GraphLowering.bias_in_extern).

Padding rule. cuBLAS runs a 16-bit GEMM with tensor cores only when every matrix's leading
dimension is a multiple of 16 bytes; otherwise it falls to "align1" kernels. Measured on an H100
(benchmarks/gpu/gemm_padding.py, torch 2.11): GPT-2's LM head, 2048 tokens x 768 x vocabulary
50257 in bf16, the forward product takes 1652 us unaligned against 321 us with the vocabulary
zero-padded to 50264 (the pad copies included), the two backward products 1116 -> 616 and
1118 -> 535 us; fp16 alike; a 4097-column MLP weight 114 -> 41 us. float32 is not padded (its
kernels are SIMT ones either way; padding measured 0.85-0.95x). So, on GPU graphs, a bf16/fp16
product of at least PAD_MIN_MACS multiply-adds pads each of M, K, N that is not a multiple of 8
with zeros to the next multiple of 8 (each is some matrix's leading dimension in a common layout:
N the row-major result's, K a row-major operand's, M a transposed left operand's, as in a weight
gradient g.t() @ h), computes the padded product and returns the unpadded slice of it (zeros in
the padded K contribute nothing; the padded rows and columns of the result are never read). The
pad copies are our own kernels, a parameter's made per call (cheap next to the GEMM: 77 MB for
GPT-2's embedding).
"""
from __future__ import annotations

from typing import List, Optional

import sympy
import torch

from codegen.ir import current, realize, strided_view_of
from codegen.lowering import LOWERINGS, is_tensor, register
from codegen.ops import collect_deps
from codegen.sizevars import static_int
from pydynamo.symbols import loop_vars

L = LOWERINGS
ALIGN = 8                 # elements of a 16-bit dtype in 16 bytes
PAD_MIN_MACS = 1 << 27    # smaller products: the pad copies are not worth it
_PADDED_DTYPES = (torch.float16, torch.bfloat16)


@register("linear")
def linear(input, weight, bias=None):
    if input.ndim >= 2 and _pad_plan(_rows(input), input.size[-1], weight.size[0], input, weight):
        flat = L["reshape"](input, [-1, input.size[-1]]) if input.ndim > 2 else input
        out = _padded_mm(flat, L["permute"](weight, [1, 0]))
        if input.ndim > 2:
            out = L["reshape"](out, list(input.size[:-1]) + [weight.size[0]])
        return out if bias is None else L["add"](out, bias)
    if bias is not None and bias.ndim == 1 and current.graph.bias_in_extern():
        return current.graph.call_extern(torch.nn.functional.linear, (input, weight, bias), {})
    out = current.graph.call_extern(torch.nn.functional.linear, (input, weight), {})
    if bias is not None:
        out = L["add"](out, bias)
    return out


@register("mm")
def mm(input, mat2):
    return _padded_mm(input, mat2)


@register("addmm")
def addmm(input, mat1, mat2, *, beta=1, alpha=1):
    if beta == 1 and alpha == 1 and is_tensor(input) and input.ndim == 1 and \
            input.dtype == mat1.dtype and current.graph.bias_in_extern() and \
            not _pad_plan(mat1.size[0], mat1.size[1], mat2.size[1], mat1, mat2):
        return current.graph.call_extern(torch.addmm, (input, mat1, mat2), {})
    prod = _padded_mm(mat1, mat2)
    if alpha != 1:
        prod = L["mul"](prod, alpha)
    if beta == 0:
        return prod
    return L["add"](prod, input if beta == 1 else L["mul"](input, beta))


def _rows(x):
    n = 1
    for s in x.size[:-1]:
        n = n * s
    return n


def _pad_plan(m, k, n, a, b) -> Optional[List[int]]:
    """The padded (M, K, N) of a product of a (M, K) and b, or None to run it as is (see the
    module docstring)."""
    g = current.graph
    if not g.backend.pad_gemm_operands or a.dtype not in _PADDED_DTYPES or b.dtype != a.dtype:
        return None
    dims = [static_int(d) for d in (m, k, n)]
    if any(d is None for d in dims) or dims[0] * dims[1] * dims[2] < PAD_MIN_MACS:
        return None
    padded = [-(-d // ALIGN) * ALIGN for d in dims]
    return padded if padded != dims else None


def _padded_mm(a, b):
    """a (M, K) @ b (K, N), through zero-padded operands when `_pad_plan` says so."""
    g = current.graph
    if a.ndim != 2 or b.ndim != 2:
        return g.call_extern(torch.mm, (a, b), {})
    plan = _pad_plan(a.size[0], a.size[1], b.size[1], a, b)
    if plan is None:
        return g.call_extern(torch.mm, (a, b), {})
    m, k, n = plan
    pa = _pad2(a, m, k)
    pb = _pad2(b, k, n)
    out = g.call_extern(torch.mm, (pa, pb), {})
    if m != static_int(a.size[0]):
        out = L["narrow"](out, 0, 0, int(a.size[0]))
    if n != static_int(b.size[1]):
        out = L["narrow"](out, 1, 0, int(b.size[1]))
    return out


def _pad2(x, rows, cols):
    """x zero-padded to (rows, cols), padded in the order it is stored: a transposed view (a
    weight's `.t()`, a gradient's `g.t()`) is its storage padded and transposed back, so the copy
    reads and writes contiguously and cuBLAS takes the transpose for free. One copy per padded
    value and shape per graph (g @ W and g.t() @ h share g's)."""
    r, c = static_int(x.size[0]), static_int(x.size[1])
    if (r, c) == (rows, cols):
        return x
    if _column_major(x):
        return L["permute"](_pad_stored(L["permute"](x, [1, 0]), cols, rows), [1, 0])
    return _pad_stored(x, rows, cols)


def _column_major(x) -> bool:
    """Are x's reads (of a view, or of a cast of one) contiguous down its columns?"""
    i, j = loop_vars("g", 2)
    reads = collect_deps(x.loader, [i, j]).reads
    if not reads:
        return False
    try:
        e = sympy.expand(next(iter(reads)).index)
        return e.coeff(i) == 1 and e.coeff(j) != 1
    except Exception:
        return False


def _pad_stored(x, rows, cols):
    view = strided_view_of(x)
    key = view and (view.buffer.name, view.size, view.stride, view.offset, rows, cols)
    cache = current.graph.__dict__.setdefault("gemm_pads", {})
    if key is None or key not in cache:
        r, c = static_int(x.size[0]), static_int(x.size[1])
        padded = realize(L["constant_pad_nd"](x, [0, cols - c, 0, rows - r], 0.0))
        if key is None:
            return padded
        cache[key] = padded
    return cache[key]

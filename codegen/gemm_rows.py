"""A Triton matmul for a 16-bit product whose row length breaks 16-byte alignment, writing its
result straight into eager's contiguous layout (issue 18: GPT-2's LM head, vocabulary 50257).

Why. cuBLAS takes its slow "align1" kernels when the result's leading dimension is not a
multiple of 16 bytes (GPT-2's logits: 1650 us on an H100), and so does torch.mm into a padded
buffer's view (ldc aligned, the weight not padded: the same 1650 us). codegen/gemm.py's padding
rule runs the product on padded operands (pad copy of the weight 52 us + product 245 us) and,
when the result is a graph output, copies the padded result to eager's contiguous layout
(143 us). This kernel does both in one: 329 us on an H100 (benchmarks/gpu/triton_mm_probe.py,
"rows-aligned", 2048 x 768 @ 768 x 50257 bf16).

How. A contiguous (M, N) result's row r starts at r*N elements: with N odd, consecutive rows
start at different offsets modulo R (R = 8 elements in 16 bytes), so no tile of a plain matmul
can store with 16-byte vectors. Here a tile's rows share one residue i = r mod R; their
starts r*N then have one misalignment, (i*N) mod R, and the tile's columns are shifted by it
so that every row segment it stores begins on a 16-byte boundary. A tile fully inside the
columns stores with a row mask only (constant along the row: vectorized); the two edge tiles
of each row class mask columns too. The weight's tile for a column block is read once from
memory for all row tiles (those run together: pid // row tiles is the column block).

A row bias (N,) of that dtype is the one epilogue: added to the float32 sums before the single
rounding, as cuBLAS's bias epilogue for F.linear (BERT's masked-LM head: vocabulary 30522 and a
bias; otherwise a kernel of its own would read the padded product back).

Invariants: `a` (M, K) and `b` (K, N) of one 16-bit dtype (bf16 or fp16), each matrix and the
result under 2**31 elements (offsets are 32-bit; codegen/gemm.py's rule checks, and so does
`mm_rows_aligned_out`) on one CUDA device (any strides;
the fast case is `a` row-major and `b` a row-major weight's transpose, read along K); the
result is a new contiguous (M, N) tensor of that dtype, fp32 accumulation as cuBLAS's.
Launched through codegen's `TritonLauncher` (a wrapper's launch costs what a generated
kernel's does). The tile shape is the probe's best on an H100 (128 x 256 x 64, 8 warps, Triton's
default 3 stages: 147 KB of shared memory); codegen/gemm.py takes this path only where it
measured it (compute capability 9).
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import torch
import triton
import triton.language as tl

from codegen.gemm import DIRECT_ROWS_TILE
from codegen.triton_launch import TritonLauncher, current_stream

ROW_CLASSES = tl.constexpr(8)   # elements of a 16-bit dtype in 16 bytes
# rows of one row class a program takes: a column block's programs cover DIRECT_ROWS_TILE rows
# (codegen/gemm.py's rule keeps M close to a multiple of that)
BLOCK_M = tl.constexpr(DIRECT_ROWS_TILE // 8)
BLOCK_N = 256             # the launcher's XBLOCK
BLOCK_K = tl.constexpr(64)
NUM_WARPS = 8


@triton.jit
def mm_rows_aligned(a_ptr, b_ptr, c_ptr, bias_ptr, M, N, K, sam, sak, sbk, sbn, row_tiles,
                    per_class, has_bias, XBLOCK: tl.constexpr):
    pid = tl.program_id(0)
    t = pid // row_tiles                 # the column block: its weight tile shared by all rows
    rt = pid % row_tiles
    i = rt // per_class                  # the row class: rows i, i + R, i + 2R, ...
    j = (rt % per_class) * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = i + j * ROW_CLASSES
    off = (ROW_CLASSES - (i * N) % ROW_CLASSES) % ROW_CLASSES
    c0 = t * XBLOCK + off - ROW_CLASSES  # row start + c0 is 16-byte aligned
    cols = c0 + tl.arange(0, XBLOCK)
    rk = tl.arange(0, BLOCK_K)
    row_ok = rows < M
    col_ok = (cols >= 0) & (cols < N)
    a = a_ptr + rows[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + cols[None, :] * sbn
    acc = tl.zeros((BLOCK_M, XBLOCK), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        k_ok = rk < K - k
        at = tl.load(a, mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        bt = tl.load(b, mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        acc += tl.dot(at, bt)
        a += BLOCK_K * sak
        b += BLOCK_K * sbk
    if has_bias:            # a linear's row bias, added in float32 before the one rounding
        acc += tl.load(bias_ptr + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
    base = tl.multiple_of(i * N + c0, 8)     # (ROW_CLASSES)
    offs = base + (j * ROW_CLASSES)[:, None] * N + tl.arange(0, XBLOCK)[None, :]
    out = acc.to(c_ptr.dtype.element_ty)
    if (c0 >= 0) & (c0 + XBLOCK <= N):
        tl.store(c_ptr + offs, out, mask=row_ok[:, None])
    else:
        tl.store(c_ptr + offs, out, mask=row_ok[:, None] & col_ok[None, :])


# one launcher per dtype and device: a launcher's specialization key leaves both out (a
# generated kernel's buffers have a pinned dtype and device), so a bf16 compile must never serve
# fp16 tensors, nor one device's loaded kernel another device
_launchers: Dict[Tuple[torch.dtype, torch.device], TritonLauncher] = {}


def _launcher(dtype, device) -> TritonLauncher:
    key = (dtype, device)
    if key not in _launchers:
        _launchers[key] = TritonLauncher(mm_rows_aligned, BLOCK_N, NUM_WARPS, kinds="ttttiiiiiiiiii")
    return _launchers[key]


def mm_rows_aligned_out(a: torch.Tensor, b: torch.Tensor,
                        bias: Optional[torch.Tensor] = None) -> torch.Tensor:
    """a (M, K) @ b (K, N) (+ a contiguous row bias (N,) of their dtype, as F.linear's) as a
    new contiguous (M, N) tensor (the module docstring)."""
    m, k = a.shape
    n = b.shape[1]
    if max(m * n, m * k, k * n) >= 1 << 31:
        raise ValueError(f"mm_rows_aligned_out: ({m}, {k}) @ ({k}, {n}) needs 64-bit offsets")
    c = torch.empty((m, n), dtype=a.dtype, device=a.device)
    per_class = triton.cdiv(triton.cdiv(m, ROW_CLASSES.value), BLOCK_M.value)
    row_tiles = ROW_CLASSES.value * per_class
    grid = (row_tiles * triton.cdiv(n + ROW_CLASSES.value, BLOCK_N), 1, 1)
    _launcher(a.dtype, a.device).launch(
        current_stream() if a.is_cuda else None, grid, a, b, c, a if bias is None else bias,
        m, n, k, a.stride(0), a.stride(1), b.stride(0), b.stride(1), row_tiles, per_class,
        int(bias is not None))
    return c

"""Can a Triton matmul write GPT-2's LM head straight into eager's contiguous (unaligned)
logits faster than cuBLAS's padded product plus the slice copy? (issue 18: GPT2LMHeadModel in
reduce-overhead mode spends ~140 us copying the padded logits to the contiguous layout.)

    python benchmarks/gpu/triton_mm_probe.py [--m 2048] [--k 768] [--n 50257] [--dtype bfloat16]

Times (do_bench median, us): cuBLAS on the unaligned operands (its align1 kernels); cuBLAS on the
weight padded to a multiple of 8 rows (pad copy excluded, as a cached padded parameter would be)
with the result sliced back to a contiguous tensor; the same product without the slice (the
strided view torch.compile returns); and a plain Triton matmul kernel (grouped tile order, fp32
accumulation, masked edges) in a few tile configurations, writing the contiguous result.
Session 19 added cuBLAS into a padded buffer's view and the rows-aligned kernel over tile
configurations: its parametrized copy here is the search, codegen/gemm_rows.py the product
(with the configuration this probe found best on an H100, 128 x 256 x 64, 8 warps, 3 stages).
"""
import argparse

import torch
import triton
import triton.language as tl
from triton.testing import do_bench


@triton.jit
def mm_kernel(a_ptr, b_ptr, c_ptr, M, N, K, sam, sak, sbk, sbn, scm, scn,
              BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
              GROUP_M: tl.constexpr, EVEN_K: tl.constexpr):
    pid = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    in_group = GROUP_M * num_pid_n
    first_m = (pid // in_group) * GROUP_M
    size_m = min(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (pid % in_group) % size_m
    pid_n = (pid % in_group) // size_m
    rm = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    rn = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    ram = tl.max_contiguous(tl.multiple_of(rm % M, BLOCK_M), BLOCK_M)
    rbn = tl.max_contiguous(tl.multiple_of(rn % N, BLOCK_N), BLOCK_N)
    a = a_ptr + ram[:, None] * sam + rk[None, :] * sak
    b = b_ptr + rk[:, None] * sbk + rbn[None, :] * sbn
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, tl.cdiv(K, BLOCK_K)):
        if EVEN_K:
            at = tl.load(a)
            bt = tl.load(b)
        else:
            at = tl.load(a, mask=rk[None, :] < K - k * BLOCK_K, other=0.0)
            bt = tl.load(b, mask=rk[:, None] < K - k * BLOCK_K, other=0.0)
        acc += tl.dot(at, bt)
        a += BLOCK_K * sak
        b += BLOCK_K * sbk
    c = c_ptr + rm[:, None] * scm + rn[None, :] * scn
    tl.store(c, acc.to(c_ptr.dtype.element_ty), mask=(rm[:, None] < M) & (rn[None, :] < N))


@triton.jit
def mm_rows_aligned_kernel(a_ptr, w_ptr, c_ptr, M, N, K, sam, swn, n_rows_tiles,
                           BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
                           R: tl.constexpr):
    """c (M, N) contiguous = a (M, K) @ w (N, K).t(), every store 16 bytes aligned: a tile's
    rows share one residue i = r mod R (R elements in 16 bytes), so their starts r*N have one
    misalignment, and the tile's columns are shifted by it. Tiles are ordered so that the
    row tiles of one column block run together (the weight's block is read once from memory)."""
    pid = tl.program_id(0)
    t = pid // n_rows_tiles
    rt = pid % n_rows_tiles
    per_class = tl.cdiv(tl.cdiv(M, R), BLOCK_M)
    i = rt // per_class
    jb = rt % per_class
    off = (R - (i * N) % R) % R            # first column whose address is aligned, in row class i
    j = jb * BLOCK_M + tl.arange(0, BLOCK_M)
    rows = i + R * j
    c0 = t * BLOCK_N + off - R
    cols = c0 + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    a = a_ptr + rows[:, None] * sam + rk[None, :]
    w = w_ptr + cols[None, :] * swn + rk[:, None]
    row_ok = rows < M
    col_ok = (cols >= 0) & (cols < N)
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k in range(0, K, BLOCK_K):
        at = tl.load(a, mask=row_ok[:, None], other=0.0)
        bt = tl.load(w, mask=col_ok[None, :], other=0.0)
        acc += tl.dot(at, bt)
        a += BLOCK_K
        w += BLOCK_K
    base = tl.multiple_of(i * N + off - R + t * BLOCK_N, R)
    offs = base + (R * j)[:, None] * N + tl.arange(0, BLOCK_N)[None, :]
    out = acc.to(c_ptr.dtype.element_ty)
    if (c0 >= 0) & (c0 + BLOCK_N <= N):
        tl.store(c_ptr + offs, out, mask=row_ok[:, None])
    else:
        tl.store(c_ptr + offs, out, mask=row_ok[:, None] & col_ok[None, :])


def rows_aligned_mm(x, w, out, bm, bn, bk, warps, stages):
    M, K = x.shape
    N = w.shape[0]
    R = 16 // x.element_size()
    n_rows_tiles = R * triton.cdiv(triton.cdiv(M, R), bm)
    grid = (n_rows_tiles * triton.cdiv(N + R, bn),)
    mm_rows_aligned_kernel[grid](x, w, out, M, N, K, x.stride(0), w.stride(0), n_rows_tiles,
                                 BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, R=R,
                                 num_warps=warps, num_stages=stages)
    return out


def triton_mm(a, b, out, bm, bn, bk, warps, stages, group=8):
    M, K = a.shape
    N = b.shape[1]
    grid = (triton.cdiv(M, bm) * triton.cdiv(N, bn),)
    mm_kernel[grid](a, b, out, M, N, K, a.stride(0), a.stride(1), b.stride(0), b.stride(1),
                    out.stride(0), out.stride(1), BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk,
                    GROUP_M=group, EVEN_K=K % bk == 0, num_warps=warps, num_stages=stages)
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=50257)
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    torch.manual_seed(0)
    x = torch.randn(a.m, a.k, device="cuda", dtype=dt)
    w = torch.randn(a.n, a.k, device="cuda", dtype=dt)          # a linear's weight, [N, K]
    npad = -(-a.n // 8) * 8
    wp = torch.nn.functional.pad(w, [0, 0, 0, npad - a.n])
    ref = x @ w.t()
    us = lambda f: do_bench(f, warmup=25, rep=200, return_mode="median") * 1e3   # noqa: E731
    flop = 2 * a.m * a.k * a.n
    rows = [("cuBLAS unaligned", us(lambda: x @ w.t())),
            ("cuBLAS padded + contiguous slice", us(lambda: (x @ wp.t())[:, :a.n].contiguous())),
            ("cuBLAS padded, strided view", us(lambda: (x @ wp.t())[:, :a.n]))]
    buf = torch.empty(a.m, npad, device="cuda", dtype=dt)
    view = buf[:, :a.n]
    torch.mm(x, w.t(), out=view)
    err = ((view.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
    rows += [(f"cuBLAS out= padded buffer's view, unpadded weight (err {err:.1e})",
              us(lambda: torch.mm(x, w.t(), out=view))),
             ("  the same + contiguous copy", us(lambda: torch.mm(x, w.t(), out=view).contiguous())),
             ("weight pad copy alone", us(lambda: torch.nn.functional.pad(w, [0, 0, 0, npad - a.n]))),
             ("contiguous copy of the view alone", us(lambda: view.contiguous()))]
    out = torch.empty(a.m, a.n, device="cuda", dtype=dt)
    for cfg in [(128, 128, 64, 8, 3), (128, 256, 64, 8, 3), (128, 128, 64, 4, 4),
                (64, 256, 64, 4, 4), (128, 256, 64, 8, 4), (256, 128, 64, 8, 3),
                (128, 128, 128, 8, 3), (64, 128, 64, 4, 4)]:
        try:
            out.zero_()
            rows_aligned_mm(x, w, out, *cfg)
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            rows.append((f"Triton rows-aligned {cfg} err {err:.1e}",
                         us(lambda: rows_aligned_mm(x, w, out, *cfg))))
        except Exception as e:     # a config the card cannot hold (shared memory)
            rows.append((f"Triton rows-aligned {cfg}: {type(e).__name__} {str(e)[:200]}", float("nan")))
    for cfg in [(128, 128, 64, 8, 3), (128, 128, 64, 4, 4), (128, 256, 64, 8, 3),
                (256, 128, 64, 8, 3), (64, 256, 64, 4, 4), (128, 128, 32, 4, 5),
                (128, 64, 64, 4, 4)]:
        try:
            triton_mm(x, w.t(), out, *cfg)
            err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
            rows.append((f"Triton {cfg} err {err:.1e}", us(lambda: triton_mm(x, w.t(), out, *cfg))))
        except Exception as e:     # a config the card cannot hold (shared memory)
            rows.append((f"Triton {cfg}: {type(e).__name__}", float("nan")))
    print(f"{torch.cuda.get_device_name()}, {a.dtype}, [{a.m}, {a.k}] @ [{a.k}, {a.n}]")
    for name, t in rows:
        print(f"  {t:8.1f} us  {flop / t / 1e6:6.0f} TFLOP/s  {name}")


if __name__ == "__main__":
    main()

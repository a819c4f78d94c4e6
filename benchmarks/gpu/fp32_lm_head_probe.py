"""Can GPT-2's float32 LM head (2048 x 768 @ 768 x 50257, the last float32 line of issue 18 at
parity with torch.compile) write eager's contiguous logits faster than cuBLAS's unaligned call?
Written in session 20 without device time left to run it: the next session's first GPU call.

    python benchmarks/gpu/fp32_lm_head_probe.py [--m 2048] [--k 768] [--n 50257]

Variants (do_bench median us, each checked against the plain product):
  plain        torch.mm(h, W.t()) into the contiguous (M, N) result (what both engines run);
  padded-only  the product over a weight padded to N' = N rounded up to 4 (a derived value,
               made once: codegen/derived.py), result (M, N') left padded: the alignment gain
               alone, not a usable result;
  padded+copy  the same, then copied into the contiguous (M, N) result (the copy our kernel
               would do, here torch's);
  residues     the rows of one residue r mod 4 start at the same misalignment (50257 = 1 mod 4),
               so rows {4i + r} x columns [c0, c0 + 4j) with c0 = -r mod 4 start 16-byte
               aligned with an aligned row stride (4N): four aligned products written with
               out= straight into the contiguous result, plus the few columns left at each end
               of each residue (at most 6) as small products.
If `residues` beats `plain` (and cuBLAS takes out= into a strided view without a temporary:
its time would show the copy), codegen/gemm.py could run float32 products whose result is a
graph output this way, by the same kind of rule as gemm_rows.py's.
"""
import argparse

import torch
from triton.testing import do_bench


def residues(h, w, out):
    m, n = out.shape
    for r in range(4):
        c0 = (-r) % 4
        wide = (n - c0) // 4 * 4
        rows = h[r::4]
        torch.mm(rows, w[c0:c0 + wide].t(), out=out[r::4, c0:c0 + wide])
        if c0:
            torch.mm(rows, w[:c0].t(), out=out[r::4, :c0])
        if c0 + wide < n:
            torch.mm(rows, w[c0 + wide:].t(), out=out[r::4, c0 + wide:])
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--k", type=int, default=768)
    ap.add_argument("--n", type=int, default=50257)
    a = ap.parse_args()
    torch.manual_seed(0)
    h = torch.randn(a.m, a.k, device="cuda") / a.k ** 0.5
    w = torch.randn(a.n, a.k, device="cuda")
    n4 = -(-a.n // 4) * 4
    wp = torch.zeros(n4, a.k, device="cuda")
    wp[:a.n] = w
    want = torch.mm(h, w.t())
    out = torch.empty(a.m, a.n, device="cuda")
    print(torch.cuda.get_device_name(), torch.__version__, f"M {a.m} K {a.k} N {a.n}")
    ways = {
        "plain": lambda: torch.mm(h, w.t()),
        "padded-only": lambda: torch.mm(h, wp.t()),
        "padded+copy": lambda: out.copy_(torch.mm(h, wp.t())[:, :a.n]),
        "residues": lambda: residues(h, w, out),
    }
    base = None
    for name, fn in ways.items():
        got = fn()
        if name != "padded-only":
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
        us = do_bench(fn, rep=300) * 1e3
        base = base or us
        print(f"  {name:12s} {us:9.1f} us   plain/this {base / us:.3f}", flush=True)


if __name__ == "__main__":
    main()

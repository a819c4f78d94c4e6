"""Can GPT-2's float32 layer GEMMs (batch 8 x seq 256 rows) run faster split along K as one
batched product, the partial sums added by the kernel that reads the product anyway?

    python benchmarks/gpu/fp32_splitk_probe.py [--m 2048] [--dtype float32]

Issue 18's last GPU line: GPT2LMHeadModel in float32 is at parity with torch.compile, 92% of
both engines' time in the same cuBLAS float32 GEMMs (no tensor cores without TF32). The LM
head's alignment is not the cost (fp32_lm_head_probe.py: an aligned weight is no faster), so
this probe asks whether the layer GEMMs fill the GPU: (2048 x 768) @ (768 x 768) is 96 tiles of
128 x 128 on 132 SMs. Split-K S writes S partial products (S, M, N) in one bmm of S x the tiles;
their sum costs the consumer S - 1 extra reads of M x N (our epilogue kernel reads the product
already, so the sum fuses there). Printed per shape (do_bench median us, checked against the
plain product): the plain addmm, the bmm alone, the bmm plus torch's sum (an upper bound on
the fused reduction), and TFLOP/s of the plain call.
"""
import argparse

import torch
from triton.testing import do_bench

SHAPES = {   # name: (K, N) of x (M, K) @ w (K, N) + b, GPT-2 small's Conv1D layers
    "c_attn": (768, 2304),
    "attn.c_proj": (768, 768),
    "c_fc": (768, 3072),
    "mlp.c_proj": (3072, 768),
}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--m", type=int, default=2048)
    ap.add_argument("--dtype", default="float32")
    ap.add_argument("--splits", default="2,3,4,6")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    torch.manual_seed(0)
    print(torch.cuda.get_device_name(), torch.__version__, "SMs",
          torch.cuda.get_device_properties(0).multi_processor_count, f"M {a.m} {a.dtype}")
    for name, (k, n) in SHAPES.items():
        x = torch.randn(a.m, k, device="cuda", dtype=dt)
        w = torch.randn(k, n, device="cuda", dtype=dt) / k ** 0.5
        b = torch.randn(n, device="cuda", dtype=dt)
        want = torch.addmm(b, x, w)
        plain = do_bench(lambda: torch.addmm(b, x, w), rep=200) * 1e3
        tflops = 2 * a.m * k * n / plain * 1e-6
        print(f"{name:12s} K {k:5d} N {n:5d}  addmm {plain:8.1f} us ({tflops:5.1f} TFLOP/s)",
              flush=True)
        for s in (int(v) for v in a.splits.split(",")):
            if k % s:
                continue
            xs = x.view(a.m, s, k // s).transpose(0, 1)
            ws = w.view(s, k // s, n)
            got = torch.bmm(xs, ws).sum(0) + b
            torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
            only = do_bench(lambda: torch.bmm(xs, ws), rep=200) * 1e3
            summed = do_bench(lambda: torch.bmm(xs, ws).sum(0).add_(b), rep=200) * 1e3
            print(f"    split {s}: bmm {only:8.1f} us ({plain / only:.3f}x)   bmm+sum "
                  f"{summed:8.1f} us ({plain / summed:.3f}x)", flush=True)


if __name__ == "__main__":
    main()

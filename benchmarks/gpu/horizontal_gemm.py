"""Are sibling products of one input faster as one product over concatenated weights, and is
cuBLASLt's tanh-GELU epilogue faster than addmm then a GELU kernel? The measurement behind
codegen's horizontal-GEMM and GELU-epilogue rules (issue 18's float32 lines).

    python benchmarks/gpu/horizontal_gemm.py [--dtypes float32,bfloat16]

Each line times, with CUDA-graph replays (triton.testing.do_bench_cudagraph, median us), the
separate F.linear calls against one F.linear over the weights concatenated along N (the column
slices of its result are the separate results: no copy). Shapes: a Llama block's q/k/v and
gate/up projections (hidden 768, MLP 2048, 2048 tokens: benchmarks/bench_gpu.py's llama; and a
decode step's 8 tokens), GPT-2's MLP input (768 -> 3072) with its bias and tanh GELU.
"""
import argparse

import torch
import torch.nn.functional as F
from triton.testing import do_bench_cudagraph


def bench(fn):
    return do_bench_cudagraph(fn, rep=200) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtypes", default="float32,bfloat16")
    a = ap.parse_args()
    torch.manual_seed(0)
    dev = "cuda"
    print(torch.cuda.get_device_name(), torch.__version__)
    for dt in [getattr(torch, d) for d in a.dtypes.split(",")]:
        for m in (2048, 8):
            for name, k, ns in (("llama q/k/v", 768, (768, 768, 768)),
                                ("llama gate/up", 768, (2048, 2048)),
                                ("llama-1B-ish q/k/v", 2048, (2048, 512, 512)),
                                ("llama-1B-ish gate/up", 2048, (5632, 5632))):
                x = torch.randn(m, k, device=dev, dtype=dt)
                ws = [torch.randn(n, k, device=dev, dtype=dt) / k ** 0.5 for n in ns]
                cat = torch.cat(ws)
                sep = bench(lambda: [F.linear(x, w) for w in ws])
                one = bench(lambda: F.linear(x, cat))
                print(f"  {str(dt)[6:]:9s} M {m:5d} {name:22s} separate {sep:8.1f}  "
                      f"concatenated {one:8.1f}  ratio {sep / one:.3f}", flush=True)
        m, k, n = 2048, 768, 3072
        x = torch.randn(m, k, device=dev, dtype=dt)
        w = torch.randn(k, n, device=dev, dtype=dt) / k ** 0.5
        b = torch.randn(n, device=dev, dtype=dt)
        two = bench(lambda: F.gelu(torch.addmm(b, x, w), approximate="tanh"))
        mm_only = bench(lambda: torch.addmm(b, x, w))
        fused = bench(lambda: torch._addmm_activation(b, x, w, use_gelu=True))
        ref = F.gelu(torch.addmm(b, x, w).double(), approximate="tanh")
        err = lambda t: ((t.double() - ref).abs().max() / ref.abs().max()).item()  # noqa: E731
        print(f"  {str(dt)[6:]:9s} GPT-2 c_fc {m}x{k}x{n}: addmm {mm_only:.1f}, addmm + gelu "
              f"{two:.1f}, _addmm_activation {fused:.1f} (ratio {two / fused:.3f}); max rel err "
              f"two-step {err(F.gelu(torch.addmm(b, x, w), approximate='tanh')):.2e} fused "
              f"{err(torch._addmm_activation(b, x, w, use_gelu=True)):.2e}", flush=True)


if __name__ == "__main__":
    main()

"""The three ways codegen/gemm.py can run a 16-bit product whose N breaks alignment and whose
result is a graph output, timed side by side over sizes (codegen/gemm_timing.py's measurement,
the one max-autotune uses): where the rows-aligned Triton kernel beats the padded cuBLAS
product plus its copy, to state gemm.py's rule from measurements.

    python benchmarks/gpu/gemm_ways.py [--dtype bfloat16]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402

from codegen import gemm_timing  # noqa: E402

SHAPES = [(2048, 768, n) for n in (1001, 4097, 8193, 16385, 32769, 50257)] + \
    [(1024, 768, 50257), (4096, 768, 50257), (8192, 768, 50257), (2048, 1024, 50257),
     (2048, 2048, 50257), (2048, 4096, 50257), (1024, 4096, 32001)]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    dev = torch.device("cuda")
    print(f"{torch.cuda.get_device_name()}, {a.dtype}; us per product (padded: GEMM on padded "
          f"operands + the weight's pad and the result's dense copy at copy bandwidth)")
    for m, k, n in SHAPES:
        pad = [-(-d // 8) * 8 for d in (m, k, n)]
        gemm_timing.fastest(["plain", "padded", "rows"], m, k, n, pad, True, dt, dev, True)
        (choice, us), = [v for key, v in gemm_timing.measured().items() if key[1:4] == (m, k, n)]
        print(f"  M {m:5d} K {k:5d} N {n:6d}  MK/(M+K) {m * k / (m + k):6.0f}  "
              + "  ".join(f"{c} {t:8.1f}" for c, t in us.items())
              + f"  rows/padded {us['rows'] / us['padded']:.2f}  -> {choice}", flush=True)


if __name__ == "__main__":
    main()

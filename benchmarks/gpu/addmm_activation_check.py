"""Which GELU torch._addmm_activation(use_gelu=True) computes on a device, and what the fused
epilogues of codegen/gemm.py cost there (issue 18, GEMM epilogues).

    python benchmarks/gpu/addmm_activation_check.py                 # CUDA
    python benchmarks/gpu/addmm_activation_check.py --device cpu --smoke

For float32, bf16 and fp16 and a few shapes (the bias 1-D, as cuBLASLt's epilogue wants), prints
the largest difference of `_addmm_activation(b, x, w, use_gelu=True)` from F.gelu of the addmm,
exact (erf) and tanh, and of `use_gelu=False` from relu, against the dtype's tolerance, and says
which GELU the device's fused call matches. codegen/gemm.py takes erf GELU into the extern on
CPU only (there it equals F.gelu bit for bit); run this on the GPU before allowing it on CUDA
(where cuBLASLt's GELU epilogue is expected to be the tanh one). Then times, per shape, the
fused call against addmm + a separate activation (CUDA events; CPU: thread time).
"""
from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

TOL = {torch.float32: 1e-5, torch.bfloat16: 1.6e-2, torch.float16: 1e-3}


def _time(fn, device, reps):
    fn()
    if device.type == "cuda":
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) / reps * 1e3
    t0 = time.thread_time()
    for _ in range(reps):
        fn()
    return (time.thread_time() - t0) / reps * 1e6


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--smoke", action="store_true")
    ns = ap.parse_args(argv)
    device = torch.device(ns.device)
    shapes = [(16, 32, 48)] if ns.smoke else [(128, 768, 3072), (2048, 768, 3072), (2048, 3072, 768),
                                              (1000, 1000, 1000)]
    dtypes = [torch.float32] if ns.smoke and device.type == "cpu" else \
        [torch.float32, torch.bfloat16, torch.float16]
    reps = 3 if ns.smoke else 50
    torch.manual_seed(0)
    print(f"torch {torch.__version__}, device {device}"
          + (f" ({torch.cuda.get_device_name()})" if device.type == "cuda" else ""))
    for dtype in dtypes:
        for m, k, n in shapes:
            x = torch.randn(m, k, device=device, dtype=dtype)
            w = torch.randn(k, n, device=device, dtype=dtype) / k ** 0.5
            b = torch.randn(n, device=device, dtype=dtype)
            ref = torch.addmm(b, x, w).float()
            fused = torch._addmm_activation(b, x, w, use_gelu=True).float()
            d_erf = (fused - F.gelu(ref)).abs().max().item()
            d_tanh = (fused - F.gelu(ref, approximate="tanh")).abs().max().item()
            d_relu = (torch._addmm_activation(b, x, w).float() - ref.relu()).abs().max().item()
            tol = TOL[dtype] * max(1.0, ref.abs().max().item())
            which = "erf" if d_erf <= tol and d_erf <= d_tanh else \
                "tanh" if d_tanh <= tol else "neither"
            t_fused = _time(lambda: torch._addmm_activation(b, x, w, use_gelu=True), device, reps)
            t_split = _time(lambda: F.gelu(torch.addmm(b, x, w)), device, reps)
            t_rfused = _time(lambda: torch._addmm_activation(b, x, w), device, reps)
            t_rsplit = _time(lambda: torch.addmm(b, x, w).relu(), device, reps)
            print(f"{str(dtype):15s} {m}x{k}x{n}: gelu matches {which:7s} (|d| erf {d_erf:.2e}, "
                  f"tanh {d_tanh:.2e}, tol {tol:.1e}); relu |d| {d_relu:.1e}; "
                  f"us fused/split gelu {t_fused:.1f}/{t_split:.1f}, relu {t_rfused:.1f}/{t_rsplit:.1f}")


if __name__ == "__main__":
    main()

"""Decode tokens/s with and without sibling-product grouping (codegen/gemm_group.py) and the
runner's refresh of derived values (codegen/derived.py), in one process, with a profile of each:
where a decode step's time goes when the q/k/v and gate/up products are grouped.

    python benchmarks/gpu/decode_grouping_probe.py [--dtype bf16] [--batch 1] [--new 64]
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

import pydynamo  # noqa: E402
from bench_decode import DTYPES, generate, make_model  # noqa: E402
from codegen import derived  # noqa: E402
from codegen.gpu_wrapper import TritonBackend  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--new", type=int, default=64)
    a = ap.parse_args()
    model = make_model("llama", False, "cuda", DTYPES[a.dtype])
    ids = torch.randint(0, 32000, (a.batch, 16), device="cuda")
    forward = model.forward
    refresh = derived.Derivation.refresh
    for variant in ("grouped", "grouped, no refresh", "not grouped", "grouped"):
        TritonBackend.horizontal_gemm = variant != "not grouped"
        derived.Derivation.refresh = (lambda self, args: None) if "no refresh" in variant \
            else refresh
        pydynamo.reset()
        model.forward = pydynamo.optimize(forward, mode="reduce-overhead")
        for _ in range(2):
            generate(model, ids, a.new)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        for _ in range(2):
            out = generate(model, ids, a.new)
        torch.cuda.synchronize()
        tok_s = 2 * a.batch * a.new / (time.perf_counter() - t0)
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                                torch.profiler.ProfilerActivity.CUDA]) as prof:
            generate(model, ids, a.new)
            torch.cuda.synchronize()
        print(f"== {variant}: {tok_s:.1f} tok/s, tokens {out[0, 16:24].tolist()}", flush=True)
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=14,
                                        max_name_column_width=60), flush=True)
        model.forward = forward


if __name__ == "__main__":
    main()

"""Does anything in a compiled LM forward wait for the GPU, and where does its host time go?

    python benchmarks/gpu/host_sync_probe.py [--model llama] [--dtype bfloat16] [--check-sync]

Session 21 (issue 18: Llama bf16 default mode is host-bound) ran these two parts as separate
scripts in device calls 7 and 9; they are kept here together, unchanged in what they measure:
  --check-sync   one warmed forward under `torch.cuda.set_sync_debug_mode(2)` (a synchronizing
                 call raises: its traceback is printed), then torch.profiler's CPU table of five
                 forwards (the host's own op costs: aten::mm, cuDNN attention, allocations);
  default        the forward's host loop (enqueue time, then with a synchronize after each
                 forward), cProfile of 20 forwards by own time, and the copy / synchronize
                 events of three profiled forwards (a pageable copy blocks the host).
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time
import traceback

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

BLOCKING = ("cudaMemcpyAsync", "cudaStreamSynchronize", "cudaDeviceSynchronize", "aten::copy_",
            "aten::_to_copy", "cudaEventSynchronize", "aten::item", "aten::_local_scalar_dense")


def loop_us(fwd, n, each_sync=False):
    """(host us per forward to enqueue, us per forward until the GPU is done)."""
    for _ in range(10):
        fwd()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fwd()
        if each_sync:
            torch.cuda.synchronize()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6, (time.perf_counter() - t0) / n * 1e6


def check_sync(fwd):
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode(2)
    try:
        fwd()
        print("no synchronizing call in a forward")
    except Exception:
        print("a forward synchronizes:")
        traceback.print_exc(limit=-12)
    finally:
        torch.cuda.set_sync_debug_mode(0)
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
        for _ in range(5):
            fwd()
        torch.cuda.synchronize()
    print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=22))


def host_profile(fwd):
    print("host loop us (enqueue, done):", loop_us(fwd, 50),
          "synchronized each forward:", loop_us(fwd, 30, True))
    pr = cProfile.Profile()
    pr.enable()
    for _ in range(20):
        fwd()
    torch.cuda.synchronize()
    pr.disable()
    s = io.StringIO()
    pstats.Stats(pr, stream=s).sort_stats("tottime").print_stats(30)
    print(s.getvalue()[:7000])
    with profile(activities=[ProfilerActivity.CPU], with_stack=True) as p:
        for _ in range(3):
            fwd()
        torch.cuda.synchronize()
    for e in p.events():
        if e.name in BLOCKING:
            print(e.name, round(e.cpu_time_total, 1),
                  [f for f in e.stack if "site-packages/torch" not in f][:8])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama", choices=["gpt2", "gpt2-lmhead", "llama"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--check-sync", action="store_true")
    a = ap.parse_args()
    import pydynamo
    from bench_gpu import lm_model
    model, ids = lm_model(a.model, False, "cuda", getattr(torch, a.dtype))
    m = pydynamo.optimize(model, backend="codegen")
    fwd = lambda: m(input_ids=ids, use_cache=False)      # noqa: E731
    print(torch.cuda.get_device_name(), a.model, a.dtype)
    with torch.no_grad():
        for _ in range(3):
            fwd()
        (check_sync if a.check_sync else host_profile)(fwd)


if __name__ == "__main__":
    main()

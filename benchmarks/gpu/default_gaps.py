"""Where a GPU-bound forward in default mode loses time that CUDA graphs win back: the GPU's idle
gaps between kernels in back-to-back forwards, and the host's blocking CUDA calls (issue 18:
float32 LM forwards, whose kernels take ~12 ms against a few ms of host time, ran 0.17-0.29 ms
slower per forward without CUDA graphs in our engine and 0.08-0.13 ms in torch.compile's).

    python benchmarks/gpu/default_gaps.py --model llama --dtype float32 --engines ours,torch_compile

Per engine: the forward's do_bench time, the GPU's busy time per forward and the idle time
between its kernels in the steady state (the first profiled forward left out; gaps of more
than 2 us, the largest listed with the kernels around them), and the CUDA runtime calls that can
block the host (synchronizations, copies, device allocations) per forward with their host time.
"""
import argparse
import collections
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402

BLOCKING = ("cudaStreamSynchronize", "cudaDeviceSynchronize", "cudaEventSynchronize",
            "cudaMemcpy", "cudaMalloc", "cudaFree", "cudaHostAlloc", "cudaMallocHost",
            "cuMemAlloc", "cuMemFree", "cudaStreamWaitEvent", "cuStreamSynchronize")


def gaps(fn, reps, top):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    kernels, runtime = [], collections.defaultdict(lambda: [0, 0.0])
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            kernels.append((e.time_range.start, e.time_range.end, e.name[:70]))
        elif any(e.name.startswith(b) for b in BLOCKING):
            runtime[e.name][0] += 1
            runtime[e.name][1] += e.time_range.end - e.time_range.start
    kernels.sort()
    # the first forward starts on an idle GPU (every engine's first kernels wait for the host):
    # its share of the kernels is left out, so the gaps are the steady state's
    kernels = kernels[len(kernels) // reps:]
    reps -= 1
    busy = sum(e - s for s, e, _ in kernels)
    idle = []
    end = kernels[0][1]
    for (s, e, name), prev in zip(kernels[1:], kernels):
        if s - end > 2:
            idle.append((s - end, prev[2], name))
        end = max(end, e)
    print(f"   GPU busy {busy / reps / 1000:.3f} ms per forward, idle between kernels "
          f"{sum(g for g, _, _ in idle) / reps / 1000:.3f} ms ({len(idle) / reps:.1f} gaps > 2 us "
          f"per forward)")
    for g, a, b in sorted(idle, reverse=True)[:top]:
        print(f"     gap {g:8.1f} us  after {a}  before {b}")
    for name, (n, t) in sorted(runtime.items(), key=lambda kv: -kv[1][1]):
        print(f"   host {name}: {n / reps:.1f} calls, {t / reps:.1f} us per forward")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama", choices=["gpt2", "gpt2-lmhead", "llama"])
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--engines", default="ours,torch_compile")
    ap.add_argument("--reps", type=int, default=6)
    ap.add_argument("--top", type=int, default=8)
    a = ap.parse_args()
    import pydynamo
    from bench_gpu import lm_model
    from triton.testing import do_bench
    model, ids = lm_model(a.model, False, "cuda", getattr(torch, a.dtype))
    field = "last_hidden_state" if a.model == "gpt2" else "logits"
    engines = {"eager": lambda: model,
               "ours": lambda: pydynamo.optimize(model, backend="codegen"),
               "torch_compile": lambda: torch.compile(model)}
    with torch.no_grad():
        for name in a.engines.split(","):
            pydynamo.reset()
            m = engines[name]()

            def fwd():
                return getattr(m(input_ids=ids, use_cache=False), field)
            fwd()
            ms = do_bench(fwd, warmup=50, rep=300, return_mode="median")
            print(f"== {a.model} {a.dtype} {name}: {ms:.3f} ms per forward (do_bench median)",
                  flush=True)
            gaps(fwd, a.reps, a.top)
            sys.stdout.flush()


if __name__ == "__main__":
    main()

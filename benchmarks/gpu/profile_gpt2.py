"""Where GPT-2 small's time goes on the GPU: per-kernel CUDA time for eager, pydynamo codegen
and torch.compile (torch.profiler), to find what separates us from torch.compile.

    python benchmarks/gpu/profile_gpt2.py [--layers 12] [--top 12] [--dtype bfloat16] [--model gpt2-lmhead]
    python benchmarks/gpu/profile_gpt2.py --train bf16-autocast   # forward+loss+backward
    python benchmarks/gpu/profile_gpt2.py --train fp32 --engines ours --sites   # copies, fills

Prints, per engine, the time of one forward (do_bench), its GPU time (sum of kernel times),
the kernel-launch count, the host time to enqueue it, and the kernels that take the most time
(grouped by name). Wall time above the GPU time is the GPU waiting for the host. --train profiles
a training step's forward, LM loss and backward instead (GPT2LMHeadModel, float32 weights, in
fp32 or under bf16 autocast; the optimizer step is left out: it is eager in every engine), with
each engine's peak memory of the step above what was resident before it.
"""
import argparse
import collections
import copy
import os
import re
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402
from torch.profiler import ProfilerActivity, profile  # noqa: E402


def kernel_table(fn, reps=5):
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(reps):
            fn()
        torch.cuda.synchronize()
    by_name, launches, total = collections.Counter(), 0, 0.0
    for e in prof.events():
        if e.device_type == torch.autograd.DeviceType.CUDA:
            t = e.device_time_total if hasattr(e, "device_time_total") else e.cuda_time_total
            by_name[e.name[:90]] += t / reps
            launches += 1
            total += t / reps
    return total, launches / reps, by_name


CATEGORIES = (("gemm", ("gemm", "xmma", "cutlass", "cublas", "sm90_", "sm80_", "ampere_", "wgmma")),
              ("attention", ("flash", "fmha", "attention", "efficient")),
              ("copy/fill", ("copy", "fill", "memset", "memcpy", "elementwise_kernel",
                             "vectorized_elementwise")),
              ("reduction", ("reduce_kernel",)))


def categories(by_name):
    """Kernel time grouped by kind (GEMM, attention, torch's copy/fill/elementwise, torch's
    reductions, generated kernels, the rest), so engines whose kernels have different names can
    be compared line by line."""
    out = collections.Counter()
    for name, t in by_name.items():
        low = name.lower()
        if low.startswith("triton_") or re.match(r"kernel\d+", low):
            out["generated"] += t           # (its name may say "_to_copy")
            continue
        out[next((c for c, keys in CATEGORIES if any(k in low for k in keys)), "other")] += t
    return " | ".join(f"{c} {t / 1000:.3f} ms" for c, t in out.most_common())


def host_ms(fn, reps=10):
    """Host time to enqueue one call, from an idle GPU (the median of `reps`)."""
    times = []
    for _ in range(reps):
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append((time.perf_counter() - t0) * 1e3)
    torch.cuda.synchronize()
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--top", type=int, default=12)
    ap.add_argument("--engines", default="eager,ours,ours_cudagraphs,torch_compile")
    ap.add_argument("--dtype", default="float32", choices=["float32", "bfloat16", "float16"])
    ap.add_argument("--train", choices=["fp32", "bf16-autocast"])
    ap.add_argument("--sites", action="store_true",
                    help="--train: also list the copies and fills of one step by input shapes "
                         "and the Python lines that launched them (a generated wrapper's line)")
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "gpt2-lmhead", "llama"],
                    help="inference: bench_gpu.py's models (gpt2: GPT2Model's hidden states)")
    a = ap.parse_args()
    if a.train:
        return train(a)
    import pydynamo
    from bench_gpu import lm_model
    model, ids = lm_model(a.model, False, "cuda", getattr(torch, a.dtype))
    field = "last_hidden_state" if a.model == "gpt2" else "logits"
    engines = {"eager": lambda: model,
               "ours": lambda: pydynamo.optimize(model, backend="codegen"),
               "ours_cudagraphs": lambda: pydynamo.optimize(model, backend="codegen",
                                                            options={"cudagraphs": True}),
               "torch_compile": lambda: torch.compile(model),
               "torch_compile_reduce_overhead": lambda: torch.compile(model, mode="reduce-overhead")}
    with torch.no_grad():
        ref = getattr(model(input_ids=ids, use_cache=False), field)
        for name in a.engines.split(","):
            pydynamo.reset()              # each engine compiles afresh
            m = engines[name]()

            def fwd():
                return getattr(m(input_ids=ids, use_cache=False), field)
            err = ((fwd().float() - ref.float()).norm() / ref.float().norm()).item()
            total, n, by_name = kernel_table(fwd)
            from triton.testing import do_bench
            ms = do_bench(fwd, warmup=50, rep=300, return_mode="median")
            print(f"== {name}: {ms:.3f} ms per forward (do_bench median), {total / 1000:.3f} "
                  f"ms GPU kernel time, {n:.0f} kernels, host {host_ms(fwd):.3f} ms to enqueue "
                  f"one forward, rel. error {err:.1e}", flush=True)
            print("   by kind: " + categories(by_name))
            for k, t in by_name.most_common(a.top):
                print(f"   {t:9.1f} us  {k}")


def train(a):
    from transformers import GPT2Config, GPT2LMHeadModel
    import pydynamo
    cfg = GPT2Config(n_layer=a.layers, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    base = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    autocast = a.train == "bf16-autocast"
    engines = {"eager": lambda m: m,
               "ours": lambda m: pydynamo.optimize(m, backend="codegen"),
               "torch_compile": lambda m: torch.compile(m)}
    for name in a.engines.split(","):
        if name not in engines:
            continue
        pydynamo.reset()
        model = copy.deepcopy(base)
        m = engines[name](model)

        def step():
            with torch.autocast("cuda", torch.bfloat16, enabled=autocast):
                loss = m(input_ids=ids, labels=ids).loss
            loss.backward()
            for p in model.parameters():
                p.grad = None
        step()
        total, n, by_name = kernel_table(step)
        from triton.testing import do_bench
        ms = do_bench(step, warmup=10, rep=200, return_mode="median")
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        resident = torch.cuda.memory_allocated()
        step()
        torch.cuda.synchronize()
        peak = (torch.cuda.max_memory_allocated() - resident) / 2**20
        print(f"== {name} ({a.train}): {ms:.3f} ms per fwd+loss+bwd (do_bench median), "
              f"{total / 1000:.3f} ms GPU kernel time, {n:.0f} kernels, host {host_ms(step):.3f} "
              f"ms to enqueue one, peak {peak:.0f} MiB above resident", flush=True)
        print("   by kind: " + categories(by_name))
        for k, t in by_name.most_common(a.top):
            print(f"   {t:9.1f} us  {k}")
        if a.sites:
            copy_fill_sites(step)
        del m, model


SITE_OPS = ("aten::copy_", "aten::fill_", "aten::zero_", "aten::clone", "aten::contiguous",
            "aten::zeros", "aten::new_zeros", "aten::add_", "aten::index_put_")


def copy_fill_sites(fn, top=25):
    """Copies and fills of one call, by op, input shapes and the innermost Python lines (with
    a compiled graph: the generated wrapper's line), with their GPU time."""
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA], record_shapes=True,
                 with_stack=True) as prof:
        fn()
        torch.cuda.synchronize()
    rows = []
    for e in prof.key_averages(group_by_input_shape=True, group_by_stack_n=3):
        if e.key in SITE_OPS:
            t = getattr(e, "device_time_total", 0) or getattr(e, "cuda_time_total", 0)
            if t > 0:
                rows.append((t, e.count, e.key, str(e.input_shapes)[:80],
                             " <- ".join(x.split("/")[-1] for x in e.stack[:3])))
    rows.sort(reverse=True)
    print(f"   copies and fills ({len(rows)} sites; GPU us, calls, op, shapes, lines):")
    for t, n, k, shapes, where in rows[:top]:
        print(f"   {t:9.1f} us {n:4d}x {k} {shapes} {where}")


if __name__ == "__main__":
    main()

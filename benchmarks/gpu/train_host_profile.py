"""Where the host's time goes in a GPT-2 small training step (forward, loss, backward; batch 8,
seq 256), pydynamo's codegen against torch.compile, on the GPU.

Per engine, after warm-up steps: the step's wall time with a sync at the end, the host time
(from the step's start to the return of `backward()`, no sync: what the Python side takes
to queue the work; when it exceeds the GPU time the step is host-bound), and for pydynamo a
cProfile of N steps (top functions by own time), so the per-launch and per-graph costs can be
read off; with --aten, for pydynamo and torch.compile, torch.profiler's CPU-side table (each
aten op's own host time per step and calls per step), so the two engines' host costs can be
compared op by op.

    python benchmarks/gpu/train_host_profile.py [--dtype bf16-autocast|fp32] [--n 20] [--top 30]
        [--aten] [--engines eager,pydynamo,torch.compile]
"""
import argparse
import contextlib
import cProfile
import io
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402


def build():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    return model, ids


def step_fn(model, ids, autocast):
    def step():
        ctx = torch.autocast("cuda", torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            loss = model(input_ids=ids, labels=ids).loss
        loss.backward()
    return step


def measure(step, model, n):
    walls, hosts = [], []
    for _ in range(n):
        model.zero_grad(set_to_none=True)
        torch.cuda.synchronize()
        t0 = time.perf_counter()
        step()
        t1 = time.perf_counter()
        torch.cuda.synchronize()
        t2 = time.perf_counter()
        hosts.append((t1 - t0) * 1e3)
        walls.append((t2 - t0) * 1e3)
    return statistics.median(walls), statistics.median(hosts)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16-autocast", choices=["bf16-autocast", "fp32"])
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--aten", action="store_true", help="per-op host time (torch.profiler)")
    ap.add_argument("--engines", default="eager,pydynamo,torch.compile")
    a = ap.parse_args()
    import pydynamo
    autocast = a.dtype == "bf16-autocast"
    rows = {}
    for engine in a.engines.split(","):
        model, ids = build()
        if engine == "pydynamo":
            m = pydynamo.optimize(model, backend="codegen")
        elif engine == "torch.compile":
            m = torch.compile(model)
        else:
            m = model
        step = step_fn(m, ids, autocast)
        for _ in range(3):
            model.zero_grad(set_to_none=True)
            step()
        torch.cuda.synchronize()
        rows[engine] = measure(step, model, a.n)
        if engine == "pydynamo":
            prof = cProfile.Profile()
            prof.enable()
            measure(step, model, a.n)
            prof.disable()
            s = io.StringIO()
            pstats.Stats(prof, stream=s).sort_stats("tottime").print_stats(a.top)
            print(f"== cProfile of {a.n} pydynamo steps (fwd+loss+bwd, {a.dtype}), by own time")
            print(s.getvalue())
        if a.aten and engine != "eager":
            aten_table(step, model, engine, a)
        del m, model
        torch.cuda.empty_cache()
    print(f"== {a.dtype}, {torch.cuda.get_device_name()}: median ms per fwd+loss+bwd over {a.n}")
    print(f"{'engine':14} {'wall':>8} {'host':>8}")
    for k, (w, h) in rows.items():
        print(f"{k:14} {w:8.2f} {h:8.2f}")
    if "torch.compile" in rows and "pydynamo" in rows:
        w0 = rows["torch.compile"][0]
        print(f"pydynamo / torch.compile wall: {rows['pydynamo'][0] / w0:.3f}, host: "
              f"{rows['pydynamo'][1] / rows['torch.compile'][1]:.3f}")


def aten_table(step, model, engine, a):
    """Each op's own CPU time per step (torch.profiler, CPU activity only), top a.top."""
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        for _ in range(a.n):
            model.zero_grad(set_to_none=True)
            step()
        torch.cuda.synchronize()
    rows = sorted(prof.key_averages(), key=lambda e: -e.self_cpu_time_total)
    total = sum(e.self_cpu_time_total for e in rows) / a.n / 1e3
    print(f"== {engine} ({a.dtype}): host ops by own CPU time, per step (profiled total "
          f"{total:.2f} ms)")
    for e in rows[:a.top]:
        print(f"   {e.self_cpu_time_total / a.n / 1e3:8.3f} ms {e.count / a.n:7.1f}x  {e.key[:90]}")


if __name__ == "__main__":
    main()

"""Host time of the ways a wrapper can call Llama's products and attention, and where a whole
forward's host time goes beyond its graph (issue 18: Llama 134M bf16 in default mode is
host-bound, and its externs are most of our host time).

    python benchmarks/gpu/extern_host_probe.py [--dtype bfloat16] [--parts ops,sdpa,forward]

  ops      host us per call (enqueue loop, the GPU synchronized after it) of one layer product,
           (8, 256, 768) @ (768, 768)^T as the graph holds it, called as: F.linear on the 3-D
           input (today's line), F.linear on a 2-D input, mm on views made per call, mm on views
           made once, mm into a preallocated `out=`, an allocation then mm `out=`, and the
           wrapper's stride/shape check; rounds interleaved, medians printed;
  sdpa     host us per call and GPU us per call (CUDA events over a back-to-back loop) of causal
           attention on (8, 12, 256, 64), q and k contiguous, v a transposed view of a product
           (the graph's layouts), through F.scaled_dot_product_attention, the backend choice
           alone (`torch._fused_sdp_choice`), and each fused kernel's own entry point;
  forward  the whole forward of pydynamo and torch.compile side by side in interleaved rounds,
           ours split into time inside the compiled graph and outside it (frame, guards,
           output), then torch.profiler's CPU table of five forwards of each engine (counts of
           aten ops and CUDA runtime calls per forward).
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402
from host_budget import per_call_us  # noqa: E402  (this script's folder is on sys.path)


def host_us(fn, n=200):
    """Host us per call to enqueue n calls after 20 untimed ones (host_budget.py's loop)."""
    return per_call_us(fn, n, torch.cuda.synchronize)


def gpu_us(fn, n=200):
    for _ in range(20):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) / n * 1e3


def interleaved(fns, rounds=9, timer=host_us):
    got = {k: [] for k in fns}
    keys = list(fns)
    for r in range(rounds):
        for k in keys[r % len(keys):] + keys[:r % len(keys)]:
            got[k].append(timer(fns[k]))
    return {k: statistics.median(v) for k, v in got.items()}


def part_ops(dt):
    dev = "cuda"
    x3 = torch.randn(8, 256, 768, device=dev, dtype=dt)
    w = torch.randn(768, 768, device=dev, dtype=dt)
    x2, wt = x3.view(2048, 768), w.t()
    o2 = torch.empty(2048, 768, device=dev, dtype=dt)
    empty = torch.empty(0, device=dev, dtype=dt).new_empty_strided
    lin, mm = torch._C._nn.linear, torch.mm

    def checked():
        r = lin(x3, w)
        return r if r.stride() == (196608, 768, 1) and r.shape == (8, 256, 768) else None
    fns = {
        "linear 3-D (today)": lambda: lin(x3, w),
        "linear 3-D + layout check (today's line)": checked,
        "linear 2-D": lambda: lin(x2, w),
        "mm, views per call": lambda: mm(x3.view(2048, 768), w.t()),
        "mm, views once": lambda: mm(x2, wt),
        "mm out=, preallocated": lambda: mm(x2, wt, out=o2),
        "alloc + mm out=": lambda: mm(x2, wt, out=empty((2048, 768), (768, 1))),
        "alloc alone": lambda: empty((2048, 768), (768, 1)),
        "w.t() alone": lambda: w.t(),
        "x.view() alone": lambda: x3.view(2048, 768),
        "as_strided alone": lambda: torch.as_strided(x3, (2048, 768), (768, 1), 0),
    }
    res = interleaved(fns)
    ref = res["linear 3-D + layout check (today's line)"]
    print(f"\n== one product (8, 256, 768) @ (768, 768)^T {dt}: host us per call, median of 9 "
          f"interleaved rounds of 200 calls")
    for k, v in res.items():
        print(f"  {k:<42} {v:7.2f} us   ({ref - v:+6.2f} us against today's line)")
    print(f"  GPU us per product: {gpu_us(lambda: mm(x2, wt, out=o2)):.2f}")


def part_sdpa(dt):
    dev = "cuda"
    q = torch.randn(8, 12, 256, 64, device=dev, dtype=dt)
    k = torch.randn(8, 12, 256, 64, device=dev, dtype=dt)
    v = torch.randn(8, 256, 12, 64, device=dev, dtype=dt).transpose(1, 2)
    s = 0.125
    ref = F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=s)
    choice = torch._fused_sdp_choice(q, k, v, None, 0.0, True, scale=s)
    from torch.nn.attention import SDPBackend
    print(f"\n== causal attention (8, 12, 256, 64) {dt}: F.sdpa's choice {choice} "
          f"({[n for n, b in SDPBackend.__members__.items() if int(b) == choice]})")
    fns = {
        "F.scaled_dot_product_attention": lambda: F.scaled_dot_product_attention(
            q, k, v, is_causal=True, scale=s),
        "_fused_sdp_choice alone": lambda: torch._fused_sdp_choice(q, k, v, None, 0.0, True,
                                                                     scale=s),
        "flash": lambda: torch._scaled_dot_product_flash_attention(q, k, v, 0.0, True, False,
                                                                   scale=s),
        "efficient": lambda: torch._scaled_dot_product_efficient_attention(
            q, k, v, None, False, 0.0, True, scale=s),
        "cudnn": lambda: torch._scaled_dot_product_cudnn_attention(
            q, k, v, None, False, 0.0, True, False, scale=s),
    }
    ok = {}
    for name, f in fns.items():
        try:
            out = f()
            if not isinstance(out, int):
                out = out if isinstance(out, torch.Tensor) else out[0]
                err = ((out.float() - ref.float()).abs().max() / ref.float().abs().max()).item()
                print(f"  {name:<32} runs; max rel diff against F.sdpa {err:.2e}, "
                      f"stride {tuple(out.stride())}")
            ok[name] = f
        except Exception as e:      # a kernel this card or build does not have
            print(f"  {name:<32} not available: {type(e).__name__}: {str(e)[:120]}")
    host = interleaved(ok)
    dev_t = interleaved({k: f for k, f in ok.items() if "choice" not in k}, rounds=5,
                        timer=gpu_us)
    for name in ok:
        g = f"{dev_t[name]:8.2f}" if name in dev_t else "       -"
        print(f"  {name:<32} host {host[name]:7.2f} us  GPU {g} us")


def part_forward(dt):
    import pydynamo
    from bench_gpu import lm_model
    from codegen import pipeline
    from torch.profiler import ProfilerActivity, profile
    inside = [0.0]
    build = pipeline.build

    def timing(*args, **kw):
        call = build(*args, **kw)

        def timed(*xs):
            t0 = time.perf_counter()
            try:
                return call(*xs)
            finally:
                inside[0] += time.perf_counter() - t0
        return timed
    pipeline.build = timing
    model, ids = lm_model("llama", False, "cuda", dt)
    ours = pydynamo.optimize(model, backend="codegen")
    tc = torch.compile(model)
    fns = {"ours": lambda: ours(input_ids=ids, use_cache=False).logits,
           "tc": lambda: tc(input_ids=ids, use_cache=False).logits}
    print(f"\n== Llama 134M {dt} default mode, whole forwards")
    with torch.no_grad():
        for f in fns.values():
            for _ in range(5):
                f()
        rounds = {k: [] for k in fns}
        split = []
        for r in range(9):
            for k in (["ours", "tc"] if r % 2 == 0 else ["tc", "ours"]):
                inside[0] = 0.0
                rounds[k].append(host_us(fns[k], 30))
                if k == "ours":
                    split.append(inside[0] / 50 * 1e6)     # 20 warm-up + 30 timed calls
        o, t = statistics.median(rounds["ours"]), statistics.median(rounds["tc"])
        print(f"  host us per forward (enqueue, median of 9 rounds): ours {o:.1f}, "
              f"torch.compile {t:.1f}, speed {t / o:.3f}x; ours inside the graph "
              f"{statistics.median(split):.1f}, outside {o - statistics.median(split):.1f}")
        for k, f in fns.items():
            with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as p:
                for _ in range(5):
                    f()
                torch.cuda.synchronize()
            print(f"\n  {k}: CPU events of five forwards (counts over five)")
            print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--parts", default="ops,sdpa,forward")
    a = ap.parse_args()
    dt = getattr(torch, a.dtype)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    for part in a.parts.split(","):
        {"ops": part_ops, "sdpa": part_sdpa, "forward": part_forward}[part](dt)
        sys.stdout.flush()


if __name__ == "__main__":
    main()

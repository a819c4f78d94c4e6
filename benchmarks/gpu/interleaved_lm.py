"""LM forwards of pydynamo and torch.compile timed in interleaved rounds, for the host-bound lines.

    python benchmarks/gpu/interleaved_lm.py [--model llama] [--dtype bfloat16] [--rounds 15]
                                            [--modes default,reduce-overhead]

bench_gpu.py times each engine in one block of seconds, one after the other. Where a forward is
host-bound (bf16 default mode: ~1.2 ms of GPU work behind 3-5 ms of host time), the lent host's
speed drifts by tens of percent between such blocks and between processes (session 21,
the same Llama forward in bench_gpu.py: torch.compile's default mode 3.07, 3.65 and 4.50 ms in
three device calls, eager's synchronized loop 8.5 to 16.9 ms), so one block against another
is not a comparison. Here every round times each engine's `--calls` forwards (wall clock, the
GPU synchronized at the end), the engines' order rotating each round; medians over the rounds
and their ratio are printed (speed above 1: pydynamo faster), with the spread of the per-round
ratios (min / max), which is the figure to read against noise.
"""
import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="llama", choices=["gpt2", "gpt2-lmhead", "llama", "bert-mlm"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--calls", type=int, default=20)
    ap.add_argument("--modes", default="default,reduce-overhead")
    a = ap.parse_args()
    import pydynamo
    from bench_gpu import lm_model
    model, ids = lm_model(a.model, False, "cuda", getattr(torch, a.dtype))
    kw = {} if a.model == "bert-mlm" else {"use_cache": False}
    print(torch.cuda.get_device_name(), torch.__version__, a.model, a.dtype, flush=True)
    with torch.no_grad():
        for mode in a.modes.split(","):
            m_mode = None if mode == "default" else mode
            engines = {"ours": pydynamo.optimize(model, backend="codegen", mode=m_mode),
                       "tc": torch.compile(model, mode=m_mode)}
            fns = {k: (lambda m: lambda: m(input_ids=ids, **kw).logits if a.model != "gpt2"
                       else m(input_ids=ids, **kw).last_hidden_state)(m)
                   for k, m in engines.items()}
            for f in fns.values():
                for _ in range(5):
                    f()
            torch.cuda.synchronize()
            times = {k: [] for k in fns}
            names = list(fns)
            for r in range(a.rounds):
                for k in names[r % 2:] + names[:r % 2]:
                    f = fns[k]
                    f()
                    torch.cuda.synchronize()
                    t0 = time.perf_counter()
                    for _ in range(a.calls):
                        f()
                    torch.cuda.synchronize()
                    times[k].append((time.perf_counter() - t0) / a.calls * 1e3)
            ours, tc = statistics.median(times["ours"]), statistics.median(times["tc"])
            ratios = [t / o for o, t in zip(times["ours"], times["tc"])]
            print(f"{mode:16s} ours {ours:7.3f} ms  torch.compile {tc:7.3f} ms  speed {tc / ours:.3f}x"
                  f"  (per-round ratio min {min(ratios):.3f} max {max(ratios):.3f}, "
                  f"{a.rounds} rounds of {a.calls})", flush=True)
            pydynamo.reset()
            torch._dynamo.reset()


if __name__ == "__main__":
    main()

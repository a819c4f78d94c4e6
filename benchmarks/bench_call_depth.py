"""Per-call time of a compiled model against how deep the caller's stack is: eager vs
pydynamo.optimize vs torch.compile (backend "eager" for both, so the figure is the frame path:
hook, guards, the graph run by torch, the rebuilt output).

    python benchmarks/bench_call_depth.py [--depths 0-40] [--iters 100] [--smoke]

The model is transformers' GPT-2 (12 layers, hidden 64, batch 2, sequence 16). CPython frees a
data-stack chunk when the frame at its base is popped, so a call whose frames straddle a chunk
end maps and unmaps memory on every call, at some caller depths only; pydynamo runs compiled
frames in a chunk of their own (csrc/frame_compat.c), so its worst depth should stay near its
median. The table prints the median and the worst depth for each engine (each engine in its
own process).
"""
from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time

ENGINES = ("eager", "pydynamo", "torch.compile")


def measure(engine, depths, iters):
    import torch
    from transformers import GPT2Config, GPT2Model
    import transformers
    transformers.logging.set_verbosity_error()
    cfg = GPT2Config(n_layer=12, n_embd=64, n_head=4, vocab_size=100, n_positions=64)
    torch.manual_seed(0)
    model = GPT2Model(cfg).eval()
    ids = torch.randint(0, 100, (2, 16))
    if engine == "pydynamo":
        import pydynamo
        m = pydynamo.optimize(model, backend="eager")
    elif engine == "torch.compile":
        m = torch.compile(model, backend="eager")
    else:
        m = model

    def loop(n):
        t0 = time.perf_counter()
        for _ in range(n):
            m(input_ids=ids)
        return (time.perf_counter() - t0) / n * 1e6

    def at_depth(k, n):
        return loop(n) if k == 0 else at_depth(k - 1, n)

    out = {}
    with torch.no_grad():
        for _ in range(3):
            m(input_ids=ids)
        for k in depths:
            at_depth(k, 3)
            out[k] = min(at_depth(k, iters) for _ in range(2))
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--depths", default="0-40")
    ap.add_argument("--iters", type=int, default=100)
    ap.add_argument("--smoke", action="store_true")
    ap.add_argument("--engine", help=argparse.SUPPRESS)
    a = ap.parse_args()
    lo, hi = (int(x) for x in a.depths.split("-"))
    depths = list(range(lo, hi + 1))
    iters = 3 if a.smoke else a.iters
    if a.engine:
        print(json.dumps(measure(a.engine, depths, iters)))
        return
    results = {}
    for e in ENGINES:
        p = subprocess.run([sys.executable, __file__, "--engine", e, "--depths", a.depths,
                            "--iters", str(iters)], capture_output=True, text=True)
        if p.returncode != 0:
            print(f"{e}: failed\n{p.stderr[-2000:]}")
            continue
        results[e] = {int(k): v for k, v in json.loads(p.stdout.strip().splitlines()[-1]).items()}
    print(f"Python {sys.version.split()[0]}: µs per call of GPT-2 (12 layers, hidden 64) by "
          f"caller depth {lo}..{hi}")
    print(f"{'engine':<15} {'median':>9} {'worst':>9} {'worst depth':>12}")
    for e, r in results.items():
        worst = max(r, key=r.get)
        print(f"{e:<15} {statistics.median(r.values()):9.1f} {r[worst]:9.1f} {worst:>12}")


if __name__ == "__main__":
    main()

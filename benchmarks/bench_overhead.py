"""Per-call overhead of a cache hit: eager vs pydynamo.optimize vs torch.compile (backend "eager").

    python benchmarks/bench_overhead.py [--iters N] [--repeat R] [--smoke]

Workloads: `x + 1` on a 2-element tensor, and a module with 20 parameters (10 Linear(2, 2)
layers). Each engine runs in its own process (both install a frame hook); the figure is the best
of R repeats of N calls, in µs per call, and "overhead" subtracts eager's time. Time it on a quiet
machine; --smoke runs a few iterations only to check that the script works.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

ENGINES = ("eager", "pydynamo", "torch.compile")


def workloads():
    import torch

    def add_one(x):
        return x + 1

    class TwentyParams(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = torch.nn.ModuleList([torch.nn.Linear(2, 2) for _ in range(10)])

        def forward(self, x):
            for layer in self.layers:
                x = layer(x)
            return x

    m = TwentyParams()
    assert sum(1 for _ in m.parameters()) == 20
    return {"x + 1": (add_one, (torch.randn(2),)), "module, 20 params": (m, (torch.randn(2),))}


def run_engine(engine: str, iters: int, repeat: int) -> dict:
    import torch
    out = {}
    for name, (fn, args) in workloads().items():
        if engine == "pydynamo":
            import pydynamo
            fn = pydynamo.optimize(fn, backend="eager")
        elif engine == "torch.compile":
            fn = torch.compile(fn, backend="eager")
        with torch.no_grad():
            for _ in range(10):
                fn(*args)  # compile + warm up
            best = float("inf")
            for _ in range(repeat):
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn(*args)
                best = min(best, (time.perf_counter() - t0) / iters)
        out[name] = best * 1e6
    return out


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--iters", type=int, default=20000)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--smoke", action="store_true")
    p.add_argument("--engine", choices=ENGINES)
    a = p.parse_args(argv)
    if a.smoke:
        a.iters, a.repeat = 50, 1
    if a.engine:
        print(json.dumps(run_engine(a.engine, a.iters, a.repeat)))
        return 0
    results = {}
    for engine in ENGINES:
        cmd = [sys.executable, os.path.abspath(__file__), "--engine", engine, "--iters", str(a.iters),
               "--repeat", str(a.repeat)]
        proc = subprocess.run(cmd, capture_output=True, text=True, check=True)
        results[engine] = json.loads(proc.stdout.strip().splitlines()[-1])
    names = list(results["eager"])
    print(f"{'workload':<20}" + "".join(f"{e:>16}" for e in ENGINES) + f"{'pyd overhead':>16}{'tc overhead':>16}")
    for n in names:
        row = [results[e][n] for e in ENGINES]
        print(f"{n:<20}" + "".join(f"{v:>14.2f}µs" for v in row) +
              f"{row[1] - row[0]:>14.2f}µs{row[2] - row[0]:>14.2f}µs")
    return 0


if __name__ == "__main__":
    sys.exit(main())

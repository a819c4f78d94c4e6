"""The long view-chain sweep (issue 14): random view chains on strided, offset inputs, compiled
and compared with eager call by call (tests/codegen/view_chains.py, tests/differential.py).

    TRITON_INTERPRET=1 python scripts/view_chain_sweep.py --n 5000 [--start 0]
        [--configs codegen:None,codegen:True,codegen:False,eager:None] [--triton-every 10]
        [--device cuda]   (on a GPU machine: codegen takes its Triton path; use --triton-every 0)

Each chain runs under every config (backend:dynamic), three calls with changing shapes; the
Triton printer (through the interpreter: TRITON_INTERPRET=1) runs every `--triton-every`-th
chain. Prints each failing chain as a pasteable repro, then the counts; exit status 1 when any
result was wrong or pydynamo raised where eager returned. Layout differences of fresh (non-view)
outputs are counted apart (issue 14 item 6), not as failures.
"""
from __future__ import annotations

import argparse
import collections
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "tests", "codegen"))

import view_chains  # noqa: E402


def _config(text):
    backend, dyn = text.split(":")
    return backend, {"None": None, "True": True, "False": False}[dyn]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=500)
    ap.add_argument("--start", type=int, default=0)
    ap.add_argument("--configs", default="codegen:None,codegen:True,codegen:False,eager:None")
    ap.add_argument("--triton-every", type=int, default=10, help="0: never")
    ap.add_argument("--device", default="cpu", help="where inputs live (cuda: codegen's GPU path)")
    args = ap.parse_args(argv)
    configs = [_config(c) for c in args.configs.split(",")]
    counts: collections.Counter = collections.Counter()
    bad = 0
    t0 = time.time()
    for seed in range(args.start, args.start + args.n):
        chain = view_chains.generate(seed)
        runs = list(configs)
        if args.triton_every and seed % args.triton_every == 0:
            runs.append(("triton", None))
        for backend, dynamic in runs:
            res = view_chains.check(chain, backend, dynamic, device=args.device)
            counts[f"{backend}:{dynamic} runs"] += 1
            counts[f"{backend}:{dynamic} calls"] += res.calls
            counts["fallback warnings"] += res.fallbacks
            for kind in res.kinds():
                counts[f"{backend}:{dynamic} {kind}"] += 1
            if not res.ok:
                bad += 1
                print(f"--- seed {seed} {backend} dynamic={dynamic}\n{chain.repro(backend, dynamic)}"
                      f"{res.report(('wrong', 'error'))}\n", flush=True)
    print(f"{args.n} chains (seeds {args.start}..{args.start + args.n - 1}) in "
          f"{time.time() - t0:.0f} s; failing runs: {bad}")
    for k in sorted(counts):
        print(f"  {k}: {counts[k]}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

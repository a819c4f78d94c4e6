"""Long differential-fuzzing sweep (issue 14): generated programs under pydynamo vs eager.

    python scripts/fuzz_sweep.py --programs 5000 --seed 0 [--backends eager,codegen[,triton]]
                                 [--dynamic none,true[,false]] [--jobs 2] --out results.json
                                 [--holding TEXT]   # only programs whose source holds TEXT

Programs come from tests/fuzz/program_gen.py (program i has seed `--seed + i`, the same seeds as
the CI test tests/fuzz/test_fuzz.py for the first 300), each run for 3 calls with changing sizes
per (backend, dynamic) and compared with tests/differential.py. Prints a summary (programs,
calls, wrong results, pydynamo exceptions where eager works, layout differences, identity
differences, graph breaks, eager fallbacks) and, per failure class, one minimized repro
(program source + inputs, pasteable into tests/fuzz/test_fuzz_regressions.py). Workers are
separate processes (each installs its own frame hook); TRITON_INTERPRET=1 is set for them when
no GPU is present. Exit status 1 when any program was wrong or raised where eager works.
"""
from __future__ import annotations

import argparse
import collections
import json
import multiprocessing as mp
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FUZZ = os.path.join(REPO, "tests", "fuzz")

DYN = {"none": None, "true": True, "false": False}


def _setup():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    sys.path[:0] = [FUZZ, REPO]


def _minimize(task):
    _setup()
    import fuzz_runner as fr
    import program_gen as pg
    seed, backend, dyn, sig, budget = task
    p = pg.generate(seed)
    q = fr.minimize(p, backend, dyn, sig, budget_s=budget)
    o = fr.run_program(q, backend, dyn)
    return sig, {"seed": seed, "backend": backend, "dynamic": dyn, "repro": q.repro(backend, dyn),
                 "report": o.result.report() if o.failed else "(minimized program no longer fails)"}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--programs", type=int, default=5000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--backends", default="eager,codegen")
    ap.add_argument("--dynamic", default="none,true")
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--chunk", type=int, default=20)
    ap.add_argument("--minimize-budget", type=float, default=60.0, help="seconds per failure class")
    ap.add_argument("--out", default="")
    ap.add_argument("--holding", default="",
                    help="run only the programs whose source holds this text (e.g. "
                         "scaled_dot_product_attention: the attention tails)")
    ns = ap.parse_args(argv)
    configs = [(b, d) for b in ns.backends.split(",") for d in ns.dynamic.split(",")
               if not (b == "triton" and d == "false")]
    for _, d in configs:
        if d not in DYN:
            ap.error(f"--dynamic takes none,true,false; got {d}")
    tasks = [(lo, min(lo + ns.chunk, ns.seed + ns.programs), [(b, DYN[d]) for b, d in configs],
              ns.holding) for lo in range(ns.seed, ns.seed + ns.programs, ns.chunk)]
    t0 = time.time()
    _setup()
    import fuzz_runner as fr

    def progress(rows):
        bad = sum(r.get("failed", False) for r in rows)
        print(f"[{time.time() - t0:7.0f}s] {len(rows)} runs, {bad} failing", flush=True)
        if ns.out:   # an interrupted sweep keeps what it ran
            with open(ns.out + ".partial", "w") as f:
                json.dump(rows, f)
    rows = fr.run_pool(tasks, ns.jobs, progress)
    runs = [r for r in rows if "backend" in r]
    classes = collections.OrderedDict()
    for r in sorted(runs, key=lambda r: r["seed"]):
        if r["failed"]:
            classes.setdefault(r["signature"], []).append(r)
    with mp.get_context("spawn").Pool(max(1, ns.jobs)) as pool:
        mins = dict(pool.map(_minimize, [(items[0]["seed"], items[0]["backend"], items[0]["dynamic"], sig,
                                          ns.minimize_budget) for sig, items in classes.items()]))
    summary = collections.OrderedDict()
    for backend, dyn in configs:
        rs = [r for r in runs if r["backend"] == backend and r["dynamic"] == DYN[dyn]]
        summary[f"{backend}/dynamic={dyn}"] = {
            "programs": len(rs), "calls": sum(r["calls"] for r in rs),
            "wrong": sum("wrong" in r["kinds"] for r in rs),
            "error_where_eager_works_or_other_type": sum("error" in r["kinds"] for r in rs),
            "harness_crash": sum(r["failed"] and r["signature"].startswith("harness") for r in rs),
            "layout": sum("layout" in r["kinds"] for r in rs),
            "identity": sum("identity" in r["kinds"] for r in rs),
            "with_graph_breaks": sum(r["graph_breaks"] > 0 for r in rs),
            "with_fallbacks": sum(r["fallbacks"] > 0 for r in rs),
            "eager_raised_calls": sum(r["eager_raised"] for r in rs),
            "seconds": round(sum(r["seconds"] for r in rs), 1)}
    print(f"\n{ns.programs} programs from seed {ns.seed}, {time.time() - t0:.0f} s wall, {ns.jobs} job(s)")
    for k, v in summary.items():
        print(f"  {k:24s} " + "  ".join(f"{a}={b}" for a, b in v.items()))
    print(f"\n{len(classes)} failure class(es)")
    for sig, items in classes.items():
        m = mins[sig]
        print(f"\n=== {sig}\n    {len(items)} run(s): "
              + ", ".join(f"seed {r['seed']} {r['backend']}/{r['dynamic']}" for r in items[:10]))
        print(m["report"])
        print(m["repro"])
    gen_errors = [r for r in rows if "gen_error" in r]
    if gen_errors:
        print(f"{len(gen_errors)} seed(s) without a valid program: {[r['seed'] for r in gen_errors[:10]]}")
    if ns.out:
        with open(ns.out, "w") as f:
            json.dump({"args": vars(ns), "summary": summary,
                       "classes": {s: {"runs": [(r["seed"], r["backend"], r["dynamic"]) for r in items],
                                       "first_report": items[0]["report"], "minimized": mins[s]}
                                   for s, items in classes.items()},
                       "runs": runs}, f, indent=1)
    return 1 if classes else 0


if __name__ == "__main__":
    sys.exit(main())

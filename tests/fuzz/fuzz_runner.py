"""Run generated programs (program_gen.py) under pydynamo against eager, classify what differs, and
minimize a failing program to the fewest statements that still fail the same way.

Shared by the CI test (test_fuzz.py) and the long sweep (scripts/fuzz_sweep.py). A configuration
is (backend, dynamic): backend "eager", "codegen" (C++ kernels) or "triton" (codegen's Triton
kernels; on CPU through TRITON_INTERPRET=1, which must be set before triton is imported).

Failure classes (what the CI test fails on): "wrong" (a value, an in-place update of an input or
module state, or the aliasing of an output differs from eager) and "error" (pydynamo raised where
eager returned, or raised another type). "layout" (dense output strides) and "identity" are
counted, not failed.
"""
from __future__ import annotations

import contextlib
import dataclasses
import io
import os
import sys
import time
import warnings
from typing import Optional

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))   # tests/: the shared differential helper
sys.path.insert(0, HERE)

import differential  # noqa: E402
import program_gen as pg  # noqa: E402

CONFIGS = [("eager", None), ("eager", True), ("codegen", None), ("codegen", True)]


@dataclasses.dataclass
class Outcome:
    seed: int
    backend: str
    dynamic: Optional[bool]
    result: differential.Result
    seconds: float
    crashed: str = ""     # the harness itself failed (building the program, ...)

    @property
    def failed(self) -> bool:
        return bool(self.crashed) or not self.result.ok

    def signature(self) -> str:
        """Coarse failure class: kind and the first words of the first hard problem."""
        if self.crashed:
            return "harness: " + self.crashed.splitlines()[0][:80]
        for kind, _, text in self.result.problems:
            if kind in differential.HARD:
                return f"{kind}: {_class_text(text)}"
        return ""


def _class_text(text: str) -> str:
    import re
    text = text.splitlines()[0]
    text = re.sub(r"at \d+/\d+ elements.*", "", text)
    text = re.sub(r"\[[^\]]*\]|\d+(\.\d+)?", "#", text)
    return text[:90]


def run_program(p: pg.Program, backend: str, dynamic: Optional[bool]) -> Outcome:
    t0 = time.perf_counter()
    try:
        # quiet: torch.fx prints the generated code of a graph that raises (a deliberate
        # out-of-range index), and eager's own warnings are not pydynamo's (those are recorded)
        with contextlib.redirect_stderr(io.StringIO()), warnings.catch_warnings():
            warnings.simplefilter("ignore")
            fn = p.build()
            res = differential.run_differential(fn, p.makers(), backend=backend, dynamic=dynamic)
    except Exception as e:  # noqa: BLE001  the harness must report, not die
        import traceback
        return Outcome(p.seed, backend, dynamic, differential.Result(), time.perf_counter() - t0,
                       crashed=f"{type(e).__name__}: {e}\n{traceback.format_exc()[-1500:]}")
    return Outcome(p.seed, backend, dynamic, res, time.perf_counter() - t0)


def run_seeds(task: tuple) -> list:
    """Run programs of seeds [lo, hi) under each (backend, dynamic) of `configs`: one plain dict
    per (program, config), picklable (a process pool's unit of work: the CI test and the sweep).
    An optional fourth item of `task` is a text: only programs whose source holds it run."""
    lo, hi, configs = task[:3]
    holding = task[3] if len(task) > 3 else None
    os.environ.setdefault("TRITON_INTERPRET", "1")
    rows = []
    for seed in range(lo, hi):
        try:
            p = pg.generate(seed)
        except Exception as e:  # noqa: BLE001
            rows.append({"seed": seed, "gen_error": f"{type(e).__name__}: {e}"})
            continue
        if holding and holding not in p.source():
            continue
        for backend, dyn in configs:
            o = run_program(p, backend, dyn)
            r = o.result
            rows.append({"seed": seed, "backend": backend, "dynamic": dyn, "calls": r.calls,
                         "seconds": round(o.seconds, 3), "failed": o.failed, "signature": o.signature(),
                         "kinds": sorted(r.kinds()), "graph_breaks": r.graph_breaks, "fallbacks": r.fallbacks,
                         "eager_raised": r.eager_raised, "report": (o.crashed or r.report())[:4000],
                         "layout": [t for k, _, t in r.problems if k == "layout"][:3]})
    return rows


def run_pool(tasks: list, jobs: int, progress=None) -> list:
    """run_seeds over `tasks` in `jobs` fresh processes (each installs its own frame hook)."""
    import multiprocessing as mp
    rows = []
    if jobs <= 1:
        for t in tasks:
            rows += run_seeds(t)
            if progress:
                progress(rows)
        return rows
    with mp.get_context("spawn").Pool(jobs, initializer=_worker_init, maxtasksperchild=10) as pool:
        for part in pool.imap_unordered(run_seeds, tasks):
            rows += part
            if progress:
                progress(rows)
    return rows


def _worker_init():
    os.environ.setdefault("TRITON_INTERPRET", "1")
    for d in (HERE, os.path.dirname(HERE)):
        if d not in sys.path:
            sys.path.insert(0, d)


def minimize(p: pg.Program, backend: str, dynamic: Optional[bool], signature: str,
             budget_s: float = 60.0) -> pg.Program:
    """Drop body units and returned values while the program still fails with `signature`."""
    t0 = time.perf_counter()

    def still(q: pg.Program) -> bool:
        if time.perf_counter() - t0 > budget_s or not pg.runs_eagerly(q):
            return False
        o = run_program(q, backend, dynamic)
        return o.failed and o.signature() == signature

    changed = True
    while changed and time.perf_counter() - t0 < budget_s:
        changed = False
        for i in reversed(range(len(p.units))):
            q = p.without(i)
            if still(q):
                p, changed = q, True
        q = p.without_unused_params()
        if q.params != p.params and still(q):
            p, changed = q, True
        if len(p.returns) > 1:
            for i in range(len(p.returns)):
                q = p.with_returns([p.returns[i]], "tuple")
                if still(q):
                    p, changed = q, True
                    break
    return p

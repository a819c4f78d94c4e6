"""Differential fuzzing in CI (issue 14): generated programs (program_gen.py, fixed seeds 0..N-1)
under pydynamo vs eager, compared call by call with tests/differential.py (outputs, inputs after
the call, module state, aliasing, exception types; layout counted, not failed).

Per program: 3 calls with changing sizes under
  * backend eager, dynamic=None and dynamic=True (every program);
  * codegen's C++ kernels, dynamic=None for even seeds and dynamic=True for odd ones (each graph
    costs a C++ compile, so each program gets one codegen setting; the sweep runs both);
  * codegen's Triton kernels (through the interpreter on CPU) for the first few programs.
Fails on any wrong value, and on any pydynamo exception where eager returns (or another exception
type where eager raises), printing a minimized repro per failure class; each becomes a named
test in test_fuzz_regressions.py. The long sweep (5000 programs, every setting) is
scripts/fuzz_sweep.py.

The runs go through a pool of fresh processes (fuzz_runner.run_pool) once per session; the tests
then read the rows. Environment: PYDYNAMO_FUZZ_PROGRAMS (300), PYDYNAMO_FUZZ_CODEGEN (300),
PYDYNAMO_FUZZ_TRITON (20), PYDYNAMO_FUZZ_JOBS (processes; default min(4, cores)).
"""
from __future__ import annotations

import os
import sys
import time

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before codegen imports triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz_runner as fr  # noqa: E402
import program_gen as pg  # noqa: E402

N_PROGRAMS = int(os.environ.get("PYDYNAMO_FUZZ_PROGRAMS", "300"))
N_CODEGEN = int(os.environ.get("PYDYNAMO_FUZZ_CODEGEN", "300"))
N_TRITON = int(os.environ.get("PYDYNAMO_FUZZ_TRITON", "20"))
JOBS = int(os.environ.get("PYDYNAMO_FUZZ_JOBS", str(min(4, os.cpu_count() or 1))))
CHUNK = 10
MAX_REPORTED = 2        # minimized repros per failure class in one test's message


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
        return True
    except ImportError:
        return False


def _configs(seed: int) -> list:
    out = [("eager", None), ("eager", True)] if seed < N_PROGRAMS else []
    if seed < N_CODEGEN:
        out.append(("codegen", None if seed % 2 == 0 else True))
    if seed < N_TRITON and _triton_available():
        out.append(("triton", None))
    return out


@pytest.fixture(scope="session")
def fuzz_rows():
    """Every row of the CI sweep, by backend."""
    tasks = _regroup([(s, s + 1, _configs(s)) for s in range(max(N_PROGRAMS, N_CODEGEN, N_TRITON))])
    t0 = time.perf_counter()
    rows = fr.run_pool(tasks, JOBS)
    print(f"\nfuzz: {len(rows)} program runs in {time.perf_counter() - t0:.0f} s with {JOBS} process(es)")
    return rows


def _regroup(tasks: list) -> list:
    """Consecutive seeds with the same configs in one task of up to CHUNK seeds."""
    out = []
    for lo, hi, cfg in tasks:
        if out and out[-1][2] == cfg and out[-1][1] == lo and out[-1][1] - out[-1][0] < CHUNK:
            out[-1] = (out[-1][0], hi, cfg)
        else:
            out.append((lo, hi, cfg))
    return out


@pytest.mark.parametrize("backend", ["eager", "codegen", "triton"])
def test_fuzz_programs_match_eager(fuzz_rows, backend):
    if backend == "triton" and not _triton_available():
        pytest.skip("triton is not installed")
    rows = [r for r in fuzz_rows if r.get("backend") == backend]
    gen_errors = [r for r in fuzz_rows if "gen_error" in r]
    assert not gen_errors, f"generator failed for seeds {[r['seed'] for r in gen_errors]}"
    assert rows or not (N_PROGRAMS if backend == "eager" else N_CODEGEN if backend == "codegen" else N_TRITON)
    classes: dict = {}
    for r in rows:
        if r["failed"]:
            classes.setdefault(r["signature"], []).append(r)
    if not classes:
        return
    msg = [f"{sum(len(v) for v in classes.values())} of {len(rows)} {backend} runs differ from eager, "
           f"{len(classes)} class(es):"]
    for n, (sig, items) in enumerate(classes.items()):
        msg.append(f"\n=== {sig}  ({len(items)} run(s): "
                   + ", ".join(f"seed {r['seed']} dynamic={r['dynamic']}" for r in items[:8]) + ")")
        for r in items[:MAX_REPORTED if len(classes) < 4 else 1]:
            p = pg.generate(r["seed"])
            q = fr.minimize(p, backend, r["dynamic"], sig, budget_s=20 if n < 5 else 0)
            o = fr.run_program(q, backend, r["dynamic"])
            msg.append(o.result.report() if o.failed else r["report"])
            msg.append(q.repro(backend, r["dynamic"]) if o.failed else p.repro(backend, r["dynamic"]))
    pytest.fail("\n".join(msg), pytrace=False)

"""Differential fuzzing in CI (issue 14): generated programs (program_gen.py, fixed seeds) under
pydynamo vs eager, compared call by call with tests/differential.py (outputs, inputs after the
call, module state, aliasing; layout counted, not failed).

Per program: 3 calls with changing sizes, under backend eager and codegen (C++), each with
dynamic=None and dynamic=True; a smaller subset under codegen's Triton kernels (through the
interpreter on CPU). Fails on any wrong value or any pydynamo exception where eager returns (or
another exception type where eager raises), printing a minimized repro per failure class; those
become named tests in test_fuzz_regressions.py. The long sweep is scripts/fuzz_sweep.py.

Sizes (override with the environment): PYDYNAMO_FUZZ_PROGRAMS (300), PYDYNAMO_FUZZ_CODEGEN
(programs also run under codegen, 300), PYDYNAMO_FUZZ_TRITON (30). Programs run in chunks, one
test per (chunk, backend), so a failure names its neighbourhood.
"""
from __future__ import annotations

import os
import sys

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")   # before codegen imports triton

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import fuzz_runner as fr  # noqa: E402
import program_gen as pg  # noqa: E402

N_PROGRAMS = int(os.environ.get("PYDYNAMO_FUZZ_PROGRAMS", "300"))
N_CODEGEN = int(os.environ.get("PYDYNAMO_FUZZ_CODEGEN", "300"))
N_TRITON = int(os.environ.get("PYDYNAMO_FUZZ_TRITON", "30"))
CHUNK = 50
MAX_REPORTED = 3        # minimized repros per failure class in one test's message


def _chunks(n: int, backend: str) -> list:
    return [pytest.param(backend, lo, min(lo + CHUNK, n), id=f"{backend}-{lo}-{min(lo + CHUNK, n)}")
            for lo in range(0, n, CHUNK)]


_PROGRAMS: dict = {}


def _program(seed: int) -> pg.Program:
    if seed not in _PROGRAMS:
        _PROGRAMS[seed] = pg.generate(seed)
    return _PROGRAMS[seed]


def _triton_available() -> bool:
    try:
        import triton  # noqa: F401
        return True
    except ImportError:
        return False


@pytest.mark.parametrize("backend,lo,hi", _chunks(N_PROGRAMS, "eager") + _chunks(N_CODEGEN, "codegen")
                         + _chunks(N_TRITON, "triton"))
def test_fuzz_programs_match_eager(backend, lo, hi):
    if backend == "triton" and not _triton_available():
        pytest.skip("triton is not installed")
    dynamics = (None,) if backend == "triton" else (None, True)
    classes: dict = {}
    for seed in range(lo, hi):
        p = _program(seed)
        for dynamic in dynamics:
            o = fr.run_program(p, backend, dynamic)
            if o.failed:
                classes.setdefault(o.signature(), []).append((p, dynamic, o))
    if not classes:
        return
    msg = []
    for sig, items in classes.items():
        msg.append(f"=== {sig}  ({len(items)} program/config(s): "
                   + ", ".join(f"seed {p.seed // 1000} dynamic={d}" for p, d, _ in items[:8]) + ")")
        for p, d, o in items[:MAX_REPORTED if len(classes) < 4 else 1]:
            q = fr.minimize(p, backend, d, sig, budget_s=20)
            msg.append(fr.run_program(q, backend, d).result.report() or o.result.report())
            msg.append(q.repro(backend, d))
    pytest.fail("\n".join(msg), pytrace=False)

"""Acceptance of dynamic shapes (issue 6) on the dynamic corpus, against eager and torch.compile.

The compat harness is reused (tests/compat: case vocabulary, one process per engine, records
cached under tests/compat_dynamic/.reference/ keyed by the corpus, harness, torch and Python
versions); dyn_runner.py swaps the corpus and compiles each case in the mode its name carries
(`@auto`: dynamic=None, `@dynamic`: dynamic=True, `@codegen`: dynamic=None with our codegen,
`@codegen_dynamic`: dynamic=True with our codegen).
A case is a sequence of calls with changing sizes, each run once. Asserted per case:
  * outputs (and inputs after the call) equal eager's on every call of the sequence;
  * on every call, pydynamo compiles as many graphs as torch.compile: under automatic dynamic a
    static graph first, then one dynamic graph on the first size change, then cache hits while
    the recorded shape guards hold; under dynamic=True one symbolic graph from the start;
  * a call that torch.compile serves from its cache runs no frame of the case's original Python
    code under pydynamo either (a real cache hit, not an eager fallback);
  * no pydynamo warning (a warning means an eager fallback or a graph break).
"""
from __future__ import annotations

import glob
import os
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "compat"))
sys.path.insert(0, HERE)

import compat_case as cc  # noqa: E402
import test_compat as tc  # noqa: E402  (the compat harness: run_engine, compare, _check_eager)
import dyn_case as dc  # noqa: E402
import dyn_corpus  # noqa: E402,F401  (registers the cases)

RUNNER = os.path.join(HERE, "dyn_runner.py")
NAMES = [n for n in cc.REGISTRY if "@" in n]

# name -> why pydynamo's compile counts differ from torch.compile's (strict xfail: a fix must
# remove the entry). Outputs are still compared.
KNOWN_GAPS: dict[str, str] = {}


def _files() -> list:
    return sorted(glob.glob(os.path.join(HERE, "dyn_corpus", "*.py"))) + \
        [RUNNER, os.path.join(HERE, "dyn_case.py"), tc.RUNNER,
         os.path.join(os.path.dirname(tc.RUNNER), "compat_case.py")]


@pytest.fixture(scope="session")
def records(tmp_path_factory, request):
    selected = tc._selected(request, "test_dynamic_case")
    pyd = str(tmp_path_factory.mktemp("compat_dynamic") / "pydynamo")
    tc.run_engine("pydynamo", pyd, selected or NAMES, runner=RUNNER)
    ref = tc._ensure_reference(HERE, NAMES, RUNNER, _files())
    return tc.engine_records(ref, pyd)


def compare_counts(rec, ref) -> list[str]:
    """Graphs compiled on each call and cache behaviour against torch.compile's record."""
    if rec["error"] or ref["error"]:
        return []
    bad = []
    for i, (c, r) in enumerate(zip(rec["calls"], ref["calls"])):
        if len(c["new_graphs"]) != len(r["new_graphs"]):
            bad.append(f"call {i + 1}: compiled {len(c['new_graphs'])} graph(s) (ops {c['new_graphs']}), "
                       f"torch.compile {len(r['new_graphs'])} (ops {r['new_graphs']})")
        if c["body_frames"] and not r["body_frames"]:
            bad.append(f"call {i + 1}: ran {c['body_frames']} frame(s) of the original Python code "
                       "(torch.compile served it compiled)")
    return bad


def _where(name) -> str:
    c = cc.REGISTRY[name]
    return f"{os.path.relpath(c.filename, os.path.dirname(os.path.dirname(HERE)))}:{c.lineno}"


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n]))
                                  if n in KNOWN_GAPS else n for n in NAMES])
def test_dynamic_case(records, name):
    eager, ref, rec = records["eager"][name], records["torch"][name], records["pydynamo"][name]
    where = _where(name)
    bad = tc._check_eager(eager)
    assert not bad, f"harness/corpus bug in {name} ({where}):\n  " + "\n  ".join(bad)
    bad = tc.compare(ref, eager, "torch.compile")
    assert not bad, f"corpus bug: torch.compile differs from eager in {name} ({where}):\n  " + "\n  ".join(bad)
    bad = tc.compare(rec, eager, "pydynamo") + compare_counts(rec, ref)
    warned = [w for c in rec["calls"] for w in c["warnings"]]
    if warned:
        bad.append("pydynamo warned: " + " | ".join(warned[:3]))
    assert not bad, f"{name} ({where}):\n  " + "\n  ".join(bad)


def test_corpus_size():
    """Issue 6: at least 40 functions under both automatic dynamic and dynamic=True."""
    both = {n.rsplit("@", 1)[0] for n in NAMES if n.endswith("@auto")} & \
        {n.rsplit("@", 1)[0] for n in NAMES if n.endswith("@dynamic")}
    assert len(both) >= 40, f"{len(both)} functions run under both modes"
    assert set(dc.MODES) >= {n.rsplit("@", 1)[1] for n in NAMES}

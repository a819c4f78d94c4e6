"""Acceptance of the symbolic executor (issue 4): every compat case under pydynamo.optimize must
behave like eager and like torch.compile.

Three processes run the whole corpus, one engine each (eager, torch.compile, pydynamo; both
compilers install a PEP 523 hook, so they never share a process). torch.compile's and eager's
records are cached under tests/compat/.reference/<python>-<hash>/ keyed by the corpus, harness and
torch versions, so they are computed once per machine. Asserted per case, against the records:
  * outputs, inputs after the call (in-place ops) and observed side-effect state equal eager's on
    every call (4 calls with fresh random inputs, then each guard change);
  * the number of graphs compiled on call 1 equals torch.compile's;
  * calls 2-4 compile nothing and start no frame of the case's original Python code (cache hits),
    and the inputs of call 4 do not outlive it (no reference leak);
  * each guard change compiles as many graphs as torch.compile does (recompiles exactly when it does).
  * pydynamo gives no warning, except for a graph break on a call where torch.compile broke too
    (a data-dependent op such as torch.allclose, run outside the graph by both engines).
A case whose torch.compile reference is itself not a clean capture is reported as a corpus bug.

test_compat_codegen runs the corpus a second time with pydynamo's codegen backend behind the
counting one (a fourth process, engine "pydynamo-codegen"): values, in-place updates and state
equal eager's, same graphs and cache hits; codegen's eager fallbacks are allowed (never wrong).
Integer and bool results compare exactly (compat_case.mismatch).
"""
from __future__ import annotations

import fcntl
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import threading

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import compat_case as cc  # noqa: E402
import compat_corpus  # noqa: E402,F401  (registers the cases)

RUNNER = os.path.join(HERE, "compat_runner.py")
ENGINE_TIMEOUT_S = 1200
NAMES = list(cc.REGISTRY)
# The engine under test: "pydynamo", or "torch" to check the corpus against torch.compile alone.
UNDER_TEST = os.environ.get("PYDYNAMO_COMPAT_ENGINE", "pydynamo")


def corpus_hash(files=None) -> str:
    """Key of the cached reference records: the corpus, harness and runner sources (default: the
    compat corpus; tests/breaks passes its own), torch and Python versions."""
    h = hashlib.sha256()
    if files is None:
        files = sorted(glob.glob(os.path.join(HERE, "compat_corpus", "*.py"))) + \
            [os.path.join(HERE, "compat_case.py"), RUNNER]
    for f in files:
        h.update(os.path.basename(f).encode())
        with open(f, "rb") as fh:
            h.update(fh.read())
    h.update(torch.__version__.encode())
    h.update(sys.version.encode())
    return h.hexdigest()[:16]


def run_engine(engine: str, out: str, names: list[str], runner: str = RUNNER) -> None:
    """Run `names` under `engine` in subprocesses until each has a record; a case that kills its
    process (segfault, hang) gets an error record and the rest continue in a new process."""
    os.makedirs(out, exist_ok=True)
    for _ in range(len(names) + 1):
        todo = [n for n in names if not os.path.exists(os.path.join(out, n + ".pt"))]
        if not todo:
            return
        progress = os.path.join(out, "_progress")
        if os.path.exists(progress):
            os.remove(progress)
        try:
            p = subprocess.run([sys.executable, runner, "--engine", engine, "--out", out,
                                "--cases", ",".join(todo)], cwd=REPO, capture_output=True,
                               text=True, timeout=ENGINE_TIMEOUT_S)
            why = f"process exited rc={p.returncode}\n{p.stderr[-3000:]}"
        except subprocess.TimeoutExpired as e:
            why = f"process timed out after {ENGINE_TIMEOUT_S}s\n{(e.stderr or b'')[-3000:]!r}"
        culprit = open(progress).read().strip() if os.path.exists(progress) else None
        left = [n for n in todo if not os.path.exists(os.path.join(out, n + ".pt"))]
        if not left:
            return
        victims = [culprit] if culprit in left else left  # no progress: nothing ran at all
        for n in victims:
            torch.save({"name": n, "calls": [], "error": f"{engine} runner died in this case: {why}"},
                       os.path.join(out, n + ".pt"))


def _reference_dir(base: str = HERE, files=None) -> str:
    tag = "%d.%d-%s" % (sys.version_info[0], sys.version_info[1], corpus_hash(files))
    return os.path.join(base, ".reference", tag)


def _ensure_reference(base: str = HERE, names=None, runner: str = RUNNER, files=None) -> str:
    """Eager and torch.compile records of `names` (default: the compat corpus), computed once
    per corpus version (tests/breaks passes its own corpus)."""
    ref = _reference_dir(base, files)
    os.makedirs(os.path.dirname(ref), exist_ok=True)
    # One builder per machine at a time: concurrent sessions wait instead of racing on the dir.
    with open(os.path.join(os.path.dirname(ref), ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            return _build_reference(ref, NAMES if names is None else names, runner)
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def _build_reference(ref: str, names: list, runner: str) -> str:
    if not os.path.exists(os.path.join(ref, "_done")):
        prefix = os.path.basename(ref).split("-")[0] + "-"
        for stale in glob.glob(os.path.join(os.path.dirname(ref), prefix + "*")):
            shutil.rmtree(stale, ignore_errors=True)  # older corpus versions of this Python
        for engine in ("eager", "torch"):
            run_engine(engine, os.path.join(ref, engine), names, runner)
        open(os.path.join(ref, "_done"), "w").close()
    return ref


def _selected(request, test: str) -> list:
    """Case names of the session's items of `test` (after -k selection)."""
    return [i.callspec.params["name"] for i in request.session.items
            if getattr(i, "callspec", None) is not None and "name" in i.callspec.params
            and i.originalname == test]


@pytest.fixture(scope="session")
def records(tmp_path_factory, request):
    """{engine: {name: record}}; the reference and the pydynamo run go concurrently. Only the
    selected cases (-k) run under pydynamo; the cached reference always covers the corpus."""
    selected = _selected(request, "test_compat")
    codegen_only = not selected and _selected(request, "test_compat_codegen")
    if UNDER_TEST == "torch":  # corpus authoring: check torch.compile's records against themselves
        ref = _ensure_reference()
        pyd = os.path.join(ref, "torch")
    else:
        pyd = str(tmp_path_factory.mktemp("compat") / "pydynamo")
        t = threading.Thread(target=run_engine, args=("pydynamo", pyd, [] if codegen_only else selected or NAMES))
        t.start()
        ref = _ensure_reference()
        t.join()
    return engine_records(ref, pyd)


def engine_records(ref: str, pyd: str) -> dict:
    """{engine: lazy records}: eager's and torch.compile's from the reference dir, ours from pyd
    (shared by the corpora built on this harness: breaks, compat_dynamic, semantics)."""
    dirs = {"eager": os.path.join(ref, "eager"), "torch": os.path.join(ref, "torch"), "pydynamo": pyd}
    return {e: _Lazy(d) for e, d in dirs.items()}


class _Lazy:
    def __init__(self, d):
        self.d = d

    def __getitem__(self, name):
        return torch.load(os.path.join(self.d, name + ".pt"), weights_only=False)


def _check_eager(e) -> list[str]:
    if e["error"]:
        return [f"eager run failed: {e['error']}"]
    bad = []
    for i, c in enumerate(e["calls"]):
        if c["exc"]:
            bad.append(f"call {i + 1}: eager raised {c['exc']}")
        if c["body_frames"] < 1 or c["unknown_frames"]:
            bad.append(f"call {i + 1}: frame counter broken (body={c['body_frames']}, "
                       f"unknown={c['unknown_frames']})")
    return bad


def compare(rec, eager, engine: str) -> list[str]:
    """Every way `rec` differs from eager on values: one line each."""
    if rec["error"]:
        return [f"{engine}: {rec['error']}"]
    bad = []
    for i, (c, e) in enumerate(zip(rec["calls"], eager["calls"])):
        if c["exc"]:
            bad.append(f"call {i + 1}: {engine} raised {c['exc']}")
            continue
        for key, label in (("out", "output"), ("args_after", "inputs after call"), ("state", "side-effect state")):
            m = cc.mismatch(c[key], e[key], label)
            if m:
                bad.append(f"call {i + 1}: {engine} {m}")
    return bad


def compare_compile(rec, ref, engine: str) -> list[str]:
    """Graph counts and cache behaviour of `rec` against the reference compiler's record."""
    if rec["error"] or ref["error"]:
        return []
    bad = []
    n = cc.N_CALLS
    got, want = rec["calls"][0]["new_graphs"], ref["calls"][0]["new_graphs"]
    if len(got) != len(want):
        bad.append(f"call 1: {engine} compiled {len(got)} graph(s) (ops {got[:20]}), "
                   f"torch.compile {len(want)} (ops {want[:20]})")
    for i in range(1, n):
        c = rec["calls"][i]
        if c["new_graphs"] or c["body_frames"]:
            bad.append(f"call {i + 1}: not a cache hit under {engine}: compiled {len(c['new_graphs'])} graph(s), "
                       f"ran {c['body_frames']} frame(s) of the original Python code")
    leaked = rec["calls"][n - 1].get("leaked_inputs")
    if leaked and leaked > (ref["calls"][n - 1].get("leaked_inputs") or 0):
        bad.append(f"call {n}: {engine} keeps {leaked} input tensor(s) alive after the call (a reference leak)")
    for i in range(n, len(ref["calls"])):
        got, want = len(rec["calls"][i]["new_graphs"]), len(ref["calls"][i]["new_graphs"])
        if got != want:
            verb = "recompiled" if got else "did not recompile"
            bad.append(f"guard change {i - n + 1} (call {i + 1}): {engine} {verb} ({got} graph(s)), "
                       f"torch.compile compiled {want}")
        # past the recompile limit the body runs eagerly: exactly when torch.compile's does
        ran, ref_ran = rec["calls"][i]["body_frames"] > 0, ref["calls"][i]["body_frames"] > 0
        if ran != ref_ran:
            bad.append(f"guard change {i - n + 1} (call {i + 1}): {engine} {'ran' if ran else 'did not run'} "
                       f"the original Python code, torch.compile {'did' if ref_ran else 'did not'}")
    return bad


def compare_warnings(rec, ref) -> list[str]:
    """pydynamo must not warn, except about a graph break on a call where torch.compile broke too
    (a data-dependent op such as torch.allclose: both engines run it outside the graph)."""
    if not rec["calls"]:
        return []
    first, ref_first = rec["calls"][0], (ref["calls"] or [{}])[0]
    torch_broke = ref_first.get("graph_breaks", 0) > 0
    warn = [w for w in first["warnings"] if not (torch_broke and "pydynamo: graph break" in w)]
    bad = ["pydynamo warned: " + " | ".join(warn[:3])] if warn else []
    if first.get("graph_breaks", 0) and not torch_broke:
        bad.append(f"call 1: pydynamo took {first['graph_breaks']} graph break(s), torch.compile none")
    return bad


def _where(name):
    c = cc.REGISTRY[name]
    return f"{os.path.relpath(c.filename, REPO)}:{c.lineno}"


# Known gaps, each a real difference from torch.compile (never a wrong answer: outputs are
# still compared and equal). Strict: a fixed case must leave this table.
KNOWN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_GAPS[n]))
                                  if n in KNOWN_GAPS else n for n in NAMES])
def test_compat(records, name):
    eager, ref, rec = records["eager"][name], records["torch"][name], records["pydynamo"][name]
    where = _where(name)
    bad = _check_eager(eager)
    assert not bad, f"harness/corpus bug in {name} ({where}):\n  " + "\n  ".join(bad)
    bad = compare(ref, eager, "torch.compile") + compare_compile(ref, ref, "torch.compile")
    assert not bad, f"corpus bug: torch.compile reference of {name} ({where}) is not clean:\n  " + "\n  ".join(bad)
    bad = compare(rec, eager, "pydynamo") + compare_compile(rec, ref, "pydynamo")
    bad += compare_warnings(rec, ref)
    assert not bad, f"{name} ({where}):\n  " + "\n  ".join(bad)


@pytest.fixture(scope="session")
def codegen_records(tmp_path_factory, request):
    """{name: record} of the selected cases under pydynamo with the codegen backend."""
    out = str(tmp_path_factory.mktemp("compat") / "pydynamo-codegen")
    run_engine("pydynamo-codegen", out, _selected(request, "test_compat_codegen") or NAMES)
    return _Lazy(out)


# Cases whose codegen run differs from eager (a real bug, strict: a fix must remove the entry).
KNOWN_CODEGEN_GAPS: dict[str, str] = {}


@pytest.mark.parametrize("name", [pytest.param(n, marks=pytest.mark.xfail(strict=True, reason=KNOWN_CODEGEN_GAPS[n]))
                                  if n in KNOWN_CODEGEN_GAPS else n for n in NAMES])
def test_compat_codegen(records, codegen_records, name):
    """The corpus through codegen's C++ kernels: outputs, inputs after each call and side-effect
    state equal eager's on every call, the same graphs as under the eager backend, and calls 2-4
    are cache hits. Codegen's own eager fallbacks (one warning each) are allowed: slower, never wrong."""
    eager, ref, rec = records["eager"][name], records["torch"][name], codegen_records[name]
    bad = _check_eager(eager)
    assert not bad, f"harness/corpus bug in {name} ({_where(name)}):\n  " + "\n  ".join(bad)
    bad = compare(rec, eager, "pydynamo+codegen") + compare_compile(rec, ref, "pydynamo+codegen")
    assert not bad, f"{name} ({_where(name)}):\n  " + "\n  ".join(bad)


def test_corpus_size():
    assert len(NAMES) >= 150, f"issue 4 asks for at least 150 compat cases, have {len(NAMES)}"

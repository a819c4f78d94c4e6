"""Run the whole compat corpus under ONE engine in this process and write one record per case.

    python tests/compat/compat_runner.py --engine {eager,torch,pydynamo,pydynamo-codegen} --out DIR [--cases a,b]

Both compiling engines install a PEP 523 frame hook, so each runs in its own process. Per case
and per call the record holds: the normalized output, the inputs after the call (in-place ops),
the case's observed side-effect state, the graphs the counting backend received during the call
(with their op counts), and `body_frames`: how many frames of the corpus's ORIGINAL code objects
CPython started during the call, and `graph_breaks`: how many graph breaks the engine took
during the call (torch.compile's `counters["graph_break"]`, pydynamo's translation records).

How "did the Python body run" is measured, guard-free: sys.setprofile is active only around the
call and counts 'call' events whose f_code is one of the corpus's own code objects (collected by
walking the corpus modules: functions, class members, nested code in co_consts). A cache hit runs
the engine's transformed code object instead (a different object), and symbolic tracing never
starts a CPython frame of the original code, so a hit counts 0 while any eager run (a fallback, or
the eager engine itself) counts >= 1. Frames from a corpus file whose code is not in the set are
counted separately (`unknown_frames`): under the eager engine that must be 0, which checks the walk.

Leaks: after the last steady call, `leaked_inputs` counts the call's input tensors still alive once
every reference the harness held is gone (weakrefs + gc.collect).

A case that kills the process is recorded by the parent (see test_compat.py) from `_progress`.
"""
from __future__ import annotations

import argparse
import gc
import os
import signal
import sys
import time
import traceback
import types
import warnings
import weakref

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, HERE)

import torch  # noqa: E402

import compat_case as cc  # noqa: E402
import compat_corpus  # noqa: E402

CASE_TIMEOUT_S = 60


# ---------------------------------------------------------------------------------------------
# Engines: (reset, wrap(callable, backend) -> callable). A table, so adding one is one entry.

def _eager_engine():
    return (lambda: None), (lambda fn, backend: fn)


def _torch_engine():
    import torch._dynamo
    return torch._dynamo.reset, (lambda fn, backend: torch.compile(fn, backend=backend))


def _import_pydynamo():
    try:
        import pydynamo
    except ImportError:
        sys.path.insert(0, REPO)
        import pydynamo
    return pydynamo


def _pydynamo_engine():
    pydynamo = _import_pydynamo()
    return pydynamo.reset, (lambda fn, backend: pydynamo.optimize(fn, backend=backend))


def codegen_behind(counting):
    """pydynamo's codegen backend behind the counting one: the counting backend records each
    graph (compile counts stay comparable with torch.compile's), codegen compiles and runs it."""
    from pydynamo.backends import lookup_backend
    codegen = lookup_backend("codegen")
    return lambda gm, example_inputs: (counting(gm, example_inputs), codegen(gm, example_inputs))[1]


def _pydynamo_codegen_engine():
    """The corpus through codegen's kernels: values, in-place updates and cache hits are checked
    as under the pydynamo engine (tests/compat/test_compat.py::test_compat_codegen)."""
    pydynamo = _import_pydynamo()
    return pydynamo.reset, (lambda fn, backend: pydynamo.optimize(fn, backend=codegen_behind(backend)))


ENGINES = {"eager": _eager_engine, "torch": _torch_engine, "pydynamo": _pydynamo_engine,
           "pydynamo-codegen": _pydynamo_codegen_engine}


# Graph breaks taken so far (cumulative), per engine: a break is legitimate only where
# torch.compile breaks too (e.g. a data-dependent op), so the test needs both engines' counts.
def _torch_breaks():
    from torch._dynamo.utils import counters
    return lambda: sum(counters["graph_break"].values())


def _pydynamo_breaks():
    from pydynamo import convert_frame
    from pydynamo.exc import GraphBreak
    n = [0]

    def record(item):
        if isinstance(item, GraphBreak) or getattr(item, "graph_break", None) is not None:
            n[0] += 1
    convert_frame.RECORDERS.append(record)
    return lambda: n[0]


BREAK_COUNTERS = {"torch": _torch_breaks, "pydynamo": _pydynamo_breaks, "pydynamo-codegen": _pydynamo_breaks}
_count_breaks = [lambda: 0]


# ---------------------------------------------------------------------------------------------
# Original code objects of the corpus

def _walk_code(code, out):
    if code in out:
        return
    out.add(code)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _walk_code(c, out)


def _walk_value(v, out, seen):
    if id(v) in seen:
        return
    seen.add(id(v))
    if isinstance(v, (staticmethod, classmethod)):
        v = v.__func__
    if isinstance(v, property):
        for f in (v.fget, v.fset, v.fdel):
            if f is not None:
                _walk_value(f, out, seen)
        return
    fn = getattr(v, "__wrapped__", None)
    if fn is not None:
        _walk_value(fn, out, seen)
    if isinstance(v, types.FunctionType):
        _walk_code(v.__code__, out)
    elif isinstance(v, type):
        for member in vars(v).values():
            _walk_value(member, out, seen)
    elif isinstance(v, (list, tuple, dict)):
        for member in (v.values() if isinstance(v, dict) else v):
            _walk_value(member, out, seen)


def corpus_codes():
    out, seen = set(), set()
    files = set()
    for mod in compat_corpus.MODULES:
        files.add(mod.__file__)
        for v in vars(mod).values():
            _walk_value(v, out, seen)
    # Only the corpus's own code: walking reaches library code too (bases, decorators).
    return {c for c in out if c.co_filename in files}, files


class FrameCounter:
    """sys.setprofile-based count of original corpus frames started during a call."""

    def __init__(self):
        self.codes, self.files = corpus_codes()
        self.body = 0
        self.unknown = 0

    def _prof(self, frame, event, arg):
        if event == "call":
            code = frame.f_code
            try:
                known = code in self.codes
            except TypeError:  # generated code (torch's resume functions) may hold unhashable consts
                known = False
            if known:
                self.body += 1
            elif code.co_filename in self.files:
                self.unknown += 1

    def __enter__(self):
        self.body = self.unknown = 0
        sys.setprofile(self._prof)
        return self

    def __exit__(self, *exc):
        sys.setprofile(None)


class _Timeout(Exception):
    pass


def _on_alarm(signum, frame):
    raise _Timeout(f"case exceeded {CASE_TIMEOUT_S}s")


# ---------------------------------------------------------------------------------------------

def _tensors_in(v, out: list, depth: int = 0) -> list:
    if depth > 10:
        return out
    if isinstance(v, torch.Tensor):
        out.append(v)
    elif isinstance(v, (list, tuple, set, frozenset)):
        for x in v:
            _tensors_in(x, out, depth + 1)
    elif isinstance(v, dict):
        for x in v.values():
            _tensors_in(x, out, depth + 1)
    elif hasattr(v, "__dict__") and not isinstance(v, type):
        _tensors_in(vars(v), out, depth + 1)
    return out


def _one_call(c: cc.Case, compiled, spec: cc.Inputs, i: int, graphs: list, counter: FrameCounter):
    """One call, recorded; returns (record, weakrefs to the call's input tensors). Every strong
    reference to inputs and outputs dies with this frame, so the caller can test for leaks."""
    g = torch.Generator().manual_seed(cc.seed_of(c.name, i))
    args, kwargs = spec.make(g)
    refs = [weakref.ref(x) for x in _tensors_in((args, kwargs), [])]
    if c.before is not None:
        c.before()
    n_graphs = len(graphs)
    n_breaks = _count_breaks[0]()
    rec = {"exc": None}
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        t0 = time.perf_counter()
        try:
            with spec.enter(), counter:
                out = compiled(*args, **kwargs)
            rec["out"] = cc.normalize(out)
        except _Timeout:
            raise
        except Exception as e:  # recorded; the test says which engine raised what
            rec["exc"] = f"{type(e).__name__}: {str(e)[:2000]}"
            rec["out"] = None
        rec["seconds"] = time.perf_counter() - t0
    rec["args_after"] = cc.normalize((args, kwargs))
    rec["state"] = cc.normalize(c.observe()) if c.observe is not None else None
    rec["new_graphs"] = graphs[n_graphs:]
    rec["graph_breaks"] = _count_breaks[0]() - n_breaks
    rec["body_frames"] = counter.body
    rec["unknown_frames"] = counter.unknown
    rec["warnings"] = [f"{w.category.__name__}: {str(w.message)[:500]}" for w in caught
                       if "pydynamo" in str(w.message).lower() or "pydynamo" in (w.filename or "")]
    return rec, refs


def run_case(c: cc.Case, reset, wrap, counter: FrameCounter) -> dict:
    graphs: list = []

    def backend(gm, example_inputs):
        ops = sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module"))
        graphs.append(ops)
        return gm.forward

    reset()
    torch.manual_seed(cc.seed_of(c.name, 999))
    fn = c.make()
    compiled = wrap(fn, backend)
    calls = []
    specs = [c.inputs] * cc.N_CALLS + list(c.changes)
    for i, spec in enumerate(specs):
        rec, refs = _one_call(c, compiled, spec, i, graphs, counter)
        # Leaks: after the last steady call (a cache hit), no input tensor may outlive the call.
        rec["leaked_inputs"] = None
        if i == cc.N_CALLS - 1:
            if any(r() is not None for r in refs):
                gc.collect()  # only when refcounting alone left something: a full gc per case is slow
            rec["leaked_inputs"] = sum(r() is not None for r in refs)
        calls.append(rec)
    return {"name": c.name, "calls": calls, "error": None}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True, choices=sorted(ENGINES))
    ap.add_argument("--out", required=True)
    ap.add_argument("--cases", default="", help="comma-separated names; default all")
    ns = ap.parse_args(argv)
    os.makedirs(ns.out, exist_ok=True)
    names = [n for n in ns.cases.split(",") if n] or list(cc.REGISTRY)
    progress = os.path.join(ns.out, "_progress")
    try:
        reset, wrap = ENGINES[ns.engine]()
        if ns.engine in BREAK_COUNTERS:
            _count_breaks[0] = BREAK_COUNTERS[ns.engine]()
    except Exception as e:  # engine missing entirely: every case records why
        err = f"engine {ns.engine} unavailable: {type(e).__name__}: {e}"
        for name in names:
            torch.save({"name": name, "calls": [], "error": err}, os.path.join(ns.out, name + ".pt"))
        return 0
    counter = FrameCounter()
    signal.signal(signal.SIGALRM, _on_alarm)
    for name in names:
        with open(progress, "w") as f:
            f.write(name)
        signal.alarm(CASE_TIMEOUT_S)
        try:
            rec = run_case(cc.REGISTRY[name], reset, wrap, counter)
        except BaseException as e:
            sys.setprofile(None)
            rec = {"name": name, "calls": [], "error": f"{type(e).__name__}: {e}\n"
                   + "".join(traceback.format_exc(limit=-8))[-3000:]}
        finally:
            signal.alarm(0)
        torch.save(rec, os.path.join(ns.out, name + ".pt"))
    os.remove(progress)
    with open(os.path.join(ns.out, "_complete"), "w") as f:
        f.write(str(len(names)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The compat harness must be able to fail: its comparisons, fed doctored records, report each
kind of difference (values, dtypes, graph counts, cache misses, recompiles), and its input specs
are deterministic and never all-zero."""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import compat_case as cc  # noqa: E402
from test_compat import compare, compare_compile  # noqa: E402


def _call(out, graphs=(), frames=0):
    return {"exc": None, "out": cc.normalize(out), "args_after": cc.normalize(((), {})), "state": None,
            "new_graphs": list(graphs), "body_frames": frames, "unknown_frames": 0, "warnings": []}


def _rec(calls):
    return {"name": "x", "error": None, "calls": calls}


X = torch.randn(3)


def test_values_compare():
    eager = _rec([_call((X, 2, "a"))])
    assert compare(_rec([_call((X.clone(), 2, "a"))]), eager, "e") == []
    assert compare(_rec([_call((X + 1, 2, "a"))]), eager, "e")
    assert compare(_rec([_call((X.double(), 2, "a"))]), eager, "e")
    assert compare(_rec([_call((X, 3, "a"))]), eager, "e")
    assert compare(_rec([_call([X, 2, "a"])]), eager, "e")          # list vs tuple
    assert compare(_rec([_call((X.clone().requires_grad_(), 2, "a"))]), eager, "e")
    assert compare(_rec([{**_call(None), "exc": "RuntimeError: x"}]), eager, "e")


def test_compile_compare():
    n = cc.N_CALLS
    ref = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X, [3]), _call(X)])
    good = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X, [2]), _call(X)])
    assert compare_compile(good, ref, "e") == []
    two_graphs = _rec([_call(X, [1, 2])] + [_call(X)] * (n - 1) + [_call(X, [3]), _call(X)])
    assert any("call 1" in m for m in compare_compile(two_graphs, ref, "e"))
    reran = _rec([_call(X, [3])] + [_call(X, frames=1)] * (n - 1) + [_call(X, [3]), _call(X)])
    assert len(compare_compile(reran, ref, "e")) == n - 1
    no_recompile = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X), _call(X)])
    assert any("did not recompile" in m for m in compare_compile(no_recompile, ref, "e"))
    eager_fallback = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X, [3]), _call(X, frames=1)])
    assert any("ran the original" in m for m in compare_compile(eager_fallback, ref, "e"))
    leak = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X, [3]), _call(X)])
    leak["calls"][n - 1] = {**leak["calls"][n - 1], "leaked_inputs": 1}
    assert any("leak" in m for m in compare_compile(leak, ref, "e"))
    extra = _rec([_call(X, [3])] + [_call(X)] * (n - 1) + [_call(X, [3]), _call(X, [3])])
    assert any("recompiled" in m for m in compare_compile(extra, ref, "e"))


def test_inputs_deterministic_and_nonzero():
    spec = cc.Inputs((cc.t(4, 4), [cc.t(3, dtype=torch.int64), 2], {"m": cc.t(5, dtype=torch.bool)}), {})
    a = spec.make(torch.Generator().manual_seed(cc.seed_of("c", 0)))
    b = spec.make(torch.Generator().manual_seed(cc.seed_of("c", 0)))
    c = spec.make(torch.Generator().manual_seed(cc.seed_of("c", 1)))
    assert cc.mismatch(cc.normalize(a), cc.normalize(b)) is None
    assert cc.mismatch(cc.normalize(a), cc.normalize(c)) is not None
    x, (i, _), d = a[0]
    assert x.abs().sum() > 0 and i.abs().sum() > 0 and d["m"].any()

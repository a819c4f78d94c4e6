"""The C++ TENSOR_MATCH (pydynamo/tensor_check.py) is the same predicate as the Python one it
replaces on the hot path: both are evaluated on every (spec, tensor) pair of a matrix of
tensors that differ in one property each, and must agree, with hits and misses both present."""
import itertools
import os
import subprocess
import sys

import pytest
import torch

from pydynamo import tensor_check
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards
from pydynamo.sources import LocalSource

MOD = tensor_check.module()
needs_c = pytest.mark.skipif(MOD is None, reason="no C++ compiler/torch headers here")


def _python_guard(spec):
    """The Python conditions, as guards.py emits them without the C++ module."""
    with tensor_check.disabled():
        g = compile_guards([Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, spec)], {})
    assert "type(v0) is" in g.source_text      # the conditions themselves, not the C++ call
    return g


def _tensors():
    torch.manual_seed(0)
    base = torch.randn(3, 4)
    with torch.inference_mode():
        inf = torch.randn(3, 4)
    c = torch.randn(3, 4, dtype=torch.complex64)
    return {
        "base": base, "other_values": torch.randn(3, 4), "float64": base.double(),
        "int64": (base * 10).long(), "shape": torch.randn(4, 3), "rank": torch.randn(12),
        "transposed": torch.randn(4, 3).t(), "sliced": torch.randn(3, 8)[:, ::2],
        "requires_grad": base.clone().requires_grad_(), "param": torch.nn.Parameter(base.clone()),
        "inference": inf, "neg": base._neg_view(), "meta": torch.empty(3, 4, device="meta"),
        "complex": c, "conj": c.conj(), "sparse": base.to_sparse(),
        "expanded": torch.randn(1, 4).expand(3, 4),
    }


def _specs(ts):
    specs = {k: TensorSpec.of(t) for k, t in ts.items() if k != "sparse"}
    # symbolic dims (None = any): rank and the known entries still checked
    specs["dyn0"] = TensorSpec.of(ts["base"]).with_dynamic((None, 4), (4, 1))
    specs["dyn_all"] = TensorSpec.of(ts["base"]).with_dynamic((None, None), (None, 1))
    return specs


@needs_c
def test_c_check_agrees_with_python_on_every_pair():
    ts, hits, misses = _tensors(), 0, 0
    for (sname, spec), (tname, t) in itertools.product(_specs(_tensors()).items(), ts.items()):
        want = _python_guard(spec)({"x": t})
        got = MOD.check(t, tensor_check.make_spec(MOD, spec))
        assert got is want, (sname, tname, got, want)
        hits += want
        misses += not want
    assert hits >= 20 and misses >= 200, (hits, misses)


@needs_c
def test_guard_source_uses_the_c_check_and_no_reference_leaks():
    x = torch.randn(5, 2)
    check = compile_guards([Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorSpec.of(x))], {})
    assert "ifnot(c0(v0,c1)):returnFalse" in check.source_text.replace(" ", "")
    assert ".shape" not in check.source_text and ".stride()" not in check.source_text
    y = torch.randn(5, 3)
    before = (sys.getrefcount(x), sys.getrefcount(y))
    for _ in range(10_000):
        assert check({"x": x}) and not check({"x": y})
    assert (sys.getrefcount(x), sys.getrefcount(y)) == before


@needs_c
def test_bad_spec_arguments_raise_clear_errors():
    with pytest.raises(TypeError):
        MOD.make_spec(torch.Tensor, "float32", "cpu", (1,), (1,), False, False, -1, 0)
    with pytest.raises((ValueError, RuntimeError)):
        MOD.make_spec(torch.Tensor, torch.float32, "no-such-device", (1,), (1,), False, False, -1, 0)
    with pytest.raises(TypeError):
        MOD.check(torch.randn(1))


def _run(code, tmp_path, **env):
    """`code` in a fresh interpreter with an empty cache dir; returns its stderr."""
    env = dict(os.environ, PYDYNAMO_CACHE_DIR=str(tmp_path), **env)
    r = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-2000:]
    return r.stderr


def test_disabled_falls_back_to_python_checks(tmp_path):
    """PYDYNAMO_C_TENSOR_GUARDS=0 (or a failed build): Python conditions, same answers."""
    code = (
        "import torch, pydynamo\n"
        "from pydynamo import tensor_check\n"
        "assert tensor_check.module() is None\n"
        "@pydynamo.optimize(backend='eager')\n"
        "def f(x): return x * 2 + 1\n"
        "x = torch.randn(3, 4)\n"
        "for _ in range(3): assert torch.equal(f(x), x * 2 + 1)\n"
        "assert torch.equal(f(x.t()), x.t() * 2 + 1)\n"
        "print('ok')\n")
    _run(code, tmp_path, PYDYNAMO_C_TENSOR_GUARDS="0")
    assert not (tmp_path / "guards").exists()        # nothing was built


def test_failed_build_warns_once_and_guards_still_work(tmp_path):
    code = (
        "import warnings, logging, torch, pydynamo\n"
        "from pydynamo import tensor_check\n"
        "tensor_check.prefer_installed = False   # the build on first use, not the install's\n"
        "assert tensor_check.module() is None and tensor_check.module() is None\n"
        "@pydynamo.optimize(backend='eager')\n"
        "def f(x): return x - 1\n"
        "x = torch.randn(6)\n"
        "assert torch.equal(f(x), x - 1) and torch.equal(f(x.double()), x.double() - 1)\n"
        "print('ok')\n")
    err = _run(code, tmp_path, CXX="/nonexistent/g++")
    assert err.count("C++ tensor guard check unavailable") == 1, err[-2000:]

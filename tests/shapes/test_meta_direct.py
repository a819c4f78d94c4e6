"""pydynamo/meta_direct.py answers exactly as eager or not at all.

Every table entry (torch function, method, operator, dunder, in-place form) runs on real CPU
tensors over dtypes, Python numbers and layouts (broadcast, transposed, channels-last, the
ambiguous N C 1 1, non-dense slices, expanded, 0-dim, empty), with and without a grad-requiring
operand: where `run` answers, eager does not raise and its result has the same shape, strides,
dtype, requires_grad and leafness (an in-place form: the very `self`). And a cold compile of a
small pointwise + Linear program, in a fresh interpreter, never imports torch._dynamo.
"""
from __future__ import annotations

import itertools
import operator
import os
import subprocess
import sys
import textwrap

import pytest
import torch

from pydynamo import meta_direct as mp

FLOATS = [torch.float32, torch.float16, torch.bfloat16, torch.float64]
INTS = [torch.int64, torch.int32, torch.uint8, torch.int8]
DTYPES = FLOATS + INTS + [torch.bool]


def _real(spec, dtype, grad=False):
    """A CPU tensor of layout `spec` (a function of a dtype -> tensor) holding small positive values."""
    t = spec(dtype)
    if grad:
        t = t.detach().requires_grad_(True)
    return t


def _make(shape, dtype):
    if dtype == torch.bool:
        return torch.rand(shape) > 0.5
    if dtype.is_floating_point:
        return (torch.rand(shape) + 0.5).to(dtype)
    return torch.randint(1, 4, shape, dtype=dtype)


# (first operand layout, second operand layout): functions of dtype -> a fresh CPU tensor
LAYOUTS = {
    "same": (lambda d: _make((3, 4), d), lambda d: _make((3, 4), d)),
    "row": (lambda d: _make((3, 4), d), lambda d: _make((4,), d)),
    "transposed": (lambda d: _make((4, 3), d).t(), lambda d: _make((3, 4), d)),
    "both_t": (lambda d: _make((4, 3), d).t(), lambda d: _make((4, 3), d).t()),
    "outer": (lambda d: _make((3, 1), d), lambda d: _make((1, 4), d)),
    "channels_last": (lambda d: _make((2, 3, 4, 5), d).contiguous(memory_format=torch.channels_last),
                      lambda d: _make((2, 3, 4, 5), d).contiguous(memory_format=torch.channels_last)),
    "cl_vs_contig": (lambda d: _make((2, 3, 4, 5), d).contiguous(memory_format=torch.channels_last),
                     lambda d: _make((2, 3, 4, 5), d)),
    "nc11": (lambda d: _make((2, 3, 1, 1), d), lambda d: _make((2, 3, 1, 1), d).contiguous(
        memory_format=torch.channels_last)),
    "sliced": (lambda d: _make((3, 8), d)[:, ::2], lambda d: _make((3, 4), d)),
    "expanded": (lambda d: _make((1, 4), d).expand(3, 4), lambda d: _make((3, 4), d)),
    "zero_dim": (lambda d: _make((), d), lambda d: _make((3, 4), d)),
    "zero_dims": (lambda d: _make((), d), lambda d: _make((), d)),
    "empty": (lambda d: _make((0, 4), d), lambda d: _make((4,), d)),
    "permuted": (lambda d: _make((2, 3, 4), d).permute(2, 0, 1), lambda d: _make((3,), d)),
    "size1_strides": (lambda d: _make((3, 1, 4), d).transpose(0, 1), lambda d: _make((1, 3, 4), d)),
}
UNARY_LAYOUTS = ["same", "transposed", "channels_last", "nc11", "sliced", "expanded", "zero_dim",
                 "empty", "permuted", "size1_strides"]
NUMBERS = [2, -1, 2.5, True]


def _to_meta(v):
    if isinstance(v, torch.Tensor):
        m = torch.empty_strided(v.shape, v.stride(), dtype=v.dtype, device="meta")
        if v._base is not None or v.storage_offset():
            base = torch.empty(v.untyped_storage().nbytes() // v.element_size(), dtype=v.dtype,
                               device="meta")
            m = base.as_strided(v.shape, v.stride(), v.storage_offset())
        return m.requires_grad_(v.requires_grad)
    return v


def _call(target, args):
    if isinstance(target, str):
        return getattr(args[0], target)(*args[1:])
    return target(*args)


def _check(target, args, failures, counts):
    margs = [_to_meta(a) for a in args]
    try:
        got = mp.run(target, margs, {})
    except Exception as e:  # run never raises
        failures.append(f"{target} {_desc(args)}: run raised {type(e).__name__}: {e}")
        return
    if got is None:
        counts["declined"] += 1
        return
    counts["answered"] += 1
    try:
        want = _call(target, list(args))
    except Exception as e:
        failures.append(f"{_name(target)} {_desc(args)}: answered, but eager raises {type(e).__name__}: {e}")
        return
    inplace = getattr(mp._table().get(target), "inplace", False)
    if inplace and got is not margs[0]:
        failures.append(f"{_name(target)} {_desc(args)}: in-place result is not self")
    have = (tuple(got.shape), got.stride(), got.dtype, got.requires_grad, got.is_leaf)
    ref = (tuple(want.shape), want.stride(), want.dtype, want.requires_grad, want.is_leaf)
    if have != ref:
        failures.append(f"{_name(target)} {_desc(args)}: {have} != eager {ref}")


def _name(target):
    return target if isinstance(target, str) else getattr(target, "__name__", repr(target))


def _desc(args):
    return [f"{tuple(a.shape)}{a.stride()}{str(a.dtype)[6:]}{'g' if a.requires_grad else ''}"
            if isinstance(a, torch.Tensor) else repr(a) for a in args]


def _targets(arity):
    return [(k, op) for k, op in mp._table().items() if op.arity == arity]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_unary_forms_agree_with_eager():
    failures, counts = [], {"answered": 0, "declined": 0}
    with torch.enable_grad():
        for (target, op), lay, dtype in itertools.product(_targets(1), UNARY_LAYOUTS, DTYPES):
            spec = LAYOUTS[lay][0]
            grads = (False, True) if dtype.is_floating_point and not op.inplace else (False,)
            for grad in grads:
                _check(target, [_real(spec, dtype, grad)], failures, counts)
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])
    assert counts["answered"] > 1000, counts


BINARY_DTYPE_PAIRS = [(d, d) for d in DTYPES] + [
    (torch.float32, torch.int64), (torch.int64, torch.float32), (torch.float16, torch.float32),
    (torch.bfloat16, torch.float16), (torch.bool, torch.float32), (torch.int64, torch.bool),
    (torch.uint8, torch.int8), (torch.int32, torch.int64), (torch.float64, torch.float16)]


@pytest.mark.parametrize("lay", sorted(LAYOUTS))
def test_binary_forms_agree_with_eager(lay):
    failures, counts = [], {"answered": 0, "declined": 0}
    first, second = LAYOUTS[lay]
    with torch.enable_grad():
        for target, op in _targets(2):
            for da, db in BINARY_DTYPE_PAIRS:
                grads = (False, True) if da.is_floating_point and not op.inplace else (False,)
                for grad in grads:
                    _check(target, [_real(first, da, grad), _real(second, db)], failures, counts)
            for dtype, number in itertools.product(DTYPES, NUMBERS):
                _check(target, [_real(first, dtype), number], failures, counts)
                if op.reverse or isinstance(target, str):
                    continue
                _check(target, [number, _real(second, dtype)], failures, counts)
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])
    assert counts["answered"] > 200, counts


@pytest.mark.parametrize("lay", sorted(LAYOUTS))
def test_where_agrees_with_eager(lay):
    failures, counts = [], {"answered": 0, "declined": 0}
    first, second = LAYOUTS[lay]
    for da, db in BINARY_DTYPE_PAIRS:
        cond = first(torch.bool)
        _check(torch.where, [cond, _real(first, da), _real(second, db)], failures, counts)
        _check(torch.where, [cond, _real(second, da), 0.5], failures, counts)
        _check("where", [_real(second, da), cond, _real(first, db)], failures, counts)
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])
    assert counts["answered"] > 10, counts


X_LAYOUTS = ["same", "transposed", "channels_last", "nc11", "sliced", "expanded", "zero_dim",
             "empty", "permuted", "size1_strides"]


def _check_composite(target, args, kwargs, failures, counts):
    margs = [_to_meta(a) for a in args]
    mkwargs = {k: _to_meta(v) for k, v in kwargs.items()}
    got = mp.run(target, margs, mkwargs)
    if got is None:
        counts["declined"] += 1
        return
    counts["answered"] += 1
    try:
        want = (getattr(args[0], target)(*args[1:], **kwargs) if isinstance(target, str)
                else target(*args, **kwargs))
    except Exception as e:
        failures.append(f"{_name(target)} {_desc(args)}: answered, but eager raises {type(e).__name__}: {e}")
        return
    have = (tuple(got.shape), got.stride(), got.dtype, got.requires_grad, got.is_leaf)
    ref = (tuple(want.shape), want.stride(), want.dtype, want.requires_grad, want.is_leaf)
    if have != ref:
        failures.append(f"{_name(target)} {_desc(args)}: {have} != eager {ref}")


def test_linear_layer_norm_and_masked_fill_agree_with_eager():
    import torch.nn.functional as F
    failures, counts = [], {"answered": 0, "declined": 0}
    with torch.enable_grad():
        for lay, dtype, grad in itertools.product(X_LAYOUTS, FLOATS + [torch.int64, torch.bool],
                                                  (False, True)):
            if grad and not dtype.is_floating_point:
                continue
            x = _real(LAYOUTS[lay][0], dtype, grad)
            n = x.shape[-1] if x.dim() else 1
            for wdtype in {dtype, torch.float32}:
                if not wdtype.is_floating_point and wdtype != torch.int64:
                    continue
                w, b = _make((5, n), wdtype), _make((5,), wdtype)
                _check_composite(F.linear, [x, w, b], {}, failures, counts)
                _check_composite(F.linear, [x, w], {}, failures, counts)
                _check_composite(F.linear, [x, w, _make((1, 5), wdtype)], {}, failures, counts)
                if x.dim():
                    norm = tuple(x.shape[-1:])
                    _check_composite(F.layer_norm, [x, norm, _make(norm, wdtype), _make(norm, wdtype)],
                                     {}, failures, counts)
                    _check_composite(F.layer_norm, [x, norm], {"eps": 1e-6}, failures, counts)
                    _check_composite(F.layer_norm, [x, tuple(x.shape[-2:])], {}, failures, counts)
            for mask_shape in [tuple(x.shape), tuple(x.shape[-1:]), (1,) * x.dim(), (2,) + tuple(x.shape)]:
                mask = torch.rand(mask_shape) > 0.5
                for value in (0.5, -1, True, float("-inf")):
                    _check_composite("masked_fill", [x, mask, value], {}, failures, counts)
                    _check_composite(torch.masked_fill, [x, mask, value], {}, failures, counts)
    assert not failures, f"{len(failures)} disagreements:\n" + "\n".join(failures[:40])
    assert counts["answered"] > 300, counts


def test_under_no_grad_and_inference_mode():
    x = _to_meta(_make((3, 4), torch.float32)).requires_grad_(True)
    with torch.no_grad():
        out = mp.run(operator.mul, [x, 2.0], {})
        assert not out.requires_grad and out.is_leaf
    with torch.inference_mode():
        y = torch.empty(3, 4, device="meta")
        assert mp.run(torch.sigmoid, [y], {}).is_inference()


def test_forms_it_does_not_know_are_declined():
    x = torch.empty(3, 4, device="meta")
    with torch.autocast("cpu", dtype=torch.bfloat16):   # autocast's dtypes: torch's kernels
        assert mp.run(torch.nn.functional.linear, [x, torch.empty(5, 4, device="meta")], {}) is None
    assert mp.run(torch.add, [x, x], {"alpha": 2}) is None          # a keyword: torch's kernel
    assert mp.run(torch.add, [x, x, 2], {}) is None                 # positional alpha
    assert mp.run(torch.sin, [torch.empty(3, dtype=torch.complex64, device="meta")], {}) is None
    assert mp.run(torch.where, [x], {}) is None                     # data-dependent form
    assert mp.run(torch.matmul, [x, x.t()], {}) is None             # not pointwise
    assert mp.run(torch.add, [x, torch.empty(5, device="meta")], {}) is None  # does not broadcast
    assert mp.run(operator.add, [x, 2 ** 70], {}) is None           # no dtype holds it: eager raises


_COLD = textwrap.dedent("""
    import sys, torch, pydynamo
    pydynamo.config.warm_start = False
    torch.manual_seed(0)
    lin = torch.nn.Linear(8, 4)
    def f(x, y):
        h = torch.relu(lin(x * 2 + y)).sigmoid()
        return torch.where(h > 0.5, h, -h) - 1, (~(h < 0.2)).float() / 3
    x, y = torch.randn(3, 8), torch.randn(3, 8)
    with torch.no_grad():
        out = pydynamo.optimize(f)(x, y)
        want = f(x, y)
    assert all(torch.allclose(a, b) and a.stride() == b.stride() and a.dtype == b.dtype
               for a, b in zip(out, want)), (out, want)
    print("DYNAMO", "torch._dynamo" in sys.modules)
""")


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_cold_compile_of_pointwise_and_linear_does_not_import_torch_dynamo(tmp_path, backend):
    code = _COLD.replace("optimize(f)", f"optimize(f, backend={backend!r})")
    env = dict(os.environ, PYDYNAMO_CACHE_DIR=str(tmp_path))
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                       timeout=600)
    assert r.returncode == 0, r.stderr[-3000:]
    assert "DYNAMO False" in r.stdout, r.stdout + r.stderr[-2000:]

"""fp16 and bf16 in the C++ kernels (issue 16's CPU autocast, issue 18's CPU half graphs).

Half tensors are stored as their 16 bits and computed in float: a load widens exactly, a store
rounds to nearest even as c10::BFloat16/c10::Half do, a conversion to a half type rounds
(codegen/kernel_printer.py `to_dtype`, codegen/cpp.py's pd_float_to_bf16/pd_float_to_fp16).
Checked: every 16-bit pattern widens and narrows back bit for bit; float -> half rounding equals
eager's bit for bit on values spanning both types' ranges (denormals, overflow, ties, inf, NaN);
fused graphs equal eager within two units in the last place and run as C++ kernels, not eagerly.
"""
import pytest
import torch
import torch.nn.functional as F

import codegen
import pydynamo

HALF = [torch.bfloat16, torch.float16]


def _compiled(fn):
    pydynamo.reset()
    codegen.counters.clear()
    return pydynamo.optimize(fn, backend="codegen")


def _native():
    assert codegen.counters["cpp_graphs_compiled"] >= 1 and \
        not codegen.counters["eager_fallback_graphs"], dict(codegen.counters)


def _bits(t):
    return t.view(torch.int16)


@pytest.mark.parametrize("dtype", HALF)
def test_every_bit_pattern_widens_and_narrows_back_exactly(dtype):
    h = torch.arange(-2 ** 15, 2 ** 15, dtype=torch.int32).to(torch.int16).view(dtype)
    f = _compiled(lambda t: (t.float() * 1.0).to(dtype))   # (+ 0.0 would turn -0 into 0)
    got = f(h)
    _native()
    nan = h.isnan()
    assert torch.equal(_bits(got)[~nan], _bits(h)[~nan])
    assert got[nan].isnan().all()
    wide = _compiled(lambda t: t.float() * 1.0)(h)
    assert torch.equal(wide[~nan], h.float()[~nan]) and wide[nan].isnan().all()


@pytest.mark.parametrize("dtype", HALF)
def test_float_to_half_rounds_like_eager_bit_for_bit(dtype):
    torch.manual_seed(0)
    n = 1 << 18
    v = torch.randn(n) * torch.logspace(-12, 8, n)
    fi = torch.finfo(dtype)
    edges = [float("inf"), -float("inf"), float("nan"), -0.0, 0.0, fi.max, fi.tiny,
             fi.tiny / 2, fi.smallest_normal * fi.eps, fi.smallest_normal * fi.eps / 2,
             65504.0, 65519.0, 65520.0, 1e-45, 1.0 + fi.eps / 2, 1.0 + 1.5 * fi.eps,
             3.3895313892515355e38, -6e-8, 2.98e-8]
    # ties: halfway between two representable values, both parities
    base = torch.randn(4096).to(dtype).float()
    ties = base + (base.abs() * fi.eps / 2)
    v = torch.cat([v, torch.tensor(edges), ties])
    f = _compiled(lambda t: t.to(dtype))
    got = f(v)
    _native()
    ref = v.to(dtype)
    same = (_bits(got) == _bits(ref)) | (got.isnan() & ref.isnan())
    assert same.all(), v[~same][:8].tolist()


def _block(x, y, w, b):
    a = F.gelu(x * y + 1.5)
    s = torch.softmax(a, -1)
    n = F.layer_norm(s + x, (x.shape[-1],), w, b)
    return n.sum(0), a.amax(1), (x > 0.25), x.to(torch.float32) * 3, n.mean(), x.sigmoid() * y.tanh()


@pytest.mark.parametrize("dtype", HALF)
def test_fused_block_matches_eager_within_two_ulp(dtype):
    torch.manual_seed(1)
    x, y = torch.randn(48, 40, dtype=dtype), torch.randn(48, 40, dtype=dtype)
    w, b = torch.randn(40, dtype=dtype), torch.randn(40, dtype=dtype)
    ref = _block(x, y, w, b)
    got = _compiled(_block)(x, y, w, b)
    _native()
    tol = 2 * torch.finfo(dtype).eps
    for g, r in zip(got, ref):
        assert g.dtype == r.dtype and g.shape == r.shape
        if r.dtype == torch.bool:
            assert torch.equal(g, r)
        else:
            # the column sum of 48 rows: each row may differ by an ulp
            scale = 48 if r.dim() == 1 and r.shape[0] == 40 else 1
            torch.testing.assert_close(g.float(), r.float(), rtol=tol * scale, atol=tol * scale)


def test_integer_to_half_rounds_through_float_as_eager():
    """c10 builds a half value from a float: an int64 beyond 2**24 rounds twice."""
    v = torch.tensor([2 ** 24 + 1, 2 ** 25 + 3, 16777217 * 3, -(2 ** 30) - 65, 257, 2049],
                     dtype=torch.int64)
    for dtype in HALF:
        got = _compiled(lambda t: (t + 0).to(dtype))(v)
        _native()
        assert torch.equal(_bits(got), _bits(v.to(dtype)))


# Regressions found by the bf16/fp16 OpInfo sweep (benchmarks/opinfo_sweep.py --variants graph
# --dtypes bfloat16,float16): each was a wrong result before its fix.

def test_rms_norm_fp16_computes_in_float_with_floats_eps():
    """Squares of fp16 values overflow fp16 from 256 on (the result was inf/0), and eager's
    default eps is float's, not fp16's."""
    torch.manual_seed(2)
    for scale in (300.0, 0.01):
        x = (torch.randn(3, 8) * scale).to(torch.float16)
        w = torch.randn(8, dtype=torch.float16)
        fn = lambda x, w: F.rms_norm(x, (8,), w)
        got = _compiled(fn)(x, w)
        _native()
        torch.testing.assert_close(got, fn(x, w), rtol=2e-3, atol=2e-3)


@pytest.mark.parametrize("dtype", HALF)
def test_norm_statistics_have_the_cpu_kernels_dtype(dtype):
    """The meta kernels give CUDA's float32 statistics; eager's CPU kernels return them in the
    input's dtype (pydynamo.meta.device_results): codegen used to return float32."""
    torch.manual_seed(3)
    x, w = torch.randn(2, 3, 4, dtype=dtype), torch.randn(4, dtype=dtype)
    fn = lambda x, w: torch.native_layer_norm(x, [4], w, w, 1e-5)
    got, ref = _compiled(fn)(x, w), fn(x, w)
    assert [t.dtype for t in got] == [t.dtype for t in ref] == [dtype] * 3
    for g, r in zip(got, ref):
        torch.testing.assert_close(g, r, rtol=2 * torch.finfo(dtype).eps, atol=1e-2)
    xb, rm, rv = torch.randn(6, 4, dtype=dtype), torch.zeros(4, dtype=dtype), torch.ones(4, dtype=dtype)
    bn = lambda x, w, rm, rv: torch.native_batch_norm(x, w, w, rm, rv, False, 0.1, 1e-5)
    got, ref = _compiled(bn)(xb, w, rm, rv), bn(xb, w, rm, rv)
    assert [(t.dtype, t.shape) for t in got] == [(t.dtype, t.shape) for t in ref]


@pytest.mark.parametrize("dtype", HALF)
def test_trunc_division_truncates_the_rounded_quotient(dtype):
    """-3.8906 / -0.2168 is 17.95: eager rounds it to bf16's 18.0 before truncating."""
    a = torch.tensor([-3.890625, 7.0, -9.5, 100.0], dtype=dtype)
    b = torch.tensor([-0.216796875, 0.3, 0.7, 3.01], dtype=dtype)
    fn = lambda a, b: torch.div(a, b, rounding_mode="trunc")
    got = _compiled(fn)(a, b)
    _native()
    assert torch.equal(got, fn(a, b)), (got, fn(a, b))

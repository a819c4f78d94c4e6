"""The C++ path's mean/variance reduction (codegen/cpp.py, emit_reduction's "welford": a sum
pass, then a pass of squared deviations) accumulates like a sum: a float32 row of at most
SMALL_FLOAT_SUM elements in float (16 simd lanes), longer rows and float64 in double. BERT's
add + LayerNorm over 768 ran in double lanes, each kernel about 20% slower at one thread
than torch.compile's (37 us against 36 for its float Welford, 31 us in float: issue 18's
CPU line). In float, the second pass also sums the deviations and corrects the mean and m2
by them: rows far from zero (300 + randn) stay as accurate as in double (without it, a
LayerNorm's outputs were off by 1.4e-4 there, eager's by 1.0e-4, double's by 4e-5).
Outputs against eager and a float64 reference on random inputs, at one and two OpenMP
threads."""
import re

import pytest
import torch
import torch.nn.functional as F

import codegen.cpp
from tests.codegen.test_cpp_forms import _compile, _kernel_source as _source, _seed  # noqa: F401
from tests.codegen.test_cpp_loops import threads  # noqa: F401


def add_layer_norm(a, b, w, bias):
    return F.layer_norm(a + b, (a.shape[-1],), w, bias, eps=1e-12)


def var_mean(x):
    v, m = torch.var_mean(x, dim=-1)
    return v, m


def _accumulators(src):
    """C types of the welford passes' accumulators (acc<j>_sum / acc<j>_m2)."""
    return set(re.findall(r"\b(float|double) acc\d+_(?:sum|m2) = 0;", src))


@pytest.mark.parametrize("shape", [(128, 768), (2, 33, 770), (5, 1)])
@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_short_float32_layer_norm_accumulates_in_float(shape, offset, threads):
    a = torch.randn(*shape) + offset
    b = torch.randn(*shape)
    w, bias = torch.randn(shape[-1]), torch.randn(shape[-1])
    c = _compile(add_layer_norm, a, b, w, bias)
    out = c(a, b, w, bias)
    tol = 1e-4 if offset == 0 else 3e-4       # eager's own error at offset 300: 1.0e-4
    torch.testing.assert_close(out, add_layer_norm(a, b, w, bias), rtol=tol, atol=tol)
    ref = F.layer_norm((a + b).double(), (a.shape[-1],), w.double(), bias.double(), eps=1e-12)
    # the float mean uncorrected: 1.4e-4 at offset 300 (eager's own error: 1.0e-4)
    assert (out.double() - ref).abs().max().item() < 6e-5
    assert _accumulators(_source(c)) == {"float"}, _source(c)


@pytest.mark.parametrize("rows", [64, 1])     # 1: the row split over the threads
@pytest.mark.parametrize("offset", [0.0, 300.0])
def test_float32_var_mean_matches_eager(rows, offset, threads):
    x = torch.randn(rows, 3000) * 3 + offset
    c = _compile(var_mean, x)
    v, m = c(x)
    ev, em = var_mean(x)
    torch.testing.assert_close(m, em, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(v, ev, rtol=1e-4, atol=1e-4)
    assert _accumulators(_source(c)) == {"float"}, _source(c)


@pytest.mark.parametrize("dtype,n", [(torch.float32, codegen.cpp.SMALL_FLOAT_SUM + 1),
                                     (torch.float64, 768)])
def test_long_or_double_rows_keep_double_accumulators(dtype, n, threads):
    x = torch.randn(6, n, dtype=dtype) + 50
    c = _compile(var_mean, x)
    v, m = c(x)
    ev, em = var_mean(x)
    torch.testing.assert_close(m, em)
    torch.testing.assert_close(v, ev)
    assert _accumulators(_source(c)) == {"double"}, _source(c)

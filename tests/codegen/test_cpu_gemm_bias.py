"""A linear's (or addmm's) row bias on the C++ path stays inside the extern GEMM when only kernels
read the product, for products of at least Backend.gemm_bias_min_numel elements (issue 18's
BERT-base lines): the product without its bias is a beta-0 GEMM, slower on CPU in the model than
addmm's copy of the bias then beta-1 GEMM (codegen/pipeline.py has the figures). Below the bound,
and on the Triton path (cuBLAS's rule), the bias joins the consumer kernel as before. Each case
compares against eager on random inputs and checks the extern call the wrapper makes."""
from __future__ import annotations

import os
import re
import sys

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from codegen.pipeline import Backend  # noqa: E402
from differential import assert_same_as_eager  # noqa: E402
from test_gemm_epilogue import _compiled  # noqa: E402  (wrapper-source spy)

BOUND = Backend.gemm_bias_min_numel


def _extern_args(text):
    """(target, number of top-level arguments) of each extern call of the wrapper, in order."""
    out = []
    for args, name in re.findall(r"= _externs\[\d+\]\((.*)\)  # (\S+)", text):
        depth, n = 0, 1
        for c in args:
            depth += c in "([{"
            depth -= c in ")]}"
            n += c == "," and depth == 0
        out.append((name, n))
    return out


def linear_residual_layer_norm(x, w, b, r):
    # BERT's attention-output / FFN-output tail: every reader of the product is a kernel
    return F.layer_norm(F.linear(x, w, b) + r, (w.shape[0],))


def addmm_tanh_gelu(x, w, b):
    # GPT-2's Conv1D then its tanh GELU: a kernel reads the product (not fused into the extern)
    return F.gelu(torch.addmm(b, x, w), approximate="tanh") * 2


def _linear_args(rows, n=128, k=64):
    torch.manual_seed(0)
    return (torch.randn(2, rows // 2, k), torch.randn(n, k), torch.randn(n),
            torch.randn(2, rows // 2, n))


def test_bias_stays_in_linear_when_a_kernel_reads_a_large_product():
    args = _linear_args(BOUND // 128)               # product of exactly the bound's size
    out, text = _compiled(linear_residual_layer_norm, *args)
    torch.testing.assert_close(out, linear_residual_layer_norm(*args))
    assert _extern_args(text) == [("linear", 3)], text     # F.linear(x, w, b): addmm, beta 1


def test_bias_joins_the_kernel_below_the_bound():
    args = _linear_args(BOUND // 128 - 2)
    out, text = _compiled(linear_residual_layer_norm, *args)
    torch.testing.assert_close(out, linear_residual_layer_norm(*args))
    assert _extern_args(text) == [("linear", 2)], text     # the kernel adds the bias


def test_addmm_keeps_its_bias_when_a_kernel_reads_a_large_product():
    torch.manual_seed(0)
    args = (torch.randn(64, 32), torch.randn(32, 256), torch.randn(256))
    out, text = _compiled(addmm_tanh_gelu, *args)
    torch.testing.assert_close(out, addmm_tanh_gelu(*args))
    assert _extern_args(text) == [("addmm", 3)], text
    small = (torch.randn(8, 32), torch.randn(32, 16), torch.randn(16))
    out, text = _compiled(addmm_tanh_gelu, *small)
    torch.testing.assert_close(out, addmm_tanh_gelu(*small))
    assert [name for name, _ in _extern_args(text)] == ["mm"], text


def test_triton_path_keeps_the_bias_in_the_kernel():
    # cuBLAS's rule is unchanged: the bias joins the consumer kernel whatever the size
    args = _linear_args(BOUND // 128)
    out, text = _compiled(linear_residual_layer_norm, *args, backend="triton")
    torch.testing.assert_close(out, linear_residual_layer_norm(*args))
    assert _extern_args(text) == [("linear", 2)], text


def test_bias_in_extern_under_dynamic_rows_equals_eager():
    # the bound reads the example's sizes; other row counts run the same wrapper
    def make(rows):
        return lambda: _linear_args(rows)
    assert_same_as_eager(linear_residual_layer_norm, [make(r) for r in (128, 96, 160)],
                         dynamic=True, max_fallbacks=0)


@pytest.mark.parametrize("rows", [BOUND // 128, 4])
def test_bert_layer_tail_training_step_equals_eager(rows):
    # forward and backward through the biased linear, residual and LayerNorm
    torch.manual_seed(0)
    lin, ln = torch.nn.Linear(64, 128), torch.nn.LayerNorm(128)

    def f(x, r):
        return ln(lin(x) + r).sum()
    assert_same_as_eager(f, [lambda: (torch.randn(2, rows // 2, 64, requires_grad=True),
                                      torch.randn(2, rows // 2, 128))] * 2)

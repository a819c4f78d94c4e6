"""A column-wise sum of many rows (bias and norm-weight gradients) is two reductions on the Triton
path (codegen/lowering.py SPLIT_CHUNK): partial sums over row chunks, then their sum; values,
dtypes and shapes as eager's; row sums, short columns and the C++ path stay one reduction."""
import pytest
import torch

import codegen
import pydynamo

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _fresh():
    pydynamo.reset()
    yield
    pydynamo.reset()


def _compiled(fn, *args, kernels="triton"):
    before = codegen.counters["kernels"]
    out = pydynamo.optimize(fn, options={"backend_kernels": kernels})(*args)
    return out, codegen.counters["kernels"] - before


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_column_sums_split_and_match_eager(dtype, monkeypatch):
    def f(g, x):
        return (g * x).sum((0, 1)), g.sum(0, keepdim=True).sum(1, keepdim=True)
    torch.manual_seed(0)
    g, x = (torch.randn(4, 512, 48, dtype=dtype, device=DEVICE),
            torch.randn(4, 512, 48, dtype=dtype, device=DEVICE))
    out, n = _compiled(f, g, x)
    want = f(g, x)
    for a, b in zip(out, want):
        assert a.shape == b.shape and a.dtype == b.dtype and a.stride() == b.stride()
        # 2048 products of two normals: |sum| ~ 45, where bfloat16's spacing is 0.25
        tol = dict(rtol=1e-4, atol=1e-3) if dtype == torch.float32 else dict(rtol=1e-2, atol=0.5)
        torch.testing.assert_close(a, b, **tol)
    against64 = (g.double() * x.double()).sum((0, 1))
    assert (out[0].double() - against64).abs().max() <= (want[0].double() - against64).abs().max() + \
        (1e-3 if dtype == torch.float32 else 0.5)
    from codegen.gpu_wrapper import TritonBackend
    monkeypatch.setattr(TritonBackend, "split_reductions", False)
    pydynamo.reset()
    _, unsplit = _compiled(f, g, x)
    assert n == unsplit + 1       # (g*x)'s partials; g's column sums (512 rows) are not split


def test_row_sums_and_the_cpp_path_do_not_split():
    def f(g):
        return g.sum(-1), g.sum(0)
    g = torch.randn(2048, 48, device=DEVICE)
    out, n = _compiled(f, g)
    assert n == 3         # the row sum; the column sum as partials, then their total
    for a, b in zip(out, f(g)):
        torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)
    if DEVICE == "cpu":
        out, n = _compiled(f, g, kernels="cpp")
        assert n <= 2
        for a, b in zip(out, f(g)):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-3)

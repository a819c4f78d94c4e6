"""Dynamic shapes on the Triton path (CPU: TRITON_INTERPRET=1; GPU: real kernels): kernels take
the size symbols as arguments, the wrapper computes launch grids and allocations from them, and
one compiled module serves every size with eager's values and no eager fallback."""
import os
import sys

import pytest
import torch
import torch.fx
import torch.nn.functional as F

import codegen

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "codegen"))
from test_dynamic import TinyGPTBlock  # noqa: E402
from differential import assert_values_equal  # tests/differential.py: exact ints, dtype tolerances

DEV = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def serves_all_sizes(fn, make, dynamic, sizes=(5, 17, 64, 100), tol=1e-4):
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    c = codegen.compile_fx(gm, list(make(sizes[0])), strict=True, dynamic=dynamic,
                           backend_kernels="triton")
    assert not c.stats.fallback, c.stats.fallback
    mism, built = codegen.counters["input_mismatch_calls"], codegen.counters["graphs_compiled"]
    for n in sizes:
        args = make(n)
        assert_values_equal(c(*args), gm(*args), rtol=tol, atol=tol)
    assert codegen.counters["input_mismatch_calls"] == mism
    assert codegen.counters["graphs_compiled"] == built
    return c, open(c.wrapper_path).read()


def randn(*size):
    return torch.randn(*size, device=DEV)


def test_pointwise_grid_and_allocations_come_from_the_size_arguments():
    y = randn(16)

    def f(x, z):
        a = torch.sin(x) * 2 + y - z
        return F.gelu(a) * torch.sigmoid(z), (a * z).abs()
    c, src = serves_all_sizes(f, lambda n: (randn(n, 16), randn(n, 1)), {0: [0], 1: [0]})
    assert "s0 = arg0.shape[0]" in src and "_empty_float32(((16 * s0),)" not in src
    assert "_empty_float32((s0, 16)" in src
    launch = next(ln for ln in src.splitlines() if ln.strip().startswith("kernel0_") and "(_stream, " in ln)
    grid, args = launch.split("  #")[0].split("(_stream, ")[1].rstrip(")").split("), ", 1)
    assert "s0" in grid and "s0" in args.split(", ")       # the grid, a kernel argument


def test_reductions_with_symbolic_length():
    w, b = randn(24), randn(24)

    def f(x):
        return (torch.softmax(x, 0), x.sum(0), x.var(0), x.amax(1), F.layer_norm(x, (24,), w, b),
                x.mean(), torch.softmax(x.t(), -1))
    c, _ = serves_all_sizes(f, lambda n: (randn(n, 24),), {0: [0]}, sizes=(5, 17, 300, 2100))
    assert "for roff in range" in c.kernel_source          # the symbolic length is looped


def test_views_slices_and_cat():
    def f(x, y):
        n = x.size(0)
        a = x.view(n, 4, 4).permute(2, 0, 1) * 2
        return (a.sum(1), x.reshape(-1)[: n * 3] + 1, x[1::3] - 1, x[-(n // 2):].abs(),
                torch.cat([x, y * 2], 0).exp(), torch.cat([x, x.sin()], 1) + 1)
    c, _ = serves_all_sizes(f, lambda n: (randn(n, 16), randn(n + 3, 16)), {0: [0], 1: [0]})
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_non_contiguous_inputs_and_externs():
    w = randn(16, 8)

    def f(x, y):
        h = torch.relu(x * 2 + y)
        return torch.tanh(h @ w) + h.sum(1, keepdim=True), (h.t() @ h).softmax(-1)
    make = lambda n: (randn(16, n).t(), randn(n, 32)[:, ::2])  # noqa: E731
    c, src = serves_all_sizes(f, make, {0: [0], 1: [0]}, tol=1e-3)
    assert "stride()" in src and c.stats.externs >= 2


def test_tiny_gpt2_block():
    m = TinyGPTBlock().eval().to(DEV)
    with torch.no_grad():
        serves_all_sizes(torch.fx.symbolic_trace(m), lambda n: (randn(2, n, 32),), {0: [1]},
                         sizes=(16, 17, 32, 64))


def test_executor_graphs_with_int_size_placeholders():
    """pydynamo(dynamic=True) graphs: int placeholders for sizes, size arithmetic nodes, sympy
    metadata; the Triton wrapper binds the symbols from the int arguments."""
    import warnings

    import pydynamo
    built = []

    def backend(gm, example_inputs):
        c = codegen.compile_fx(gm, example_inputs, strict=True, backend_kernels="triton")
        assert not c.stats.fallback, c.stats.fallback
        built.append(open(c.wrapper_path).read())
        return c

    def f(x, w):
        n = x.shape[0]
        h = (x.view(n // 2, 2, 8) * 2).sum(1)
        return torch.softmax(h @ w, -1), x[: n - 1].t().sum(1) / (n / 4)
    pydynamo.reset()
    g = pydynamo.optimize(f, backend=backend, dynamic=True)
    w = randn(8, 3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (10, 12, 40):
            x = randn(n, 8)
            assert_values_equal(g(x, w), f(x, w), rtol=1e-4, atol=1e-4)
    assert len(built) == 1 and "s0 = arg1" in built[0]

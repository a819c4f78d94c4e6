"""The Triton printer's own cases (CPU: TRITON_INTERPRET=1; GPU: real kernels): looped
reductions, half precision, identical-kernel sharing, the module cache, int64 index selection,
the output_code log, and the wrapper's device checks."""
import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import codegen
from pydynamo import config
from differential import assert_values_equal  # tests/differential.py: exact ints, dtype tolerances

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def compiled(fn, *args, **opts):
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    opts.setdefault("backend_kernels", "triton")
    return codegen.compile_fx(gm, list(args), strict=True, **opts), gm


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def test_looped_reductions_match_eager():
    x = torch.randn(3, 20000, device=DEV)       # wider than one block: chunked loops
    w, b = torch.randn(20000, device=DEV), torch.randn(20000, device=DEV)

    def f(x, w, b):
        return (torch.softmax(x, -1), F.layer_norm(x, (20000,), w, b), x.var(-1),
                x.argmax(-1), x.amin(-1), (x > 3).any(-1), (x * 1e-4 + 1).prod(-1))
    c, gm = compiled(f, x, w, b)
    assert_values_equal(c(x, w, b), gm(x, w, b), rtol=1e-4, atol=1e-4)
    assert "for roff in range" in c.kernel_source


def test_nan_propagates_through_max_and_argmax():
    x = torch.randn(4, 50, device=DEV)
    x[1, 7] = float("nan")
    x[2, 30:] = float("nan")
    c, gm = compiled(lambda x: (x.amax(-1), x.argmax(-1), x.argmin(-1), torch.maximum(x, -x)), x)
    assert_values_equal(c(x), gm(x))


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_with_fp32_accumulation(dtype):
    x, w = torch.randn(8, 300, dtype=dtype, device=DEV), torch.randn(300, dtype=dtype, device=DEV)

    def f(x, w):
        return torch.softmax(x, -1), F.layer_norm(x, (300,), w), (x * w).sum(-1), x.sigmoid() + 1
    c, gm = compiled(f, x, w)
    assert c.stats.extern_nodes == 0 and not c.stats.fallback
    out = c(x, w)
    assert all(o.dtype == dtype for o in out)
    assert_values_equal(out, gm(x, w), rtol=2e-2, atol=2e-2)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.ln = nn.LayerNorm(32)
        self.lin = nn.Linear(32, 32)        # an extern matmul: each block gets its own kernels

    def forward(self, x):
        return x + torch.tanh(self.ln(self.lin(x))) * 0.5


def test_identical_kernels_are_printed_once():
    m = nn.Sequential(*[Block() for _ in range(4)]).to(DEV)
    x = torch.randn(6, 32, device=DEV)
    with torch.no_grad():
        c, gm = compiled(torch.fx.symbolic_trace(m), x)
        assert_values_equal(c(x), m(x), rtol=1e-4, atol=1e-4)
    defs = c.kernel_source.count("@triton.jit") - 1          # minus the prod combine function
    assert c.kernel_count >= 4 and defs < c.kernel_count


def test_kernel_module_is_content_addressed():
    x = torch.randn(5, 7, device=DEV)
    c1, _ = compiled(lambda x: x.exp() * 2, x)
    c2, _ = compiled(lambda x: x.exp() * 2, x)
    assert c1.kernel_path == c2.kernel_path


def test_symbolic_sizes_use_int64_indices_and_one_kernel_serves_all():
    def f(x, y):
        return torch.softmax(x * 2, -1) + y, x.sum(0)
    y = torch.randn(16, device=DEV)
    c, gm = compiled(f, torch.randn(5, 16, device=DEV), y, dynamic={0: [0]})
    assert "to(tl.int64)" in c.kernel_source
    for n in (5, 9, 70):
        x = torch.randn(n, 16, device=DEV)
        assert_values_equal(c(x, y), gm(x, y))


def test_other_device_or_layout_runs_eagerly():
    x = torch.randn(4, 4, device=DEV)
    c, gm = compiled(lambda x: x + 1, x)
    before = codegen.counters["input_mismatch_calls"]
    xt = torch.randn(4, 4, device=DEV).t()
    with pytest.warns(UserWarning, match="differ"):
        assert_values_equal(c(xt), gm(xt))
    assert codegen.counters["input_mismatch_calls"] == before + 1


def test_output_code_log_shows_triton(capfd, monkeypatch):
    monkeypatch.setattr(config, "logs", "output_code")
    compiled(lambda x: x.abs() + 2, torch.randn(3, 3, device=DEV))
    err = capfd.readouterr().err
    assert "@triton.jit" in err and "def call(" in err


@pytest.mark.parametrize("shape", [(100, 70), (3, 40, 50), (33, 47)])
def test_transposed_reads_use_2d_tiles(shape):
    x = torch.randn(*shape, device=DEV)
    y = torch.randn(*shape[:-2], shape[-1], shape[-2], device=DEV)
    c, gm = compiled(lambda x, y: x.transpose(-1, -2) * 2 + y, x, y)
    assert_values_equal(c(x, y), gm(x, y))
    assert "yindex" in c.kernel_source and c.kernel_count == 1


def test_special_functions_at_special_values():
    x = torch.tensor([0.0, -1.0, -2.0, 0.5, 3.0, -2.5, float("inf"), float("-inf"), float("nan"),
                      1e-30, -7.25, 20.0], device=DEV)

    def f(x):
        return (torch.lgamma(x), torch.tanh(x), torch.special.erfc(x), torch.atan2(x, x + 1),
                torch.expm1(x), torch.log1p(x.abs()), torch.round(x), torch.trunc(x),
                torch.remainder(x, 1.5), torch.signbit(x))
    c, gm = compiled(f, x)
    assert_values_equal(c(x), gm(x), rtol=1e-5, atol=1e-6)


def test_graph_moving_a_tensor_to_another_device_runs_eagerly():
    other = "cpu" if DEV == "cuda" else "meta"
    x = torch.randn(3, 4, device=DEV)
    gm = torch.fx.symbolic_trace(lambda x: (x * 2).to(other))
    with pytest.warns(UserWarning, match="another device|off the graph"):
        c = codegen.compile_fx(gm, [x], backend_kernels="triton")
    assert c(x).device.type == other


def test_matches_is_the_wrapper_entry_check():
    """`matches` (the CUDA-graph runner's capture key for graphs without size symbols) accepts
    exactly the calls the wrapper runs compiled: same device, dtype, shape, stride, scalars."""
    x, y = torch.randn(8, 16, device=DEV), torch.randn(16, device=DEV)

    def f(x, y):
        return torch.softmax(x * y, -1) + x.sum()
    c, gm = compiled(f, x, y)
    matches = (c.fn if hasattr(c, "fn") else c).__globals__["matches"]
    assert matches(x, y) and matches(torch.randn(8, 16, device=DEV), y)
    assert not matches(x.double(), y)                          # dtype
    assert not matches(torch.randn(9, 16, device=DEV), y)      # shape
    assert not matches(torch.randn(16, 8, device=DEV).t(), y)  # stride
    assert not matches(x, y.to("meta"))                       # device
    counted = codegen.counters["input_mismatch_calls"]
    assert_values_equal(c(x.double(), y), gm(x.double(), y))   # and runs eagerly
    assert codegen.counters["input_mismatch_calls"] == counted + 1

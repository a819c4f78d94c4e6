"""The C++-specific forms chosen for speed keep eager's answers: the inlined float exp, and
softmax's exp computed once into a per-row scratch array (scheduler.mark_row_local)."""
import pytest
import torch
import torch.fx

import codegen


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def _compile(fn, *args):
    c = codegen.compile_fx(torch.fx.symbolic_trace(fn), list(args), strict=True)
    assert not c.stats.fallback, c.stats.fallback
    return c


def _kernel_source(c):
    src = open(c.library_path[:-3] + ".cpp").read()
    return src[src.index('extern "C" int kernel0'):]


SPECIALS = [float("inf"), float("-inf"), float("nan"), 0.0, -0.0, 88.72283, 88.7229, 89.0,
            -87.33, -87.34, -103.97, -103.98, -104.0, -150.0, 1e-30, -1e-30, 1e-45]


def test_exp_within_one_and_a_half_ulp_of_double_and_exact_at_edges():
    x = torch.cat([torch.linspace(-110, 90, 400_001), torch.randn(10_000) * 10,
                   torch.tensor(SPECIALS)])
    c = _compile(lambda a: torch.exp(a), x)
    assert "pd_exp(" in _kernel_source(c)
    out = c(x)
    ref = torch.exp(x.double())
    ref32 = ref.float()
    special = ~torch.isfinite(ref32) | (ref32 == 0) | torch.isnan(x)
    torch.testing.assert_close(out[special], ref32[special], rtol=0, atol=0, equal_nan=True)
    normal = ~special & (ref32.abs() >= torch.finfo(torch.float32).tiny)
    ulp = torch.nextafter(ref32, torch.tensor(float("inf"))) - ref32
    err = ((out.double() - ref).abs() / ulp.double())[normal]
    assert err.max().item() <= 1.5, err.max().item()
    sub = ~special & ~normal                   # denormal results: within one denormal step
    assert ((out.double() - ref).abs()[sub] <= 2.0 ** -149).all()
    torch.testing.assert_close(out, torch.exp(x), equal_nan=True)    # and eager's answer


def test_sigmoid_and_silu_use_it_and_match_eager():
    x = torch.cat([torch.linspace(-120, 120, 50_001), torch.tensor(SPECIALS)])
    c = _compile(lambda a: (torch.sigmoid(a), torch.nn.functional.silu(a)), x)
    for o, r in zip(c(x), (torch.sigmoid(x), torch.nn.functional.silu(x))):
        torch.testing.assert_close(o, r, equal_nan=True)


@pytest.mark.parametrize("shape", [(64, 1000), (2, 3, 7, 129), (5, 1)])
def test_softmax_exp_once_in_row_scratch(shape):
    x = torch.randn(*shape) * 4
    x[..., 0, :] = float("-inf") if len(shape) > 2 else x[..., 0, :]   # a fully masked row: NaN
    if len(shape) > 2:
        x[..., 1, ::2] = float("-inf")
    c = _compile(lambda a: torch.softmax(a, -1), x)
    torch.testing.assert_close(c(x), torch.softmax(x, -1), equal_nan=True)
    src = _kernel_source(c)
    assert c.kernel_count == 1
    assert src.count("pd_exp(") == 1, src            # not recomputed for the scaling pass
    assert f"[{shape[-1]}];" in src                  # the per-row scratch array
    wrapper = open(c.wrapper_path).read()
    assert wrapper.count("_empty(") == 1, wrapper    # only the output is allocated


def test_long_rows_keep_a_buffer_and_other_dims_recompute():
    x = torch.randn(3, 20_000)
    c = _compile(lambda a: torch.softmax(a, -1), x)
    torch.testing.assert_close(c(x), torch.softmax(x, -1))
    assert open(c.wrapper_path).read().count("_empty(") == 2    # past ROW_LOCAL_MAX: memory
    y = torch.randn(40, 6, 9)
    c = _compile(lambda a: (torch.softmax(a, 0), torch.softmax(a, 1)), y)
    for o, r in zip(c(y), (torch.softmax(y, 0), torch.softmax(y, 1))):
        torch.testing.assert_close(o, r)


def test_attention_block_softmax_matches_eager():
    import math
    import torch.nn.functional as F

    def attn(q, k, v, mask):
        a = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
        a = a.masked_fill(mask == 0, float("-inf"))
        return F.softmax(a, dim=-1) @ v
    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    mask = torch.tril(torch.ones(16, 16)).view(1, 1, 16, 16)
    c = _compile(attn, q, k, v, mask)
    torch.testing.assert_close(c(q, k, v, mask), attn(q, k, v, mask))
    assert _kernel_source(c).count("pd_exp(") == 1

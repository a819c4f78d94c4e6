"""The C++-specific forms chosen for speed keep eager's answers: the inlined float exp, and
softmax's exp computed once into a per-row scratch array (scheduler.mark_row_local)."""
import re

import pytest
import torch
import torch.fx

import codegen
from codegen import codecache


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
    assert wrapper.count(" = _empty_float32(") == 1, wrapper    # only the output is allocated


def test_long_rows_keep_a_buffer_and_other_dims_recompute():
    x = torch.randn(3, 20_000)
    c = _compile(lambda a: torch.softmax(a, -1), x)
    torch.testing.assert_close(c(x), torch.softmax(x, -1))
    assert open(c.wrapper_path).read().count(" = _empty_float32(") == 2    # past ROW_LOCAL_BYTES: memory
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


def test_bool_buffers_cross_kernels_as_bytes():
    """A bool mask read through `const bool*` made g++ branch on every element (the masked
    attention softmax ran 4-7x slower than eager); kernels take bool buffers as uint8_t and
    compare loads with 0. Bool outputs are stored as 0/1 bytes, as torch's bool tensors."""
    import torch.nn.functional as F

    def f(a, keep):
        masked = F.softmax(a.masked_fill(~keep, float("-inf")), dim=-1)
        return masked, (masked > 0.1) & keep
    a = torch.randn(4, 33, 40)
    keep = torch.rand(33, 40) > 0.3
    keep[:, 0] = True                      # no fully masked row (eager gives NaN there too)
    c = _compile(f, a, keep)
    src = _kernel_source(c)
    assert "const bool*" not in src and "bool* __restrict__" not in src
    assert re.search(r"const uint8_t\* __restrict__ arg1", src), src[:400]
    assert re.search(r"\(arg1\[[^]]+\] != 0\)", src)
    out, flags = c(a, keep)
    ref, ref_flags = f(a, keep)
    torch.testing.assert_close(out, ref)
    assert flags.dtype == torch.bool and torch.equal(flags, ref_flags)
    assert flags.view(torch.uint8).max().item() == 1     # stored as 0/1, not as other bytes


@pytest.mark.skipif(not codecache.vector_math_available(),
                    reason="x86-64 Linux g++ only (checks g++'s vectorizer report)")
def test_exp_loop_vectorizes_without_avx512(tmp_path):
    """pd_expf is branch-free so that AVX2 machines vectorize it too (they have no masked ops
    to if-convert with; a regression here costs 8x on them, not a wrong answer)."""
    import subprocess
    x = torch.randn(64, 1000)
    c = _compile(lambda a: torch.softmax(a, -1), x)
    src = open(c.library_path[:-3] + ".cpp").read()
    line = 1 + src[:src.index("pd_exp(tmp")].count("\n")
    cmd = [codecache.CXX] + codecache.CXXFLAGS + ["-mno-avx512f", "-fopt-info-vec-optimized",
                                                 c.library_path[:-3] + ".cpp", "-o",
                                                 str(tmp_path / "k.so")]
    r = subprocess.run(cmd, capture_output=True, text=True)
    assert r.returncode == 0, r.stderr[-2000:]
    loops = [ln for ln in r.stderr.splitlines() if "loop vectorized" in ln]
    # g++ reports the exp loop at its first statement, the load two lines above pd_exp
    assert any(f".cpp:{line - 2}:" in ln for ln in loops), (line, loops)


REDUCERS = {
    "sum": lambda a: a.sum(-1), "amax": lambda a: a.amax(-1), "amin": lambda a: a.amin(-1),
    "prod": lambda a: (a * 0.1 + 1).prod(-1), "var": lambda a: a.var(-1),
    "any": lambda a: (a > 0.99).any(-1), "argmax": lambda a: a.argmax(-1),
}


@pytest.mark.parametrize("shape", [(37, 300), (2, 70_000)])   # row-parallel / split rows
@pytest.mark.parametrize("red", sorted(REDUCERS))
def test_pointwise_computed_in_the_following_reduction_loop(red, shape):
    def f(x):
        # exact arithmetic (bit-equal to eager, so argmax ties break alike); an output too, so
        # it is a real node of the kernel, stored in the loop of the reduction after it
        a = x * 1.5 - 0.25
        return a, REDUCERS[red](a), a.sum(-1)
    x = torch.randn(*shape)
    c = _compile(f, x)
    for o, r in zip(c(x), f(x)):
        torch.testing.assert_close(o, r, rtol=1e-4, atol=1e-4)
    src = _kernel_source(c)
    assert src.count("static_cast<float>(1.5)") == 1, src     # computed once per element
    assert c.kernel_count == 1
    if red in ("sum", "amax", "amin", "prod", "var", "any"):   # merged: stored in that loop
        loop = src[src.index("for (int64_t r1_0"):]
        assert re.search(r"buf\d+\[[^\]]*\] = tmp", loop[:loop.index("}")]), src


def test_row_scratch_per_kernel_is_bounded():
    """Two softmaxes over the same rows share a kernel; their scratch rows together must stay
    within ROW_LOCAL_BYTES of each thread's stack, so the second one keeps a buffer."""
    from codegen.scheduler import ROW_LOCAL_BYTES
    n = ROW_LOCAL_BYTES // 4 // 2 + 8            # one fits, two do not
    x = torch.randn(4, n)

    def f(a):
        return torch.softmax(a, -1) + torch.softmax(a * 2, -1)
    c = _compile(f, x)
    torch.testing.assert_close(c(x), f(x))
    src = _kernel_source(c)
    assert src.count(f"[{n}];") == 1, src
    assert open(c.wrapper_path).read().count(" = _empty_float32(") == 2


def _simd_loop_bodies(src):
    """The text of every innermost `#pragma omp simd` loop's body."""
    out = []
    for m in re.finditer(r"#pragma omp simd[^\n]*\n\s*for \([^)]*\) \{\n", src):
        body = src[m.end():]
        out.append(body[:body.index("\n        }") if "\n        }" in body else len(body)])
    return out


def test_row_invariant_values_leave_the_vectorized_loop():
    """Loop-invariant code motion (codegen/kernel_printer.py `hoist`): the cross-entropy
    backward read each row's max, sum and target and took log() of the sum once per element;
    the scalar loads under a select kept g++ from vectorizing the loop at all (16x slower
    than with them hoisted). They are computed once per row now; answers equal eager's."""
    def f(logits, target, g):
        lse = torch.logsumexp(logits, -1, keepdim=True)
        onehot = (target[:, None] == torch.arange(logits.shape[1])).float()
        return (torch.exp(logits - lse) - onehot) * g
    logits, target, g = torch.randn(96, 1000), torch.randint(0, 1000, (96,)), torch.rand(())
    c = _compile(f, logits, target, g)
    torch.testing.assert_close(c(logits, target, g), f(logits, target, g))
    src = _kernel_source(c)
    bodies = _simd_loop_bodies(src)
    assert bodies and not any("std::log" in b for b in bodies), src
    assert not any(re.search(r"arg1\[", b) for b in bodies), src     # the target, per row
    assert not any(re.search(r"arg2\[0\]", b) for b in bodies), src  # the 0-d scale


@pytest.mark.parametrize("shape", [(3, 0, 5), (0, 4), (2, 3)])
def test_hoisting_keeps_answers_on_collapsed_and_empty_loops(shape):
    """A collapse(k) nest must stay perfectly nested (nothing hoisted between its loops), and a
    loop with no iterations must not read what it would not have read."""
    x = torch.randn(*shape)
    b = torch.randn(shape[-1])
    row = torch.randn(*shape[:-1], 1)

    def f(x, b, row):
        return torch.tanh(x * row.exp() + b) * row.log1p().abs(), (x * row).sum(-1)
    c = _compile(f, x, b, row)
    for o, r in zip(c(x, b, row), f(x, b, row)):
        torch.testing.assert_close(o, r, equal_nan=True)


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("exponent", [2, 3, 3.0, -1, -2, -0.5])
def test_pow_by_small_exponents_multiplies_as_eager_does(exponent, dtype):
    """x ** 3 (GELU's tanh form) was a scalar std::pow per element; eager's CPU kernel
    multiplies for 2 and 3, divides for -1 and -2 and takes a root for +-0.5, and so do the
    kernels now: bit-equal answers, and a loop g++ vectorizes. (0.5 is std::sqrt, correctly
    rounded, where eager's float64 pow(x, 0.5) is 1 ulp off sqrt on some inputs.)"""
    x = torch.randn(4099, dtype=dtype) * 3
    x[:6] = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-20])
    c = _compile(lambda a: torch.pow(a, exponent), x)
    assert "std::pow" not in _kernel_source(c)
    ref = torch.pow(x, exponent)
    torch.testing.assert_close(c(x), ref, rtol=0, atol=0, equal_nan=True)

"""The inlined float tanh (pd_tanhf in codegen/cpp.py's preamble) and the codegen switches the
pointwise probe toggles: tanh within 1.5 ulp of double tanh over wide ranges, exact at the
edges (signed zeros, denormals, +-inf, NaN, saturation), eager's answer; the libm variant and
the OpenMP schedule clause change the source as asked; the vector-width flag reaches g++."""

import pytest
import torch
import torch.fx

import codegen
from codegen import codecache
from tests.codegen.test_cpp_forms import _compile, _seed  # noqa: F401 (autouse fixture)

TINY = torch.finfo(torch.float32).tiny


def _source(c):
    return open(c.library_path[:-3] + ".cpp").read()


def _wide_inputs():
    """Every scale from denormal to huge, both signs, dense around the 0.625 switch and the
    saturation near 9, and the special values."""
    mag = torch.logspace(-45, 38, 200_001, dtype=torch.float64).float()
    dense = torch.cat([torch.linspace(-12, 12, 400_001), torch.linspace(0.6, 0.65, 50_001)])
    bits = torch.randint(0, 2 ** 31 - 1, (200_000,), dtype=torch.int32).view(torch.float32)
    special = torch.tensor([0.0, -0.0, float("inf"), float("-inf"), float("nan"), 1e-45,
                            -1e-45, 1e-40, -1e-40, TINY, 0.625, -0.625, 0.62499994, 9.01, 9.02,
                            44.0, 45.0, 88.8, 1e30, -1e30, 3.4e38, -3.4e38])
    return torch.cat([mag, -mag, dense, bits, -bits, special])


def test_tanh_within_one_and_a_half_ulp_of_double_and_exact_at_edges():
    x = _wide_inputs()
    c = _compile(lambda a: torch.tanh(a), x)
    assert "pd_tanh(" in _source(c)
    out = c(x)
    ref = torch.tanh(x.double())
    ref32 = ref.float()
    nan = torch.isnan(x)
    assert torch.isnan(out[nan]).all()
    edge = ~nan & ((x.abs() < 2.0 ** -13) | (ref32.abs() == 1))   # tanh(x) rounds to x or +-1
    assert torch.equal(out[edge], ref32[edge])
    assert torch.equal(torch.signbit(out[~nan]), torch.signbit(x[~nan]))  # -0 stays -0
    rest = ~nan & ~edge
    ulp = torch.nextafter(ref32.abs(), torch.tensor(float("inf"))) - ref32.abs()
    err = ((out.double() - ref).abs() / ulp.double())[rest]
    assert err.max().item() <= 1.5, err.max().item()
    torch.testing.assert_close(out, torch.tanh(x), equal_nan=True)    # and eager's answer


def test_tanh_in_double_and_in_gelu_tanh_match_eager():
    x = _wide_inputs().double()
    c = _compile(lambda a: torch.tanh(a), x)
    torch.testing.assert_close(c(x), torch.tanh(x), equal_nan=True)
    g = torch.randn(64, 257) * 4
    c = _compile(lambda a: torch.nn.functional.gelu(a, approximate="tanh"), g)
    torch.testing.assert_close(c(g), torch.nn.functional.gelu(g, approximate="tanh"))


def _compile_with(options, fn, *args):
    """_compile with codegen options (the switches the probe toggles)."""
    c = codegen.compile_fx(torch.fx.symbolic_trace(fn), list(args), strict=True, **options)
    assert not c.stats.fallback, c.stats.fallback
    return c


def test_libm_tanh_switch_changes_the_source_not_the_answer():
    x = torch.randn(5000) * 5
    c = _compile_with(dict(cpp_tanh="libm"), lambda a: torch.tanh(a) + 1, x)
    assert "#define PD_LIBM_TANH 1" in _source(c)
    torch.testing.assert_close(c(x), torch.tanh(x) + 1)
    with pytest.raises(ValueError, match="cpp_tanh"):
        _compile_with(dict(cpp_tanh="bogus"), lambda a: torch.tanh(a) + 2, x)


@pytest.mark.parametrize("sched", ["static,4096", "dynamic,1024", "guided"])
def test_omp_schedule_switch(sched):
    x, y = torch.randn(100_003), torch.randn(64, 1031)
    c = _compile_with(dict(omp_schedule=sched), lambda a, b: (torch.sin(a) * 2, b * 3 + 1), x, y)
    assert _source(c).count(f"schedule({sched})") == 2       # the 1-D and the 2-D nest
    for o, r in zip(c(x, y), (torch.sin(x) * 2, y * 3 + 1)):
        torch.testing.assert_close(o, r)


@pytest.mark.skipif(not codecache.vector_math_available(), reason="x86-64 Linux g++ only")
def test_vector_width_flag():
    assert "-mprefer-vector-width=512" in codecache.cxxflags()
    assert codecache.cxxflags("native") == codecache.CXXFLAGS
    assert codecache.cxxflags("256")[-1] == "-mprefer-vector-width=256"
    x = torch.randn(3000)
    c256 = _compile_with(dict(vector_width="256"), lambda a: torch.cos(a) - 1, x)
    c512 = _compile_with(dict(vector_width="512"), lambda a: torch.cos(a) - 1, x)
    assert c256.library_path != c512.library_path          # the flags are part of the key
    for c in (c256, c512):
        torch.testing.assert_close(c(x), torch.cos(x) - 1)
    with pytest.raises(ValueError):
        codecache.cxxflags("1024")


@pytest.mark.skipif(not codecache.vector_math_available(), reason="x86-64 Linux g++ only")
@pytest.mark.parametrize("shape", [(4096,), (3, 1000)])
def test_small_kernels_still_vectorize(shape):
    """Below PARALLEL_MIN_WORK the loop runs on one thread; the if clause must say `parallel:`
    or it switches the simd part off as well (then sin is called one float at a time)."""
    def f(a):   # selects (relu, pd_exp's clamps) next to the calls: g++ must if-convert them
        return torch.relu(torch.sin(a)) * torch.sigmoid(a) + torch.cos(a * 3) - torch.tanh(a)
    x = torch.randn(*shape) * 5
    c = _compile(f, x)
    assert "if(parallel: 0)" in _source(c)
    assert b"_ZGV" in open(c.library_path, "rb").read()     # libmvec's vector sin/cos linked
    torch.testing.assert_close(c(x), f(x))


@pytest.mark.skipif(not codecache.vector_math_available(), reason="x86-64 Linux g++ only")
@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
def test_sin_and_cos_of_one_value_vectorize(dtype):
    """g++ merges sin(x) and cos(x) into sincos, which has no vector form, unless the calls go
    through the pd_vsin/pd_vcos names (a rotary embedding's pattern)."""
    x = (torch.randn(64, 1000) * 30).to(dtype)
    def f(a):
        return torch.relu(torch.sin(a)) * 2 + torch.cos(a)
    c = _compile(f, x)
    lib = open(c.library_path, "rb").read()
    assert b"_ZGV" in lib and b"sincos" not in lib
    torch.testing.assert_close(c(x), f(x))

"""Python float graph inputs as kernel arguments (codegen/scalars.py), C++ path.

One compiled graph serves every float value: eager's values (a float scalar with an fp32 tensor
is rounded to fp32 first; with an int tensor the result is the default float dtype; with fp64 it
stays a double), no eager fallback, no warning, no second compile. Where a float reaches
something a kernel argument cannot be (here: a size), the graph is compiled with the float as a
checked constant instead (counted), and a new value runs eagerly: never a wrong answer.

tests/codegen_triton/test_float_args_triton.py runs the same cases on the Triton printer (the
`kernels` fixture)."""
import math
import warnings

import pytest
import torch
import torch.fx
import torch.nn.functional as F

import codegen
import pydynamo

VALUES = (0.75, 1 / 3, -2.5, 1e-3, 7.0, 0.1)


@pytest.fixture
def kernels():
    return "cpp"


@pytest.fixture(autouse=True)
def _fresh():
    torch.manual_seed(0)
    pydynamo.reset()
    yield
    pydynamo.reset()


def counts():
    keys = ("graphs_compiled", "input_mismatch_calls", "eager_fallback_graphs",
            "float_specialized_graphs")
    return {k: codegen.counters[k] for k in keys}


def serves_all_values(fn, make, kernels, values=VALUES, exact=False, tol=1e-5):
    """compile_fx on fn's FX graph with the first value, then every value: eager's results and
    dtypes, one compile, no eager run, no warning. Returns the compiled callable."""
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    before = counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        c = codegen.compile_fx(gm, list(make(values[0])), strict=True, backend_kernels=kernels)
        assert not c.stats.fallback, c.stats.fallback
        assert hasattr(c, "kernel_source") == (kernels == "triton")
        for v in values:
            args = make(v)
            got, want = c(*args), fn(*args)
            for g, w in zip(_flat(got), _flat(want)):
                assert g.dtype == w.dtype
                if exact:
                    assert torch.equal(g, w), (v, (g - w).abs().max())
                else:
                    torch.testing.assert_close(g, w, rtol=tol, atol=tol)
    after = counts()
    assert after["graphs_compiled"] == before["graphs_compiled"] + 1
    for k in ("input_mismatch_calls", "eager_fallback_graphs", "float_specialized_graphs"):
        assert after[k] == before[k], k
    return c


def _flat(x):
    return [y for v in x for y in _flat(v)] if isinstance(x, (list, tuple)) else [x]


def test_fp32_tensor_times_a_float_rounds_the_float_to_fp32_first(kernels):
    # eager rounds 1/3 to fp32 and multiplies in fp32: bit-exact, and a double product rounded
    # afterwards would differ on some of these 4096 elements (one op per output: a fused
    # multiply-add may round once where eager rounds twice)
    x = torch.randn(4096)
    c = serves_all_values(lambda x, f: (x * f, x - f, x / f), lambda v: (x, v), kernels,
                          exact=True)
    assert "arg1" in open(c.wrapper_path).read()
    assert not torch.equal(c(x, 1 / 3)[0], (x.double() * (1 / 3)).float())


def test_fp64_tensor_keeps_the_float_a_double(kernels):
    x = torch.randn(512, dtype=torch.float64)
    serves_all_values(lambda x, f: (x * f, f - x), lambda v: (x, v), kernels, exact=True)


def test_int_tensor_times_a_float_gives_the_default_float_dtype(kernels):
    x = torch.randint(-50, 50, (300,))
    serves_all_values(lambda x, f: x * f, lambda v: (x, v), kernels, exact=True)
    serves_all_values(lambda x, f: (x + 3) / f, lambda v: (x, v), kernels)


def test_reduction_with_a_float_inside(kernels):
    x = torch.randn(8, 33)
    serves_all_values(lambda x, f: torch.softmax(x * f, -1), lambda v: (x, v), kernels)
    serves_all_values(lambda x, f: (x - f).pow(2).sum(1) * f, lambda v: (x, v), kernels,
                      tol=1e-4)


def test_ops_taking_the_float_get_the_call_s_value(kernels):
    x, y = torch.randn(6, 10), torch.randn(6, 10)
    cases = [lambda x, y, f: torch.add(x, y, alpha=f),
             lambda x, y, f: torch.clamp(x, min=f),
             lambda x, y, f: torch.pow(x.abs() + 0.5, f),
             lambda x, y, f: F.elu(x, alpha=f) + F.leaky_relu(y, f),
             lambda x, y, f: torch.lerp(x, y, f),
             lambda x, y, f: x.masked_fill(y > 0, f)]
    for fn in cases:
        serves_all_values(fn, lambda v: (x, y, v), kernels)


def test_extern_ops_receive_the_runtime_float(kernels):
    # not lowered natively: the eager op is called with this call's value
    x = torch.randn(5, 7)
    m = torch.randn(3, 5, 5)
    c = serves_all_values(lambda x, f: F.normalize(x, p=f * 2 + 1), lambda v: (x, abs(v)),
                          kernels, values=(0.5, 1.0, 1.5, 3.25))
    assert c.stats.extern_nodes >= 1
    c = serves_all_values(lambda m, f: torch.baddbmm(m, m, m, alpha=f, beta=f * f) * f,
                          lambda v: (m, v), kernels, tol=1e-4)
    assert c.stats.extern_nodes >= 1
    # a tensor factory (symbolic_trace cannot trace torch.tensor(proxy): a graph by hand)
    g = torch.fx.Graph()
    xn, fn_ = g.placeholder("x"), g.placeholder("f")
    g.output(g.call_function(torch.add, (xn, g.call_function(torch.tensor, (fn_,)))))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    serves_all_values(gm, lambda v: (x, v), kernels, exact=True)


def test_python_arithmetic_on_floats_is_computed_as_python_does(kernels):
    # (f * 3 + 1) / f rounds op by op in Python; the wrapper computes it so, once per call
    x = torch.randn(100, dtype=torch.float64)
    c = serves_all_values(lambda x, f: (x * ((f * 3 + 1) / f), x + (f - 0.1) ** 2),
                          lambda v: (x, v), kernels, exact=True)
    src = open(c.wrapper_path).read()
    assert "f0 = arg1" in src and "3" in src


def test_float_in_a_size_falls_back_to_a_checked_constant(kernels):
    # int(f) as a slice length: a size, which kernels cannot take as a float argument; the
    # graph is compiled with f constant, and another value runs eagerly (counted, warned)
    g = torch.fx.Graph()
    x, f = g.placeholder("x"), g.placeholder("f")
    n = g.call_function(int, (g.call_function(math.floor, (f,)),))
    g.output(g.call_method("narrow", (g.call_function(torch.sin, (x,)), 0, 0, n)))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    xs = torch.randn(10)
    before = codegen.counters["float_specialized_graphs"]
    c = codegen.compile_fx(gm, [xs, 4.5], strict=True, backend_kernels=kernels)
    assert codegen.counters["float_specialized_graphs"] == before + 1
    assert not c.stats.fallback
    torch.testing.assert_close(c(xs, 4.5), torch.sin(xs)[:4])
    mism = codegen.counters["input_mismatch_calls"]
    with pytest.warns(UserWarning, match="inputs differ"):
        torch.testing.assert_close(c(xs, 6.5), torch.sin(xs)[:6])
    assert codegen.counters["input_mismatch_calls"] == mism + 1


def test_a_float_the_graph_returns_is_this_call_s(kernels):
    x = torch.randn(8)

    def fn(x, f):
        return x * f, f * 2.5
    opt = pydynamo.optimize(fn, backend=_codegen_backend(kernels), dynamic=True)
    for v in VALUES:
        a, b = opt(x, v)
        torch.testing.assert_close(a, x * v, rtol=0, atol=0)
        assert b == v * 2.5


def _codegen_backend(kernels):
    def backend(gm, example_inputs):
        return codegen.compile_fx(gm, example_inputs, strict=True, backend_kernels=kernels)
    return backend


def test_automatic_dynamic_float_compiles_once_and_never_runs_eagerly(kernels):
    # the first call compiles with f a constant; the second makes f a graph input (automatic
    # dynamic); every later value reuses that graph's kernels
    x = torch.randn(16, 40)

    def fn(x, f):
        return torch.softmax(x * f, -1) + torch.clamp(x, min=f) * (f * 2 + 1)
    opt = pydynamo.optimize(fn, backend=_codegen_backend(kernels))
    before = counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v in (0.5, 0.7, 0.9, 1.3, -0.2, 0.9):
            torch.testing.assert_close(opt(x, v), fn(x, v))
    after = counts()
    assert after["graphs_compiled"] == before["graphs_compiled"] + 2
    for k in ("input_mismatch_calls", "eager_fallback_graphs", "float_specialized_graphs"):
        assert after[k] == before[k], k


def test_dynamic_true_float_compiles_once(kernels):
    x = torch.randint(0, 9, (64,))
    opt = pydynamo.optimize(lambda x, f: (x * f).sum() + f, backend=_codegen_backend(kernels),
                            dynamic=True)
    before = counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for v in VALUES:
            torch.testing.assert_close(opt(x, v), (x * v).sum() + v)
    after = counts()
    assert after["graphs_compiled"] == before["graphs_compiled"] + 1
    assert after["input_mismatch_calls"] == before["input_mismatch_calls"]


def test_floats_mixed_with_symbolic_sizes_and_tensor_factories(kernels):
    # size * float is a float the wrapper computes from the call's size and value; factories
    # (full_like) take the call's value; one graph for every size and value
    def fn(x, f):
        return x * (x.shape[0] * f) - torch.full_like(x, f / x.shape[1]), x > f
    opt = pydynamo.optimize(fn, backend=_codegen_backend(kernels), dynamic=True)
    before = counts()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n, v in zip((3, 5, 8, 13), VALUES):
            x = torch.randn(n, 6)
            torch.testing.assert_close(opt(x, v), fn(x, v))
    after = counts()
    assert after["graphs_compiled"] == before["graphs_compiled"] + 1
    for k in ("input_mismatch_calls", "eager_fallback_graphs", "float_specialized_graphs"):
        assert after[k] == before[k], k

"""codegen/gemm.py's extern epilogues: a product's bias, residual add and ReLU/GELU taken into
its extern call (addmm, torch._addmm_activation) where that work would otherwise be a kernel of
its own reading the product again (its result is written to memory anyway: an extern or the
graph's output reads it). Each pattern's values equal eager's on random inputs, and the wrapper
says whether the fusion happened; the cases that must not fuse (a broadcast residual, a residual
written in place between the product and the add, an epilogue a kernel consumes, tanh GELU on
CPU) keep a kernel and still equal eager. The C++ path and the Triton path (under
TRITON_INTERPRET=1 on CPU) lower products alike."""
from __future__ import annotations

import os
import re
import sys
from unittest import mock

import pytest
import torch
import torch.nn.functional as F

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pydynamo  # noqa: E402
from codegen import codecache, gemm  # noqa: E402
from codegen.pipeline import Backend  # noqa: E402
from differential import assert_same_as_eager, assert_values_equal  # noqa: E402

BACKENDS = {"codegen": None, "triton": {"backend_kernels": "triton"}}


def _compiled(fn, *args, backend="codegen", mode=None):
    """fn's result under pydynamo's codegen (no_grad), with its wrappers' source."""
    sources, real = [], codecache.write_wrapper
    spy = mock.patch.object(codecache, "write_wrapper", lambda src: sources.append(src) or real(src))
    pydynamo.reset()
    options = {**(BACKENDS[backend] or {}), **({"mode": mode} if mode else {})}
    try:
        with spy, torch.no_grad():
            out = pydynamo.optimize(fn, backend="codegen", options=options or None)(*args)
    finally:
        pydynamo.reset()
    return out, "\n".join(sources)


def _calls(text):
    """The extern targets the wrapper calls, in order (the `# name` after each extern call)."""
    return re.findall(r"= _externs\[\d+\]\(.*\)  # (\S+)", text)


def _kernels(text):
    return sum(int(k) for k in re.findall(r"# (\d+) kernels", text))


def _r(*size, dtype=torch.float32):
    return torch.randn(*size, dtype=dtype)


def _check(fn, args, backend, fused, kernels=None):
    with torch.no_grad():
        want = fn(*args)
    out, text = _compiled(fn, *args, backend=backend)
    assert_values_equal(out, want)
    calls = _calls(text)
    assert calls and calls[0] == fused, (calls, text)
    if kernels is not None:
        assert _kernels(text) == kernels, text
    return text


@pytest.fixture(autouse=True)
def _small_activation_bound(monkeypatch):
    # small products here: take activations whatever the size (the bound has its own test)
    monkeypatch.setattr(Backend, "gemm_act_min_numel", 1)


@pytest.fixture(params=["codegen", "triton"])
def backend(request):
    return request.param


# ------------------------------------------------------------------ the bias

@pytest.mark.parametrize("rank", [2, 3])
def test_linear_bias_in_the_extern(backend, rank):
    x = _r(6, 16) if rank == 2 else _r(2, 6, 16)
    _check(lambda x, w, b: F.linear(x, w, b), (x, _r(24, 16), _r(24)), backend, "linear", 0)


@pytest.mark.parametrize("rank", [2, 3])
def test_matmul_plus_row_bias_is_addmm(backend, rank):
    x = _r(6, 16) if rank == 2 else _r(2, 6, 16)
    _check(lambda x, w, b: x @ w.t() + b, (x, _r(24, 16), _r(24)), backend, "addmm", 0)
    _check(lambda x, w, b: b + torch.matmul(x, w), (x, _r(16, 24), _r(24)), backend, "addmm", 0)


def test_mm_plus_row_bias_is_addmm(backend):
    _check(lambda x, w, b: torch.mm(x, w) + b, (_r(6, 16), _r(16, 24), _r(24)), backend, "addmm", 0)


# ------------------------------------------------------------------ residuals

def test_mm_plus_residual_is_addmm_of_it(backend):
    text = _check(lambda x, w, r: torch.mm(x, w) + r, (_r(6, 16), _r(16, 24), _r(6, 24)),
                  backend, "addmm", 0)
    assert re.search(r"_externs\[0\]\(arg2, arg0", text), text     # r is addmm's input


@pytest.mark.parametrize("rank", [2, 3])
def test_linear_plus_residual(backend, rank):
    lead = (6,) if rank == 2 else (2, 6)
    # a residual with no bias: the residual is the input; with a bias: their sum (one kernel)
    _check(lambda x, w, r: F.linear(x, w) + r, (_r(*lead, 16), _r(24, 16), _r(*lead, 24)),
           backend, "addmm", 0)
    _check(lambda x, w, b, r: r + F.linear(x, w, b),
           (_r(*lead, 16), _r(24, 16), _r(24), _r(*lead, 24)), backend, "addmm", 1)


def test_matmul_bias_then_residual(backend):
    _check(lambda x, w, b, r: (x @ w + b) + r, (_r(2, 6, 16), _r(16, 24), _r(24), _r(2, 6, 24)),
           backend, "addmm", 1)


def test_residual_of_a_computed_value_is_fused_into_its_producer(backend):
    # the residual's pointwise producer is the kernel that writes addmm's input
    def f(x, w, h):
        r = h.sin() * 2
        return torch.mm(x, w) + r
    _check(f, (_r(6, 16), _r(16, 24), _r(6, 24)), backend, "addmm", 1)


def test_residual_computed_after_the_product_is_not_fused(backend):
    # the graph's order computes it after the product: the add stays a kernel (a limit)
    text = _check(lambda x, w, h: torch.mm(x, w) + h.sin() * 2,
                  (_r(6, 16), _r(16, 24), _r(6, 24)), backend, "mm", 1)
    assert "addmm" not in text


# ------------------------------------------------------------------ activations

@pytest.mark.parametrize("rank", [2, 3])
def test_relu_after_linear_bias(backend, rank):
    x = _r(6, 16) if rank == 2 else _r(2, 6, 16)
    text = _check(lambda x, w, b, w2: F.linear(torch.relu(F.linear(x, w, b)), w2),
                  (x, _r(24, 16), _r(24), _r(8, 24)), backend, "_addmm_activation", 0)
    assert "use_gelu=False" in text


def test_relu_module_and_residual_relu(backend):
    relu = torch.nn.ReLU()
    _check(lambda x, w, b: relu(x @ w + b), (_r(6, 16), _r(16, 24), _r(24)), backend,
           "_addmm_activation", 0)
    _check(lambda x, w, r: F.relu(torch.mm(x, w) + r), (_r(6, 16), _r(16, 24), _r(6, 24)),
           backend, "_addmm_activation", 0)


def test_exact_gelu_after_linear_bias_on_cpu(backend):
    text = _check(lambda x, w, b: F.gelu(F.linear(x, w, b)), (_r(2, 6, 16), _r(24, 16), _r(24)),
                  backend, "_addmm_activation", 0)
    assert "use_gelu=True" in text


def test_small_cpu_activation_stays_a_kernel(backend, monkeypatch):
    # on CPU torch's fused activation is one more dispatch: below the bound our kernel is cheaper
    monkeypatch.setattr(Backend, "gemm_act_min_numel", 6 * 24 + 1)
    f = lambda x, w, b, w2: F.linear(torch.relu(F.linear(x, w, b)), w2)   # noqa: E731
    text = _check(f, (_r(6, 16), _r(24, 16), _r(24), _r(8, 24)), backend, "linear", 1)
    assert "_addmm_activation" not in text
    monkeypatch.setattr(Backend, "gemm_act_min_numel", 6 * 24)
    _check(f, (_r(6, 16), _r(24, 16), _r(24), _r(8, 24)), backend, "_addmm_activation", 0)


def test_tanh_gelu_is_not_fused(backend):
    # torch's fused GELU is erf's on CPU: the tanh one stays our kernel (bias in the extern)
    text = _check(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),
                  (_r(6, 16), _r(24, 16), _r(24)), backend, "linear", 1)
    assert "_addmm_activation" not in text


# ------------------------------------------------------------------ measured (max-autotune)

@pytest.mark.parametrize("fused", [True, False])
def test_max_autotune_takes_the_chain_only_where_measured_faster(backend, monkeypatch, fused):
    """mode="max-autotune": the chain goes into the extern only where gemm_timing measured the
    fused call faster (the timer is replaced here: CPU tensors cannot be timed with CUDA
    events); otherwise the product runs alone and the chain is a kernel."""
    asked = []
    monkeypatch.setattr(gemm.gemm_timing, "can_measure", lambda device: True)
    monkeypatch.setattr(gemm.gemm_timing, "epilogue_fused",
                        lambda *a: asked.append(a[:4]) or fused)
    f = lambda x, w, r: F.relu(F.linear(x, w) + r)      # noqa: E731
    args = (_r(6, 16), _r(24, 16), _r(6, 24))
    with torch.no_grad():
        want = f(*args)
    out, text = _compiled(f, *args, backend=backend, mode="max-autotune")
    assert_values_equal(out, want)
    assert asked == [(6, 16, 24, ("resid", "relu"))]
    assert (_calls(text) == ["_addmm_activation"]) == fused, text
    assert (_kernels(text) == 0) == fused, text


def test_max_autotune_never_takes_tanh_gelu_on_cpu(backend, monkeypatch):
    """torch's CPU _addmm_activation is erf GELU: even where a measurement said fused, the
    tanh GELU stays a kernel on CPU tensors (on CUDA it is cuBLASLt's tanh epilogue)."""
    monkeypatch.setattr(gemm.gemm_timing, "can_measure", lambda device: True)
    monkeypatch.setattr(gemm.gemm_timing, "epilogue_fused", lambda *a: True)
    f = lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh")     # noqa: E731
    args = (_r(6, 16), _r(24, 16), _r(24))
    with torch.no_grad():
        want = f(*args)
    out, text = _compiled(f, *args, backend=backend, mode="max-autotune")
    assert_values_equal(out, want)
    assert "_addmm_activation" not in text and _kernels(text) == 1, text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_max_autotune_measures_epilogues_on_the_gpu(dtype):
    """On a GPU each chain is timed both ways (positive figures, logged with the choice), the
    tanh GELU included, and the compiled results equal eager's whichever way won."""
    from codegen import gemm_timing
    torch.manual_seed(0)
    x = (torch.randn(2048, 768, device="cuda") / 768 ** 0.5).to(dtype)
    w, b = (torch.randn(3072, 768, device="cuda").to(dtype), torch.randn(3072, device="cuda")
            .to(dtype))
    r = torch.randn(2048, 3072, device="cuda").to(dtype)
    tol = {"rtol": 2e-2, "atol": 2e-2} if dtype == torch.bfloat16 else {"rtol": 1e-5, "atol": 1e-5}
    for f, args in ((lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"), (x, w, b)),
                    (lambda x, w, r: F.relu(F.linear(x, w) + r), (x, w, r))):
        pydynamo.reset()
        with torch.no_grad():
            out = pydynamo.optimize(f, mode="max-autotune")(*args)
            torch.testing.assert_close(out, f(*args), **tol)
    found = [v for k, v in gemm_timing.measured().items() if k[0] == "epilogue" and k[5] == dtype]
    assert len(found) == 2 and all(set(us) == {"fused", "separate"} and min(us.values()) > 0
                                   for _, us in found), found


def test_fused_gelu_numerics_equal_erf_gelu_on_cpu():
    """What the rule relies on: CPU's _addmm_activation(use_gelu=True) is erf GELU (not tanh)."""
    torch.manual_seed(0)
    for dtype in (torch.float32, torch.float64, torch.bfloat16):
        b, x, w = _r(64, dtype=dtype), _r(32, 48, dtype=dtype), _r(48, 64, dtype=dtype)
        ref = torch.addmm(b, x, w)
        assert torch.equal(torch._addmm_activation(b, x, w, use_gelu=True), F.gelu(ref))
        assert torch.equal(torch._addmm_activation(b, x, w), ref.relu())


# ------------------------------------------------------------------ where it must not fuse

def test_broadcast_residual_is_not_the_input(backend):
    for r in (_r(1, 24), _r(6, 1)):
        text = _check(lambda x, w, r: torch.mm(x, w) + r, (_r(6, 16), _r(16, 24), r), backend,
                      "mm", 1)
        assert "addmm" not in text


def test_residual_written_between_product_and_add(backend):
    def f(x, w, r):
        y = torch.mm(x, w)
        r.add_(1)
        return y + r
    assert_same_as_eager(f, [lambda: (_r(6, 16), _r(16, 24), _r(6, 24))] * 2, backend=backend)
    _, text = _compiled(f, _r(6, 16), _r(16, 24), _r(6, 24), backend=backend)
    assert "addmm" not in text


def test_residual_input_written_after_the_add(backend):
    # addmm reads r at the product's place, before the later write: fused and equal to eager
    def f(x, w, r):
        y = torch.mm(x, w) + r
        r.mul_(2)
        return y
    assert_same_as_eager(f, [lambda: (_r(6, 16), _r(16, 24), _r(6, 24))] * 2, backend=backend)
    _, text = _compiled(f, _r(6, 16), _r(16, 24), _r(6, 24), backend=backend)
    assert "addmm" in text


def test_epilogue_read_by_a_kernel_stays_in_the_kernel(backend):
    # the add fuses into the layer norm's kernel: no pass saved by addmm
    text = _check(lambda x, w, r: F.layer_norm(torch.mm(x, w) + r, (24,)),
                  (_r(6, 16), _r(16, 24), _r(6, 24)), backend, "mm")
    assert "addmm" not in text


def test_product_with_other_users_is_not_fused(backend):
    text = _check(lambda x, w, b: (lambda y: (y + b, y))(torch.mm(x, w)),
                  (_r(6, 16), _r(16, 24), _r(24)), backend, "mm")
    assert "addmm" not in text


def test_transposed_result_layout_is_not_fused(backend):
    # eager's `r + y` with r transposed first takes r's layout: addmm's would be row-major
    def f(x, w, r):
        return r.t() + torch.mm(x, w)
    assert_same_as_eager(f, [lambda: (_r(6, 16), _r(16, 24), _r(24, 6))] * 2, backend=backend,
                         allow_layout=False)


# ------------------------------------------------------------------ dynamic sizes, training

@pytest.mark.parametrize("case", ["bias", "residual", "relu", "gelu"])
def test_epilogues_under_dynamic_sizes(backend, case):
    f = {"bias": lambda x, w, b, r: x @ w + b,
         "residual": lambda x, w, b, r: F.linear(x, w.t(), b) + r,
         "relu": lambda x, w, b, r: torch.relu(x @ w + b) @ w.t(),
         "gelu": lambda x, w, b, r: F.gelu(torch.addmm(b, x, w)) @ w.t()}[case]

    def make(n):
        return lambda: (_r(n, 16), _r(16, 24), _r(24), _r(n, 24))
    assert_same_as_eager(f, [make(n) for n in (5, 7, 9)], backend=backend, dynamic=True,
                         max_fallbacks=0)


@pytest.mark.parametrize("case", ["residual", "matmul_bias_relu"])
def test_batched_epilogues_under_dynamic_sizes(backend, case):
    f = {"residual": lambda x, w, b, r: F.linear(x, w.t(), b) + r,
         "matmul_bias_relu": lambda x, w, b, r: F.relu(x @ w + b) @ w.t()}[case]

    def make(n):
        return lambda: (_r(2, n, 16), _r(16, 24), _r(24), _r(2, n, 24))
    assert_same_as_eager(f, [make(n) for n in (5, 7, 9)], backend=backend, dynamic=True,
                         max_fallbacks=0)


class MLP(torch.nn.Module):
    def __init__(self, act):
        super().__init__()
        self.fc1, self.fc2, self.act = torch.nn.Linear(16, 32), torch.nn.Linear(32, 16), act

    def forward(self, x):
        return x + self.fc2(self.act(self.fc1(x)))


@pytest.mark.parametrize("act", ["relu", "gelu", "gelu_tanh"])
def test_mlp_forward_and_training_step_equal_eager(backend, act):
    a = {"relu": torch.nn.ReLU(), "gelu": torch.nn.GELU(),
         "gelu_tanh": torch.nn.GELU(approximate="tanh")}[act]
    torch.manual_seed(0)
    m = MLP(a)
    x = _r(3, 5, 16)
    with torch.no_grad():
        want = m(x)
    out, text = _compiled(m, x, backend=backend)
    assert_values_equal(out, want)
    assert ("_addmm_activation" in text) == (act != "gelu_tanh"), text
    # the training path: values and gradients
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    m.zero_grad()
    m(xe).square().sum().backward()
    want_g = [p.grad.clone() for p in m.parameters()] + [xe.grad]
    m.zero_grad()
    pydynamo.reset()
    try:
        pydynamo.optimize(m, backend="codegen", options=BACKENDS[backend])(xc).square().sum().backward()
    finally:
        pydynamo.reset()
    assert_values_equal([p.grad for p in m.parameters()] + [xc.grad], want_g)

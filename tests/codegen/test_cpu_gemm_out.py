"""The C++ path's matrix products written with `out=` into a dead buffer of their exact layout
(Backend.gemm_out_reuse, codegen/wrapper.py WrapperPrinter.out_reuse), as torch.compile's externs
do (issue 18's BERT-base lines): the emitted wrapper uses out= for a repeated layer's products;
results equal eager on random inputs; a result returned by one call is never overwritten by the
next (the pool holds this call's own dead buffers only) nor by a later product of the same call
(a returned product, a buffer an extern view reads, stay out of the pool); dynamic sizes run
correctly (no out= where a size is symbolic); a training step's values and gradients equal
eager's; with the switch off nothing changes. The Triton (GPU) wrapper does the same, and there
the buffers products read and write are made 2-D so a linear takes them without a view."""
from __future__ import annotations

import contextlib
import copy
import os
import re
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import pydynamo  # noqa: E402
from codegen.ir import ArgRef, Buffer, ExternCall, Layout  # noqa: E402
from codegen.pipeline import Backend  # noqa: E402
from codegen.wrapper import _pinned  # noqa: E402
from differential import assert_same_as_eager  # noqa: E402
from test_gemm_epilogue import BACKENDS, _compiled  # noqa: E402  (wrapper-source spy)


def _outs(text):
    """The extern names of the wrapper's `out=` products, in order."""
    return re.findall(r"_externs\[\d+\]\(.*\)  # (\S+) \(out=", text)


@contextlib.contextmanager
def _reuse(on):
    old = Backend.gemm_out_reuse
    Backend.gemm_out_reuse = on
    try:
        yield
    finally:
        Backend.gemm_out_reuse = old


class Block(torch.nn.Module):
    """BERT's FFN and output tail: linear (bias in the extern at this size), GELU, linear,
    residual, LayerNorm; every product has 64 x 128 or 64 x 256 elements (over the bias bound)."""
    def __init__(self, d=128, h=256):
        super().__init__()
        self.up, self.down, self.ln = torch.nn.Linear(d, h), torch.nn.Linear(h, d), \
            torch.nn.LayerNorm(d)

    def forward(self, x):
        return self.ln(self.down(F.gelu(self.up(x))) + x)


class Stack(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Block() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def mm_chain(x, w1, w2, b):
    # plain products of one layout, each read by a kernel only: mm / addmm into reused buffers
    h = torch.tanh(x @ w1)
    h = torch.relu(torch.addmm(b, h, w2)) + h
    h = torch.tanh(h @ w1)
    return torch.relu(torch.addmm(b, h, w2)) * 2


def bmm_chain(a, w):
    h = torch.tanh(torch.bmm(a, w))
    h = torch.sigmoid(torch.bmm(h, w)) + h
    return torch.tanh(torch.bmm(h, w)) * 3


def _x(*size):
    return torch.randn(*size)


def test_repeated_layers_write_their_products_with_out():
    m = Stack().eval()
    x = _x(2, 32, 128)
    out, text = _compiled(m, x)
    with torch.no_grad():
        torch.testing.assert_close(out, m(x))
    outs = _outs(text)
    # layer 0's products are new tensors (nothing has died yet); the later layers' write into
    # the dead ones: the up projection as _addmm_activation (its GELU in the GEMM) or addmm
    assert len(outs) >= 4, text
    assert set(outs) <= {"addmm", "_addmm_activation", "mm", "linear"}, outs
    with _reuse(False):
        out_off, text_off = _compiled(m, x)
    assert _outs(text_off) == [] and "(out=" not in text_off
    torch.testing.assert_close(out_off, out)


def test_mm_and_addmm_write_with_out_and_equal_eager():
    torch.manual_seed(0)
    # weights scaled so products are ~1 (eager's tanh and the kernel's differ by ~1e-4 at 100)
    args = (_x(64, 128), _x(128, 128) / 12, _x(128, 128) / 12, _x(128))
    out, text = _compiled(mm_chain, *args)
    torch.testing.assert_close(out, mm_chain(*args))
    assert _outs(text), text


def test_bmm_writes_with_out_and_equals_eager():
    torch.manual_seed(0)
    args = (_x(4, 64, 64), _x(4, 64, 64) / 8)
    out, text = _compiled(bmm_chain, *args)
    torch.testing.assert_close(out, bmm_chain(*args))
    assert "bmm" in _outs(text), text     # the second and third products into dead ones


def test_results_held_across_calls_are_never_overwritten():
    # the first call's result (and an intermediate product it returns) must survive the second
    # call, whose products reuse only that call's own dead buffers
    m = Stack().eval()

    def f(x):
        h = m.blocks[0].up(x)          # a product returned: never pooled, never out= target
        return m(x), h

    pydynamo.reset()
    try:
        with torch.no_grad():
            opt = pydynamo.optimize(f, backend="codegen")
            x1, x2 = _x(2, 32, 128), _x(2, 32, 128)
            r1, h1 = opt(x1)
            keep_r, keep_h = r1.clone(), h1.clone()
            r2, h2 = opt(x2)
            r3, _ = opt(x1)
            want1, want2 = f(x1), f(x2)
    finally:
        pydynamo.reset()
    assert torch.equal(r1, keep_r) and torch.equal(h1, keep_h)
    torch.testing.assert_close((r1, h1), want1)
    torch.testing.assert_close((r2, h2), want2)
    torch.testing.assert_close(r3, want1[0])
    assert r1.untyped_storage().data_ptr() != r2.untyped_storage().data_ptr()


def test_buffers_an_extern_may_view_are_pinned():
    # an extern other than the products and attention may return a view of what it reads
    # (a transpose, an `as_strided` fallback): that buffer never returns to the pool, nor do the
    # graph's outputs; a buffer only products read does
    def buf(name):
        return Buffer(name, Layout.contiguous([8, 8], torch.float32))

    def ref(b):
        return ArgRef(b, (8, 8), (8, 1), 0)
    a, v, o, p = buf("a"), buf("v"), buf("o"), buf("p")
    steps = [ExternCall(torch.mm, (ref(a), ref(a)), {}),
             ExternCall(torch.Tensor.t, (ref(v),), {}),
             ExternCall(torch.nn.functional.linear, (ref(p), ref(p)), {})]
    g = SimpleNamespace(outputs=[ref(o)], mutations={})
    assert _pinned(steps, g) == {"v", "o"}


def product_viewed_by_an_extern(x, w, w2):
    y = x @ w
    u = y.unfold(0, 2, 2)           # an extern view of y; y's last use, u lives on
    q = torch.tanh(x @ w2)          # a product of y's layout after y died
    return (u * q[:32, :, None]).sum(-1)


def test_a_product_viewed_by_an_extern_is_not_overwritten():
    # regression: without the pin, the second product was written into y's buffer (dead by
    # its last use, the unfold) which the unfold's result still views
    torch.manual_seed(0)
    args = (_x(64, 64), _x(64, 64) / 8, _x(64, 64) / 8)
    out, text = _compiled(product_viewed_by_an_extern, *args)
    torch.testing.assert_close(out, product_viewed_by_an_extern(*args))
    assert "unfold" in text and _outs(text) == [], text


def test_dynamic_sizes_equal_eager():
    # symbolic rows: no buffer's byte size is known, so nothing is reused; the wrapper runs
    # every row count correctly
    m = Stack(2).eval()

    def make(rows):
        return lambda: (_x(2, rows, 128),)
    with torch.no_grad():
        assert_same_as_eager(m, [make(r) for r in (32, 24, 40)], dynamic=True, max_fallbacks=0,
                             backend="codegen")


def test_static_repeated_calls_equal_eager():
    m = Stack().eval()
    with torch.no_grad():
        assert_same_as_eager(m, [lambda: (_x(2, 32, 128),)] * 3, max_fallbacks=0,
                             backend="codegen")


def test_training_step_equals_eager():
    torch.manual_seed(0)
    m = Stack(2)
    mc = copy.deepcopy(m)
    x = _x(2, 32, 128)
    xe, xc = x.clone().requires_grad_(), x.clone().requires_grad_()
    m(xe).square().sum().backward()
    pydynamo.reset()
    try:
        opt = pydynamo.optimize(mc, backend="codegen")
        for _ in range(2):      # the second step runs the compiled graphs again
            mc.zero_grad()
            xc.grad = None
            out = opt(xc)
            out.square().sum().backward()
    finally:
        pydynamo.reset()
    torch.testing.assert_close(out, m(xe))
    for pe, pc in zip(m.parameters(), mc.parameters()):
        torch.testing.assert_close(pc.grad, pe.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=1e-4, atol=1e-4)


class Gated(torch.nn.Module):
    """Llama's MLP tail without biases: RMS norm, gate and up projections, SiLU product, down
    projection, residual; a 3-D input, so every product reads a 2-D view of a 3-D buffer."""
    def __init__(self, d=64, h=128):
        super().__init__()
        self.w = torch.nn.Parameter(torch.rand(d) + 0.5)
        self.gate, self.up = torch.nn.Linear(d, h, bias=False), torch.nn.Linear(d, h, bias=False)
        self.down = torch.nn.Linear(h, d, bias=False)

    def forward(self, x):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * self.w
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


class GatedStack(torch.nn.Module):
    def __init__(self, n=3):
        super().__init__()
        torch.manual_seed(0)
        self.blocks = torch.nn.ModuleList(Gated() for _ in range(n))

    def forward(self, x):
        for b in self.blocks:
            x = b(x)
        return x


def _product_lines(text):
    """The wrapper's product calls (linear; addmm where a residual joined the last one)."""
    return [ln.strip() for ln in text.splitlines()
            if re.search(r"_externs\[\d+\]\(.*# (linear|addmm|mm)\b", ln)]


@pytest.mark.parametrize("backend", ["codegen", "triton"])
def test_products_take_their_buffers_without_views(backend):
    """The buffers products read and write are made 2-D (WrapperPrinter._held_geometries), so
    each linear takes its input and `out=` variables as they are, where a view made per call
    costs more host time than linear's own Python (benchmarks/gpu/extern_host_probe.py); the
    Triton wrapper (the GPU's) reuses dead buffers as the C++ one does."""
    m = GatedStack().eval()
    x = _x(2, 16, 64)
    out, text = _compiled(m, x, backend=backend)
    with torch.no_grad():
        torch.testing.assert_close(out, m(x))
    lines = _product_lines(text)
    assert len(lines) == 9, text
    # a weight's transpose aside (the C++ path's residual addmm), no view of a buffer
    assert not [ln for ln in lines if re.search(r"as_strided\(buf", ln)], lines
    # layer 0's products are linear's own new 2-D results; the later layers' are written into
    # dead 2-D buffers
    assert sum("(out=)" in ln for ln in lines) >= 4, lines
    assert re.search(r"_empty_float32\(\(32, 64\), \(64, 1\)\)", text), text


def test_a_2d_buffer_read_as_3d_is_viewed():
    """A normed value read by a product (2-D) and returned (3-D): one geometry cannot serve
    both, so it keeps its planned layout and the product views it; results equal eager."""
    g = Gated().eval()

    def f(x):
        n = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + 1e-6) * g.w
        return g.gate(n), n
    x = _x(2, 16, 64)
    (y, n), text = _compiled(f, x, backend="triton")
    with torch.no_grad():
        ye, ne = f(x)
    torch.testing.assert_close((y, n), (ye, ne))
    assert n.shape == ne.shape and n.stride() == ne.stride()
    assert y.shape == ye.shape and y.stride() == ye.stride()
    assert re.search(r"_empty_float32\(\(2, 16, 64\)", text), text


@pytest.mark.parametrize("backend", ["codegen", "triton"])
@pytest.mark.parametrize("rows", [1, 3])
def test_one_row_and_one_column_products_equal_eager(backend, rows):
    """A decode step's single row (and a one-column head): no 2-D form where a size-1
    dimension's stride is the op's choice; values and strides equal eager's on every call."""
    g = GatedStack(2).eval()
    head = torch.nn.Linear(64, 1, bias=False)

    def f(x):
        y = g(x)
        return y, head(y)
    with torch.no_grad():
        assert_same_as_eager(f, [lambda: (_x(1, rows, 64),)] * 3, max_fallbacks=0,
                             backend=backend, allow_layout=False)


@pytest.mark.parametrize("backend", ["codegen", "triton"])
def test_2d_results_held_across_calls_are_never_overwritten(backend):
    """A product's 2-D result returned as the graph's 3-D output is a view of a buffer the pool
    never takes back: the next call writes elsewhere."""
    g = GatedStack(2).eval()

    def f(x):
        return g(x), g.blocks[0].gate(x)
    pydynamo.reset()
    try:
        with torch.no_grad():
            opt = pydynamo.optimize(f, backend="codegen",
                                    options=BACKENDS[backend])
            x1, x2 = _x(2, 16, 64), _x(2, 16, 64)
            r1, h1 = opt(x1)
            keep = r1.clone(), h1.clone()
            r2, h2 = opt(x2)
            want1, want2 = f(x1), f(x2)
    finally:
        pydynamo.reset()
    assert torch.equal(r1, keep[0]) and torch.equal(h1, keep[1])
    torch.testing.assert_close((r1, h1), want1)
    torch.testing.assert_close((r2, h2), want2)
    assert (h1.shape, h1.stride()) == (want1[1].shape, want1[1].stride())


@pytest.mark.parametrize("on", [False, True])
def test_switch_gives_equal_results(on):
    m = Stack().eval()
    x = _x(2, 32, 128)
    with _reuse(on):
        out, text = _compiled(m, x)
    with torch.no_grad():
        torch.testing.assert_close(out, m(x))
    assert bool(_outs(text)) == on

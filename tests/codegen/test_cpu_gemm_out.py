"""The C++ path's matrix products written with `out=` into a dead buffer of their exact layout
(Backend.gemm_out_reuse, codegen/wrapper.py WrapperPrinter.out_reuse), as torch.compile's externs
do (issue 18's BERT-base lines): the emitted wrapper uses out= for a repeated layer's products;
results equal eager on random inputs; a result returned by one call is never overwritten by the
next (the pool holds this call's own dead buffers only) nor by a later product of the same call
(a returned product, a buffer an extern view reads, stay out of the pool); dynamic sizes run
correctly (no out= where a size is symbolic); a training step's values and gradients equal
eager's; with the switch off, or on the GPU wrapper, nothing changes."""
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
from codegen.gpu_wrapper import GpuWrapperPrinter  # noqa: E402
from codegen.pipeline import Backend  # noqa: E402
from codegen.wrapper import _pinned  # noqa: E402
from differential import assert_same_as_eager  # noqa: E402
from test_gemm_epilogue import _compiled  # noqa: E402  (wrapper-source spy)


def _outs(text):
    """The extern names of the wrapper's `out=` products, in order."""
    return re.findall(r"= _externs\[\d+\]\(.*\)  # (\S+) \(out=", text)


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
    assert set(outs) <= {"addmm", "_addmm_activation", "mm"}, outs
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
        assert_same_as_eager(m, [make(r) for r in (32, 24, 40)], dynamic=True, max_fallbacks=0)


def test_static_repeated_calls_equal_eager():
    m = Stack().eval()
    with torch.no_grad():
        assert_same_as_eager(m, [lambda: (_x(2, 32, 128),)] * 3, max_fallbacks=0)


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


def test_gpu_wrapper_keeps_new_results():
    # the Triton wrapper's pool and CUDA graphs are its own: the switch is the C++ path's
    assert GpuWrapperPrinter.out_reuse is False


@pytest.mark.parametrize("on", [False, True])
def test_switch_gives_equal_results(on):
    m = Stack().eval()
    x = _x(2, 32, 128)
    with _reuse(on):
        out, text = _compiled(m, x)
    with torch.no_grad():
        torch.testing.assert_close(out, m(x))
    assert bool(_outs(text)) == on

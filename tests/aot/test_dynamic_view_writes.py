"""Graphs that write through views, recorded once over the size symbols (issue 16).

The recorder functionalizes a write through a view (`x[:, 1:] += y`, `x.diagonal().add_(1)`,
`x.t().mul_(2)`, views at storage offsets, chained views, inputs that are views themselves) into
`aten.as_strided_scatter` of the written storage's flat value and `aten.as_strided` reads of it
(pydynamo/aot/recorder.py). Such graphs used to be recorded per size under dynamic shapes,
because codegen's scatter into the flat value of an input that starts at a storage offset wrote
before the input's start over symbolic sizes (`test_scatter_into_a_clone_of_an_offset_input`):
now training joints and functionalized inference graphs are recorded once over the symbols.

Each case runs at several sizes (generic ones first, then size 2 and odd sizes) under
dynamic=True (and mark_dynamic), backends aot_eager and codegen (C++; some through Triton's
interpreter): outputs, the written input (and the storage it views), and gradients equal eager's
on random inputs; frame graphs equal torch.compile's (a counting backend); no graph is recorded at
concrete sizes (`joint_concrete`), the generic sizes reuse the first recording
(`joint_recompiles` 0: size 2 may break a recorded size decision, which records again), and
codegen runs nothing eagerly.
"""
from __future__ import annotations

import contextlib
import functools
import warnings

import pytest
import torch
import torch.fx

import codegen
import pydynamo
import pydynamo.aot
from codegen.pipeline import counters as codegen_counters
from pydynamo import convert_frame
from pydynamo.meta import TensorMeta
from pydynamo.symbols import size_symbol

aten = torch.ops.aten
TOL = dict(rtol=1e-4, atol=1e-5)


def slice_add(x, w):
    x[:, 1:] += w[:, 1:] * 2
    return (x * w).sum(1)


def diagonal_add(x, w):
    x.diagonal().add_(w[0])
    return x @ w


def t_mul(x, w):
    x.t().mul_(2)
    return x + w


def offset_mul(x, w):
    x[1:, 1:].mul_(w[1:, 1:])
    return x.sin()


def select_add(x, w):
    x.select(0, 1).add_(w[0])
    return x * w


def chained(x, w):
    x[1:].t()[::2].add_(1)
    return x - w


def flat_every_other(x, w):
    x.view(-1)[1::2].mul_(3)
    return x * w


def unsqueezed_chain(x, w):
    x.unsqueeze(0).transpose(1, 2)[0].sub_(w.t())
    return x.cos() * w


def two_writes(x, w):
    x[:, 0].mul_(2)
    x[0].add_(w[0])
    return x.sum(1) + w[:, 0]


CASES = {f.__name__: f for f in (slice_add, diagonal_add, t_mul, offset_mul, select_add,
                                  chained, flat_every_other, unsqueezed_chain, two_writes)}
SQUARE = {"diagonal_add", "t_mul", "unsqueezed_chain"}       # x and x.t() combined elementwise
# generic sizes first (the first recording must serve them all), then size 2 and odd sizes
GENERIC = {"rect": [(4, 6), (5, 7), (7, 9)], "square": [(4, 4), (5, 5), (7, 7)]}
EDGE = {"rect": [(2, 3), (3, 2), (2, 2)], "square": [(2, 2), (3, 3)]}


def _sizes(name):
    kind = "square" if name in SQUARE else "rect"
    return GENERIC[kind], EDGE[kind]


def _inputs(n, m, kind, grad, seed):
    """(x, w, base): x written by the graph, w read (a leaf that requires grad in training), base
    the tensor whose storage x views ("fresh": x itself; "rows": x = base[1:], a view at a
    storage offset; "t": x = base.t(), a transposed view). In training base is a non-leaf (an
    in-place write to a view of a leaf that requires grad is an error in eager)."""
    g = torch.Generator().manual_seed(seed)
    shape = {"fresh": (n, m), "rows": (n + 1, m), "t": (m, n)}[kind]
    leaf = torch.randn(*shape, generator=g).requires_grad_(grad)
    w = torch.randn(n, m, generator=g).requires_grad_(grad)
    base = leaf * 1 if grad else leaf
    x = {"fresh": base, "rows": base[1:], "t": base.t()}[kind]
    return x, w, base, leaf


def _call(fn, n, m, kind, grad, seed, mark=None):
    x, w, base, leaf = _inputs(n, m, kind, grad, seed)
    if mark is not None:
        mark(x, w)
    out = fn(x, w)
    grads = ()
    if grad:
        weight = torch.arange(out.numel(), dtype=out.dtype).view(out.shape) / out.numel() + 0.5
        (out * weight).sum().backward()
        grads = (leaf.grad, w.grad)
    return out.detach(), base.detach().clone(), grads


def _graphs(frames) -> int:
    return sum(len(f.graphs) for f in frames if isinstance(f, convert_frame.FrameResult))


@contextlib.contextmanager
def _recorded():
    """Yields {"frames": frame results of the block, "cg": codegen counters it added}; the aot
    counters start at zero; pydynamo's caches are reset before and after."""
    pydynamo.reset()
    pydynamo.aot.counters.clear()
    before = dict(codegen_counters)
    seen = {"frames": [], "cg": {}}
    convert_frame.RECORDERS.append(seen["frames"].append)
    try:
        yield seen
    finally:
        convert_frame.RECORDERS.remove(seen["frames"].append)
        pydynamo.reset()
        seen["cg"] = {k: v - before.get(k, 0) for k, v in codegen_counters.items()
                      if v != before.get(k, 0)}


def _assert_as_eager(got, want, where):
    pairs = [("output", got[0], want[0]), ("written storage", got[1], want[1])] + \
        [(f"grad {i}", a, b) for i, (a, b) in enumerate(zip(got[2], want[2]))]
    for what, a, b in pairs:
        torch.testing.assert_close(a, b, **TOL, msg=lambda s: f"{what} at {where}: {s}")


def _run(name, backend, kind, grad, options=None):
    """Every size under pydynamo beside eager; returns (graphs, aot counters after the generic
    sizes, aot counters at the end, codegen counters)."""
    f = CASES[name]
    generic, edge = _sizes(name)
    with _recorded() as seen:
        kw = {"options": options} if options else {}
        g = pydynamo.optimize(f, backend=backend, dynamic=True, **kw)
        after_generic = None
        for k, (n, m) in enumerate(generic + edge):
            if k == len(generic):
                after_generic = dict(pydynamo.aot.counters)
            seed = 100 * n + m
            _assert_as_eager(_call(g, n, m, kind, grad, seed), _call(f, n, m, kind, grad, seed),
                             f"{n}x{m}")
        aot = dict(pydynamo.aot.counters)
    return _graphs(seen["frames"]), after_generic, aot, seen["cg"]


def _torch_compile_count(f, sizes, kind, grad, mark=None, **options) -> int:
    """Graphs torch.compile compiles for calls at `sizes` (a counting backend); `mark(x, w)`
    runs on each call's inputs first."""
    import torch._dynamo
    count = [0]

    def counting(gm, example_inputs):
        count[0] += 1
        return gm.forward
    torch._dynamo.reset()
    try:
        g = torch.compile(f, backend=counting, **options)
        for n, m in sizes:
            x, w, _, _ = _inputs(n, m, kind, grad, 0)
            if mark is not None:
                mark(x, w)
            g(x, w)
    finally:
        torch._dynamo.reset()
    return count[0]


@functools.lru_cache(maxsize=None)
def _torch_compile_graphs(name, kind, grad) -> int:
    generic, edge = _sizes(name)
    return _torch_compile_count(CASES[name], generic + edge, kind, grad, dynamic=True)


def _check_symbolic(name, backend, after_generic, aot, cg, grad):
    assert aot.get("eager_fallback", 0) == 0, aot
    assert aot.get("joint_concrete", 0) == 0, f"recorded at concrete sizes: {aot}"
    assert after_generic.get("joint_recompiles", 0) == 0, f"generic sizes recorded again: {after_generic}"
    if grad:
        assert after_generic.get("joint_graphs", 0) == 1, after_generic
    elif backend == "codegen":
        assert after_generic.get("functional_graphs", 0) == 1, after_generic
    assert cg.get("eager_fallback_graphs", 0) == 0, f"codegen ran graphs eagerly: {cg}"


# --- the codegen-level regression ------------------------------------------------------------

def _record(shape, stride, is_view=False):
    return TensorMeta.from_tensor(torch.empty(0, device="meta"), shape=tuple(shape),
                                  stride=tuple(stride), storage_offset=0, is_view=is_view)


def test_scatter_into_a_clone_of_an_offset_input():
    """The recorder's form of `x.diagonal().copy_(src)` over symbolic sizes, x an input that
    starts at a storage offset (a row slice): `as_strided_scatter(clone(x.reshape(-1)), src,
    [s0, s1], [s1*s1, s1 + 1], 0)`. The scatter's offset counts in its argument's storage; codegen
    folded the clone into a view of x (the record's view flag is unknown at symbolic sizes) and
    the diagonal landed at x's storage start, before x: every element came out one matrix early
    (fuzz seed 13 under dynamic=True; graphs writing through views were recorded per size since).
    A clone is a new tensor at every size: codegen now hands the scatter one."""
    s0, s1 = size_symbol("s0"), size_symbol("s1")
    g = torch.fx.Graph()
    x, src = g.placeholder("x"), g.placeholder("src")
    x.meta["val"] = _record((s0, s1, s1), (s1 * s1, s1, 1))
    src.meta["val"] = _record((s0, s1), (s1, 1))
    rows, n = g.call_method("size", (x, 0)), g.call_method("size", (x, 1))
    rows.meta["val"], n.meta["val"] = s0, s1
    n2 = g.call_function(__import__("operator").mul, (n, n))
    n1 = g.call_function(__import__("operator").add, (n, 1))
    n2.meta["val"], n1.meta["val"] = s1 * s1, s1 + 1
    flat = g.call_function(aten.reshape.default, (x, [-1]))
    flat.meta["val"] = _record((s0 * s1 * s1,), (1,), is_view=True)
    copy = g.call_function(aten.clone.default, (flat,), {"memory_format": torch.contiguous_format})
    copy.meta["val"] = _record((s0 * s1 * s1,), (1,))
    scatter = g.call_function(aten.as_strided_scatter.default, (copy, src, [rows, n], [n2, n1], 0))
    scatter.meta["val"] = _record((s0 * s1 * s1,), (1,))
    out = g.call_function(aten.as_strided.default, (scatter, [rows, n, n], [n2, n, 1], 0))
    out.meta["val"] = _record((s0, s1, s1), (s1 * s1, s1, 1), is_view=True)
    g.output((out,))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)

    def make(rows, n):
        return torch.randn(rows + 1, n, n)[1:], torch.randn(rows, n)
    compiled = codegen.compile_fx(gm, list(make(3, 2)), strict=True)
    assert not compiled.stats.fallback, compiled.stats.fallback
    mismatches = codegen_counters["input_mismatch_calls"]
    for rows, n in ((3, 2), (4, 3), (5, 2), (2, 5)):
        args = make(rows, n)
        (got,), (want,) = compiled(*args), gm(*args)
        assert torch.equal(got, want), (rows, n, got, want)
    assert codegen_counters["input_mismatch_calls"] == mismatches


# --- training joints -------------------------------------------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
@pytest.mark.parametrize("name", list(CASES))
def test_training_write_through_a_view_records_once(name, backend):
    graphs, after_generic, aot, cg = _run(name, backend, "fresh", grad=True)
    _check_symbolic(name, backend, after_generic, aot, cg, grad=True)
    assert graphs == _torch_compile_graphs(name, "fresh", True)


@pytest.mark.parametrize("kind", ["rows", "t"])
@pytest.mark.parametrize("name", ["slice_add", "diagonal_add", "offset_mul", "chained"])
def test_training_input_that_is_a_view(name, kind):
    """x a view of a non-leaf (a row slice at a storage offset, or a transpose): the write
    lands in the viewed storage, gradients flow to the leaf through the write."""
    graphs, after_generic, aot, cg = _run(name, "codegen", kind, grad=True)
    _check_symbolic(name, "codegen", after_generic, aot, cg, grad=True)
    assert graphs == _torch_compile_graphs(name, kind, True)


@pytest.mark.parametrize("grad", [True, False])
def test_triton_kernels(grad):
    """codegen's Triton kernels (the interpreter without a GPU) over the symbolic graphs."""
    for name in ("diagonal_add", "offset_mul", "chained"):
        graphs, after_generic, aot, cg = _run(name, "codegen", "rows", grad=grad,
                                              options={"backend_kernels": "triton"})
        _check_symbolic(name, "codegen", after_generic, aot, cg, grad=grad)
        assert cg.get("triton_graphs_compiled", 0) > 0, cg


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
def test_training_mark_dynamic(backend):
    """mark_dynamic on both dims of x and w (dynamic=None): one frame graph and one joint for the
    generic sizes, as torch.compile (torch._dynamo.mark_dynamic)."""
    import torch._dynamo

    def mark(x, w):
        for t in (x, w):
            pydynamo.mark_dynamic(t, [0, 1])
    name = "slice_add"
    f = CASES[name]
    generic, _ = _sizes(name)
    with _recorded() as seen:
        g = pydynamo.optimize(f, backend=backend, dynamic=None)
        for n, m in generic:
            seed = 100 * n + m
            _assert_as_eager(_call(g, n, m, "rows", True, seed, mark),
                             _call(f, n, m, "rows", True, seed), f"{n}x{m}")
        aot = dict(pydynamo.aot.counters)
    assert aot.get("joint_graphs") == 1 and aot.get("joint_recompiles", 0) == 0, aot
    assert aot.get("joint_concrete", 0) == 0, aot

    def torch_mark(x, w):
        for t in (x, w):
            torch._dynamo.mark_dynamic(t, [0, 1])
    count = _torch_compile_count(f, generic, "rows", True, torch_mark)
    assert _graphs(seen["frames"]) == count == 1


# --- functionalized inference graphs ---------------------------------------------------------

@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
@pytest.mark.parametrize("name", list(CASES))
def test_inference_write_through_a_view_records_once(name, backend):
    """No grad: codegen functionalizes the graph through the recorder (aot_eager runs the
    torch-level graph as is), once over the symbols."""
    graphs, after_generic, aot, cg = _run(name, backend, "fresh", grad=False)
    _check_symbolic(name, backend, after_generic, aot, cg, grad=False)
    assert graphs == _torch_compile_graphs(name, "fresh", False)


@pytest.mark.parametrize("kind", ["rows", "t"])
@pytest.mark.parametrize("name", ["slice_add", "diagonal_add", "offset_mul", "chained", "two_writes"])
def test_inference_input_that_is_a_view(name, kind):
    graphs, after_generic, aot, cg = _run(name, "codegen", kind, grad=False)
    _check_symbolic(name, "codegen", after_generic, aot, cg, grad=False)
    assert graphs == _torch_compile_graphs(name, kind, False)


# --- what stays as it was ----------------------------------------------------------------------

@pytest.mark.parametrize("grad", [True, False])
def test_non_dense_view_input_still_answers_as_eager(grad):
    """x = base[1:, :m] (rows and columns cut: not dense) written through a view: the recorder
    keeps a written storage as one dense flat value and refuses this one (training: eager
    autograd; inference: codegen's own lowering). Never a wrong answer."""
    f = CASES["offset_mul"]
    pydynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        g = pydynamo.optimize(f, backend="codegen", dynamic=True)
        try:
            for n, m in ((4, 6), (5, 7), (3, 3)):
                outs = []
                for fn in (g, f):
                    torch.manual_seed(n * m)
                    leaf = torch.randn(n + 1, m + 1, requires_grad=grad)
                    w = torch.randn(n, m, requires_grad=grad)
                    base = leaf * 1 if grad else leaf
                    out = fn(base[1:, :m], w)
                    grads = ()
                    if grad:
                        out.sum().backward()
                        grads = (leaf.grad, w.grad)
                    outs.append((out.detach(), base.detach().clone(), *grads))
                for a, b in zip(*outs):
                    torch.testing.assert_close(a, b, **TOL)
        finally:
            pydynamo.reset()


def test_a_saved_view_of_a_written_input_keeps_its_old_value():
    """`x[1:, 1:].mul_(w)` saves the slice's value before the write for w's gradient. The
    partition saved the slice as a view of the input (free: "alive anyway") and the backward
    recomputed the clone from it after the runtime had copied the new value into x: autograd
    raised ("a view was created in no_grad mode and its base ... modified inplace"), and without
    that check w's gradient would have read the written values. Such a view is saved as a copy."""
    def f(x, w):
        x[1:, 1:].mul_(w[1:, 1:])
        return x.sin()
    for backend in ("aot_eager", "codegen"):
        pydynamo.reset()
        g = pydynamo.optimize(f, backend=backend)
        try:
            outs = []
            for fn in (g, f):
                torch.manual_seed(0)
                leaf, w = torch.randn(4, 6, requires_grad=True), torch.randn(4, 6, requires_grad=True)
                x = leaf * 1
                out = fn(x, w)
                out.sum().backward()
                outs.append((out.detach(), x.detach(), leaf.grad, w.grad))
            for a, b in zip(*outs):
                torch.testing.assert_close(a, b, **TOL)
        finally:
            pydynamo.reset()


def test_write_through_a_view_of_a_transposed_training_output():
    """Chain seed 108 of a sweep of writes through random view chains: codegen computes an output
    whose eager strides are dense in another order (TensorIterator keeps x's transposed layout)
    contiguously in that order and handed it out as an `as_strided` view of its buffer; autograd
    forbids in-place writes through views a custom Function returns, so `z[1:].mul_(1.5)`
    raised where eager allows it. Such an output is now a tensor of its own over the buffer's
    storage (ir.OwnTensorRef)."""
    def f(x, w):
        return x * w
    pydynamo.reset()
    g = pydynamo.optimize(f, backend="codegen")
    try:
        outs = []
        for fn in (g, f):
            torch.manual_seed(0)
            x = torch.randn(4, 5).t().clone()          # dense, transposed strides (1, 5)
            w = torch.randn(5, 4, requires_grad=True)
            z = fn(x, w)
            z[1:].mul_(1.5)
            z.sin().sum().backward()
            outs.append((z.detach(), w.grad))
        for a, b in zip(*outs):
            torch.testing.assert_close(a, b, **TOL)
    finally:
        pydynamo.reset()


def test_a_unit_dim_stride_planned_at_the_hints_does_not_raise_in_the_backward():
    """Chain seed 243 of a sweep of writes through random view chains: x of shape (s0, s1, 1)
    with strides (1, s0, s0*s1), `(x * w).permute(1, 2, 0).zero_()` in training. codegen's
    backward planned its `new_empty_strided` / `as_strided` externs' stride of the size-1 dim at
    the hints (24 for s0*s1) and checked it exactly: the next size raised "an extern op returned
    a shape the compiled graph did not plan for" (a backward cannot replay eagerly). The stride
    of a size-1 dim is read by no index: codegen's check ignores it."""
    def f(x, w):
        z = x * w
        z.permute(1, 2, 0).zero_()
        return z.sin()
    pydynamo.reset()
    g = pydynamo.optimize(f, backend="codegen", dynamic=True)
    try:
        for shape in ((6, 4, 1), (6, 6, 1), (5, 7, 1)):
            outs = []
            for fn in (g, f):
                torch.manual_seed(sum(shape))
                x = torch.randn(*shape[::-1]).permute(2, 1, 0).clone()
                w = torch.randn(shape, requires_grad=True)
                out = fn(x, w)
                out.sum().backward()
                outs.append((out.detach(), w.grad))
            for a, b in zip(*outs):
                torch.testing.assert_close(a, b, **TOL)
    finally:
        pydynamo.reset()


def test_an_own_tensor_output_shares_its_version_counter_with_its_views():
    """An output handed out as a tensor of its own over a buffer (ir.OwnTensorRef) and another
    output on the same buffer: the second is a view of the first (eager: `b._base is a`), so an
    in-place write to one bumps the version counter the other reads, as autograd's checks of
    saved tensors need. Before, both were views of the internal buffer."""
    def f(x):
        z = x * 2
        return z, z[1:], z
    pydynamo.reset()
    g = pydynamo.optimize(f, backend="codegen")
    try:
        x = torch.randn(4, 5).t().clone()
        a, b, c = g(x)
        ea, eb, _ = f(x)
        assert c is a and b._base is a and a._base is None
        v = b._version
        a.mul_(3)
        assert b._version > v
        ea.mul_(3)
        torch.testing.assert_close(b, eb, **TOL)
    finally:
        pydynamo.reset()

"""Regressions found on the transformers zoo (issue 17, session 11) that the compat harness cannot
state: the harness counts every frame of corpus code that CPython runs, and these cases are about
frames that must run in CPython (a break inside a class's own __getattribute__, a Function whose
backward pydynamo does not trace). Each compares with eager and names the graph breaks."""
from __future__ import annotations

import torch

import pydynamo


class Aliased:
    attribute_map = {"n_layers": "num_layers"}

    def __init__(self, **kw):
        for k, v in kw.items():
            setattr(self, k, v)

    def __getattribute__(self, key):
        if key != "attribute_map" and key in super().__getattribute__("attribute_map"):
            key = super().__getattribute__("attribute_map")[key]
        return super().__getattribute__(key)


class Child(Aliased):
    pass


def test_getattribute_compiled_as_its_own_frame_does_not_recurse():
    """After a break, the output code re-reads `cfg.rates` in CPython: the config's
    __getattribute__ is then compiled as a frame of its own, and its output code used to re-read
    `self.__dict__` / `self.rates` through itself: RecursionError (transformers' Vits, Llama4)."""
    cfg = Child(rates=[2, 3], num_layers=2)

    def f(x, cfg):
        y = x + 1
        print(cfg.rates)
        return y * cfg.n_layers + sum(cfg.rates)

    x = torch.randn(3)
    opt = pydynamo.optimize(f, backend="eager")
    for _ in range(3):
        torch.testing.assert_close(opt(x, cfg), f(x, cfg))
    cfg.rates = [1]
    torch.testing.assert_close(opt(x, cfg), f(x, cfg))


class ScaleFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, k):
        ctx.k = k
        return x * k

    @staticmethod
    def backward(ctx, g):
        return g * ctx.k, None


def test_autograd_function_with_grad_is_a_clean_break():
    """With grad enabled the backward would have to be traced: a graph break, eager's values
    and gradients (under no_grad the forward is traced: tests/semantics s_configs)."""
    def f(x):
        return ScaleFn.apply(x * 2, 3).sum()

    x = torch.randn(4, requires_grad=True)
    ex = pydynamo.explain(f)(x)
    assert any("autograd_function" in str(b) for b in ex.break_reasons)
    x1 = x.detach().requires_grad_()
    pydynamo.optimize(f, backend="eager")(x1).backward()
    x2 = x.detach().requires_grad_()
    f(x2).backward()
    torch.testing.assert_close(x1.grad, x2.grad)


# --- an exception raised while tracing (LongT5, SwitchTransformers; session 12) -----------------

def _mask_helper_compiling():
    try:
        import torch as _t
        return _t.compiler.is_compiling()
    except Exception:
        return False


def _split_blocks(mask):
    return mask[:, None]            # None[...] when the mask was never built


def _masked(x, mask=None):
    """transformers' encoder stacks: the mask is built only when not compiling."""
    y = x + 1
    if mask is None and not _mask_helper_compiling():
        mask = torch.ones(3)
    return y + _split_blocks(mask)


def _pydynamo_records(fn, *args):
    from pydynamo import convert_frame
    recs = []
    pydynamo.reset()
    convert_frame.RECORDERS.append(recs.append)
    try:
        out = pydynamo.optimize(fn, backend="eager")(*args)
    finally:
        convert_frame.RECORDERS.remove(recs.append)
        pydynamo.reset()
    return out, recs


def test_uncaught_raise_while_tracing_runs_the_frame_eagerly():
    """Traced under is_compiling() the mask stays None and `None[:, None]` raises while tracing,
    in a callee of the frame. Breaking there let CPython raise on the None; the frame now runs
    eagerly as a whole, and the helper it calls (no graph of its own: run as is) answers False,
    so the mask is built as in eager (torch.compile: the same fallback)."""
    x = torch.randn(3)
    out, recs = _pydynamo_records(_masked, x)
    torch.testing.assert_close(out, _masked(x))
    whole = [r for r in recs if getattr(r, "reason_code", None) == "constant_raises"]
    assert whole and "not caught in the traced code" in whole[0].message


def test_raise_under_finally_is_uncaught():
    """A `finally` (output_capturing's wrapper around the encoder) cleans up and re-raises: it does
    not catch, so the frame still runs eagerly (SwitchTransformers)."""
    log = []

    def wrapper(x):
        try:
            return _masked(x)
        finally:
            log.append(1)

    x = torch.randn(3)
    out, _ = _pydynamo_records(wrapper, x)
    torch.testing.assert_close(out, _masked(x))
    assert log == [1]


def test_caught_raise_is_a_break_at_the_instruction():
    """A handler of the traced code catches it: a graph break at the raising instruction (CPython
    raises into the handler), the graph before it kept; not the whole frame run eagerly."""
    def f(x, d):
        y = x * 2
        try:
            k = d[:, None]
        except TypeError:
            k = 3
        return y + k

    x = torch.randn(3)
    out, recs = _pydynamo_records(f, x, None)
    torch.testing.assert_close(out, f(x, None))
    cut = [r for r in recs if hasattr(r, "graphs") and r.graph_break is not None]
    assert cut and len(cut[0].graphs) == 1 and cut[0].graph_break.reason_code == "constant_raises"


def test_frame_without_a_graph_runs_as_is():
    """A frame that captures nothing but answers is_compiling() is not replaced: read by a helper
    called from eagerly run code it answers as eager does. A frame with a graph is compiled."""
    def helper():
        return torch.compiler.is_compiling()

    out, recs = _pydynamo_records(helper)
    assert out is False and not [r for r in recs if hasattr(r, "graphs")]
    calls = []

    def g(x):
        calls.append(1)
        return x + 1

    out, recs = _pydynamo_records(g, torch.ones(2))
    assert len([r for r in recs if hasattr(r, "graphs")]) == 1   # a graph: compiled as before


def test_iterating_an_opaque_iterator_is_unsupported_not_an_internal_error():
    """A comprehension frame run from eager code gets its iterator (`.0`) as an argument: FOR_ITER
    on a value pydynamo cannot trace was an AttributeError inside the executor."""
    def f(it):
        return [v * 2 for v in it]

    out, recs = _pydynamo_records(f, iter({"a": 1, "b": 2}.values()))
    assert out == [2, 4]
    assert not [r for r in recs if getattr(r, "reason_code", None) == "internal_error"]


def _expand(mask):
    return mask[..., None]


class _Stack(torch.nn.Module):
    """LongT5's encoder stack in small: its forward runs eagerly (the uncaught raise above)."""

    def __init__(self):
        super().__init__()
        self.emb = torch.nn.Embedding(10, 4)
        self.drop = torch.nn.Dropout(0.1)
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, ids, mask=None):
        h = self.drop(self.emb(ids))
        if mask is None and not _mask_helper_compiling():
            mask = torch.ones(ids.shape)
        return self.lin(h) * _expand(mask)


def test_torch_nn_forward_called_from_an_eagerly_run_frame_runs_as_is():
    """The stack's forward runs eagerly; the torch.nn modules it calls from there ran as one-op
    graphs of their own (LongT5: 9 graphs against torch.compile's 6, SwitchTransformers 8 vs
    5). torch.compile traces torch.nn only inlined or as the compiled module: here too, so the
    one graph is `_expand`'s (torch.compile itself raises on this small stack: its helper is
    compiled and answers True; transformers' is_torchdynamo_compiling it skips)."""
    torch.manual_seed(0)
    m = _Stack().eval()
    ids = torch.randint(0, 10, (2, 3))
    want = m(ids)
    out, recs = _pydynamo_records(m, ids)
    torch.testing.assert_close(out, want)
    compiled = [r.code.co_name for r in recs if hasattr(r, "graphs") and r.graphs]
    assert compiled == ["_expand"], compiled
    # compiled as the entry, a torch.nn module is traced as before
    out, recs = _pydynamo_records(m.lin, torch.randn(2, 4))
    assert sum(len(r.graphs) for r in recs if hasattr(r, "graphs")) == 1

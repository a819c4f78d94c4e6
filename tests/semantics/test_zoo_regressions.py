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

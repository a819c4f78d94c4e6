"""Breaks inside with-blocks (the context is active again in the resumed code) and try blocks."""
import io

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()


@case(t(4, requires_grad=True))
def no_grad_print(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad", file=SINK)
        z = y + x  # must not require grad: the context is active again
    return z, z.requires_grad


@case(t(4, requires_grad=True))
def no_grad_break_then_exit(x):
    with torch.no_grad():
        y = x * 2
        pydynamo.graph_break()
    w = x * 3  # outside: requires grad again
    return y, w, w.requires_grad


@case(t(4, requires_grad=True))
def enable_grad_inside_no_grad(x):
    with torch.no_grad():
        a = x + 1
        with torch.enable_grad():
            b = x * 2
            print("inner", file=SINK)
            c = x * 3
        d = x * 4
    return a.requires_grad, b.requires_grad, c.requires_grad, d.requires_grad, a + b + c + d


@case(t(4))
def try_finally_break(x):
    y = x + 1
    try:
        y = y * 2
        print("try", file=SINK)
        y = y - 1
    finally:
        y = y + 10
    return y


@case(t(4))
def try_except_no_raise_break(x):
    try:
        y = x.sin()
        pydynamo.graph_break()
        y = y.cos()
    except RuntimeError:
        y = x
    return y


@case(t(4))
def try_except_raise_after_break(x):
    y = x * 2
    try:
        print("before raise", file=SINK)
        raise IndexError("x")
    except IndexError:
        y = y + 5
    return y


@case(t(4), t(4))
def with_branch_on_tensor(x, y):
    with torch.no_grad():
        z = x * y
        if z.mean() > 0:
            z = z + 1
        else:
            z = z - 1
    return z

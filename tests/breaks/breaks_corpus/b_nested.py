"""Breaks inside called user functions 1-3 calls deep: the caller's graph before the call and the
callee's graph up to the break are both kept, and the rest of each frame resumes."""
import io

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()


def leaf_print(x):
    y = x * 2
    print("leaf", file=SINK)
    return y + 1


def mid(x):
    y = x.sin()
    y = leaf_print(y)
    return y.cos()


def top(x):
    y = x + 1
    y = mid(y)
    return y * 3


def leaf_branch(x):
    if x.sum() > 0:
        return x * 2
    return x * -2


def leaf_break(x):
    x = x + 1
    pydynamo.graph_break()
    return x * 2


@case(t(4))
def nested_1_print(x):
    y = x.exp()
    y = leaf_print(y)
    return y.relu()


@case(t(4))
def nested_2_print(x):
    y = x.exp()
    y = mid(y)
    return y.relu()


@case(t(4))
def nested_3_print(x):
    y = x - 1
    y = top(y)
    return y / 2


@case(t(4))
def nested_1_branch(x):
    y = x * 0.5
    z = leaf_branch(y)
    return z + y


@case(t(4))
def nested_1_explicit(x):
    a = x.cos()
    b = leaf_break(a)
    return a + b


@case(t(4))
def nested_call_twice(x):
    a = leaf_break(x)
    b = leaf_break(a)
    return a * b


@case(t(4))
def nested_keyword_call(x):
    y = leaf_kw(x, scale=3.0)
    return y.sum()


def leaf_kw(x, scale=1.0):
    z = x * scale
    pydynamo.graph_break()
    return z + scale


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        print("block", file=SINK)
        return y.relu()


def _make_block():
    with torch.random.fork_rng():
        torch.manual_seed(0)
        return Block()


BLOCK = _make_block()


@case(t(2, 4))
def nested_module_print(x):
    y = x * 2
    return BLOCK(y) + 1


@case(t(4))
def nested_in_loop(x):
    for i in range(2):
        x = leaf_break(x) + i
    return x


@case(t(4))
def nested_closure_break(x):
    k = 3

    def inner(y):
        z = y * k
        pydynamo.graph_break()
        return z + k
    return inner(x + 1)

"""Several breaks per function, of mixed kinds, with state (tensors, Python values, containers,
attributes of objects) live across all of them."""
import io

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()


@case(t(4))
def three_prints(x):
    a = x + 1
    print("a", file=SINK)
    b = a * 2
    print("b", file=SINK)
    c = b - 3
    print("c", file=SINK)
    return a + b + c


@case(t(4))
def print_then_branch_then_item(x):
    y = x.sin()
    print("s", file=SINK)
    if y.sum() > 0:
        y = y * 2
    v = y.max().item()
    return y + v


@case(t(4), 2)
def python_counter_across_breaks(x, n):
    total = n
    y = x
    for k in ("p", "q"):
        total += len(k)
        y = y * total
        pydynamo.graph_break()
    return y, total


@case(t(4))
def list_mutated_across_breaks(x):
    acc = []
    acc.append(x + 1)
    pydynamo.graph_break()
    acc.append(x * 2)
    print(len(acc), file=SINK)
    acc.append(acc[0] + acc[1])
    return acc


class Holder:
    def __init__(self, v):
        self.v = v


@case(t(4))
def object_attr_across_break(x):
    h = Holder(x + 1)
    pydynamo.graph_break()
    h.v = h.v * 2
    return h.v


@case(t(4))
def dict_across_breaks(x):
    d = {"k": x}
    print("one", file=SINK)
    d["k"] = d["k"] + 1
    print("two", file=SINK)
    d["j"] = d["k"] * 2
    return d


@case(t(4))
def branch_both_ways(x):
    y = x
    if (y > 0).all():
        y = y + 1
    if (y < 0).all():
        y = y - 1
    return y


@case(t(4), t(4))
def two_inputs_many_breaks(x, y):
    a = x * y
    pydynamo.graph_break()
    b = a + x
    pydynamo.graph_break()
    c = b * y
    pydynamo.graph_break()
    return a, b, c


@case(t(4))
def tuple_unpack_across_break(x):
    a, b = x + 1, x - 1
    print("u", file=SINK)
    c, d = a * b, a / 2
    return c + d


@case(t(4), 1.5)
def float_arg_across_break(x, f):
    y = x * f
    pydynamo.graph_break()
    return y + f


@case(t(4))
def break_in_comprehension_callee(x):
    ys = [_noisy(x, i) for i in range(2)]
    return ys[0] + ys[1]


def _noisy(x, i):
    print(i, file=SINK)
    return x + i


@case(t(3, 3))
def method_chain_break(x):
    y = x.t().contiguous()
    n = int(y.numel())
    print(n, file=SINK)
    return y.view(-1) * n


@case(t(4))
def return_python_value_after_break(x):
    y = x.sum()
    pydynamo.graph_break()
    return y, "done", 7

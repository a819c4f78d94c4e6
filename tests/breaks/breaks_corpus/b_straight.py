"""Breaks in straight-line code: print, explicit graph_break, branches on tensors, .item() and
.tolist() feeding control flow, C functions of other libraries, exceptions raised and caught,
with tensors and Python values live across the break."""
import io
import zlib

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()  # print output goes here (a side effect the compiler must not drop)


def observe_sink():
    return len(SINK.getvalue())


def clear_sink():
    SINK.seek(0)
    SINK.truncate()


@case(t(4), before=clear_sink, observe=observe_sink)
def print_middle(x):
    y = x.sin()
    print("y", file=SINK)
    return y.cos()


@case(t(4), before=clear_sink, observe=observe_sink)
def print_first(x):
    print("start", file=SINK)
    return x * 2 + 1


@case(t(4), before=clear_sink, observe=observe_sink)
def print_last(x):
    y = x.exp()
    print(y.shape, file=SINK)
    return y


@case(t(3, 4), before=clear_sink, observe=observe_sink)
def print_shape_fstring(x):
    y = x @ x.T
    print(f"shape {y.shape} dtype {y.dtype}", file=SINK)
    return y.relu()


@case(t(4), 3, before=clear_sink, observe=observe_sink)
def print_python_values_live(x, n):
    a = n * 2
    s = "abc"
    y = x + a
    print(a, s, file=SINK)
    return y * a, s + "d", a


@case(t(4), t(4))
def tensor_branch_if(x, y):
    z = x + y
    if z.sum() > 0:
        return z * 2
    return z - 1


@case(t(4))
def tensor_branch_else_only(x):
    y = x.cos()
    if (y > 2).any():
        y = y * 0.5
    return y + x


@case(t(5))
def tensor_branch_bool(x):
    m = x.mean()
    flag = bool(m > 0)
    return x + 1 if flag else x - 1


@case(t(5))
def item_into_if(x):
    s = x.sum().item()
    if s > 0:
        return x * s
    return x / 2


@case(t(5))
def item_arith(x):
    v = x.max().item()
    return x + v * 2


@case(t(3))
def tolist_into_loop(x):
    vals = x.tolist()
    y = x.clone()
    for v in vals:
        y = y + v
    return y


@case(t(4))
def explicit_break(x):
    y = x + 1
    pydynamo.graph_break()
    return y * 2


@case(t(4))
def explicit_break_twice(x):
    y = x + 1
    pydynamo.graph_break()
    y = y * 2
    pydynamo.graph_break()
    return y - 3


@case(t(4))
def c_function_of_library(x):
    y = x.sin()
    h = zlib.crc32(b"pydynamo")
    return y + (h % 7)


@case(t(4))
def raise_and_catch(x):
    y = x * 2
    try:
        raise ValueError("boom")
    except ValueError:
        y = y + 1
    return y.sum()


@case(t(4))
def raise_in_callee_caught(x):
    y = x * 3
    try:
        _raise_if(True)
    except KeyError:
        y = y - 1
    return y


def _raise_if(flag):
    if flag:
        raise KeyError("k")
    return 0


@case(t(4), t(4), before=clear_sink, observe=observe_sink)
def tensors_live_across(x, y):
    a = x + y
    b = x * y
    print("mid", file=SINK)
    return a + b, a - b


@case(t(2, 3), before=clear_sink, observe=observe_sink)
def list_and_dict_live(x):
    d = {"a": x + 1, "b": 3}
    lst = [x * 2, "s", 4]
    print("mid", file=SINK)
    return d["a"] + lst[0] * d["b"], lst[1], lst[2]


@case(t(4), before=clear_sink, observe=observe_sink)
def print_tensor_shape_builtin_call(x):
    y = x.sum(0)
    print(len(x), x.dim(), file=SINK)
    return y


@case(t(6))
def branch_on_item_chain(x):
    y = x.abs()
    if y.max().item() > 10:
        return y
    if y.min().item() >= 0:
        return y.sqrt()
    return y * 2


@case(t(4))
def nonzero_dynamic(x):
    y = x * 2
    idx = torch.nonzero(y > 0)
    return idx.shape[0], y

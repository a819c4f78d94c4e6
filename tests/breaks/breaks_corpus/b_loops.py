"""Breaks inside for and while loops (unrolled loops cut at the break; the loop's iterator and
accumulators live across it)."""
import io

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()


@case(t(4))
def for_range_print(x):
    for i in range(3):
        x = x * 2 + i
        print(i, file=SINK)
    return x


@case(t(4))
def for_list_of_tensors_break(x):
    acc = x
    for w in [x + 1, x * 2, x - 3]:
        acc = acc + w
        pydynamo.graph_break()
    return acc


@case(t(4))
def for_break_then_more(x):
    y = x.sin()
    for i in range(2):
        y = y + i
        print("it", i, file=SINK)
    return y.cos()


@case(t(4))
def while_tensor_condition(x):
    y = x.abs() + 1
    n = 0
    while y.sum() < 100:
        y = y * 2
        n += 1
    return y, n


@case(t(4))
def for_enumerate_break(x):
    out = []
    for i, v in enumerate([x, x * 2]):
        out.append(v + i)
        print(i, file=SINK)
    return out


@case(t(4))
def for_branch_on_item(x):
    y = x
    for i in range(3):
        if y.sum().item() > 0:
            y = y - 1
        else:
            y = y + 1
    return y


@case(t(4))
def while_python_counter_break(x):
    i = 0
    while i < 3:
        x = x + i
        print("w", file=SINK)
        i += 1
    return x


@case(t(4))
def nested_loops_break(x):
    for i in range(2):
        for j in range(2):
            x = x + i * j
            print(i, j, file=SINK)
    return x


@case(t(4))
def loop_break_statement_after_graph_break(x):
    for i in range(5):
        x = x * 1.5
        print(i, file=SINK)
        if i == 2:
            break
    return x


@case(t(3))
def loop_continue_with_break(x):
    for i in range(4):
        if i % 2:
            continue
        x = x + i
        pydynamo.graph_break()
    return x

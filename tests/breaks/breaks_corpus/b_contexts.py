"""Breaks inside context managers of every kind: the context is active again in the resumed code
and each __enter__ is matched by exactly one __exit__, in eager's order.

`Rec` records every enter and exit in EVENTS, which the harness reads after each call
(`observe`) and compares with eager's list; grad-mode and inference-mode contexts are checked
through what the tensors made inside them say (requires_grad, is_inference).
"""
import contextlib
import io
import threading

import torch

import pydynamo
from compat_case import case, t

SINK = io.StringIO()
EVENTS: list = []


def clear_events():
    EVENTS.clear()


def events():
    return list(EVENTS)


class Rec:
    """A user-defined context manager (a class with __enter__/__exit__) that logs both."""

    def __init__(self, tag):
        self.tag = tag
        self.depth = 0

    def __enter__(self):
        self.depth += 1
        EVENTS.append(("enter", self.tag))
        return self

    def __exit__(self, exc_type, exc, tb):
        self.depth -= 1
        EVENTS.append(("exit", self.tag, exc_type is not None))
        return False


class Swallow(Rec):
    """Suppresses the exception raised inside its block (after a graph break)."""

    def __exit__(self, exc_type, exc, tb):
        super().__exit__(exc_type, exc, tb)
        return exc_type is ValueError


@contextlib.contextmanager
def gen_ctx(tag):
    EVENTS.append(("enter", tag))
    try:
        yield tag
    finally:
        EVENTS.append(("exit", tag))


GLOBAL_REC = Rec("global")
_C = dict(before=clear_events, observe=events)


@case(t(4), **_C)
def user_ctx_print(x):
    with Rec("a"):
        y = x * 2
        print("in a", file=SINK)
        y = y + 1
    return y


@case(t(4), **_C)
def user_ctx_as_value_after_break(x):
    with Rec("b") as r:
        y = x.sin()
        pydynamo.graph_break()
        y = y * r.depth  # the object from __enter__ is still entered (depth 1)
    return y, r.depth


@case(t(4), **_C)
def user_ctx_two_breaks(x):
    with Rec("c"):
        a = x + 1
        print("one", file=SINK)
        b = a * 2
        pydynamo.graph_break()
        c = b - 3
    return a + b + c


@case(t(4), **_C)
def user_ctx_nested_break_inner(x):
    with Rec("outer"):
        y = x * 3
        with Rec("inner"):
            y = y.cos()
            print("inner", file=SINK)
            y = y + 1
        y = y * 2
    return y


@case(t(4), **_C)
def user_ctx_global_object(x):
    with GLOBAL_REC:
        y = x.exp()
        pydynamo.graph_break()
        y = y / 2
    return y


@case(t(4, requires_grad=True), **_C)
def user_ctx_inside_no_grad(x):
    with torch.no_grad():
        with Rec("ng"):
            y = x * 2
            print("ng", file=SINK)
            z = y + x
    w = x * 4
    return z, z.requires_grad, w.requires_grad


@case(t(4, requires_grad=True), **_C)
def no_grad_inside_user_ctx(x):
    with Rec("u"):
        with torch.no_grad():
            y = x * 2
            pydynamo.graph_break()
            z = y + x
        w = z * x
    return z.requires_grad, w.requires_grad, w + 1


@case(t(4), **_C)
def user_ctx_in_loop(x):
    for i in range(3):
        with Rec(i):
            x = x + i
            pydynamo.graph_break()
            x = x * 0.5
    return x


def _leaf_ctx(x):
    with Rec("leaf"):
        y = x * 2
        print("leaf", file=SINK)
        return y + 1


def _mid_ctx(x):
    with Rec("mid"):
        return _leaf_ctx(x.sin()).cos()


def _top_ctx(x):
    return _mid_ctx(x + 1) * 3


@case(t(4), **_C)
def user_ctx_in_callee_1(x):
    y = x.exp()
    return _leaf_ctx(y).relu()


@case(t(4), **_C)
def user_ctx_in_callee_2(x):
    return _mid_ctx(x * 2) - 1


@case(t(4), **_C)
def user_ctx_in_callee_3(x):
    return _top_ctx(x - 1) / 2


def _break_leaf(x):
    x = x + 1
    pydynamo.graph_break()
    return x * 2


@case(t(4), **_C)
def user_ctx_around_breaking_call(x):
    with Rec("around"):
        y = _break_leaf(x)
        y = y + x
    return y


@case(t(4), **_C)
def user_ctx_exception_after_break(x):
    y = x * 2
    with Swallow("sw"):
        y = y + 1
        pydynamo.graph_break()
        raise ValueError("swallowed by __exit__")
    return y


@case(t(4), **_C)
def generator_ctx_print(x):
    with gen_ctx("gen") as tag:
        y = x * 2
        print(tag, file=SINK)
        y = y + 1
    return y


@case(t(4, requires_grad=True))
def set_grad_enabled_false_print(x):
    with torch.set_grad_enabled(False):
        y = x * 2
        print("sge", file=SINK)
        z = y + x
    w = z * x
    return z, z.requires_grad, w.requires_grad


@case(t(4, requires_grad=True))
def inference_mode_print(x):
    with torch.inference_mode():
        y = x * 2
        print("inf", file=SINK)
        z = y + 1
    return z.clone(), z.is_inference(), z.requires_grad


@case(t(4, requires_grad=True))
def grad_ctx_in_loop_break(x):
    acc = x * 1
    for i in range(2):
        with torch.no_grad():
            acc = acc + i
            pydynamo.graph_break()
            acc = acc * 2
    return acc, acc.requires_grad


@case(t(4, requires_grad=True))
def no_grad_in_callee_break(x):
    flag, y = _no_grad_leaf(x)
    return flag, y + x


def _no_grad_leaf(x):
    with torch.no_grad():
        y = x * 3
        print("ng leaf", file=SINK)
        return y.requires_grad, y


def _plain_leaf(x):
    y = x * 5
    print("plain leaf", file=SINK)
    return y - 1


def _plain_mid(x):
    return _plain_leaf(x.cos()) * 2


@case(t(4, requires_grad=True))
def no_grad_around_call_2_deep(x):
    with torch.no_grad():
        y = _plain_mid(x + 1)
        z = y * x
    w = x * 2
    return y.requires_grad, z.requires_grad, w.requires_grad, z + 1


@case(t(4, requires_grad=True), **_C)
def inference_mode_inside_user_ctx(x):
    with Rec("inf"):
        with torch.inference_mode():
            y = x * 2
            pydynamo.graph_break()
            z = y + 1
        w = x * 3
    return z.clone(), z.is_inference(), w.requires_grad


class Scaled(Rec):
    """A context whose state is a tensor made in the frame, live across the break."""

    def __init__(self, k):
        super().__init__("scaled")
        self.k = k

    def __enter__(self):
        super().__enter__()
        return self.k * 2


@case(t(4), **_C)
def user_ctx_with_tensor_state(x):
    with Scaled(x.mean()) as k:
        y = x * k
        print("scaled", file=SINK)
        y = y + k
    return y


class LoudEnter(Rec):
    """Its __enter__ prints: the break is in the context manager itself (runs in Python once)."""

    def __enter__(self):
        print("entering", file=SINK)
        return super().__enter__()


LOCK = threading.Lock()


@case(t(4), **_C)
def two_contexts_one_statement(x):
    with Rec("a"), Rec("b"):
        y = x * 2
        print("both", file=SINK)
        y = y + 1
    return y


@case(t(4), **_C)
def enter_that_breaks(x):
    with LoudEnter("loud") as c:
        y = x * 2
        z = y + c.depth
    return z


@case(t(4), **_C)
def user_ctx_try_finally_in_loop(x):
    for i in range(2):
        try:
            with Rec(i):
                x = x + i
                print(i, file=SINK)
        finally:
            x = x * 2
    return x


@case(t(4))
def lock_print(x):
    with LOCK:
        y = x + 1
        print("locked", file=SINK)
        z = y * 2
    return z, LOCK.locked()


@case(t(4), **_C)
def return_inside_user_ctx(x):
    with Rec("ret"):
        y = x * 2
        print("ret", file=SINK)
        return y + 1

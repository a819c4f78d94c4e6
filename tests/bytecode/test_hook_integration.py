"""The executor's two uses of this package, end to end through the real frame hook (_C):
a transformed frame body (same layout, accepted by the hook) that calls a "compiled graph"
from globals, and a graph-break split whose resume function is itself intercepted."""
from __future__ import annotations

import pytest

from pydynamo.bytecode import disassemble, emit, make_code_like, make_resume_function

_C = pytest.importorskip("pydynamo._C")

LOG: list = []


def __compiled_graph_0(x, w, k):  # stands in for a backend's compiled function
    return x * w + k, x - w


class Holder:
    def __init__(self, w):
        self.w = w


def user_fn(x, holder, *, k=1):
    scale = 3

    def inner():
        return scale
    a, b = x * holder.w + k, x - holder.w
    LOG.append(inner())
    return a, b


def _run_hooked(fn, table, *args, **kwargs):
    seen = []

    def callback(code, frame_locals, globals_, builtins_, entries):
        seen.append(code.co_name)
        if code in table:
            return (lambda L: True, table[code])
        return None
    prev = _C.set_eval_frame(callback)
    try:
        return fn(*args, **kwargs), seen
    finally:
        _C.set_eval_frame(prev)
        _C.clear_code(fn.__code__)


def test_transformed_body_is_accepted_and_runs():
    code = user_fn.__code__
    body = (emit.load_const(3) + emit.store_local(code, "scale")
            + emit.call_function(emit.load_global("__compiled_graph_0", push_null=True),
                                 [emit.load_fast("x"),
                                  emit.load_fast("holder") + emit.load_attr("w"),
                                  emit.load_fast("k")], fn_pushes_null=True)
            + emit.unpack_sequence(2) + emit.store_fast("a") + emit.store_fast("b")
            + emit.load_fast("a") + emit.load_fast("b") + emit.build_tuple(2)
            + emit.return_value())
    new = make_code_like(code, emit.prologue(code) + body)
    LOG.clear()
    got, seen = _run_hooked(user_fn, {code: new}, 5, Holder(2), k=4)
    assert got == (14, 3) and LOG == [] and "user_fn" in seen
    assert user_fn(5, Holder(2), k=4) == (14, 3) and LOG == [3]  # unhooked: original


def test_hook_rejects_a_different_layout():
    code = user_fn.__code__
    other = make_code_like(Holder.__init__.__code__, emit.prologue(Holder.__init__.__code__)
                           + emit.return_const(None))
    with pytest.raises(ValueError):
        _run_hooked(user_fn, {code: other}, 1, Holder(1))


def test_split_frame_and_intercepted_resume_function():
    code = user_fn.__code__
    insts = disassemble(code)
    k = next(n for n, i in enumerate(insts) if i.opname == "LOAD_GLOBAL"
             and i.argval == "LOG")
    rf = make_resume_function(code, insts[k].offset)
    prefix = make_code_like(code, insts[:k] + rf.emit_call())
    LOG.clear()
    got, seen = _run_hooked(user_fn, {code: prefix}, 5, Holder(2))
    assert got == (11, 3) and LOG == [3]
    assert rf.code.co_name in seen  # the hook saw the resume function's frame like any other

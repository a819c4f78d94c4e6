"""Emit helpers: each sequence assembled into a real function and run on both versions."""
from __future__ import annotations

import types

import pytest

from pydynamo.bytecode import emit, make_code_like
from pydynamo.bytecode.analysis import stack_depths


class Box:
    def __init__(self, v):
        self.v = v

    def scaled(self, k, *, offset=0):
        return self.v * k + offset


def kwfn(a, b=1, *, c=2):
    return (a, b, c)


def _run(template_fn, body, *args):
    code = make_code_like(template_fn.__code__, emit.prologue(template_fn.__code__) + body)
    assert stack_depths(body)  # well-formed
    return types.FunctionType(code, globals())(*args)


def _t(x, y):
    pass


def test_calls_positional_keyword_and_method():
    body = (emit.call_function(emit.load_global("kwfn"), [emit.load_fast("x")],
                               {"c": emit.load_const(9)})
            + emit.call_function(emit.load_global("kwfn", push_null=True),
                                 [emit.load_fast("x"), emit.load_fast("y")],
                                 fn_pushes_null=True)
            + emit.call_method(emit.load_global("Box", push_null=True) + emit.load_fast("y")
                               + emit.call(1), "scaled", [emit.load_const(3)])
            + emit.build_tuple(3) + emit.return_value())
    assert _run(_t, body, 4, 5) == ((4, 1, 9), (4, 5, 2), 15)


def test_keyword_call_on_method_and_call_function_ex():
    body = (emit.load_fast("x") + emit.load_method("scaled") + emit.load_const(2)
            + emit.load_const(7) + emit.call(2, ("offset",))
            + emit.callable_(emit.load_global("kwfn")) + emit.load_fast("y")
            + emit.build_const_key_map(["c"]) + emit.load_const((1,)) + emit.swap(2)
            + emit.call_function_ex(True) + emit.build_list(2) + emit.return_value())
    assert _run(_t, body, Box(5), 8) == [17, (1, 1, 8)]


def test_attributes_subscripts_and_containers():
    body = (emit.load_const(11) + emit.load_fast("x") + emit.store_attr("v")
            + emit.load_const("new") + emit.load_fast("y") + emit.load_const("k")
            + emit.store_subscr()
            + emit.load_fast("y") + emit.subscr_const("k")
            + emit.load_fast("x") + emit.load_attrs(["v", "real"])
            + emit.load_const("a") + emit.load_const(1) + emit.build_map(1)
            + emit.load_const((5, 6)) + emit.unpack_sequence(2)
            + emit.build_tuple(5) + emit.return_value())
    d = {}
    box = Box(0)
    assert _run(_t, body, box, d) == ("new", 11, {"a": 1}, 6, 5)  # seq[0] on top
    assert box.v == 11 and d == {"k": "new"}


def test_rot_n_swap_copy_and_return_const():
    body = (emit.load_const(1) + emit.load_const(2) + emit.load_const(3) + emit.load_const(4)
            + emit.rot_n(4) + emit.copy(2) + emit.build_tuple(5) + emit.store_fast("r")
            + emit.load_fast("r") + emit.load_const((3, 4, 1, 2, 3)) + emit.compare_op("==")
            + emit.store_fast("ok") + emit.load_fast("ok") + emit.return_value())
    assert _run(_t, body, 0, 0) is False
    body2 = emit.load_const(1) + emit.load_const(2) + emit.load_const(3) + emit.rot_n(3) \
        + emit.build_tuple(3) + emit.return_value()
    assert _run(_t, body2, 0, 0) == (3, 1, 2)
    assert _run(_t, emit.return_const("done"), 0, 0) == "done"


def test_operators_and_branches():
    out = emit.load_const("big")
    end = emit.return_value()
    small = emit.load_const("small")
    body = (emit.load_fast("x") + emit.load_fast("y") + emit.binary_op("+")
            + emit.load_const(10) + emit.compare_op(">") + emit.pop_jump_if(False, small[0])
            + out + emit.jump(end[0]) + small + end)
    assert _run(_t, body, 7, 4) == "big"
    assert _run(_t, body, 1, 4) == "small"


def test_closures_prologue_and_locals():
    def outer(a):
        b = 2

        def inner():
            return a + b
        return inner
    code = outer.__code__
    inner_code = next(c for c in code.co_consts if isinstance(c, types.CodeType))
    body = (emit.load_const(40) + emit.store_local(code, "b")
            + emit.make_function(inner_code, closure=["a", "b"]) + emit.store_fast("tmp")
            + emit.callable_(emit.load_fast("tmp")) + emit.call(0)
            + emit.load_local(code, "a") + emit.build_tuple(2) + emit.return_value())
    new = make_code_like(code, emit.prologue(code) + body)
    assert new.co_cellvars == code.co_cellvars and new.co_varnames[-1] == "tmp"
    assert types.FunctionType(new, globals())(2) == (42, 2)
    with pytest.raises(ValueError):
        emit.make_function(inner_code, closure=["a"])


def test_star_unpack_and_merges():
    body = (emit.load_const((1, 2, 3, 4)) + emit.unpack_ex(1, 1) + emit.build_tuple(3)
            + emit.build_list(0) + emit.load_fast("x") + emit.list_extend() + emit.list_to_tuple()
            + emit.build_map(0) + emit.load_fast("y") + emit.dict_update()
            + emit.build_tuple(3) + emit.return_value())
    # seq[0] ends on top, so BUILD_TUPLE sees the pieces last-first
    assert _run(_t, body, [7, 8], {"k": 1}) == ((4, [2, 3], 1), (7, 8), {"k": 1})

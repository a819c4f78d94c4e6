"""Dynamic Python float arguments (issue 5/6): as torch.compile (specialize_float=False), a float
argument is a constant on the first call, and a graph input (a real symbol) once it changed
(automatic dynamic) or at once under dynamic=True; never under dynamic=False. Comparisons of the
float itself are decided on the value and guarded; decisions on float arithmetic pin the floats
(Python's op-by-op rounding could disagree with the exact expression near the boundary).

Counts are torch.compile's (probed with torch 2.13's CompileCounter), except where stated.
"""
import math

import pytest
import torch

import pydynamo


def scale(x, f):
    return x * f + f * 2


def branch(x, f):
    if f > 0.5:
        return x + 1
    return x - 1


def calls(rec, fn, values, dynamic=None):
    opt = pydynamo.optimize(fn, backend=rec, dynamic=dynamic)
    x = torch.randn(4) + 0.5
    for v in values:
        torch.testing.assert_close(opt(x, v), fn(x, v))
    return opt


def float_inputs(rec, i):
    return [v for v in rec.examples[i] if type(v) is float]


def test_float_argument_becomes_dynamic_after_it_changes(rec):
    # torch.compile: 1.0 -> graph with the constant; 2.0 -> one graph with f as an input; rest hit
    calls(rec, scale, [1.0, 2.0, 3.0, -0.25, 1e-3, 7.5])
    assert rec.count == 2
    assert float_inputs(rec, 0) == [] and float_inputs(rec, 1) == [2.0]
    placeholders = [n for n in rec.graphs[1].graph.nodes if n.op == "placeholder"]
    assert [n.name for n in placeholders] == ["l_x", "l_f"]
    assert rec.shape_guards(1) == []   # a float symbol has no range: any finite float is admitted


def test_float_argument_under_dynamic_true_is_symbolic_at_once(rec):
    calls(rec, scale, [1.0, 2.0, 3.0, 0.1], dynamic=True)
    assert rec.count == 1
    assert float_inputs(rec, 0) == [1.0]


def test_float_argument_under_dynamic_false_is_always_a_constant(rec):
    calls(rec, scale, [1.0, 2.0, 3.0], dynamic=False)
    assert rec.count == 3
    assert all(float_inputs(rec, i) == [] for i in range(3))


def test_comparison_of_a_float_is_guarded(rec):
    # torch.compile: 3 graphs (1.0 static; 2.0 dynamic with f > 0.5; 0.1 dynamic with f <= 0.5)
    calls(rec, branch, [1.0, 2.0, 3.0, 0.1, 0.2, 0.5, 0.75])
    assert rec.count == 3
    assert rec.shape_guards(1) == ["2*L['f'] > 1"] and rec.shape_guards(2) == ["2*L['f'] <= 1"]


def test_comparison_under_dynamic_true(rec):
    calls(rec, branch, [1.0, 2.0, 0.1, 0.2], dynamic=True)
    assert rec.count == 2   # torch.compile: 2


def test_decision_on_float_arithmetic_is_exact_as_python(rec):
    # 3*f + 1 > 2 is False in Python's float arithmetic for this f, True in exact arithmetic:
    # the decision pins f (one graph per value; torch.compile guards the expression instead and
    # has 3 graphs for the first four values where pydynamo has 4), and the answer is eager's
    def fn(x, f):
        if f * 3 + 1 > 2:
            return x + f
        return x - f
    edge = 0.33333333333333337
    assert not (edge * 3 + 1 > 2)
    calls(rec, fn, [1.0, 2.0, 0.1, 0.2, edge, edge])
    assert rec.count == 5


def test_float_items_of_a_list_argument_are_dynamic(rec):
    def fn(x, vals):
        for v in vals:
            x = x + v
        return x
    opt = pydynamo.optimize(fn, backend=rec)
    for vals in ([0.5, 1.5], [2.0, -1.0], [3.25, 4.0], [0.0, 1e9]):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x, vals), fn(x, vals))
    assert rec.count == 2   # torch.compile: 2
    assert float_inputs(rec, 1) == [2.0, -1.0]


def test_float_read_by_item_across_a_break_is_dynamic(rec):
    def fn(x):
        v = x.max().item()
        return x + v * 2
    opt = pydynamo.optimize(fn, backend=rec)
    for _ in range(4):
        x = torch.randn(5)
        torch.testing.assert_close(opt(x), fn(x))
    # the graph before .item(), the resume function with v constant, then with v an input
    assert rec.count == 3   # torch.compile: 3


def test_type_change_of_a_float_argument_recompiles(rec):
    opt = calls(rec, scale, [1.0, 2.0])
    x = torch.randn(4)
    torch.testing.assert_close(opt(x, 3), scale(x, 3))
    assert rec.count == 3


@pytest.mark.parametrize("v", [math.inf, -math.inf])
def test_non_finite_floats_stay_constants(rec, v):
    # no exact symbol value: inf is a constant even under dynamic=True; a finite float then gets
    # a symbol, and that graph computes inf right too (x + f)
    def shift(x, f):
        return x + f
    calls(rec, shift, [v, 2.0, v, -1.5], dynamic=True)
    assert rec.count == 2   # torch.compile: 2
    assert float_inputs(rec, 0) == [] and float_inputs(rec, 1) == [2.0]


def test_float_returned_as_a_python_value(rec):
    def fn(x, f):
        return x * 2, f * 2 - 1, f / 4
    opt = pydynamo.optimize(fn, backend=rec)
    x = torch.randn(3)
    for f in (1.0, 2.5, -3.75, 0.1):
        got, want = opt(x, f), fn(x, f)
        torch.testing.assert_close(got[0], want[0])
        assert got[1:] == pytest.approx(want[1:], rel=1e-15)
    assert rec.count == 2


def test_float_of_a_dynamic_float_stays_symbolic(rec):
    def fn(x, f, n):
        return x + float(f) + float(n)
    opt = pydynamo.optimize(fn, backend=rec, dynamic=True)
    for f, n in ((1.5, 2), (2.25, 3), (-0.5, 7)):
        x = torch.randn(3)
        torch.testing.assert_close(opt(x, f, n), fn(x, f, n))
    assert rec.count == 1   # torch.compile: 1

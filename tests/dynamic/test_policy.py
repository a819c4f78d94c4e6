"""Which sizes become symbolic, and when (issue 6): automatic dynamic (dims and int arguments that
changed between calls), dynamic=True / False, mark_dynamic / mark_static, 0/1 specialization, duck
shaping, ops without a symbolic rule, and the guards in explain() and recompile explanations.

Compile counts asserted here were probed against torch.compile 2.13 on the same functions and
sizes (the same behaviours run against live torch.compile records in tests/compat_dynamic).
"""
import pytest
import torch

import pydynamo
from pydynamo import convert_frame
from pydynamo.shapes import ConstraintViolation


def add_one(x):
    return x + 1


def scale(x, n):
    return x * n + n


def calls(rec, fn, inputs, dynamic=None):
    opt = pydynamo.optimize(fn, backend=rec, dynamic=dynamic)
    for args in inputs:
        torch.testing.assert_close(opt(*args), fn(*args))
    return opt


def test_automatic_dynamic_static_first_then_one_dynamic_graph(rec):
    calls(rec, add_one, [(torch.randn(4, 3),), (torch.randn(5, 3),), (torch.randn(9, 3),), (torch.randn(2, 3),)])
    assert rec.count == 2
    assert rec.int_inputs(0) == [] and rec.tensor_specs(0)["L['x']"].shape == (4, 3)
    # only the dim that changed became symbolic; the other stays pinned by the tensor guard
    assert rec.tensor_specs(1)["L['x']"].shape == (None, 3)
    assert rec.shape_guards(1) == ["2 <= L['x'].size()[0]"]
    assert "L['x'].shape: expected [4, 3], got [5, 3]" in str(rec.recompiles[0])


def test_dynamic_false_is_never_symbolic(rec):
    calls(rec, add_one, [(torch.randn(n),) for n in (4, 5, 6)], dynamic=False)
    assert rec.count == 3
    assert all(not f.shape_env for f in rec.frames)
    assert all(not rec.int_inputs(i) for i in range(3))


def test_dynamic_true_is_symbolic_from_the_first_call(rec):
    calls(rec, add_one, [(torch.randn(n, m),) for n, m in ((4, 3), (5, 7), (9, 2))], dynamic=True)
    assert rec.count == 1 and rec.tensor_specs(0)["L['x']"].shape == (None, None)


@pytest.mark.parametrize("size", [0, 1])
def test_sizes_zero_and_one_are_specialized(rec, size):
    calls(rec, add_one, [(torch.randn(size, 3),), (torch.randn(4, 3),), (torch.randn(size, 3),)], dynamic=True)
    # 0 and 1 change broadcasting and contiguity: a graph of their own, then the general one
    assert rec.count == 2
    assert rec.tensor_specs(0)["L['x']"].shape == (size, None)
    assert rec.tensor_specs(1)["L['x']"].shape == (None, None)


def test_duck_shaping_under_dynamic_true_shares_a_symbol(rec):
    def fn(x, y):
        return x.sum() + y.sum()
    calls(rec, fn, [(torch.randn(4), torch.randn(4)), (torch.randn(5), torch.randn(5)),
                    (torch.randn(6), torch.randn(7))], dynamic=True)
    # equal sizes share one symbol, the equality is guarded: unequal sizes recompile
    assert len(rec.frames) == 2
    assert rec.shape_guards(0)[0] == "L['y'].size()[0] == L['x'].size()[0]"
    assert rec.int_inputs(0) == [] and rec.shape_guards(1) == ["2 <= L['x'].size()[0]", "2 <= L['y'].size()[0]"]


def test_automatic_dynamic_does_not_duck_shape(rec):
    """torch.compile's automatic dynamic gives each changed dim its own symbol: (5, 5) then
    (6, 7) is served by the same dynamic graph."""
    def fn(x, y):
        return x.sum() + y.sum()
    calls(rec, fn, [(torch.randn(4), torch.randn(4)), (torch.randn(5), torch.randn(5)),
                    (torch.randn(6), torch.randn(7))])
    assert len(rec.frames) == 2


def test_int_argument_becomes_dynamic_after_it_changes(rec):
    # torch.compile: 5 -> graph with the constant; 6 -> one graph with n symbolic; 1, 0, -3 hit
    calls(rec, scale, [(torch.randn(3), n) for n in (5, 6, 1, 0, -3, 7)])
    assert rec.count == 2
    assert rec.int_inputs(0) == [] and rec.int_inputs(1) == [6]
    assert rec.shape_guards(1) == []   # an int symbol has no range: any int is admitted


def test_int_argument_under_dynamic_true_is_symbolic_at_once(rec):
    calls(rec, scale, [(torch.randn(3), n) for n in (1, 2, 3, 0, -4)], dynamic=True)
    assert rec.count == 1
    assert rec.int_inputs(0) == [1]   # n (1: ints are not pinned at 0/1, as in torch.compile)


def test_int_argument_guarded_by_type(rec):
    opt = calls(rec, scale, [(torch.randn(3), 2), (torch.randn(3), 3)])
    x = torch.randn(3)
    torch.testing.assert_close(opt(x, 2.5), scale(x, 2.5))
    assert rec.count == 3


def test_int_argument_used_as_a_size(rec):
    def fn(x, n):
        return x.view(-1, n) + torch.arange(n)
    calls(rec, fn, [(torch.randn(6), 3), (torch.randn(8), 4), (torch.randn(12), 3), (torch.randn(10), 5)],
          dynamic=True)
    assert rec.count == 1


def test_mark_dynamic_makes_the_first_graph_dynamic(rec):
    x = torch.randn(8, 3)
    pydynamo.mark_dynamic(x, 0)
    opt = calls(rec, add_one, [(x,)])
    assert rec.tensor_specs(0)["L['x']"].shape == (None, 3)
    y = torch.randn(20, 3)
    torch.testing.assert_close(opt(y), y + 1)
    assert rec.count == 1


def test_mark_dynamic_dim_specialized_by_user_code_is_an_error_naming_the_line(rec):
    def fn(x):
        if x.shape[0] == 8:
            return x * 2
        return x
    x = torch.randn(8, 3)
    pydynamo.mark_dynamic(x, 0)
    line = fn.__code__.co_firstlineno + 1
    with pytest.raises(ConstraintViolation, match=rf"L\['x'\]\.size\(\)\[0\] was marked dynamic, but the code at "
                                                  rf".*test_policy\.py:{line} specialized it to 8"):
        pydynamo.optimize(fn, backend=rec)(x)


def test_mark_dynamic_on_a_size_one_dim_is_an_error(rec):
    x = torch.randn(1, 3)
    pydynamo.mark_dynamic(x, 0)
    with pytest.raises(ConstraintViolation, match="size 1"):
        pydynamo.optimize(add_one, backend=rec)(x)


def test_mark_static_wins_over_dynamic_true(rec):
    def make(n):
        x = torch.randn(n, 4)
        pydynamo.mark_static(x, 0)
        return (x,)
    calls(rec, add_one, [make(3), make(3), make(5)], dynamic=True)
    assert rec.count == 2
    assert rec.tensor_specs(0)["L['x']"].shape == (3, None)


def test_op_without_a_symbolic_rule_specializes_with_guards_and_is_counted(rec):
    def fn(x):
        return torch.kron(x, x) + x.shape[0]
    calls(rec, fn, [(torch.randn(8),), (torch.randn(8),), (torch.randn(9),)], dynamic=True)
    assert len(rec.frames) == 2
    assert rec.shape_guards(0) == ["L['x'].size()[0] == 8"]
    assert convert_frame.COUNTERS["specialized_ops"] == 2
    assert dict(rec.frames[0].shape_env.specialized_ops) == {"torch.kron": 1}


def test_shape_guards_readable_in_explain_and_recompiles(rec):
    def fn(x, y):
        return x @ y if x.shape[0] > 4 else (x + 1) @ y
    out = pydynamo.explain(fn, dynamic=True)(torch.randn(6, 3), torch.randn(3, 2))
    line = fn.__code__.co_firstlineno + 1
    text = "\n".join(out.guards)
    assert f"L['x'].size()[0] > 4  # {__file__}:{line}" in text.replace("5 <= L['x'].size()[0]",
                                                                        "L['x'].size()[0] > 4")
    assert "SHAPE_ENV" in str(out)
    opt = calls(rec, fn, [(torch.randn(6, 3), torch.randn(3, 2)), (torch.randn(3, 3), torch.randn(3, 2))],
                dynamic=True)
    assert opt is not None and len(rec.recompiles) == 1
    why = str(rec.recompiles[0])
    assert "5 <= L['x'].size()[0]" in why and "L['x'].size()[0] = 3" in why, why

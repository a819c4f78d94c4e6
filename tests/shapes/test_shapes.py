"""ShapeEnv and SymInt: symbols, duck shaping, 0/1 specialization, guards (text, soundness, check
function), replacements, ranges, mark_dynamic/mark_static policy and automatic dynamic."""
import operator

import pytest
import sympy
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st

from pydynamo import shapes
from pydynamo.shapes import (AutomaticDynamic, ConstraintViolation, ShapeEnv, SymInt, SymFloat,
                             TextSource, dynamic_dims, mark_dynamic, mark_static, sym_int,
                             sym_max, sym_min)
from pydynamo.symbols import FloorDiv


def size_of(name, dim=0):
    return TextSource(f"L['{name}'].size()[{dim}]")


# -- the design-notes example ---------------------------------------------------------------------


def test_design_example_guard_text_and_reuse():
    env = ShapeEnv()
    a0 = env.create_symint(8, size_of("a"))
    assert isinstance(a0, SymInt) and a0.hint == 8
    assert (a0 * 2 < 16) is False
    # torch prints the same relation folded into a range: 8 <= L['a'].size()[0]
    assert env.guard_texts() == ["8 <= L['a'].size()[0]"]
    assert [str(g.expr) for g in env.guards] == ["2*s0 >= 16"]
    check = env.make_check_fn()
    for n, ok in ((8, True), (9, True), (100, True), (7, False), (2, False)):
        assert check({"a": torch.randn(n)}) is ok, n
    assert check({"a": torch.randn(())}) is False and check({}) is False


def test_other_branch_gives_upper_bound():
    env = ShapeEnv()
    a0 = env.create_symint(4, size_of("a"))
    assert a0 * 2 < 16
    assert env.guard_texts() == ["2 <= L['a'].size()[0] <= 7"]


# -- symbols ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("hint", [0, 1])
def test_zero_and_one_are_specialized(hint):
    env = ShapeEnv()
    assert env.create_symbol(hint, size_of("x")) == hint
    assert env.var_to_hint == {} and env.guard_texts() == []
    assert env.make_check_fn()({}) is True  # no guards: everything passes


def test_duck_shaping_shares_symbols_and_guards_equality():
    env = ShapeEnv()
    x0 = env.create_symbol(5, size_of("x", 0))
    y1 = env.create_symbol(5, size_of("y", 1))
    y0 = env.create_symbol(6, size_of("y", 0))
    assert x0 == y1 and x0 != y0
    texts = env.guard_texts()
    assert "L['y'].size()[1] == L['x'].size()[0]" in texts
    check = env.make_check_fn()
    assert check({"x": torch.randn(9), "y": torch.randn(4, 9)})
    assert not check({"x": torch.randn(9), "y": torch.randn(4, 8)})


def test_no_duck_shaping_gives_distinct_symbols():
    env = ShapeEnv(duck_shape=False)
    assert env.create_symbol(5, size_of("x")) != env.create_symbol(5, size_of("y"))
    assert env.guard_texts() == ["2 <= L['x'].size()[0]", "2 <= L['y'].size()[0]"]


def test_tensor_sizes_and_stride_guards():
    env = ShapeEnv()
    t = torch.randn(3, 5, 7)
    shape, stride, offset = env.create_tensor_sizes(t, TextSource("L['t']"), [0, 2])
    s0, s1 = sorted(env.var_to_hint, key=str)
    assert shape == (s0, 5, s1)
    assert stride == (5 * s1, s1, 1) and offset == 0
    texts = env.guard_texts()
    assert "L['t'].stride()[0] == 5*L['t'].size()[2]" in texts
    assert "L['t'].stride()[1] == L['t'].size()[2]" in texts
    check = env.make_check_fn()
    assert check({"t": torch.randn(4, 5, 9)})
    assert not check({"t": torch.randn(4, 5, 9).transpose(0, 2).contiguous().transpose(0, 2)})


def test_transposed_input_strides_are_symbolic():
    env = ShapeEnv()
    t = torch.randn(7, 3).t()
    shape, stride, _ = env.create_tensor_sizes(t, TextSource("L['t']"), [0, 1])
    s0, s1 = shape
    assert stride == (1, s0)


# -- SymInt values ----------------------------------------------------------------------------------


def test_symint_arithmetic_builds_expressions_without_guards():
    env = ShapeEnv()
    a = env.create_symint(10, size_of("a"))
    b = env.create_symint(3, size_of("b"))
    results = {
        "add": (a + b, 13), "radd": (1 + a, 11), "sub": (a - b, 7), "rsub": (20 - a, 10),
        "mul": (a * b, 30), "floordiv": (a // b, 3), "rfloordiv": (100 // a, 10), "mod": (a % b, 1),
        "pow": (a ** 2, 100), "neg": (-a, -10), "min": (sym_min(a, b), 3), "max": (sym_max(a, 4), 10),
    }
    for name, (value, expected) in results.items():
        assert isinstance(value, SymInt), name
        assert value.hint == expected, name
    assert env.guards == []
    assert (a * 4) // 4 is not None and str(((a * 4) // 4).expr) == "s0"
    assert str(FloorDiv(2 * a.expr, 2)) == "s0"


def test_symint_decisions_record_guards():
    env = ShapeEnv()
    a = env.create_symint(10, size_of("a"))
    assert bool(a) is True          # decided by the range (a >= 2): no guard
    assert (a >= 1) is True
    assert env.guards == []
    assert (a % 2 == 0) is True
    assert env.guard_texts() == ["(L['a'].size()[0] % 2) == 0", "2 <= L['a'].size()[0]"]
    check = env.make_check_fn()
    assert check({"a": torch.randn(12)}) and not check({"a": torch.randn(11)})


def test_int_specializes_with_guard_and_replacement():
    env = ShapeEnv()
    a = env.create_symint(8, size_of("a"))
    b = env.create_symint(5, size_of("b"))
    assert int(a) == 8
    assert env.stats["specializations"] == 1
    assert "L['a'].size()[0] == 8" in env.guard_texts()
    # later expressions see the replacement
    assert (a + b).expr == b.expr + 8
    assert isinstance(a * 2, int) and a * 2 == 16
    assert [0, 1, 2, 3, 4, 5, 6, 7, 8][b] == 5  # __index__ specializes too
    assert "L['b'].size()[0] == 5" in env.guard_texts()


def test_equality_between_symbols_becomes_replacement():
    env = ShapeEnv()
    x = env.create_symint(8, size_of("x"))
    y = env.create_symint(4, size_of("y"))
    assert x == 2 * y
    assert (x - 2 * y) == 0  # now trivially true: no new guard
    assert env.guard_texts()[0] == "L['x'].size()[0] == 2*L['y'].size()[0]"
    check = env.make_check_fn()
    assert check({"x": torch.randn(10), "y": torch.randn(5)})
    assert not check({"x": torch.randn(10), "y": torch.randn(6)})


def test_redundant_bounds_are_folded():
    env = ShapeEnv()
    a = env.create_symint(10, size_of("a"))
    assert a > 3 and a > 5 and a >= 4 and a < 50 and a < 60
    assert env.guard_texts() == ["6 <= L['a'].size()[0] <= 49"]


def test_symint_is_unhashable():
    env = ShapeEnv()
    a = env.create_symint(10, size_of("a"))
    with pytest.raises(TypeError):
        hash(a)


def test_truediv_gives_symfloat_with_exact_guards():
    env = ShapeEnv()
    a = env.create_symint(13, size_of("a"))
    half = a / 2
    assert isinstance(half, SymFloat) and half.hint == 6.5 and env.guards == []
    assert (half * 2.0 + 1).hint == 14.0
    assert half > 6.25                      # 2*s0 > 25 over the integers: s0 >= 13
    assert a < 20.5
    assert env.guard_texts() == ["13 <= L['a'].size()[0] <= 20"]
    assert (a / a == 1) is True and env.guard_texts() == ["13 <= L['a'].size()[0] <= 20"]
    assert float(half) == 6.5
    assert "L['a'].size()[0] == 13" in env.guard_texts()


def test_sym_int_keeps_symbols():
    env = ShapeEnv()
    a = env.create_symint(13, size_of("a"))
    assert sym_int(a) is a and sym_int(3.7) == 3 and env.guards == []
    assert int(a) == 13 and env.guard_texts() == ["L['a'].size()[0] == 13"]


def test_explain_failure_lists_failing_guards():
    env = ShapeEnv()
    x = env.create_symint(8, size_of("x"))
    env.create_symint(8, size_of("y"))
    assert x > 5
    failing = env.explain_failure({"x": torch.randn(4), "y": torch.randn(9)})
    assert failing == ["L['y'].size()[0] == L['x'].size()[0]", "6 <= L['x'].size()[0]"]


def test_origin_is_recorded():
    env = ShapeEnv(origin_fn=lambda: "user.py:12")
    x = env.create_symint(8, size_of("x"))
    assert x > 5
    assert env.produce_guards()[-1].origin == "user.py:12"


# -- soundness: the guards decide every recorded comparison the same way ------------------------

_OPS = [operator.add, operator.sub, operator.mul, operator.floordiv, operator.mod, operator.truediv]
_CMPS = [operator.lt, operator.le, operator.gt, operator.ge, operator.eq, operator.ne]


@st.composite
def programs(draw):
    """A straight-line program over two sizes: a few arithmetic steps, then comparisons."""
    steps = draw(st.lists(st.tuples(st.sampled_from(_OPS), st.integers(0, 3), st.integers(1, 6)),
                          min_size=1, max_size=5))
    cmps = draw(st.lists(st.tuples(st.sampled_from(_CMPS), st.integers(0, 5), st.integers(0, 40)),
                         min_size=1, max_size=4))
    return steps, cmps


def run_program(program, a, b):
    steps, cmps = program
    vals = [a, b]
    for op, i, k in steps:
        x = vals[i % len(vals)]
        vals.append(op(x, k))
    out = []
    for cmp, i, c in cmps:
        v = vals[i % len(vals)]
        if isinstance(v, (float, SymFloat)):
            # float values: strict comparisons against half-integers, where Python's rounding
            # and exact rational arithmetic cannot disagree
            cmp, c = (operator.lt if cmp in (operator.lt, operator.le, operator.eq) else operator.gt), c + 0.5
        out.append(cmp(v, c))
    return out, vals


@settings(max_examples=150, deadline=None)
@given(programs(), st.integers(2, 30), st.integers(2, 30), st.integers(2, 30), st.integers(2, 30))
# found by this property in session 15's CI (3.12 and 3.13): sympy simplified
# Mod(2*Mod(s, 3), 3) to 2*Mod(s, 3); shapes._without_inner_mods avoids that form
@example(program=([(operator.mod, 0, 3), (operator.mul, 2, 2), (operator.mod, 3, 3)],
                  [(operator.lt, 0, 0)]), a0=2, b0=2, a1=2, b1=2)
def test_guards_are_sound(program, a0, b0, a1, b1):
    env = ShapeEnv()
    sa = env.create_symint(a0, size_of("a"))
    sb = env.create_symint(b0, size_of("b"))
    traced, svals = run_program(program, sa, sb)
    expected, vals = run_program(program, a0, b0)
    assert traced == expected
    for s, v in zip(svals, vals):  # values computed symbolically agree with Python on the hints
        assert (s.hint if isinstance(s, (SymInt, SymFloat)) else s) == pytest.approx(v, rel=1e-9)
    check = env.make_check_fn()
    assert check({"a": torch.empty(a0), "b": torch.empty(b0)})
    if check({"a": torch.empty(a1), "b": torch.empty(b1)}):
        assert run_program(program, a1, b1)[0] == expected


# -- policy ----------------------------------------------------------------------------------------


def test_mark_dynamic_specialization_is_an_error_naming_the_line():
    env = ShapeEnv(origin_fn=lambda: "model.py:33")
    t = torch.randn(8, 3)
    mark_dynamic(t, 0)
    shape, _, _ = env.create_tensor_sizes(t, TextSource("L['t']"), dynamic_dims(t, dynamic=None),
                                          marked_dims=shapes.marked_dynamic_dims(t))
    with pytest.raises(ConstraintViolation, match=r"L\['t'\]\.size\(\)\[0\].*model\.py:33"):
        env.specialize(shape[0])


def test_mark_dynamic_on_size_one_is_an_error():
    env = ShapeEnv()
    with pytest.raises(ConstraintViolation, match="size 1"):
        env.create_symbol(1, size_of("x"), marked_dynamic=True)


def test_dynamic_dims_precedence():
    t = torch.randn(4, 5, 6)
    assert dynamic_dims(t, dynamic=None) == set()
    assert dynamic_dims(t, dynamic=None, changed_dims={1}) == {1}
    assert dynamic_dims(t, dynamic=True) == {0, 1, 2}
    assert dynamic_dims(t, dynamic=False, changed_dims={1}) == set()
    mark_dynamic(t, -1)
    assert dynamic_dims(t, dynamic=False) == {2}
    mark_static(t, 2)
    assert dynamic_dims(t, dynamic=True) == {0, 1}
    mark_static(t)
    assert dynamic_dims(t, dynamic=True) == set()
    with pytest.raises(IndexError):
        mark_dynamic(t, 3)


def test_automatic_dynamic_tracks_changed_dims():
    auto = AutomaticDynamic()
    assert auto.observe("L['x']", (4, 5)) == set()
    assert auto.observe("L['x']", (4, 5)) == set()
    assert auto.observe("L['x']", (4, 7)) == {1}
    assert auto.observe("L['x']", (6, 7)) == {0, 1}
    assert auto.observe("L['y']", (3,)) == set()
    assert auto.changed_dims("L['x']") == {0, 1}


def test_symbols_of_in_creation_order():
    from pydynamo.meta import TensorMeta
    env = ShapeEnv()
    t = torch.randn(5, 7)
    shape, stride, _ = env.create_tensor_sizes(t, TextSource("L['t']"), [0, 1])
    m = TensorMeta.from_tensor(t, shape=shape, stride=stride)
    n = env.create_symint(9, TextSource("L['n']"))
    assert [str(s) for s in shapes.symbols_of([n, {"k": m}], 3)] == ["s0", "s1", "s2"]
    assert shapes.symbols_of(m.shape[1]) == [shape[1]]


def test_marked_dynamic_dims_are_not_duck_shaped():
    env = ShapeEnv()
    x0 = env.create_symbol(6, size_of("x"))
    y0 = env.create_symbol(6, size_of("y"), marked_dynamic=True)
    z0 = env.create_symbol(6, size_of("z"))
    assert x0 != y0 and z0 == x0
    assert "L['z'].size()[0] == L['x'].size()[0]" in env.guard_texts()
    assert not any("L['y']" in t and "==" in t for t in env.guard_texts())


def test_works_with_executor_sources():
    from pydynamo.sources import AttrSource, LocalSource
    env = ShapeEnv()
    x, w = torch.randn(6, 4), torch.randn(4, 9)
    sx, _, _ = env.create_tensor_sizes(x, LocalSource("x"), [0, 1])
    sw, _, _ = env.create_tensor_sizes(w, AttrSource(LocalSource("self"), "w"), [0, 1])
    assert sw[0] == sx[1]  # duck shaped
    assert env.symint(sx[0]) > 5
    src = env.var_to_source[sx[0]]
    assert src.name() == "L['x'].size()[0]" and src.reload() == "x.size()[0]"
    assert "L['self'].w.size()[0] == L['x'].size()[1]" in env.guard_texts()

    class M:
        pass
    m = M()
    m.w = torch.randn(5, 9)
    check = env.make_check_fn()
    assert check({"x": torch.randn(8, 5), "self": m})
    assert not check({"x": torch.randn(8, 4), "self": m})


def test_size_sources_render_in_executor_guards():
    from pydynamo.guards import Guard, GuardKind, compile_guards
    from pydynamo.sources import LocalSource
    src = shapes.size_source(LocalSource("x"), 1)
    assert src.base == LocalSource("x") and src.guard_expr() == "L['x'].size()[1]"
    check = compile_guards([Guard(src, GuardKind.EQUALS_MATCH, 4)], {})
    assert check({"x": torch.randn(3, 4)}) and not check({"x": torch.randn(3, 5)})


def test_strided_view_input_gets_stride_symbols():
    env = ShapeEnv()
    t = torch.randn(6, 10)[:, ::2]          # shape (6, 5), strides (10, 2)
    shape, stride, _ = env.create_tensor_sizes(t, TextSource("L['t']"), [0, 1])
    assert all(isinstance(d, sympy.Symbol) for d in (*shape, *stride))
    assert env.source_names()[stride[0]] == "L['t'].stride()[0]"
    check = env.make_check_fn()
    assert check({"t": torch.randn(7, 14)[:, ::2]})
    assert not check({"t": torch.randn(7, 14)[:, ::2][:, :1]})  # size 1 is specialized

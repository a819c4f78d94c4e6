"""pydynamo/symbols.py: one FloorDiv for the executor and codegen, symbol kinds, printers."""
import pytest
import sympy

from pydynamo.symbols import (CExprPrinter, FloorDiv, ModIdx, TritonExprPrinter, canonical_size,
                              cexpr, float_symbol, index_symbol, int_symbol, pyexpr, size_symbol,
                              sympy_str)


def test_symbol_kinds_and_assumptions():
    assert size_symbol("s0").is_positive and size_symbol("s0").is_integer
    assert int_symbol("s1").is_integer and int_symbol("s1").is_positive is None
    assert float_symbol("f0").is_real and float_symbol("f0").is_integer is None
    assert index_symbol("x0").is_nonnegative and index_symbol("x0").is_integer
    assert size_symbol("s0") != int_symbol("s0")   # a symbol is its name and its assumptions


def test_floordiv_folds_and_sign():
    s0, x0, n = size_symbol("s0"), index_symbol("x0"), int_symbol("n")
    assert FloorDiv(2 * s0 + 4 * x0, 2) == s0 + 2 * x0
    assert FloorDiv(FloorDiv(x0, 2), 3) == FloorDiv(x0, 6)
    assert FloorDiv(x0, s0).is_nonnegative
    assert FloorDiv(n, 2).is_nonnegative is None          # Python floor division of any int
    # floor(floor(t)/n) == floor(t/n) only for n > 0: 1 // 2 // -1 == 0, 1 // -2 == -1
    e = FloorDiv(FloorDiv(n, 2), -1)
    assert e.xreplace({n: 1}) == 0
    with pytest.raises(ZeroDivisionError):
        FloorDiv(n, 0)


def test_canonical_size_and_printers():
    s0, x0 = size_symbol("s0"), index_symbol("x0")
    assert canonical_size(sympy.Mod(s0, 3)) == ModIdx(s0, 1, 3)
    assert canonical_size(sympy.ceiling(s0 / 2)) == FloorDiv(s0 + 1, 2)
    assert pyexpr(FloorDiv(s0, 2) + sympy.Max(s0, 3, x0)) == "((s0 // 2) + max(3, s0, x0))"
    assert pyexpr(s0 / 2) == "(s0 // 2)"
    assert cexpr(ModIdx(x0, 4, s0) + 2**40) == "(1099511627776L + ((x0 / 4) % s0))"
    assert cexpr(sympy.Min(x0, s0)) == "std::min<int64_t>(s0, x0)"
    texpr = TritonExprPrinter(ValueError)
    assert texpr(FloorDiv(x0, 4)) == "(x0 // 4)"
    with pytest.raises(ValueError):
        texpr(sympy.Mod(x0, 3))
    with pytest.raises(NotImplementedError):
        CExprPrinter()(x0 / 2)
    assert sympy_str(sympy.Eq(FloorDiv(s0, 2), 3), {s0: "L['x'].size()[0]"}) == \
        "(L['x'].size()[0]//2) == 3"

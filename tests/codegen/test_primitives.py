"""codegen/primitives.py: every primitive has every column, and every consumer covers every row.

Adding a pointwise op is adding its row; these tests fail when a row lacks a column or a
consumer (ops handlers, the lowering, the C++ and Triton printers, the Triton interpreter's
libdevice stand-ins, the symbolic shape rules) cannot take it.
"""
import re

import pytest
import torch

from codegen import primitives as P
from codegen.cpp import CppKernelPrinter, vector_math_decls
from codegen.kernel_printer import KValue
from codegen.lowering import LOWERINGS
from codegen.ops import collect_deps, ops, set_handler
from codegen.triton import TritonKernelPrinter, TritonUnsupported
from codegen.triton_launch import _InterpLibdevice
from pydynamo import meta
import pydynamo.meta_rules  # noqa: F401 (registers the rules)

ROWS = P.ROWS
DTYPE_RULES = (P.FLOAT, P.SAME, P.ROUND, P.INTEGRAL, P.COMPARE, P.LOGICAL, P.PREDICATE)
DTYPES = (torch.float32, torch.float64, torch.float16, torch.int64, torch.int32, torch.bool)


def _operands(prim, dt):
    vals = [KValue(n, dt) for n in "abc"[:prim.arity]]
    if prim.name == "where":
        vals[0] = KValue("a", torch.bool)
    return vals


class _Kernel:
    removed, local, outer, nodes, name = set(), {}, [], [], "k"


@pytest.mark.parametrize("prim", ROWS, ids=lambda p: p.name)
def test_every_column(prim):
    assert re.fullmatch(r"[a-z][a-z0-9_]*", prim.name)
    assert prim.arity in (1, 2, 3)
    assert prim.dtype in DTYPE_RULES
    assert prim.lowering in (P.TABLE, P.HAND, P.INTERNAL)
    assert prim.meta_rule == ("same_shape" if prim.arity == 1 else "broadcast")
    operands = [f"{{{i}}}" for i in range(prim.arity)]
    assert all(o in prim.cpp for o in operands), prim.cpp
    forms = [prim.triton, prim.triton_int, prim.triton_bool]
    assert any(f is not None for f in forms), "printable by Triton for no dtype"
    for form in forms:
        assert form is None or isinstance(form, str)
    # a libdevice call has a numpy stand-in for the interpreter, and only then one is given
    assert (prim.interp is not None) == bool(P.libdevice_calls(prim))
    assert prim.raises == (prim.lowering == P.INTERNAL)


def test_names_are_unique():
    names = [n for p in ROWS for n in (p.name,) + p.aliases]
    assert len(names) == len(set(names))
    assert set(P.PRIMITIVES) == {p.name for p in ROWS}


@pytest.mark.parametrize("prim", ROWS, ids=lambda p: p.name)
def test_ops_handlers_route_every_row(prim):
    deps = collect_deps(lambda: getattr(ops, prim.name)(*[None] * prim.arity))
    assert deps.n_ops == 1 and deps.checks == int(prim.raises)


@pytest.mark.parametrize("prim", ROWS, ids=lambda p: p.name)
def test_lowering_covers_every_row(prim):
    for name in prim.names:
        assert name in LOWERINGS, name
    assert prim.lowering != P.INTERNAL or prim.name not in LOWERINGS


@pytest.mark.parametrize("prim", ROWS, ids=lambda p: p.name)
def test_cpp_printer_covers_every_row(prim):
    for dt in (torch.float32, torch.int64, torch.bool):
        pr = CppKernelPrinter(_Kernel(), {})
        with set_handler(pr):
            out = pr.op(prim.name, *_operands(prim, dt))
        assert out.dtype == (torch.bool if prim.bool_result else dt)
        assert pr.scopes[0].lines == [f"    {pr.declare(out, prim.cpp.format(*'abc'))}"]
    if prim.simd:
        assert f" {prim.name}f(float" in vector_math_decls()


@pytest.mark.parametrize("prim", ROWS, ids=lambda p: p.name)
def test_triton_printer_covers_every_row(prim):
    for dt in DTYPES:
        form = prim.triton_form(dt)
        pr = TritonKernelPrinter(_Kernel(), {})
        with set_handler(pr):
            if form is None:
                with pytest.raises(TritonUnsupported):
                    pr.op(prim.name, *_operands(prim, dt))
                continue
            out = pr.op(prim.name, *_operands(prim, dt))
        assert out.dtype == (torch.bool if prim.bool_result else dt)
        if form == P.CUSTOM:
            assert prim.name in TritonKernelPrinter.CUSTOM_OPS
        for fn in P.libdevice_calls(prim):
            assert callable(getattr(_InterpLibdevice(), fn))


@pytest.mark.parametrize("prim", [p for p in ROWS if p.lowering != P.INTERNAL],
                         ids=lambda p: p.name)
def test_shape_rules_cover_every_row(prim):
    rule = {"same_shape": "_rule_same_shape", "broadcast": "_rule_pointwise"}[prim.meta_rule]
    spellings = [s for n in prim.names
                 for s in (getattr(torch, n, None), n if hasattr(torch.Tensor, n) else None)
                 if s is not None]
    assert spellings
    for s in spellings:
        assert meta.RULES[s].fn.__name__ == rule, s

"""One row per pointwise primitive: every fact the compiler keeps about it, read by every consumer.

A primitive is a name of the `ops` vocabulary (codegen/ops.py), e.g. `ops.erfc(x)`. Columns:
  arity, dtype  operand count; dtype rule (below): the compute dtype lowering picks, bool result
  cpp           C++ expression; {0} {1} {2} are the operands (templates cover every dtype)
  triton        Triton expression for float operands; triton_int / triton_bool for integer / bool
                ones (default: `triton`, but None for a FLOAT-rule op). None: not printable for
                that dtype (TritonUnsupported: the graph runs eagerly); CUSTOM: printed by
                TritonKernelPrinter.CUSTOM_OPS. Extra keys: {tl} the Triton compute dtype,
                {ibits} the signed integer type of the float's width
  interp        numpy stand-in for the `libdevice` function the Triton form calls, run under
                TRITON_INTERPRET=1 (codegen/triton_launch.py), which cannot call device code
  simd          the C++ form calls the libm function of the row's name, which glibc's libmvec
                vectorizes: declared `omp declare simd` (codegen/cpp.py)
  aliases       other canonical (torch) names lowered to it (arctan -> atan)
  lowering      TABLE: lowering.py registers its dtype rule's generic lowering under the names;
                HAND: lowering.py lowers it by hand (`lowers(name)`); INTERNAL: no torch op
  raises        the kernel may flag ERR_ZERO_DIV (an integer division by zero)
The symbolic shape rule follows from the arity (`meta_rule`: one operand keeps its shape, more
broadcast); pydynamo/meta_rules.py registers it for each name's torch function and method.
Adding a pointwise op is adding its row (tests/codegen/test_primitives.py checks that every
consumer covers it). A leaf (numpy and torch only), so pydynamo/meta_rules.py may import it.
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import numpy as np
import torch

# dtype rules: operands share one dtype (lowering inserts the casts)
FLOAT = "float"            # computed in floating point: integer and bool operands promote
SAME = "same"              # computed and returned in the operands' promoted dtype
ROUND = "round"            # SAME on floats, the identity on integers
INTEGRAL = "integral"      # integer and bool operands only
COMPARE = "compare"        # bool result of operands compared in their promoted dtype
LOGICAL = "logical"        # bool result of operands read as bool
PREDICATE = "predicate"    # bool result of a float test; a constant on integers
BOOL_RULES = (COMPARE, LOGICAL, PREDICATE)

TABLE, HAND, INTERNAL = "table", "hand", "internal"
CUSTOM = "custom"
_DEFAULT = object()


@dataclass(frozen=True)
class Primitive:
    name: str
    arity: int
    dtype: str
    cpp: str
    triton: Optional[str]
    triton_int: Optional[str] = _DEFAULT
    triton_bool: Optional[str] = _DEFAULT
    interp: Optional[Callable] = None
    simd: bool = False
    aliases: Tuple[str, ...] = ()
    lowering: str = TABLE
    raises: bool = False

    def __post_init__(self):
        if self.triton_int is _DEFAULT:
            object.__setattr__(self, "triton_int", None if self.dtype == FLOAT else self.triton)
        if self.triton_bool is _DEFAULT:
            object.__setattr__(self, "triton_bool", self.triton_int)

    @property
    def bool_result(self) -> bool:
        return self.dtype in BOOL_RULES

    @property
    def names(self) -> Tuple[str, ...]:
        """The canonical names lowering to this primitive (none for an internal one)."""
        return () if self.lowering == INTERNAL else (self.name,) + self.aliases

    @property
    def meta_rule(self) -> str:
        return "same_shape" if self.arity == 1 else "broadcast"

    def triton_form(self, dtype) -> Optional[str]:
        """The Triton column for operands of `dtype` (a torch.dtype)."""
        if dtype.is_floating_point:
            return self.triton
        return self.triton_bool if dtype == torch.bool else self.triton_int


def _lgamma(v):
    """math.lgamma with libdevice's values at the poles (inf) instead of an exception."""
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):
        return math.inf


def _vec(fn):
    return np.vectorize(fn, otypes=[np.float64])


_INF = 'float("inf")'
_ZERO = "tl.zeros_like({0})"
_SIGN = "(({0} > 0).to({tl}) - ({0} < 0).to({tl}))"
_LOGICAL = "(({{0}} != 0) {} ({{1}} != 0))"
_P = Primitive

ROWS = [
    # -- unary, computed in floating point
    _P("exp", 1, FLOAT, "pd_exp({0})", "tl.exp({0})", simd=True),
    _P("exp2", 1, FLOAT, "std::exp2({0})", "tl.exp2({0})", simd=True),
    _P("expm1", 1, FLOAT, "std::expm1({0})", "libdevice.expm1({0})", interp=np.expm1, simd=True),
    _P("log", 1, FLOAT, "std::log({0})", "tl.log({0})", simd=True),
    _P("log2", 1, FLOAT, "std::log2({0})", "tl.log2({0})", simd=True),
    _P("log10", 1, FLOAT, "std::log10({0})", "libdevice.log10({0})", interp=np.log10, simd=True),
    _P("log1p", 1, FLOAT, "std::log1p({0})", "libdevice.log1p({0})", interp=np.log1p, simd=True),
    _P("sqrt", 1, FLOAT, "std::sqrt({0})", "tl.sqrt({0})"),
    _P("rsqrt", 1, FLOAT, "(1 / std::sqrt({0}))", "(1.0 / tl.sqrt({0}))"),
    _P("sin", 1, FLOAT, "pd_sin({0})", "tl.sin({0})", simd=True),
    _P("cos", 1, FLOAT, "pd_cos({0})", "tl.cos({0})", simd=True),
    _P("tan", 1, FLOAT, "std::tan({0})", "libdevice.tan({0})", interp=np.tan, simd=True),
    _P("asin", 1, FLOAT, "std::asin({0})", "libdevice.asin({0})", interp=np.arcsin, simd=True,
       aliases=("arcsin",)),
    _P("acos", 1, FLOAT, "std::acos({0})", "libdevice.acos({0})", interp=np.arccos, simd=True,
       aliases=("arccos",)),
    _P("atan", 1, FLOAT, "std::atan({0})", "libdevice.atan({0})", interp=np.arctan, simd=True,
       aliases=("arctan",)),
    _P("sinh", 1, FLOAT, "std::sinh({0})", "libdevice.sinh({0})", interp=np.sinh, simd=True),
    _P("cosh", 1, FLOAT, "std::cosh({0})", "libdevice.cosh({0})", interp=np.cosh, simd=True),
    _P("tanh", 1, FLOAT, "pd_tanh({0})", "libdevice.tanh({0})", interp=np.tanh, simd=True),
    _P("asinh", 1, FLOAT, "std::asinh({0})", "libdevice.asinh({0})", interp=np.arcsinh,
       simd=True, aliases=("arcsinh",)),
    _P("acosh", 1, FLOAT, "std::acosh({0})", "libdevice.acosh({0})", interp=np.arccosh,
       simd=True, aliases=("arccosh",)),
    _P("atanh", 1, FLOAT, "std::atanh({0})", "libdevice.atanh({0})", interp=np.arctanh,
       simd=True, aliases=("arctanh",)),
    _P("erf", 1, FLOAT, "std::erf({0})", "tl.erf({0})", simd=True),
    _P("erfc", 1, FLOAT, "std::erfc({0})", "libdevice.erfc({0})", interp=_vec(math.erfc),
       simd=True),
    _P("lgamma", 1, FLOAT, "std::lgamma({0})", "libdevice.lgamma({0})", interp=_vec(_lgamma)),
    _P("sigmoid", 1, FLOAT, "pd_sigmoid({0})", "(1.0 / (1.0 + tl.exp(-{0})))"),
    _P("reciprocal", 1, FLOAT, "(1 / {0})", "(1.0 / {0})"),
    # -- unary, same dtype (bool operands are not lowered, but sign of a bool is itself)
    _P("neg", 1, SAME, "-{0}", "(-{0})", triton_bool=None, aliases=("negative",)),
    _P("abs", 1, SAME, "std::abs({0})", "tl.abs({0})", aliases=("absolute",)),
    _P("relu", 1, SAME, "pd_relu({0})", "tl.where({0} < 0, 0, {0})"),
    _P("square", 1, SAME, "({0} * {0})", "({0} * {0})"),
    _P("sign", 1, SAME, "pd_sign({0})", _SIGN, triton_bool="{0}"),
    _P("sgn", 1, SAME, "pd_sgn({0})", _SIGN, triton_bool="{0}"),
    # -- rounding: the identity on integers
    _P("floor", 1, ROUND, "std::floor({0})", "tl.floor({0})", triton_int="{0}"),
    _P("ceil", 1, ROUND, "std::ceil({0})", "tl.ceil({0})", triton_int="{0}"),
    _P("round", 1, ROUND, "std::nearbyint({0})", "libdevice.nearbyint({0})", triton_int="{0}",
       interp=np.rint),
    _P("trunc", 1, ROUND, "std::trunc({0})", "libdevice.trunc({0})", triton_int="{0}",
       interp=np.trunc, aliases=("fix",)),
    _P("frac", 1, ROUND, "({0} - std::trunc({0}))", "({0} - libdevice.trunc({0}))",
       triton_int=None, interp=np.trunc),
    # -- float tests
    _P("isnan", 1, PREDICATE, "std::isnan({0})", "({0} != {0})", triton_int=f"({_ZERO} != 0)"),
    _P("isinf", 1, PREDICATE, "std::isinf({0})", f"(tl.abs({{0}}) == {_INF})",
       triton_int=f"({_ZERO} != 0)"),
    _P("isfinite", 1, PREDICATE, "std::isfinite({0})",
       f"(({{0}} == {{0}}) & (tl.abs({{0}}) != {_INF}))", triton_int=f"({_ZERO} == 0)"),
    _P("isposinf", 1, PREDICATE, "(std::isinf({0}) && {0} > 0)", f"({{0}} == {_INF})",
       triton_int=f"({_ZERO} != 0)"),
    _P("isneginf", 1, PREDICATE, "(std::isinf({0}) && {0} < 0)", f"({{0}} == -{_INF})",
       triton_int=f"({_ZERO} != 0)"),
    _P("signbit", 1, PREDICATE, "std::signbit({0})", "({0}.to({ibits}, bitcast=True) < 0)",
       triton_int="({0} < 0)"),
    # -- logical and bitwise
    _P("logical_not", 1, LOGICAL, "(!{0})", "({0} == 0)", lowering=HAND),
    _P("logical_and", 2, LOGICAL, "(static_cast<bool>({0}) && static_cast<bool>({1}))",
       _LOGICAL.format("&")),
    _P("logical_or", 2, LOGICAL, "(static_cast<bool>({0}) || static_cast<bool>({1}))",
       _LOGICAL.format("|")),
    _P("logical_xor", 2, LOGICAL, "(static_cast<bool>({0}) != static_cast<bool>({1}))",
       _LOGICAL.format("^")),
    _P("bitwise_not", 1, INTEGRAL, "(~{0})", None, triton_int="(~{0})",
       triton_bool="({0} == 0)", lowering=HAND, aliases=("invert",)),
    _P("bitwise_and", 2, INTEGRAL, "({0} & {1})", "({0} & {1})"),
    _P("bitwise_or", 2, INTEGRAL, "({0} | {1})", "({0} | {1})"),
    _P("bitwise_xor", 2, INTEGRAL, "({0} ^ {1})", "({0} ^ {1})", aliases=("xor",)),
    # -- comparisons
    _P("eq", 2, COMPARE, "({0} == {1})", "({0} == {1})"),
    _P("ne", 2, COMPARE, "({0} != {1})", "({0} != {1})", aliases=("not_equal",)),
    _P("lt", 2, COMPARE, "({0} < {1})", "({0} < {1})", aliases=("less",)),
    _P("le", 2, COMPARE, "({0} <= {1})", "({0} <= {1})", aliases=("less_equal",)),
    _P("gt", 2, COMPARE, "({0} > {1})", "({0} > {1})", aliases=("greater",)),
    _P("ge", 2, COMPARE, "({0} >= {1})", "({0} >= {1})", aliases=("greater_equal",)),
    # -- binary arithmetic (NaN-propagating maximum/minimum, like eager)
    _P("add", 2, SAME, "({0} + {1})", "({0} + {1})"),
    _P("sub", 2, SAME, "({0} - {1})", "({0} - {1})", aliases=("subtract",)),
    _P("mul", 2, SAME, "({0} * {1})", "({0} * {1})", aliases=("multiply",)),
    _P("maximum", 2, SAME, "pd_max({0}, {1})", "tl.where(({0} > {1}) | ({0} != {0}), {0}, {1})",
       aliases=("max_binary",)),
    _P("minimum", 2, SAME, "pd_min({0}, {1})", "tl.where(({0} < {1}) | ({0} != {0}), {0}, {1})",
       aliases=("min_binary",)),
    _P("fmax", 2, SAME, "std::fmax({0}, {1})", "tl.where(({0} > {1}) | ({1} != {1}), {0}, {1})"),
    _P("fmin", 2, SAME, "std::fmin({0}, {1})", "tl.where(({0} < {1}) | ({1} != {1}), {0}, {1})"),
    # -- division and powers (Python-style floor/remainder for floats)
    _P("truediv", 2, FLOAT, "({0} / {1})", "({0} / {1})", lowering=HAND,
       aliases=("div", "divide", "true_divide")),
    _P("floordiv", 2, SAME, "pd_floordiv({0}, {1})", "tl.floor({0} / {1})", triton_int=None,
       lowering=HAND, aliases=("floor_divide",)),     # integers: int_floordiv
    _P("remainder", 2, SAME, "pd_remainder({0}, {1})", CUSTOM, lowering=HAND, aliases=("mod",)),
    _P("fmod", 2, SAME, "std::fmod({0}, {1})", "libdevice.fmod({0}, {1})",
       triton_int="({0} % {1})", interp=np.fmod, lowering=HAND),
    _P("pow", 2, SAME, "std::pow({0}, {1})", "libdevice.pow({0}, {1})", triton_int=None,
       interp=np.power, simd=True, lowering=HAND),
    # -- binary, computed in floating point
    _P("atan2", 2, FLOAT, "std::atan2({0}, {1})", "libdevice.atan2({0}, {1})",
       interp=np.arctan2, simd=True, aliases=("arctan2",)),
    _P("copysign", 2, FLOAT, "std::copysign({0}, {1})", "libdevice.copysign({0}, {1})",
       interp=np.copysign),
    _P("hypot", 2, FLOAT, "std::hypot({0}, {1})", "libdevice.hypot({0}, {1})", interp=np.hypot,
       simd=True),
    _P("nextafter", 2, FLOAT, "std::nextafter({0}, {1})", "libdevice.nextafter({0}, {1})",
       interp=np.nextafter),
    _P("xlogy", 2, FLOAT, "pd_xlogy({0}, {1})",
       "tl.where({1} != {1}, {1}, tl.where({0} == 0, 0.0, {0} * tl.log({1})))"),
    # -- integer division: flags ERR_ZERO_DIV on a zero divisor (eager raises)
    _P("int_floordiv", 2, INTEGRAL, "pd_int_floordiv({0}, {1}, &pd_err)", None,
       triton_int=CUSTOM, lowering=INTERNAL, raises=True),
    _P("int_truncdiv", 2, INTEGRAL, "pd_int_truncdiv({0}, {1}, &pd_err)", None,
       triton_int=CUSTOM, lowering=INTERNAL, raises=True),
    _P("int_remainder", 2, INTEGRAL, "pd_int_remainder({0}, {1}, &pd_err)", None,
       triton_int=CUSTOM, lowering=INTERNAL, raises=True),
    _P("int_fmod", 2, INTEGRAL, "pd_int_fmod({0}, {1}, &pd_err)", None, triton_int=CUSTOM,
       lowering=INTERNAL, raises=True),
    # -- select: the result has the dtype of the last two operands
    _P("where", 3, SAME, "({0} ? {1} : {2})", "tl.where({0}, {1}, {2})", lowering=HAND),
]

PRIMITIVES: Dict[str, Primitive] = {p.name: p for p in ROWS}


def libdevice_calls(prim: Primitive) -> set:
    """The `libdevice` functions the primitive's Triton forms call."""
    forms = [f for f in (prim.triton, prim.triton_int, prim.triton_bool) if f and f != CUSTOM]
    return {m for f in forms for m in re.findall(r"libdevice\.(\w+)\(", f)}


# libdevice function name -> the numpy stand-in the Triton interpreter calls instead
LIBDEVICE_STAND_INS: Dict[str, Callable] = {fn: p.interp for p in ROWS
                                             for fn in libdevice_calls(p)}

"""Lowerings: canonical primitive -> TensorValue (loop IR), registered by name.

`LOWERINGS[name](*args, **kwargs)` receives TensorValues for tensor arguments and plain Python
values (ints, floats, sympy sizes, dtypes, lists) for the rest, with the signature of the eager
torch op of that name. A lowering raises `NotLowered` for any case it does not implement
exactly; the graph lowerer then calls the eager op instead (extern). Dtype rules follow eager
type promotion; the graph lowerer additionally checks each node's dtype and shape against the
propagated metadata, so a lowering bug shows as an extern call, not a wrong value.

This module holds the building blocks (broadcast, pointwise, reductions, views, fills);
decompositions.py builds compound ops from them.
"""
from __future__ import annotations

import math
from typing import Callable, Dict, List, Optional, Sequence

import sympy
import torch

from codegen.ir import (NotLowered, Reduction, TensorValue, body_cost, current, realize,
                        strided_view_of)
from codegen.ops import ERR_INDEX, ERR_INDEX_IN_SELF, ops
from codegen import primitives as prims
from codegen.sizevars import (_is_int_poly, contiguous_strides, equals, flat_index, product,
                              static_int)
from codegen.symbolic import same_size, size_hint, size_is_one
from codegen.scalars import has_scalar
from pydynamo.symbols import FloorDiv, ModIdx, broadcast

LOWERINGS: Dict[str, Callable] = {}

def register(*names):
    def deco(fn):
        for n in names:
            LOWERINGS[n] = fn
        return fn
    return deco


def lowers(primitive: str):
    """Register a hand-written lowering of a primitive under its names (codegen/primitives.py)."""
    assert prims.PRIMITIVES[primitive].lowering == prims.HAND, primitive
    return register(*prims.PRIMITIVES[primitive].names)


def is_tensor(x) -> bool:
    return isinstance(x, TensorValue)


def check_dtype(dt):
    if dt not in current.graph.backend.dtypes:      # the kernel target's (codegen/pipeline.py)
        raise NotLowered(f"dtype {dt}")
    return dt


def is_float(dt) -> bool:
    return dt.is_floating_point


# ------------------------------------------------------------------ dtype promotion


def _meta_like(x):
    if is_tensor(x):
        return torch.empty((1,) * min(x.ndim, 1), dtype=x.dtype, device="meta")
    if isinstance(x, (bool, int, float)):
        return x
    if isinstance(x, sympy.Expr):
        return 1 if x.is_integer else 1.0
    raise NotLowered(f"operand {type(x).__name__}")


def result_dtype(*args) -> torch.dtype:
    metas = [_meta_like(a) for a in args]
    t = [m for m in metas if isinstance(m, torch.Tensor)]
    if not t:
        raise NotLowered("no tensor operand")
    dt = t[0]
    for m in metas:
        if m is t[0]:
            continue
        dt = torch.empty((1,) * min(_ndim(dt), 1), dtype=torch.result_type(dt, m), device="meta") \
            if _ndim(dt) or (isinstance(m, torch.Tensor) and m.ndim) else \
            torch.empty((), dtype=torch.result_type(dt, m), device="meta")
    return check_dtype(dt.dtype)


def _ndim(m):
    return m.ndim if isinstance(m, torch.Tensor) else 0


def float_dtype_for(dt) -> torch.dtype:
    return dt if is_float(dt) else torch.get_default_dtype()


# ------------------------------------------------------------------ broadcasting


def broadcast_sizes(*sizes: Sequence) -> List[sympy.Expr]:
    """pydynamo/symbols.py's `broadcast` decided on the example sizes, the wrapper re-checking
    each assumption; a dim all operands give the same size is that size, nothing assumed."""
    out = broadcast([[sympy.sympify(d) for d in s] for s in sizes], size_is_one, same_size,
                    decide_uniform=False)
    if out is None:
        raise NotLowered("broadcast mismatch")
    return [sympy.sympify(d) for d in out]


def expand_to(x: TensorValue, size: Sequence) -> TensorValue:
    size = [sympy.sympify(s) for s in size]
    if list(x.size) == size:
        return x
    lead = len(size) - x.ndim
    if lead < 0:
        raise NotLowered("expand to fewer dims")
    # a dim broadcasts when its size is 1, also a symbolic size decided 1 on the example sizes
    # (`(s1 + 1) // 2` of a stepped slice, an assumption the wrapper re-checks): read index 0
    ones = [s != t and size_is_one(s) for s, t in zip(x.size, size[lead:])]

    def loader(idx):
        return x.loader([sympy.Integer(0) if one else i for one, i in zip(ones, idx[lead:])])
    return TensorValue(size, x.dtype, loader, None, x.cost)


def value_loader(x, dtype):
    """Loader for a tensor or a Python scalar, producing values of `dtype`."""
    if is_tensor(x):
        if x.dtype == dtype:
            return x.loader
        return lambda idx: ops.to_dtype(x.loader(idx), dtype)
    if isinstance(x, sympy.Expr) and not x.is_number:
        if has_scalar(x):
            if not isinstance(x, sympy.Symbol):
                # a lowering's own arithmetic on a runtime float (exact in sympy, not as
                # eager rounds it): the eager op gets the wrapper's value instead
                raise NotLowered(f"expression {x} of a runtime float")
            return lambda idx: ops.scalar(x.name, dtype)
        if _is_int_poly(x):
            return lambda idx: ops.index_expr(x, dtype)
        # a true division of sizes (Python's `x.shape[0] / 2`): a double, as in Python
        num, den = sympy.fraction(sympy.together(x))
        if not (_is_int_poly(num) and _is_int_poly(den)):
            raise NotLowered(f"symbolic scalar {x}")
        f64 = torch.float64
        return lambda idx: ops.to_dtype(ops.truediv(ops.index_expr(num, f64),
                                                    ops.index_expr(den, f64)), dtype)
    val = x
    return lambda idx: ops.constant(val, dtype)


def pointwise(fn, args, compute_dtype, out_dtype=None) -> TensorValue:
    """Elementwise op: broadcast tensor args, cast all to compute_dtype, apply fn."""
    out_dtype = out_dtype or compute_dtype
    check_dtype(compute_dtype)
    check_dtype(out_dtype)
    tensors = [a for a in args if is_tensor(a)]
    size = broadcast_sizes(*[t.size for t in tensors])
    loaders = [value_loader(expand_to(a, size) if is_tensor(a) else a, compute_dtype)
               for a in args]

    def loader(idx):
        return fn(*[ld(idx) for ld in loaders])
    cost = 1 + sum(t.cost for t in tensors)
    return maybe_realize(TensorValue(size, out_dtype, loader, None, cost))


def maybe_realize(tv: TensorValue, limit: int = 64) -> TensorValue:
    """Keep inlined bodies bounded: a deep expression becomes a buffer."""
    if tv.buffer is None and tv.cost > limit:
        return realize(tv)
    return tv


def cast(x: TensorValue, dtype) -> TensorValue:
    check_dtype(dtype)
    if x.dtype == dtype:
        return x
    return TensorValue(list(x.size), dtype, value_loader(x, dtype), None, x.cost + 1)


# ------------------------------------------------------------------ elementwise primitives
# The generic lowering of each dtype rule (codegen/primitives.py), made per TABLE primitive and
# registered under its names below; the HAND ones follow, each under `lowers(name)`.

def _unary(p):
    """FLOAT rule: integers promote to float; SAME: the dtype is kept (no bool but sign's)."""
    def lower(x):
        if not is_tensor(x):
            raise NotLowered("scalar input")
        if p.dtype == prims.FLOAT:
            return pointwise(getattr(ops, p.name), [x], float_dtype_for(x.dtype))
        if x.dtype == torch.bool:
            if p.name == "sign":
                return x
            raise NotLowered(f"{p.name} on bool")
        return pointwise(getattr(ops, p.name), [x], x.dtype)
    return lower


def _rounding(p):
    def lower(x, decimals=0):
        if not is_tensor(x) or decimals != 0:
            raise NotLowered("round decimals")
        if not is_float(x.dtype):
            if p.name == "frac" or x.dtype == torch.bool:
                raise NotLowered(f"{p.name} on int")
            return x
        return pointwise(getattr(ops, p.name), [x], x.dtype)
    return lower


def _binary(p):
    """FLOAT (promoted to float), COMPARE, LOGICAL (operands as bool) and INTEGRAL rules."""
    def lower(input, other):
        dt = result_dtype(input, other)
        if p.dtype == prims.FLOAT:
            dt = float_dtype_for(dt)
        elif p.dtype == prims.INTEGRAL and is_float(dt):
            raise NotLowered("bitwise on float")
        elif p.dtype == prims.LOGICAL:
            dt = torch.bool
        return pointwise(getattr(ops, p.name), [input, other], dt,
                         torch.bool if p.bool_result else None)
    return lower


def _binary_arith(p):
    """SAME rule (alpha for add and sub; add and mul of bools are logical or and and)."""
    def lower(input, other, *, alpha=None, out=None):
        if out is not None:
            raise NotLowered("out=")
        dt = result_dtype(input, other)
        if dt == torch.bool and p.name == "sub":
            raise NotLowered("bool sub")
        if alpha is not None and alpha != 1:
            if p.name not in ("add", "sub"):
                raise NotLowered("alpha")
            other = mul(other, alpha) if is_tensor(other) else other * alpha
            dt = result_dtype(input, other)
        if dt == torch.bool and p.name in ("add", "mul"):
            fn = ops.logical_or if p.name == "add" else ops.logical_and
            return pointwise(fn, [input, other], dt)
        return pointwise(getattr(ops, p.name), [input, other], dt)
    return lower


def add(a, b):
    return LOWERINGS["add"](a, b)


def sub(a, b):
    return LOWERINGS["sub"](a, b)


def mul(a, b):
    return LOWERINGS["mul"](a, b)


@register("rsub")
def rsub(input, other, *, alpha=1):
    # other - alpha * input
    return sub(other, input if alpha == 1 else mul(input, alpha))


@lowers("truediv")
def div(input, other, *, rounding_mode=None, out=None):
    if out is not None:
        raise NotLowered("out=")
    dt = result_dtype(input, other)
    if rounding_mode is None:
        fdt = float_dtype_for(dt)
        return pointwise(ops.truediv, [input, other], fdt)
    if is_float(dt):
        fn = ops.floordiv if rounding_mode == "floor" else (
            lambda a, b: ops.trunc(ops.truediv(a, b)))
        return pointwise(fn, [input, other], dt)
    if dt == torch.bool:
        raise NotLowered("bool division")
    fn = ops.int_floordiv if rounding_mode == "floor" else ops.int_truncdiv
    return pointwise(fn, [input, other], dt)


@lowers("floordiv")
def floor_divide(input, other):
    return div(input, other, rounding_mode="floor")


@lowers("remainder")
def remainder(input, other):
    dt = result_dtype(input, other)
    if dt == torch.bool:
        raise NotLowered("bool remainder")
    return pointwise(ops.remainder if is_float(dt) else ops.int_remainder, [input, other], dt)


@lowers("fmod")
def fmod(input, other):
    dt = result_dtype(input, other)
    if dt == torch.bool:
        raise NotLowered("bool fmod")
    return pointwise(ops.fmod if is_float(dt) else ops.int_fmod, [input, other], dt)


@lowers("pow")
def pow_(input, exponent):
    dt = result_dtype(input, exponent)
    if not is_float(dt):
        raise NotLowered("integer pow")
    if isinstance(exponent, (int, float)) and not isinstance(exponent, bool):
        if exponent == 2:
            return pointwise(ops.square, [input], dt)
        if exponent == 1:
            return cast(input, dt)
        if exponent == 0.5:
            return pointwise(ops.sqrt, [input], dt)
    return pointwise(ops.pow, [input, exponent], dt)


@register("rpow")
def rpow(input, other):
    return pow_(other, input)


@lowers("logical_not")
def logical_not(input):
    return pointwise(ops.logical_not, [input], torch.bool)


@lowers("bitwise_not")
def bitwise_not(input):
    if is_float(input.dtype):
        raise NotLowered("bitwise_not float")
    if input.dtype == torch.bool:
        return logical_not(input)
    return pointwise(ops.bitwise_not, [input], input.dtype)


def _predicate(p):
    def lower(input):
        if not is_float(input.dtype):
            if p.name in ("isnan", "isinf", "isposinf", "isneginf", "signbit"):
                if p.name == "signbit" and input.dtype != torch.bool:
                    return pointwise(lambda a: ops.lt(a, ops.constant(0, input.dtype)), [input],
                                     input.dtype, torch.bool)
                return full_like_bool(input, False)
            return full_like_bool(input, True)
        return pointwise(getattr(ops, p.name), [input], input.dtype, torch.bool)
    return lower


_GENERIC = {(prims.FLOAT, 1): _unary, (prims.SAME, 1): _unary, (prims.ROUND, 1): _rounding,
            (prims.PREDICATE, 1): _predicate, (prims.SAME, 2): _binary_arith,
            (prims.FLOAT, 2): _binary, (prims.COMPARE, 2): _binary, (prims.LOGICAL, 2): _binary,
            (prims.INTEGRAL, 2): _binary}
for _p in prims.ROWS:
    if _p.lowering == prims.TABLE:
        register(*_p.names)(_GENERIC[_p.dtype, _p.arity](_p))


def full_like_bool(x, v):
    return full(list(x.size), v, dtype=torch.bool)


@lowers("where")
def where(condition, input=None, other=None):
    if input is None:
        raise NotLowered("where(cond) is nonzero")
    if not is_tensor(condition):
        raise NotLowered("scalar condition")
    dt = result_dtype(input, other) if (is_tensor(input) or is_tensor(other)) else None
    if dt is None:
        raise NotLowered("where of scalars")
    tensors = [t for t in (condition, input, other) if is_tensor(t)]
    size = broadcast_sizes(*[t.size for t in tensors])
    c = value_loader(expand_to(condition, size), torch.bool)
    a = value_loader(expand_to(input, size) if is_tensor(input) else input, dt)
    b = value_loader(expand_to(other, size) if is_tensor(other) else other, dt)
    cost = 1 + sum(t.cost for t in tensors)
    return maybe_realize(TensorValue(size, dt, lambda i: ops.where(c(i), a(i), b(i)), None, cost))


@register("where_method")
def where_method(input, condition, other):
    return where(condition, input, other)


@register("clamp", "clip")
def clamp(input, min=None, max=None):
    if is_tensor(min) or is_tensor(max):
        dt = result_dtype(*[x for x in (input, min, max) if x is not None])
    else:
        dt = result_dtype(input, *[x for x in (min, max) if x is not None])
    if dt == torch.bool:
        raise NotLowered("clamp bool")
    out = cast(input, dt)
    if min is not None:
        out = pointwise(ops.maximum, [out, min], dt)
    if max is not None:
        out = pointwise(ops.minimum, [out, max], dt)
    return out


@register("clamp_min")
def clamp_min(input, min):
    return clamp(input, min=min)


@register("clamp_max")
def clamp_max(input, max):
    return clamp(input, max=max)


# ------------------------------------------------------------------ dtype conversions


def _parse_to_args(args, kwargs):
    dtype = kwargs.get("dtype")
    for a in args:
        if isinstance(a, torch.dtype):
            dtype = a
        elif isinstance(a, (torch.device, str)):
            if torch.device(a).type != "cpu":
                raise NotLowered("device move")
        elif is_tensor(a):
            dtype = a.dtype
        elif a is None:
            pass
        else:
            raise NotLowered("to() argument")
    dev = kwargs.get("device")
    if dev is not None and torch.device(dev).type != "cpu":
        raise NotLowered("device move")
    _check_preserve_format(kwargs.get("memory_format"))
    return dtype


def _check_preserve_format(memory_format):
    """A cast lowers to a value (a new contiguous buffer, or the input itself when the dtype is
    already right); only preserve_format means that. Another memory_format asks for a layout
    (and, for contiguous_format of a non-contiguous input, a copy): eager's op does it."""
    if memory_format not in (None, torch.preserve_format):
        raise NotLowered("memory_format")


@register("to")
def to(input, *args, **kwargs):
    dtype = _parse_to_args(args, kwargs)
    return input if dtype is None else cast(input, dtype)


@register("type_as")
def type_as(input, other):
    return cast(input, other.dtype)


for _name, _dt in [("float", torch.float32), ("double", torch.float64), ("long", torch.int64),
                   ("int", torch.int32), ("bool", torch.bool), ("short", torch.int16),
                   ("char", torch.int8), ("byte", torch.uint8)]:
    register(_name)(lambda input, memory_format=None, _dt=_dt:
                    _check_preserve_format(memory_format) or cast(input, _dt))


@register("clone", "contiguous", "detach", "alias", "positive", "resolve_conj", "resolve_neg")
def identity(input, *args, memory_format=None):
    return input


# ------------------------------------------------------------------ reductions


def norm_dim(d, ndim) -> int:
    n = max(ndim, 1)
    if not -n <= d < n:
        raise NotLowered("dim out of range")
    return d % n


def norm_dims(dim, ndim) -> List[int]:
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        return list(range(ndim))
    if isinstance(dim, int):
        dim = [dim]
    dims = sorted({norm_dim(d, ndim) for d in dim})
    return dims


REDUCTION_OUT_DTYPE = {
    "sum": lambda dt: torch.int64 if not is_float(dt) else dt,
    "prod": lambda dt: torch.int64 if not is_float(dt) else dt,
    "max": lambda dt: dt, "min": lambda dt: dt,
    "any": lambda dt: torch.bool, "all": lambda dt: torch.bool,
    "argmax": lambda dt: torch.int64, "argmin": lambda dt: torch.int64,
    "welford": lambda dt: dt,
}


def make_reduction(x: TensorValue, dims, rtype: str, keepdim=False, src_dtype=None):
    """Reduce x over dims. Returns the output TensorValue (welford: (mean, m2))."""
    if x.ndim == 0:
        dims = []
    if any(sympy.sympify(s) == 0 for s in x.size):
        raise NotLowered("empty reduction")
    src_dtype = src_dtype or x.dtype
    check_dtype(src_dtype)
    kept = [d for d in range(x.ndim) if d not in dims]
    ranges = [x.size[d] for d in kept]
    rranges = [x.size[d] for d in dims]
    xl = value_loader(x, src_dtype)
    nd = x.ndim

    def inner_fn(idx, ridx):
        full_idx = [None] * nd
        for d, i in zip(kept, idx):
            full_idx[d] = i
        for d, r in zip(dims, ridx):
            full_idx[d] = r
        return xl(full_idx)

    out_dtype = REDUCTION_OUT_DTYPE[rtype](src_dtype)
    g = current.graph
    if rtype == "sum" and _splits(g, dims, kept, ranges, rranges, src_dtype):
        v = cast(_split_leading_sum(x, dims, kept, ranges, rranges, xl, src_dtype), out_dtype)
        return _keepdim_view(v, x.ndim, dims) if keepdim else v
    red = Reduction(ranges, rranges, rtype, inner_fn, src_dtype)
    buf = g.new_computed(ranges, out_dtype, red, x.origins)
    outs = [buf]
    if rtype == "welford":
        buf.aux = g.new_aux(buf)
        outs.append(buf.aux)
    vals = [TensorValue.of_buffer(b) for b in outs]
    if keepdim:
        vals = [_keepdim_view(v, x.ndim, dims) for v in vals]
    return vals if rtype == "welford" else vals[0]


# A sum over leading dims of many rows into few outputs (bias and norm-weight gradients: 2048
# rows into 768) reads down columns: as one reduction each program takes a couple of outputs and
# strides through every row (0.25-0.9 ms per such kernel in GPT-2's backward on an H100). Split
# in two (Backend.split_reductions): partial sums of SPLIT_CHUNK rows each, (rows / chunk) x
# outputs with contiguous loads across outputs, then the sum of the partials. Partials of a
# 16-bit input stay float32, so the result is rounded once, as an unsplit sum's is.
SPLIT_MIN_ROWS = 1024
SPLIT_CHUNK = 64


def _splits(g, dims, kept, ranges, rranges, src_dtype) -> bool:
    if not g.backend.split_reductions or not kept or not is_float(src_dtype) or \
            sorted(dims) != list(range(len(dims))):
        return False
    rows, outs = static_int(product(rranges)), static_int(product(ranges))
    return rows is not None and outs is not None and rows >= SPLIT_MIN_ROWS and \
        rows % SPLIT_CHUNK == 0 and outs <= 16 * rows


def _split_leading_sum(x, dims, kept, ranges, rranges, xl, src_dtype) -> TensorValue:
    nd = x.ndim
    splits = static_int(product(rranges)) // SPLIT_CHUNK
    part_dtype = torch.float32 if src_dtype in (torch.float16, torch.bfloat16) else src_dtype

    def inner_fn(idx, ridx):
        flat = idx[0] * SPLIT_CHUNK + ridx[0]
        full_idx = [None] * nd
        for d, i in zip(kept, idx[1:]):
            full_idx[d] = i
        for d, size, st in zip(dims, rranges, contiguous_strides(rranges)):
            full_idx[d] = ModIdx(flat, st, size) if size != 1 else sympy.Integer(0)
        return xl(full_idx)
    g = current.graph
    red = Reduction([sympy.Integer(splits)] + list(ranges), [sympy.Integer(SPLIT_CHUNK)], "sum",
                    inner_fn, src_dtype)
    partial = g.new_computed([sympy.Integer(splits)] + list(ranges), part_dtype, red, x.origins)
    return make_reduction(TensorValue.of_buffer(partial), [0], "sum")


def _keepdim_view(v: TensorValue, ndim, dims):
    size = [sympy.Integer(1) if d in dims else None for d in range(ndim)]
    kept = [d for d in range(ndim) if d not in dims]
    for d, s in zip(kept, v.size):
        size[d] = s

    def loader(idx):
        return v.loader([idx[d] for d in kept])
    return TensorValue(size, v.dtype, loader, None, v.cost)


@register("sum")
def sum_(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    if input.dtype == torch.bool or (not is_float(input.dtype) and input.dtype != torch.int64):
        input = cast(input, torch.int64)
    return make_reduction(input, norm_dims(dim, input.ndim), "sum", keepdim)


@register("prod")
def prod(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    if not is_float(input.dtype):
        input = cast(input, torch.int64)
    if isinstance(dim, (list, tuple)):
        raise NotLowered("prod dim list")
    return make_reduction(input, norm_dims(dim, input.ndim), "prod", keepdim)


@register("mean")
def mean(input, dim=None, keepdim=False, *, dtype=None):
    if dtype is not None:
        input = cast(input, dtype)
    if not is_float(input.dtype):
        raise NotLowered("mean of int")
    dims = norm_dims(dim, input.ndim)
    s = make_reduction(input, dims, "sum", keepdim)
    n = product([input.size[d] for d in dims])
    return pointwise(ops.truediv, [s, n], input.dtype)


@register("amax")
def amax(input, dim=(), keepdim=False):
    return make_reduction(input, norm_dims(dim, input.ndim), "max", keepdim)


@register("amin")
def amin(input, dim=(), keepdim=False):
    return make_reduction(input, norm_dims(dim, input.ndim), "min", keepdim)


def _argreduce(rtype):
    def lower(input, dim=None, keepdim=False):
        if input.dtype == torch.bool:
            raise NotLowered("arg-reduce bool")
        if dim is None:
            flat = reshape(input, [-1])
            out = make_reduction(flat, [0], rtype, False)
            if keepdim:
                return view_as_ndim_ones(out, input.ndim)
            return out
        return make_reduction(input, [norm_dim(dim, input.ndim)], rtype, keepdim)
    return lower


register("argmax")(_argreduce("argmax"))
register("argmin")(_argreduce("argmin"))


def view_as_ndim_ones(v, ndim):
    return TensorValue([sympy.Integer(1)] * ndim, v.dtype, lambda idx: v.loader([]), None, v.cost)


def _max_min(kind):
    def lower(input, dim=None, keepdim=False):
        if is_tensor(dim):
            return LOWERINGS["maximum" if kind == "max" else "minimum"](input, dim)
        if dim is None:
            return make_reduction(input, norm_dims(None, input.ndim), kind, False)
        d = norm_dim(dim, input.ndim)
        if input.dtype == torch.bool:
            raise NotLowered("max(dim) bool")
        vals = make_reduction(input, [d], kind, keepdim)
        idx = make_reduction(input, [d], "arg" + kind, keepdim)
        return (vals, idx)
    return lower


register("max")(_max_min("max"))
register("min")(_max_min("min"))


def _any_all(kind):
    def lower(input, dim=None, keepdim=False):
        if input.dtype == torch.uint8:
            raise NotLowered("any/all uint8")
        return make_reduction(cast(input, torch.bool), norm_dims(dim, input.ndim), kind, keepdim)
    return lower


register("any")(_any_all("any"))
register("all")(_any_all("all"))


def var_mean_impl(input, dim=None, correction=None, keepdim=False, unbiased=None):
    if not is_float(input.dtype):
        raise NotLowered("var of int")
    if unbiased is not None:
        correction = 1 if unbiased else 0
    if correction is None:
        correction = 1
    dims = norm_dims(dim, input.ndim)
    mean_, m2 = make_reduction(input, dims, "welford", keepdim)
    n = product([input.size[d] for d in dims])
    denom = sympy.Max(0, n - correction) if not isinstance(n - correction, int) else max(0, n - correction)
    denom = sympy.sympify(denom)
    if denom.is_number:
        denom = float(denom)
    var = pointwise(ops.truediv, [m2, denom], input.dtype)
    return var, mean_


def _var_args(input, dim=None, unbiased=None, keepdim=False, *, correction=None):
    if isinstance(dim, bool):
        unbiased, dim = dim, None
    return dict(input=input, dim=dim, correction=correction, keepdim=keepdim, unbiased=unbiased)


@register("var")
def var(*args, **kwargs):
    return var_mean_impl(**_var_args(*args, **kwargs))[0]


@register("std")
def std(*args, **kwargs):
    v = var_mean_impl(**_var_args(*args, **kwargs))[0]
    return pointwise(ops.sqrt, [v], v.dtype)


@register("var_mean")
def var_mean(*args, **kwargs):
    return var_mean_impl(**_var_args(*args, **kwargs))


@register("std_mean")
def std_mean(*args, **kwargs):
    v, m = var_mean_impl(**_var_args(*args, **kwargs))
    return pointwise(ops.sqrt, [v], v.dtype), m


# ------------------------------------------------------------------ views (index maps)


def _view(x: TensorValue, size, index_map) -> TensorValue:
    return TensorValue([sympy.sympify(s) for s in size], x.dtype,
                       lambda idx: x.loader(index_map(idx)), None, x.cost)


def _infer_size(shape, numel):
    shape = list(shape)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        shape = list(shape[0])
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise NotLowered("two -1 in view")
    if neg:
        known = product([s for s in shape if s != -1])
        if known == 0:
            raise NotLowered("view with 0")
        q = sympy.cancel(sympy.sympify(numel) / known)
        # not a polynomial (s0*16 / (2*(s0//2))): exact division, checked below
        shape[neg[0]] = q if _is_int_poly(q) else FloorDiv(numel, known)
    shape = [sympy.sympify(s) for s in shape]
    if not same_size(product(shape), numel):
        raise NotLowered("view numel mismatch")
    return shape


@register("reshape", "view")
def reshape(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise NotLowered("view(dtype)")
    old = list(input.size)
    new = _infer_size(shape, product(old))
    if new == old:
        return input
    view = _input_view(input, new)
    if isinstance(view, TensorValue):
        return view
    if view is False:
        # eager's copy (the result views it, not the input), contiguous: the result is its
        # view with contiguous strides (so views of the result fold to strides of the copy
        # under symbolic sizes too, sharing it as eager's do)
        copy = realize(TensorValue(old, input.dtype, input.loader, None, input.cost,
                                   input.origins))
        name, st = copy.buffer.name, contiguous_strides(new)
        return TensorValue(list(new), input.dtype,
                           lambda idx: ops.load(name, flat_index(idx, st, 0)), None,
                           copy.cost, list(input.origins))
    groups = _reshape_groups(old, new)

    def index_map(idx):
        out = [None] * len(old)
        for (ia, ib), (oa, ob) in groups:
            osz = new[oa:ob]
            lin = flat_index(idx[oa:ob], contiguous_strides(osz))
            isz = old[ia:ib]
            if ib - ia == 1:
                out[ia] = lin
                continue
            ist = contiguous_strides(isz)
            for k in range(ia, ib):
                st, sz = ist[k - ia], isz[k - ia]
                out[k] = FloorDiv(lin, st) if k == ia else ModIdx(lin, st, sz)
        return out
    return _view(input, new, index_map)


def _input_view(x: TensorValue, new):
    """Eager's reshape of `x` where `x` is a strided view of a buffer (a graph input, a
    constant, an extern's result, which may itself be a view of an input, or a computed
    buffer, which may be an output): the view it returns (a TensorValue over the buffer with
    torch's strides, `view_strides`), or False when that layout cannot give the new shape and
    eager reshapes a contiguous copy: what the result aliases and what as_strided on it reads
    follow from that (a view of a copy never aliases another output). None: not such a view
    (an unrealized value: the index map reshapes it, nothing shares its memory). Symbolic
    layouts are decided on the example sizes, each relation the decision used checked by the
    wrapper at every call."""
    if x.buffer is not None and x.buffer.layout.is_contiguous():
        return None
    ref = strided_view_of(x)
    if ref is None or any(size_hint(e) == 0 for e in ref.size):
        return None
    st = view_strides(list(ref.size), list(ref.stride), list(new), _decided)
    if st is None:
        return False
    name, offset = ref.buffer.name, ref.offset
    return TensorValue(list(new), x.dtype, lambda idx: ops.load(name, flat_index(idx, st, offset)),
                       None, x.cost, list(x.origins))


def _decided(rel) -> bool:
    """A relation between sizes, decided on the example sizes; a symbolic one is recorded as
    an assumption (or its negation) the wrapper re-checks."""
    rel = sympy.sympify(rel)
    if rel in (sympy.true, sympy.false):
        return bool(rel)
    sizes = getattr(current.graph, "sizes", None)
    if sizes is None:
        raise NotLowered("symbolic layout outside a graph")
    if sizes.assume(rel):
        return True
    sizes.assume(rel.negated)
    return False


def view_strides(size, stride, new, holds=bool):
    """torch's rule for viewing a tensor of (size, stride) as shape `new` (all sizes >= 1):
    the new strides, or None when the layout cannot give them (reshape then copies, view
    raises). Dims are merged only where each is contiguous with the next (size-1 dims are
    free). `holds` decides each relation (symbolic sizes: see _decided)."""
    if not size:
        return list(contiguous_strides(new))
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk = stride[-1]
    tensor_numel = view_numel = 1
    for d in range(len(size) - 1, -1, -1):
        tensor_numel = tensor_numel * size[d]
        if d == 0 or (holds(sympy.Ne(size[d - 1], 1)) and
                      holds(sympy.Ne(stride[d - 1], tensor_numel * chunk))):
            while view_d >= 0 and (holds(sympy.Lt(view_numel, tensor_numel)) or
                                   holds(sympy.Eq(new[view_d], 1))):
                out[view_d] = view_numel * chunk
                view_numel = view_numel * new[view_d]
                view_d -= 1
            if holds(sympy.Ne(view_numel, tensor_numel)):
                return None
            if d > 0:
                chunk, tensor_numel, view_numel = stride[d - 1], 1, 1
    return out if view_d == -1 else None


def _reshape_groups(old, new):
    """Pair up minimal runs of old/new dims with equal products."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        ia, ja = i, j
        po, pn = sympy.Integer(1), sympy.Integer(1)
        if i < len(old):
            po = old[i]
            i += 1
        if j < len(new):
            pn = new[j]
            j += 1
        while not equals(po, pn) and not (size_hint(po) == size_hint(pn) and same_size(po, pn)):
            if size_hint(po) < size_hint(pn) or j >= len(new):
                if i >= len(old):
                    raise NotLowered("reshape grouping")
                po = po * old[i]
                i += 1
            else:
                pn = pn * new[j]
                j += 1
        # absorb trailing size-1 dims on both sides into this group
        while i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            i += 1
        while j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            j += 1
        groups.append(((ia, i), (ja, j)))
    return groups


@register("flatten")
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, [1])
    s, e = norm_dim(start_dim, input.ndim), norm_dim(end_dim, input.ndim)
    size = input.size[:s] + [product(input.size[s:e + 1])] + input.size[e + 1:]
    return reshape(input, size)


@register("unflatten")
def unflatten(input, dim, sizes):
    d = norm_dim(dim, input.ndim)
    sizes = list(sizes)
    inner = _infer_size(sizes, input.size[d])
    return reshape(input, input.size[:d] + inner + input.size[d + 1:])


@register("view_as", "reshape_as")
def view_as(input, other):
    return reshape(input, list(other.size))


@register("permute")
def permute(input, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    dims = [norm_dim(d, input.ndim) for d in dims]
    if sorted(dims) != list(range(input.ndim)):
        raise NotLowered("bad permutation")
    inv = [dims.index(i) for i in range(input.ndim)]
    out = _view(input, [input.size[d] for d in dims], lambda idx: [idx[inv[i]] for i in range(len(inv))])
    if input.buffer is None and dims != sorted(dims):
        out.permuted = (input, dims)
    return out


@register("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    if input.ndim == 0:
        return input
    a, b = norm_dim(dim0, input.ndim), norm_dim(dim1, input.ndim)
    p = list(range(input.ndim))
    p[a], p[b] = p[b], p[a]
    return permute(input, p)


@register("t")
def t(input):
    if input.ndim > 2:
        raise NotLowered("t of >2d")
    return transpose(input, 0, 1) if input.ndim == 2 else input


@register("movedim", "moveaxis")
def movedim(input, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [norm_dim(s, input.ndim) for s in src]
    dst = [norm_dim(d, input.ndim) for d in dst]
    order = [None] * input.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter([i for i in range(input.ndim) if i not in src])
    order = [o if o is not None else next(rest) for o in order]
    return permute(input, order)


@register("unsqueeze")
def unsqueeze(input, dim):
    d = dim % (input.ndim + 1) if -input.ndim - 1 <= dim <= input.ndim else None
    if d is None:
        raise NotLowered("unsqueeze dim")
    size = input.size[:d] + [sympy.Integer(1)] + input.size[d:]
    return _view(input, size, lambda idx: idx[:d] + idx[d + 1:])


@register("squeeze")
def squeeze(input, dim=None):
    if dim is None:
        dims = [d for d, s in enumerate(input.size) if s == 1]
    else:
        dims = [norm_dim(d, input.ndim) for d in ([dim] if isinstance(dim, int) else dim)]
        dims = [d for d in dims if input.ndim and input.size[d] == 1]
    if not dims:
        return input
    size = [s for d, s in enumerate(input.size) if d not in dims]
    keep = [d for d in range(input.ndim) if d not in dims]

    def index_map(idx):
        out = [sympy.Integer(0)] * input.ndim
        for d, i in zip(keep, idx):
            out[d] = i
        return out
    return _view(input, size, index_map)


@register("expand")
def expand(input, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple, torch.Size)):
        sizes = sizes[0]
    sizes = list(sizes)
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise NotLowered("expand")
    out = [input.size[i - lead] if (s == -1) else sympy.sympify(s) for i, s in enumerate(sizes)]
    for i in range(lead, len(out)):
        if not size_is_one(input.size[i - lead]) and not same_size(out[i], input.size[i - lead]):
            raise NotLowered("expand mismatch")
    return expand_to(input, out)


@register("expand_as")
def expand_as(input, other):
    return expand(input, list(other.size))


@register("broadcast_to")
def broadcast_to(input, size):
    return expand(input, list(size))


def slice_(x, dim, start, end, step=1):
    d = norm_dim(dim, x.ndim)
    n = x.size[d]
    if not isinstance(step, int) or step <= 0:
        raise NotLowered("slice step")
    if n.is_number and all(v is None or isinstance(v, int) for v in (start, end)):
        start, end, step = slice(start, end, step).indices(int(n))
        length = sympy.Integer(max(0, (end - start + step - 1) // step))
    else:
        start, length = _symbolic_slice(n, start, end, step)
    size = list(x.size)
    size[d] = length

    def index_map(idx):
        idx = list(idx)
        idx[d] = idx[d] * step + start
        return idx
    return _view(x, size, index_map)


def _symbolic_slice(n, start, end, step):
    """(start, length) of a slice of a dim of symbolic size `n` or with symbolic bounds. Python
    clamps bounds into [0, n]; which clamp applies is decided on the example sizes and
    recorded as an assumption the wrapper re-checks at every call (else: eager)."""
    sizes = getattr(current.graph, "sizes", None)
    if sizes is None:
        raise NotLowered("symbolic slice outside a graph")

    def bound(v, default):
        if v is None:
            return default
        v = sympy.sympify(v)
        if not v.is_integer:
            raise NotLowered("slice bound")
        if v.is_number and v < 0:
            v = n + v
        elif not v.is_number and not sizes.assume(sympy.Ge(v, 0)):
            sizes.assume(sympy.Lt(v, 0))    # counts from the end, as in Python
            v = n + v
        if not sizes.assume(sympy.Ge(v, 0)):
            sizes.assume(sympy.Lt(v, 0))
            return sympy.Integer(0)
        if not sizes.assume(sympy.Le(v, n)):
            sizes.assume(sympy.Gt(v, n))
            return n
        return v
    lo, hi = bound(start, sympy.Integer(0)), bound(end, n)
    if not sizes.assume(sympy.Lt(lo, hi)):
        sizes.assume(sympy.Ge(lo, hi))
        return lo, sympy.Integer(0)
    return lo, (hi - lo if step == 1 else FloorDiv(hi - lo + step - 1, step))


def select(x, dim, index):
    d = norm_dim(dim, x.ndim)
    n = x.size[d]
    if not isinstance(index, int):
        raise NotLowered("select index")
    if n.is_number:
        if not -int(n) <= index < int(n):
            raise NotLowered("select index")
        index = sympy.Integer(index % int(n))
    else:       # a symbolic dim: in range on the example sizes, checked at each call
        sizes = getattr(current.graph, "sizes", None)
        if sizes is None or not sizes.assume(sympy.Ge(n, index + 1 if index >= 0 else -index)):
            raise NotLowered("select index")
        index = sympy.Integer(index) if index >= 0 else n + index
    size = x.size[:d] + x.size[d + 1:]
    return _view(x, size, lambda idx: list(idx[:d]) + [index] + list(idx[d:]))


register("select")(select)


@register("narrow")
def narrow(input, dim, start, length):
    if not isinstance(start, int):
        raise NotLowered("tensor start")
    d = norm_dim(dim, input.ndim)
    if start < 0:
        start += int(input.size[d])
    return slice_(input, d, start, start + length)


@register("getitem")
def getitem(x, item):
    if isinstance(x, (list, tuple)):
        return x[item]
    if not is_tensor(x):
        raise NotLowered("getitem on non-tensor")
    if not isinstance(item, tuple):
        item = (item,)
    if any(is_tensor(i) or isinstance(i, (list, bool)) for i in item):
        raise NotLowered("advanced indexing")
    n_real = sum(1 for i in item if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise NotLowered("too many indices")
    out, d = x, 0
    expanded = []
    for i in item:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(i)
    for i in expanded:
        if i is None:
            out = unsqueeze(out, d)
            d += 1
        elif isinstance(i, slice):
            if i != slice(None):
                out = slice_(out, d, i.start, i.stop, 1 if i.step is None else i.step)
            d += 1
        elif isinstance(i, int):
            out = select(out, d, i)
        else:
            raise NotLowered(f"index {type(i).__name__}")
    return out


@register("split")
def split(input, split_size_or_sections, dim=0):
    d = norm_dim(dim, input.ndim)
    n = input.size[d]
    if not n.is_number:
        raise NotLowered("symbolic split")
    n = int(n)
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [min(s, n - i) for i in range(0, n, s)] if s > 0 else [n]
    else:
        sizes = list(split_size_or_sections)
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_(input, d, start, start + s))
        start += s
    return tuple(outs)


@register("split_with_sizes")
def split_with_sizes(input, split_sizes, dim=0):
    return split(input, list(split_sizes), dim)


@register("chunk")
def chunk(input, chunks, dim=0):
    d = norm_dim(dim, input.ndim)
    n = int(input.size[d])
    s = -(-n // chunks)
    return split(input, s, d)


@register("unbind")
def unbind(input, dim=0):
    d = norm_dim(dim, input.ndim)
    return tuple(select(input, d, i) for i in range(int(input.size[d])))


@register("flip")
def flip(input, dims):
    dims = [norm_dim(d, input.ndim) for d in ([dims] if isinstance(dims, int) else dims)]

    def index_map(idx):
        return [(input.size[d] - 1 - i) if d in dims else i for d, i in enumerate(idx)]
    return _view(input, input.size, index_map)


@register("roll")
def roll(input, shifts, dims=None):
    if dims is None:
        flat = reshape(input, [-1])
        return reshape(roll(flat, shifts, 0), list(input.size))
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    out = input
    for s, d in zip(shifts, dims):
        d = norm_dim(d, input.ndim)
        n = out.size[d]
        if not n.is_number:
            raise NotLowered("symbolic roll")
        n = int(n)
        s = s % n if n else 0

        def index_map(idx, d=d, n=n, s=s):
            idx = list(idx)
            idx[d] = ModIdx(idx[d] + (n - s), 1, n)
            return idx
        out = _view(out, out.size, index_map)
    return out


@register("repeat")
def repeat(input, *repeats):
    if len(repeats) == 1 and isinstance(repeats[0], (list, tuple, torch.Size)):
        repeats = repeats[0]
    repeats = list(repeats)
    lead = len(repeats) - input.ndim
    if lead < 0:
        raise NotLowered("repeat dims")
    base = [sympy.Integer(1)] * lead + list(input.size)
    size = [b * r for b, r in zip(base, repeats)]

    def index_map(idx):
        return [ModIdx(i, 1, b) if b != 1 else sympy.Integer(0)
                for i, b in zip(idx[lead:], base[lead:])]
    return _view(input, size, index_map)


def _tri(upper):
    def lower(input, diagonal=0):
        if input.ndim < 2:
            raise NotLowered("tril/triu of <2d")
        nd = input.ndim

        def loader(idx):
            r, c = idx[nd - 2], idx[nd - 1]
            diff = ops.sub(ops.index_expr(c, torch.int64), ops.index_expr(r, torch.int64))
            thr = ops.constant(diagonal, torch.int64)
            keep = ops.ge(diff, thr) if upper else ops.le(diff, thr)
            return ops.where(keep, input.loader(idx), ops.constant(0, input.dtype))
        return TensorValue(list(input.size), input.dtype, loader, None, input.cost + 4)
    return lower


register("triu")(_tri(True))
register("tril")(_tri(False))


# ------------------------------------------------------------------ cat / stack


@register("cat", "concat", "concatenate")
def cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.size[0] == 0)]
    if not tensors:
        raise NotLowered("empty cat")
    nd = tensors[0].ndim
    if nd == 0:
        raise NotLowered("cat of 0-d")
    d = norm_dim(dim, nd)
    dt = result_dtype(*tensors)
    if any(t.ndim != nd for t in tensors):
        raise NotLowered("cat rank mismatch")
    # a piece of length 0 along `dim` adds nothing, and a clamped load from it would read
    # element 0 of an empty tensor (out of bounds: a crash when its storage is null)
    pieces = [t for t in tensors if not (sympy.sympify(t.size[d]).is_zero)]
    tensors = pieces or tensors[:1]
    offsets, off = [], sympy.Integer(0)
    for t in tensors:
        offsets.append(off)
        off = off + t.size[d]
    size = list(tensors[0].size)
    size[d] = off
    loaders = [value_loader(t, dt) for t in tensors]
    ends = [lo + t.size[d] for lo, t in zip(offsets, tensors)]

    def loader(idx):
        # Clamped indices keep every load in bounds; `where` picks the right piece.
        i = idx[d]
        val = None
        for k in reversed(range(len(tensors))):
            sub_idx = list(idx)
            lo, n = offsets[k], tensors[k].size[d]
            sub_idx[d] = sympy.Max(0, sympy.Min(i - lo, n - 1)) if len(tensors) > 1 else i - lo
            v = loaders[k](sub_idx)
            if val is None:
                val = v
            else:
                end = sympy.sympify(ends[k])
                cond = ops.lt(ops.index_expr(i, torch.int64),
                              ops.constant(int(end), torch.int64) if end.is_number else
                              ops.index_expr(end, torch.int64))
                val = ops.where(cond, v, val)
        return val
    cost = sum(t.cost for t in tensors) + 2 * len(tensors)
    return maybe_realize(TensorValue(size, dt, loader, None, cost))


@register("stack")
def stack(tensors, dim=0):
    nd = tensors[0].ndim + 1
    d = dim % nd
    return cat([unsqueeze(t, d) for t in tensors], d)


@register("hstack")
def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@register("vstack")
def vstack(tensors):
    return cat([t if t.ndim >= 2 else reshape(t, [1, -1]) for t in tensors], 0)


# ------------------------------------------------------------------ fills


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = size[0]
    return [sympy.sympify(s) for s in size]


def _check_factory(kw):
    dev = kw.get("device")
    if dev is not None:     # the graph's own device (cuda on the Triton path) is fine
        d, own = torch.device(dev), getattr(current.graph, "device", None)
        if d.type not in getattr(current.graph, "devices", ("cpu",)) or \
                d.index is not None and own is not None and d != own:
            raise NotLowered("device")
    if kw.get("requires_grad"):
        raise NotLowered("requires_grad factory")
    if kw.get("layout") not in (None, torch.strided):
        raise NotLowered("layout")


def full(size, fill_value, *, dtype=None, **kw):
    _check_factory(kw)
    if dtype is None:
        dtype = (torch.bool if isinstance(fill_value, bool) else torch.int64
                 if isinstance(fill_value, int) else torch.get_default_dtype())
    check_dtype(dtype)
    size = [sympy.sympify(s) for s in size]
    return TensorValue(size, dtype, lambda idx: ops.constant(fill_value, dtype), None, 0)


register("full")(lambda size, fill_value, **kw: full(list(size), fill_value, **kw))


@register("zeros", "empty")
def zeros(*size, dtype=None, **kw):
    return full(_size_arg(size), 0, dtype=dtype or torch.get_default_dtype(), **kw)


@register("ones")
def ones(*size, dtype=None, **kw):
    return full(_size_arg(size), 1, dtype=dtype or torch.get_default_dtype(), **kw)


def _like(value):
    def lower(input, *, dtype=None, memory_format=None, **kw):
        return full(list(input.size), value, dtype=dtype or input.dtype, **kw)
    return lower


register("zeros_like", "empty_like")(_like(0))
register("ones_like")(_like(1))


@register("full_like")
def full_like(input, fill_value, *, dtype=None, memory_format=None, **kw):
    return full(list(input.size), fill_value, dtype=dtype or input.dtype, **kw)


@register("new_zeros", "new_empty")
def new_zeros(input, *size, dtype=None, **kw):
    return full(_size_arg(size), 0, dtype=dtype or input.dtype, **kw)


@register("new_ones")
def new_ones(input, *size, dtype=None, **kw):
    return full(_size_arg(size), 1, dtype=dtype or input.dtype, **kw)


@register("new_full")
def new_full(input, size, fill_value, *, dtype=None, **kw):
    return full(list(size), fill_value, dtype=dtype or input.dtype, **kw)


@register("arange")
def arange(*args, dtype=None, **kw):
    _check_factory(kw)
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)):
        raise NotLowered("non-int arange")
    n = max(0, -(-(end - start) // step))
    dtype = dtype or torch.int64
    check_dtype(dtype)

    def loader(idx):
        v = ops.index_expr(idx[0] * step + start, torch.int64)
        return ops.to_dtype(v, dtype) if dtype != torch.int64 else v
    return TensorValue([sympy.Integer(n)], dtype, loader, None, 1)


@register("fill")
def fill(input, value):
    if is_tensor(value):
        if value.ndim != 0:
            raise NotLowered("fill with tensor")
        v = cast(value, input.dtype)
        return TensorValue(list(input.size), input.dtype, lambda idx: v.loader([]), None, v.cost)
    return full(list(input.size), value, dtype=input.dtype)


@register("zero")
def zero(input):
    return full(list(input.size), 0, dtype=input.dtype)


# ------------------------------------------------------------------ indexing with tensors


def _indirect(index_tv: TensorValue, size, code=ERR_INDEX):
    """The index loader of gather / index_select / embedding. Unlike Python-style indexing,
    these ops refuse a negative index (eager raises), so a negative value is mapped to `size`:
    out of range, which the kernel flags with `code` (the op family's error, codegen/ops.py),
    instead of counting back from the end."""
    if index_tv.dtype not in (torch.int64, torch.int32):
        raise NotLowered("index dtype")

    def load(idx):
        v = index_tv.loader(idx)
        zero = ops.constant(0, index_tv.dtype)
        past = ops.index_expr(sympy.sympify(size), index_tv.dtype)
        return ops.indirect_indexing(ops.where(ops.lt(v, zero), past, v), size, code)
    return load


@register("index_select")
def index_select(input, dim, index):
    d = norm_dim(dim, input.ndim)
    if index.ndim > 1:
        raise NotLowered("index_select index ndim")
    if index.ndim == 0:
        index = unsqueeze(index, 0)
    ind = _indirect(index, input.size[d], ERR_INDEX_IN_SELF)
    size = list(input.size)
    size[d] = index.size[0]

    def loader(idx):
        idx = list(idx)
        idx[d] = ind([idx[d]])
        return input.loader(idx)
    return TensorValue(size, input.dtype, loader, None, input.cost + 2)


@register("embedding")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise NotLowered("embedding max_norm")
    if not is_tensor(input) or weight.ndim != 2:
        raise NotLowered("embedding args")
    ind = _indirect(input, weight.size[0], ERR_INDEX_IN_SELF)
    nd = input.ndim

    def loader(idx):
        return weight.loader([ind(idx[:nd]), idx[nd]])
    return TensorValue(list(input.size) + [weight.size[1]], weight.dtype, loader, None,
                       weight.cost + 2)


@register("gather")
def gather(input, dim, index, *, sparse_grad=False):
    d = norm_dim(dim, input.ndim)
    if index.ndim != input.ndim:
        raise NotLowered("gather rank")
    ind = _indirect(index, input.size[d])

    def loader(idx):
        idx2 = list(idx)
        idx2[d] = ind(idx)
        return input.loader(idx2)
    return TensorValue(list(index.size), input.dtype, loader, None, input.cost + 2)


import codegen.decompositions  # noqa: E402,F401  (registers compound ops)
import codegen.gemm  # noqa: E402,F401  (registers matrix products)

"""Lowerings: canonical primitive -> TensorValue (loop IR), registered by name.

`LOWERINGS[name](*args, **kwargs)` receives TensorValues for tensor arguments and plain Python
values (ints, floats, sympy sizes, dtypes, lists) for the rest, with the signature of the eager
torch op of that name. A lowering raises `NotLowered` for any case it does not implement
exactly; the graph lowerer then calls the eager op instead (extern). Dtype rules follow eager
type promotion; the graph lowerer additionally checks each node's dtype and shape against the
propagated metadata, so a lowering bug shows as an extern call, not a wrong value.

This module holds the registry and the building blocks that compute (dtype promotion,
broadcast, pointwise, conversions, reductions); codegen/view_lowerings.py those that move data
(views, cat, fills, indexing with tensors), registered into the same LOWERINGS; decompositions.py
builds compound ops from both. (Lowerings here that need a view or a fill call it through
LOWERINGS, late-bound: view_lowerings.py imports this module, not the other way.)
"""
from __future__ import annotations

from typing import Callable, Dict, List, Sequence

import sympy
import torch

from codegen.ir import NotLowered, Reduction, TensorValue, current, realize
from codegen.ops import ops
from codegen import primitives as prims
from codegen.sizevars import _is_int_poly, contiguous_strides, product, static_int
from codegen.symbolic import same_size, size_is_one
from codegen.scalars import has_scalar
from pydynamo.symbols import ModIdx, broadcast

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
        # eager truncates the quotient after it is rounded to the operands' dtype (fp16/bf16:
        # their c10 division returns a half value, CPU and CUDA alike): widening a half value
        # rounds it first (codegen/kernel_printer.py to_dtype)
        def trunc_div(a, b):
            q = ops.truediv(a, b)
            if dt in (torch.float16, torch.bfloat16):
                return ops.to_dtype(ops.trunc(ops.to_dtype(q, torch.float32)), dt)
            return ops.trunc(q)
        fn = ops.floordiv if rounding_mode == "floor" else trunc_div
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
        # eager's CPU and CUDA kernels compute these exponents by multiplication or a root,
        # not pow(): the same rounding, and no libm call that keeps a loop from vectorizing
        # (GELU's x ** 3 was a scalar std::pow per element)
        if exponent == 1:
            return cast(input, dt)
        by_exponent = {2: lambda a: ops.square(a),
                       3: lambda a: ops.mul(ops.square(a), a),
                       0.5: lambda a: ops.sqrt(a),
                       -0.5: lambda a: ops.rsqrt(a),
                       -1: lambda a: ops.reciprocal(a),
                       -2: lambda a: ops.reciprocal(ops.square(a))}
        if exponent in by_exponent:
            return pointwise(by_exponent[exponent], [input], dt)
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
    return LOWERINGS["full"](list(x.size), v, dtype=torch.bool)


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
            flat = LOWERINGS["reshape"](input, [-1])
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


import codegen.view_lowerings  # noqa: E402,F401  (registers views, cat, fills, indexing)
import codegen.decompositions  # noqa: E402,F401  (registers compound ops)
import codegen.gemm  # noqa: E402,F401  (registers matrix products)

"""Symbolic shape rules for pydynamo.meta, one per op family, registered into `meta.RULES`.

Each rule gets (ctx, *args, **kwargs) exactly as the op would (method calls: self first), with
TensorMeta for tensors and SymInts unwrapped to sympy/int, and returns shapes or `Out`s matching
the meta run's output structure (`ctx.meta_out`). Any decision on a symbolic dim goes through the
ShapeEnv, so it is evaluated on hints and guarded. Argument forms a rule does not understand raise
`NoRule`, and the driver specializes instead (correct, less general). Importing this module (done
by meta.py) registers everything.
"""
from __future__ import annotations

import operator
from typing import Any

import sympy
import torch
import torch.nn.functional as F

from codegen.primitives import ROWS as PRIMITIVES
from pydynamo.meta import (Dim, NoRule, Out, TensorMeta, _prod, _simplify_dim, contiguous_strides,
                           register)
from pydynamo.symbols import FloorDiv, broadcast


def _is_sym(d) -> bool:
    return isinstance(d, sympy.Basic) and not d.is_number


def _eq(ctx, a, b) -> bool:
    """a == b for dims, deciding (and guarding) symbolic comparisons on hints."""
    if isinstance(a, int) and isinstance(b, int):
        return a == b
    if a == b:  # structurally equal: no decision to make
        return True
    a, b = sympy.sympify(a), sympy.sympify(b)
    if ctx.env.value_hint(a) != ctx.env.value_hint(b):
        # unequal on the hints: the answer is False; guard it unless the ranges decide it
        return ctx.env.evaluate(sympy.Eq(a, b))
    if sympy.expand(a - b) == 0:
        return True
    return ctx.env.evaluate(sympy.Eq(a, b))


def _lt(ctx, a, b) -> bool:
    if isinstance(a, int) and isinstance(b, int):
        return a < b
    return ctx.env.evaluate(sympy.Lt(sympy.sympify(a), sympy.sympify(b)))


def _dim(d) -> Dim:
    return _simplify_dim(d)


def _norm_dim(dim, ndim: int) -> int:
    if not isinstance(dim, int):
        raise NoRule()
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise NoRule()
    return dim % n


def _arg(args, kwargs, i, name, default=None):
    if len(args) > i:
        return args[i]
    return kwargs.get(name, default)


def broadcast_shapes(ctx, *shapes) -> tuple:
    """Right-aligned broadcasting (pydynamo/symbols.py's `broadcast`), decided on the hints and
    guarded: whether an expression (s0 - 1) is 1 decides broadcasting, as in torch's
    infer_size (a bare size symbol is >= 2 by its range: no guard)."""
    def is_one(d):
        return _is_sym(d) and not (d.is_Symbol and ctx.env.ranges.get(d) is not None
                                   and ctx.env.ranges[d].lo >= 2) and _eq(ctx, d, 1)

    out = broadcast(shapes, is_one, lambda a, b: _eq(ctx, a, b))
    if out is None:
        raise NoRule()
    return tuple(_dim(d) for d in out)


# -- pointwise ----------------------------------------------------------------------------------
# The pointwise primitives (codegen/primitives.py) are registered from their rows; these lists
# hold the other spellings and ops of the same shape rule.

_POINTWISE_BINARY = [
    torch.lerp, torch.addcmul, torch.addcdiv, torch.clamp, torch.clip, torch.masked_fill,
    torch.heaviside, torch.ldexp, torch.float_power, torch.isclose, torch.bitwise_left_shift,
    torch.bitwise_right_shift, torch.gcd, torch.lcm, torch.complex, torch.polar,
    operator.add, operator.sub, operator.mul, operator.truediv, operator.floordiv, operator.mod,
    operator.pow, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge,
    operator.and_, operator.or_, operator.xor, operator.lshift, operator.rshift,
]
_POINTWISE_METHODS = [
    "lerp", "addcmul", "addcdiv", "clamp", "clip", "masked_fill", "float_power", "type_as",
    "isclose", "gcd", "lcm", "heaviside",
    "__add__", "__radd__", "__sub__", "__rsub__", "__mul__", "__rmul__", "__truediv__",
    "__rtruediv__", "__floordiv__", "__rfloordiv__", "__mod__", "__rmod__", "__pow__", "__rpow__",
    "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__and__", "__or__", "__xor__",
    "__rand__", "__ror__", "__rxor__", "__lshift__", "__rshift__",
]


def _primitive_spellings(meta_rule: str) -> list:
    """The torch functions and Tensor methods named like a pointwise primitive (its name or an
    alias, codegen/primitives.py) whose symbolic shape rule is `meta_rule`."""
    out = []
    for prim in PRIMITIVES:
        if prim.meta_rule == meta_rule:
            for name in prim.names:
                if getattr(torch, name, None) is not None:
                    out.append(getattr(torch, name))
                if hasattr(torch.Tensor, name):
                    out.append(name)
    return out


@register(*_POINTWISE_BINARY, *_POINTWISE_METHODS, *_primitive_spellings("broadcast"))
def _rule_pointwise(ctx, *args, **kwargs):
    tensors = [v for v in list(args) + list(kwargs.values()) if isinstance(v, TensorMeta)]
    if any(isinstance(v, (list, tuple)) for v in args):
        raise NoRule()
    return broadcast_shapes(ctx, *(t.shape for t in tensors))


_INPLACE_METHODS = [m + "_" for m in (
    "add", "sub", "mul", "div", "pow", "clamp", "clip", "masked_fill", "fill", "zero", "copy",
    "relu", "sigmoid", "tanh", "exp", "log", "neg", "abs", "sqrt", "rsqrt", "floor", "ceil",
    "round", "trunc", "sin", "cos", "lerp", "addcmul", "addcdiv", "remainder", "fmod",
    "floor_divide", "logical_not", "uniform", "normal", "bernoulli", "exponential_", "fill_diagonal",
    "requires_grad", "maximum", "minimum", "where", "tril", "triu", "nan_to_num", "reciprocal",
    "sign", "erf", "silu", "gelu", "hardtanh", "leaky_relu", "elu", "t", "transpose")] + [
    "__iadd__", "__isub__", "__imul__", "__itruediv__", "__ifloordiv__", "__imod__", "__ipow__",
    "__iand__", "__ior__", "__ixor__"]
_INPLACE_OPS = [operator.iadd, operator.isub, operator.imul, operator.itruediv, operator.ifloordiv,
                operator.imod, operator.ipow, operator.iand, operator.ior, operator.ixor]


def _same_shape(ctx, a, b) -> bool:
    """Shapes equal dim by dim, as values (guarded): a broadcast that decided `s1 - 1` is 1
    gives 1 where the written tensor says `s1 - 1`."""
    return len(a) == len(b) and all(_eq(ctx, x, y) for x, y in zip(a, b))


@register(*[m for m in _INPLACE_METHODS if m not in ("t_", "transpose_")], *_INPLACE_OPS)
def _rule_inplace(ctx, self, *args, **kwargs):
    """The result is `self`; other tensors must broadcast to it (guarded). Without other tensors
    (`x[1:].add_(1)`) nothing is decided: a dim `s0 - 1` is not asked whether it is 1, as
    torch.compile does not (a call with 2 rows then reuses the graph)."""
    others = [v for v in list(args) + list(kwargs.values()) if isinstance(v, TensorMeta)]
    if not isinstance(self, TensorMeta):
        raise NoRule()
    if not others:
        return Out(self.shape, self.stride, self.storage_offset)
    if not _same_shape(ctx, broadcast_shapes(ctx, self.shape, *(o.shape for o in others)), self.shape):
        raise NoRule()
    return Out(self.shape, self.stride, self.storage_offset)


_UNARY_FUNCS = [
    torch.erfinv, torch.nan_to_num, torch.clone, torch.tril, torch.triu, torch.softmax,
    torch.log_softmax, torch.cumsum, torch.cumprod, torch.cummax, torch.cummin, torch.logcumsumexp,
    torch.flip, torch.roll, torch.sort, torch.argsort, torch.positive, torch.conj, torch.real,
    torch.angle, torch.zeros_like, torch.ones_like, torch.empty_like, torch.rand_like,
    torch.randn_like, torch.full_like, torch.randint_like, torch.bernoulli, torch.dropout,
    torch.alpha_dropout, torch.special.expit, torch.special.erf, torch.logit, torch.i0,
    torch.digamma, torch.deg2rad, torch.rad2deg, torch.layer_norm, torch.group_norm,
    torch.batch_norm, torch.instance_norm,
    F.relu, F.relu6, F.gelu, F.silu, F.mish, F.elu, F.selu, F.celu, F.leaky_relu, F.hardtanh,
    F.hardswish, F.hardsigmoid, F.sigmoid, F.tanh, F.softplus, F.softsign, F.tanhshrink,
    F.logsigmoid, F.softmax, F.log_softmax, F.softmin, F.dropout, F.dropout1d, F.dropout2d,
    F.dropout3d, F.alpha_dropout, F.layer_norm, F.group_norm, F.batch_norm, F.instance_norm,
    F.normalize, F.local_response_norm, F.threshold, F.prelu, F.rrelu, F.hardshrink, F.softshrink,
    operator.neg, operator.pos, operator.invert, operator.abs,
]
_UNARY_METHODS = [
    "erfinv", "nan_to_num", "clone", "tril", "triu", "softmax", "log_softmax", "cumsum", "cumprod",
    "cummax", "cummin", "logcumsumexp", "flip", "roll", "sort", "argsort", "positive", "float",
    "double", "half", "bfloat16", "int", "long", "short", "bool", "byte", "char", "to", "cpu",
    "cuda", "detach", "contiguous", "requires_grad_", "logit", "digamma", "deg2rad", "rad2deg",
    "bernoulli",
    "__neg__", "__pos__", "__invert__", "__abs__",
    "clamp_min", "clamp_max",
]


@register(*_UNARY_FUNCS, *_UNARY_METHODS, *_primitive_spellings("same_shape"))
def _rule_same_shape(ctx, x, *args, **kwargs):
    """Output(s) shaped like the first tensor argument (sort/cummax give two such outputs)."""
    if not isinstance(x, TensorMeta):
        raise NoRule()
    if isinstance(ctx.meta_out, (list, tuple)):
        return [x.shape for _ in ctx.meta_out]
    return x.shape


# -- reductions -----------------------------------------------------------------------------------

def _reduced_shape(shape: tuple, dim, keepdim: bool) -> tuple:
    nd = len(shape)
    if dim is None or (isinstance(dim, (list, tuple)) and len(dim) == 0):
        dims = set(range(nd))
    else:
        dims = {_norm_dim(d, nd) for d in (dim if isinstance(dim, (list, tuple)) else [dim])}
    if nd == 0:
        return ()
    if keepdim:
        return tuple(1 if i in dims else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in dims)


_REDUCTIONS = [torch.sum, torch.mean, torch.prod, torch.amax, torch.amin, torch.logsumexp,
               torch.nansum, torch.nanmean, torch.all, torch.any, torch.count_nonzero,
               torch.argmax, torch.argmin, torch.max, torch.min, torch.median, torch.nanmedian,
               torch.mode, torch.aminmax]
_REDUCTION_METHODS = ["sum", "mean", "prod", "amax", "amin", "logsumexp", "nansum", "nanmean",
                      "all", "any", "count_nonzero", "argmax", "argmin", "max", "min", "median",
                      "nanmedian", "mode", "aminmax"]


@register(*_REDUCTIONS, *_REDUCTION_METHODS)
def _rule_reduction(ctx, x, *args, **kwargs):
    if not isinstance(x, TensorMeta):
        raise NoRule()
    if args and isinstance(args[0], TensorMeta):  # torch.max(a, b): pointwise
        return broadcast_shapes(ctx, x.shape, args[0].shape)
    dim = _arg(args, kwargs, 0, "dim", None)
    if isinstance(dim, torch.dtype):  # sum(x, dtype)
        dim = kwargs.get("dim")
    keepdim = _arg(args, kwargs, 1, "keepdim", False)
    if not isinstance(keepdim, bool):
        raise NoRule()
    shape = _reduced_shape(x.shape, dim, keepdim)
    if isinstance(ctx.meta_out, (list, tuple)):
        return [shape for _ in ctx.meta_out]
    return shape


@register(torch.var, torch.std, torch.var_mean, torch.std_mean, "var", "std")
def _rule_var(ctx, x, *args, **kwargs):
    if not isinstance(x, TensorMeta):
        raise NoRule()
    rest = list(args)
    if rest and isinstance(rest[0], bool):  # var(x, unbiased)
        dim, keepdim = None, kwargs.get("keepdim", False)
    else:
        dim = _arg(rest, kwargs, 0, "dim", None)
        keepdim = rest[2] if len(rest) > 2 else kwargs.get("keepdim", False)
        if len(rest) > 1 and not isinstance(rest[1], bool):
            raise NoRule()
    shape = _reduced_shape(x.shape, dim, bool(keepdim))
    if isinstance(ctx.meta_out, (list, tuple)):
        return [shape for _ in ctx.meta_out]
    return shape


@register(torch.norm, "norm")
def _rule_norm(ctx, x, p="fro", dim=None, keepdim=False, **kwargs):
    if not isinstance(x, TensorMeta) or not isinstance(keepdim, bool):
        raise NoRule()
    return _reduced_shape(x.shape, dim, keepdim)


@register(F.cosine_similarity, F.pairwise_distance)
def _rule_cosine_similarity(ctx, x1, x2, dim=1, *args, **kwargs):
    shape = broadcast_shapes(ctx, x1.shape, x2.shape)
    if ctx.target is F.pairwise_distance:
        raise NoRule()
    return _reduced_shape(shape, kwargs.get("dim", dim), False)


@register(torch.topk, "topk")
def _rule_topk(ctx, x, k, dim=-1, largest=True, sorted=True):
    d = _norm_dim(dim, x.ndim)
    shape = list(x.shape)
    if x.ndim:
        shape[d] = k
    return [tuple(shape), tuple(shape)]


# -- matmul family ----------------------------------------------------------------------------------

def _matmul_shape(ctx, a: tuple, b: tuple) -> tuple:
    if len(a) == 0 or len(b) == 0:
        raise NoRule()
    if len(a) == 1 and len(b) == 1:
        _check_eq(ctx, a[0], b[0])
        return ()
    if len(a) == 1:
        _check_eq(ctx, a[0], b[-2])
        return tuple(b[:-2]) + (b[-1],)
    if len(b) == 1:
        _check_eq(ctx, a[-1], b[0])
        return tuple(a[:-1])
    _check_eq(ctx, a[-1], b[-2])
    batch = broadcast_shapes(ctx, tuple(a[:-2]), tuple(b[:-2]))
    return tuple(batch) + (a[-2], b[-1])


def _check_eq(ctx, a, b) -> None:
    if not _eq(ctx, a, b):
        raise NoRule()


@register(torch.matmul, operator.matmul, "matmul", "__matmul__", torch.mm, "mm", torch.bmm, "bmm",
          torch.mv, "mv", torch.dot, "dot", torch.vdot)
def _rule_matmul(ctx, a, b, **kwargs):
    return _matmul_shape(ctx, a.shape, b.shape)


@register("__rmatmul__")
def _rule_rmatmul(ctx, b, a, **kwargs):
    return _matmul_shape(ctx, a.shape, b.shape)


@register(torch.addmm, "addmm", torch.baddbmm, "baddbmm", torch.addmv, "addmv", torch.addbmm)
def _rule_addmm(ctx, bias, a, b, **kwargs):
    if ctx.target in (torch.addbmm,):
        raise NoRule()
    prod = _matmul_shape(ctx, a.shape, b.shape)
    broadcast_shapes(ctx, bias.shape, prod)
    return prod


@register(F.linear)
def _rule_linear(ctx, x, weight, bias=None):
    if weight.ndim == 1:
        out = _matmul_shape(ctx, x.shape, weight.shape)
    else:
        out = _matmul_shape(ctx, x.shape, (weight.shape[1], weight.shape[0]))
    if bias is not None:
        broadcast_shapes(ctx, bias.shape, out)
    return out


@register(torch.outer, "outer", torch.ger)
def _rule_outer(ctx, a, b):
    return (a.shape[0], b.shape[0])


@register(F.scaled_dot_product_attention)
def _rule_sdpa(ctx, q, k, v, *args, **kwargs):
    return tuple(q.shape[:-1]) + (v.shape[-1],)


# -- views --------------------------------------------------------------------------------------------

def _sizes_arg(args) -> list:
    """view(2, 3) / view((2, 3)) / view([2, 3]) → [2, 3]."""
    if len(args) == 1 and isinstance(args[0], (list, tuple)):
        return list(args[0])
    return list(args)


def _infer_view_shape(ctx, numel, sizes: list) -> tuple:
    sizes = [_dim(s) for s in sizes]
    neg = [i for i, s in enumerate(sizes) if isinstance(s, int) and s == -1]
    if len(neg) > 1:
        raise NoRule()
    if neg:
        known = _prod([s for i, s in enumerate(sizes) if i != neg[0]])
        if isinstance(known, int) and known == 0:
            raise NoRule()
        q = sympy.sympify(numel) / sympy.sympify(known)  # Mul folds common factors itself
        if not q.is_integer:
            q = sympy.cancel(q)
        if not q.is_integer:
            # numel divisible by known is a fact on the hints; guard it and keep it exact
            if not _eq(ctx, sympy.Mod(sympy.sympify(numel), sympy.sympify(known)), 0):
                raise NoRule()
            q = FloorDiv(sympy.sympify(numel), sympy.sympify(known))
        sizes[neg[0]] = _dim(q)
    else:
        _check_eq(ctx, numel, _prod(sizes))
    return tuple(sizes)


def _is_contiguous_sym(t: TensorMeta) -> bool:
    expected = contiguous_strides(t.shape)
    for size, a, b in zip(t.shape, t.stride, expected):
        if isinstance(size, int) and size == 1:
            continue
        if sympy.expand(sympy.sympify(a) - sympy.sympify(b)) != 0:
            return False
    return True


@register("view", "reshape", torch.reshape, "view_as", "reshape_as")
def _rule_view(ctx, x, *args, **kwargs):
    if not isinstance(x, TensorMeta):
        raise NoRule()
    if ctx.target in ("view_as", "reshape_as"):
        sizes = list(args[0].shape)
    else:
        sizes = _sizes_arg(args) if args else list(kwargs.get("shape", kwargs.get("size", ())))
    if any(isinstance(s, torch.dtype) for s in sizes):
        raise NoRule()
    shape = _infer_view_shape(ctx, x.numel(), sizes)
    if _is_contiguous_sym(x):
        return Out(shape, contiguous_strides(shape), x.storage_offset)
    strides = _view_strides(ctx, x.shape, x.stride, shape)
    if strides is not None:
        return Out(shape, strides, x.storage_offset)
    if ctx.target in ("view", "view_as"):
        raise NoRule()
    return Out(shape, contiguous_strides(shape), 0)   # reshape copies


def _view_strides(ctx, old_shape, old_stride, new_shape):
    """Strides of `new_shape` as a view of (old_shape, old_stride), or None if it needs a copy:
    ATen's computeStride, with every comparison of symbolic values decided on hints (guarded)."""
    if any(isinstance(d, int) and d == 0 for d in old_shape) or not old_shape:
        return None
    new_stride: list = [None] * len(new_shape)
    view_d = len(new_shape) - 1
    chunk_base = old_stride[-1]
    tensor_numel: Any = 1
    view_numel: Any = 1
    for d in range(len(old_shape) - 1, -1, -1):
        tensor_numel = _dim(tensor_numel * old_shape[d])
        if d == 0 or (not _eq(ctx, old_shape[d - 1], 1)
                      and not _eq(ctx, old_stride[d - 1], _dim(tensor_numel * chunk_base))):
            while view_d >= 0 and (_lt(ctx, view_numel, tensor_numel) or _eq(ctx, new_shape[view_d], 1)):
                new_stride[view_d] = _dim(view_numel * chunk_base)
                view_numel = _dim(view_numel * new_shape[view_d])
                view_d -= 1
            if not _eq(ctx, view_numel, tensor_numel):
                return None
            if d > 0:
                chunk_base, tensor_numel, view_numel = old_stride[d - 1], 1, 1
    if view_d != -1:
        return None
    return tuple(new_stride)


@register("flatten", torch.flatten)
def _rule_flatten(ctx, x, start_dim=0, end_dim=-1):
    if x.ndim == 0:
        return (1,)
    s, e = _norm_dim(start_dim, x.ndim), _norm_dim(end_dim, x.ndim)
    shape = tuple(x.shape[:s]) + (_dim(_prod(x.shape[s:e + 1])),) + tuple(x.shape[e + 1:])
    if _is_contiguous_sym(x):
        return Out(shape, contiguous_strides(shape), x.storage_offset)
    if s == e:
        return Out(x.shape, x.stride, x.storage_offset)
    # mergeable into a view when each dim steps exactly over the next one (decided on hints,
    # guarded); size-1 dims never matter. Otherwise flatten copies into a contiguous tensor.
    dims = [i for i in range(s, e + 1) if not (isinstance(x.shape[i], int) and x.shape[i] == 1)]
    if all(_eq(ctx, x.stride[a], _dim(x.stride[b] * x.shape[b])) for a, b in zip(dims, dims[1:])):
        merged = x.stride[dims[-1]] if dims else 1
        return Out(shape, tuple(x.stride[:s]) + (merged,) + tuple(x.stride[e + 1:]), x.storage_offset)
    return Out(shape, contiguous_strides(shape), 0)


@register("unflatten", torch.unflatten)
def _rule_unflatten(ctx, x, dim, sizes):
    d = _norm_dim(dim, x.ndim)
    inner = _infer_view_shape(ctx, x.shape[d], list(sizes))
    shape = tuple(x.shape[:d]) + inner + tuple(x.shape[d + 1:])
    if _is_contiguous_sym(x):
        return Out(shape, contiguous_strides(shape), x.storage_offset)
    raise NoRule()


@register("permute", torch.permute)
def _rule_permute(ctx, x, *dims, **kwargs):
    dims = _sizes_arg(dims) if dims else list(kwargs["dims"])
    dims = [_norm_dim(d, x.ndim) for d in dims]
    return Out(tuple(x.shape[d] for d in dims), tuple(x.stride[d] for d in dims), x.storage_offset)


@register("transpose", torch.transpose, torch.swapaxes, torch.swapdims, "swapaxes", "swapdims")
def _rule_transpose(ctx, x, dim0, dim1):
    if x.ndim == 0:
        return Out((), (), x.storage_offset)
    a, b = _norm_dim(dim0, x.ndim), _norm_dim(dim1, x.ndim)
    order = list(range(x.ndim))
    order[a], order[b] = order[b], order[a]
    return _rule_permute(ctx, x, order)


@register("t", torch.t)
def _rule_t(ctx, x):
    if x.ndim < 2:
        return Out(x.shape, x.stride, x.storage_offset)
    return _rule_transpose(ctx, x, 0, 1)


@register("T", "mT", "H", "mH", torch.adjoint, "adjoint")
def _rule_T(ctx, x):
    if ctx.target in ("T", "H"):
        return _rule_permute(ctx, x, list(range(x.ndim))[::-1])
    if x.ndim < 2:
        raise NoRule()
    return _rule_transpose(ctx, x, -2, -1)


@register("movedim", torch.movedim, "moveaxis", torch.moveaxis)
def _rule_movedim(ctx, x, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [_norm_dim(d, x.ndim) for d in src]
    dst = [_norm_dim(d, x.ndim) for d in dst]
    order: list = [None] * x.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter(i for i in range(x.ndim) if i not in src)
    order = [o if o is not None else next(rest) for o in order]
    return _rule_permute(ctx, x, order)


@register("unsqueeze", torch.unsqueeze)
def _rule_unsqueeze(ctx, x, dim):
    d = _norm_dim(dim, x.ndim + 1)
    shape = list(x.shape)
    stride = list(x.stride)
    inner = _dim(x.shape[d] * x.stride[d]) if d < x.ndim else 1
    shape.insert(d, 1)
    stride.insert(d, inner)
    return Out(tuple(shape), tuple(stride), x.storage_offset)


@register("squeeze", torch.squeeze)
def _rule_squeeze(ctx, x, dim=None):
    if dim is None:
        dims = set(range(x.ndim))
    else:
        dims = {_norm_dim(d, x.ndim) for d in (dim if isinstance(dim, (list, tuple)) else [dim])}
    keep = [i for i in range(x.ndim) if not (i in dims and _eq(ctx, x.shape[i], 1))]
    return Out(tuple(x.shape[i] for i in keep), tuple(x.stride[i] for i in keep), x.storage_offset)


@register("expand", "broadcast_to", torch.broadcast_to, "expand_as")
def _rule_expand(ctx, x, *sizes, **kwargs):
    if ctx.target == "expand_as":
        sizes = list(sizes[0].shape)
    else:
        sizes = _sizes_arg(sizes) if sizes else list(kwargs.get("size", kwargs.get("shape")))
    sizes = [_dim(s) for s in sizes]
    lead = len(sizes) - x.ndim
    if lead < 0:
        raise NoRule()
    shape, stride = [], []
    for i, s in enumerate(sizes):
        if i < lead:
            if isinstance(s, int) and s < 0:
                raise NoRule()
            shape.append(s)
            stride.append(0)
            continue
        d, st = x.shape[i - lead], x.stride[i - lead]
        if isinstance(s, int) and s == -1:
            shape.append(d)
            stride.append(st)
        elif isinstance(d, int) and d == 1 and not (isinstance(s, int) and s == 1):
            shape.append(s)
            stride.append(0)
        else:
            _check_eq(ctx, d, s)
            shape.append(d)
            stride.append(st)
    return Out(tuple(shape), tuple(stride), x.storage_offset)


@register("select", torch.select)
def _rule_select(ctx, x, dim, index):
    d = _norm_dim(dim, x.ndim)
    idx = _normalize_index(ctx, index, x.shape[d])
    return Out(tuple(x.shape[:d] + x.shape[d + 1:]), tuple(x.stride[:d] + x.stride[d + 1:]),
               _dim(x.storage_offset + idx * x.stride[d]))


@register("narrow", torch.narrow)
def _rule_narrow(ctx, x, dim, start, length):
    d = _norm_dim(dim, x.ndim)
    if isinstance(start, TensorMeta):
        raise NoRule()
    start = _normalize_index(ctx, start, x.shape[d]) if not (isinstance(start, int) and start >= 0) else start
    shape = list(x.shape)
    shape[d] = _dim(length)
    return Out(tuple(shape), x.stride, _dim(x.storage_offset + start * x.stride[d]))


def _normalize_index(ctx, index, size):
    """A (possibly negative) integer index into a dim of `size` → non-negative (guarded)."""
    if isinstance(index, int) and index >= 0:
        return index
    if isinstance(index, int):
        return _dim(size + index)
    if _lt(ctx, index, 0):
        return _dim(size + index)
    return index


def _slice_dim(ctx, size, sl: slice):
    """(start, length, step) of x[sl] along a dim of `size`, clamped like Python (guarded)."""
    step = 1 if sl.step is None else sl.step
    if not isinstance(step, int) or step <= 0:
        raise NoRule()

    def clamp(v, default):
        if v is None:
            return default
        if (isinstance(v, int) and v < 0) or (not isinstance(v, int) and _lt(ctx, v, 0)):
            v = _dim(size + v)
            if _lt(ctx, v, 0):
                return 0
            return v
        if _lt(ctx, size, v):
            return size
        return v

    start = clamp(sl.start, 0)
    stop = clamp(sl.stop, size)
    if not _lt(ctx, start, stop):
        return start, 0, step
    length = _dim(FloorDiv(sympy.sympify(stop) - sympy.sympify(start) + step - 1, step))
    return start, length, step


@register(operator.getitem, "__getitem__")
def _rule_getitem(ctx, x, index):
    if not isinstance(x, TensorMeta):
        raise NoRule()
    idx = list(index) if isinstance(index, tuple) else [index]
    tensor_idx = [i for i in idx if isinstance(i, TensorMeta)]
    if tensor_idx:
        return _advanced_index(ctx, x, idx)
    if any(isinstance(i, (list, tuple)) or isinstance(i, bool) for i in idx):
        raise NoRule()
    n_real = sum(1 for i in idx if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise NoRule()
    if Ellipsis in idx:
        at = idx.index(Ellipsis)
        idx = idx[:at] + [slice(None)] * (x.ndim - n_real) + idx[at + 1:]
    else:
        idx = idx + [slice(None)] * (x.ndim - n_real)
    shape, stride = [], []
    offset: Any = x.storage_offset
    d = 0
    for i in idx:
        if i is None:
            shape.append(1)
            stride.append(_dim(x.shape[d] * x.stride[d]) if d < x.ndim else 1)
        elif isinstance(i, slice):
            start, length, step = _slice_dim(ctx, x.shape[d], i)
            shape.append(length)
            stride.append(_dim(x.stride[d] * step))
            offset = offset + start * x.stride[d]
            d += 1
        else:  # an integer (possibly symbolic)
            offset = offset + _normalize_index(ctx, i, x.shape[d]) * x.stride[d]
            d += 1
    return Out(tuple(shape), tuple(stride), _dim(offset))


@register(operator.setitem, "__setitem__")
def _rule_setitem(ctx, x, index, value):
    """`x[index] = value` (and `x[index] += y`'s write back): no result; the value broadcasts to
    x[index]'s shape (guarded). A scalar value decides nothing."""
    part = _rule_getitem(ctx, x, index)
    if isinstance(value, TensorMeta):
        if not _same_shape(ctx, broadcast_shapes(ctx, part.shape, value.shape), part.shape):
            raise NoRule()
    elif not isinstance(value, (bool, int, float)):
        raise NoRule()
    return None


def _advanced_index(ctx, x, idx):
    """Integer index tensors among full slices: x[..., i, j, ...] → the indices' broadcast shape,
    in place of the indexed dims when those are adjacent, else in front (NumPy's rule)."""
    if len(idx) > x.ndim or any(not (isinstance(i, TensorMeta) or i == slice(None)) for i in idx):
        raise NoRule()
    pos = [k for k, i in enumerate(idx) if isinstance(i, TensorMeta)]
    if any(idx[k].dtype in (torch.bool, torch.uint8) for k in pos):
        raise NoRule()
    shape = broadcast_shapes(ctx, *(tuple(idx[k].shape) for k in pos))
    rest = list(x.shape[:len(idx)]) + list(x.shape[len(idx):])
    kept = [d for k, d in enumerate(rest) if k not in pos]
    at = pos[0] if pos == list(range(pos[0], pos[-1] + 1)) else 0
    return Out(tuple(kept[:at]) + tuple(shape) + tuple(kept[at:]))


@register("unbind", torch.unbind)
def _rule_unbind(ctx, x, dim=0):
    d = _norm_dim(dim, x.ndim)
    if not isinstance(x.shape[d], int):
        raise NoRule()
    shape = tuple(x.shape[:d] + x.shape[d + 1:])
    stride = tuple(x.stride[:d] + x.stride[d + 1:])
    return [Out(shape, stride, _dim(x.storage_offset + k * x.stride[d])) for k in range(x.shape[d])]


@register("split", torch.split, "chunk", torch.chunk, "split_with_sizes", "tensor_split")
def _rule_split(ctx, x, size_or_sizes, dim=0):
    d = _norm_dim(dim, x.ndim)
    n = x.shape[d]
    if isinstance(n, int):
        sizes = [m.shape[d] for m in ctx.meta_out]
    else:
        sizes = _split_sizes(ctx, getattr(ctx.target, "__name__", ctx.target), n, size_or_sizes)
    outs, start = [], 0
    for size in sizes:
        shape = list(x.shape)
        shape[d] = _dim(size)
        outs.append(Out(tuple(shape), x.stride, _dim(x.storage_offset + start * x.stride[d])))
        start = start + size
    return outs


def _split_sizes(ctx, op: str, n, arg) -> list:
    """Piece sizes of splitting a symbolic dim `n`: the number of pieces is the meta run's
    (decided on the hints) and guarded, so every size the guards admit gives as many."""
    if op == "tensor_split":
        raise NoRule()
    if isinstance(arg, (list, tuple)):  # explicit sizes: they must add up to the dim
        if not _eq(ctx, sympy.Add(*arg), n):
            raise NoRule()
        return list(arg)
    if op == "chunk":
        if not isinstance(arg, int) or arg < 1:
            raise NoRule()
        arg = FloorDiv(n + arg - 1, arg)  # chunk(c) is split(ceil(n / c))
    k = len(ctx.meta_out)
    # k pieces of `arg` (the last one shorter) exactly when (k - 1) * arg < n <= k * arg
    if not (_lt(ctx, (k - 1) * arg, n) and not _lt(ctx, k * arg, n)):
        raise NoRule()
    return [arg] * (k - 1) + [n - (k - 1) * arg]


@register("diagonal", torch.diagonal)
def _rule_diagonal(ctx, x, offset=0, dim1=0, dim2=1):
    if not isinstance(offset, int):
        raise NoRule()
    d1, d2 = _norm_dim(dim1, x.ndim), _norm_dim(dim2, x.ndim)
    if d1 == d2:
        raise NoRule()
    n1, n2 = sympy.sympify(x.shape[d1]), sympy.sympify(x.shape[d2])
    if offset >= 0:
        length, start = sympy.Max(0, sympy.Min(n1, n2 - offset)), offset * x.stride[d2]
    else:
        length, start = sympy.Max(0, sympy.Min(n1 + offset, n2)), -offset * x.stride[d1]
    keep = [i for i in range(x.ndim) if i not in (d1, d2)]
    return Out(tuple(x.shape[i] for i in keep) + (_dim(length),),
               tuple(x.stride[i] for i in keep) + (_dim(x.stride[d1] + x.stride[d2]),),
               _dim(x.storage_offset + start))


@register("diag", torch.diag)
def _rule_diag(ctx, x, diagonal=0):
    if x.ndim == 2:
        return _rule_diagonal(ctx, x, diagonal).shape
    if x.ndim != 1 or not isinstance(diagonal, int):
        raise NoRule()
    n = _dim(x.shape[0] + abs(diagonal))
    return (n, n)


@register(torch.view_as_real)
def _rule_view_as_real(ctx, x):
    return Out(tuple(x.shape) + (2,), tuple(_dim(2 * st) for st in x.stride) + (1,),
               _dim(2 * x.storage_offset))


@register(torch.einsum)
def _rule_einsum(ctx, equation, *operands):
    """Explicit or implicit output; no ellipsis, each operand's labels must match its rank."""
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    if not isinstance(equation, str) or "." in equation:
        raise NoRule()
    eq = equation.replace(" ", "")
    lhs, _, rhs = eq.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise NoRule()
    sizes: dict = {}
    for term, op in zip(terms, operands):
        if len(term) != op.ndim:
            raise NoRule()
        for label, d in zip(term, op.shape):
            if isinstance(d, int) and d == 1:
                sizes.setdefault(label, 1)
            elif label in sizes and not (isinstance(sizes[label], int) and sizes[label] == 1):
                _check_eq(ctx, sizes[label], d)
            else:
                sizes[label] = d
    if "->" not in eq:
        counts = {c: lhs.count(c) for c in set(lhs.replace(",", ""))}
        rhs = "".join(sorted(c for c, k in counts.items() if k == 1))
    return tuple(sizes[c] for c in rhs)


@register(torch.eye)
def _rule_eye(ctx, n, m=None, **kwargs):
    if not isinstance(n, (int, sympy.Basic)) or not isinstance(m, (int, sympy.Basic, type(None))):
        raise NoRule()
    return (_dim(n), _dim(n if m is None else m))


# -- joining ------------------------------------------------------------------------------------------

@register(torch.cat, torch.concat, torch.concatenate)
def _rule_cat(ctx, tensors, dim=0, **kwargs):
    tensors = [t for t in tensors if not (t.ndim == 1 and isinstance(t.shape[0], int) and t.shape[0] == 0)]
    if not tensors:
        raise NoRule()
    nd = tensors[0].ndim
    d = _norm_dim(kwargs.get("axis", dim), nd)
    shape = list(tensors[0].shape)
    total: Any = 0
    for t in tensors:
        if t.ndim != nd:
            raise NoRule()
        for i in range(nd):
            if i != d:
                _check_eq(ctx, shape[i], t.shape[i])
        total = total + t.shape[d]
    shape[d] = _dim(total)
    return tuple(shape)


@register(torch.diff, "diff")
def _rule_diff(ctx, x, n=1, dim=-1, prepend=None, append=None):
    """The inputs joined along `dim` (cat's rule), `n` shorter."""
    if not isinstance(n, int) or n < 0:
        raise NoRule()
    parts = [t for t in (prepend, x, append) if t is not None]
    if any(not isinstance(t, TensorMeta) or t.ndim != x.ndim for t in parts):
        raise NoRule()  # scalar prepend/append: not spelled here
    shape = list(_rule_cat(ctx, parts, dim))
    d = _norm_dim(dim, x.ndim)
    if not isinstance(shape[d], int) and not _lt(ctx, shape[d], n):
        shape[d] = _dim(shape[d] - n)
    else:
        shape[d] = ctx.meta_out.shape[d] if isinstance(shape[d], int) else 0
    return tuple(shape)


@register(torch.stack)
def _rule_stack(ctx, tensors, dim=0):
    first = tensors[0]
    for t in tensors[1:]:
        if t.ndim != first.ndim:
            raise NoRule()
        for a, b in zip(first.shape, t.shape):
            _check_eq(ctx, a, b)
    d = _norm_dim(dim, first.ndim + 1)
    return tuple(first.shape[:d]) + (len(tensors),) + tuple(first.shape[d:])


@register("repeat")
def _rule_repeat(ctx, x, *reps):
    reps = [_dim(r) for r in _sizes_arg(reps)]
    lead = len(reps) - x.ndim
    if lead < 0:
        raise NoRule()
    shape = list(reps[:lead]) + [_dim(s * r) for s, r in zip(x.shape, reps[lead:])]
    return tuple(shape)


@register(F.pad)
def _rule_pad(ctx, x, pad, mode="constant", value=None):
    pad = [_dim(p) for p in pad]
    if len(pad) % 2 or len(pad) // 2 > x.ndim:
        raise NoRule()
    shape = list(x.shape)
    for k in range(len(pad) // 2):
        d = x.ndim - 1 - k
        shape[d] = _dim(shape[d] + pad[2 * k] + pad[2 * k + 1])
    return tuple(shape)


@register(torch.gather, "gather")
def _rule_gather(ctx, x, dim, index, **kwargs):
    return index.shape


@register(torch.index_select, "index_select")
def _rule_index_select(ctx, x, dim, index):
    d = _norm_dim(dim, x.ndim)
    shape = list(x.shape)
    if x.ndim:
        shape[d] = index.numel() if index.ndim else 1
    return tuple(shape)


@register(torch.scatter, "scatter", torch.scatter_add, "scatter_add", torch.index_add, "index_add",
          torch.index_copy, "index_copy")
def _rule_scatter(ctx, x, *args, **kwargs):
    return x.shape


@register(F.embedding)
def _rule_embedding(ctx, ids, weight, *args, **kwargs):
    return tuple(ids.shape) + (weight.shape[1],)


@register(F.one_hot)
def _rule_one_hot(ctx, ids, num_classes=-1):
    if not isinstance(num_classes, int) or num_classes < 0:
        raise NoRule()
    return tuple(ids.shape) + (num_classes,)


@register(F.cross_entropy, F.nll_loss, F.mse_loss, F.l1_loss, F.smooth_l1_loss, F.huber_loss,
          F.binary_cross_entropy, F.binary_cross_entropy_with_logits, F.kl_div)
def _rule_loss(ctx, x, target, *args, **kwargs):
    if kwargs.get("reduction", "mean") != "none":
        return ()
    if ctx.target in (F.cross_entropy, F.nll_loss):
        raise NoRule()
    return broadcast_shapes(ctx, x.shape, target.shape)


# -- factories ----------------------------------------------------------------------------------------

@register(torch.zeros, torch.ones, torch.empty, torch.rand, torch.randn)
def _rule_factory(ctx, *size, **kwargs):
    sizes = _sizes_arg(size) if size else list(kwargs.get("size", ()))
    return tuple(_dim(s) for s in sizes)


@register(torch.full)
def _rule_full(ctx, size, fill_value, **kwargs):
    return tuple(_dim(s) for s in size)


@register(torch.randint)
def _rule_randint(ctx, *args, **kwargs):
    size = kwargs.get("size", args[-1] if args else ())
    if not isinstance(size, (list, tuple)):
        raise NoRule()
    return tuple(_dim(s) for s in size)


@register("new_zeros", "new_ones", "new_empty")
def _rule_new_factory(ctx, x, *size, **kwargs):
    sizes = _sizes_arg(size) if size else list(kwargs.get("size", ()))
    return tuple(_dim(s) for s in sizes)


@register("new_full")
def _rule_new_full(ctx, x, size, fill_value, **kwargs):
    return tuple(_dim(s) for s in size)


@register(torch.arange)
def _rule_arange(ctx, *args, **kwargs):
    nums = [a for a in args]
    if "end" in kwargs:
        nums = ([kwargs.get("start", 0)] if not nums else nums) + [kwargs["end"]]
    if not all(isinstance(a, int) or isinstance(a, sympy.Basic) for a in nums) or not nums:
        raise NoRule()
    if len(nums) == 1:
        start, end, step = 0, nums[0], kwargs.get("step", 1)
    else:
        start, end = nums[0], nums[1]
        step = nums[2] if len(nums) > 2 else kwargs.get("step", 1)
    if not isinstance(step, int) or step == 0 or not isinstance(ctx.meta_out, TensorMeta) \
            or ctx.meta_out.dtype.is_floating_point:
        raise NoRule()
    if step > 0:
        if not _lt(ctx, start, end):
            return (0,)
        n = FloorDiv(sympy.sympify(end) - sympy.sympify(start) + step - 1, step)
    else:
        if not _lt(ctx, end, start):
            return (0,)
        n = FloorDiv(sympy.sympify(start) - sympy.sympify(end) - step - 1, -step)
    return (_dim(n),)


# -- convolution and pooling ------------------------------------------------------------------------

def _tuple_n(v, n):
    if isinstance(v, (list, tuple)):
        if len(v) == 1:
            return tuple(v) * n
        return tuple(v)
    return (v,) * n


def _conv_out(size, k, s, p, d):
    return _dim(FloorDiv(sympy.sympify(size) + 2 * p - d * (k - 1) - 1, s) + 1)


def _conv_shape(ctx, x, weight, stride, padding, dilation, groups, n):
    if isinstance(padding, str):
        if padding == "same":
            spatial = tuple(x.shape[-n:])
        elif padding == "valid":
            padding = 0
        else:
            raise NoRule()
    ks = tuple(weight.shape[2:])
    st, dl = _tuple_n(stride, n), _tuple_n(dilation, n)
    if not isinstance(padding, str):
        pd = _tuple_n(padding, n)
        spatial = tuple(_conv_out(x.shape[-n + i], ks[i], st[i], pd[i], dl[i]) for i in range(n))
    batch = tuple(x.shape[:-n - 1])
    return batch + (weight.shape[0],) + spatial


def _make_conv_rule(n):
    def rule(ctx, x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
        return _conv_shape(ctx, x, weight, stride, padding, dilation, groups, n)
    return rule


for _n, _f in ((1, F.conv1d), (2, F.conv2d), (3, F.conv3d)):
    register(_f)(_make_conv_rule(_n))


def _make_pool_rule(n, kind):
    def rule(ctx, x, kernel_size, stride=None, padding=0, *args, **kwargs):
        ceil_mode = kwargs.get("ceil_mode", False)
        if kind == "max":
            dilation = args[0] if args else kwargs.get("dilation", 1)
            if len(args) > 1:
                ceil_mode = args[1]
        else:
            dilation = 1
            if args:
                ceil_mode = args[0]
        if ceil_mode or kwargs.get("return_indices") or (kind == "max" and len(args) > 2 and args[2]):
            raise NoRule()
        ks = _tuple_n(kernel_size, n)
        st = _tuple_n(stride if stride not in (None, []) else kernel_size, n)
        pd, dl = _tuple_n(padding, n), _tuple_n(dilation, n)
        spatial = tuple(_conv_out(x.shape[-n + i], ks[i], st[i], pd[i], dl[i]) for i in range(n))
        return tuple(x.shape[:-n]) + spatial
    return rule


for _n, _f in ((1, F.max_pool1d), (2, F.max_pool2d), (3, F.max_pool3d)):
    register(_f)(_make_pool_rule(_n, "max"))
for _n, _f in ((1, F.avg_pool1d), (2, F.avg_pool2d), (3, F.avg_pool3d)):
    register(_f)(_make_pool_rule(_n, "avg"))


def _make_adaptive_rule(n):
    def rule(ctx, x, output_size, *args, **kwargs):
        outs = _tuple_n(output_size, n)
        spatial = tuple(x.shape[-n + i] if o is None else o for i, o in enumerate(outs))
        if isinstance(ctx.meta_out, (list, tuple)):
            return [tuple(x.shape[:-n]) + spatial] * len(ctx.meta_out)
        return tuple(x.shape[:-n]) + spatial
    return rule


for _n, _f in ((1, F.adaptive_avg_pool1d), (2, F.adaptive_avg_pool2d), (3, F.adaptive_avg_pool3d),
               (1, F.adaptive_max_pool1d), (2, F.adaptive_max_pool2d), (3, F.adaptive_max_pool3d)):
    register(_f)(_make_adaptive_rule(_n))


# -- nn.Module calls (keyed by class; the module comes first) ------------------------------------------

nn = torch.nn


@register(nn.Linear)
def _rule_mod_linear(ctx, m, x):
    return _rule_linear(ctx, x, TensorMeta.from_tensor(m.weight.detach().to("meta")))


@register(nn.Conv1d, nn.Conv2d, nn.Conv3d)
def _rule_mod_conv(ctx, m, x):
    if m.padding_mode != "zeros":
        raise NoRule()
    n = len(m.kernel_size)
    w = TensorMeta.from_tensor(m.weight.detach().to("meta"))
    return _conv_shape(ctx, x, w, m.stride, m.padding, m.dilation, m.groups, n)


@register(nn.ReLU, nn.GELU, nn.SiLU, nn.Tanh, nn.Sigmoid, nn.Identity, nn.Dropout, nn.LayerNorm,
          nn.GroupNorm, nn.BatchNorm1d, nn.BatchNorm2d, nn.BatchNorm3d, nn.Softmax, nn.LogSoftmax,
          nn.LeakyReLU, nn.ELU, nn.Mish, nn.Hardswish, nn.Hardtanh, nn.ReLU6, nn.Softplus,
          nn.Dropout1d, nn.Dropout2d, nn.InstanceNorm1d, nn.InstanceNorm2d, nn.PReLU)
def _rule_mod_same(ctx, m, x, *args, **kwargs):
    return x.shape


@register(nn.Embedding)
def _rule_mod_embedding(ctx, m, ids):
    return tuple(ids.shape) + (m.embedding_dim,)


@register(nn.Flatten)
def _rule_mod_flatten(ctx, m, x):
    return _rule_flatten(ctx, x, m.start_dim, m.end_dim)


@register(nn.MaxPool2d, nn.AvgPool2d, nn.MaxPool1d, nn.AvgPool1d)
def _rule_mod_pool(ctx, m, x):
    n = 2 if "2d" in type(m).__name__ else 1
    kind = "max" if "Max" in type(m).__name__ else "avg"
    if kind == "max":
        return _make_pool_rule(n, kind)(ctx, x, m.kernel_size, m.stride, m.padding, m.dilation,
                                        m.ceil_mode, m.return_indices)
    return _make_pool_rule(n, kind)(ctx, x, m.kernel_size, m.stride, m.padding, m.ceil_mode)


@register(nn.AdaptiveAvgPool2d, nn.AdaptiveAvgPool1d)
def _rule_mod_adaptive(ctx, m, x):
    n = 2 if "2d" in type(m).__name__ else 1
    return _make_adaptive_rule(n)(ctx, x, m.output_size)


# -- Python values ------------------------------------------------------------------------------------

@register("size", python_value=True)
def _rule_size(ctx, x, dim=None):
    if dim is None:
        return tuple(x.shape)
    return x.shape[_norm_dim_strict(dim, x.ndim)]


@register("stride", python_value=True)
def _rule_stride(ctx, x, dim=None):
    if dim is None:
        return tuple(x.stride)
    return x.stride[_norm_dim_strict(dim, x.ndim)]


@register("dim", "ndimension", python_value=True)
def _rule_ndim(ctx, x):
    return x.ndim


@register("numel", "nelement", torch.numel, python_value=True)
def _rule_numel(ctx, x):
    return x.numel()


@register("storage_offset", python_value=True)
def _rule_storage_offset(ctx, x):
    return x.storage_offset


@register("is_contiguous", python_value=True)
def _rule_is_contiguous(ctx, x, memory_format=torch.contiguous_format):
    if memory_format != torch.contiguous_format:
        return x.concrete(ctx.hint).to_meta_tensor().is_contiguous(memory_format=memory_format)
    if _is_contiguous_sym(x):
        return True
    return x.concrete(ctx.hint).to_meta_tensor().is_contiguous()


@register("is_floating_point", torch.is_floating_point, python_value=True)
def _rule_is_fp(ctx, x):
    return x.dtype.is_floating_point


@register("is_complex", torch.is_complex, python_value=True)
def _rule_is_complex(ctx, x):
    return x.dtype.is_complex


@register("element_size", python_value=True)
def _rule_element_size(ctx, x):
    return x.element_size()


def _norm_dim_strict(dim, ndim):
    if not isinstance(dim, int):
        raise TypeError("dim must be an int")
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(f"Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n

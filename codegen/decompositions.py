"""Compound ops written in terms of the primitive lowerings (registered into LOWERINGS).

Each decomposition mirrors the eager definition (same dtype rules, same reduction order of
operations where it matters for accuracy, e.g. max-subtraction in softmax). Matrix products
live in codegen/gemm.py.
"""
from __future__ import annotations

import math

import sympy
import torch

from codegen.ir import NotLowered, TensorValue, current, realize, strided_view_of
from codegen.lowering import (LOWERINGS, amax, broadcast_sizes, cast, clamp, div, expand_to,
                              float_dtype_for, is_float, is_tensor, make_reduction, mean, norm_dim,
                              norm_dims, pointwise, register, result_dtype, sum_, var_mean_impl,
                              where)
from codegen.view_lowerings import _check_factory, reshape, slice_
from codegen.ops import ops
from codegen.scalars import has_scalar
from codegen.sizevars import static_int

L = LOWERINGS


def _f(x):
    if not is_tensor(x):
        raise NotLowered("tensor expected")
    if not is_float(x.dtype):
        raise NotLowered("float expected")
    return x.dtype


def unary(fn, x, dt=None):
    return pointwise(fn, [x], dt or x.dtype)


def _const(v, dt):
    return ops.constant(v, dt)


def _softmax_dtype(x, dtype):
    if dtype is not None:
        x = cast(x, dtype)
    if not is_float(x.dtype):
        raise NotLowered("softmax of int")
    return x


@register("softmax")
def softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = _softmax_dtype(input, dtype)
    if dim is None:
        raise NotLowered("implicit softmax dim")
    if x.ndim == 0:
        return unary(lambda a: ops.constant(1.0, x.dtype), x)
    d = norm_dim(dim, x.ndim)
    m = amax(x, [d], True)
    e = L["exp"](L["sub"](x, m))
    if not current.graph.backend.row_scratch:
        return L["div"](e, sum_(e, [d], True))
    if d == x.ndim - 1:
        # exp once per element into a per-row scratch array (scheduler.mark_row_local) that
        # the sum and the scaling both read, instead of computing it twice
        e = realize(e)
    # one division per row, then multiplies (what eager's CPU softmax does): a vector divide
    # per element costs as much as the exp
    return L["mul"](e, L["reciprocal"](sum_(e, [d], True)))


@register("softmin")
def softmin(input, dim=None, _stacklevel=3, dtype=None):
    return softmax(L["neg"](_softmax_dtype(input, dtype)), dim)


@register("log_softmax")
def log_softmax(input, dim=None, _stacklevel=3, dtype=None):
    x = _softmax_dtype(input, dtype)
    if dim is None:
        raise NotLowered("implicit softmax dim")
    if x.ndim == 0:
        return unary(lambda a: ops.constant(0.0, x.dtype), x)
    d = norm_dim(dim, x.ndim)
    m = amax(x, [d], True)
    shifted = L["sub"](x, m)
    lse = L["log"](sum_(L["exp"](shifted), [d], True))
    return L["sub"](shifted, lse)


@register("logsumexp")
def logsumexp(input, dim=(), keepdim=False):
    x = input if is_float(input.dtype) else cast(input, torch.get_default_dtype())
    dims = norm_dims(dim, x.ndim)
    m = amax(x, dims, True)
    m = pointwise(lambda a: ops.where(ops.isinf(a), ops.constant(0.0, x.dtype), a), [m], x.dtype)
    s = sum_(L["exp"](L["sub"](x, m)), dims, True)
    out = L["add"](L["log"](s), m)
    if not keepdim:
        out = L["squeeze"](out, dims) if dims else out
    return out


def _affine(y, weight, bias):
    if weight is not None:
        y = L["mul"](y, weight)
    if bias is not None:
        y = L["add"](y, bias)
    return y


@register("layer_norm")
def layer_norm(input, normalized_shape, weight=None, bias=None, eps=1e-5):
    _f(input)
    k = len(tuple(normalized_shape))
    dims = list(range(input.ndim - k, input.ndim))
    var, mu = var_mean_impl(input, dims, correction=0, keepdim=True)
    rstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, input.dtype))), var)
    y = L["mul"](L["sub"](input, mu), rstd)
    return _affine(y, weight, bias)


@register("rms_norm")
def rms_norm(input, normalized_shape, weight=None, eps=None):
    # eager computes a half input in float (its op math), eps defaulting to float's: squares of
    # fp16 values overflow fp16 from 256 on
    dt = _f(input)
    k = len(tuple(normalized_shape))
    dims = list(range(input.ndim - k, input.ndim))
    x = cast(input, _stats_dtype(dt))
    if eps is None:
        eps = torch.finfo(x.dtype).eps
    ms = mean(unary(ops.square, x), dims, True)
    r = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, x.dtype))), ms)
    return _affine(cast(L["mul"](x, r), dt), weight, None)


@register("group_norm")
def group_norm(input, num_groups, weight=None, bias=None, eps=1e-5):
    _f(input)
    n, c = input.size[0], input.size[1]
    rest = list(input.size[2:])
    g = reshape(input, [n, num_groups, -1])
    var, mu = var_mean_impl(g, [2], correction=0, keepdim=True)
    rstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, input.dtype))), var)
    y = reshape(L["mul"](L["sub"](g, mu), rstd), [n, c] + rest)
    shape = [c] + [1] * len(rest)
    return _affine(y, reshape(weight, shape) if weight is not None else None,
                   reshape(bias, shape) if bias is not None else None)


@register("batch_norm")
def batch_norm(input, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    if training or running_mean is None or running_var is None:
        raise NotLowered("batch_norm training")
    _f(input)
    shape = [input.size[1]] + [1] * (input.ndim - 2)
    rm, rv = reshape(running_mean, shape), reshape(running_var, shape)
    rstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, rv.dtype))), rv)
    y = L["mul"](L["sub"](input, rm), rstd)
    return _affine(y, reshape(weight, shape) if weight is not None else None,
                   reshape(bias, shape) if bias is not None else None)


@register("gelu")
def gelu(input, approximate="none"):
    dt = _f(input)
    c = lambda v: _const(v, dt)  # noqa: E731
    if approximate == "tanh":
        def fn(x):
            inner = ops.mul(c(math.sqrt(2 / math.pi)),
                            ops.add(x, ops.mul(c(0.044715), ops.mul(x, ops.mul(x, x)))))
            return ops.mul(ops.mul(c(0.5), x), ops.add(c(1.0), ops.tanh(inner)))
    else:
        def fn(x):
            return ops.mul(ops.mul(x, c(0.5)), ops.add(c(1.0), ops.erf(ops.mul(x, c(0.5 ** 0.5)))))
    return unary(fn, input)


@register("silu")
def silu(input, inplace=False):
    _f(input)
    return unary(lambda x: ops.mul(x, ops.sigmoid(x)), input)


def _softplus_fn(dt, beta=1.0, threshold=20.0):
    c = lambda v: _const(v, dt)  # noqa: E731

    def fn(x):
        bx = ops.mul(x, c(beta))
        soft = ops.truediv(ops.log1p(ops.exp(bx)), c(beta))
        return ops.where(ops.gt(bx, c(threshold)), x, soft)
    return fn


@register("softplus")
def softplus(input, beta=1.0, threshold=20.0):
    return unary(_softplus_fn(_f(input), beta, threshold), input)


@register("mish")
def mish(input, inplace=False):
    sp = _softplus_fn(_f(input))
    return unary(lambda x: ops.mul(x, ops.tanh(sp(x))), input)


@register("hardsigmoid")
def hardsigmoid(input, inplace=False):
    dt = _f(input)
    c = lambda v: _const(v, dt)  # noqa: E731
    return unary(lambda x: ops.truediv(ops.minimum(ops.maximum(ops.add(x, c(3.0)), c(0.0)), c(6.0)),
                                       c(6.0)), input)


@register("hardswish")
def hardswish(input, inplace=False):
    dt = _f(input)
    c = lambda v: _const(v, dt)  # noqa: E731
    return unary(lambda x: ops.truediv(
        ops.mul(x, ops.minimum(ops.maximum(ops.add(x, c(3.0)), c(0.0)), c(6.0))), c(6.0)), input)


@register("hardtanh")
def hardtanh(input, min_val=-1.0, max_val=1.0, inplace=False):
    if input.dtype == torch.bool:
        raise NotLowered("hardtanh bool")
    return clamp(input, min_val, max_val)


@register("relu6")
def relu6(input, inplace=False):
    return hardtanh(input, 0.0, 6.0)


@register("leaky_relu")
def leaky_relu(input, negative_slope=0.01, inplace=False):
    dt = _f(input)
    return unary(lambda x: ops.where(ops.gt(x, _const(0, dt)), x,
                                     ops.mul(x, _const(negative_slope, dt))), input)


@register("elu")
def elu(input, alpha=1.0, inplace=False):
    dt = _f(input)
    return unary(lambda x: ops.where(ops.gt(x, _const(0, dt)), x,
                                     ops.mul(_const(alpha, dt), ops.expm1(x))), input)


@register("celu")
def celu(input, alpha=1.0, inplace=False):
    dt = _f(input)
    return unary(lambda x: ops.where(ops.gt(x, _const(0, dt)), x,
                                     ops.mul(_const(alpha, dt),
                                             ops.expm1(ops.truediv(x, _const(alpha, dt))))), input)


@register("selu")
def selu(input, inplace=False):
    dt = _f(input)
    a, s = 1.6732632423543772848170429916717, 1.0507009873554804934193349852946
    return unary(lambda x: ops.mul(_const(s, dt), ops.where(
        ops.gt(x, _const(0, dt)), x, ops.mul(_const(a, dt), ops.expm1(x)))), input)


@register("threshold")
def threshold(input, threshold, value, inplace=False):
    dt = input.dtype
    return unary(lambda x: ops.where(ops.le(x, _const(threshold, dt)), _const(value, dt), x),
                 input)


@register("softsign")
def softsign(input):
    dt = _f(input)
    return unary(lambda x: ops.truediv(x, ops.add(_const(1.0, dt), ops.abs(x))), input)


@register("tanhshrink")
def tanhshrink(input):
    _f(input)
    return unary(lambda x: ops.sub(x, ops.tanh(x)), input)


@register("logsigmoid")
def logsigmoid(input):
    dt = _f(input)
    # -softplus(-x), stable form: min(x,0) - log1p(exp(-|x|))
    return unary(lambda x: ops.sub(ops.minimum(x, _const(0.0, dt)),
                                   ops.log1p(ops.exp(ops.neg(ops.abs(x))))), input)


@register("dropout", "dropout1d", "dropout2d", "dropout3d", "alpha_dropout", "feature_alpha_dropout")
def dropout(input, p=0.5, training=True, inplace=False):
    if training and p > 0:
        raise NotLowered("dropout in training")
    return input


@register("tensor")
def tensor(data, *, dtype=None, **kw):
    """torch.tensor of an empty list or a Python number (a cache's empty start, a scalar
    constant): a fresh buffer, no host-to-device copy per call. Other data stays extern."""
    if isinstance(data, (bool, int, float)):
        return L["full"]([], data, dtype=dtype, **kw)
    if isinstance(data, (list, tuple)) and len(data) == 0:
        return L["full"]([0], 0, dtype=dtype or torch.get_default_dtype(), **kw)
    raise NotLowered("tensor data other than [] or a number")


# --- attention biases in the layout fused attention kernels require -----------------------------
# CUDA's memory-efficient attention (and cuDNN's) reads its additive bias (`attn_bias`, the float
# mask) with vector loads: every stride but the last must be a multiple of 16 bytes, or the call
# fails ("attn_bias is not correctly aligned"). torch's own `scaled_dot_product_attention` pads the
# mask's last dimension and slices it back (a copy per call); a graph recorded at the dispatcher
# (training joints, functionalized inference graphs) holds that pad and slice as ops, and codegen
# folding them into one kernel wrote a dense `[..., N]` bias whose rows start unaligned: a
# static-cache decode step over 23 keys failed its CUDA-graph capture and launched plainly
# (session 17; tests/codegen_triton/test_gpu.py `test_decode_mask_of_odd_length_is_captured`).
# `aligned_bias(v)` is v when it is already a view of a buffer with aligned strides, else v
# written once into a buffer whose rows are padded to a multiple of ALIGN elements, as a view of
# its first N columns (the padding is never read); a bias computed per batch row and broadcast
# over the heads (`TensorValue.view_of`) is padded before the broadcast. Values are unchanged, so
# every attention kernel (and eager's composite, which then skips its own pad) computes the same
# result. A symbolic last size is passed as before. `BIAS_ARGUMENT`: the bias argument of each
# fused attention op codegen calls extern (graph.py's `_extern_node` aligns it).
# (16 elements covers 16-byte vectors down to 8-bit types, as torch's own pad of the mask does)
ALIGN = 16

BIAS_ARGUMENT = {
    getattr(torch.ops.aten, op).default: name for op, name in (
        ("_scaled_dot_product_efficient_attention", "attn_bias"),
        ("_scaled_dot_product_efficient_attention_backward", "attn_bias"),
        ("_efficient_attention_forward", "bias"),
        ("_efficient_attention_backward", "bias"),
        ("_scaled_dot_product_cudnn_attention", "attn_bias"),
        ("_scaled_dot_product_cudnn_attention_backward", "attn_bias"),
    ) if getattr(torch.ops.aten, op, None) is not None     # (one this torch lacks: skipped)
}


def _aligned(v: TensorValue) -> bool:
    ref = strided_view_of(v)
    if ref is None:
        return False
    strides = [static_int(s) for s in ref.stride]
    offset = static_int(ref.offset)
    if offset is None or None in strides or strides[-1] != 1 and static_int(v.size[-1]) != 1:
        return False
    return offset % ALIGN == 0 and all(s % ALIGN == 0 for s in strides[:-1])


def aligned_bias(v):
    """v (an attention bias) as a view the fused kernels accept (see the comment above)."""
    if not isinstance(v, TensorValue) or v.ndim < 2 or _aligned(v):
        return v
    n = static_int(v.size[-1])
    if n is None:
        return v                        # a symbolic key length: as before
    if v.view_of is not None:           # a bias broadcast over heads stays a stride-0 view
        source, view = v.view_of
        out = view(aligned_bias(source))
        if _aligned(out):
            return out
    padded = -(-n // ALIGN) * ALIGN
    if padded == n:     # a fresh dense buffer of it is aligned (a view of another may not be)
        return realize(TensorValue(list(v.size), v.dtype, v.loader, None, v.cost))
    return L["narrow"](realize(L["constant_pad_nd"](v, [0, padded - n], 0.0)), -1, 0, n)


def align_bias_argument(target, args, kwargs):
    """(args, kwargs) of an extern call of `target` with its attention bias aligned."""
    name = BIAS_ARGUMENT.get(target)
    if name is None:
        return args, kwargs
    if name in kwargs:
        return args, {**kwargs, name: aligned_bias(kwargs[name])}
    names = [a.name for a in target._schema.arguments]
    i = names.index(name)
    if i < len(args):
        args = (*args[:i], aligned_bias(args[i]), *args[i + 1:])
    return args, kwargs


@register("scaled_dot_product_attention")
def scaled_dot_product_attention(query, key, value, attn_mask=None, dropout_p=0.0,
                                 is_causal=False, scale=None, enable_gqa=False):
    """An extern call; a boolean mask is first turned into the additive float mask eager's
    kernels build from it (0 where kept, -inf where masked; the same values),
    once per graph: a model passes one mask to every layer, and eager would convert it again
    in each layer's call (a fill and a where per layer)."""
    g = current.graph
    if is_tensor(attn_mask) and attn_mask.dtype == torch.bool and is_tensor(query) and \
            is_float(query.dtype) and g.backend.extern_epilogues:
        cache = g.__dict__.setdefault("sdpa_float_masks", {})
        key_ = (id(attn_mask), query.dtype)
        if key_ not in cache:
            dt = query.dtype
            mask = pointwise(lambda m: ops.where(m, _const(0.0, dt), _const(-math.inf, dt)),
                             [attn_mask], torch.bool, dt)
            # on the GPU in the rows the fused kernels read (torch would pad it in every call)
            cache[key_] = (attn_mask, aligned_bias(mask) if g.backend.name == "triton"
                           else realize(mask))
        attn_mask = cache[key_][1]
    kwargs = dict(attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal, scale=scale)
    if enable_gqa:
        kwargs["enable_gqa"] = enable_gqa
    return g.call_extern(torch.nn.functional.scaled_dot_product_attention, (query, key, value),
                         kwargs)


@register("lerp")
def lerp(input, end, weight):
    dt = L["add"](input, end).dtype
    if not is_float(dt):
        raise NotLowered("lerp int")
    return L["add"](input, L["mul"](L["sub"](end, input), weight))


@register("addcmul")
def addcmul(input, tensor1, tensor2, *, value=1):
    return L["add"](input, L["mul"](L["mul"](tensor1, tensor2), value))


@register("addcdiv")
def addcdiv(input, tensor1, tensor2, *, value=1):
    q = div(tensor1, tensor2)
    if not is_float(q.dtype) or not is_float(L["add"](input, q).dtype):
        raise NotLowered("addcdiv int")
    return L["add"](input, L["mul"](q, value))


@register("masked_fill")
def masked_fill(input, mask, value):
    if is_tensor(value):
        if value.ndim != 0:
            raise NotLowered("masked_fill tensor value")
        value = cast(value, input.dtype)
    elif (isinstance(value, float) or has_scalar(value)) and not is_float(input.dtype):
        raise NotLowered("masked_fill float into int")
    if mask.dtype != torch.bool:
        raise NotLowered("mask dtype")
    out = where(mask, value, input)
    return cast(out, input.dtype)


@register("nan_to_num")
def nan_to_num(input, nan=0.0, posinf=None, neginf=None):
    if not is_float(input.dtype):
        return input
    fi = torch.finfo(input.dtype)
    posinf = fi.max if posinf is None else posinf
    neginf = fi.min if neginf is None else neginf
    dt = input.dtype

    def fn(x):
        x1 = ops.where(ops.isnan(x), _const(nan, dt), x)
        x2 = ops.where(ops.isposinf(x1), _const(posinf, dt), x1)
        return ops.where(ops.isneginf(x2), _const(neginf, dt), x2)
    return unary(fn, input)


@register("logaddexp")
def logaddexp(input, other):
    dt = L["add"](input, other).dtype
    if not is_float(dt):
        raise NotLowered("logaddexp int")

    def fn(a, b):
        m = ops.maximum(a, b)
        both_inf = ops.logical_and(ops.isinf(a), ops.eq(a, b))
        r = ops.add(m, ops.log1p(ops.exp(ops.neg(ops.abs(ops.sub(a, b))))))
        return ops.where(both_inf, a, r)
    return pointwise(fn, [input, other], dt)


@register("sinc")
def sinc(input):
    dt = float_dtype_for(input.dtype)
    pi = math.pi

    def fn(x):
        px = ops.mul(x, _const(pi, dt))
        return ops.where(ops.eq(x, _const(0.0, dt)), _const(1.0, dt), ops.truediv(ops.sin(px), px))
    return pointwise(fn, [input], dt)


@register("deg2rad")
def deg2rad(input):
    return L["mul"](cast(input, float_dtype_for(input.dtype)), math.pi / 180)


@register("rad2deg")
def rad2deg(input):
    return L["mul"](cast(input, float_dtype_for(input.dtype)), 180 / math.pi)


@register("logit")
def logit(input, eps=None):
    dt = float_dtype_for(input.dtype)

    def fn(x):
        if eps is not None:
            x = ops.minimum(ops.maximum(x, _const(eps, dt)), _const(1 - eps, dt))
        return ops.log(ops.truediv(x, ops.sub(_const(1.0, dt), x)))
    return pointwise(fn, [input], dt)


@register("heaviside")
def heaviside(input, values):
    dt = L["add"](input, values).dtype
    if input.dtype != values.dtype:
        raise NotLowered("heaviside dtypes")
    z = lambda: _const(0, dt)  # noqa: E731
    return pointwise(lambda x, v: ops.where(ops.eq(x, z()), v, ops.where(
        ops.gt(x, z()), _const(1, dt), z())), [input, values], dt)


@register("outer", "ger")
def outer(input, vec2):
    return L["mul"](L["unsqueeze"](input, 1), L["unsqueeze"](vec2, 0))


def _weighted(loss, weight):
    return loss if weight is None else L["mul"](loss, weight)


@register("mse_loss")
def mse_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    loss = _weighted(unary(ops.square, L["sub"](input, target)), weight)
    return _reduce_loss(loss, reduction, size_average, reduce)


@register("l1_loss")
def l1_loss(input, target, size_average=None, reduce=None, reduction="mean", weight=None):
    loss = _weighted(L["abs"](L["sub"](input, target)), weight)
    return _reduce_loss(loss, reduction, size_average, reduce)


@register("smooth_l1_loss")
def smooth_l1_loss(input, target, size_average=None, reduce=None, reduction="mean", beta=1.0):
    if beta == 0:
        return l1_loss(input, target, reduction=reduction)
    d = L["sub"](input, target)
    dt = _f(d)
    loss = unary(lambda x: ops.where(
        ops.lt(ops.abs(x), _const(beta, dt)),
        ops.truediv(ops.mul(_const(0.5, dt), ops.mul(x, x)), _const(beta, dt)),
        ops.sub(ops.abs(x), _const(0.5 * beta, dt))), d)
    return _reduce_loss(loss, reduction, size_average, reduce)


@register("huber_loss")
def huber_loss(input, target, reduction="mean", delta=1.0, weight=None):
    if weight is not None:
        raise NotLowered("huber weight")
    d = L["sub"](input, target)
    dt = _f(d)
    loss = unary(lambda x: ops.where(
        ops.lt(ops.abs(x), _const(delta, dt)), ops.mul(_const(0.5, dt), ops.mul(x, x)),
        ops.mul(_const(delta, dt), ops.sub(ops.abs(x), _const(0.5 * delta, dt)))), d)
    return _reduce_loss(loss, reduction)


@register("binary_cross_entropy_with_logits")
def bce_with_logits(input, target, weight=None, size_average=None, reduce=None,
                    reduction="mean", pos_weight=None):
    if pos_weight is not None:
        raise NotLowered("pos_weight")
    dt = _f(input)

    def fn(x, y):
        # (1 - y) * x + log1p(exp(-|x|)) + max(-x, 0)
        return ops.add(ops.mul(ops.sub(_const(1.0, dt), y), x),
                       ops.add(ops.log1p(ops.exp(ops.neg(ops.abs(x)))),
                               ops.maximum(ops.neg(x), _const(0.0, dt))))
    loss = pointwise(fn, [input, target], dt)
    if weight is not None:
        loss = L["mul"](loss, weight)
    return _reduce_loss(loss, reduction, size_average, reduce)


def _reduce_loss(loss, reduction, size_average=None, reduce=None):
    if size_average is not None or reduce is not None:
        raise NotLowered("legacy reduction args")
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum_(loss)
    if reduction == "mean":
        return mean(loss)
    raise NotLowered(f"reduction {reduction}")


def _nll_weights(input, target, weight, ignore_index):
    """(target with ignored entries as class 0, each row's weight: 0 where ignored) of a 2-d
    nll_loss input."""
    valid = L["ne"](target, ignore_index)
    safe_t = where(valid, target, 0)
    w = cast(valid, input.dtype)
    if weight is not None:
        w = L["mul"](w, L["squeeze"](L["embedding"](L["unsqueeze"](safe_t, 1),
                                                    L["unsqueeze"](weight, 1)), [1, 2]))
    return safe_t, w


@register("nll_loss")
def nll_loss(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
             reduction="mean"):
    if size_average is not None or reduce is not None:
        raise NotLowered("legacy reduction args")
    _f(input)
    if target.dtype != torch.int64 or input.ndim not in (1, 2) or input.ndim != target.ndim + 1:
        raise NotLowered("nll_loss shapes")
    if input.ndim == 1:
        input, target = L["unsqueeze"](input, 0), L["unsqueeze"](target, 0)
    safe_t, w = _nll_weights(input, target, weight, ignore_index)
    picked = L["squeeze"](L["gather"](input, 1, L["unsqueeze"](safe_t, 1)), 1)
    loss = L["neg"](L["mul"](picked, w))
    if reduction == "none":
        return loss
    if reduction == "sum":
        return sum_(loss)
    if reduction == "mean":
        return L["div"](sum_(loss), sum_(w))
    raise NotLowered(f"reduction {reduction}")


@register("cross_entropy")
def cross_entropy(input, target, weight=None, size_average=None, ignore_index=-100, reduce=None,
                  reduction="mean", label_smoothing=0.0):
    if label_smoothing != 0.0 or not is_tensor(target) or target.dtype != torch.int64:
        raise NotLowered("cross_entropy variant")
    if input.ndim != 2:
        raise NotLowered("cross_entropy rank")
    return nll_loss(LOWERINGS["log_softmax"](input, 1), target, weight, size_average,
                    ignore_index, reduce, reduction)


@register("normalize")
def normalize(input, p=2.0, dim=1, eps=1e-12, out=None):
    if p != 2.0 or out is not None:
        raise NotLowered("normalize p")
    _f(input)
    n = unary(ops.sqrt, sum_(unary(ops.square, input), [norm_dim(dim, input.ndim)], True))
    n = clamp(n, min=eps)
    return L["div"](input, n)


@register("norm", "linalg_vector_norm")
def vector_norm(input, p=2, dim=None, keepdim=False, dtype=None, *, ord=None):
    if ord is not None:
        p = ord
    if p in ("fro", None):
        p = 2
    if dtype is not None or not isinstance(p, (int, float)) or isinstance(p, bool):
        raise NotLowered("norm args")
    _f(input)
    dims = norm_dims(dim, input.ndim)
    a = L["abs"](input)
    if p == 2:
        return unary(ops.sqrt, sum_(unary(ops.square, a), dims, keepdim))
    if p == 1:
        return sum_(a, dims, keepdim)
    if p == math.inf:
        return make_reduction(a, dims, "max", keepdim)
    raise NotLowered(f"norm p={p}")


@register("count_nonzero")
def count_nonzero(input, dim=None):
    return sum_(L["ne"](input, 0), dim)


@register("aminmax")
def aminmax(input, *, dim=None, keepdim=False):
    dims = norm_dims(dim, input.ndim)
    return (make_reduction(input, dims, "min", keepdim), make_reduction(input, dims, "max", keepdim))


@register("glu")
def glu(input, dim=-1):
    a, b = L["chunk"](input, 2, dim)
    return L["mul"](a, L["sigmoid"](b))


@register("diff")
def diff(input, n=1, dim=-1, prepend=None, append=None):
    """prepend/append: the difference of their concatenation along `dim` (what eager computes;
    transformers' packed-sequence mask does `diff(positions, prepend=first - 1)`)."""
    if n != 1:
        raise NotLowered("diff args")
    d = norm_dim(dim, input.ndim)
    if prepend is not None or append is not None:
        parts = [p for p in (prepend, input, append) if p is not None]
        if not all(is_tensor(p) and p.ndim == input.ndim and p.dtype == input.dtype
                   for p in parts):
            raise NotLowered("diff prepend/append")
        input = L["cat"](parts, d)
    m = int(input.size[d])
    a = L["narrow"](input, d, 1, m - 1)
    b = L["narrow"](input, d, 0, m - 1)
    if input.dtype == torch.bool:
        return L["logical_xor"](a, b)
    return L["sub"](a, b)


@register("trace")
def trace(input):
    if input.ndim != 2:
        raise NotLowered("trace rank")
    n = min(int(input.size[0]), int(input.size[1]))
    diag = TensorValue([sympy.Integer(n)], input.dtype, lambda idx: input.loader([idx[0], idx[0]]),
                       None, input.cost)
    return sum_(diag)


@register("fliplr")
def fliplr(input):
    if input.ndim < 2:
        raise NotLowered("fliplr rank")
    return L["flip"](input, [1])


@register("flipud")
def flipud(input):
    if input.ndim < 1:
        raise NotLowered("flipud rank")
    return L["flip"](input, [0])


@register("diagonal", "diagonal_copy")
def diagonal(input, offset=0, dim1=0, dim2=1):
    d1, d2 = norm_dim(dim1, input.ndim), norm_dim(dim2, input.ndim)
    if d1 == d2 or not all(sympy.sympify(s).is_number for s in input.size):
        raise NotLowered("diagonal dims")
    n1, n2 = int(input.size[d1]), int(input.size[d2])
    n = max(0, min(n1 - max(0, -offset), n2 - max(0, offset)))
    rest = [d for d in range(input.ndim) if d not in (d1, d2)]

    def loader(idx):
        full = [None] * input.ndim
        for d, i in zip(rest, idx[:-1]):
            full[d] = i
        full[d1] = idx[-1] + max(0, -offset)
        full[d2] = idx[-1] + max(0, offset)
        return input.loader(full)
    size = [input.size[d] for d in rest] + [sympy.Integer(n)]
    return TensorValue(size, input.dtype, loader, None, input.cost)


@register("diag")
def diag(input, diagonal_=0, *, diagonal=None):
    k = diagonal if diagonal is not None else diagonal_
    if input.ndim == 2:
        return L["diagonal"](input, k)
    if input.ndim != 1:
        raise NotLowered("diag rank")
    n = int(input.size[0])
    m = n + abs(k)
    zero = lambda: _const(0, input.dtype)  # noqa: E731

    def loader(idx):
        r, c = idx
        i = r if k >= 0 else c
        on = ops.eq(ops.sub(ops.index_expr(c, torch.int64), ops.index_expr(r, torch.int64)),
                    ops.constant(k, torch.int64))
        # clamp keeps the load in bounds off the diagonal; `where` discards it there
        return ops.where(on, input.loader([sympy.Min(i, n - 1)]), zero())
    return TensorValue([sympy.Integer(m)] * 2, input.dtype, loader, None, input.cost + 4)


@register("expand_copy")
def expand_copy(input, size, *, implicit=False):
    return L["expand"](input, list(size))


@register("alias_copy", "conj", "conj_physical")
def alias_copy(input):
    if input.dtype.is_complex:
        raise NotLowered("complex")
    return input


@register("unsafe_chunk")
def unsafe_chunk(input, chunks, dim=0):
    return L["chunk"](input, chunks, dim)


@register("unsafe_split")
def unsafe_split(input, split_size, dim=0):
    return L["split"](input, split_size, dim)


@register("broadcast_tensors")
def broadcast_tensors(*tensors):
    size = broadcast_sizes(*[t.size for t in tensors])
    return tuple(expand_to(t, size) for t in tensors)


@register("sum_to_size")
def sum_to_size(input, *size):
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = size[0]
    size = list(size)
    lead = input.ndim - len(size)
    dims = list(range(lead)) + [lead + i for i, s in enumerate(size)
                                if s == 1 and input.size[lead + i] != 1]
    if not size:        # eager's sum_to with an empty shape is tensor.sum(): a new tensor
        return sum_(input, list(range(input.ndim)), False)
    if not dims:
        return input
    out = sum_(input, dims, True)
    return reshape(out, size) if size else reshape(out, [])


@register("addr")
def addr(input, vec1, vec2, *, beta=1, alpha=1):
    if vec1.dtype == torch.bool:
        raise NotLowered("addr bool")
    prod = L["outer"](vec1, vec2)
    if alpha != 1:
        prod = L["mul"](prod, alpha)
    if beta == 0:       # eager ignores `input` entirely (NaNs in it do not propagate)
        return prod
    return L["add"](prod, input if beta == 1 else L["mul"](input, beta))


@register("logaddexp2")
def logaddexp2(input, other):
    dt = L["add"](input, other).dtype
    if not is_float(dt):
        raise NotLowered("logaddexp2 int")
    inv_ln2 = 1.0 / math.log(2.0)

    def fn(a, b):
        m = ops.maximum(a, b)
        both_inf = ops.logical_and(ops.isinf(a), ops.eq(a, b))
        r = ops.add(m, ops.mul(ops.log1p(ops.exp2(ops.neg(ops.abs(ops.sub(a, b))))),
                               _const(inv_ln2, dt)))
        return ops.where(both_inf, a, r)
    return pointwise(fn, [input, other], dt)


@register("ldexp")
def ldexp(input, other):
    dt = float_dtype_for(L["add"](input, other).dtype)
    return pointwise(lambda a, b: ops.mul(a, ops.exp2(b)), [input, other], dt)


@register("isclose")
def isclose(input, other, rtol=1e-05, atol=1e-08, equal_nan=False):
    if not is_tensor(other) or input.dtype != other.dtype or not is_float(input.dtype):
        raise NotLowered("isclose dtypes")
    dt = input.dtype

    def fn(a, b):
        close = ops.eq(a, b)
        if equal_nan:
            close = ops.logical_or(close, ops.logical_and(ops.isnan(a), ops.isnan(b)))
        if rtol == 0 and atol == 0:
            return close
        allowed = ops.add(_const(atol, dt), ops.abs(ops.mul(_const(rtol, dt), b)))
        actual = ops.abs(ops.sub(a, b))
        return ops.logical_or(close, ops.logical_and(ops.isfinite(actual), ops.le(actual, allowed)))
    return pointwise(fn, [input, other], dt, torch.bool)


@register("cosine_similarity")
def cosine_similarity(x1, x2, dim=1, eps=1e-8):
    _f(x1)
    size = broadcast_sizes(x1.size, x2.size)
    a, b = expand_to(x1, size), expand_to(x2, size)
    d = norm_dim(dim, len(size))

    def norm(t):
        return clamp(unary(ops.sqrt, sum_(unary(ops.square, t), [d], True)), min=eps)
    return sum_(L["mul"](L["div"](a, norm(a)), L["div"](b, norm(b))), [d])


@register("constant_pad_nd")
def constant_pad_nd(input, pad, value=0):
    pad = list(pad)
    if len(pad) % 2 or len(pad) // 2 > input.ndim or not all(isinstance(p, int) for p in pad):
        raise NotLowered("pad spec")
    if not all(sympy.sympify(s).is_number for s in input.size):
        raise NotLowered("symbolic pad")
    spec = {}
    for k in range(len(pad) // 2):
        spec[input.ndim - 1 - k] = (pad[2 * k], pad[2 * k + 1])
    size = list(input.size)
    for d, (lo, hi) in spec.items():
        size[d] = size[d] + lo + hi
        if size[d] < 0:
            raise NotLowered("negative padded size")
    dt = input.dtype
    if has_scalar(value) and not is_float(dt) or \
            isinstance(value, float) and not is_float(dt) and value != int(value):
        raise NotLowered("fractional fill of an int tensor")

    def loader(idx):
        src, conds = list(idx), []
        for d, (lo, hi) in spec.items():
            n = int(input.size[d])
            s = idx[d] - lo
            src[d] = sympy.Max(0, sympy.Min(s, n - 1))
            e = ops.index_expr(s, torch.int64)
            conds.append(ops.logical_and(ops.ge(e, ops.constant(0, torch.int64)),
                                         ops.lt(e, ops.constant(n, torch.int64))))
        inside = conds[0]
        for c in conds[1:]:
            inside = ops.logical_and(inside, c)
        return ops.where(inside, input.loader(src), _const(value, dt))
    return TensorValue(size, dt, loader, None, input.cost + 4 * len(spec))


@register("pad")
def pad(input, pad, mode="constant", value=None):
    if mode != "constant":
        raise NotLowered(f"pad mode {mode}")
    return constant_pad_nd(input, pad, 0 if value is None else value)


@register("linspace")
def linspace(start, end, steps, *, dtype=None, **kw):
    _check_factory(kw)
    dtype = dtype or torch.get_default_dtype()
    if not dtype.is_floating_point or not all(isinstance(v, (int, float)) for v in (start, end)) \
            or not isinstance(steps, int) or steps < 1:
        raise NotLowered("linspace args")
    step = (end - start) / (steps - 1) if steps > 1 else 0.0
    # eager fills the first half from start, the rest back from end; one step is start alone
    half = steps // 2 if steps > 1 else 1

    def loader(idx):
        i = ops.index_expr(idx[0], dtype)
        lo = ops.add(_const(start, dtype), ops.mul(i, _const(step, dtype)))
        hi = ops.sub(_const(end, dtype), ops.mul(ops.sub(_const(steps - 1, dtype), i),
                                                 _const(step, dtype)))
        return ops.where(ops.lt(ops.index_expr(idx[0], torch.int64),
                                ops.constant(half, torch.int64)), lo, hi)
    return TensorValue([sympy.Integer(steps)], dtype, loader, None, 6)


@register("meshgrid")
def meshgrid(*tensors, indexing="ij"):
    if len(tensors) == 1 and isinstance(tensors[0], (list, tuple)):
        tensors = tuple(tensors[0])
    if any(t.ndim > 1 for t in tensors) or indexing not in ("ij", "xy"):
        raise NotLowered("meshgrid args")
    ts = [reshape(t, [-1]) if t.ndim == 0 else t for t in tensors]
    swap = indexing == "xy" and len(ts) >= 2
    order = list(range(len(ts)))
    if swap:
        order[0], order[1] = 1, 0
    shape = [ts[i].size[0] for i in order]
    outs = []
    for k, t in enumerate(ts):
        pos = order.index(k)
        view = [1] * len(ts)
        view[pos] = -1
        outs.append(L["expand"](reshape(t, view), shape))
    return tuple(outs)


def _adaptive_avg(input, output_size, nd):
    if isinstance(output_size, int):
        output_size = [output_size] * nd
    output_size = list(output_size)
    _f(input)
    ins = [int(s) for s in input.size[-nd:]]
    outs = [i if o is None else o for o, i in zip(output_size, ins)]
    if any(o <= 0 or i % o for i, o in zip(ins, outs)):
        raise NotLowered("adaptive pool with uneven windows")
    lead = list(input.size[:-nd])
    split = []
    for i, o in zip(ins, outs):
        split += [o, i // o]
    x = reshape(input, lead + split)
    dims = [len(lead) + 2 * k + 1 for k in range(nd)]
    return mean(x, dims)


@register("adaptive_avg_pool1d")
def adaptive_avg_pool1d(input, output_size):
    return _adaptive_avg(input, output_size, 1)


@register("adaptive_avg_pool2d")
def adaptive_avg_pool2d(input, output_size):
    return _adaptive_avg(input, output_size, 2)


# ------------------------------------------------------------------ aten-only forms
# Lowerings of aten overloads with no torch-level spelling of the same convention (backward
# ops, the three-output layer norm, copy/_to_copy). Registered under "aten.<op>": a dotted
# name no torch attribute has, so canonical.py's torch-level name table never matches them;
# codegen/aten.py's table maps the overloads to them. Formulas follow eager's CPU kernels.


@register("aten._to_copy")
def aten_to_copy(input, dtype=None, *, layout=None, device=None, pin_memory=None,
                 non_blocking=False, memory_format=None):
    _check_factory({"layout": layout, "device": device})
    if memory_format not in (None, torch.preserve_format, torch.contiguous_format):
        raise NotLowered("_to_copy memory_format")      # the layout is the wrapper's; values only
    return input if dtype is None else cast(input, dtype)


@register("aten.copy")
def aten_copy(input, src):
    """copy(self, src): src's values broadcast to self's size, in self's dtype."""
    return cast(expand_to(src, list(input.size)), input.dtype)


@register("aten.slice")
def aten_slice(input, dim=0, start=None, end=None, step=1):
    return slice_(input, dim, start, end, step)


@register("aten.threshold_backward")
def threshold_backward(grad_output, input, threshold):
    dt = result_dtype(grad_output, input)
    return pointwise(lambda g, x: ops.where(ops.le(x, _const(threshold, dt)), _const(0, dt), g),
                     [grad_output, input], dt)


@register("aten.gelu_backward")
def gelu_backward(grad_output, input, approximate="none"):
    dt = _f(input)
    c = lambda v: _const(v, dt)  # noqa: E731
    if approximate == "tanh":
        beta, kappa = math.sqrt(2) * (2 / math.sqrt(math.pi)) * 0.5, 0.044715

        def fn(g, x):
            x_sq = ops.mul(x, x)
            inner = ops.mul(c(beta), ops.add(x, ops.mul(c(kappa), ops.mul(x_sq, x))))
            t = ops.tanh(inner)
            left, right = ops.mul(c(0.5), x), ops.add(c(1.0), t)
            d_left = ops.mul(c(0.5), right)
            d_right = ops.mul(ops.mul(ops.mul(left, ops.sub(c(1.0), ops.mul(t, t))), c(beta)),
                              ops.add(c(1.0), ops.mul(c(3 * kappa), x_sq)))
            return ops.mul(g, ops.add(d_left, d_right))
    elif approximate == "none":
        beta = (2 / math.sqrt(math.pi)) * math.sqrt(0.5) * 0.5

        def fn(g, x):
            cdf = ops.mul(c(0.5), ops.add(c(1.0), ops.erf(ops.mul(x, c(math.sqrt(0.5))))))
            pdf = ops.mul(ops.exp(ops.mul(c(-0.5), ops.mul(x, x))), c(beta))
            return ops.mul(g, ops.add(cdf, ops.mul(x, pdf)))
    else:
        raise NotLowered(f"gelu approximate={approximate!r}")
    return pointwise(fn, [grad_output, input], result_dtype(grad_output, input))


@register("aten.tanh_backward")
def tanh_backward(grad_output, output):
    dt = _f(output)
    return pointwise(lambda g, y: ops.mul(g, ops.sub(_const(1.0, dt), ops.mul(y, y))),
                     [grad_output, output], result_dtype(grad_output, output))


@register("aten.sigmoid_backward")
def sigmoid_backward(grad_output, output):
    dt = _f(output)
    return pointwise(lambda g, y: ops.mul(ops.mul(g, ops.sub(_const(1.0, dt), y)), y),
                     [grad_output, output], result_dtype(grad_output, output))


@register("aten.silu_backward")
def silu_backward(grad_output, input):
    dt = _f(input)

    def fn(g, x):
        s = ops.sigmoid(x)
        return ops.mul(ops.mul(g, s),
                       ops.add(_const(1.0, dt), ops.mul(x, ops.sub(_const(1.0, dt), s))))
    return pointwise(fn, [grad_output, input], result_dtype(grad_output, input))


@register("aten._softmax_backward_data")
def softmax_backward_data(grad_output, output, dim, input_dtype):
    _f(output)
    d = norm_dim(dim, output.ndim)
    gy = L["mul"](grad_output, output)
    out = L["mul"](output, L["sub"](grad_output, sum_(gy, [d], True)))
    return cast(out, input_dtype)


@register("aten._log_softmax_backward_data")
def log_softmax_backward_data(grad_output, output, dim, input_dtype):
    _f(output)
    d = norm_dim(dim, output.ndim)
    out = L["sub"](grad_output, L["mul"](L["exp"](output), sum_(grad_output, [d], True)))
    return cast(out, input_dtype)


@register("aten.native_dropout_backward")
def native_dropout_backward(grad_output, mask, scale):
    dt = _f(grad_output)
    return L["mul"](grad_output, L["mul"](cast(mask, dt), scale))


def _norm_dims(input, normalized_shape):
    k = len(tuple(normalized_shape))
    if k == 0 or k > input.ndim:
        raise NotLowered("normalized_shape")
    return list(range(input.ndim - k, input.ndim))


def _stats_dtype(dt):
    """Layer norm's statistics are kept in float32 for reduced-precision inputs (eager's
    accumulate type, opmath)."""
    return torch.float32 if dt in (torch.float16, torch.bfloat16) else dt


def _saved_stats_dtype(dt):
    """The dtype norms return their statistics in: float32 for a half input on CUDA, but the
    input's own dtype from eager's CPU kernels (pydynamo.meta.device_results says the same)."""
    return dt if current.graph.devices == ("cpu",) else _stats_dtype(dt)


@register("aten.native_layer_norm")
def native_layer_norm(input, normalized_shape, weight, bias, eps):
    """(out, mean, rstd); mean and rstd keep the normalized dims as size 1."""
    dt = _f(input)
    dims = _norm_dims(input, normalized_shape)
    x = cast(input, _stats_dtype(dt))
    var, mu = var_mean_impl(x, dims, correction=0, keepdim=True)
    rstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, x.dtype))), var)
    y = cast(_affine(L["mul"](L["sub"](x, mu), rstd), weight, bias), dt)
    return y, cast(mu, _saved_stats_dtype(dt)), cast(rstd, _saved_stats_dtype(dt))


@register("aten.native_layer_norm_backward")
def native_layer_norm_backward(grad_out, input, normalized_shape, mean, rstd, weight, bias,
                               output_mask):
    """(grad_input, grad_weight, grad_bias), None where output_mask is False:
    x̂ = (x - mean) rstd, ĝ = grad_out * weight,
    grad_input = rstd / N (N ĝ - Σ ĝ - x̂ Σ ĝ x̂) over the normalized dims,
    grad_weight = Σ grad_out x̂, grad_bias = Σ grad_out over the outer dims."""
    dt = _f(input)
    dims = _norm_dims(input, normalized_shape)
    outer = list(range(input.ndim - len(dims)))
    sdt = _stats_dtype(dt)
    g, x = cast(grad_out, sdt), cast(input, sdt)
    x_hat = L["mul"](L["sub"](x, mean), rstd)
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        n = 1
        for d in dims:
            n = n * input.size[d]
        gw = L["mul"](g, cast(weight, sdt)) if weight is not None else g
        s1 = sum_(gw, dims, True)
        s2 = sum_(L["mul"](gw, x_hat), dims, True)
        inner = L["sub"](L["sub"](L["mul"](gw, n), s1), L["mul"](x_hat, s2))
        grad_input = cast(L["mul"](L["div"](rstd, n), inner), dt)
    def outer_sum(v):      # sum_ reads an empty dim list as all dims
        return sum_(v, outer, False) if outer else v
    if output_mask[1] and weight is not None:
        grad_weight = cast(outer_sum(L["mul"](g, x_hat)), weight.dtype)
    if output_mask[2] and bias is not None:
        grad_bias = cast(outer_sum(g), bias.dtype)
    return grad_input, grad_weight, grad_bias


ATEN_REDUCTIONS = {0: "none", 1: "mean", 2: "sum"}     # aten's int reduction codes


@register("aten.nll_loss_forward")
def nll_loss_forward(input, target, weight, reduction, ignore_index):
    """(output, total_weight): total_weight is the summed row weight (0 for reduction none)."""
    if reduction not in ATEN_REDUCTIONS:
        raise NotLowered(f"reduction {reduction}")
    out = nll_loss(input, target, weight, ignore_index=ignore_index,
                   reduction=ATEN_REDUCTIONS[reduction])
    if reduction == 0:
        return out, L["full"]([], 0, dtype=input.dtype)
    if input.ndim == 1:
        input, target = L["unsqueeze"](input, 0), L["unsqueeze"](target, 0)
    return out, sum_(_nll_weights(input, target, weight, ignore_index)[1])


@register("aten.nll_loss_backward")
def nll_loss_backward(grad_output, input, target, weight, reduction, ignore_index,
                      total_weight):
    """-w[i] * grad (divided by total_weight for mean) at each row's target class, else 0."""
    _f(input)
    if reduction not in ATEN_REDUCTIONS or target.dtype != torch.int64 or \
            input.ndim not in (1, 2) or input.ndim != target.ndim + 1:
        raise NotLowered("nll_loss_backward args")
    flat = input.ndim == 1
    x, t = (L["unsqueeze"](input, 0), L["unsqueeze"](target, 0)) if flat else (input, target)
    n_classes = x.size[1]
    if not n_classes.is_number:
        raise NotLowered("symbolic class count")
    safe_t, w = _nll_weights(x, t, weight, ignore_index)
    g = grad_output
    if reduction == 1:
        g = L["div"](g, total_weight)
    if reduction == 0 and flat:
        g = L["unsqueeze"](g, 0)
    scale = L["unsqueeze"](L["neg"](L["mul"](w, g)), 1)
    # ignored rows get 0 even where total_weight is 0 (eager skips them)
    hit = L["logical_and"](L["eq"](L["unsqueeze"](safe_t, 1), L["arange"](int(n_classes))),
                           L["unsqueeze"](L["ne"](t, ignore_index), 1))
    grad = cast(where(hit, scale, 0.0), input.dtype)
    return L["squeeze"](grad, 0) if flat else grad


def _bn_layout(input):
    """(the dims batch norm reduces, the shape that broadcasts a per-channel vector)."""
    if input.ndim < 2:
        raise NotLowered("batch_norm rank")
    return [0] + list(range(2, input.ndim)), [input.size[1]] + [1] * (input.ndim - 2)


def _batch_norm_train(input, weight, bias, running_mean, running_var, momentum, eps):
    """(out, save_mean, save_invstd, new running_mean, new running_var): batch statistics
    (biased variance normalizes, the unbiased one updates the running variance)."""
    dt = _f(input)
    dims, shape = _bn_layout(input)
    x = cast(input, _stats_dtype(dt))
    var, mu = var_mean_impl(x, dims, correction=0, keepdim=False)
    invstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, x.dtype))), var)
    y = L["mul"](L["sub"](x, reshape(mu, shape)), reshape(invstd, shape))
    y = cast(_affine(y, reshape(weight, shape) if weight is not None else None,
                     reshape(bias, shape) if bias is not None else None), dt)
    new_rm = new_rv = None
    if running_mean is not None:
        new_rm = cast(L["add"](L["mul"](running_mean, 1 - momentum), L["mul"](mu, momentum)),
                      running_mean.dtype)
    if running_var is not None:
        n = 1
        for d in dims:
            n = n * input.size[d]
        unbiased = L["mul"](var, n / (n - 1)) if n != 1 else var
        new_rv = cast(L["add"](L["mul"](running_var, 1 - momentum),
                               L["mul"](unbiased, momentum)), running_var.dtype)
    return y, cast(mu, _saved_stats_dtype(dt)), cast(invstd, _saved_stats_dtype(dt)), new_rm, new_rv


def _batch_norm_eval(input, weight, bias, running_mean, running_var, eps):
    """(out, empty, empty): running statistics; eager's CPU kernel saves none (size 0). The
    meta kernel says (C,); every metadata path follows the CPU kernel on CPU
    (pydynamo.meta.device_results), and a graph whose metadata says (C,) checks a mismatch and
    runs the op extern (the node's metadata decides)."""
    out = LOWERINGS["batch_norm"](input, running_mean, running_var, weight, bias, False, 0.0,
                                  eps)
    empty = L["full"]([0], 0, dtype=_saved_stats_dtype(input.dtype))
    return out, empty, empty


@register("aten.native_batch_norm")
def native_batch_norm(input, weight, bias, running_mean, running_var, training, momentum,
                      eps):
    if training:
        raise NotLowered("native_batch_norm in training writes its running statistics")
    return _batch_norm_eval(input, weight, bias, running_mean, running_var, eps)


@register("aten._native_batch_norm_legit_no_training")
def native_batch_norm_no_training(input, weight, bias, running_mean, running_var, momentum,
                                  eps):
    return _batch_norm_eval(input, weight, bias, running_mean, running_var, eps)


@register("aten._native_batch_norm_legit_functional")
def native_batch_norm_functional(input, weight, bias, running_mean, running_var, training,
                                 momentum, eps):
    """The functional training batch norm: the updated running statistics are outputs (in
    evaluation, the running statistics themselves)."""
    if not training:
        out, empty, _ = _batch_norm_eval(input, weight, bias, running_mean, running_var, eps)
        return out, empty, empty, running_mean, running_var
    return _batch_norm_train(input, weight, bias, running_mean, running_var, momentum, eps)


@register("aten.native_batch_norm_backward")
def native_batch_norm_backward(grad_out, input, weight, running_mean, running_var, save_mean,
                               save_invstd, train, eps, output_mask):
    """(grad_input, grad_weight, grad_bias), eager's formula: with x̂μ = x - mean,
    train: grad_input = (g - Σg/n - x̂μ invstd² Σ(g x̂μ)/n) invstd w; eval: g invstd w;
    grad_weight = Σ(g x̂μ) invstd, grad_bias = Σg (sums over all dims but the channel)."""
    dt = _f(input)
    dims, shape = _bn_layout(input)
    sdt = _stats_dtype(dt)
    if train:
        mean, invstd = save_mean, save_invstd
    else:
        if running_mean is None or running_var is None:
            raise NotLowered("batch_norm backward without running statistics")
        mean = running_mean
        invstd = unary(lambda v: ops.rsqrt(ops.add(v, _const(eps, running_var.dtype))),
                       running_var)
    g, x = cast(grad_out, sdt), cast(input, sdt)
    xmu = L["sub"](x, reshape(cast(mean, sdt), shape))
    invstd = cast(invstd, sdt)
    sum_g = sum_(g, dims)
    dot = sum_(L["mul"](g, xmu), dims)
    scale = L["mul"](invstd, cast(weight, sdt)) if weight is not None else invstd
    grad_input = grad_weight = grad_bias = None
    if output_mask[0]:
        if train:
            n = 1
            for d in dims:
                n = n * input.size[d]
            proj = L["div"](L["mul"](dot, L["mul"](invstd, invstd)), n)
            centered = L["sub"](L["sub"](g, reshape(L["div"](sum_g, n), shape)),
                                L["mul"](xmu, reshape(proj, shape)))
            grad_input = L["mul"](centered, reshape(scale, shape))
        else:
            grad_input = L["mul"](g, reshape(scale, shape))
        grad_input = cast(grad_input, dt)
    if output_mask[1] and weight is not None:
        grad_weight = cast(L["mul"](dot, invstd), weight.dtype)
    if output_mask[2] and weight is not None:
        grad_bias = cast(sum_g, weight.dtype)
    return grad_input, grad_weight, grad_bias


@register("aten.mse_loss_backward")
def mse_loss_backward(grad_output, input, target, reduction):
    """2 (x - t) grad, divided by the element count for mean (eager's norm)."""
    _f(input)
    if reduction not in ATEN_REDUCTIONS:
        raise NotLowered(f"reduction {reduction}")
    n = 1
    for s in input.size:
        n = n * s
    norm = sympy.sympify(2.0 / n if reduction == 1 else 2.0)
    norm = float(norm) if norm.is_number else norm
    return L["mul"](L["mul"](L["sub"](input, target), norm), grad_output)


def _grad_pointwise(fn, grad_output, input):
    """fn(g, x, constant) elementwise over (grad_output, input) in their promoted float dtype."""
    _f(input)
    dt = result_dtype(grad_output, input)
    return pointwise(lambda g, x: fn(g, x, lambda v: _const(v, dt)), [grad_output, input], dt)


@register("aten.hardtanh_backward")
def hardtanh_backward(grad_output, input, min_val, max_val):
    return _grad_pointwise(lambda g, x, c: ops.where(
        ops.logical_or(ops.le(x, c(min_val)), ops.ge(x, c(max_val))), c(0), g),
        grad_output, input)


_ONE_SIXTH_F32 = float(torch.tensor(1 / 6, dtype=torch.float32))   # eager's 1.0f / 6.0f


@register("aten.hardsigmoid_backward")
def hardsigmoid_backward(grad_output, input):
    """g / 6 inside (-3, 3), as eager computes it: g times the float32 constant 1/6 (in
    float64 too)."""
    return _grad_pointwise(lambda g, x, c: ops.where(
        ops.logical_and(ops.gt(x, c(-3.0)), ops.lt(x, c(3.0))), ops.mul(g, c(_ONE_SIXTH_F32)),
        c(0)), grad_output, input)


@register("aten.hardswish_backward")
def hardswish_backward(grad_output, input):
    return _grad_pointwise(lambda g, x, c: ops.where(
        ops.lt(x, c(-3.0)), c(0), ops.where(
            ops.le(x, c(3.0)), ops.mul(g, ops.add(ops.truediv(x, c(3.0)), c(0.5))), g)),
        grad_output, input)


@register("aten.leaky_relu_backward")
def leaky_relu_backward(grad_output, input, negative_slope, self_is_result):
    return _grad_pointwise(lambda g, x, c: ops.where(
        ops.gt(x, c(0)), g, ops.mul(g, c(negative_slope))), grad_output, input)


@register("aten.elu_backward")
def elu_backward(grad_output, alpha, scale, input_scale, is_result, self_or_result):
    """eager's: on the result y, g * input_scale * (y + alpha * scale) where y <= 0; on the
    input x, g * input_scale * alpha * scale * exp(x * input_scale); else g * scale."""
    def fn(g, x, c):
        if is_result:
            neg = ops.mul(ops.mul(g, c(input_scale)), ops.add(x, c(alpha * scale)))
        else:
            neg = ops.mul(ops.mul(ops.mul(g, c(input_scale)), c(alpha * scale)),
                          ops.exp(ops.mul(x, c(input_scale))))
        return ops.where(ops.le(x, c(0)), neg, ops.mul(g, c(scale)))
    return _grad_pointwise(fn, grad_output, self_or_result)


@register("aten.softplus_backward")
def softplus_backward(grad_output, input, beta, threshold):
    def fn(g, x, c):
        z = ops.exp(ops.mul(x, c(beta)))
        return ops.where(ops.gt(ops.mul(x, c(beta)), c(threshold)), g,
                         ops.truediv(ops.mul(g, z), ops.add(z, c(1.0))))
    return _grad_pointwise(fn, grad_output, input)

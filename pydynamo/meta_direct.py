"""Eager's result metadata of pointwise ops (and three composites), computed here instead of by
torch's meta kernels.

torch's meta kernels of pointwise ops are its Python references, wrapped so that torch's own
tracing frontend skips them: the first call of one imports that whole frontend (1.5-2.6 s), the largest
step of a cold first compile that is not the user's code (issue 20). `run(target, args, kwargs)`
answers for the ops of codegen's pointwise rows (codegen/primitives.py: the op's dtype rule) and a
few activations, on meta tensors and Python numbers, as eager's TensorIterator does:
  * shape: the operands broadcast (pydynamo/symbols.py's `broadcast`, on ints);
  * dtype: `torch.result_type` of the operands (C++), then the row's rule (FLOAT: integral ->
    the default dtype; COMPARE/LOGICAL/PREDICATE: bool);
  * strides: TensorIterator's layout rule (`_layout`): its fast setup (all operands of one shape,
    all contiguous / all channels-last / all dense with equal strides), else the operands' stride
    order (its `reorder_dimensions`), made dense in that order;
  * requires_grad: grad mode on, a differentiable result dtype and a grad-requiring operand;
    such a result is a non-leaf (a clone, C++ on meta), like eager's;
  * an in-place op (`add_`, `operator.iadd`) returns `self` unchanged, only where that is all eager
    does (no grad involved, the result castable to and shaped as `self`, `self` not overlapping).
The result is built with empty_strided (a C++ meta kernel), so no Python reference runs.
Three composites whose meta kernels are Python decompositions over those references are answered
too (`_COMPOSITES`): F.linear (addmm's), F.layer_norm (native_layer_norm's), masked_fill (where's):
their results are new contiguous tensors of a shape and dtype checked here.
`run_aten(func, args, kwargs)` answers the same way for aten overloads (the training recorder's
and autocast's meta runs through `call_aten`, which falls back to torch's kernel; codegen's
extern meta runs): pointwise rows, addmm (and _addmm_activation), and activations' backward ops
on operands of one layout (tests/cache/test_cold_imports.py checks them against torch's meta
kernels).

Invariants:
  * Exact or nothing: an op, argument form or dtype this module is not sure of returns None and
    the caller runs torch's meta kernel as before. Where it answers, eager agrees:
    tests/shapes/test_meta_direct.py checks every accepted (op, dtypes, layout) against eager
    on real tensors (shape, strides, dtype, requires_grad), and that where eager raises this
    module declines.
  * Python scalar operands: the layout is computed with them as 0-dim operands (a wrapped number)
    and without; where the two differ (an op that takes the number as a Scalar argument lays out
    like a unary op) the module declines.
  * Never under autocast (its dtypes are torch's kernels' to answer): declines.
  * A leaf: imports torch, codegen's primitive rows and pydynamo.symbols only (pydynamo.meta,
    the executor's meta run and codegen's extern meta run, codegen/graph.py, import it).
"""
from __future__ import annotations

import operator
from typing import Optional

import torch

from codegen.primitives import BOOL_RULES, FLOAT, INTEGRAL, INTERNAL, PREDICATE, ROUND, ROWS, SAME
from pydynamo.symbols import broadcast

_SCALARS = (bool, int, float)
_DTYPES = frozenset({torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
                     torch.int8, torch.int16, torch.int32, torch.int64, torch.bool})
FLOAT_ONLY = "float_only"   # activations: floating operands only, the same dtype back

# -- which call is which op ----------------------------------------------------------------------

# operator functions and dunders -> (primitive name, reversed operands)
_OPERATORS = {
    "add": "add", "sub": "sub", "mul": "mul", "truediv": "truediv", "floordiv": "floordiv",
    "mod": "remainder", "pow": "pow", "eq": "eq", "ne": "ne", "lt": "lt", "le": "le", "gt": "gt",
    "ge": "ge", "and": "bitwise_and", "or": "bitwise_or", "xor": "bitwise_xor",
}
_UNARY_OPERATORS = {"neg": "neg", "invert": "bitwise_not", "abs": "abs"}
# activations beside the rows (their meta kernels are references too)
_EXTRAS = {"gelu": (FLOAT_ONLY, 1, torch.nn.functional.gelu)}


# ops whose torch function and method take a Python number as the second operand (the others
# want a tensor there); a number first only reaches an op through Python's operators
_NUMBER_SECOND = frozenset({"add", "sub", "mul", "truediv", "floordiv", "remainder", "fmod", "pow",
                            "eq", "ne", "lt", "le", "gt", "ge", "bitwise_and", "bitwise_or",
                            "bitwise_xor", "xlogy", "copysign"})


class _Op:
    __slots__ = ("name", "rule", "arity", "inplace", "reverse", "number_first")

    def __init__(self, name, rule, arity, inplace=False, reverse=False, number_first=False):
        self.name, self.rule, self.arity, self.inplace, self.reverse = name, rule, arity, inplace, reverse
        self.number_first = number_first   # an `operator` function: 2 + x is x.__radd__(2)


_TABLE: dict = {}


def _table() -> dict:
    if _TABLE:
        return _TABLE
    rows = {p.name: p for p in ROWS if p.lowering != INTERNAL}
    table = {}

    def add(key, op):
        try:
            table.setdefault(key, op)
        except TypeError:   # an unhashable attribute: not a call target we can know
            pass

    for p in rows.values():
        for name in p.names:
            op = _Op(p.name, p.dtype, p.arity)
            if getattr(torch, name, None) is not None:
                add(getattr(torch, name), op)
            if hasattr(torch.Tensor, name):
                add(name, op)
                add(getattr(torch.Tensor, name), op)
            if hasattr(torch.Tensor, name + "_"):
                inplace = _Op(p.name, p.dtype, p.arity, inplace=True)
                add(name + "_", inplace)
                add(getattr(torch.Tensor, name + "_"), inplace)
    for spelled, prim in _OPERATORS.items():
        p = rows[prim]
        fn = getattr(operator, spelled + "_", None) or getattr(operator, spelled)
        add(fn, _Op(p.name, p.dtype, 2, number_first=prim != "pow"))
        add(f"__{spelled}__", _Op(p.name, p.dtype, 2))
        if hasattr(torch.Tensor, f"__r{spelled}__"):
            add(f"__r{spelled}__", _Op(p.name, p.dtype, 2, reverse=True))
        if hasattr(operator, f"i{spelled}"):
            add(getattr(operator, f"i{spelled}"), _Op(p.name, p.dtype, 2, inplace=True))
            add(f"__i{spelled}__", _Op(p.name, p.dtype, 2, inplace=True))
    for spelled, prim in _UNARY_OPERATORS.items():
        p = rows[prim]
        add(getattr(operator, spelled), _Op(p.name, p.dtype, 1))
        add(f"__{spelled}__", _Op(p.name, p.dtype, 1))
    for name, (rule, arity, fn) in _EXTRAS.items():
        add(fn, _Op(name, rule, arity))
    _TABLE.update(table)
    return _TABLE


# -- the answer ----------------------------------------------------------------------------------

def run(target, args, kwargs) -> Optional[torch.Tensor]:
    """What `target(*args, **kwargs)` returns on meta tensors (a method's name: args[0] is self),
    or None where this module does not answer (the module docstring). Never raises: an error
    (torch.result_type of a number no dtype holds) is torch's kernel's to raise."""
    if isinstance(target, torch._ops.OpOverload):
        return run_aten(target, args, kwargs)
    if target is torch.addmm:       # (codegen's externs: a matmul with its bias, its activation)
        return run_aten(torch.ops.aten.addmm.default, args, kwargs)
    if target is torch._addmm_activation:
        return run_aten(torch.ops.aten._addmm_activation.default, args, kwargs)
    try:
        return _run(target, args, kwargs)
    except Exception:
        return None


def _run(target, args, kwargs) -> Optional[torch.Tensor]:
    if torch._C._is_any_autocast_enabled():
        return None     # autocast's dtypes: torch's kernels under the caller's autocast state
    if target is torch.nn.functional.relu:      # F.relu(x) (not in place) is torch.relu(x)
        if len(args) != 1 or kwargs.get("inplace", False) is not False or set(kwargs) - {"inplace"}:
            return None
        target, kwargs = torch.relu, {}
    try:
        op = _table().get(target)
        composite = _COMPOSITES.get(target) if op is None else None
    except TypeError:
        return None
    if composite is not None:
        if any(isinstance(a, torch.Tensor) and not _plain_tensor(a) for a in (*args, *kwargs.values())):
            return None
        return composite(*args, **kwargs)
    if op is None or not _plain_kwargs(op, kwargs) or len(args) != op.arity:
        return None
    if op.name == "where":
        if isinstance(target, str):   # x.where(cond, y) is torch.where(cond, x, y)
            args = (args[1], args[0], args[2])
        cond = args[0]
        if not isinstance(cond, torch.Tensor) or cond.dtype != torch.bool:
            return None
    if op.reverse:
        if not isinstance(args[1], _SCALARS):
            return None
        args = (args[1], args[0])
    if op.arity == 2 and op.name != "where":
        if not isinstance(args[0], torch.Tensor) and not op.number_first:
            return None
        if not isinstance(args[1], torch.Tensor) and op.name not in _NUMBER_SECOND:
            return None
    tensors = [a for a in args if isinstance(a, torch.Tensor)]
    if not tensors or any(not _plain_tensor(t) for t in tensors):
        return None
    if any(not isinstance(a, torch.Tensor) and type(a) not in _SCALARS for a in args):
        return None
    values = args[1:] if op.name == "where" else args
    dtype = _result_dtype(op, values)
    if dtype is None:
        return None
    shape = broadcast([tuple(t.shape) for t in tensors], lambda d: d == 1, operator.eq)
    if shape is None:
        return None
    shape = tuple(shape)
    grad = torch.is_grad_enabled() and any(t.requires_grad for t in tensors)
    if op.inplace:
        return _inplace(args[0], tensors, shape, dtype, grad)
    layout = _layout(shape, args)
    if layout is None:
        return None
    return _result(shape, layout, dtype, grad)


def _result(shape, strides, dtype, grad) -> torch.Tensor:
    out = torch.empty_strided(shape, strides, dtype=dtype, device="meta")
    if grad and (dtype.is_floating_point or dtype.is_complex):
        out = out.requires_grad_(True).clone()   # a non-leaf, as eager's result
    return out


# -- aten overloads (the training recorder's meta runs) --------------------------------------------

def run_aten(func, args, kwargs) -> Optional[torch.Tensor]:
    """What aten overload `func` returns on meta tensors, for the few a training recording runs
    whose meta kernels are torch's Python references (a pointwise row's `.default` / `.Tensor` /
    `.Scalar` overload, addmm and _addmm_activation, activations' backward ops on operands of
    one layout), or None (the caller runs torch's kernel).
    Operands: dimensioned meta tensors, and a Python number only for a `.Scalar` overload's
    second operand (a 0-dim tensor may be a wrapped number, whose dtype rule differs: declined)."""
    try:
        return _run_aten(func, args, kwargs)
    except Exception:
        return None


def call_aten(func, args, kwargs):
    """`func(*args, **kwargs)` on meta tensors: `run_aten`'s answer where it has one, else
    torch's own meta kernel (the recorder's and autocast's meta runs)."""
    out = run_aten(func, args, kwargs)
    return func(*args, **kwargs) if out is None else out


# activations' backward ops (TensorIterator binary ops over the gradient and an input or output,
# the dtype of both) -> their number of arguments
_BACKWARDS = {"threshold_backward": 3, "sigmoid_backward": 2, "tanh_backward": 2,
              "silu_backward": 2}


def _run_aten(func, args, kwargs):
    name, overload = func.__name__.split(".")[0], func._overloadname
    if name == "_addmm_activation" and set(kwargs) <= {"use_gelu"} and \
            type(kwargs.get("use_gelu", False)) is bool:    # addmm, then relu or gelu: addmm's
        name, kwargs = "addmm", {}
    if kwargs or torch._C._is_any_autocast_enabled():
        return None
    if any(isinstance(a, torch.Tensor) and (a.dim() == 0 or not _plain_tensor(a)) for a in args):
        return None
    if name == "addmm" and overload == "default" and len(args) == 3:
        bias, a, b = args
        if not all(isinstance(t, torch.Tensor) for t in args) or a.dim() != 2 or b.dim() != 2 \
                or a.shape[1] != b.shape[0] or not a.dtype.is_floating_point \
                or any(t.dtype != a.dtype for t in args):
            return None
        shape = (a.shape[0], b.shape[1])
        if broadcast([tuple(bias.shape), shape], lambda d: d == 1, operator.eq) != list(shape):
            return None     # (bias expands to the product's shape, as eager's addmm wants)
        return _result(shape, _contiguous(shape), a.dtype, _grad(*args))
    if name in _BACKWARDS and overload == "default" and len(args) == _BACKWARDS[name]:
        grad_out, x = args[:2]      # (threshold_backward's third: the threshold, a number)
        if not isinstance(grad_out, torch.Tensor) or not isinstance(x, torch.Tensor) \
                or not grad_out.dtype.is_floating_point or x.dtype != grad_out.dtype \
                or x.shape != grad_out.shape or x.stride() != grad_out.stride() \
                or any(type(a) not in (int, float) for a in args[2:]):
            return None     # (operands of two layouts: torch's reference lays out otherwise)
        return _run(torch.add, (grad_out, x), {})   # one dense layout: the operands' own
    target = getattr(torch, name, None)
    op = _table().get(target) if target is not None else None
    if op is None or op.inplace or op.name == "where" or len(args) != op.arity:
        return None
    if overload == "Scalar":
        if op.arity != 2 or not isinstance(args[0], torch.Tensor) or type(args[1]) not in _SCALARS:
            return None
    elif overload not in ("default", "Tensor") or \
            not all(isinstance(a, torch.Tensor) for a in args):
        return None
    return _run(target, args, {})


# -- composites ----------------------------------------------------------------------------------

def _grad(*tensors) -> bool:
    return torch.is_grad_enabled() and any(t is not None and t.requires_grad for t in tensors)


def _linear(x, weight, bias=None) -> Optional[torch.Tensor]:
    if not isinstance(x, torch.Tensor) or not isinstance(weight, torch.Tensor) or weight.dim() != 2 \
            or x.dim() < 1 or x.shape[-1] != weight.shape[1]:
        return None
    out_features = weight.shape[0]
    if bias is not None and (not isinstance(bias, torch.Tensor) or tuple(bias.shape) != (out_features,)):
        return None
    if not x.dtype.is_floating_point or any(t.dtype != x.dtype for t in (weight, bias) if t is not None):
        return None
    shape = (*x.shape[:-1], out_features)
    return _result(shape, _contiguous(shape), x.dtype, _grad(x, weight, bias))


def _layer_norm(x, normalized_shape, weight=None, bias=None, eps=1e-5) -> Optional[torch.Tensor]:
    if not isinstance(x, torch.Tensor) or not isinstance(normalized_shape, (tuple, list, torch.Size)) \
            or not isinstance(eps, float) or not normalized_shape:
        return None
    norm = tuple(normalized_shape)
    if any(type(d) is not int for d in norm) or tuple(x.shape[x.dim() - len(norm):]) != norm \
            or x.dim() < len(norm) or not x.dtype.is_floating_point:
        return None
    for t in (weight, bias):
        if t is not None and (not isinstance(t, torch.Tensor) or tuple(t.shape) != norm or t.dtype != x.dtype):
            return None
    shape = tuple(x.shape)
    return _result(shape, _contiguous(shape), x.dtype, _grad(x, weight, bias))


def _masked_fill(x, mask, value) -> Optional[torch.Tensor]:
    if not isinstance(x, torch.Tensor) or not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool \
            or type(value) not in _SCALARS or x.dtype not in _DTYPES:
        return None
    if type(value) is float and not x.dtype.is_floating_point:
        return None
    shape = broadcast([tuple(x.shape), tuple(mask.shape)], lambda d: d == 1, operator.eq)
    if shape is None:
        return None
    shape = tuple(shape)
    return _result(shape, _contiguous(shape), x.dtype, _grad(x))


_COMPOSITES = {torch.nn.functional.linear: _linear, torch.nn.functional.layer_norm: _layer_norm,
               torch.masked_fill: _masked_fill, "masked_fill": _masked_fill,
               torch.Tensor.masked_fill: _masked_fill}


def _plain_kwargs(op, kwargs) -> bool:
    if not kwargs:
        return True
    # F.gelu(x, approximate=...): no effect on metadata
    return op.name == "gelu" and set(kwargs) == {"approximate"} and kwargs["approximate"] in ("none", "tanh")


def _plain_tensor(t: torch.Tensor) -> bool:
    return type(t) in (torch.Tensor, torch.nn.Parameter) and t.device.type == "meta" \
        and t.layout == torch.strided and t.dtype in _DTYPES


# (op, operand dtype) forms eager rejects or answers otherwise than the row's rule says;
# tests/shapes/test_meta_direct.py finds them
_BOOL_REJECTED = frozenset({"sub", "neg", "abs", "relu", "square", "sign", "sgn", "floor", "ceil",
                            "round", "trunc", "frac", "pow", "floordiv", "remainder", "fmod",
                            "truediv", "atan2", "copysign", "hypot", "nextafter", "xlogy",
                            "reciprocal", "rsqrt", "lgamma", "erf", "erfc", "maximum", "minimum",
                            "fmax", "fmin", "isposinf", "isneginf", "signbit"})
_INT_REJECTED = frozenset({"frac", "pow", "nextafter"})
_FLOAT_OPERANDS = frozenset({"hypot"})   # no integer kernel


def _result_dtype(op, values) -> Optional[torch.dtype]:
    dtypes = [v.dtype for v in values if isinstance(v, torch.Tensor)]
    if op.rule == FLOAT_ONLY:
        return dtypes[0] if dtypes[0].is_floating_point else None
    if any(d == torch.bool for d in dtypes) or any(type(v) is bool for v in values):
        if op.name in _BOOL_REJECTED:
            return None
    if len(values) == 1:
        dtype = values[0].dtype
    elif len(values) == 2:
        dtype = torch.result_type(values[0], values[1])
    else:
        return None
    if not dtype.is_floating_point and op.name in _INT_REJECTED:
        return None
    if op.rule == FLOAT:
        if op.name in _FLOAT_OPERANDS and not all(d.is_floating_point for d in dtypes):
            return None
        return dtype if dtype.is_floating_point else torch.get_default_dtype()
    if op.rule in BOOL_RULES:
        if op.rule == PREDICATE and not dtype.is_floating_point:
            return None   # eager: zeros_like / ones_like of the input, laid out as empty_like
        return torch.bool
    if op.rule == INTEGRAL:
        return None if dtype.is_floating_point else dtype
    if op.rule in (SAME, ROUND):
        return dtype
    return None


def _inplace(self_t, tensors, shape, dtype, grad) -> Optional[torch.Tensor]:
    """`self` itself where an in-place op leaves its metadata as it was."""
    if not isinstance(self_t, torch.Tensor) or grad or tuple(self_t.shape) != shape:
        return None
    if not torch.can_cast(dtype, self_t.dtype) or self_t.is_inference() != torch.is_inference_mode_enabled():
        return None
    if any(st == 0 and sz > 1 for sz, st in zip(self_t.shape, self_t.stride())):
        return None   # written through overlapping memory: eager raises
    if any(t is not self_t and (t._base is not None or self_t._base is not None) for t in tensors):
        return None   # views may overlap `self` partly: eager checks memory, meta cannot
    return self_t


# -- TensorIterator's layout -----------------------------------------------------------------------

def _layout(shape: tuple, args) -> Optional[tuple]:
    """The strides of the result of a pointwise op of `args` (tensors and numbers, in operand
    order) whose broadcast shape is `shape`; None where numbers as operands change it."""
    with_numbers = [(tuple(a.shape), tuple(a.stride())) if isinstance(a, torch.Tensor) else ((), ())
                    for a in args]
    tensors_only = [(tuple(a.shape), tuple(a.stride())) for a in args if isinstance(a, torch.Tensor)]
    first = _iterator_strides(shape, with_numbers, [a for a in args if isinstance(a, torch.Tensor)])
    if len(tensors_only) != len(with_numbers):
        other = _iterator_strides(shape, tensors_only, [a for a in args if isinstance(a, torch.Tensor)])
        if other != first:
            return None
    return first


def _iterator_strides(shape, operands, tensors) -> tuple:
    # fast setup: every operand of one shape, none 0-dim beside dimensioned ones
    shapes = [s for s, _ in operands]
    if all(s == shapes[0] for s in shapes):
        if len(tensors) == len(operands):   # (the 0-dim numbers are contiguous in every sense)
            if all(t.is_contiguous() for t in tensors):
                return _contiguous(shape)
            if all(t.is_contiguous(memory_format=torch.channels_last) for t in tensors):
                return tuple(torch.empty(shape, device="meta",
                                         memory_format=torch.channels_last).stride())
            if all(_non_overlapping_and_dense(s, st) for s, st in operands) \
                    and all(st == operands[0][1] for _, st in operands):
                return operands[0][1]
        elif not shapes[0]:
            return ()
    ndim = len(shape)
    strides = []
    for sizes, st in operands:
        off = ndim - len(sizes)
        row = [0] * ndim
        for i, (sz, s) in enumerate(zip(sizes, st)):
            row[off + i] = 0 if (sz == 1 and shape[off + i] != 1) else s
        strides.append(row)

    def should_swap(d0, d1) -> int:
        for row in strides:
            s0, s1 = row[d0], row[d1]
            if s0 == 0 or s1 == 0:
                continue
            if s0 < s1:
                return -1
            if s0 > s1:
                return 1
            if shape[d0] > shape[d1]:
                return 1
        return 0

    perm = list(range(ndim - 1, -1, -1))
    if ndim > 1:
        for i in range(1, ndim):
            d1 = i
            for d0 in range(i - 1, -1, -1):
                c = should_swap(perm[d0], perm[d1])
                if c > 0:
                    perm[d0], perm[d1] = perm[d1], perm[d0]
                    d1 = d0
                elif c < 0:
                    break
    if all(p == ndim - j - 1 for j, p in enumerate(perm)):
        return _contiguous(shape)
    out = [0] * ndim
    acc = 1
    for p in perm:
        out[p] = acc
        acc *= shape[p]
    return tuple(out)


def _contiguous(shape) -> tuple:
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= max(d, 1)
    return tuple(reversed(out))


def _non_overlapping_and_dense(sizes, strides) -> bool:
    if len(sizes) == 1:
        return sizes[0] < 2 or strides[0] == 1
    order = sorted(range(len(sizes)), key=lambda i: (sizes[i] < 2, strides[i]))
    need = 1
    for i in order:
        if sizes[i] < 2:
            return True
        if strides[i] != need:
            return False
        need *= sizes[i]
    return True

"""The aten table: which aten OpOverloads lower natively, to which canonical op, how.

Training graphs (pydynamo/aot) are recorded at the dispatcher, so their call_function targets
are OpOverloads (`torch.ops.aten.add.Tensor`, `aten.native_layer_norm.default` whose tuple
result `operator.getitem` reads). `ATEN` maps each overload this module knows to a `Row`:
  name   the canonical name (a key of lowering.LOWERINGS): a torch-level lowering where aten's
         convention binds to it, else an "aten.<op>" lowering of decompositions.py
  adapt  bound arguments -> (args, kwargs) of that lowering; it may raise NotLowered for
         argument values the lowering would misread (the node then runs extern)
  uses   every schema argument the adapter reads or checks
Invariants, checked when the table is built (and by tests/codegen/test_aten_graphs.py):
  * a row's `uses` equal its overload's schema argument names, so no argument (an alpha, a
    keepdim, a dtype) is ever dropped silently;
  * the overload is looked up by identity; an overload absent from this torch is skipped;
  * `name` is registered in LOWERINGS.
Arguments are bound by the schema (positions, keywords, then the schema's defaults), so a row
never depends on how the recorder spelled a call. Overloads not in the table run extern
(`aten_canonical` returns None): bmm (mm and addmm are in: codegen/gemm.py's extern lowerings,
which pad unaligned 16-bit GEMMs), convolution, embedding_dense_backward (a scatter-add), random ops
(native_dropout, bernoulli), in-place and out= overloads (graph.py refuses graphs with them),
where.Scalar (two Python scalars the lowering cannot type). native_batch_norm lowers in
evaluation only (in training it writes its running statistics: NotLowered; the functional
`_native_batch_norm_legit_functional` lowers in both modes, its new running statistics are
outputs). In evaluation the saved statistics are empty, as eager's CPU kernel returns them
(the meta kernel says (C,): a node whose metadata says so runs extern).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Optional, Tuple

import torch

from codegen.decompositions import ATEN_REDUCTIONS
from codegen.ir import NotLowered
from codegen.lowering import LOWERINGS

aten = torch.ops.aten


@dataclass(frozen=True)
class Row:
    name: str
    adapt: Callable[[dict], Tuple[tuple, dict]]
    uses: frozenset


def bind(op, args, kwargs) -> dict:
    """The overload's arguments by schema name, defaults filled in."""
    out = {}
    for i, a in enumerate(op._schema.arguments):
        if not a.kwarg_only and i < len(args):
            out[a.name] = args[i]
        elif a.name in kwargs:
            out[a.name] = kwargs[a.name]
        elif a.has_default_value():
            out[a.name] = a.default_value
        else:
            raise NotLowered(f"{op}: argument {a.name} missing")
    return out


def same(name, *pos, **kw):
    """The lowering takes schema arguments `pos` positionally and `kw` ({its keyword: schema
    name}) by keyword."""
    def adapt(b):
        return tuple(b[p] for p in pos), {k: b[v] for k, v in kw.items()}
    return Row(name, adapt, frozenset(pos) | frozenset(kw.values()))


def custom(name, uses, adapt):
    return Row(name, adapt, frozenset(uses.split()))


FACTORY = ("dtype", "layout", "device", "pin_memory")     # factory keywords, checked by lowering


def _factory_kw(**more):
    return dict({k: k for k in FACTORY}, **more)


def _no_float_promotion(b):
    """`_softmax(x, dim, half_to_float)`: half_to_float asks for a float32 result."""
    return torch.float32 if b["half_to_float"] else None


def _scalar_tensor(b):
    return (([], b["s"]), {"dtype": b["dtype"] or torch.get_default_dtype(),
                           **{k: b[k] for k in FACTORY[1:]}})


def _mse_loss(b):
    if b["reduction"] not in ATEN_REDUCTIONS:
        raise NotLowered(f"reduction {b['reduction']}")
    return (b["self"], b["target"]), {"reduction": ATEN_REDUCTIONS[b["reduction"]]}


def _elu(b):
    # F.elu(x, alpha) is aten's elu with scale = input_scale = 1 (selu and celu set them)
    if b["scale"] != 1 or b["input_scale"] != 1:
        raise NotLowered("elu scale")
    return (b["self"], b["alpha"]), {}


def _roll(b):
    return (b["self"], b["shifts"], list(b["dims"]) or None), {}


def _embedding(b):
    # padding_idx and scale_grad_by_freq only change the gradient; sparse its layout
    if b["sparse"]:
        raise NotLowered("sparse embedding")
    return (b["indices"], b["weight"]), {}


def _expand(b):
    return (b["self"], b["size"]), {}        # implicit: how autograd names it, no effect


UNARY = """abs neg exp exp2 expm1 log log2 log10 log1p sqrt rsqrt sin cos tan asin acos atan
    sinh cosh tanh asinh acosh atanh sigmoid relu silu erf erfc floor ceil trunc frac
    reciprocal sign sgn logical_not bitwise_not isnan isinf isfinite lgamma mish hardswish
    hardsigmoid detach alias""".split()
# (self, other) ops -> their tensor overloads (`.default` of some is a Scalar-only op: a, b)
_TS = ("Tensor", "Scalar")
BINARY = {**{n: _TS for n in "mul div eq ne lt le gt ge remainder fmod bitwise_and bitwise_or "
             "bitwise_xor copysign".split()},
          **{n: ("default",) for n in "maximum minimum atan2 logical_and logical_or logical_xor "
             "hypot nextafter".split()},
          "floor_divide": ("default", "Scalar"), "xlogy": ("Tensor", "Scalar_Other")}


def _rows() -> Dict[str, Row]:
    r: Dict[str, Row] = {}
    for n in UNARY:
        r[f"{n}.default"] = same(n, "self")
    for n, overloads in BINARY.items():
        for ov in overloads:
            r[f"{n}.{ov}"] = same(n, "self", "other")
    for n in ("add", "sub", "rsub"):
        for ov in ("Tensor", "Scalar"):
            r[f"{n}.{ov}"] = same(n, "self", "other", alpha="alpha")
    r.update({
        # pointwise with more arguments
        "div.Tensor_mode": same("div", "self", "other", rounding_mode="rounding_mode"),
        "div.Scalar_mode": same("div", "self", "other", rounding_mode="rounding_mode"),
        "pow.Tensor_Scalar": same("pow", "self", "exponent"),
        "pow.Tensor_Tensor": same("pow", "self", "exponent"),
        "pow.Scalar": same("pow", "self", "exponent"),
        "gelu.default": same("gelu", "self", approximate="approximate"),
        "leaky_relu.default": same("leaky_relu", "self", "negative_slope"),
        "hardtanh.default": same("hardtanh", "self", "min_val", "max_val"),
        "threshold.default": same("threshold", "self", "threshold", "value"),
        "softplus.default": same("softplus", "self", "beta", "threshold"),
        "elu.default": custom("elu", "self alpha scale input_scale", _elu),
        "round.default": same("round", "self"),
        "logit.default": same("logit", "self", "eps"),
        "where.self": same("where", "condition", "self", "other"),
        "where.ScalarSelf": same("where", "condition", "self", "other"),
        "where.ScalarOther": same("where", "condition", "self", "other"),
        "clamp.default": same("clamp", "self", "min", "max"),
        "clamp.Tensor": same("clamp", "self", "min", "max"),
        "clamp_min.default": same("clamp_min", "self", "min"),
        "clamp_max.default": same("clamp_max", "self", "max"),
        "masked_fill.Scalar": same("masked_fill", "self", "mask", "value"),
        "masked_fill.Tensor": same("masked_fill", "self", "mask", "value"),
        "lerp.Scalar": same("lerp", "self", "end", "weight"),
        "lerp.Tensor": same("lerp", "self", "end", "weight"),
        "addcmul.default": same("addcmul", "self", "tensor1", "tensor2", value="value"),
        "addcdiv.default": same("addcdiv", "self", "tensor1", "tensor2", value="value"),
        "addmm.default": same("addmm", "self", "mat1", "mat2", beta="beta", alpha="alpha"),
        "mm.default": same("mm", "self", "mat2"),
        # copies and casts
        "_to_copy.default": same("aten._to_copy", "self", **_factory_kw(
            non_blocking="non_blocking", memory_format="memory_format")),
        "clone.default": same("clone", "self", memory_format="memory_format"),
        "lift_fresh_copy.default": same("clone", "self"),
        "copy.default": custom("aten.copy", "self src non_blocking",
                               lambda b: ((b["self"], b["src"]), {})),
        # fills and factories
        "fill.Scalar": same("fill", "self", "value"),
        "fill.Tensor": same("fill", "self", "value"),
        "zero.default": same("zero", "self"),
        "full.default": same("full", "size", "fill_value", **_factory_kw()),
        "zeros.default": same("zeros", "size", **_factory_kw()),
        "ones.default": same("ones", "size", **_factory_kw()),
        "empty.memory_format": same("empty", "size", **_factory_kw(
            memory_format="memory_format")),
        "scalar_tensor.default": custom("full", "s dtype layout device pin_memory",
                                        _scalar_tensor),
        "new_zeros.default": same("new_zeros", "self", "size", **_factory_kw()),
        "new_ones.default": same("new_ones", "self", "size", **_factory_kw()),
        "new_empty.default": same("new_empty", "self", "size", **_factory_kw()),
        "new_full.default": same("new_full", "self", "size", "fill_value", **_factory_kw()),
        "zeros_like.default": same("zeros_like", "self", **_factory_kw(
            memory_format="memory_format")),
        "ones_like.default": same("ones_like", "self", **_factory_kw(
            memory_format="memory_format")),
        "empty_like.default": same("empty_like", "self", **_factory_kw(
            memory_format="memory_format")),
        "full_like.default": same("full_like", "self", "fill_value", **_factory_kw(
            memory_format="memory_format")),
        "arange.default": same("arange", "end", **_factory_kw()),
        "arange.start": same("arange", "start", "end", **_factory_kw()),
        "arange.start_step": same("arange", "start", "end", "step", **_factory_kw()),
        # views
        "view.default": same("view", "self", "size"),
        "_unsafe_view.default": same("view", "self", "size"),
        "reshape.default": same("reshape", "self", "shape"),
        "expand.default": custom("expand", "self size implicit", _expand),
        "t.default": same("t", "self"),
        "permute.default": same("permute", "self", "dims"),
        "transpose.int": same("transpose", "self", "dim0", "dim1"),
        "unsqueeze.default": same("unsqueeze", "self", "dim"),
        "squeeze.default": same("squeeze", "self"),
        "squeeze.dim": same("squeeze", "self", "dim"),
        "squeeze.dims": same("squeeze", "self", "dim"),
        "slice.Tensor": same("aten.slice", "self", "dim", "start", "end", "step"),
        "select.int": same("select", "self", "dim", "index"),
        "narrow.default": same("narrow", "self", "dim", "start", "length"),
        "split.Tensor": same("split", "self", "split_size", "dim"),
        "split_with_sizes.default": same("split_with_sizes", "self", "split_sizes", "dim"),
        "unbind.int": same("unbind", "self", "dim"),
        "diagonal.default": same("diagonal", "self", "offset", "dim1", "dim2"),
        # data movement
        "cat.default": same("cat", "tensors", "dim"),
        "stack.default": same("stack", "tensors", "dim"),
        "flip.default": same("flip", "self", "dims"),
        "roll.default": custom("roll", "self shifts dims", _roll),
        "repeat.default": same("repeat", "self", "repeats"),
        "tril.default": same("tril", "self", "diagonal"),
        "triu.default": same("triu", "self", "diagonal"),
        "constant_pad_nd.default": same("constant_pad_nd", "self", "pad", "value"),
        "index_select.default": same("index_select", "self", "dim", "index"),
        "gather.default": same("gather", "self", "dim", "index", sparse_grad="sparse_grad"),
        "embedding.default": custom(
            "embedding", "weight indices padding_idx scale_grad_by_freq sparse", _embedding),
        # reductions (an empty dim list reduces every dim, in aten and in the lowerings)
        "sum.default": same("sum", "self", dtype="dtype"),
        "sum.dim_IntList": same("sum", "self", "dim", "keepdim", dtype="dtype"),
        "mean.default": same("mean", "self", dtype="dtype"),
        "mean.dim": same("mean", "self", "dim", "keepdim", dtype="dtype"),
        "prod.default": same("prod", "self", dtype="dtype"),
        "prod.dim_int": same("prod", "self", "dim", "keepdim", dtype="dtype"),
        "amax.default": same("amax", "self", "dim", "keepdim"),
        "amin.default": same("amin", "self", "dim", "keepdim"),
        "max.dim": same("max", "self", "dim", "keepdim"),
        "min.dim": same("min", "self", "dim", "keepdim"),
        "max.default": same("max", "self"),
        "min.default": same("min", "self"),
        "argmax.default": same("argmax", "self", "dim", "keepdim"),
        "argmin.default": same("argmin", "self", "dim", "keepdim"),
        "any.default": same("any", "self"),
        "all.default": same("all", "self"),
        "any.dim": same("any", "self", "dim", "keepdim"),
        "all.dim": same("all", "self", "dim", "keepdim"),
        "any.dims": same("any", "self", "dim", "keepdim"),
        "all.dims": same("all", "self", "dim", "keepdim"),
        "logsumexp.default": same("logsumexp", "self", "dim", "keepdim"),
        "var.correction": same("var", "self", "dim", correction="correction",
                               keepdim="keepdim"),
        "var_mean.correction": same("var_mean", "self", "dim", correction="correction",
                                    keepdim="keepdim"),
        "_softmax.default": custom("softmax", "self dim half_to_float", lambda b: (
            (b["self"], b["dim"]), {"dtype": _no_float_promotion(b)})),
        "_log_softmax.default": custom("log_softmax", "self dim half_to_float", lambda b: (
            (b["self"], b["dim"]), {"dtype": _no_float_promotion(b)})),
        # norms and backward ops (decompositions.py "aten-only forms")
        "native_layer_norm.default": same("aten.native_layer_norm", "input", "normalized_shape",
                                          "weight", "bias", "eps"),
        "native_layer_norm_backward.default": same(
            "aten.native_layer_norm_backward", "grad_out", "input", "normalized_shape", "mean",
            "rstd", "weight", "bias", "output_mask"),
        "threshold_backward.default": same("aten.threshold_backward", "grad_output", "self",
                                           "threshold"),
        "gelu_backward.default": same("aten.gelu_backward", "grad_output", "self",
                                      approximate="approximate"),
        "tanh_backward.default": same("aten.tanh_backward", "grad_output", "output"),
        "sigmoid_backward.default": same("aten.sigmoid_backward", "grad_output", "output"),
        "silu_backward.default": same("aten.silu_backward", "grad_output", "self"),
        "_softmax_backward_data.default": same(
            "aten._softmax_backward_data", "grad_output", "output", "dim", "input_dtype"),
        "_log_softmax_backward_data.default": same(
            "aten._log_softmax_backward_data", "grad_output", "output", "dim", "input_dtype"),
        "native_batch_norm.default": same(
            "aten.native_batch_norm", "input", "weight", "bias", "running_mean", "running_var",
            "training", "momentum", "eps"),
        "_native_batch_norm_legit_no_training.default": same(
            "aten._native_batch_norm_legit_no_training", "input", "weight", "bias",
            "running_mean", "running_var", "momentum", "eps"),
        "_native_batch_norm_legit_functional.default": same(
            "aten._native_batch_norm_legit_functional", "input", "weight", "bias",
            "running_mean", "running_var", "training", "momentum", "eps"),
        "native_batch_norm_backward.default": same(
            "aten.native_batch_norm_backward", "grad_out", "input", "weight", "running_mean",
            "running_var", "save_mean", "save_invstd", "train", "eps", "output_mask"),
        "aminmax.default": same("aminmax", "self", dim="dim", keepdim="keepdim"),
        "mse_loss.default": custom("mse_loss", "self target reduction", _mse_loss),
        "mse_loss_backward.default": same("aten.mse_loss_backward", "grad_output", "self",
                                          "target", "reduction"),
        "nll_loss_forward.default": same("aten.nll_loss_forward", "self", "target", "weight",
                                         "reduction", "ignore_index"),
        "nll_loss_backward.default": same(
            "aten.nll_loss_backward", "grad_output", "self", "target", "weight", "reduction",
            "ignore_index", "total_weight"),
        "hardtanh_backward.default": same("aten.hardtanh_backward", "grad_output", "self",
                                          "min_val", "max_val"),
        "hardsigmoid_backward.default": same("aten.hardsigmoid_backward", "grad_output", "self"),
        "hardswish_backward.default": same("aten.hardswish_backward", "grad_output", "self"),
        "leaky_relu_backward.default": same("aten.leaky_relu_backward", "grad_output", "self",
                                            "negative_slope", "self_is_result"),
        "elu_backward.default": same("aten.elu_backward", "grad_output", "alpha", "scale",
                                     "input_scale", "is_result", "self_or_result"),
        "softplus_backward.default": same("aten.softplus_backward", "grad_output", "self",
                                          "beta", "threshold"),
        "native_dropout_backward.default": same("aten.native_dropout_backward", "grad_output",
                                                "mask", "scale"),
    })
    return r


def _overload(spelling: str):
    packet, _, ov = spelling.partition(".")
    return getattr(getattr(aten, packet, None), ov, None)


def _build() -> Dict[object, Row]:
    table = {}
    for spelling, row in _rows().items():
        op = _overload(spelling)
        if op is None:
            continue            # not in this torch (or no such overload: unary "default")
        names = {a.name for a in op._schema.arguments}
        assert names == row.uses, (spelling, sorted(names ^ row.uses))
        assert row.name in LOWERINGS, (spelling, row.name)
        table[op] = row
    return table


ATEN: Dict[object, Row] = _build()


def aten_name(target) -> Optional[str]:
    """The canonical name an aten overload lowers to (None: not in the table)."""
    row = ATEN.get(target) if isinstance(target, torch._ops.OpOverload) else None
    return None if row is None else row.name


def aten_canonical(target, args, kwargs) -> Optional[Tuple[str, tuple, dict]]:
    """(canonical name, args, kwargs) for a call of an overload in the table, else None."""
    row = ATEN.get(target) if isinstance(target, torch._ops.OpOverload) else None
    if row is None:
        return None
    a, kw = row.adapt(bind(target, args, kwargs))
    return row.name, tuple(a), kw

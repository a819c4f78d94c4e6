"""torch.autocast emulated above autograd, for the training recorder (pydynamo/aot/recorder.py).

Why: the recorder runs the executor's torch-level graph on meta tensors with autograd on, and
autocast does not act on meta tensors (no Autocast dispatch key for the meta device). Eager's
autocast sits above autograd: before a listed op it casts the op's floating tensor arguments with
`Tensor.to`, so autograd records the casts and their backward (a cast back to the argument's
dtype). `cast_args` does the same before the recorder's torch-level call: the casts it makes are
differentiable `.to(dtype)` calls, recorded like any other op. (pydynamo/autocast.py answers a
different question, the dtypes of a call's results under autocast, from torch's own dispatcher
through a device-reporting probe; it cannot say where the casts go, which the joint graph needs.)

The policy of an op is a fact of torch (its documentation's "Autocast Op Reference" for CUDA and
CPU, and at/autocast_mode's registrations where the documentation lags, e.g. CUDA's einsum and
scaled_dot_product_attention), keyed by the aten name torch lists, reached from the spellings
the executor's graphs carry: torch functions (`torch.matmul`, `torch._C._nn.linear`,
`torch._C._linalg.linalg_multi_dot`: their `__name__`), torch.nn.functional Python functions
(their name, or the listed op they bottom out in: `cross_entropy` -> `cross_entropy_loss`),
operators (`operator.matmul`, `operator.pow`, `operator.truediv(number, tensor)` ->
`reciprocal`) and Tensor method names. Policies, as eager applies them to each eligible argument
(a floating tensor, not float64, on the autocast device; tensors inside a list argument too):
- LOWER: cast to the region's dtype (bfloat16/float16);
- FP32: cast to float32; on CUDA the reductions that take `dtype=` (sum, softmax, ...) are
  autocast only when no dtype is given (eager passes dtype=float32 then);
- PROMOTE: cast to the widest dtype among the eligible arguments (float32 if any is float32);
- anything else: untouched (it runs in the dtype its inputs give it).
A torch-level function that is a composition over a listed op is listed under what eager's
autocast does to it: on CPU `torch.einsum`/`tensordot`/`inner`/`linalg.multi_dot` reach `mm`/`bmm`
inside, so their operands end up in the lower dtype; the tests check every spelling here against
eager autocast on real CPU tensors. In-place ops, `out=` calls and float64 are never autocast.
Eager caches the lower-precision cast of a float32 leaf that requires grad (a parameter) for the
whole region; `cast_args(..., cache=d)` does the same with one dict per region, so a weight used
twice is cast once, as in eager's graph.
"""
from __future__ import annotations

import operator
from typing import Callable, Optional

import torch

LOWER, FP32, PROMOTE = "lower", "fp32", "promote"

_FFT = {f"fft_{n}" for n in ("fft", "ifft", "fft2", "ifft2", "fftn", "ifftn", "rfft", "irfft",
                             "rfft2", "irfft2", "rfftn", "irfftn", "hfft", "ihfft")}
_LOSSES_FP32 = {"mse_loss", "cosine_embedding_loss", "nll_loss", "nll_loss2d",
                "hinge_embedding_loss", "poisson_nll_loss", "smooth_l1_loss", "l1_loss",
                "huber_loss", "margin_ranking_loss", "soft_margin_loss", "triplet_margin_loss",
                "multi_margin_loss", "kl_div", "multilabel_margin_loss",
                "binary_cross_entropy_with_logits"}

_CPU = {
    LOWER: {"conv1d", "conv2d", "conv3d", "bmm", "mm", "linalg_vecdot", "baddbmm", "addmm",
            "_addmm_activation", "addbmm", "linear", "_convolution", "matmul", "conv_tbc",
            "mkldnn_rnn_layer", "conv_transpose1d", "conv_transpose2d", "conv_transpose3d",
            "prelu", "scaled_dot_product_attention", "_native_multi_head_attention",
            # compositions that reach mm/bmm inside, where eager's autocast casts
            "einsum", "tensordot", "inner", "linalg_multi_dot", "chain_matmul"},
    FP32: {"avg_pool3d", "binary_cross_entropy", "grid_sampler", "grid_sampler_2d",
           "grid_sampler_3d", "_grid_sampler_2d_cpu_fallback", "polar", "prod", "quantile",
           "nanquantile", "stft", "cdist", "trace", "view_as_complex", "cholesky",
           "cholesky_inverse", "cholesky_solve", "inverse", "lu_solve", "orgqr", "ormqr",
           "pinverse", "max_pool3d", "max_unpool2d", "max_unpool3d", "adaptive_avg_pool3d",
           "reflection_pad1d", "reflection_pad2d", "replication_pad1d", "replication_pad2d",
           "replication_pad3d", "cross_entropy_loss", "ctc_loss", "linalg_cond",
           "linalg_matrix_rank", "linalg_solve", "linalg_cholesky", "linalg_svdvals",
           "linalg_eigvals", "linalg_eigvalsh", "linalg_inv", "linalg_householder_product",
           "linalg_tensorinv", "linalg_tensorsolve", "fake_quantize_per_tensor_affine", "geqrf",
           "_lu_with_info", "qr", "svd", "triangular_solve", "fractional_max_pool2d",
           "fractional_max_pool3d", "adaptive_max_pool3d", "multilabel_margin_loss_forward",
           "linalg_qr", "linalg_cholesky_ex", "linalg_svd", "linalg_eig", "linalg_eigh",
           "linalg_lstsq", "linalg_inv_ex", *_FFT, *_LOSSES_FP32},
    PROMOTE: {"cat", "stack", "index_copy", "concat", "concatenate"},
}
_UPSAMPLE = {"upsample_nearest1d", "_upsample_nearest_exact1d", "upsample_nearest2d",
             "_upsample_nearest_exact2d", "upsample_nearest3d", "_upsample_nearest_exact3d",
             "upsample_linear1d", "upsample_bilinear2d", "_upsample_bilinear2d_aa",
             "upsample_trilinear3d", "upsample_bicubic2d", "_upsample_bicubic2d_aa"}
# CUDA's reductions with a dtype= argument: eager adds dtype=float32 when none is given
_CUDA_SET_DTYPE = {"prod", "softmax", "log_softmax", "cumprod", "cumsum", "linalg_vector_norm",
                   "linalg_matrix_norm", "sum", "norm"}
_CUDA = {
    LOWER: {"_convolution", "conv1d", "conv2d", "conv3d", "conv_tbc", "conv_transpose1d",
            "conv_transpose2d", "conv_transpose3d", "convolution", "prelu", "addmm", "addmv",
            "addr", "matmul", "einsum", "mm", "mv", "linalg_vecdot", "linear", "addbmm",
            "baddbmm", "bmm", "chain_matmul", "linalg_multi_dot", "_thnn_fused_lstm_cell",
            "_thnn_fused_gru_cell", "lstm_cell", "gru_cell", "rnn_tanh_cell", "rnn_relu_cell",
            "_scaled_dot_product_flash_attention", "scaled_dot_product_attention",
            "cudnn_convolution", "cudnn_convolution_transpose"},
    FP32: {"acos", "asin", "cosh", "erfinv", "exp", "expm1", "log", "log10", "log2", "log1p",
           "reciprocal", "rsqrt", "sinh", "tan", "pow", "softplus", "layer_norm",
           "native_layer_norm", "group_norm", "frobenius_norm", "nuclear_norm",
           "cosine_similarity", "dist", "pdist", "cdist", "renorm", "logsumexp",
           # composite: log_softmax and nll_loss inside, both float32
           "cross_entropy_loss", *_LOSSES_FP32, *_UPSAMPLE, *_CUDA_SET_DTYPE},
    PROMOTE: {"addcdiv", "addcmul", "atan2", "bilinear", "cross", "dot", "vdot", "grid_sampler",
              "index_put", "tensordot", "scatter_add"},
}
_TABLES = {"cpu": _CPU, "cuda": _CUDA}
# ops eager refuses under autocast on that device (at::autocast's banned list)
_BANNED = {"cuda": {"binary_cross_entropy": "torch.nn.functional.binary_cross_entropy and "
                    "torch.nn.BCELoss are unsafe to autocast; use binary_cross_entropy_with_logits"}}

# torch-level names that reach a listed op under another name
_ALIASES = {
    "cross_entropy": "cross_entropy_loss",
    "softmin": "softmax",                   # softmax(-x)
    "grid_sample": "grid_sampler",
    "normalize": "linalg_vector_norm",      # x / x.norm(...): the norm decides the dtype
    "__matmul__": "matmul", "__rmatmul__": "matmul",
    "__pow__": "pow", "__rpow__": "pow",
    "__rtruediv__": "reciprocal", "__rdiv__": "reciprocal",   # number / x = x.reciprocal() * number
    "concat": "cat", "concatenate": "cat",
}
_OPERATORS = {operator.matmul: "matmul", operator.pow: "pow"}


def op_name(kind: str, target, args=(), kwargs=None) -> Optional[str]:
    """The aten name an FX node's call is listed under (None: not a torch op, never autocast)."""
    if kind == "call_method":
        name = target
    elif kind == "call_function":
        if target in _OPERATORS:
            return _OPERATORS[target]
        if target is operator.truediv:
            return "reciprocal" if args and not isinstance(args[0], torch.Tensor) else None
        name = getattr(target, "__name__", None)
        module = getattr(target, "__module__", None) or ""
        owner = getattr(target, "__objclass__", None)      # torch.Tensor.matmul and friends
        if name is None or not (module.startswith("torch") or
                                (owner is not None and issubclass(owner, torch._C.TensorBase))):
            return None
        if name in ("interpolate", "pad"):
            return _mode_name(name, args, kwargs or {})
    elif kind == "call_module":
        # modules run their parameters through functional calls this wrapper cannot see; the
        # executor inlines module calls, and refuses a module call under autocast
        raise NotImplementedError(f"autocast emulation of a module call ({type(target).__name__})")
    else:
        return None
    return _ALIASES.get(name, name)


def _mode_name(name, args, kwargs) -> Optional[str]:
    """F.interpolate lowers to upsample_<mode> (all float32 on CUDA) except mode="area";
    F.pad to reflection_pad/replication_pad (float32 on CPU) for those modes."""
    pos, default = (3, "nearest") if name == "interpolate" else (2, "constant")
    mode = kwargs.get("mode", args[pos] if len(args) > pos else default)
    if name == "interpolate":
        return None if mode == "area" else "upsample_nearest2d"
    return {"reflect": "reflection_pad2d", "replicate": "replication_pad2d"}.get(mode)


def policy(kind: str, target, args, kwargs, device_type: str) -> Optional[str]:
    """LOWER, FP32, PROMOTE or None for one FX call under autocast on `device_type`."""
    if kwargs.get("out") is not None:
        return None
    name = op_name(kind, target, args, kwargs)
    if name is None:
        return None
    if name in _BANNED.get(device_type, ()):
        raise RuntimeError(_BANNED[device_type][name])
    table = _TABLES.get(device_type)
    if table is None:
        raise NotImplementedError(f"autocast emulation for device {device_type!r}")
    for pol in (LOWER, FP32, PROMOTE):
        if name in table[pol]:
            if device_type == "cuda" and name in _CUDA_SET_DTYPE and _has_dtype(args, kwargs):
                return None      # an explicit dtype= wins: eager does not autocast the call
            return pol
    return None


def _has_dtype(args, kwargs) -> bool:
    return kwargs.get("dtype") is not None or any(isinstance(a, torch.dtype) for a in args)


def _eligible(t, device_type, device_of) -> bool:
    return (isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.float64
            and (device_of is None or device_of(t) == device_type))


def _tensors(args, kwargs):
    for a in (*args, *kwargs.values()):
        if isinstance(a, (list, tuple)):
            yield from (x for x in a if isinstance(x, torch.Tensor))
        elif isinstance(a, torch.Tensor):
            yield a


def cast_args(kind: str, target, args: tuple, kwargs: dict, device_type: str, dtype,
              device_of: Optional[Callable] = None, cache: Optional[dict] = None):
    """(args, kwargs) with the casts eager's autocast on `device_type` (region dtype `dtype`)
    makes before this call; the same objects where it makes none. `device_of(tensor)` names a
    tensor's real device type (the recorder's tensors are meta; None: all on `device_type`).
    `cache`: one dict per autocast region with caching on (eager's cast cache)."""
    pol = policy(kind, target, args, kwargs or {}, device_type)
    if pol is None:
        return args, kwargs
    kwargs = kwargs or {}
    if pol == LOWER:
        to = dtype
    elif pol == FP32:
        to = torch.float32
    else:
        dtypes = {t.dtype for t in _tensors(args, kwargs) if _eligible(t, device_type, device_of)}
        to = torch.float32 if torch.float32 in dtypes or len(dtypes) > 1 else dtype

    def cast(t):
        if not _eligible(t, device_type, device_of) or t.dtype == to:
            return t
        if (cache is not None and pol == LOWER and t.dtype == torch.float32 and t.requires_grad
                and t.is_leaf and not t._is_view()):
            hit = cache.get(id(t))
            if hit is None or hit[0] is not t:
                hit = cache[id(t)] = (t, t.to(to))   # keeps t alive: its id stays its own
            return hit[1]
        return t.to(to)

    def one(a):
        if isinstance(a, torch.Tensor):
            return cast(a)
        if isinstance(a, (list, tuple)) and any(isinstance(x, torch.Tensor) for x in a):
            return type(a)(cast(x) if isinstance(x, torch.Tensor) else x for x in a)
        return a
    return tuple(one(a) for a in args), {k: one(v) for k, v in kwargs.items()}


def call_device(args, kwargs, device_of: Optional[Callable]) -> Optional[str]:
    """The device whose autocast applies to a call: eager dispatches on the inputs' devices,
    so a CUDA tensor among CPU ones (0-d CPU scalars) makes it a CUDA call."""
    devices = {device_of(t) if device_of else t.device.type for t in _tensors(args, kwargs)}
    return "cuda" if "cuda" in devices else ("cpu" if "cpu" in devices else None)


def cast_for_state(kind: str, target, args: tuple, kwargs: dict, state: tuple,
                   device_of: Optional[Callable] = None, cache: Optional[dict] = None):
    """`cast_args` under a pydynamo.autocast state tuple (((device, enabled, dtype), ...), e.g.
    pydynamo.autocast.current() inside a region the recorder entered for real): picks the call's
    device and that device's region, if enabled."""
    device = call_device(args, kwargs or {}, device_of)
    for d, enabled, dtype in state:
        if d == device and enabled:
            return cast_args(kind, target, args, kwargs, d, dtype, device_of, cache)
    return args, kwargs

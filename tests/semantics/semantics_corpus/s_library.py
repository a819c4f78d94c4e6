"""Semantics cases: library helpers real model code calls around its tensors — torch.finfo /
torch.iinfo as constants, os.environ / os.getenv reads (guarded: a changed variable recompiles),
copy.copy / copy.deepcopy of containers and config objects, torch._assert and the
has_torch_function checks of torch's Python helpers, math and string formatting."""
import contextlib
import copy
import math
import os

import torch

from compat_case import case, module_case, t, under

F16, BF16, F64 = torch.float16, torch.bfloat16, torch.float64
ENV = "PYDYNAMO_SEMANTICS_FLAG"


@contextlib.contextmanager
def env(value):
    """The call runs with ENV set to `value` (None: unset)."""
    saved = os.environ.get(ENV)
    if value is None:
        os.environ.pop(ENV, None)
    else:
        os.environ[ENV] = value
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = saved


# --- torch.finfo / torch.iinfo ---------------------------------------------------------------

@case(t(4))
def finfo_min_mask(x):
    return x.masked_fill(x > 0, torch.finfo(x.dtype).min)


@case(t(4, dtype=F64), change=(t(4),))
def finfo_of_input_dtype(x):
    fi = torch.finfo(x.dtype)
    return x.clamp(min=fi.min / 2, max=fi.max / 2) + fi.eps, fi.bits


@case(t(4))
def finfo_fields(x):
    fi = torch.finfo(torch.float16)
    return x * fi.tiny + fi.resolution, fi.max, fi.smallest_normal, fi.dtype


@case(t(4))
def finfo_default(x):
    return x + torch.finfo().eps


@case(t(4))
def finfo_bfloat16(x):
    fi = torch.finfo(BF16)
    return (x * 100).clamp(fi.min, fi.max).to(BF16).float(), fi.bits, fi.eps


@case(t(4, dtype=torch.int32))
def iinfo_fields(x):
    ii = torch.iinfo(x.dtype)
    return x.clamp(min=ii.min + 1, max=ii.max - 1), ii.bits, ii.max


@case(t(4))
def iinfo_int8(x):
    ii = torch.iinfo(torch.int8)
    return (x * 200).clamp(ii.min, ii.max).to(torch.int8), ii.min


@case(t(4))
def finfo_in_helper(x):
    def neg_inf_like(dtype):
        return torch.finfo(dtype).min
    return torch.where(x > 0, x, neg_inf_like(x.dtype))


@case(t(4))
def finfo_compare(x):
    same = torch.finfo(torch.float32) == torch.finfo(x.dtype)
    return x * (2 if same else 3)


@case(t(4))
def finfo_math(x):
    return x + math.log(torch.finfo(torch.float32).max)


# --- os.environ / os.getenv ------------------------------------------------------------------
# `before` sets the variable for the steady calls; a guard change runs under another value


def set_env(value):
    def before():
        if value is None:
            os.environ.pop(ENV, None)
        else:
            os.environ[ENV] = value
    return before


@case(t(3), before=set_env(None), changes=(under(lambda: env("1"), t(3)),))
def environ_get_default(x):
    if os.environ.get(ENV, "0") == "1":
        return x + 1
    return x - 1


@case(t(3), before=set_env("2"), changes=(under(lambda: env("3"), t(3)),))
def environ_get_value(x):
    return x * int(os.environ.get(ENV, "1"))


@case(t(3), before=set_env(None), changes=(under(lambda: env("on"), t(3)),))
def getenv_default(x):
    return x * 2 if os.getenv(ENV) is None else x * 3


@case(t(3), before=set_env("abc"), changes=(under(lambda: env(None), t(3)),))
def environ_contains(x):
    if ENV in os.environ:
        return x + len(os.environ[ENV])
    return x * 1.5


@case(t(3), before=set_env("5"))
def environ_getitem(x):
    return x + float(os.environ[ENV])


@case(t(3))
def environ_missing_key_default(x):
    v = os.environ.get("PYDYNAMO_SEMANTICS_NEVER_SET_ANYWHERE")
    return x + (0 if v is None else 1), v


@case(t(3), before=set_env("true"))
def getenv_lower_flag(x):
    flag = os.getenv(ENV, "false").lower() in ("1", "true", "yes")
    return x.relu() if flag else x.sigmoid()


@case(t(3), before=set_env("1"), changes=(under(lambda: env("1"), t(3)), under(lambda: env("0"), t(3))))
def environ_same_value_no_recompile(x):
    return x + (os.environ.get(ENV) == "1")


# --- copy.copy / copy.deepcopy ---------------------------------------------------------------

@case(t(3))
def copy_dict(x):
    d = {"a": x, "b": 2}
    d2 = copy.copy(d)
    d2["c"] = 3
    return x + d2["b"], len(d), len(d2), d2["a"] is x


@case(t(3))
def copy_list(x):
    a = [x, 1]
    b = copy.copy(a)
    b.append(2)
    return b[0] * 2, len(a), len(b)


@case(t(3))
def deepcopy_nested_constants(x):
    cfg = {"n": [1, 2], "name": "m", "t": (3, 4)}
    c2 = copy.deepcopy(cfg)
    c2["n"].append(5)
    return x * sum(c2["n"]), cfg["n"], c2["t"]


class Cfg:
    def __init__(self):
        self.hidden = 4
        self.act = "relu"
        self.dims = [2, 3]


CFG = Cfg()


@case(t(3))
def copy_config_object(x):
    c = copy.copy(CFG)
    c.hidden = 8
    return x * c.hidden + CFG.hidden, c.dims is CFG.dims


@case(t(3))
def deepcopy_config_object(x):
    c = copy.deepcopy(CFG)
    c.dims.append(7)
    return x * len(c.dims), len(CFG.dims), c.act


@case(t(3))
def copy_tuple_is_same(x):
    tup = (1, 2)
    return x + len(copy.copy(tup)), copy.copy(tup) is tup


@case(t(3))
def dict_copy_method(x):
    d = {"k": 1}
    e = d.copy()
    e["k"] = 5
    return x * d["k"] + e["k"]


@case(t(3))
def deepcopy_tensor_free_list_of_dicts(x):
    layers = [{"dim": 2}, {"dim": 3}]
    new = copy.deepcopy(layers)
    new[0]["dim"] = 10
    return x * layers[0]["dim"] + new[0]["dim"]


# --- torch._assert and has_torch_function ----------------------------------------------------

@case(t(3, 4))
def torch_assert_shape(x):
    torch._assert(x.dim() == 2, "expected a matrix")
    return x.sum(0)


@case(t(3, 4))
def torch_assert_in_helper(x):
    def check(v):
        torch._assert(v.shape[-1] == 4, "last dim")
        return v
    return check(x) * 2


@case(t(3))
def has_torch_function_python_values(x):
    return x + torch.overrides.has_torch_function((1, 2))


@case(t(3))
def is_tensor_like(x):
    return x * torch.overrides.is_tensor_like(x), torch.is_tensor(3)


@case(t(4, 4))
def torch_assert_loop(x):
    for i in range(2):
        torch._assert(x.size(i) == 4, "square")
    return x.t() @ x


# --- math and strings ------------------------------------------------------------------------

@case(t(3))
def fstring_of_config(x):
    name = f"{'layer'}_{3:02d}_{2.5:.1f}"
    return x * len(name), name


@case(t(3))
def format_percent(x):
    s = "%s-%d" % ("a", 4)
    return x + len(s), s, "{:>5}".format("ab")


@case(t(3))
def math_helpers(x):
    return x * math.sqrt(16) + math.ceil(2.1) + math.gcd(12, 18), math.isclose(1.0, 1.0)


# --- torch functions of Python numbers only (Longformer, LED) -----------------------------------
# `torch.div(int, int, rounding_mode=...)` is a 0-d tensor made from numbers: a graph node (as
# torch.compile keeps it), whose value is known while tracing where a size needs it.

@case(t(2, 8, 3), change=(t(2, 12, 3),))
def div_of_sizes_as_view_size(x):
    return x.view(x.size(0), torch.div(x.size(1), 4, rounding_mode="trunc"), 4, x.size(2)).sum(1)


@case(t(2, 8, 3))
def div_of_sizes_in_reshape(x):
    n = x.size(1)
    return x.reshape(torch.div(n, 2, rounding_mode="floor"), -1) * 2


@case(t(8, 3))
def div_count_minus_one_in_size_tuple(x):
    count = torch.div(x.size(0), 2, rounding_mode="trunc") - 1
    return x.new_zeros((count + 1, 3)) + x[:4]


@case(t(8, 3))
def div_count_in_as_strided(x):
    count = torch.div(x.size(0), 4, rounding_mode="trunc")
    size = (count, 4, 3)
    return x.contiguous().as_strided(size=size, stride=(12, 3, 1)).mean(0)


@case(t(4))
def scalar_tensor_arithmetic(x):
    return x + torch.tensor(3) * torch.div(7, 2) - torch.add(2, 3)


@case(t(4), 5)
def div_of_an_argument_in_a_value(x, n):
    return x * torch.div(n, 2, rounding_mode="floor") + torch.mul(n, 3)


@case(t(6, 2))
def floor_divide_as_expand_size(x):
    k = torch.floor_divide(x.size(0), 3)
    return x[:1].expand(k, 2) + 1


# --- functions marked as trace-time constants (transformers' is_torch_greater_or_equal) ----------
import functools  # noqa: E402


def _marked(fn):
    fn._dynamo_marked_constant = True     # torch.compiler.assume_constant_result's marker
    return fn


@functools.lru_cache
@_marked
def _version_at_least(wanted: str) -> bool:
    have = tuple(int(p) for p in torch.__version__.split("+")[0].split(".")[:2])
    return have >= tuple(int(p) for p in wanted.split("."))


@_marked
def _probe_count(n: int) -> int:
    return n * 3


@case(t(4))
def marked_constant_through_lru_cache(x):
    if _version_at_least("2.0"):
        return x * 2
    return x - 1


@case(t(4), 2)
def marked_constant_function(x, n):
    return x + _probe_count(n)


# --- a module attribute over a class default; a once-only log (SeamlessM4T, Longformer) ---------
import logging  # noqa: E402

_LOG = logging.getLogger("pydynamo.semantics.once")
_LOG.addHandler(logging.NullHandler())
_LOG.propagate = False


@functools.lru_cache(None)
def _warn_once(msg):
    _LOG.warning(msg)


@module_case(t(4))
class ModalityOverClassDefault(torch.nn.Module):
    main_input_name = "input_ids"      # a class default the forward shadows per instance

    def forward(self, x):
        self.main_input_name = "input_features"
        return x * 2 if self.main_input_name == "input_features" else x


@case(t(4))
def lru_cached_log_breaks_as_logging(x):
    y = x * 2
    _warn_once("once")
    return y + 1


# --- ops whose metadata needs a tensor's value (FastSpeech2Conformer, Vilt, Vits) ---------------
# a break torch.compile takes too, named as it does: data-dependent, not "metadata failed"

@case(t(4), torch.tensor([2, 3, 1]))
def zeros_sized_by_a_tensor_max(x, lengths):
    m = (lengths % 4 + 1).max()
    return torch.zeros((2, m)).sum() + x


@case(t(6), torch.tensor([True, False, True, True, False, True]))
def boolean_mask_index(x, keep):
    return x[keep].sum() * 2 + x.mean()

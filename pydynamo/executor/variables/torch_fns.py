"""torch functions (torch.*, torch.nn.functional.*, unbound Tensor methods) as graph calls.

A call with a tensor among its arguments, or to a known tensor factory, becomes one FX node whose
target is the torch-level function itself. A few queries about global state or types are
answered at trace time (`CONSTANT_FOLD`). Anything else — functions that would act on the
process (seeding, printing, setting flags) — is Unsupported rather than run while tracing.
"""
from __future__ import annotations

import sys
import types

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor import higher_order
from pydynamo.executor.variables import amp, pytree
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.executor.variables.containers import BaseListVariable, SizeVariable
from pydynamo.executor.variables.functions import UserFunctionVariable
from pydynamo.executor.variables.misc import GRAD_MODE_FNS
from pydynamo.executor.variables.tensor import CONSTANT_OPS, TensorVariable

FACTORIES = {getattr(torch, n) for n in (
    "zeros", "ones", "empty", "full", "rand", "randn", "randint", "arange", "linspace", "logspace", "eye",
    "tensor", "as_tensor", "empty_strided", "scalar_tensor", "randperm", "tril_indices", "triu_indices",
    "normal", "range", "zeros_like", "ones_like", "empty_like", "full_like", "rand_like", "randn_like",
    "randint_like") if hasattr(torch, n)}

CONSTANT_FOLD = {torch.is_tensor, torch.is_floating_point, torch.is_complex, torch.get_default_dtype,
                 torch.promote_types, torch.result_type, torch.can_cast, torch.broadcast_shapes,
                 torch.is_inference_mode_enabled, torch.numel, torch.typename, torch.cuda.is_available,
                 torch.cuda.device_count, torch.is_autocast_enabled, torch.are_deterministic_algorithms_enabled}
CONSTANT_FOLD |= {torch._C.is_grad_enabled, torch.is_grad_enabled}
if hasattr(torch, "get_default_device"):
    CONSTANT_FOLD.add(torch.get_default_device)

# "Am I being compiled?" queries: answered as torch.compile answers them while tracing.
COMPILING_QUERIES = {}
for _name, _val in (("is_compiling", True), ("is_dynamo_compiling", True), ("is_exporting", False)):
    if hasattr(torch.compiler, _name):
        COMPILING_QUERIES[getattr(torch.compiler, _name)] = _val
COMPILING_QUERIES.update({torch.jit.is_scripting: False, torch.jit.is_tracing: False,
                          torch._C._get_tracing_state: None})

# Functions the user asked to keep opaque (pydynamo.allow_in_graph): one graph node per call.
ALLOWED_IN_GRAPH: set = set()


def allow_in_graph(fn):
    """Put calls to `fn` in the graph as one opaque node instead of tracing into it. Its output
    metadata comes from running it on meta tensors, so it must be a pure tensor function."""
    ALLOWED_IN_GRAPH.add(fn)
    return fn


_NOT_IN_GRAPH = {torch.manual_seed, torch.seed, torch.set_default_dtype, torch.set_printoptions}

# Functions whose result is a Python value computed from tensor data: a graph cannot return it,
# so the call is a graph break (torch.compile breaks on these too: "data dependent operator").
DATA_DEPENDENT = {torch.allclose: "bool", torch.equal: "bool", torch.is_nonzero: "bool"}


# torch's Python helpers (torch._assert, F.* wrappers) ask these before their real work
HAS_TORCH_FUNCTION = {torch._C._has_torch_function, torch._C._has_torch_function_unary,
                      torch._C._has_torch_function_variadic}
_NO_TORCH_FUNCTION = (torch.Tensor, torch.nn.Parameter)   # their __torch_function__ is the default


def _has_torch_function(fn, args) -> bool:
    """The answer for traced values: False for constants and plain tensors (TENSOR_MATCH pins the
    exact class); anything else, or a torch function mode active now, is not decided here."""
    if torch._C._is_torch_function_mode_enabled():
        raise Unsupported("torch_function", "a __torch_function__ mode is active")
    leaves = list(args)
    if fn is torch._C._has_torch_function and len(args) == 1 and isinstance(args[0], BaseListVariable):
        leaves = list(args[0].items)
    for v in leaves:
        if isinstance(v, TensorVariable) and v.cls in _NO_TORCH_FUNCTION:
            continue
        if isinstance(v, BaseListVariable) and all(not isinstance(i, TensorVariable) and i.is_python_constant()
                                                   for i in v.items):
            continue
        if not isinstance(v, TensorVariable) and v.is_python_constant() and \
                type(v.as_python_constant()) in (type(None), bool, int, float, complex, str, bytes):
            continue
        raise Unsupported("torch_function", f"has_torch_function of {v}")
    return False


def _has_tensor_arg(args, kwargs) -> bool:

    def has(v):
        if isinstance(v, TensorVariable):
            return True
        return isinstance(v, BaseListVariable) and any(has(i) for i in v.items)
    return any(has(a) for a in args) or any(has(v) for v in kwargs.values())


def _spelled_by_name(fn) -> bool:
    """A graph node's target must be reachable as `module.name` (FX prints it so, and backends
    look it up): a lambda or local helper defined in a torch module (torch.testing's OpInfo
    wrappers, say) is not, so it is traced through as a user function instead. A builtin that
    its module's name resolves to another function (`torch._VF.tensordot` is named
    `torch.tensordot`, torch.functional's Python wrapper with another signature) cannot be
    traced through: the call is a graph break."""
    if not isinstance(fn, (types.FunctionType, types.BuiltinFunctionType)):
        return True
    mod = sys.modules.get(getattr(fn, "__module__", None) or "")
    if mod is None or getattr(mod, fn.__name__, None) is not fn:
        return False
    # FX spells it by attributes from the top package: a package attribute may shadow the
    # submodule of the same name (torch._higher_order_ops.associative_scan is a function there)
    obj = sys.modules.get(fn.__module__.partition(".")[0])
    for part in fn.__module__.split(".")[1:]:
        obj = getattr(obj, part, None)
    return obj is mod


class TorchFunctionVariable(VariableTracker):
    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def call_function(self, tx, args, kwargs):
        fn = self.fn
        if fn in GRAD_MODE_FNS:
            return GRAD_MODE_FNS[fn](tx, args, kwargs)
        if amp.is_query(fn):
            res = amp.query(tx, fn, args, kwargs)
            if res is not NotImplemented:
                return res
        if fn in COMPILING_QUERIES:
            tx.root.asked_compiling = True   # (a frame with no graph then runs as is: convert_frame)
            return ConstantVariable(COMPILING_QUERIES[fn])
        if fn in (torch.is_grad_enabled, torch._C.is_grad_enabled):
            return ConstantVariable(tx.grad_enabled)
        if fn in HAS_TORCH_FUNCTION:
            return ConstantVariable(_has_torch_function(fn, args))
        if fn in DATA_DEPENDENT:
            raise Unsupported("data_dependent", f"torch.{fn.__name__} returns a Python "
                              f"{DATA_DEPENDENT[fn]} computed from tensor values")
        if fn in _NOT_IN_GRAPH:
            raise Unsupported("torch_global", f"torch.{fn.__name__} changes process state")
        if (getattr(fn, "__module__", None) or "").startswith("torch.distributed") and \
                _has_tensor_arg(args, kwargs):
            # a collective is an effect on other processes, not an op: in a graph it was dropped
            # as dead code (dist.all_reduce(y): a wrong answer); queries without tensors
            # (is_initialized) are traced through as before
            raise Unsupported("distributed", f"{fn.__module__}.{fn.__name__} communicates with "
                              "other processes: it runs in Python, between graphs")
        if fn in CONSTANT_FOLD:
            real = [a.example if isinstance(a, TensorVariable) else a.as_python_constant() for a in args]
            kw = {k: v.as_python_constant() for k, v in kwargs.items()}
            return tx.wrap_constant_result(fn(*real, **kw))
        if fn is torch.Size:
            return SizeVariable(tx.unpack(args[0]) if args else [])
        if fn in pytree.HANDLERS:
            return pytree.HANDLERS[fn](tx, list(args), kwargs)
        if fn in higher_order.VMAP_FNS:
            return higher_order.VmapVariable.build(list(args), kwargs)
        if isinstance(fn, types.FunctionType) and higher_order.takes_function(args, kwargs):
            # a graph node cannot take a function (associative_scan(combine_fn, ...)): trace it
            return UserFunctionVariable(fn).call_function(tx, args, kwargs)
        if fn in ALLOWED_IN_GRAPH or (
                (fn in FACTORIES or fn in CONSTANT_OPS or _has_tensor_arg(args, kwargs)) and _spelled_by_name(fn)):
            return tx.output.call(tx, "call_function", fn, list(args), kwargs)
        if all(a.is_python_constant() for a in args) and fn in (torch.device, torch.finfo, torch.iinfo):
            return tx.wrap_constant_result(fn(*[a.as_python_constant() for a in args]))
        if isinstance(fn, types.BuiltinFunctionType) and not _spelled_by_name(fn):
            raise Unsupported("torch_fn", f"{fn.__module__}.{fn.__name__} here is not the function "
                              "that name resolves to (a torch._VF builtin): not put in a graph")
        if isinstance(fn, types.FunctionType):
            # a Python helper inside torch (argument checking, defaults): trace through it
            return UserFunctionVariable(fn).call_function(tx, args, kwargs)
        raise Unsupported("torch_fn", f"{getattr(fn, '__module__', 'torch')}.{getattr(fn, '__name__', fn)} "
                          "called without tensor arguments")

    def var_getattr(self, tx, name):
        if name in ("__name__", "__qualname__", "__module__"):
            return ConstantVariable(getattr(self.fn, name))
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        return cg.load_const(self.fn)

    def __repr__(self):
        return f"TorchFunctionVariable({getattr(self.fn, '__name__', self.fn)})"


def is_torch_callable(value) -> bool:
    mod = getattr(value, "__module__", None) or ""
    if isinstance(value, type):
        return False
    if mod == "torch" or mod.startswith("torch.") or mod.startswith("torch._C"):
        return callable(value)
    self_ = getattr(value, "__self__", None)
    if self_ is not None and getattr(self_, "__name__", "").startswith("torch"):
        return True
    objclass = getattr(value, "__objclass__", None)
    return objclass is torch._C.TensorBase or objclass is torch.Tensor

"""Canonicalization: every torch-level spelling of an op -> one canonical name.

FX graphs spell the same op many ways: `operator.add`, `torch.add`, `Tensor.add`, the method
"add", `x.add_` (in place), `nn.ReLU` modules. `canonicalize(node, gm)` returns a `Canonical`
(name, args, kwargs, inplace) or None when it does not know the op (the node then runs extern).
The canonical names are the keys of lowering.LOWERINGS; arguments keep torch's calling
convention so lowerings bind them like the eager op would. Aten OpOverloads (training graphs,
recorded at the dispatcher) are not matched by name: codegen/aten.py's explicit table maps each
known overload to a canonical name and adapts its arguments; any other overload runs extern.
"""
from __future__ import annotations

import operator
from dataclasses import dataclass
from typing import Any, Callable, Dict, Optional

import torch
import torch.nn as nn
import torch.nn.functional as F

from codegen.aten import aten_canonical, aten_name
from codegen.lowering import LOWERINGS


@dataclass
class Canonical:
    name: str
    args: tuple
    kwargs: dict
    inplace: bool = False       # mutates args[0] (its new value is the result)


OPERATORS: Dict[Callable, str] = {
    operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "div",
    operator.floordiv: "floor_divide", operator.mod: "remainder", operator.pow: "pow",
    operator.neg: "neg", operator.pos: "positive", operator.abs: "abs", operator.lt: "lt",
    operator.le: "le", operator.gt: "gt", operator.ge: "ge", operator.eq: "eq", operator.ne: "ne",
    operator.and_: "bitwise_and", operator.or_: "bitwise_or", operator.xor: "bitwise_xor",
    operator.invert: "bitwise_not", operator.getitem: "getitem",
    operator.iadd: "add_", operator.isub: "sub_", operator.imul: "mul_",
    operator.itruediv: "div_",
}

# torch functions whose eager name differs from the canonical one
RENAMES = {
    "maximum": "maximum", "minimum": "minimum", "special_expit": "sigmoid", "expit": "sigmoid",
    "special_erf": "erf", "special_erfc": "erfc", "special_expm1": "expm1",
    "special_exp2": "exp2", "special_log1p": "log1p", "special_round": "round",
    "special_sinc": "sinc", "special_logit": "logit", "special_xlogy": "xlogy",
    "special_logsumexp": "logsumexp", "special_softmax": "softmax",
    "special_log_softmax": "log_softmax", "vector_norm": "linalg_vector_norm",
    "concat": "cat", "concatenate": "cat", "__and__": "bitwise_and", "__or__": "bitwise_or",
    "__xor__": "bitwise_xor", "__invert__": "bitwise_not",
}

_NAMESPACES = [("", torch), ("", torch.Tensor), ("", F), ("special_", torch.special),
               ("", torch.special)]
# same name, different meaning: never matched by name (torch.embedding takes (weight, indices);
# torch.linalg.* have matrix semantics and other default dims)
EXCLUDED = {torch.embedding}
EXPLICIT = {torch.linalg.vector_norm: "linalg_vector_norm"}


def _build_function_table() -> Dict[Any, str]:
    table: Dict[Any, str] = dict(OPERATORS)
    table.update(EXPLICIT)
    for prefix, ns in _NAMESPACES:
        for attr in dir(ns):
            if attr.startswith("_") and attr not in RENAMES:
                continue
            fn = getattr(ns, attr, None)
            if fn is None or not callable(fn) or any(fn is e for e in EXCLUDED):
                continue
            name = RENAMES.get(prefix + attr, RENAMES.get(attr, attr))
            if name in LOWERINGS:
                table.setdefault(fn, name)
            elif name.endswith("_") and name[:-1] in LOWERINGS and ns is torch.Tensor:
                table.setdefault(fn, name)
            try:
                hash(fn)
            except TypeError:
                table.pop(fn, None)
    return table


_FUNCTIONS: Optional[Dict[Any, str]] = None


def function_table():
    global _FUNCTIONS
    if _FUNCTIONS is None:
        _FUNCTIONS = _build_function_table()
    return _FUNCTIONS


# methods whose argument order differs from the torch function of the same name
METHOD_RENAMES = {"where": "where_method"}


def _method_name(name: str) -> str:
    return METHOD_RENAMES.get(name, RENAMES.get(name, name))


# nn.Module type -> (module, args, kwargs) -> Canonical
def _mod(name, extra: Callable[[nn.Module], dict] = lambda m: {}):
    def rule(m, args, kwargs):
        return Canonical(name, tuple(args), {**kwargs, **extra(m)})
    return rule


MODULE_RULES: Dict[type, Callable] = {
    nn.ReLU: _mod("relu"), nn.GELU: _mod("gelu", lambda m: {"approximate": m.approximate}),
    nn.SiLU: _mod("silu"), nn.Sigmoid: _mod("sigmoid"), nn.Tanh: _mod("tanh"),
    nn.Mish: _mod("mish"), nn.Hardswish: _mod("hardswish"), nn.Hardsigmoid: _mod("hardsigmoid"),
    nn.ReLU6: _mod("relu6"), nn.Softplus: _mod("softplus", lambda m: {"beta": m.beta,
                                                                       "threshold": m.threshold}),
    nn.LeakyReLU: _mod("leaky_relu", lambda m: {"negative_slope": m.negative_slope}),
    nn.ELU: _mod("elu", lambda m: {"alpha": m.alpha}), nn.SELU: _mod("selu"),
    nn.Softmax: _mod("softmax", lambda m: {"dim": m.dim}),
    nn.LogSoftmax: _mod("log_softmax", lambda m: {"dim": m.dim}),
    nn.Identity: _mod("alias"), nn.Flatten: _mod("flatten", lambda m: {
        "start_dim": m.start_dim, "end_dim": m.end_dim}),
    nn.Hardtanh: _mod("hardtanh", lambda m: {"min_val": m.min_val, "max_val": m.max_val}),
}


def _dropout_rule(m, args, kwargs):
    return Canonical("dropout", tuple(args), {"p": m.p, "training": m.training})


def _linear_rule(m, args, kwargs):
    return Canonical("linear", (args[0], m.weight, m.bias), {})


def _layer_norm_rule(m, args, kwargs):
    return Canonical("layer_norm", (args[0], m.normalized_shape, m.weight, m.bias, m.eps), {})


def _rms_norm_rule(m, args, kwargs):
    return Canonical("rms_norm", (args[0], m.normalized_shape, m.weight, m.eps), {})


def _group_norm_rule(m, args, kwargs):
    return Canonical("group_norm", (args[0], m.num_groups, m.weight, m.bias, m.eps), {})


def _batch_norm_rule(m, args, kwargs):
    if m.training or not m.track_running_stats:
        return None
    return Canonical("batch_norm", (args[0], m.running_mean, m.running_var, m.weight, m.bias,
                                    False, 0.0, m.eps), {})


def _embedding_rule(m, args, kwargs):
    if m.max_norm is not None:
        return None
    return Canonical("embedding", (args[0], m.weight), {})


MODULE_RULES.update({
    nn.Dropout: _dropout_rule, nn.Linear: _linear_rule, nn.LayerNorm: _layer_norm_rule,
    nn.GroupNorm: _group_norm_rule, nn.BatchNorm1d: _batch_norm_rule,
    nn.BatchNorm2d: _batch_norm_rule, nn.BatchNorm3d: _batch_norm_rule,
    nn.Embedding: _embedding_rule,
})
if hasattr(nn, "RMSNorm"):
    MODULE_RULES[nn.RMSNorm] = _rms_norm_rule


def _strip_inplace(name: str, kwargs: dict):
    """`relu_` / `inplace=True` -> (base name, inplace flag)."""
    inplace = bool(kwargs.pop("inplace", False))
    if name.endswith("_") and not name.endswith("__") and name[:-1] in LOWERINGS:
        return name[:-1], True
    return name, inplace


def canonicalize(node, gm, args, kwargs) -> Optional[Canonical]:
    """Map an FX call node (with already-evaluated args) to its canonical op, or None."""
    kwargs = dict(kwargs)
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        found = aten_canonical(node.target, args, kwargs)
        return None if found is None else Canonical(*found)
    if node.op == "call_function":
        name = function_table().get(node.target)
        if name is None:
            return None
        name, inplace = _strip_inplace(name, kwargs)
        return Canonical(name, tuple(args), kwargs, inplace)
    if node.op == "call_method":
        name, inplace = _strip_inplace(_method_name(node.target), kwargs)
        if name not in LOWERINGS:
            return None
        return Canonical(name, tuple(args), kwargs, inplace)
    if node.op == "call_module":
        mod = gm.get_submodule(node.target)
        rule = MODULE_RULES.get(type(mod))
        if rule is None:
            return None
        if getattr(mod, "inplace", False):
            return None
        return rule(mod, args, kwargs)
    return None


# canonical ops whose result may share storage with an argument
VIEW_OPS = {"reshape", "view", "flatten", "unflatten", "view_as", "reshape_as", "permute",
            "transpose", "swapaxes", "swapdims", "t", "movedim", "moveaxis", "unsqueeze",
            "squeeze", "expand", "expand_as", "broadcast_to", "select", "narrow", "getitem",
            "split", "split_with_sizes", "chunk", "unbind", "detach", "alias", "contiguous",
            "to", "type_as", "float", "double", "long", "int", "bool", "short", "char", "byte",
            "positive", "resolve_conj", "resolve_neg", "dropout", "diagonal", "conj",
            "broadcast_tensors", "meshgrid", "unsafe_chunk", "unsafe_split", "sum_to_size",
            "aten.slice"}


def _canon_name(node):
    """The canonical name of an FX call node (in-place spellings folded), None if no lowering."""
    if node.op == "call_function" and isinstance(node.target, torch._ops.OpOverload):
        return aten_name(node.target)
    if node.op == "call_function":
        name = function_table().get(node.target)
    elif node.op == "call_method":
        name = _method_name(node.target)
    else:
        return None
    if name is None:
        return None
    if name.endswith("_") and name[:-1] in LOWERINGS:
        name = name[:-1]
    return name if name in LOWERINGS else None

"""Which arguments a torch-level call writes in place, and which argument it returns.

The one record of in-place semantics shared by the executor (dead-code elimination, identity of
an in-place result, metadata of the written tensor) and codegen (its mutation check). It is a
leaf module: it imports only torch and the standard library, so codegen may import it without
the executor.

`mutation_of(kind, target, args, kwargs, module=None) -> Mutation | None` reads an FX-level call
(kind "call_function" | "call_method" | "call_module"; target a callable, a Tensor method name
or a module path; arguments as FX holds them: tensors are nodes or trackers, constants are
Python values). A call mutates when
  * its name ends with one underscore (torch's convention: `x.add_`, `torch.relu_`,
    `Tensor.copy_`, `F.elu_`, `nn.init.zeros_`, `torch._foreach_mul_`), except the operator
    module's keyword-avoiding names (`operator.and_`, `or_`, `not_`, `is_`, `is_not`, `concat`);
  * it is an augmented operator (`operator.iadd`, `Tensor.__iadd__`, ...);
  * it is `operator.setitem` / `Tensor.__setitem__` (writes args[0], returns None);
  * it takes an `inplace` flag (keyword, or positional at the position its Python signature
    gives: `F.relu(x, True)`, `F.dropout(x, p, training, True)`), or is a module whose
    `inplace` attribute is true (`nn.ReLU(inplace=True)`), unless the flag is the constant False;
  * it has an `out=` argument that is not None (writes it, returns it);
  * it updates running statistics (batch norm / instance norm in training mode);
  * it is an aten OpOverload (graphs recorded at the dispatcher) whose schema marks an argument
    written (`Tensor(a!)`: `aten.add_.Tensor`, `aten.bernoulli_.float`, out= overloads,
    `_native_batch_norm_legit`'s running stats); it returns that argument when its one result
    aliases it (`-> Tensor(a!)`). An overload is read only from its schema, never its name;
    `aten.native_batch_norm` (whose schema does not annotate the running statistics it
    updates in training) goes through the running-statistics table.
`Mutation.mutated` names the written arguments (positions and keyword names; a written argument
is "written if it is a tensor": `operator.iadd(n, t)` with an int `n` writes nothing);
`Mutation.returns` names the argument the call returns (the same tensor object), or None;
`Mutation.metadata` is True when the call may change the written tensor's sizes, strides,
offset or autograd flags (t_, unsqueeze_, resize_, requires_grad_, out= resizing ...).

`keyword_inplace(target, args, kwargs)` moves a positional trailing `inplace` flag into the
keywords, the one spelling graphs carry (`F.hardtanh(x, 0.0, 6.0, True)` -> `..., inplace=True`).
"""
from __future__ import annotations

import inspect
import operator
from typing import Any, Optional, Union

import torch
import torch.nn.functional as F

from pydynamo.records import record

Arg = Union[int, str]   # a position in args or a keyword name


@record     # a frozen dataclass without generated methods (records.py: ~0.8 ms of a warm hit)
class Mutation:
    mutated: tuple          # the arguments written in place (positions / keyword names)
    returns: Optional[Arg]  # the argument the call returns (same object), None: something else
    metadata: bool = False  # may change the written tensor's layout or autograd flags

    def written(self, args, kwargs) -> list:
        """The values of the written arguments, lists and tuples flattened (foreach ops, out=
        tuples)."""
        out = []
        for a in self.mutated:
            v = _arg(a, args, kwargs)
            out += _flatten(v)
        return out

    def returned(self, args, kwargs):
        """The value of the argument the call returns (None when it returns something else)."""
        return None if self.returns is None else _arg(self.returns, args, kwargs)


def _arg(a: Arg, args, kwargs):
    if isinstance(a, int):
        return args[a] if a < len(args) else None
    return kwargs.get(a)


def _flatten(v) -> list:
    items = getattr(v, "items", None)  # an executor list/tuple tracker
    if isinstance(v, (list, tuple)):
        items = v
    if isinstance(items, (list, tuple)):
        return [x for i in items for x in _flatten(i)]
    return [] if v is None else [v]


# operator-module functions named with a trailing underscore only to avoid a keyword
_NOT_INPLACE = {operator.and_, operator.or_, operator.not_, operator.is_, operator.is_not,
                operator.concat}
_AUGMENTED = {getattr(operator, "i" + n) for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
    "rshift", "matmul")}
_AUGMENTED_METHODS = {f"__i{n}__" for n in (
    "add", "sub", "mul", "truediv", "div", "floordiv", "mod", "pow", "and", "or", "xor", "lshift",
    "rshift", "matmul")}
_SETITEM = {operator.setitem, torch.Tensor.__setitem__}

# in-place ops that change the written tensor's sizes/strides/offset or autograd flags
_METADATA_OPS = {"t_", "transpose_", "swapdims_", "swapaxes_", "squeeze_", "unsqueeze_",
                 "resize_", "resize_as_", "as_strided_", "set_", "requires_grad_", "detach_",
                 "_coalesced_", "share_memory_"}

# function -> (positions of the written running statistics, position and keyword of the
# training flag, its default)
_STATS = {
    F.batch_norm: ((1, 2), 5, "training", False),
    torch.batch_norm: ((3, 4), 5, "training", None),
    F.instance_norm: ((1, 2), 5, "use_input_stats", True),
    torch.instance_norm: ((3, 4), 5, "use_input_stats", None),
}
for _n in ("native_batch_norm", "_native_batch_norm_legit"):
    if hasattr(torch, _n):
        _STATS[getattr(torch, _n)] = ((3, 4), 5, "training", None)
if hasattr(torch, "_batch_norm_with_update"):
    _STATS[torch._batch_norm_with_update] = ((3, 4), None, None, True)
# aten overloads (input, weight, bias, running_mean, running_var, training, ...)
for _n in ("native_batch_norm", "cudnn_batch_norm", "miopen_batch_norm"):
    if hasattr(torch.ops.aten, _n):
        _STATS[getattr(torch.ops.aten, _n).default] = ((3, 4), 5, "training", None)


def _name(target) -> str:
    if isinstance(target, str):
        return target
    return getattr(target, "__name__", "") or ""


def _hashable_in(target, table) -> bool:
    try:
        return target in table
    except TypeError:
        return False


_INPLACE_POS: dict = {}


def inplace_position(target) -> Optional[int]:
    """The position of `target`'s `inplace` parameter (None: it has none, or no Python
    signature to say so)."""
    try:
        return _INPLACE_POS[target]
    except KeyError:
        pass
    except TypeError:
        return None
    pos = None
    if callable(target) and not isinstance(target, type):
        try:
            params = list(inspect.signature(target).parameters.values())
        except (TypeError, ValueError):
            params = []
        for i, p in enumerate(params):
            if p.name == "inplace" and p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD):
                pos = i
    _INPLACE_POS[target] = pos
    return pos


def _inplace_flag(target, args, kwargs) -> Any:
    if "inplace" in kwargs:
        return kwargs["inplace"]
    pos = inplace_position(target)
    if pos is not None and pos < len(args):
        return args[pos]
    return False


def keyword_inplace(target, args: tuple, kwargs: dict):
    """(args, kwargs) with a positional trailing `inplace` flag moved into the keywords."""
    pos = inplace_position(target)
    if pos is None or len(args) != pos + 1 or "inplace" in kwargs:
        return args, kwargs
    return tuple(args[:pos]), dict(kwargs, inplace=args[pos])


def _is_false(v) -> bool:
    return v is False or v is None or (type(v) is int and v == 0)


def mutation_of(kind: str, target, args=(), kwargs=None, module=None) -> Optional[Mutation]:
    """What the call writes in place (None: nothing). See the module docstring."""
    kwargs = kwargs or {}
    if kind == "call_module":
        if module is not None and getattr(module, "inplace", False) is True:
            return Mutation((0,), 0)
        if isinstance(module, torch.nn.modules.batchnorm._BatchNorm) and module.training and \
                module.track_running_stats:
            return Mutation((), None)   # writes its own buffers, not an argument
        return None
    if kind not in ("call_function", "call_method"):
        return None
    if kind == "call_function" and isinstance(target, torch._ops.OpOverload):
        return _overload_mutation(target, args, kwargs)
    out = kwargs.get("out")
    if out is not None:
        return Mutation(("out",), "out", metadata=True)
    if kind == "call_function":
        if _hashable_in(target, _SETITEM):
            return Mutation((0,), None)
        if _hashable_in(target, _AUGMENTED):
            return Mutation((0,), 0)
        if _hashable_in(target, _NOT_INPLACE):
            return None
        stats = _STATS.get(target) if _hashable_in(target, _STATS) else None
        if stats is not None:
            return _stats_mutation(stats, args, kwargs)
    name = _name(target)
    if name in _AUGMENTED_METHODS:
        return Mutation((0,), 0)
    if name == "__setitem__":
        return Mutation((0,), None)
    if name.endswith("_") and not name.endswith("__"):
        if name.startswith("_foreach_"):
            return Mutation((0,), None)
        return Mutation((0,), 0, metadata=name in _METADATA_OPS)
    if kind == "call_function" and not _is_false(_inplace_flag(target, args, kwargs)):
        return Mutation((0,), 0)
    return None


def _overload_mutation(op, args, kwargs) -> Optional[Mutation]:
    """An aten overload's writes, from its schema's alias annotations (module docstring)."""
    stats = _STATS.get(op)
    if stats is not None:
        return _stats_mutation(stats, args, kwargs)
    schema = op._schema
    written, alias_sets, metadata = [], {}, op._schema.name.split("::")[-1] in _METADATA_OPS
    for i, a in enumerate(schema.arguments):
        if a.alias_info is None or not a.alias_info.is_write:
            continue
        if a.kwarg_only or i >= len(args):
            if a.name not in kwargs:
                continue            # an optional written argument not passed
            key, metadata = a.name, metadata or a.kwarg_only     # out= may resize
        else:
            key = i
        written.append(key)
        alias_sets[frozenset(a.alias_info.before_set)] = key
    if not written:
        return None
    returns = None
    if len(schema.returns) == 1 and schema.returns[0].alias_info is not None:
        returns = alias_sets.get(frozenset(schema.returns[0].alias_info.before_set))
    return Mutation(tuple(written), returns, metadata)


def _stats_mutation(stats, args, kwargs) -> Optional[Mutation]:
    written, pos, key, default = stats
    training = default
    if key is not None:
        training = kwargs.get(key, args[pos] if pos < len(args) else default)
    if _is_false(training):
        return None
    present = tuple(p for p in written if p < len(args) and args[p] is not None)
    return Mutation(present, None) if present else None


def node_mutation(node, gm=None) -> Optional[Mutation]:
    """`mutation_of` for an FX node (gm resolves call_module targets)."""
    module = None
    if node.op == "call_module" and gm is not None:
        module = gm.get_submodule(node.target)
    return mutation_of(node.op, node.target, node.args, node.kwargs, module)

"""torch.utils._pytree over trackers: tree_flatten / tree_unflatten / tree_leaves / tree_map.

torch's own helpers (associative_scan, torch.func wrappers) flatten their arguments with
torch.utils._pytree, whose registry and TreeSpec objects are not traced values. These calls are
answered here instead: the traced structure is mirrored by a stand-in of real containers whose
leaves are `_Leaf(i)` markers, torch's own function flattens or rebuilds the stand-in, and the
markers are mapped back to the trackers. So the TreeSpec is torch's real one (a constant) and the
structure is exactly torch's. Handled nodes: tuple, list, dict (plain trackers of them) and
None (a leaf or a node, as torch's pytree has it); any other registered pytree node (namedtuple, OrderedDict, ModelOutput, ...) or an
`is_leaf` argument is Unsupported.
"""
from __future__ import annotations

import torch.utils._pytree as _pytree

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.containers import ConstDictVariable, ListVariable, TupleVariable


class _Leaf:
    """A stand-in leaf (not a registered pytree node)."""
    __slots__ = ("i",)

    def __init__(self, i: int):
        self.i = i


def _stand_in(tx, v: VariableTracker, leaves: list):
    if type(v) is TupleVariable:
        return tuple(_stand_in(tx, x, leaves) for x in v.items)
    if type(v) is ListVariable:
        return [_stand_in(tx, x, leaves) for x in v.items]
    if type(v) is ConstDictVariable and v.cls is dict:
        return {k: _stand_in(tx, x, leaves) for k, x in v.items.items()}
    if isinstance(v, ConstantVariable) and v.value is None:
        return None     # a leaf or a node: torch's pytree says (it changed across versions)
    try:
        cls = v.python_type()
    except Unsupported:
        cls = None
    if cls is None or cls in _pytree.SUPPORTED_NODES or _pytree.is_namedtuple_class(cls):
        raise Unsupported("pytree", f"torch.utils._pytree over a {v.type_name()} value")
    leaves.append(v)
    return _Leaf(len(leaves) - 1)


def _from_stand_in(tx, s, leaves: list) -> VariableTracker:
    if isinstance(s, _Leaf):
        return leaves[s.i]
    if type(s) is tuple:
        return TupleVariable([_from_stand_in(tx, x, leaves) for x in s])
    if type(s) is list:
        return ListVariable([_from_stand_in(tx, x, leaves) for x in s])
    if type(s) is dict:
        return ConstDictVariable({k: _from_stand_in(tx, x, leaves) for k, x in s.items()})
    if s is None:
        return ConstantVariable(None)
    raise Unsupported("pytree", f"torch.utils._pytree rebuilding a {type(s).__qualname__}")


def _no_is_leaf(kwargs, name):
    is_leaf = kwargs.get("is_leaf")
    if is_leaf is not None and not (isinstance(is_leaf, ConstantVariable) and is_leaf.value is None):
        raise Unsupported("pytree", f"torch.utils._pytree.{name} with is_leaf")


def _flatten(tx, tree):
    leaves: list = []
    real, spec = _pytree.tree_flatten(_stand_in(tx, tree, leaves))
    return [leaves[x.i] if isinstance(x, _Leaf) else ConstantVariable(x) for x in real], spec


def tree_flatten(tx, args, kwargs):
    _no_is_leaf(kwargs, "tree_flatten")
    leaves, spec = _flatten(tx, args[0])
    return TupleVariable([ListVariable(leaves), ObjectVariable(spec)])


def tree_leaves(tx, args, kwargs):
    _no_is_leaf(kwargs, "tree_leaves")
    return ListVariable(_flatten(tx, args[0])[0])


def tree_unflatten(tx, args, kwargs):
    leaves = tx.unpack(args[0])
    spec = (args[1] if len(args) > 1 else kwargs["treespec"]).as_python_constant()
    if not isinstance(spec, _pytree.TreeSpec) or spec.num_leaves != len(leaves):
        raise Unsupported("pytree", "torch.utils._pytree.tree_unflatten: leaves and spec disagree")
    return _from_stand_in(tx, _pytree.tree_unflatten([_Leaf(i) for i in range(len(leaves))], spec), leaves)


def tree_map(tx, args, kwargs):
    _no_is_leaf(kwargs, "tree_map")
    if len(args) != 2:
        raise Unsupported("pytree", "torch.utils._pytree.tree_map over several trees")
    fn, tree = args
    leaves, spec = _flatten(tx, tree)
    mapped = [fn.call_function(tx, [leaf], {}) for leaf in leaves]
    return _from_stand_in(tx, _pytree.tree_unflatten([_Leaf(i) for i in range(len(mapped))], spec), mapped)


HANDLERS = {_pytree.tree_flatten: tree_flatten, _pytree.tree_leaves: tree_leaves,
            _pytree.tree_unflatten: tree_unflatten, _pytree.tree_map: tree_map}

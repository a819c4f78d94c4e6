"""copy.copy / copy.deepcopy of traced values, as the copy module does them, without tracing it.

Inlining copy.py would need id()-keyed memo dicts and `__reduce_ex__`; these handlers copy the
trackers instead. Supported: Python constants and immutable objects (returned as they are),
tuples (deepcopy returns the same tuple when every item copies to itself, as CPython does),
lists, dicts with constant keys (dict / OrderedDict / defaultdict), sets, and instances of plain
classes (object.__new__, the generic __getattribute__, no __copy__ / __deepcopy__ / __reduce__ /
__getstate__ / __setstate__ / __slots__ of their own): a new object whose `__dict__` holds the
same (copy) or copied (deepcopy) values; the attribute names of an object found outside the
frame are guarded. Tensors, modules and anything else are Unsupported (a graph break): never a
copy that could differ from copy.py's.
"""
from __future__ import annotations

import copy

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.builtins import HANDLERS, BuiltinVariable
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.containers import (ConstDictVariable, ListVariable, SetVariable,
                                                    SizeVariable, TupleVariable)
from pydynamo.executor.variables.functions import BaseUserFunctionVariable
from pydynamo.executor.variables.user_objects import (NamedTupleVariable, UserDefinedObjectVariable,
                                                      plain_metaclass)
from pydynamo.guards import GuardKind
from pydynamo.sources import DictItemSource, PlainAttrSource

_OBJECT_HOOKS = ("__copy__", "__deepcopy__", "__reduce__", "__reduce_ex__", "__getstate__",
                 "__setstate__", "__new__", "__slots__")
# what copy.py looks up on the object itself (through its class's __getattribute__), and what it
# must find: copy's own hook absent, object's reduction
_LOOKED_UP = {"__copy__": None, "__deepcopy__": None, "__setstate__": None,
              "__reduce_ex__": object.__reduce_ex__, "__getstate__": object.__getstate__}


def _plain_class(cls) -> bool:
    if not plain_metaclass(type(cls)) or isinstance(cls, type) and issubclass(cls, (dict, list, tuple, set)):
        return False
    for name in _OBJECT_HOOKS:
        for klass in cls.__mro__:
            if name in vars(klass):
                if klass is not object:
                    return False
                break
    return True


def _copyable(v) -> bool:
    """A plain class (see above); a class of its own `__getattribute__` (config classes that
    alias attribute names) only for an object found outside the frame, whose lookups of copy's
    hooks are made now, through that __getattribute__, and must find what a plain class's
    would (a `__setattr__` of its own does not matter: copy.py fills `__dict__` directly)."""
    if type(v) is not UserDefinedObjectVariable or not _plain_class(v.cls):
        return False
    if v.cls.__getattribute__ is object.__getattribute__:
        return True
    if v.value is None or v.source is None:
        return False
    for name, want in _LOOKED_UP.items():
        got = getattr(v.value, name, None)
        if want is None and got is not None or \
                want is not None and not (getattr(got, "__self__", None) is v.value and got == want.__get__(v.value)):
            return False
    return True


def _object_attrs(tx, obj: UserDefinedObjectVariable) -> dict:
    """The object's `__dict__` as trackers (its current contents, traced writes included)."""
    out = dict(obj.attrs)
    if obj.value is not None:
        if obj.source is None:
            raise Unsupported("copy", f"copy of a {obj.cls.__name__} without a source")
        # copy.py reads the instance dict as it is (object.__getstate__), past any
        # __getattribute__ of the class: so do the guards
        real = object.__getattribute__(obj.value, "__dict__")
        src = PlainAttrSource(obj.source, "__dict__")
        tx.add_guard(src, GuardKind.DICT_KEYS, tuple(real))
        out = {n: out[n] if n in out else tx.wrap(real[n], DictItemSource(src, n)) for n in {**real, **out}}
    return out


def _new_object(tx, cls, attrs: dict) -> UserDefinedObjectVariable:
    new = UserDefinedObjectVariable(None, cls=cls)
    tx.side_effects.track_new(new)
    new.attrs.update(attrs)
    return new


def _immutable(v: VariableTracker) -> bool:
    return isinstance(v, (ConstantVariable, ObjectVariable, BuiltinVariable, BaseUserFunctionVariable))


def shallow_copy(tx, v: VariableTracker) -> VariableTracker:
    if _immutable(v) or type(v) in (TupleVariable, SizeVariable, NamedTupleVariable):
        return v
    if type(v) is ListVariable:
        return ListVariable(list(v.items))
    if type(v) is ConstDictVariable:
        return v.call_method(tx, "copy", [], {})
    if type(v) is SetVariable:
        return v if v.cls is frozenset else SetVariable(list(v.items.values()), v.cls)
    if _copyable(v):
        return _new_object(tx, v.cls, _object_attrs(tx, v))
    raise Unsupported("copy", f"copy.copy of {v}")


def deep_copy(tx, v: VariableTracker, memo: dict) -> VariableTracker:
    if id(v) in memo:
        return memo[id(v)]
    if _immutable(v):
        return v
    if type(v) in (TupleVariable, NamedTupleVariable):
        items = [deep_copy(tx, i, memo) for i in v.items]
        if all(a is b for a, b in zip(items, v.items)):
            return v
        out = TupleVariable(items) if type(v) is TupleVariable else NamedTupleVariable(items, v.cls)
    elif type(v) is ListVariable:
        out = memo[id(v)] = ListVariable([])
        out.items.extend(deep_copy(tx, i, memo) for i in v.items)
    elif type(v) is ConstDictVariable:
        factory = None if v.default_factory is None else deep_copy(tx, v.default_factory, memo)
        out = memo[id(v)] = ConstDictVariable({}, v.cls, default_factory=factory)
        for k, val in v.items.items():
            out.items[k] = deep_copy(tx, val, memo)
    elif type(v) is SetVariable:
        out = SetVariable(list(v.items.values()), v.cls)  # items are constants
    elif _copyable(v):
        out = memo[id(v)] = _new_object(tx, v.cls, {})
        for k, val in _object_attrs(tx, v).items():
            out.attrs[k] = deep_copy(tx, val, memo)
    else:
        raise Unsupported("copy", f"copy.deepcopy of {v}")
    memo[id(v)] = out
    return out


def _copy(tx, x):
    return shallow_copy(tx, x)


def _deepcopy(tx, x, memo=None):
    if memo is not None and not (memo.is_python_constant() and memo.as_python_constant() is None):
        raise Unsupported("copy", "copy.deepcopy with a memo argument")
    return deep_copy(tx, x, {})


# builtins' dispatch table learns copy's functions here (this module sits above builtins and
# user_objects; the builder imports it before any call is traced)
HANDLERS[copy.copy] = _copy
HANDLERS[copy.deepcopy] = _deepcopy

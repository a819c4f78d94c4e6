"""Containers: list, tuple, namedtuple, torch.Size, slice, dict (OrderedDict, defaultdict), set.

Items are trackers. Lists, dicts and sets are mutated in place; one that came from outside the
frame (has a source) is reported to side_effects on its first mutation so the output code
replays its final contents. Dict/set keys must be Python constants (hashable at trace time).
"""
from __future__ import annotations

import collections
import operator

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker, raises_here
from pydynamo.executor.variables.constant import ConstantVariable


class BaseListVariable(VariableTracker):
    py_type: type = list

    def __init__(self, items, source=None):
        super().__init__(source)
        self.items = list(items)

    def python_type(self):
        return self.py_type

    def as_python_constant(self):
        return self.py_type([i.as_python_constant() for i in self.items])

    def truthy(self, tx):
        return len(self.items) > 0

    def has_unpack_var_sequence(self, tx):
        return True

    def unpack_var_sequence(self, tx):
        return list(self.items)

    def new(self, items):
        return type(self)(items)

    def getitem(self, tx, key: VariableTracker):
        idx = key.as_python_constant() if not isinstance(key, SliceVariable) else key.as_python_constant()
        if isinstance(idx, slice):
            return self.new(self.items[idx])
        try:
            return self.items[operator.index(idx)]
        except IndexError:
            raise raises_here("index_error", f"index {idx} out of range for {self.py_type.__name__}") from None

    def call_method(self, tx, name, args, kwargs):
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "__len__":
            return ConstantVariable(len(self.items))
        if name == "__contains__":
            return tx.contains(self.items, args[0])
        if name in ("index", "count"):
            vals = [i.as_python_constant() for i in self.items]
            return ConstantVariable(getattr(vals, name)(*[a.as_python_constant() for a in args]))
        if name == "__iter__":
            return self.get_iter(tx)
        raise Unsupported("list_method", f"{self.py_type.__name__}.{name}")

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        inner = ", ".join(cg.reconstruct(i) for i in self.items)
        if self.py_type is tuple:
            return f"({inner}{',' if len(self.items) == 1 else ''})"
        return f"[{inner}]"

    def __repr__(self):
        return f"{type(self).__name__}({self.items})"


class TupleVariable(BaseListVariable):
    py_type = tuple


class SizeVariable(TupleVariable):
    py_type = torch.Size

    def reconstruct(self, cg):
        return f"{cg.load_const(torch.Size)}([{', '.join(cg.reconstruct(i) for i in self.items)}])"

    def call_method(self, tx, name, args, kwargs):
        if name == "numel":
            n = 1
            for i in self.items:
                n *= i.as_python_constant()
            return ConstantVariable(n)
        return super().call_method(tx, name, args, kwargs)


class ListVariable(BaseListVariable):
    py_type = list

    def call_method(self, tx, name, args, kwargs):
        items = self.items
        mutating = {"append", "extend", "insert", "pop", "remove", "clear", "reverse", "sort",
                    "__setitem__", "__delitem__", "__iadd__"}
        if name in mutating:
            tx.side_effects.mutate(self)
        if name == "append":
            items.append(args[0])
        elif name == "extend" or name == "__iadd__":
            items.extend(tx.unpack(args[0]))
            return self if name == "__iadd__" else ConstantVariable(None)
        elif name == "insert":
            items.insert(args[0].as_python_constant(), args[1])
        elif name == "pop":
            return items.pop(*(a.as_python_constant() for a in args))
        elif name == "remove":
            for i, it in enumerate(items):
                if tx.equal(it, args[0]):
                    del items[i]
                    break
            else:
                raise Unsupported("value_error", "list.remove(x): x not in list")
        elif name == "clear":
            items.clear()
        elif name == "reverse":
            items.reverse()
        elif name == "sort":
            key = kwargs.get("key")
            reverse = kwargs.get("reverse", ConstantVariable(False)).as_python_constant()
            keys = [(key.call_function(tx, [i], {}) if key is not None else i).as_python_constant() for i in items]
            order = sorted(range(len(items)), key=lambda j: keys[j], reverse=reverse)
            items[:] = [items[j] for j in order]
        elif name == "__setitem__":
            idx = args[0].as_python_constant()
            if isinstance(idx, slice):
                items[idx] = tx.unpack(args[1])
            else:
                items[idx] = args[1]
        elif name == "__delitem__":
            del items[args[0].as_python_constant()]
        elif name == "copy":
            return ListVariable(list(items))
        else:
            return super().call_method(tx, name, args, kwargs)
        return ConstantVariable(None)


class SliceVariable(VariableTracker):
    def __init__(self, items):
        super().__init__()
        self.items = list(items)  # start, stop, step

    def python_type(self):
        return slice

    def as_python_constant(self):
        return slice(*[i.as_python_constant() for i in self.items])

    def var_getattr(self, tx, name):
        return self.items[("start", "stop", "step").index(name)]

    def reconstruct(self, cg):
        return f"slice({', '.join(cg.reconstruct(i) for i in self.items)})"


class ConstDictVariable(VariableTracker):
    """dict / OrderedDict / defaultdict with constant keys."""

    def __init__(self, items: dict, cls=dict, source=None, default_factory=None):
        super().__init__(source)
        self.items = dict(items)
        self.cls = cls
        self.default_factory = default_factory  # a tracker, for defaultdict

    def python_type(self):
        return self.cls

    def as_python_constant(self):
        items = {k: v.as_python_constant() for k, v in self.items.items()}
        if self.cls is collections.defaultdict:
            factory = self.default_factory
            return self.cls(None if factory is None else factory.as_python_constant(), items)
        return self.cls(items)

    def truthy(self, tx):
        return len(self.items) > 0

    def has_unpack_var_sequence(self, tx):
        return True

    def unpack_var_sequence(self, tx):
        return [tx.wrap_constant_result(k) for k in self.items]

    def var_getattr(self, tx, name):
        if name == "default_factory" and self.cls is collections.defaultdict:
            return self.default_factory if self.default_factory is not None else ConstantVariable(None)
        return super().var_getattr(tx, name)

    def _key(self, v: VariableTracker):
        try:
            return v.as_python_constant()
        except Unsupported:
            raise Unsupported("dict_key", f"dict key {v} is not a Python constant") from None

    def getitem(self, tx, key):
        k = self._key(key)
        if k in self.items:
            return self.items[k]
        if self.default_factory is not None:
            tx.side_effects.mutate(self)
            val = self.default_factory.call_function(tx, [], {})
            self.items[k] = val
            return val
        raise Unsupported("key_error", f"KeyError: {k!r}")

    def call_method(self, tx, name, args, kwargs):
        items = self.items
        if name in ("__setitem__", "update", "pop", "setdefault", "clear", "__delitem__", "popitem", "move_to_end"):
            tx.side_effects.mutate(self)
        if name == "__getitem__":
            return self.getitem(tx, args[0])
        if name == "get":
            k = self._key(args[0])
            return items.get(k, args[1] if len(args) > 1 else ConstantVariable(None))
        if name == "__setitem__":
            items[self._key(args[0])] = args[1]
        elif name == "__delitem__":
            del items[self._key(args[0])]
        elif name == "update":
            for a in args:
                if isinstance(a, ConstDictVariable):
                    items.update(a.items)
                elif getattr(a, "is_dict_subclass", False):
                    items.update(a.mapping_items(tx))
                else:
                    for pair in tx.unpack(a):
                        k, v = tx.unpack(pair)
                        items[self._key(k)] = v
            for k, v in kwargs.items():
                items[k] = v
        elif name == "pop":
            k = self._key(args[0])
            if k in items:
                return items.pop(k)
            if len(args) > 1:
                return args[1]
            raise Unsupported("key_error", f"KeyError: {k!r}")
        elif name == "setdefault":
            k = self._key(args[0])
            if k not in items:
                items[k] = args[1] if len(args) > 1 else ConstantVariable(None)
            return items[k]
        elif name == "clear":
            items.clear()
        elif name == "move_to_end" and self.cls is collections.OrderedDict:
            k = self._key(args[0])
            last = (args[1] if len(args) > 1 else kwargs.get("last", ConstantVariable(True))).as_python_constant()
            v = items.pop(k)
            if last:
                items[k] = v
            else:
                self.items = {k: v, **items}
        elif name == "popitem":
            if not items:
                raise Unsupported("key_error", "popitem(): dictionary is empty")
            last = (args[0] if args else kwargs.get("last", ConstantVariable(True))).as_python_constant()
            k = next(reversed(items)) if last else next(iter(items))
            return TupleVariable([tx.wrap_constant_result(k), items.pop(k)])
        elif name in ("keys", "values", "items"):
            return DictViewVariable(self, name, tx.wrap_constant_result)
        elif name == "__contains__":
            return ConstantVariable(self._key(args[0]) in items)
        elif name == "__len__":
            return ConstantVariable(len(items))
        elif name == "copy":
            return ConstDictVariable(items, self.cls, default_factory=self.default_factory)
        elif name == "__iter__":
            return self.get_iter(tx)
        else:
            raise Unsupported("dict_method", f"{self.cls.__name__}.{name}")
        return ConstantVariable(None)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        body = ", ".join(f"{cg.load_const(k)}: {cg.reconstruct(v)}" for k, v in self.items.items())
        if self.cls is dict:
            return "{" + body + "}"
        if self.cls is collections.defaultdict:
            factory = "None" if self.default_factory is None else cg.reconstruct(self.default_factory)
            return f"{cg.load_const(self.cls)}({factory}, {{{body}}})"
        return f"{cg.load_const(self.cls)}({{{body}}})"

    def __repr__(self):
        return f"ConstDictVariable({self.cls.__name__}, {list(self.items)})"


class DictViewVariable(TupleVariable):
    """dict.keys()/values()/items(): a live view of its dict tracker (a write to the dict after
    the view was made shows through it, as in Python); iterates like the view; compares like the
    real view (keys and items are set-like) when its contents are constants. Leaving the graph it
    is rebuilt as `<the dict>.<kind>()`, still live."""

    def __init__(self, mapping: "ConstDictVariable", kind: str, wrap_key):
        VariableTracker.__init__(self)
        self.mapping, self.kind, self.wrap_key = mapping, kind, wrap_key

    @property
    def items(self):
        d = self.mapping.items
        if self.kind == "keys":
            return [self.wrap_key(k) for k in d]
        if self.kind == "values":
            return list(d.values())
        return [TupleVariable([self.wrap_key(k), v]) for k, v in d.items()]

    def new(self, items):
        return TupleVariable(items)

    def python_type(self):
        return type(getattr({}, self.kind)())

    def as_python_constant(self):
        if self.kind == "keys":
            return dict.fromkeys(i.as_python_constant() for i in self.items).keys()
        if self.kind == "items":
            return dict(i.as_python_constant() for i in self.items).items()
        raise Unsupported("dict_values", "dict.values() used as a constant")

    def call_method(self, tx, name, args, kwargs):
        if name == "__contains__" and self.kind == "keys":
            return self.mapping.call_method(tx, "__contains__", args, kwargs)
        if name == "__reversed__":
            raise Unsupported("dict_view_method", f"reversed() of dict_{self.kind}")
        return super().call_method(tx, name, args, kwargs)

    def getitem(self, tx, key):
        raise Unsupported("type_error", f"'dict_{self.kind}' object is not subscriptable")

    def reconstruct(self, cg):
        return f"{cg.reconstruct(self.mapping)}.{self.kind}()"

    def __repr__(self):
        return f"DictViewVariable({self.kind} of {self.mapping})"


class SetVariable(VariableTracker):
    """set / frozenset of constants (order of iteration is the real set's)."""

    def __init__(self, items, cls=set, source=None):
        super().__init__(source)
        self.cls = cls
        self.items: dict = {}
        for i in items:
            self.items[i.as_python_constant()] = i

    def python_type(self):
        return self.cls

    def as_python_constant(self):
        return self.cls(self.items)

    def truthy(self, tx):
        return len(self.items) > 0

    def has_unpack_var_sequence(self, tx):
        return True

    def unpack_var_sequence(self, tx):
        return [self.items[k] for k in set(self.items)]  # the real set's iteration order

    def call_method(self, tx, name, args, kwargs):
        if name in ("add", "discard", "remove", "update", "clear", "pop"):
            if self.cls is frozenset:
                raise Unsupported("frozenset", f"frozenset has no {name}")
            tx.side_effects.mutate(self)
        if name == "add":
            self.items.setdefault(args[0].as_python_constant(), args[0])
        elif name in ("discard", "remove"):
            k = args[0].as_python_constant()
            if k not in self.items and name == "remove":
                raise Unsupported("key_error", f"KeyError: {k!r}")
            self.items.pop(k, None)
        elif name == "update":
            for a in args:
                for i in tx.unpack(a):
                    self.items.setdefault(i.as_python_constant(), i)
        elif name == "clear":
            self.items.clear()
        elif name == "__contains__":
            return ConstantVariable(args[0].as_python_constant() in self.items)
        elif name == "__len__":
            return ConstantVariable(len(self.items))
        elif name in ("union", "intersection", "difference", "symmetric_difference", "issubset",
                      "issuperset", "isdisjoint", "copy", "__or__", "__and__", "__sub__", "__xor__"):
            res = getattr(self.as_python_constant(), name)(*[a.as_python_constant() for a in args])
            return tx.wrap_constant_result(res)
        else:
            raise Unsupported("set_method", f"{self.cls.__name__}.{name}")
        return ConstantVariable(None)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        return f"{cg.load_const(self.cls)}([{', '.join(cg.reconstruct(v) for v in self.items.values())}])"

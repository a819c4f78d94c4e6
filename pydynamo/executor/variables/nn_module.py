"""nn.Module instances: parameters and buffers as graph inputs reached through their source,
submodules as trackers, calls inlined (forward pre-hooks, forward, forward hooks).

The module object itself is ID_MATCH-guarded by the builder; what the trace reads from it is
guarded through its own source (`L['self'].fc.weight` reads `_parameters['weight']` directly).
Registered hooks are guarded by the keys of the hook dicts, so adding or removing one recompiles.
Sequential / ModuleList / ModuleDict support len, indexing, iteration and items/keys/values.
"""
from __future__ import annotations

import inspect
import types

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor import regions
from pydynamo.executor.variables.base import ListIteratorVariable, MethodProxyVariable, VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.executor.variables.user_objects import class_attribute
from pydynamo.guards import GuardKind
from pydynamo.sources import AttrSource, ModuleDictSource


_CONTAINERS = (torch.nn.Sequential, torch.nn.ModuleList, torch.nn.ModuleDict, torch.nn.ParameterList,
               torch.nn.ParameterDict)
_SPECIAL_METHODS = {"parameters", "buffers", "children", "modules", "named_parameters", "named_buffers",
                    "named_children", "named_modules"}
_CONTAINER_METHODS = {"__len__", "__iter__", "__getitem__", "__contains__", "keys", "values", "items"}


class NNModuleVariable(VariableTracker):
    def __init__(self, module: torch.nn.Module, source=None):
        super().__init__(source)
        self.value = module
        self.attrs: dict = {}   # plain attributes stored while tracing (replayed after the graph)

    def python_type(self):
        return type(self.value)

    def truthy(self, tx):
        if hasattr(type(self.value), "__len__"):
            return len(self.value) > 0
        return True

    def _src(self, registry, name):
        return ModuleDictSource(self.source, registry, name) if self.source is not None else None

    def has_unpack_var_sequence(self, tx):
        return isinstance(self.value, _CONTAINERS)

    def unpack_var_sequence(self, tx):
        return self.call_method(tx, "__iter__", [], {}).unpack_var_sequence(tx)

    def var_getattr(self, tx, name):
        if name in self.attrs:
            return self.attrs[name]
        m = self.value
        d = m.__dict__
        if name not in d and (name in _SPECIAL_METHODS or
                              (name in _CONTAINER_METHODS and isinstance(m, _CONTAINERS))):
            return MethodProxyVariable(self, name)
        for registry in ("_parameters", "_buffers", "_modules"):
            reg = d.get(registry)
            if reg is not None and name in reg:
                value = reg[name]
                if value is None:
                    return ConstantVariable(None)
                return tx.wrap(value, self._src(registry, name))
        if name in d:
            return tx.wrap(d[name], AttrSource(self.source, name) if self.source is not None else None)
        return class_attribute(tx, self, type(m), name)

    def setattr(self, tx, name, value):
        d = self.value.__dict__
        for registry in ("_parameters", "_buffers"):
            reg = d.get(registry)
            if reg is not None and reg.get(name) is not None and \
                    tx.wrap(reg[name], self._src(registry, name)) is value:
                return None     # `self.count += 1`: the in-place op wrote the tensor already
        in_registry = any(name in (d.get(r) or {}) for r in ("_parameters", "_buffers", "_modules"))
        if self.source is not None and not in_registry and type(value) is ConstantVariable and \
                not hasattr(type(inspect.getattr_static(type(self.value), name, None)), "__set__"):
            # a plain Python attribute (a counter, a cached length, an instance value over a
            # class default such as transformers' `main_input_name`; not a property or other
            # data descriptor): Module.__setattr__ stores it in __dict__ like
            # object.__setattr__, which the replay after the graph does
            tx.side_effects.store_attr(self, name, value)
            self.attrs[name] = value
            return None
        raise Unsupported("module_setattr", f"setting attribute {name!r} of an nn.Module inside the graph")

    def call_function(self, tx, args, kwargs):
        m = self.value
        if type(m).__call__ is not torch.nn.Module.__call__:
            return tx.inline_method(self, type(m).__call__, args, kwargs)
        self._guard_hooks(tx)
        if m._forward_pre_hooks or m._backward_hooks or m._backward_pre_hooks or \
                torch.nn.modules.module._global_forward_hooks or torch.nn.modules.module._global_forward_pre_hooks:
            if m._backward_hooks or m._backward_pre_hooks:
                raise Unsupported("module_hooks", "backward hooks on a module")
        for hid, hook in list(m._forward_pre_hooks.items()):
            if hid in m._forward_pre_hooks_with_kwargs:
                raise Unsupported("module_hooks", "forward pre-hook with kwargs")
            hv = tx.wrap(hook, None)
            res = hv.call_function(tx, [self, tx.tuple(args)], {})
            if not (res.is_python_constant() and res.as_python_constant() is None):
                args = tx.unpack(res) if isinstance(res.python_type(), type) and issubclass(res.python_type(), tuple) \
                    else [res]
        forward = type(m).forward
        if isinstance(forward, types.FunctionType) and forward.__code__.co_name == "decorate_context":
            # `@torch.no_grad()` on forward: the builder knows the wrapper (the mode around the call)
            out = tx.wrap(forward, None).call_function(tx, [self, *args], kwargs)
        else:   # traced, or replayed from a sibling instance's trace (executor/regions.py)
            out = regions.inline_forward(tx, self, forward, args, kwargs)
        for hid, hook in list(m._forward_hooks.items()):
            if hid in m._forward_hooks_with_kwargs:
                raise Unsupported("module_hooks", "forward hook with kwargs")
            res = tx.wrap(hook, None).call_function(tx, [self, tx.tuple(args), out], {})
            if not (res.is_python_constant() and res.as_python_constant() is None):
                out = res
        return out

    def _guard_hooks(self, tx):
        if self.source is None:
            return
        for reg in ("_forward_hooks", "_forward_pre_hooks"):
            hooks = getattr(self.value, reg)
            if hooks:
                tx.add_guard(AttrSource(self.source, reg), GuardKind.DICT_KEYS, tuple(hooks))
            else:
                tx.add_guard(AttrSource(self.source, reg), GuardKind.LEN, 0)

    def call_method(self, tx, name, args, kwargs):
        m = self.value
        if name in ("parameters", "buffers", "children", "modules", "named_parameters", "named_buffers",
                    "named_children", "named_modules"):
            real = list(getattr(m, name)(*[a.as_python_constant() for a in args],
                                          **{k: v.as_python_constant() for k, v in kwargs.items()}))
            items = []
            for entry in real:
                if isinstance(entry, tuple):
                    qual, obj = entry
                    items.append(tx.tuple([ConstantVariable(qual), tx.wrap(obj, self._path_source(qual, obj))]))
                else:
                    items.append(self._reach(tx, entry))
            return ListIteratorVariable(items)
        if isinstance(m, _CONTAINERS):
            keys = list(m._modules) if not isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict)) \
                else list(m._parameters)
            reg = "_parameters" if isinstance(m, (torch.nn.ParameterList, torch.nn.ParameterDict)) else "_modules"
            values = lambda: [tx.wrap(getattr(m, reg)[k], self._src(reg, k)) for k in keys]  # noqa: E731
            if name == "__len__":
                return ConstantVariable(len(keys))
            if name == "__iter__":
                is_dict = isinstance(m, (torch.nn.ModuleDict, torch.nn.ParameterDict))
                return ListIteratorVariable([ConstantVariable(k) for k in keys] if is_dict else values())
            if name == "__getitem__":
                idx = args[0].as_python_constant()
                if isinstance(idx, slice):
                    return tx.list(values()[idx])
                if isinstance(idx, str):
                    return tx.wrap(getattr(m, reg)[idx], self._src(reg, idx))
                k = keys[idx]
                return tx.wrap(getattr(m, reg)[k], self._src(reg, k))
            if name == "__contains__":
                return ConstantVariable(args[0].as_python_constant() in keys)
            if name == "keys":
                return tx.tuple([ConstantVariable(k) for k in keys])
            if name == "values":
                return tx.tuple(values())
            if name == "items":
                return tx.tuple([tx.tuple([ConstantVariable(k), v]) for k, v in zip(keys, values())])
        if name == "forward":
            return tx.inline_method(self, type(m).forward, args, kwargs)
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def _path_source(self, qualname, obj):
        src = self.source
        if src is None:
            return None
        cur = self.value
        parts = qualname.split(".") if qualname else []
        for p in parts:
            for reg in ("_modules", "_parameters", "_buffers"):
                if p in cur.__dict__.get(reg, {}):
                    src = ModuleDictSource(src, reg, p)
                    cur = cur.__dict__[reg][p]
                    break
            else:
                return None
        return src

    def _reach(self, tx, obj):
        for qual, o in list(self.value.named_parameters()) + list(self.value.named_buffers()) + \
                list(self.value.named_modules()):
            if o is obj:
                return tx.wrap(obj, self._path_source(qual, obj))
        return tx.wrap(obj, None)

    def __repr__(self):
        return f"NNModuleVariable({type(self.value).__name__})"

"""User-defined classes and their instances (plain classes, dataclasses), and super().

Attribute reads follow Python's lookup statically (`inspect.getattr_static`): instance dict ->
tracked by source; functions -> bound methods (inlined when called); properties -> getter
inlined; classmethod/staticmethod -> bound/unbound. Writes are recorded in side_effects and
replayed after the graph. Instances created inside the frame run their Python `__init__`
inlined on a fresh tracker and are rebuilt by the output code if they escape.
Classes with a custom metaclass, `__new__`, `__getattr__` or slots-only storage are Unsupported.
NamedTupleVariable: instances of namedtuple classes and torch.return_types structseqs (a tuple
whose class adds field names and methods).
"""
from __future__ import annotations

import abc
import collections
import collections.abc
import dataclasses
import enum
import functools
import inspect
import types

import torch

from pydynamo import _C
from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import MethodProxyVariable, VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.executor.variables.containers import ConstDictVariable, TupleVariable
from pydynamo.executor.variables.functions import LruCacheWrapperVariable, UserFunctionVariable, UserMethodVariable
from pydynamo.guards import GuardKind
from pydynamo.sources import (AttrSource, DictItemSource, GetItemSource, InstanceDictHasSource,
                              PlainAttrSource)


def plain_source(obj_var: VariableTracker, name: str):
    """Where the plain lookup (object.__getattribute__) of `obj.name` is re-read: an attribute
    source, or past the class's own __getattribute__ where it has one. None without a source."""
    if obj_var.source is None:
        return None
    if getattr(obj_var, "cls", object).__getattribute__ in _GENERIC_GETATTRIBUTE:
        return AttrSource(obj_var.source, name)
    return PlainAttrSource(obj_var.source, name)


def class_attribute(tx, obj_var: VariableTracker, cls: type, name: str):
    """`obj.name` found on the class (obj_var is an instance tracker)."""
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        if "__getattr__" in {k for c in cls.__mro__ if c is not object for k in c.__dict__} and \
                not _is_torch_module_getattr(cls):
            raise Unsupported("custom_getattr", f"{cls.__name__}.__getattr__ for {name!r}") from None
        raise Unsupported("no_attribute", f"{cls.__name__!r} object has no attribute {name!r}") from None
    # a plain class attribute is guarded through the instance's class, so rebinding it recompiles
    cls_src = AttrSource(plain_source(obj_var, "__class__"), name) if obj_var.source is not None else None
    if isinstance(raw, types.FunctionType) and raw in _MAPPING_PROBES:
        return MappingProbeVariable(obj_var, name)
    if isinstance(raw, types.FunctionType):
        # wrapped by the builder: a method decorated with @torch.no_grad() or marked
        # pydynamo.disable is handled as such (the class's function is class state: no guard)
        return UserMethodVariable(tx.wrap(raw, None), obj_var)
    if isinstance(raw, functools._lru_cache_wrapper):  # its __get__ binds like a function's
        return UserMethodVariable(LruCacheWrapperVariable(raw), obj_var)
    if isinstance(raw, staticmethod):
        return tx.wrap(raw.__func__, None)
    if isinstance(raw, classmethod):
        return UserMethodVariable(tx.wrap(raw.__func__, None), tx.wrap(cls, None))
    if isinstance(raw, property):
        if raw.fget is None:
            raise Unsupported("property", f"unreadable property {name!r}")
        return tx.wrap(raw.fget, None).call_function(tx, [obj_var], {})
    if _python_descriptor(raw, "__get__"):
        # a descriptor written in Python (its object is class state, read without a guard like
        # the class's functions): its __get__ inlined
        return tx.wrap(raw, None).call_method(tx, "__get__", [obj_var, tx.wrap(cls, None)], {})
    if hasattr(raw, "__get__") and not isinstance(raw, (type, types.BuiltinFunctionType)):
        if type(raw).__name__ in ("member_descriptor", "getset_descriptor") and obj_var.source is not None:
            value = getattr(obj_var.value, name)
            return tx.wrap(value, plain_source(obj_var, name))
        if callable(raw) and type(raw).__name__ in ("method_descriptor", "wrapper_descriptor"):
            if _dict_base(cls) is not None and isinstance(obj_var, UserDefinedObjectVariable) and \
                    getattr(raw, "__objclass__", None) in _DICT_BASES:
                return MethodProxyVariable(obj_var.dict_view(tx), name)
            return BuiltinMethodVariable(obj_var, name)
        raise Unsupported("descriptor", f"descriptor {type(raw).__name__} for {cls.__name__}.{name}")
    if cls_src is not None and isinstance(getattr(obj_var.value, "__dict__", None), dict):
        # an instance attribute of that name set later shadows the class's: not this graph
        tx.add_guard(InstanceDictHasSource(obj_var.source, name), GuardKind.EQUALS_MATCH, False)
    return tx.wrap(raw, cls_src)


class MappingProbeVariable(VariableTracker):
    """collections.abc.Mapping's `get` / `__contains__` on a user mapping: `self[key]` inlined,
    its KeyError (a `key_error` break, raised where Python raises it, after the same effects)
    becoming the default / False, as Mapping's own try/except does."""

    def __init__(self, obj: VariableTracker, name: str):
        super().__init__()
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        if kwargs or not 1 <= len(args) <= (2 if self.name == "get" else 1):
            raise Unsupported("bad_call", f"Mapping.{self.name} arguments")
        grad = tx.grad_enabled
        try:
            value = tx.getitem(self.obj, args[0])
        except Unsupported as e:
            if e.reason_code != "key_error" or tx.grad_enabled != grad:
                raise
            if self.name == "get":
                return args[1] if len(args) > 1 else ConstantVariable(None)
            return ConstantVariable(False)
        return value if self.name == "get" else ConstantVariable(True)


_MAPPING_PROBES = {collections.abc.Mapping.get, collections.abc.Mapping.__contains__}


def _python_descriptor(raw, method: str) -> bool:
    """`raw` is an instance of a plain Python class whose `method` (__get__/__set__) is a function."""
    return not isinstance(raw, type) and plain_metaclass(type(type(raw))) and \
        isinstance(inspect.getattr_static(type(raw), method, None), types.FunctionType)


# (3.13 writes __firstlineno__ and __static_attributes__ into every class body's namespace)
_PLAIN_META_ENTRIES = {"__module__", "__doc__", "__qualname__", "__dict__", "__weakref__",
                       "__firstlineno__", "__static_attributes__"}


# Classes whose instances are immutable values fixed by the constructor's constant arguments.
IMMUTABLE_CLASSES = {torch.finfo, torch.iinfo}


def plain_metaclass(meta: type, constructing: bool = False) -> bool:
    """type, ABCMeta, or a metaclass written in Python on top of them (transformers' ModelOutput
    has one that only renames __init__ keywords when the class is built). An instance's
    attribute reads follow its class's MRO whatever the metaclass (CPython's _PyType_Lookup
    never consults it), so such an instance is traced like any user object; building one
    (`constructing`) goes through the metaclass's __call__, so that must be type's. Metaclasses
    with C-level entries of their own (pybind11's, extension types) stay opaque."""
    if meta in (type, abc.ABCMeta):
        return True
    own = [m for m in meta.__mro__ if m not in (type, abc.ABCMeta, object)]
    return all(k in _PLAIN_META_ENTRIES or isinstance(v, (types.FunctionType, classmethod, staticmethod, property))
               for m in own for k, v in vars(m).items()) and \
        not (constructing and any("__call__" in vars(m) for m in own))


_DICT_BASES = (dict, collections.OrderedDict)
_DICT_ITERS = (dict.__iter__, collections.OrderedDict.__iter__)
# slot wrappers that are all PyObject_GenericGetAttr (dict has its own entry, same behaviour)
_GENERIC_GETATTRIBUTE = (object.__getattribute__, dict.__getattribute__,
                         collections.OrderedDict.__getattribute__)


def _dict_base(cls):
    """dict or OrderedDict for a subclass of them whose instances keep items in the C dict
    (the storage the dict view stands for); None for other classes."""
    if not issubclass(cls, dict) or issubclass(cls, collections.defaultdict):
        return None
    return collections.OrderedDict if issubclass(cls, collections.OrderedDict) else dict


def _is_torch_module_getattr(cls) -> bool:
    import torch
    return issubclass(cls, torch.nn.Module)


class BuiltinMethodVariable(VariableTracker):
    """A C-level method of an object (e.g. dict.keys on a dict subclass instance)."""

    def __init__(self, obj, name):
        super().__init__()
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        if self.name == "__init__" and not args and not kwargs:
            return ConstantVariable(None)
        raise Unsupported("builtin_method", f"{self.name} of {type(self.obj).__name__}")


class GenericGetattrVariable(VariableTracker):
    """`object.__getattribute__(obj, name)` / `super().__getattribute__(name)`: the plain lookup."""

    def __init__(self, obj):
        super().__init__()
        self.obj = obj

    def call_function(self, tx, args, kwargs):
        name = args[-1].as_python_constant()
        obj = self.obj if len(args) == 1 else args[0]
        if isinstance(obj, UserDefinedObjectVariable):
            return obj.plain_getattr(tx, name)
        return tx.getattr(obj, name)


class PlainSetattrVariable(VariableTracker):
    """`super().__setattr__` reaching object's: the plain instance-dict store."""

    def __init__(self, obj):
        super().__init__()
        self.obj = obj

    def call_function(self, tx, args, kwargs):
        name, value = args
        self.obj.store(tx, name.as_python_constant(), value)
        return ConstantVariable(None)


class UserDefinedClassVariable(VariableTracker):
    def __init__(self, cls: type, source=None):
        super().__init__(source)
        self.value = cls

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def var_getattr(self, tx, name):
        cls = self.value
        try:
            raw = inspect.getattr_static(cls, name)
        except AttributeError:
            raise Unsupported("no_attribute", f"class {cls.__name__} has no attribute {name!r}") from None
        if name == "apply" and issubclass(cls, torch.autograd.Function):
            return AutogradFunctionApply(self)
        if isinstance(raw, staticmethod):
            return tx.wrap(raw.__func__, None)
        if isinstance(raw, classmethod):
            return UserMethodVariable(tx.wrap(raw.__func__, None), self)
        src = AttrSource(self.source, name) if self.source is not None else None
        return tx.wrap(getattr(cls, name), src)

    def call_function(self, tx, args, kwargs):
        cls = self.value
        if issubclass(cls, tuple) and hasattr(cls, "_fields"):
            bound = inspect.signature(cls).bind(*args, **kwargs)  # defaults stay unbound: wrapped here
            items = [bound.arguments[f] if f in bound.arguments else tx.wrap(cls._field_defaults[f], None)
                     for f in cls._fields]
            return NamedTupleVariable(items, cls)
        if is_model_output_class(cls):
            return ModelOutputVariable.construct(tx, cls, args, kwargs)
        if issubclass(cls, BaseException):
            raise Unsupported("exception", f"constructing exception {cls.__name__}")
        if isinstance(cls, enum.EnumMeta) and len(args) == 1 and not kwargs and args[0].is_python_constant():
            try:  # a member looked up by value (Mode("add")): the class is guarded by identity
                return tx.wrap(cls(args[0].as_python_constant()), None)
            except ValueError as e:
                raise Unsupported("constant_raises", f"{cls.__name__}(...) raised ValueError: {e}") from None
        if cls in IMMUTABLE_CLASSES and all(a.is_python_constant() for a in (*args, *kwargs.values())):
            # an immutable description of constant arguments (torch.finfo(dtype)): made now
            return tx.wrap(cls(*[a.as_python_constant() for a in args],
                               **{k: v.as_python_constant() for k, v in kwargs.items()}), None)
        base = _dict_base(cls)
        if not plain_metaclass(type(cls), constructing=True) or \
                cls.__new__ is not (dict.__new__ if base else object.__new__):
            raise Unsupported("user_class", f"constructing {cls.__name__} (custom metaclass or __new__)")
        if issubclass(cls, torch.nn.Module):
            return _construct_stateless_module(tx, cls, args, kwargs)
        obj = UserDefinedObjectVariable(None, cls=cls)
        tx.side_effects.track_new(obj)
        init = inspect.getattr_static(cls, "__init__")
        if base is not None:
            obj._dict_view = ConstDictVariable({}, base)
        if isinstance(init, types.FunctionType):
            UserFunctionVariable(init).call_function(tx, [obj, *args], kwargs)
        elif base is not None and init in (dict.__init__, collections.OrderedDict.__init__):
            obj._dict_view.call_method(tx, "update", list(args), kwargs)
        elif init is not object.__init__:
            raise Unsupported("user_class", f"{cls.__name__}.__init__ is not a Python function")
        elif args or kwargs:
            raise Unsupported("bad_call", f"{cls.__name__}() takes no arguments")
        return obj

    def reconstruct(self, cg):
        return cg.load_source(self.source) if self.source is not None else cg.load_const(self.value)

    def __repr__(self):
        return f"UserDefinedClassVariable({self.value.__name__})"


class NoGradFunctionCtx:
    """The `ctx` a custom autograd.Function's forward gets when it runs under no_grad (traced
    by AutogradFunctionApply): what it saves or marks is never read, as no backward runs."""

    def __init__(self, n_inputs):
        self.needs_input_grad = (False,) * n_inputs
        self.materialize_grads = True

    def save_for_backward(self, *tensors):
        self.to_save = tensors

    def save_for_forward(self, *tensors):
        self.saved_for_forward = tensors

    def mark_dirty(self, *tensors):
        pass

    def mark_non_differentiable(self, *tensors):
        pass

    def set_materialize_grads(self, value):
        self.materialize_grads = value


class AutogradFunctionApply(VariableTracker):
    """`MyFunction.apply(*args)` of a custom torch.autograd.Function. Under no_grad (the
    tracer's grad mode, pinned by the global-state guard) no backward can ever run, so apply is
    its forward: traced inline with a NoGradFunctionCtx (and setup_context, where the class
    has one), an output that is an input handed back as a view of it, as apply does. With grad
    enabled the backward would have to be traced as well: a graph break."""

    def __init__(self, cls_var):
        super().__init__()
        self.cls_var = cls_var

    def call_function(self, tx, args, kwargs):
        cls = self.cls_var.value
        if tx.grad_enabled:
            raise Unsupported("autograd_function", f"{cls.__name__}.apply with grad enabled (its backward "
                              "is not traced)")
        if kwargs:
            raise Unsupported("bad_call", f"{cls.__name__}.apply() takes no keyword arguments")
        ctx = UserDefinedClassVariable(NoGradFunctionCtx).call_function(tx, [ConstantVariable(len(args))], {})
        forward = self.cls_var.var_getattr(tx, "forward")
        own_setup = inspect.getattr_static(cls, "setup_context") is not \
            inspect.getattr_static(torch.autograd.Function, "setup_context")
        if own_setup:
            out = forward.call_function(tx, list(args), {})
            self.cls_var.var_getattr(tx, "setup_context").call_function(
                tx, [ctx, TupleVariable(list(args)), out], {})
        else:
            out = forward.call_function(tx, [ctx, *args], {})

        def fresh(v):
            is_input = any(v is a for a in args)
            if is_input and issubclass(v.python_type(), torch.Tensor):
                return v.call_method(tx, "view_as", [v], {})
            return v
        if type(out) is TupleVariable:
            return TupleVariable([fresh(v) for v in out.items])
        return fresh(out)


def _construct_stateless_module(tx, cls, args, kwargs):
    """`torch.nn.ReLU()(x)` inside the frame: built now for real (constructors of torch.nn
    modules are pure: so is a subclass that adds none of its own, transformers' activations
    made per call by ACT2FN[...]); only modules without parameters or buffers, whose state is
    constant."""
    import torch
    own_init = [c for c in cls.__mro__ if issubclass(c, torch.nn.Module) and "__init__" in vars(c)
                and not c.__module__.startswith("torch.nn")]
    if own_init or not all(a.is_python_constant() for a in args) or \
            not all(v.is_python_constant() for v in kwargs.values()):
        raise Unsupported("module_ctor", f"constructing nn.Module {cls.__name__} inside the graph")
    mod = cls(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
    if any(True for _ in mod.parameters()) or any(True for _ in mod.buffers()):
        raise Unsupported("module_ctor", f"constructing nn.Module {cls.__name__} with parameters inside the graph")
    assert isinstance(mod, torch.nn.Module)
    return tx.wrap(mod, None)  # the builder's NNModuleVariable (nn_module.py sits above this module)


class NamedTupleVariable(TupleVariable):
    def __init__(self, items, cls, source=None):
        super().__init__(items, source)
        self.cls = cls

    def python_type(self):
        return self.cls

    def new(self, items):
        return TupleVariable(items)

    def as_python_constant(self):
        return self.cls(*[i.as_python_constant() for i in self.items]) if hasattr(self.cls, "_fields") \
            else self.cls([i.as_python_constant() for i in self.items])

    def var_getattr(self, tx, name):
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name in fields:
            return self.items[fields.index(name)]
        if fields is None and hasattr(self.cls, "n_fields"):  # torch.return_types structseq
            idx = _structseq_index(self.cls, name)
            if isinstance(idx, int):
                return self.items[idx]
        if fields is not None and name in ("_replace", "_asdict"):
            return MethodProxyVariable(self, name)
        if fields is not None and hasattr(self.cls, name):
            return class_attribute(tx, self, self.cls, name)
        raise Unsupported("namedtuple_attr", f"{self.cls.__name__}.{name}")

    def call_method(self, tx, name, args, kwargs):
        fields = getattr(self.cls, "_fields", None)
        if fields is not None and name == "_replace":
            items = list(self.items)
            for k, v in kwargs.items():
                items[fields.index(k)] = v
            return NamedTupleVariable(items, self.cls)
        if fields is not None and name == "_asdict":
            return ConstDictVariable(dict(zip(fields, self.items)))
        return super().call_method(tx, name, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        inner = ", ".join(cg.reconstruct(i) for i in self.items)
        if hasattr(self.cls, "_fields"):
            return f"{cg.load_const(self.cls)}._make(({inner},))"
        return f"{cg.load_const(self.cls)}([{inner}])"


def _structseq_index(cls, name):
    probe = cls(list(range(cls.n_fields)))
    return getattr(probe, name, None)


class UserDefinedObjectVariable(VariableTracker):
    """An instance of a user class; `value` is the real object (None when created in the frame)."""

    def __init__(self, value, source=None, cls=None):
        super().__init__(source)
        self.value = value
        self.cls = cls if cls is not None else type(value)
        self.attrs: dict[str, VariableTracker] = {}   # stores made during tracing (and new objects)

    def python_type(self):
        return self.cls

    def truthy(self, tx):
        for name in ("__bool__", "__len__"):
            if hasattr(self.cls, name):
                r = self.call_method(tx, name, [], {})
                return bool(r.as_python_constant())
        return True

    def var_getattr(self, tx, name):
        if name == "__class__":
            return tx.wrap(self.cls, None)
        custom = self.cls.__getattribute__ not in _GENERIC_GETATTRIBUTE
        if custom and self.value is None:
            # an object made in the frame: its class's own __getattribute__ runs (inlined) for
            # every read, as it would in eager; its super() calls reach plain_getattr
            raw = inspect.getattr_static(self.cls, "__getattribute__")
            if not isinstance(raw, types.FunctionType):
                raise Unsupported("custom_getattribute", f"{self.cls.__name__}.__getattribute__ is not a Python function")
            return UserFunctionVariable(raw).call_function(tx, [self, ConstantVariable(name)], {})
        if name in self.attrs:
            return self.attrs[name]
        if custom and self.value is not None and not _is_class_level(self.cls, name):
            # a custom __getattribute__ (e.g. attribute aliases): read the real value; the guard
            # re-reads it through the same lookup, so both agree
            if self.source is None:
                raise Unsupported("custom_getattribute", f"{self.cls.__name__}.__getattribute__")
            try:
                value = getattr(self.value, name)
            except AttributeError:
                raise Unsupported("no_attribute", f"{self.cls.__name__!r} object has no attribute {name!r}") from None
            return tx.wrap(value, AttrSource(self.source, name))
        return self.plain_getattr(tx, name)

    def dict_view(self, tx):
        """The dict contents of a dict-subclass instance, as a dict tracker (for dict's own
        methods reached through super()); guarded and replayed through the object's source."""
        view = getattr(self, "_dict_view", None)  # set at construction for objects made in the frame
        if view is None:
            if self.value is None or self.source is None or not isinstance(self.value, dict):
                raise Unsupported("dict_subclass", f"dict methods of {self.cls.__name__} made in the frame")
            if not all(isinstance(k, (str, int)) for k in self.value):
                raise Unsupported("dict_key", "dict subclass with non-constant keys")
            tx.add_guard(self.source, GuardKind.DICT_KEYS, tuple(self.value.keys()))
            items = {k: tx.wrap(dict.__getitem__(self.value, k), DictItemSource(self.source, k))
                     for k in self.value}
            view = self._dict_view = ConstDictVariable(items, dict, self.source)
        return view

    def plain_getattr(self, tx, name):
        """Attribute lookup as object.__getattribute__ does it."""
        if name in self.attrs:
            return self.attrs[name]
        if self.value is not None:
            d = getattr(self.value, "__dict__", {})
            if name in d and not _data_descriptor(self.cls, name):
                return tx.wrap(d[name], plain_source(self, name))
        elif name == "__dict__":
            return self.instance_dict()
        return class_attribute(tx, self, self.cls, name)

    def instance_dict(self):
        """`obj.__dict__` of an object made in the frame: a dict tracker over the object's own
        attribute table (the same Python dict), so writes either way are seen both ways."""
        view = getattr(self, "_instance_dict", None)
        if view is None:
            view = self._instance_dict = ConstDictVariable({})
            view.items = self.attrs
        return view

    def delattr(self, tx, name):
        """`del obj.name` / delattr(obj, name): a custom __delattr__ is inlined; the plain delete is
        modelled on objects made in the frame (a deletion on an object from outside the frame
        would need a replay that removes the attribute: a graph break)."""
        if "__delattr__" in {k for c in self.cls.__mro__ if c is not object for k in c.__dict__}:
            custom = inspect.getattr_static(self.cls, "__delattr__")
            if not isinstance(custom, types.FunctionType):
                raise Unsupported("custom_delattr", f"{self.cls.__name__}.__delattr__")
            UserFunctionVariable(custom).call_function(tx, [self, ConstantVariable(name)], {})
            return
        if self.value is not None or _data_descriptor(self.cls, name):
            raise Unsupported("delattr", f"deleting attribute {name!r} of a {self.cls.__name__} from outside the frame")
        if name not in self.attrs:
            raise Unsupported("no_attribute", f"{self.cls.__name__!r} object has no attribute {name!r}")
        del self.attrs[name]

    def setattr(self, tx, name, value):
        if _data_descriptor(self.cls, name):
            raw = inspect.getattr_static(self.cls, name)
            if isinstance(raw, property) and raw.fset is not None:
                tx.wrap(raw.fset, None).call_function(tx, [self, value], {})
                return
            if _python_descriptor(raw, "__set__"):
                tx.wrap(raw, None).call_method(tx, "__set__", [self, value], {})
                return
            raise Unsupported("descriptor", f"setting {name!r} through a descriptor")
        if "__setattr__" in {k for c in self.cls.__mro__ if c is not object for k in c.__dict__}:
            custom = inspect.getattr_static(self.cls, "__setattr__")
            if not isinstance(custom, types.FunctionType):
                raise Unsupported("custom_setattr", f"{self.cls.__name__}.__setattr__")
            UserFunctionVariable(custom).call_function(tx, [self, ConstantVariable(name), value], {})
            return
        self.store(tx, name, value)

    def store(self, tx, name, value):
        """The plain instance-dict store (object.__setattr__), recorded for replay."""
        tx.side_effects.store_attr(self, name, value)
        self.attrs[name] = value

    def call_function(self, tx, args, kwargs):
        return self.call_method(tx, "__call__", args, kwargs)

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    @property
    def is_dict_subclass(self) -> bool:
        return _dict_base(self.cls) is not None

    def mapping_items(self, tx) -> dict:
        """{key: value tracker} as dict(obj) / dict.update(obj) read it: the C dict directly when
        the class keeps dict's iteration (CPython's fast path), else keys() and obj[key]."""
        if getattr(self.cls, "__iter__", None) is dict.__iter__:
            return dict(self.dict_view(tx).items)
        keys = tx.unpack(self.call_method(tx, "keys", [], {}))
        return {k.as_python_constant(): self.call_method(tx, "__getitem__", [k], {}) for k in keys}

    def has_unpack_var_sequence(self, tx):
        # collections.abc.Sequence's mixin __iter__ indexes until IndexError; iterating by len()
        # gives the same items for any sequence whose __len__ is truthful
        it = getattr(self.cls, "__iter__", None)
        return it is collections.abc.Sequence.__iter__ or (self.is_dict_subclass and it in _DICT_ITERS)

    def unpack_var_sequence(self, tx):
        if not self.has_unpack_var_sequence(tx):
            return super().unpack_var_sequence(tx)
        if self.is_dict_subclass:
            return self.dict_view(tx).unpack_var_sequence(tx)
        n = self.call_method(tx, "__len__", [], {}).as_python_constant()
        return [self.call_method(tx, "__getitem__", [ConstantVariable(i)], {}) for i in range(n)]

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        return cg.new_object(self)

    def __repr__(self):
        return f"UserDefinedObjectVariable({self.cls.__name__})"


def _is_class_level(cls, name) -> bool:
    """Found on the class as a function/property/descriptor (not plain instance data)."""
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return False
    return isinstance(raw, (types.FunctionType, property, staticmethod, classmethod))


def is_model_output_class(cls) -> bool:
    return any(c.__name__ == "ModelOutput" and c.__module__.startswith("transformers") for c in cls.__mro__)


class ModelOutputVariable(VariableTracker):
    """transformers' ModelOutput (an OrderedDict dataclass that skips None fields): fields are
    trackers; attribute, key and index access follow ModelOutput's rules; rebuilt by calling the
    class with the fields as keywords."""

    def __init__(self, cls, fields: dict):
        super().__init__()
        self.cls = cls
        self.fields = fields  # every dataclass field, None included
        self.later: list[str] = []  # fields None at construction and set since: the dict's tail

    @staticmethod
    def construct(tx, cls, args, kwargs):
        names = [f.name for f in dataclasses.fields(cls)]
        if len(args) > 1:
            raise Unsupported("model_output", f"{cls.__name__} with several positional arguments")
        fields = {n: ConstantVariable(None) for n in names}
        if args:
            fields[names[0]] = args[0]
        fields.update(kwargs)
        return ModelOutputVariable(cls, fields)

    def python_type(self):
        return self.cls

    def _present(self):
        first = {k: v for k, v in self.fields.items() if k not in self.later and
                 not (v.is_python_constant() and v.as_python_constant() is None)}
        return {**first, **{k: self.fields[k] for k in self.later}}

    def truthy(self, tx):
        return bool(self._present())

    def var_getattr(self, tx, name):
        if name in self.fields:
            return self.fields[name]
        if name in ("to_tuple", "keys", "values", "items", "get", "__getitem__", "__len__", "__contains__"):
            return MethodProxyVariable(self, name)
        return class_attribute(tx, self, self.cls, name)

    def call_method(self, tx, name, args, kwargs):
        present = self._present()
        if name == "to_tuple":
            return tx.tuple(present.values())
        if name == "__getitem__":
            key = args[0].as_python_constant()
            if isinstance(key, str):
                return present[key]
            vals = list(present.values())[key]
            return tx.tuple(vals) if isinstance(key, slice) else vals
        if name == "__len__":
            return ConstantVariable(len(present))
        if name == "__contains__":
            return ConstantVariable(args[0].as_python_constant() in present)
        if name == "keys":
            return tx.tuple([ConstantVariable(k) for k in present])
        if name == "values":
            return tx.tuple(present.values())
        if name == "items":
            return tx.tuple([tx.tuple([ConstantVariable(k), v]) for k, v in present.items()])
        if name == "get":
            return present.get(args[0].as_python_constant(), args[1] if len(args) > 1 else ConstantVariable(None))
        if name == "__setitem__" and len(args) == 2:
            self.setattr(tx, args[0].as_python_constant(), args[1])
            return ConstantVariable(None)
        return super().call_method(tx, name, args, kwargs)

    def setattr(self, tx, name, value):
        # ModelOutput.__setattr__/__setitem__ write the attribute and the dict entry; a field
        # that was None joins the dict at its end (`later`); None is written to the attribute
        # only, leaving the dict entry: not modelled
        if name not in self.fields or (value.is_python_constant() and value.as_python_constant() is None):
            raise Unsupported("model_output", f"setting {self.cls.__name__}.{name} (not a field, or to None)")
        if name not in self._present():
            self.later.append(name)
        self.fields[name] = value

    def has_unpack_var_sequence(self, tx):
        return True

    def unpack_var_sequence(self, tx):
        return [ConstantVariable(k) for k in self._present()]

    def mapping_items(self, tx) -> dict:
        """{key: value} as `**output` and dict(output) read it (keys() and [key])."""
        return dict(self._present())

    def reconstruct(self, cg):
        kw = ", ".join(f"{k}={'None' if k in self.later else cg.reconstruct(v)}" for k, v in self.fields.items())
        later = "".join(f"({k!r}, {cg.reconstruct(self.fields[k])}), " for k in self.later)
        return f"{cg.load_const(call_without_hook)}({cg.load_const(_model_output)}, {cg.load_const(self.cls)}, " \
            f"({later}), {kw})"


def _model_output(cls, later, **fields):
    """The ModelOutput as the traced code left it: built, then the fields set since in order."""
    out = cls(**fields)
    for name, value in later:
        setattr(out, name, value)
    return out


def call_without_hook(fn, *args, **kwargs):
    """Run `fn` with the frame hook off (output code building library objects)."""
    prev = _C.set_eval_frame(None)
    try:
        return fn(*args, **kwargs)
    finally:
        _C.set_eval_frame(prev)


def _data_descriptor(cls, name) -> bool:
    try:
        raw = inspect.getattr_static(cls, name)
    except AttributeError:
        return False
    return hasattr(type(raw), "__set__") and not isinstance(raw, types.FunctionType)


class SuperVariable(VariableTracker):
    def __init__(self, cls: type, obj: VariableTracker):
        super().__init__()
        self.cls, self.obj = cls, obj

    def var_getattr(self, tx, name):
        mro = self.obj.python_type().__mro__
        for klass in mro[mro.index(self.cls) + 1:]:
            if name in klass.__dict__:
                raw = klass.__dict__[name]
                if isinstance(raw, types.FunctionType) and raw in _MAPPING_PROBES:
                    return MappingProbeVariable(self.obj, name)
                if isinstance(raw, types.FunctionType):
                    return UserMethodVariable(UserFunctionVariable(raw), self.obj)
                if isinstance(raw, classmethod):
                    return UserMethodVariable(tx.wrap(raw.__func__, None), tx.wrap(self.obj.python_type(), None))
                if isinstance(raw, staticmethod):
                    return tx.wrap(raw.__func__, None)
                if name == "__init__" and klass is object:
                    return BuiltinMethodVariable(self.obj, "__init__")
                if name == "__getattribute__" and klass is object:
                    return GenericGetattrVariable(self.obj)
                if name == "__setattr__" and klass is object and isinstance(self.obj, UserDefinedObjectVariable):
                    return PlainSetattrVariable(self.obj)
                if klass in _DICT_BASES and isinstance(self.obj, UserDefinedObjectVariable):
                    return MethodProxyVariable(self.obj.dict_view(tx), name)
                raise Unsupported("super", f"super().{name} resolves to {type(raw).__name__}")
        raise Unsupported("no_attribute", f"super() has no attribute {name!r}")

"""VariableBuilder: wrap a real Python value into a tracker, with its Source and guards.

`wrap(value, source)` walks a registry table (`WRAPPERS`, first match wins) — no if-chain in the
driver. Values with a source get the guards their use depends on (the origin is the user's
file:line being traced); values without a source (constants computed at trace time, class
attributes) get none. One tracker per object: a value reached twice (two sources, or the same
source) gets the same tracker, so mutations and identity agree, and a second source adds an
aliasing guard (`second is first`: without it a later call where they differ would read the
first source's object for both). Numbers (constants and symbols) are never shared: their identity
means nothing (CPython interns small ints), only their value, which each source guards itself.
"""
from __future__ import annotations

import collections
import inspect
import enum
import functools
import math
import operator
import os
import types
from typing import Callable

import math

import torch

from pydynamo import shapes
from pydynamo.exc import Unsupported
from pydynamo.executor import breaks as _breaks
from pydynamo.executor.variables import builtins as vbuiltins
from pydynamo.executor.variables import amp
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import (CONSTANT_TYPES, OPAQUE_TYPES, ConstantVariable,
                                                  NumpyConstantFunction, ObjectVariable, OpaqueVariable,
                                                  is_numpy_constant_fn, is_numpy_scalar)
from pydynamo.executor.variables.containers import (ConstDictVariable, ListVariable,
                                                    SetVariable, SizeVariable, SliceVariable, TupleVariable)
from pydynamo.executor.variables.functions import (LruCacheWrapperVariable, PartialVariable, UserFunctionVariable,
                                                   UserMethodVariable)
from pydynamo.executor.variables.iterators import ITERTOOLS
from pydynamo.executor.variables import copying  # noqa: F401  (registers copy.copy / copy.deepcopy)
from pydynamo.executor.variables.misc import (GRAD_MODE_FNS, EnvironVariable, GradModeClassVariable,
                                             GradModeWrappedFunction, is_environ)
from pydynamo.executor.variables.nn_module import NNModuleVariable
from pydynamo.executor.variables.strict import ErrorOnGraphBreakFactory, StrictWrappedFunction
from pydynamo.executor.variables.symbolic import SymNodeVariable
from pydynamo.executor.variables.torch_fns import ALLOWED_IN_GRAPH, TorchFunctionVariable, is_torch_callable
from pydynamo.executor.variables.user_objects import (NamedTupleVariable, UserDefinedClassVariable,
                                                      UserDefinedObjectVariable, plain_metaclass)
from pydynamo.guards import GuardKind, TensorSpec
from pydynamo.meta import TensorMeta
from pydynamo.sources import AttrSource, DictValueAtSource, GetItemSource, LocalSource, ModuleDictSource

_BUILTIN_FUNCS = set(vars(vbuiltins).get("HANDLERS", {})) | vbuiltins.PURE | vbuiltins.TENSOR_OPS
_BUILTIN_FUNCS |= {print, id, iter, next, enumerate, zip, map, filter, reversed, super, setattr,
                   object.__setattr__, functools.partial, collections.OrderedDict, collections.defaultdict,
                   inspect.signature,
                   *ITERTOOLS}


class VariableBuilder:
    def __init__(self, tx_root):
        self.root = tx_root
        self.cache: dict[int, VariableTracker] = {}
        self.keepalive: list = []

    def wrap(self, tx, value, source) -> VariableTracker:
        if source is not None:
            hit = self.cache.get(id(value))
            if hit is not None:
                if hit.source != source:
                    # the tracker stands for both sources only while they hold the same object
                    tx.add_guard(source, GuardKind.ALIASING, hit.source)
                return hit
        for pred, make in WRAPPERS:
            if pred(value):
                var = make(self, tx, value, source)
                # numbers have no identity worth sharing: equal small ints are one object in
                # CPython, so an argument `n` and an attribute `self.steps` holding the same int
                # must not share n's symbol (fuzz F7)
                # (a tracker that keeps no source, a grad-mode context, holds per-use state)
                if source is not None and var.source is not None and \
                        not isinstance(var, (ConstantVariable, SymNodeVariable)):
                    self.cache[id(value)] = var
                    self.keepalive.append(value)
                return var
        if source is not None:  # passing it through is fine; using it is a graph break
            # one tracker per object here too: `a is b` of two reads of it is the same tracker
            var = self.cache[id(value)] = OpaqueVariable(value, source)
            self.keepalive.append(value)
            return var
        raise Unsupported("unknown_value", f"cannot trace a value of type {type(value).__qualname__}")

    def identity_of(self, var: VariableTracker):
        """The object a cached tracker stands for (None when `var` is not one)."""
        for value in self.keepalive:
            if self.cache.get(id(value)) is var:
                return value
        return None

    # --- one function per kind of value ---------------------------------------------------
    def tensor(self, tx, value, source):
        if source is None:
            raise Unsupported("tensor_constant", "a tensor reached without a source (e.g. a closure "
                              "of a function made outside the frame's reach)")
        spec = TensorSpec.of(value)
        sym_meta = _symbolic_meta(tx.root, value, source)
        if sym_meta is not None:  # symbolic sizes/strides are checked by the SHAPE_ENV guard
            spec = spec.with_dynamic(sym_meta.shape, sym_meta.stride)
        tx.add_guard(source, GuardKind.TENSOR_MATCH, spec)
        return tx.output.add_input(value, source, sym_meta)

    def literal(self, tx, value, source):
        if source is not None and type(value) is int and _dynamic_int(tx.root, value, source):
            # an int argument that is dynamic (dynamic=True, or it changed between calls): a
            # symbol of any sign, no duck sharing and no 0/1 pinning, as torch.compile does
            tx.add_guard(source, GuardKind.TYPE_MATCH, int)
            sym = tx.root.shape_env.create_symint(value, source, positive=False, duck=False)
            return SymNodeVariable.wrap(sym, source)
        if source is not None and type(value) is float and _dynamic_float(tx.root, value, source):
            # likewise a float argument (torch.compile's specialize_float=False): a real symbol,
            # a graph input where the graph uses it; decisions on it are guarded
            tx.add_guard(source, GuardKind.TYPE_MATCH, float)
            return SymNodeVariable(tx.root.shape_env.create_symfloat(value, source), source)
        if source is not None:
            if value is None or isinstance(value, bool):
                tx.add_guard(source, GuardKind.ID_MATCH, (id(value), repr(value)))
            else:
                tx.add_guard(source, GuardKind.EQUALS_MATCH, value)
        return ConstantVariable(value, source)

    def opaque(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.EQUALS_MATCH, value)
        return ObjectVariable(value, source)

    def sequence(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
            tx.add_guard(source, GuardKind.LEN, len(value))
        items = [self.wrap(tx, v, GetItemSource(source, i) if source is not None else None)
                 for i, v in enumerate(value)]
        if type(value) is list:
            return ListVariable(items, source)
        if type(value) is tuple:
            return TupleVariable(items, source)
        return NamedTupleVariable(items, type(value), source)

    def size(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.EQUALS_MATCH, value)
        return SizeVariable([ConstantVariable(v) for v in value])

    def mapping(self, tx, value, source):
        if not all(type(k) in CONSTANT_TYPES or isinstance(k, enum.Enum) or _identity_key(k) for k in value):
            raise Unsupported("dict_key", "dict with non-constant keys")
        if source is not None:
            tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
            tx.add_guard(source, GuardKind.DICT_KEYS, tuple(value.keys()))
        items = {k: self.wrap(tx, v, None if source is None else DictValueAtSource(source, i)
                              if _identity_key(k) else GetItemSource(source, k))
                 for i, (k, v) in enumerate(value.items())}
        factory = None
        if isinstance(value, collections.defaultdict) and value.default_factory is not None:
            factory = self.wrap(tx, value.default_factory, AttrSource(source, "default_factory")
                                if source is not None else None)
        return ConstDictVariable(items, type(value), source, default_factory=factory)

    def set_(self, tx, value, source):
        # constants, or classes (dataclasses' frozenset of atomic types): hashed by value/identity,
        # so the EQUALS_MATCH guard on the whole set pins every item
        if not all(type(k) in CONSTANT_TYPES or isinstance(k, type) for k in value):
            raise Unsupported("set_item", "set with non-constant items")
        if source is not None:
            tx.add_guard(source, GuardKind.EQUALS_MATCH, value)
        return SetVariable([ConstantVariable(v) if type(v) in CONSTANT_TYPES else self.wrap(tx, v, None)
                            for v in value], type(value), source)

    def slice_(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.EQUALS_MATCH, value)
        return SliceVariable([ConstantVariable(value.start), ConstantVariable(value.stop),
                              ConstantVariable(value.step)])

    def function(self, tx, value, source):
        if getattr(value, "__pydynamo_disabled__", False):
            return DisabledFunctionVariable(value, source)
        if getattr(value, "__pydynamo_graph_break__", False):
            return GraphBreakFunctionVariable(value, source)
        strict = getattr(value, "__pydynamo_error_on_graph_break__", None)
        if strict is not None:   # pydynamo.error_on_graph_break, or a function it decorated
            if source is not None:
                tx.add_guard(source, GuardKind.ID_MATCH, (id(value), value.__qualname__))
            if strict == "factory":
                return ErrorOnGraphBreakFactory(value, source)
            return StrictWrappedFunction(strict, self.wrap(tx, value.__wrapped__, None), source)
        if value.__code__.co_name == "decorate_context" and \
                value.__code__.co_filename.endswith(os.path.join("torch", "utils", "_contextlib.py")):
            return self.grad_decorated(tx, value, source)
        if is_torch_callable(value):
            return by_identity(TorchFunctionVariable)(self, tx, value, source)
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), value.__qualname__))
        return UserFunctionVariable(value, source)

    def grad_decorated(self, tx, value, source):
        """A function decorated with @torch.no_grad() & co: the mode wraps the inlined call."""
        cells = dict(zip(value.__code__.co_freevars, (c.cell_contents for c in value.__closure__)))
        ctx = cells["ctx_factory"]()
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), value.__qualname__))
        if isinstance(ctx, torch.no_grad):
            mode = False
        elif isinstance(ctx, torch.enable_grad):
            mode = True
        elif isinstance(ctx, torch.set_grad_enabled):
            mode = ctx.mode
        else:
            raise Unsupported("context_decorator", f"function decorated with {type(ctx).__name__}")
        func = self.wrap(tx, cells["func"], None)
        return GradModeWrappedFunction(mode, func)

    def getter(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), repr(value)))  # immutable object
        return vbuiltins.GetterVariable(type(value), value.__reduce__()[1], source)

    def method(self, tx, value, source):
        fn = self.wrap(tx, value.__func__, AttrSource(source, "__func__") if source is not None else None)
        obj = self.wrap(tx, value.__self__, AttrSource(source, "__self__") if source is not None else None)
        return UserMethodVariable(fn, obj, source)

    def partial(self, tx, value, source):
        sub = (lambda name: AttrSource(source, name)) if source is not None else (lambda name: None)
        fn = self.wrap(tx, value.func, sub("func"))
        args = self.wrap(tx, value.args, sub("args"))
        kwargs = self.wrap(tx, value.keywords, sub("keywords"))
        return PartialVariable(fn, args.items, kwargs.items, source)

    def module(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), type(value).__name__))
        return NNModuleVariable(value, source)

    def user_object(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
        return UserDefinedObjectVariable(value, source)

    def builtin_fn(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), getattr(value, "__name__", "")))
        return vbuiltins.BuiltinVariable(value, source)

    def autocast_cls(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), value.__name__))
        return amp.AutocastClassVariable(value, source)

    def autocast_ctx(self, tx, value, source):
        """An autocast object (a with-block re-entered by a resume function, a decorator's
        closure): guarded on what it enters."""
        if source is not None:
            tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
            for attr in amp.SETTINGS_ATTRS:
                tx.add_guard(AttrSource(source, attr), GuardKind.EQUALS_MATCH, getattr(value, attr, None))
        return amp.AutocastVariable(amp.settings_of(value), source)

    def environ(self, tx, value, source):
        if source is None:
            return ObjectVariable(value)
        tx.add_guard(source, GuardKind.ID_MATCH, (id(value), "os.environ"))
        return EnvironVariable(value, source)

    def grad_cls(self, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), value.__name__))
        return GradModeClassVariable(value)


def _symbolic_meta(root, value: torch.Tensor, source):
    """The input's TensorMeta with sympy sizes for the dims the dynamic policy makes symbolic
    (automatic dynamic, dynamic=True/False, mark_dynamic/mark_static), or None (all static)."""
    if value.layout != torch.strided or value.dim() == 0:
        return None
    changed = root.auto.observe(source.name(), tuple(value.shape)) if root.auto is not None else ()
    dynamic = root.dynamic
    if dynamic is True and _module_state(value, source):
        dynamic = None  # parameters and buffers keep static shapes, as in torch.compile
    dims = shapes.dynamic_dims(value, dynamic=dynamic, changed_dims=changed)
    if not dims:
        return None
    env = root.shape_env
    # automatic dynamic gives each changed dim a symbol of its own; dynamic=True duck-shapes
    shape, stride, offset = env.create_tensor_sizes(value, source, dims,
                                                    marked_dims=shapes.marked_dynamic_dims(value) & dims,
                                                    duck=None if dynamic is True else False)
    meta = TensorMeta.from_tensor(value, shape=shape, stride=stride, storage_offset=offset)
    return meta if meta.is_symbolic else None


def _dynamic_int(root, value: int, source) -> bool:
    """Whether a frame argument's int is symbolic: under dynamic=True always; under automatic
    dynamic once it has changed between calls of this code."""
    if not isinstance(source, LocalSource) or root.dynamic is False:
        return False
    if root.dynamic is True:
        return True
    return root.auto is not None and bool(root.auto.observe("int " + source.name(), (value,)))


def _dynamic_float(root, value: float, source) -> bool:
    """Whether a frame argument's float is symbolic: as for ints (dynamic=True: always;
    automatic: once it changed). An item of an argument's list/tuple counts too (`x.tolist()`
    passed to a resume function). inf and nan stay constants (no exact symbol value)."""
    base = source
    while isinstance(base, GetItemSource):
        base = base.base
    if not math.isfinite(value) or not isinstance(base, LocalSource) or root.dynamic is False:
        return False
    if root.dynamic is True:
        return True
    return root.auto is not None and bool(root.auto.observe("float " + source.name(), (value,)))


def _module_state(value, source) -> bool:
    if isinstance(value, torch.nn.Parameter):
        return True
    while source is not None:
        if isinstance(source, ModuleDictSource):
            return True
        source = source.base
    return False


class DisabledFunctionVariable(VariableTracker):
    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def call_function(self, tx, args, kwargs):
        raise Unsupported("disabled", f"call to {getattr(self.fn, '__qualname__', self.fn)}, "
                          "marked pydynamo.disable")


class GraphBreakFunctionVariable(VariableTracker):
    """pydynamo.graph_break(): calling it is a graph break."""

    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def call_function(self, tx, args, kwargs):
        raise Unsupported("explicit_break", "pydynamo.graph_break() called")

    def reconstruct(self, cg):
        return cg.load_const(self.fn)


def by_identity(cls):
    """Wrapper for objects guarded by identity (modules, classes, torch functions, enums)."""
    def make(builder, tx, value, source):
        if source is not None:
            tx.add_guard(source, GuardKind.ID_MATCH, (id(value), _describe(value)))
        return cls(value, source)
    return make


def _identity_key(k) -> bool:
    """A dict key hashed and compared by identity (a class, a function, typing.Union, a plain
    object): found again only as itself, so the DICT_KEYS guard (a list compare, `==` being `is`
    for these) pins it, and the key tracker stands for that one object."""
    cls = type(k)
    return cls.__eq__ is object.__eq__ and cls.__hash__ is object.__hash__


def _describe(value) -> str:
    return getattr(value, "__qualname__", None) or getattr(value, "__name__", None) or type(value).__name__


def _is_user_object(value) -> bool:
    cls = type(value)
    return cls.__module__ not in ("builtins",) and not isinstance(value, type) and \
        plain_metaclass(type(cls)) and hasattr(value, "__dict__")



_B = VariableBuilder
WRAPPERS: list[tuple[Callable, Callable]] = [
    (lambda v: isinstance(v, torch.Tensor), _B.tensor),
    # at graph breaks (executor/breaks.py): contexts re-entered, locals passed as unbound
    (lambda v: type(v) in (torch.no_grad, torch.enable_grad), _breaks.wrap_grad_ctx),
    (lambda v: type(v) is torch.inference_mode, _breaks.wrap_inference_ctx),
    (lambda v: isinstance(v, torch.amp.autocast_mode.autocast), _B.autocast_ctx),
    (amp.is_autocast_class, _B.autocast_cls),
    (_breaks.is_c_exit, _breaks.wrap_c_exit),
    (lambda v: v is _breaks.UNBOUND, by_identity(ObjectVariable)),
    (lambda v: type(v) in CONSTANT_TYPES or is_numpy_scalar(v), _B.literal),
    (is_environ, _B.environ),
    (lambda v: type(v) is torch.Size, _B.size),
    (lambda v: isinstance(v, OPAQUE_TYPES), _B.opaque),
    (lambda v: isinstance(v, enum.Enum) or v is inspect.Parameter.empty, by_identity(ObjectVariable)),
    (lambda v: isinstance(v, (types.ModuleType, types.CodeType)), by_identity(ObjectVariable)),
    (lambda v: vbuiltins.hashable_in(v, GRAD_MODE_FNS), _B.grad_cls),
    (lambda v: vbuiltins.hashable_in(v, ALLOWED_IN_GRAPH), by_identity(TorchFunctionVariable)),
    (lambda v: vbuiltins.hashable_in(v, _BUILTIN_FUNCS), _B.builtin_fn),
    (lambda v: isinstance(v, torch.nn.Module), _B.module),
    (lambda v: isinstance(v, types.FunctionType), _B.function),
    (lambda v: isinstance(v, types.MethodType), _B.method),
    (lambda v: isinstance(v, functools.partial), _B.partial),
    (lambda v: isinstance(v, functools._lru_cache_wrapper), by_identity(LruCacheWrapperVariable)),
    (lambda v: is_torch_callable(v) or v is torch.Size or v is torch.device, by_identity(TorchFunctionVariable)),
    (lambda v: type(v) in (operator.itemgetter, operator.attrgetter), VariableBuilder.getter),
    (lambda v: type(v) in (list, tuple) or (isinstance(v, tuple) and hasattr(type(v), "_fields")), _B.sequence),
    (lambda v: type(v) in (dict, collections.OrderedDict, collections.defaultdict), _B.mapping),
    (lambda v: type(v) is types.MappingProxyType and v is not None, _B.mapping),
    (lambda v: type(v) in (set, frozenset), _B.set_),
    (lambda v: type(v) is slice, _B.slice_),
    (is_numpy_constant_fn, by_identity(NumpyConstantFunction)),
    (lambda v: isinstance(v, type), by_identity(UserDefinedClassVariable)),
    (lambda v: isinstance(v, (types.BuiltinFunctionType, types.MethodWrapperType,
                              types.WrapperDescriptorType, types.MethodDescriptorType)) and
     getattr(v, "__module__", None) in (None, "builtins", "math", "operator", "_operator"), _B.builtin_fn),
    (lambda v: type(v) in _breaks.ITERATOR_TYPES, _breaks.wrap_iterator),
    (_is_user_object, _B.user_object),
]

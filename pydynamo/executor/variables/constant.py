"""Python constants and opaque, immutable Python objects.

ConstantVariable: None, bool, int, float, complex, str, bytes, Ellipsis, range, NotImplemented.
Operations on constants are computed at trace time (they are immutable, so that is exact).
ObjectVariable: immutable objects the trace may hold and pass along but not look into deeply —
torch.dtype, torch.device, torch.layout, memory formats, Python modules. Their attributes are
read with the real getattr (still immutable); calls are routed by the caller.
OpaqueVariable: a frame input of a type we cannot trace at all (another library's object):
passed through by its source; any use is a graph break.
"""
from __future__ import annotations

import dataclasses
import inspect
import sys
import types
import typing

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker, python_constants, raises_here
from pydynamo.sources import AttrSource

CONSTANT_TYPES = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis), range,
                  type(NotImplemented))
OPAQUE_TYPES = (torch.dtype, torch.device, torch.layout, torch.memory_format, torch.finfo, torch.iinfo,
                dataclasses.Field, dataclasses._FIELD_BASE, dataclasses._MISSING_TYPE, inspect.Signature,
                inspect.Parameter,
                # type annotations (int | None, list[int], typing.Union, Optional[int], TypeVar):
                # immutable, compared by value; strict dataclasses validate against them
                types.UnionType, types.GenericAlias, typing._Final)


def is_literal(value) -> bool:
    return type(value) in CONSTANT_TYPES


class ConstantVariable(VariableTracker):
    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def truthy(self, tx):
        return bool(self.value)

    def var_getattr(self, tx, name):
        try:
            attr = getattr(self.value, name)
        except AttributeError as e:  # getattr(x, name, default) / hasattr turn this into a value
            raise raises_here("no_attribute", str(e)) from None
        if callable(attr):
            return ConstMethodVariable(self, name)
        return ConstantVariable(attr)

    def call_method(self, tx, name, args, kwargs):
        return ConstMethodVariable(self, name).call_function(tx, args, kwargs)

    def has_unpack_var_sequence(self, tx):
        return isinstance(self.value, (str, bytes, range))

    def unpack_var_sequence(self, tx):
        if not self.has_unpack_var_sequence(tx):
            return super().unpack_var_sequence(tx)
        return [ConstantVariable(v) for v in self.value]

    def reconstruct(self, cg):
        return cg.load_const(self.value)

    def __repr__(self):
        return f"ConstantVariable({self.value!r})"


class ConstMethodVariable(VariableTracker):
    """`"{}".format`, `(3).bit_length`, ...: a method of an immutable value, evaluated when called
    with constant arguments (str.format/join may take traced values: handled by the caller)."""

    def __init__(self, obj: VariableTracker, name: str):
        super().__init__()
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        if all(a.is_python_constant() for a in args) and all(v.is_python_constant() for v in kwargs.values()):
            fn = getattr(self.obj.as_python_constant(), self.name)
            kw = {k: v.as_python_constant() for k, v in kwargs.items()}
            return tx.wrap_constant_result(fn(*python_constants(args), **kw))
        if isinstance(self.obj.as_python_constant(), str) and self.name in ("format", "join"):
            return tx.str_of_traced(self.obj.as_python_constant(), self.name, args, kwargs)
        raise Unsupported("const_method", f"{type(self.obj.as_python_constant()).__name__}.{self.name} "
                          "with non-constant arguments")

    def as_python_constant(self):
        return getattr(self.obj.as_python_constant(), self.name)


class ObjectVariable(VariableTracker):
    """An immutable opaque object (dtype, device, module, builtin function used as a value)."""

    def __init__(self, value, source=None):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def as_python_constant(self):
        return self.value

    def truthy(self, tx):
        return bool(self.value)

    def var_getattr(self, tx, name):
        if not hasattr(self.value, name):
            raise Unsupported("getattr", f"{self.value!r} has no attribute {name!r}")
        attr = getattr(self.value, name)
        src = AttrSource(self.source, name) if self.source is not None else None
        if isinstance(self.value, types.ModuleType) and self.value.__name__ in TRUSTED_MODULES:
            src = None  # attributes of library modules are not guarded (nobody patches torch.sin)
        return tx.wrap(attr, src)

    def call_method(self, tx, name, args, kwargs):
        return self.var_getattr(tx, name).call_function(tx, args, kwargs)

    def reconstruct(self, cg):
        if self.source is not None:
            return cg.load_source(self.source)
        return cg.load_const(self.value)

    def __repr__(self):
        return f"ObjectVariable({self.value!r})"


def _numpy():
    return sys.modules.get("numpy")  # numpy values exist only once numpy is imported


def is_numpy_scalar(value) -> bool:
    """A numpy number (np.float64(1.5), np.int32, np.bool_): immutable, so a Python constant."""
    np = _numpy()
    return np is not None and isinstance(value, (np.number, np.bool_))


def is_numpy_constant_fn(value) -> bool:
    np = _numpy()
    return np is not None and (isinstance(value, np.ufunc) or type(value).__name__ == "_ArrayFunctionDispatcher"
                               and type(value).__module__ == "numpy" or
                               isinstance(value, type) and issubclass(value, (np.number, np.bool_)))


def _numbers(value) -> bool:
    """A number, or a list/tuple of them (np.prod(config.upsample_rates))."""
    if isinstance(value, (list, tuple)):
        return all(_numbers(v) for v in value)
    return is_numpy_scalar(value) or type(value) in (bool, int, float)


class NumpyConstantFunction(ObjectVariable):
    """A numpy ufunc, array function or scalar type (np.log, np.prod, np.float32) called on
    numbers or lists of them: evaluated now, its numpy scalar result a constant (library code
    computing a frequency scale with np.log). Arrays, tensors, traced numbers, and results that
    are not scalars are a graph break."""

    def call_function(self, tx, args, kwargs):
        consts = [*args, *kwargs.values()]
        if not all(a.is_python_constant() and _numbers(a.as_python_constant()) for a in consts):
            raise Unsupported("numpy", f"numpy {getattr(self.value, '__name__', self.value)} on non-constant "
                              "or non-number arguments")
        try:
            res = self.value(*[a.as_python_constant() for a in args],
                             **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:
            raise Unsupported("constant_raises", f"numpy {self.value.__name__} raised {type(e).__name__}: {e}") \
                from None
        if not (is_numpy_scalar(res) or type(res) in CONSTANT_TYPES):
            raise Unsupported("numpy", f"numpy {self.value.__name__} returned a {type(res).__name__}")
        return ConstantVariable(res)

    def var_getattr(self, tx, name):
        if not hasattr(self.value, name):
            raise Unsupported("no_attribute", f"numpy {self.value.__name__} has no attribute {name!r}")
        attr = getattr(self.value, name)
        if type(attr) not in CONSTANT_TYPES:
            raise Unsupported("numpy", f"attribute {name!r} of numpy {self.value.__name__}")
        return ConstantVariable(attr)


TRUSTED_MODULES = {"torch", "torch.nn", "torch.nn.functional", "torch.linalg", "torch.fft",
                   "torch.special", "torch.nn.init", "math", "operator", "builtins", "itertools",
                   "functools", "collections", "typing", "dataclasses", "torch.autograd",
                   "torch.nn.modules", "cmath", "numbers", "enum"}


class OpaqueVariable(VariableTracker):
    """A frame input of a type we cannot trace (a numpy array, a C object of another library):
    passing it through is fine (it is reloaded from its source); using it is a graph break."""

    def __init__(self, value, source):
        super().__init__(source)
        self.type_name = type(value).__qualname__
        self.what = _describe(value)

    def _fail(self, what: str):
        raise Unsupported("unknown_value", f"{what} {self.what}, which pydynamo cannot trace")

    def python_type(self):
        self._fail("using")

    def as_python_constant(self):
        self._fail("reading")

    def call_function(self, tx, args, kwargs):
        self._fail("calling")

    def __repr__(self):
        return f"OpaqueVariable({self.type_name})"


def _describe(value) -> str:
    """A value of another library, as its user would name it (`zlib.crc32`, `a numpy.ndarray`)."""
    name = getattr(value, "__qualname__", None) or getattr(value, "__name__", None)
    if callable(value) and isinstance(name, str):
        module = getattr(value, "__module__", None) or getattr(getattr(value, "__self__", None), "__name__", None)
        kind = "the C function" if isinstance(value, types.BuiltinFunctionType) else "the function"
        return f"{kind} {module + '.' if module else ''}{name}"
    cls = type(value)
    return f"a {cls.__module__ + '.' if cls.__module__ != 'builtins' else ''}{cls.__qualname__} object"

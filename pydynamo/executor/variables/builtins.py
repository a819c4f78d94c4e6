"""Builtins, `operator` and `math`: one handler per function in a registry table.

Rule of thumb, in order: a specific handler from `HANDLERS`; tensors among the arguments of an
operator/arithmetic builtin -> a graph node; all arguments Python constants and the function pure
-> evaluated now; otherwise Unsupported. Binary operators on user objects call their dunder
methods (inlined).
"""
from __future__ import annotations

import builtins
import collections
import functools
import inspect
import math
import types
import operator

import torch

from pydynamo import shapes
from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker, raises_here
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.containers import (BaseListVariable, ConstDictVariable, ListVariable,
                                                    SetVariable, TupleVariable)
from pydynamo.executor.variables.functions import (BaseUserFunctionVariable, PartialVariable,
                                                   UserFunctionVariable, UserMethodVariable)
from pydynamo.executor.variables.symbolic import SymNodeVariable, sym_binary, sym_number
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.executor.variables.user_objects import NamedTupleVariable, SuperVariable, UserDefinedObjectVariable
from pydynamo.guards import GuardKind

# Pure functions safe to evaluate on constant arguments at trace time.
PURE = {abs, all, any, bool, callable, chr, complex, divmod, float, format, frozenset, hash, int, isinstance,
        issubclass, len, max, min, ord, pow, repr, round, sorted, str, sum, tuple, bytes, slice, range,
        reversed, getattr, hasattr, type, ascii, bin, hex, oct}
PURE |= {getattr(operator, n) for n in dir(operator) if not n.startswith("_")} - {operator.setitem, operator.delitem}
PURE |= {getattr(math, n) for n in dir(math) if callable(getattr(math, n))}
PURE |= {float.fromhex, bytes.fromhex, int.from_bytes, str.maketrans, bytes.maketrans}  # classmethods
# methods of immutable builtin types, reached through the class (int.bit_length(n), str.upper(s))
PURE |= {getattr(t, n) for t in (int, float, complex, str, bytes, tuple, frozenset) for n in dir(t)
         if not n.startswith("_") and isinstance(getattr(t, n), (types.MethodDescriptorType,
                                                                 types.BuiltinMethodType))}

# Operators that become graph nodes when a tensor is involved.
TENSOR_OPS = {getattr(operator, n) for n in (
    "add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor",
    "lshift", "rshift", "neg", "pos", "invert", "abs", "eq", "ne", "lt", "le", "gt", "ge",
    "iadd", "isub", "imul", "itruediv", "ifloordiv", "imod", "ipow", "imatmul", "iand", "ior",
    "ixor", "ilshift", "irshift", "getitem", "setitem")} | {abs, pow, round, divmod}

BINARY_DUNDER = {operator.add: "add", operator.sub: "sub", operator.mul: "mul", operator.truediv: "truediv",
                 operator.floordiv: "floordiv", operator.mod: "mod", operator.pow: "pow",
                 operator.matmul: "matmul", operator.and_: "and", operator.or_: "or", operator.xor: "xor",
                 operator.lshift: "lshift", operator.rshift: "rshift"}
INPLACE_TO_BINARY = {operator.iadd: operator.add, operator.isub: operator.sub, operator.imul: operator.mul,
                     operator.itruediv: operator.truediv, operator.ifloordiv: operator.floordiv,
                     operator.imod: operator.mod, operator.ipow: operator.pow, operator.imatmul: operator.matmul,
                     operator.iand: operator.and_, operator.ior: operator.or_, operator.ixor: operator.xor,
                     operator.ilshift: operator.lshift, operator.irshift: operator.rshift}

HANDLERS: dict = {}


def hashable_in(value, table) -> bool:
    try:
        return value in table
    except TypeError:
        return False


def handler(*fns):
    def deco(f):
        for fn in fns:
            HANDLERS[fn] = f
        return f
    return deco


class BuiltinVariable(VariableTracker):
    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def python_type(self):
        return type(self.fn)

    def as_python_constant(self):
        return self.fn

    def call_function(self, tx, args, kwargs):
        return call_builtin(tx, self.fn, args, kwargs)

    def var_getattr(self, tx, name):
        attr = getattr(self.fn, name, None)
        if isinstance(self.fn, type) and attr is not None and (hashable_in(attr, HANDLERS) or hashable_in(attr, PURE)):
            return BuiltinVariable(attr)  # a classmethod we know (dict.fromkeys, chain.from_iterable)
        if name in ("__name__", "__qualname__"):
            return ConstantVariable(getattr(self.fn, name))
        return super().var_getattr(tx, name)

    def reconstruct(self, cg):
        return cg.load_const(self.fn)

    def __repr__(self):
        return f"BuiltinVariable({getattr(self.fn, '__name__', self.fn)})"


def call_builtin(tx, fn, args, kwargs):
    h = HANDLERS.get(fn)
    if h is not None:
        res = h(tx, *args, **kwargs)
        if res is not NotImplemented:
            return res
    if fn in TENSOR_OPS and any(isinstance(a, TensorVariable) for a in args):
        return tx.output.call(tx, "call_function", fn, list(args), kwargs)
    if fn in BINARY_DUNDER and len(args) == 2:
        return binary_op(tx, fn, args[0], args[1])
    symbolic = any(isinstance(a, SymNodeVariable) for a in (*args, *kwargs.values()))
    if fn in PURE and (symbolic or all(a.is_python_constant() for a in args) and
                       all(v.is_python_constant() for v in kwargs.values())):
        # a symbolic size reaching here is pinned to its value (guarded): correct, less general
        try:
            res = fn(*[a.as_python_constant() for a in args], **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Exception as e:
            raise raises_here("constant_raises", f"{getattr(fn, '__name__', fn)}(...) raised "
                              f"{type(e).__name__}: {e}") from None
        return tx.wrap_constant_result(res)
    raise Unsupported("builtin", f"{getattr(fn, '__name__', fn)} on {[type(a).__name__ for a in args]}")


def binary_op(tx, fn, a, b):
    if fn in INPLACE_TO_BINARY:
        if isinstance(a, ListVariable) and fn is operator.iadd:
            return a.call_method(tx, "__iadd__", [b], {})
        if isinstance(a, TensorVariable):
            return tx.output.call(tx, "call_function", fn, [a, b], {})
        r = _user_dunder(tx, a, "__i" + BINARY_DUNDER[INPLACE_TO_BINARY[fn]] + "__", b)
        if r is not None:
            return r
        fn = INPLACE_TO_BINARY[fn]
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return tx.output.call(tx, "call_function", fn, [a, b], {})
    if isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable):
        r = sym_binary(tx, fn, a, b)
        if r is not None:
            return r
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable) and fn is operator.add:
        if a.python_type() is b.python_type() or (isinstance(a, TupleVariable) and isinstance(b, TupleVariable)):
            return a.new(a.items + b.items) if type(a) is not ListVariable else ListVariable(a.items + b.items)
    if fn is operator.mul and isinstance(a, BaseListVariable) and b.is_python_constant():
        return (ListVariable if type(a) is ListVariable else a.new)(a.items * b.as_python_constant())
    if fn is operator.mul and isinstance(b, BaseListVariable) and a.is_python_constant():
        return binary_op(tx, fn, b, a)
    if a.is_python_constant() and b.is_python_constant():
        try:
            return tx.wrap_constant_result(fn(a.as_python_constant(), b.as_python_constant()))
        except Exception as e:
            raise raises_here("constant_raises", f"{fn.__name__} raised {type(e).__name__}: {e}") from None
    name = BINARY_DUNDER.get(fn)
    if name:
        r = _user_dunder(tx, a, f"__{name}__", b)
        if r is None:
            r = _user_dunder(tx, b, f"__r{name}__", a)
        if r is not None:
            return r
    raise Unsupported("binary_op", f"{fn.__name__} on {a} and {b}")


def _user_dunder(tx, obj, name, other):
    if isinstance(obj, UserDefinedObjectVariable) and hasattr(obj.cls, name):
        return obj.call_method(tx, name, [other], {})
    return None


def compare(tx, fn, a, b):
    if fn in (operator.is_, operator.is_not):
        same = _identical(a, b)
        if not same and a.source is not None and b.source is not None and \
                not isinstance(a, ConstantVariable) and not isinstance(b, ConstantVariable):
            # two objects from outside the frame are distinct now: a later call may pass one
            # object for both (ALIASING guards only the other way), so pin their identities
            for v in (a, b):
                value = tx.root.builder.identity_of(v)
                if value is not None:
                    tx.add_guard(v.source, GuardKind.ID_MATCH, (id(value), type(value).__qualname__))
        return ConstantVariable(same if fn is operator.is_ else not same)
    if isinstance(a, TensorVariable) or isinstance(b, TensorVariable):
        return tx.output.call(tx, "call_function", fn, [a, b], {})
    if isinstance(a, SymNodeVariable) or isinstance(b, SymNodeVariable):
        r = sym_binary(tx, fn, a, b)  # decided on the hints, recorded as a shape guard
        if r is not None:
            return r
    if a.is_python_constant() and b.is_python_constant():
        return tx.wrap_constant_result(fn(a.as_python_constant(), b.as_python_constant()))
    if fn in (operator.eq, operator.ne):
        eq = _equal(tx, a, b)
        if eq is not None:
            return ConstantVariable(eq if fn is operator.eq else not eq)
        return a.call_method(tx, "__eq__" if fn is operator.eq else "__ne__", [b], {})
    raise Unsupported("compare", f"{fn.__name__} on {a} and {b}")


def _equal(tx, a, b):
    """`a == b` decided at trace time, or None when a's class defines its own __eq__ to call.
    Containers compare element-wise like Python (identity first, as list.__eq__ does)."""
    if _identical(a, b):
        return True
    if isinstance(a, BaseListVariable) and isinstance(b, BaseListVariable):
        if not (issubclass(a.python_type(), b.python_type()) or issubclass(b.python_type(), a.python_type())):
            return False
        return len(a.items) == len(b.items) and all(
            _identical(x, y) or compare(tx, operator.eq, x, y).truthy(tx) for x, y in zip(a.items, b.items))
    if isinstance(a, ConstDictVariable) and isinstance(b, ConstDictVariable):
        return set(a.items) == set(b.items) and all(
            _identical(a.items[k], b.items[k]) or compare(tx, operator.eq, a.items[k], b.items[k]).truthy(tx)
            for k in a.items)
    if isinstance(a, UserDefinedObjectVariable) and a.cls.__eq__ is not object.__eq__:
        return None
    if isinstance(a, (BaseListVariable, ConstDictVariable)) or isinstance(b, (BaseListVariable, ConstDictVariable)):
        return False  # a container never equals a non-container here (both sides are known types)
    if hasattr(a, "value") or hasattr(b, "value") or a.python_type().__eq__ is object.__eq__:
        return False  # default object equality is identity, checked above
    raise Unsupported("compare", f"== on {a} and {b}")


def _identical(a, b) -> bool:
    """`a is b` on trackers: the same tracker, or the same underlying Python object."""
    if a is b:
        return True
    oa, ob = _identity_object(a), _identity_object(b)
    return oa is not _NO and ob is not _NO and oa is ob


def _identity_object(v):
    value = getattr(v, "value", _NO)
    if value is not _NO and value is not None:
        return value
    if isinstance(v, (ConstantVariable, ObjectVariable)):
        return v.value
    if isinstance(v, (TensorVariable,)) or getattr(v, "source", None) is None and \
            type(v).__name__ in ("ListVariable", "ConstDictVariable", "SetVariable", "UserDefinedObjectVariable"):
        return _NO  # made in the frame: only the same tracker is the same object
    try:
        return v.as_python_constant()
    except Unsupported:
        return _NO


_NO = object()


# --- specific builtins ---------------------------------------------------------------------------

@handler(len)
def _len(tx, obj):
    if isinstance(obj, TensorVariable):
        return SymNodeVariable.wrap(obj.sizes()[0])
    if obj.is_python_constant() and not isinstance(obj, ObjectVariable):
        return ConstantVariable(len(obj.as_python_constant()))
    return obj.call_method(tx, "__len__", [], {})


@handler(isinstance)
def _isinstance(tx, obj, cls):
    classes = cls.as_python_constant()
    t = obj.python_type()
    if isinstance(obj, TensorVariable) and classes is torch.nn.Parameter:
        return ConstantVariable(issubclass(t, torch.nn.Parameter))
    return ConstantVariable(issubclass(t, classes) if isinstance(classes, (type, tuple)) else
                            isinstance(obj.as_python_constant(), classes))


@handler(type)
def _type(tx, *args, **kwargs):
    if len(args) != 1:
        raise Unsupported("type3", "type() with three arguments")
    return tx.wrap(args[0].python_type(), None)


@handler(bool)
def _bool(tx, obj=None):
    if isinstance(obj, SymNodeVariable):  # a value, not a branch: stays symbolic (SymBool)
        return SymNodeVariable.wrap(shapes.sym_bool(obj.value))
    return ConstantVariable(False if obj is None else obj.truthy(tx))


@handler(int, float, complex, str)
def _scalar_ctor(tx, *args, **kwargs):
    if any(isinstance(a, TensorVariable) for a in args):
        raise Unsupported("tensor_item", "converting a tensor to a Python number (data-dependent)")
    return NotImplemented


@handler(int)
def _int(tx, *args, **kwargs):
    if len(args) == 1 and not kwargs and isinstance(args[0], SymNodeVariable):
        return SymNodeVariable.wrap(shapes.sym_int(sym_number(args[0])))  # stays symbolic, as in torch
    return _scalar_ctor(tx, *args, **kwargs)


@handler(float)
def _float(tx, *args, **kwargs):
    if len(args) == 1 and not kwargs and isinstance(args[0], SymNodeVariable):
        v = sym_number(args[0])  # stays symbolic, as in torch: a SymFloat as is, a SymInt as a float
        if isinstance(v, bool):
            return ConstantVariable(float(v))
        return SymNodeVariable.wrap(v if isinstance(v, shapes.SymFloat) else v.env.symfloat(v.expr, float(v.hint)))
    return _scalar_ctor(tx, *args, **kwargs)


def _sym_unary(fn):
    def h(tx, *args, **kwargs):
        if len(args) == 1 and not kwargs and isinstance(args[0], SymNodeVariable):
            return SymNodeVariable.wrap(fn(sym_number(args[0])))
        return NotImplemented
    return h


for _fn in (abs, operator.neg, operator.pos, operator.abs):
    HANDLERS.setdefault(_fn, _sym_unary(_fn))


@handler(range)
def _range(tx, *args):
    return ConstantVariable(range(*[a.as_python_constant() for a in args]))


def _make_seq(cls):
    def h(tx, it=None):
        items = [] if it is None else tx.unpack(it)
        return ListVariable(items) if cls is list else TupleVariable(items)
    return h


HANDLERS[list] = _make_seq(list)
HANDLERS[tuple] = _make_seq(tuple)


def _make_set(cls):
    def h(tx, it=None):
        return SetVariable([] if it is None else tx.unpack(it), cls)
    return h


HANDLERS[set] = _make_set(set)
HANDLERS[frozenset] = _make_set(frozenset)


@handler(dict)
def _dict(tx, *args, **kwargs):
    d = ConstDictVariable({})
    d.call_method(tx, "update", list(args), kwargs)
    return d


def _make_minmax(fn):
    def h(tx, *args, **kwargs):
        items = tx.unpack(args[0]) if len(args) == 1 else list(args)
        if any(isinstance(a, TensorVariable) for a in items):
            if len(items) == 2 and not kwargs:
                return tx.output.call(tx, "call_function", torch.maximum if fn is max else torch.minimum,
                                      items, {}) if all(isinstance(a, TensorVariable) for a in items) else \
                    _raise_tensor_branch()
            _raise_tensor_branch()
        if any(isinstance(a, SymNodeVariable) for a in items) and not kwargs:
            # min/max of sizes: a Min/Max expression, no guard (sym_min / sym_max)
            acc = sym_number(items[0])
            for a in items[1:]:
                v = sym_number(a)
                acc = (shapes.sym_max if fn is max else shapes.sym_min)(acc, v)
            return SymNodeVariable.wrap(acc)
        if kwargs.get("key") is not None:
            key = kwargs["key"]
            keys = [key.call_function(tx, [i], {}).as_python_constant() for i in items]
            best = fn(range(len(items)), key=lambda j: keys[j])
            return items[best]
        vals = [a.as_python_constant() for a in items]
        return items[vals.index(fn(vals))]
    return h


def _raise_tensor_branch():
    raise Unsupported("tensor_branch", "min/max of tensors compares tensor values (data-dependent)")


HANDLERS[min] = _make_minmax(min)
HANDLERS[max] = _make_minmax(max)


@handler(sum)
def _sum(tx, it, start=None):
    acc = start if start is not None else ConstantVariable(0)
    for item in tx.unpack(it):
        acc = binary_op(tx, operator.add, acc, item)
    return acc


def _make_anyall(fn):
    def h(tx, it):
        vals = [i.truthy(tx) for i in tx.unpack(it)]
        return ConstantVariable(fn(vals))
    return h


HANDLERS[any] = _make_anyall(any)
HANDLERS[all] = _make_anyall(all)


@handler(sorted)
def _sorted(tx, it, key=None, reverse=None):
    out = ListVariable(tx.unpack(it))
    kw = {}
    if key is not None:
        kw["key"] = key
    if reverse is not None:
        kw["reverse"] = reverse
    out.call_method(tx, "sort", [], kw)
    return out


@handler(getattr)
def _getattr(tx, obj, name, default=None):
    try:
        return tx.getattr(obj, name.as_python_constant())
    except Unsupported as e:
        if default is not None and e.reason_code == "no_attribute":
            return default
        raise


@handler(hasattr)
def _hasattr(tx, obj, name):
    try:
        tx.getattr(obj, name.as_python_constant())
        return ConstantVariable(True)
    except Unsupported as e:
        if e.reason_code == "no_attribute":
            return ConstantVariable(False)
        raise


@handler(setattr)
def _setattr(tx, obj, name, value):
    obj.setattr(tx, name.as_python_constant(), value)
    return ConstantVariable(None)


@handler(object.__getattribute__)
def _obj_getattribute(tx, obj, name):
    """object.__getattribute__(obj, name): the plain lookup, past the class's own."""
    if isinstance(obj, UserDefinedObjectVariable):
        return obj.plain_getattr(tx, name.as_python_constant())
    return tx.getattr(obj, name.as_python_constant())


@handler(vars)
def _vars(tx, obj):
    """vars(obj) of an object made in the frame: its live attribute table."""
    if isinstance(obj, UserDefinedObjectVariable) and obj.value is None:
        return obj.instance_dict()
    raise Unsupported("vars", f"vars() of {obj}")


@handler(delattr)
def _delattr(tx, obj, name):
    obj.delattr(tx, name.as_python_constant())
    return ConstantVariable(None)


@handler(object.__setattr__)
def _obj_setattr(tx, obj, name, value):
    """object.__setattr__ bypasses the class's own __setattr__ (frozen dataclasses use it)."""
    if isinstance(obj, UserDefinedObjectVariable):
        obj.store(tx, name.as_python_constant(), value)
    else:
        obj.setattr(tx, name.as_python_constant(), value)
    return ConstantVariable(None)


@handler(iter)
def _iter(tx, obj):
    return obj.get_iter(tx)


@handler(next)
def _next(tx, it, default=None):
    if not hasattr(it, "next_variable"):
        raise Unsupported("unpack", f"next() of {it}")
    return it.next_variable(tx, default)


@handler(functools.reduce)
def _reduce(tx, fn, seq, *initial):
    items = tx.unpack(seq)
    if initial:
        items = [initial[0], *items]
    elif not items:
        raise Unsupported("constant_raises", "reduce() of an empty sequence with no initial value")
    acc = items[0]
    for v in items[1:]:
        acc = fn.call_function(tx, [acc, v], {})
    return acc



@handler(print)
def _print(tx, *args, **kwargs):
    raise Unsupported("print", "print() has a side effect outside the graph",
                      hint="remove the print, or use pydynamo.disable on a helper that prints")


@handler(id)
def _id(tx, obj):
    real = _identity_object(obj)
    if real is _NO or isinstance(obj, TensorVariable):
        raise Unsupported("id", "id() of a value made during tracing")
    if obj.source is not None:
        tx.add_guard(obj.source, GuardKind.ID_MATCH, (id(real), type(real).__name__))
    return ConstantVariable(id(real))


@handler(callable)
def _callable(tx, obj):
    if isinstance(obj, (BaseUserFunctionVariable, UserMethodVariable, BuiltinVariable)):
        return ConstantVariable(True)
    return NotImplemented if obj.is_python_constant() else ConstantVariable(callable(obj.python_type()) and
                                                                            hasattr(obj.python_type(), "__call__"))


@handler(operator.getitem)
def _getitem(tx, obj, key):
    return tx.getitem(obj, key)


@handler(operator.setitem)
def _setitem(tx, obj, key, value):
    if isinstance(obj, TensorVariable):
        tx.output.call(tx, "call_function", operator.setitem, [obj, key, value], {})
        return ConstantVariable(None)
    obj.call_method(tx, "__setitem__", [key, value], {})
    return ConstantVariable(None)


@handler(operator.contains)
def _contains(tx, container, item):
    return tx.contains_op(container, item)


def _make_cmp(fn):
    return lambda tx, a, b: compare(tx, fn, a, b)


for _fn in (operator.is_, operator.is_not, operator.eq, operator.ne, operator.lt, operator.le, operator.gt, operator.ge):
    HANDLERS[_fn] = _make_cmp(_fn)


@handler(operator.not_)
def _not(tx, a):
    return ConstantVariable(not a.truthy(tx))


@handler(operator.truth)
def _truth(tx, a):
    return ConstantVariable(a.truthy(tx))


@handler(functools.partial)
def _partial(tx, fn, *args, **kwargs):
    return PartialVariable(fn, list(args), kwargs)


@handler(super)
def _super(tx, *args):
    if len(args) != 2:
        raise Unsupported("super", "super() without arguments outside a method")
    return SuperVariable(args[0].as_python_constant(), args[1])


@handler(collections.OrderedDict)
def _ordered_dict(tx, *args, **kwargs):
    d = ConstDictVariable({}, collections.OrderedDict)
    d.call_method(tx, "update", list(args), kwargs)
    return d


@handler(collections.defaultdict)
def _defaultdict(tx, factory=None, *args, **kwargs):
    if factory is not None and factory.is_python_constant() and factory.as_python_constant() is None:
        factory = None
    d = ConstDictVariable({}, collections.defaultdict, default_factory=factory)
    d.call_method(tx, "update", list(args), kwargs)
    return d


@handler(tuple.__new__)
def _tuple_new(tx, cls, iterable=None):
    """tuple.__new__(cls, iterable): namedtuple's _make and __new__ reach it."""
    c = cls.as_python_constant()
    items = [] if iterable is None else tx.unpack(iterable)
    if c is tuple:
        return TupleVariable(items)
    if isinstance(c, type) and issubclass(c, tuple) and hasattr(c, "_fields") and c.__bases__ == (tuple,):
        return NamedTupleVariable(items, c)
    raise Unsupported("tuple_new", f"tuple.__new__ of {getattr(c, '__name__', c)}")


def _make_fromkeys(cls):
    def h(tx, keys, value=None):
        # one value object under every key, as dict.fromkeys does
        value = ConstantVariable(None) if value is None else value
        d = ConstDictVariable({}, cls)
        for k in tx.unpack(keys):
            d.items[d._key(k)] = value
        return d
    return h


for _cls in (dict, collections.OrderedDict, collections.defaultdict):
    HANDLERS[_cls.fromkeys] = _make_fromkeys(_cls)


class GetterVariable(VariableTracker):
    """operator.itemgetter / attrgetter objects (made in the frame or found)."""

    def __init__(self, kind, keys, source=None):
        super().__init__(source)
        self.kind, self.keys = kind, list(keys)

    def call_function(self, tx, args, kwargs):
        obj = args[0]
        if self.kind is operator.itemgetter:
            vals = [tx.getitem(obj, tx.wrap_constant_result(k)) for k in self.keys]
        else:
            vals = []
            for k in self.keys:
                v = obj
                for part in k.split("."):
                    v = tx.getattr(v, part)
                vals.append(v)
        return vals[0] if len(vals) == 1 else tx.tuple(vals)


HANDLERS[operator.itemgetter] = lambda tx, *k: GetterVariable(operator.itemgetter, [x.as_python_constant() for x in k])
HANDLERS[operator.attrgetter] = lambda tx, *k: GetterVariable(operator.attrgetter, [x.as_python_constant() for x in k])


@handler(inspect.signature)
def _signature(tx, fn, **kwargs):
    """inspect.signature of a known callable is a constant (Signature objects are immutable)."""
    if isinstance(fn, UserMethodVariable) and isinstance(fn.fn, UserFunctionVariable) and \
            getattr(fn.obj, "value", None) is not None:
        real = types.MethodType(fn.fn.fn, fn.obj.value)
    else:
        real = fn.as_python_constant()
    return tx.wrap_constant_result(inspect.signature(real, **{k: v.as_python_constant() for k, v in kwargs.items()}))

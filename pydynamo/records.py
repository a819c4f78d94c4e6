"""Value classes declared as dataclasses, without the code a dataclass generates per class.

`@dataclasses.dataclass(frozen=True)` compiles six methods per class (`__init__`, `__repr__`,
`__eq__`, `__hash__`, and the frozen `__setattr__`/`__delattr__`) from generated source: about
0.4 ms a class, 5 ms for sources.py's thirteen, paid by every process that imports them (a
warm-start hit unpickles guards that hold sources: issue 20's first call). `@record` declares the
class with `dataclasses.dataclass(init=False, repr=False, eq=False)` (the fields only: nothing is
compiled) and gives it shared generic methods that read the fields. Even that declaration (about
40 us a class: twenty on a warm hit's path) waits until something asks for the dataclass
(`dataclasses.fields`, `replace`, `is_dataclass`, a dataclass subclass): `__dataclass_fields__`
and `__dataclass_params__` are placeholders (`_Declared`) that run it on first read, while the
record's own methods work from its fields as read here (`_own_fields`, the same rules):

    @record                      # frozen, compared and hashed by its fields (as frozen=True)
    class AttrSource(Source):
        src: Source
        attr: str

Invariants:
  * To everything outside the class it is the dataclass it declares: `dataclasses.fields`,
    `replace`, `is_dataclass` work (replace calls the class with keywords), instances pickle as
    a frozen dataclass's do (class reference and instance dict: pickles written before load), and
    `__init__` takes the same positional and keyword arguments with the same defaults.
  * frozen=True (default): attribute stores and deletes raise dataclasses.FrozenInstanceError;
    equality is `type(a) is type(b)` and equal field values (as a frozen dataclass's), the
    hash that of the values (of a lone field's value itself: equal objects, equal hashes). eq=False: identity equality and hash. frozen=False: settable,
    compared by fields, unhashable (a plain dataclass's defaults).
  * A default_factory is called for each instance that is not given the field, and
    `__post_init__` (without InitVar arguments: refused) runs at the end of `__init__`, as
    dataclasses does.
  * A method the class defines itself (`__repr__`, `__str__`, ...) is kept, as dataclasses does.
  * Deferred or not, the declaration is dataclasses' own on the class as written (its field()
    objects back in place), so fields, defaults, class attributes and `__match_args__` are what
    an eager declaration gives; what dataclasses would refuse (a mutable default, a field()
    without a type) or what this module does not read itself (ClassVar, InitVar, KW_ONLY, a
    field() with other options, a base that is a plain dataclass) is declared at once, by
    dataclasses, as before.
  * A leaf: imports nothing of the project.
"""
from __future__ import annotations

import dataclasses
import operator
import threading

__all__ = ["record"]


def _init(self, *args, **kwargs):
    cls = type(self)
    names = cls._record_fields
    if not kwargs and len(args) == len(names):     # every field given by position: the common
        self.__dict__.update(zip(names, args))      # call (a warm hit builds a guard each)
        if cls._record_post_init:
            self.__post_init__()
        return
    if len(args) > len(names):
        raise TypeError(f"{cls.__qualname__}() takes {len(names)} arguments, {len(args)} given")
    d = self.__dict__           # (past the frozen __setattr__, as a frozen dataclass's init)
    for i, name in enumerate(names):
        if i < len(args):
            if name in kwargs:
                raise TypeError(f"{cls.__qualname__}() got multiple values for {name!r}")
            d[name] = args[i]
        elif name in kwargs:
            d[name] = kwargs[name]
        else:
            try:
                d[name] = cls._record_defaults[name]
            except KeyError:
                if name not in cls._record_factories:
                    raise TypeError(f"{cls.__qualname__}() missing argument {name!r}") from None
                d[name] = cls._record_factories[name]()
    if kwargs and not cls._record_names.issuperset(kwargs):
        raise TypeError(f"{cls.__qualname__}() got unexpected arguments "
                        f"{sorted(set(kwargs) - cls._record_names)}")
    if cls._record_post_init:
        self.__post_init__()


def _repr(self) -> str:
    d = self.__dict__
    return f"{type(self).__qualname__}(" + ", ".join(
        f"{n}={d[n]!r}" for n in type(self)._record_fields) + ")"


def _eq(self, other):
    if other.__class__ is not self.__class__:
        return NotImplemented
    values = self._record_values      # (operator.attrgetter of the fields: C speed)
    return values(self) == values(other)


def _hash(self) -> int:
    return hash(self._record_values(self))


def _replace(self, **changes):
    """copy.replace (Python 3.13) as a dataclass's: dataclasses.replace."""
    return dataclasses.replace(self, **changes)


def _frozen_setattr(self, name, value):
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


class _Declared:
    """`__dataclass_fields__` / `__dataclass_params__` of a record until first read (fields(),
    replace(), is_dataclass(), a dataclass subclass): dataclasses then declares the class
    (`_declare`), replacing both with its own. Found through a subclass too: it declares the
    class that holds it, whose fields a plain subclass inherits."""

    def __init__(self, cls, name: str):
        self.cls, self.name = cls, name

    def __get__(self, obj, owner=None):
        return getattr(_declare(self.cls), self.name)


# reentrant: declaring a class reads its record bases' fields, declaring them first
_lock = threading.RLock()


def _declare(cls):
    """Run dataclasses.dataclass(init=False, repr=False, eq=False) on a record declared lazily
    (once): the class as it was declared (its dataclasses.field() defaults back in place), so
    its fields, params and class attributes are what the eager declaration gave."""
    with _lock:
        if isinstance(cls.__dict__.get("__dataclass_fields__"), _Declared):
            del cls.__dataclass_fields__
            del cls.__dataclass_params__
            for name, f in cls._record_declared.items():
                setattr(cls, name, f)
            dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
    return cls


def _own_fields(cls):
    """(names, defaults, factories, declared Field objects) of a class whose declaration the
    lazy path reads exactly as dataclasses would, else None: every base with fields is a
    record, and its own annotations are plain (no ClassVar, InitVar, KW_ONLY, field() beyond
    default/default_factory, unhashable default: dataclasses' own checks decide those)."""
    names, defaults, factories = [], {}, {}
    for base in cls.__mro__[-1:0:-1]:
        if "__dataclass_fields__" in base.__dict__:
            if "_record_fields" not in base.__dict__:
                return None         # a dataclass base: dataclasses declares the class
            names += [n for n in base._record_fields if n not in names]
            defaults.update(base._record_defaults)
            factories.update(base._record_factories)
    annotations = cls.__dict__.get("__annotations__", {})
    if any(isinstance(v, dataclasses.Field) and k not in annotations for k, v in cls.__dict__.items()):
        return None                 # (a field() without a type: dataclasses raises TypeError)
    declared = {}
    for name, typ in annotations.items():
        try:
            text = typ if isinstance(typ, str) else repr(typ)
        except Exception:           # (an annotation without a repr: dataclasses reads it)
            return None
        if "ClassVar" in text or "InitVar" in text or "KW_ONLY" in text:
            return None
        if name not in names:
            names.append(name)
        defaults.pop(name, None)
        factories.pop(name, None)
        # (as dataclasses reads it: a base's class attribute is the default of a field declared
        # again without one)
        value = getattr(cls, name, dataclasses.MISSING)
        if isinstance(value, dataclasses.Field):
            if name not in cls.__dict__:
                return None
            plain = dataclasses.field(default=value.default, default_factory=value.default_factory)
            if (value.init, value.repr, value.hash, value.compare, value.metadata, value.kw_only) \
                    != (plain.init, plain.repr, plain.hash, plain.compare, plain.metadata,
                        plain.kw_only):
                return None
            declared[name] = value
            if value.default_factory is not dataclasses.MISSING:
                factories[name] = value.default_factory
            elif value.default is not dataclasses.MISSING:
                defaults[name] = value.default
        elif value is not dataclasses.MISSING:
            if type(value).__hash__ is None:
                return None         # (a mutable default: dataclasses raises ValueError)
            defaults[name] = value
    return names, defaults, factories, declared


def record(cls=None, *, frozen: bool = True, eq: bool = True):
    """Declare `cls` a dataclass with generic methods (see the module docstring)."""
    def wrap(cls):
        if cls.__doc__ is None:     # (else dataclasses reads the signature: inspect, slow)
            cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
        own = _own_fields(cls)
        if own is None:             # declared by dataclasses now, as any dataclass
            cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
            if any(type(f.type) is dataclasses.InitVar or "InitVar" in str(f.type)
                   for f in cls.__dataclass_fields__.values()):
                raise TypeError(f"{cls.__qualname__}: @record takes no InitVar")
            fields = dataclasses.fields(cls)
            names = [f.name for f in fields]
            defaults = {f.name: f.default for f in fields if f.default is not dataclasses.MISSING}
            factories = {f.name: f.default_factory for f in fields
                         if f.default_factory is not dataclasses.MISSING}
        else:                       # declared by dataclasses when first asked (_Declared)
            names, defaults, factories, declared = own
            cls._record_declared = declared
            for name, f in declared.items():    # (the class attributes dataclasses leaves)
                if f.default is dataclasses.MISSING:
                    delattr(cls, name)
                else:
                    setattr(cls, name, f.default)
            cls.__dataclass_fields__ = _Declared(cls, "__dataclass_fields__")
            cls.__dataclass_params__ = _Declared(cls, "__dataclass_params__")
            if "__match_args__" not in cls.__dict__:
                cls.__match_args__ = tuple(names)
        cls._record_fields = tuple(names)
        cls._record_names = frozenset(cls._record_fields)
        # the fields' values as one tuple (attrgetter returns a lone field's value bare)
        cls._record_values = operator.attrgetter(*names) if len(names) > 1 else \
            (operator.attrgetter(names[0]) if names else staticmethod(lambda obj: ()))
        cls._record_defaults = defaults
        cls._record_factories = factories
        cls._record_post_init = hasattr(cls, "__post_init__")
        methods = {"__init__": _init, "__repr__": _repr, "__replace__": _replace}
        if eq:
            methods["__eq__"] = _eq
            methods["__hash__"] = _hash if frozen else None
        if frozen:
            methods["__setattr__"] = _frozen_setattr
            methods["__delattr__"] = _frozen_delattr
        for name, fn in methods.items():
            if name not in cls.__dict__:
                setattr(cls, name, fn)
        return cls
    return wrap if cls is None else wrap(cls)

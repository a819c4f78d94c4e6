"""Value classes declared as dataclasses, without the code a dataclass generates per class.

`@dataclasses.dataclass(frozen=True)` compiles six methods per class (`__init__`, `__repr__`,
`__eq__`, `__hash__`, and the frozen `__setattr__`/`__delattr__`) from generated source: about
0.4 ms a class, 5 ms for sources.py's thirteen, paid by every process that imports them (a
warm-start hit unpickles guards that hold sources: issue 20's first call). `@record` declares the
class with `dataclasses.dataclass(init=False, repr=False, eq=False)` (the fields only: nothing is
compiled) and gives it shared generic methods that read the fields:

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
  * A leaf: imports nothing of the project.
"""
from __future__ import annotations

import dataclasses
import operator

__all__ = ["record"]


def _init(self, *args, **kwargs):
    cls = type(self)
    names = cls._record_fields
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


def _frozen_setattr(self, name, value):
    raise dataclasses.FrozenInstanceError(f"cannot assign to field {name!r}")


def _frozen_delattr(self, name):
    raise dataclasses.FrozenInstanceError(f"cannot delete field {name!r}")


def record(cls=None, *, frozen: bool = True, eq: bool = True):
    """Declare `cls` a dataclass with generic methods (see the module docstring)."""
    def wrap(cls):
        if cls.__doc__ is None:     # (else dataclasses reads the signature: inspect, slow)
            cls.__doc__ = f"{cls.__name__}({', '.join(cls.__dict__.get('__annotations__', ()))})"
        cls = dataclasses.dataclass(init=False, repr=False, eq=False)(cls)
        fields = dataclasses.fields(cls)
        if any(type(f.type) is dataclasses.InitVar or "InitVar" in str(f.type)
               for f in cls.__dataclass_fields__.values()):
            raise TypeError(f"{cls.__qualname__}: @record takes no InitVar")
        defaults, factories = {}, {}
        for f in fields:
            if f.default_factory is not dataclasses.MISSING:
                factories[f.name] = f.default_factory
            elif f.default is not dataclasses.MISSING:
                defaults[f.name] = f.default
        cls._record_fields = tuple(f.name for f in fields)
        cls._record_names = frozenset(cls._record_fields)
        # the fields' values as one tuple (attrgetter returns a lone field's value bare)
        cls._record_values = operator.attrgetter(*cls._record_fields) if len(fields) > 1 else \
            (operator.attrgetter(fields[0].name) if fields else staticmethod(lambda obj: ()))
        cls._record_defaults = defaults
        cls._record_factories = factories
        cls._record_post_init = hasattr(cls, "__post_init__")
        methods = {"__init__": _init, "__repr__": _repr}
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

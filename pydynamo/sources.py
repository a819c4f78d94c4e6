"""Sources: where a traced value came from.

One Source object does two jobs, so they can never disagree:
  * `name()` — the text used in guards and messages: L['x'], G['W'], L['self'].fc.weight
  * `reload()` — the Python expression that re-reads the value inside the generated output code
    (arguments and free variables are plain names there; globals are read by name).
`guard_expr()` is `name()` made cheap to evaluate: nn.Module parameters/submodules are read
straight from `_parameters` / `_modules` / `_buffers` instead of through `Module.__getattr__`.
Sources are immutable and hashable; equal sources name the same value. They are dataclasses
declared through pydynamo/records.py (no per-class generated code: a warm-start hit imports
this module to unpickle its guards).
"""
from __future__ import annotations

from typing import Any, Callable

from pydynamo.records import record


class Source:
    def render(self, local: Callable[[str], str], glob: Callable[[str], str], fast: bool) -> str:
        raise NotImplementedError

    def name(self) -> str:
        return self.render(lambda n: f"L[{n!r}]", lambda n: f"G[{n!r}]", False)

    def guard_expr(self) -> str:
        return self.render(lambda n: f"L[{n!r}]", lambda n: f"G[{n!r}]", True)

    def reload(self) -> str:
        return self.render(py_name, lambda n: n, True)

    @property
    def base(self) -> "Source | None":
        return None

    def root(self) -> "Source":
        src = self
        while src.base is not None:
            src = src.base
        return src

    def __str__(self) -> str:
        return self.name()


def py_name(name: str) -> str:
    """A local's name as the output code spells it: CPython's own `.0` (the iterator argument of
    3.11 comprehension code) is not an identifier, so the output code uses a stand-in and
    build_code renames it back in co_varnames."""
    return name if name.isidentifier() else "__pydynamo_dot" + "".join(c for c in name if c.isalnum())


@record
class LocalSource(Source):
    """An argument or free variable of the frame, as found in `frame_locals`."""
    local_name: str

    def render(self, local, glob, fast):
        return local(self.local_name)


@record
class GlobalSource(Source):
    global_name: str

    def render(self, local, glob, fast):
        return glob(self.global_name)


@record
class AttrSource(Source):
    src: Source
    attr: str

    @property
    def base(self):
        return self.src

    def render(self, local, glob, fast):
        return f"{self.src.render(local, glob, fast)}.{self.attr}"


@record
class ModuleDictSource(Source):
    """`mod.attr` where attr lives in one of nn.Module's registries (_parameters/_buffers/_modules).
    Named like an attribute; read through the registry dict in guards and output code (faster)."""
    src: Source
    registry: str
    attr: str

    @property
    def base(self):
        return self.src

    def render(self, local, glob, fast):
        inner = self.src.render(local, glob, fast)
        if fast:
            return f"{inner}.{self.registry}[{self.attr!r}]"
        return f"{inner}.{self.attr}"


@record
class GetItemSource(Source):
    src: Source
    index: Any  # a hashable Python constant: int, str, slice-free

    @property
    def base(self):
        return self.src

    def render(self, local, glob, fast):
        return f"{self.src.render(local, glob, fast)}[{self.index!r}]"


@record
class DictItemSource(GetItemSource):
    """An item of a dict subclass read as dict's own item, past a `__getitem__` the subclass
    overrides (transformers' ModelOutput builds `dict(self.items())` inside its __getitem__:
    re-reading through it would recurse)."""

    def render(self, local, glob, fast):
        return f"dict.__getitem__({self.src.render(local, glob, fast)}, {self.index!r})"


@record
class PlainAttrSource(AttrSource):
    """`src.attr` read as object.__getattribute__ reads it, past the class's own
    `__getattribute__` (which may be the very code being compiled: re-reading through it from
    its own output code would call itself without end), and without a Python frame in guards."""

    def render(self, local, glob, fast):
        return f"object.__getattribute__({self.src.render(local, glob, fast)}, {self.attr!r})"


@record
class DictValueAtSource(GetItemSource):
    """The value at position `index` in a dict's order: an item whose key has no literal
    spelling (a class, typing.Union); only after the DICT_KEYS guard pinned keys and order."""

    def render(self, local, glob, fast):
        return f"list({self.src.render(local, glob, fast)}.values())[{self.index}]"


@record
class MappingGetSource(GetItemSource):
    """`src.get(key)`: a mapping's entry or None when it has none (os.environ reads: the guard
    pins presence as well as value, and a missing key is a value, not an exception)."""

    def render(self, local, glob, fast):
        return f"{self.src.render(local, glob, fast)}.get({self.index!r})"


@record
class InstanceDictHasSource(Source):
    """`key in obj.__dict__`: whether the object's own attributes hold `key`. Guarded False
    where a read of `obj.key` found a class attribute: an instance attribute set later shadows
    it, and the class attribute's own guard cannot see that."""
    src: Source
    key: str

    @property
    def base(self):
        return self.src

    def render(self, local, glob, fast):
        return f"({self.key!r} in {self.src.render(local, glob, fast)}.__dict__)"


@record
class DefaultsSource(Source):
    """A default argument value of a function reached through `fn_source`."""
    fn_source: Source
    index: Any
    kw: bool = False

    @property
    def base(self):
        return self.fn_source

    def render(self, local, glob, fast):
        inner = self.fn_source.render(local, glob, fast)
        if self.kw:
            return f"{inner}.__kwdefaults__[{self.index!r}]"
        return f"{inner}.__defaults__[{self.index!r}]"


@record
class ClosureSource(Source):
    """The contents of cell `index` of a function's closure."""
    fn_source: Source
    index: int

    @property
    def base(self):
        return self.fn_source

    def render(self, local, glob, fast):
        return f"{self.fn_source.render(local, glob, fast)}.__closure__[{self.index}].cell_contents"


@record
class ModuleSource(Source):
    """A module by name (for globals of functions defined in other modules)."""
    module: str

    def render(self, local, glob, fast):
        return f"__import__('sys').modules[{self.module!r}]"


@record
class RemainingSource(Source):
    """The items an iterator has left, read without advancing it (list(copy(it)))."""
    src: Source

    # no `base`: guards bind a base once and render only a suffix on it; this wraps its base

    def render(self, local, glob, fast):
        return f"list(__import__('copy').copy({self.src.render(local, glob, fast)}))"

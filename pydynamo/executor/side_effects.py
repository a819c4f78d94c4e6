"""Side effects: mutations of pre-existing Python objects, replayed after the graph runs.

Trackers are mutated in place while tracing; this records *which* pre-existing objects (those
with a source) were touched and in what order, so the output code can write their final state:
list contents (`obj[:] = [...]`), dict/set contents (clear + update), attribute stores
(`setattr`), global stores and stores to the frame's free variables (`nonlocal`).
Objects created during tracing need no replay: they are rebuilt if they escape.
"""
from __future__ import annotations

import collections
import dataclasses

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.containers import ConstDictVariable, ListVariable, SetVariable


@dataclasses.dataclass
class AttrStore:
    obj: VariableTracker
    name: str


def _set_dict_items(target: dict, items: dict) -> None:
    """Give a dict (or an instance of a dict subclass) exactly `items`, in order, through the C
    dict's own methods: a subclass's overrides (ModelOutput forbids update()) ran while tracing."""
    base = collections.OrderedDict if isinstance(target, collections.OrderedDict) else dict
    base.clear(target)
    for k, v in items.items():
        base.__setitem__(target, k, v)


class SideEffects:
    def __init__(self):
        self.mutated: list[VariableTracker] = []      # containers with a source, first-mutation order
        self._mutated_ids: set[int] = set()
        self.attr_stores: dict[tuple[int, str], AttrStore] = {}
        self.new_objects: list[VariableTracker] = []
        self.global_stores: dict[str, VariableTracker] = {}
        self.deref_stores: dict[str, VariableTracker] = {}
        self.writes = 0  # every write to a pre-existing object, repeated ones included

    def mutate(self, var: VariableTracker) -> None:
        self.writes += var.source is not None
        if var.source is None or id(var) in self._mutated_ids:
            return
        self._mutated_ids.add(id(var))
        self.mutated.append(var)

    def store_attr(self, obj: VariableTracker, name: str, value: VariableTracker) -> None:
        if obj.source is None:
            return  # an object created in the frame keeps its attributes on the tracker
        self.writes += 1
        self.attr_stores.setdefault((id(obj), name), AttrStore(obj, name))

    def track_new(self, obj: VariableTracker) -> None:
        self.new_objects.append(obj)

    def store_global(self, name: str, value: VariableTracker) -> None:
        self.writes += 1
        self.global_stores[name] = value

    def store_deref(self, name: str, value: VariableTracker) -> None:
        self.writes += 1
        self.deref_stores[name] = value

    def is_empty(self) -> bool:
        return not (self.mutated or self.attr_stores or self.global_stores or self.deref_stores)

    def codegen(self, cg) -> None:
        """Emit the replay: every value and target first (into temporaries), then the writes."""
        writes: list[str] = []
        for var in self.mutated:
            target = cg.temp(cg.load_source(var.source))
            if isinstance(var, ListVariable):
                items = cg.temp("[" + ", ".join(cg.reconstruct(i) for i in var.items) + "]")
                writes.append(f"{target}[:] = {items}")
            elif isinstance(var, ConstDictVariable):
                body = ", ".join(f"{cg.load_const(k)}: {cg.reconstruct(v)}" for k, v in var.items.items())
                items = cg.temp("{" + body + "}")
                writes.append(f"{cg.load_const(_set_dict_items)}({target}, {items})")
            elif isinstance(var, SetVariable):
                items = cg.temp("[" + ", ".join(cg.reconstruct(v) for v in var.items.values()) + "]")
                writes += [f"{target}.clear()", f"{target}.update({items})"]
            else:
                raise Unsupported("side_effect", f"replaying a mutation of {var}")
        for store in self.attr_stores.values():
            target = cg.temp(cg.load_source(store.obj.source))
            value = cg.temp(cg.reconstruct(store.obj.attrs[store.name]))
            # object.__setattr__: exactly the store that was traced (frozen dataclasses included)
            writes.append(f"{cg.load_const(object.__setattr__)}({target}, {store.name!r}, {value})")
        for name, value in self.global_stores.items():
            writes.append(f"{cg.declare_global(name)} = {cg.temp(cg.reconstruct(value))}")
        for name, value in self.deref_stores.items():
            writes.append(f"{cg.declare_nonlocal(name)} = {cg.temp(cg.reconstruct(value))}")
        cg.lines.extend(writes)

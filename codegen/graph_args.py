"""Walks over a node's arguments: the nested lists, tuples, dicts and slices of FX nodes, or of
the values lowerings and extern calls receive for them (TensorValues, ArgRefs, sizes,
constants). Pure functions of the structure: they never realize or copy anything.
"""
from __future__ import annotations

from codegen.ir import ArgRef, TensorValue


def _flat(a) -> list:
    if isinstance(a, (list, tuple)):
        return [y for x in a for y in _flat(x)]
    if isinstance(a, slice):
        return _flat([a.start, a.stop, a.step])
    if isinstance(a, dict):
        return _flat(list(a.values()))
    return [a]


def _refs(a) -> list:
    if isinstance(a, ArgRef):
        return [a]
    if isinstance(a, (list, tuple)):
        return [r for x in a for r in _refs(x)]
    if isinstance(a, dict):
        return _refs(list(a.values()))
    return []


def _origins_of(a) -> list:
    out = []
    if isinstance(a, TensorValue):
        out = list(a.origins)
    elif isinstance(a, (list, tuple)):
        for x in a:
            out += [o for o in _origins_of(x) if o not in out]
    elif isinstance(a, dict):
        out = _origins_of(list(a.values()))
    return out


def _has_tensor(a):
    if isinstance(a, TensorValue):
        return True
    if isinstance(a, (list, tuple)):
        return any(_has_tensor(x) for x in a)
    if isinstance(a, dict):
        return any(_has_tensor(x) for x in a.values())
    return False

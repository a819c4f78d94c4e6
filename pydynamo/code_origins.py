"""Where resume and break code came from: the user function and offsets it continues.

bytecode/resume.py records it when it makes such code; the warm cache (pydynamo/warm_cache.py)
records it for the resume code it loads; messages name a resumed frame by it (`user_frame_name`)
and the translator reads it to know where a resumed frame may break.

A leaf (imports only the standard library), outside pydynamo.bytecode so that a warm start's hit
path, which needs only this table, does not import the bytecode package (its assembler and
analyses). Entries hold the original code weakly and die with their resume code.
"""
from __future__ import annotations

import weakref
from types import CodeType


# resume/break code -> (weakref to the original code, {offset in it: offset in the original})
_origins: "weakref.WeakKeyDictionary[CodeType, tuple]" = weakref.WeakKeyDictionary()


def origin_of(code: CodeType) -> tuple[CodeType, dict] | None:
    """(original code, {offset here: offset there}) for resume/break code; None otherwise.
    Prologue instructions have no entry (they exist only in the resume code)."""
    entry = _origins.get(code)
    if entry is None or entry[0]() is None:
        return None
    return entry[0](), entry[1]


def user_code_name(code: CodeType) -> str:
    """The user's function name, also for resume functions (shown as `f (resumed at file:line)`)."""
    origin = origin_of(code)
    return code.co_name if origin is None else origin[0].co_name


def user_frame_name(code: CodeType) -> str:
    """A frame's name for messages: resume and break code are the rest of the user's function."""
    if origin_of(code) is None:
        return code.co_name
    return f"the rest of {user_code_name(code)} (resumed after a graph break)"


def set_origin(new: CodeType, code: CodeType, mapping: dict) -> None:
    """Record `new` as resume/break code continuing `code` ({offset in new: offset in code});
    also the warm cache's, for the resume code it loads (pydynamo/warm_cache.py)."""
    # code objects compare by content: after reset() a rebuilt resume code equals the old one,
    # and assigning would keep the old (dying) key, whose death then drops the new entry
    _origins.pop(new, None)
    _origins[new] = (weakref.ref(code), mapping)

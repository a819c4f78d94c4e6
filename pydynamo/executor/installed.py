"""Objects the output code reads from the frame's globals, and dropping them on reset().

Replacement code reaches the compiled graph, classes, non-finite floats and other objects that
have no literal spelling through `__pydynamo_*` names in the user's module globals (INTERNALS.md
§6). Every such name is written through `install(frame_globals, name, value)`, which records it
in a marker object stored in that same globals dict; `clear()` (run by `pydynamo.reset()`)
removes every recorded name from every globals dict still alive, so a reset leaves no compiled
graph reachable from user modules. The generated sources registered in linecache for
tracebacks (`register_source`) are dropped too, and torch.fx's copies of the source of each
GraphModule we built (`register_graph_module`).

Invariants:
  * The registry holds markers weakly; a marker holds its globals dict (a dict <-> marker cycle
    the garbage collector frees with the dict): a module or exec() namespace that dies is not
    kept alive by pydynamo, before or after a reset.
  * Only names written through `install` are removed; user names are never touched.
"""
from __future__ import annotations

import linecache
import sys
import weakref

MARK = "__pydynamo_installed__"


class _Installed:
    """The names pydynamo wrote into one globals dict."""
    __slots__ = ("globals", "names", "__weakref__")

    def __init__(self, frame_globals: dict):
        self.globals = frame_globals
        self.names: set = set()


_LIVE: "weakref.WeakSet[_Installed]" = weakref.WeakSet()


def install(frame_globals: dict, name: str, value) -> None:
    """`frame_globals[name] = value`, removed again by `clear()`."""
    mark = frame_globals.get(MARK)
    if type(mark) is not _Installed:
        mark = frame_globals[MARK] = _Installed(frame_globals)
        _LIVE.add(mark)
    mark.names.add(name)
    frame_globals[name] = value


_SOURCES: set = set()


def register_source(filename: str, lines: list) -> None:
    """Make generated source visible to tracebacks, pdb and inspect (linecache) until reset."""
    linecache.cache[filename] = (sum(map(len, lines)), None, lines, filename)
    _SOURCES.add(filename)


def register_graph_module(gm) -> None:
    """torch.fx keeps every GraphModule's generated source (its loader's eval_cache and a
    linecache entry) for the life of the process; reset() drops those of the graphs we made."""
    filename = getattr(getattr(type(gm).forward, "__code__", None), "co_filename", None)
    if filename:
        _FX_SOURCES.add(filename)


_FX_SOURCES: set = set()


def clear() -> None:
    """Remove every installed name (and the marker) from every globals dict still alive, and
    the generated sources from linecache."""
    for filename in _SOURCES | _FX_SOURCES:
        linecache.cache.pop(filename, None)
    _SOURCES.clear()
    fx_module = sys.modules.get("torch.fx.graph_module")
    fx_cache = getattr(getattr(fx_module, "_loader", None), "eval_cache", None)
    for filename in _FX_SOURCES:
        if isinstance(fx_cache, dict):
            fx_cache.pop(filename, None)
    _FX_SOURCES.clear()
    for mark in list(_LIVE):
        g = mark.globals
        for name in mark.names:
            g.pop(name, None)
        if g.get(MARK) is mark:
            del g[MARK]
        mark.names.clear()
    _LIVE.clear()

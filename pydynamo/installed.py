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

The wrapper around each compiled graph's callable (`wrap_compiled`: the hook off while it runs,
autocast regions closed if it raises) and the counters naming the `__pydynamo_*` globals live
here too: the output code's run-time half, which a warm-start hit (pydynamo/warm_cache.py) needs
without the executor's tracing half (a module of pydynamo's, not of the executor package, so a
hit does not import that package either).
"""
from __future__ import annotations

import itertools
import linecache
import sys
import types
import weakref

import torch

from pydynamo import _C
from pydynamo import autocast as _autocast

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


def run_break(code, globals_: dict, closure: tuple, *args):
    """What a graph break's output code calls: the break function (generated code the hook
    skips, executor/breaks.py) made over the frame's globals and cells, called with the live
    stack and locals."""
    return types.FunctionType(code, globals_, code.co_name, None, closure or None)(*args)


def cells_of(probe, names: tuple) -> tuple:
    """The frame's cell objects, in `names` order, from a lambda that closes over all of them."""
    by_name = dict(zip(probe.__code__.co_freevars, probe.__closure__ or ()))
    return tuple(by_name[n] for n in names)


# the numbers in `__pydynamo_compiled_fn_<n>` / `__pydynamo_const_<n>`: never reused in a process
graph_ids = itertools.count()
const_ids = itertools.count()


def wrap_compiled(gm, fn, autocast=None):
    """What the output code calls for the backend's `fn` of graph `gm` (also for a graph loaded
    from the warm cache, pydynamo/warm_cache.py): run with the hook off, and leave autocast
    regions the graph entered if it raises (`autocast`: whether it enters any; None: read `gm`)."""
    fn = _without_interception(gm, fn)
    if autocast is None:
        autocast = any(n.target is _autocast.enter_autocast for n in gm.graph.nodes)
    if autocast:
        fn = _closing_autocast(fn)
    return fn


def _closing_autocast(fn):
    """A graph that enters autocast regions: if it raises inside one, leave it (as `with` does)."""

    def run_closing_autocast(*args):
        mark = _autocast.open_regions()
        try:
            return fn(*args)
        except BaseException:
            _autocast.close_regions(mark)
            raise
    _C.set_code_state(run_closing_autocast.__code__, "skip")
    return run_closing_autocast


_NATIVE_OP_NAMESPACES = {"aten", "prims", "quantized", "_quantized", "rngprims"}


def _runs_python_kernels(gm) -> bool:
    """A node calls an op of a library namespace (torch.library.custom_op: transformers'
    grouped_mm_fallback), whose kernel may be Python: its frames are not the user's either."""
    for node in gm.graph.nodes:
        t = node.target
        if isinstance(t, (torch._ops.OpOverloadPacket, torch._ops.OpOverload)):
            ns = getattr(t, "namespace", None) or t._qualified_op_name.split("::")[0]
            if ns not in _NATIVE_OP_NAMESPACES:
                return True
    return False


def _without_interception(gm, fn):
    """The compiled function must run with the frame hook off (its own Python frames are not user
    code). The plain eager backend's `gm.forward` only needs its code marked skip (no wrapper on the
    hot path); anything else runs inside a wrapper that switches the hook off."""
    if getattr(fn, "__self__", None) is gm and getattr(fn, "__func__", None) is type(gm).forward and \
            not _runs_python_kernels(gm):
        _C.set_code_state(type(gm).forward.__code__, "skip")
        return fn

    def run_without_hook(*args):
        prev = _C.set_eval_frame(None)
        try:
            return fn(*args)
        finally:
            _C.set_eval_frame(prev)
    _C.set_code_state(run_without_hook.__code__, "skip")
    return run_without_hook

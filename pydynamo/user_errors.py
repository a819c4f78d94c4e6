"""Errors raised inside compiled code, shown as the eager traceback shows them.

An op that raises inside a compiled graph (an eager op of the graph, a kernel's error flag)
raises eager's own exception, but its traceback would end in generated code: FX's
`<eval_with_key>` forward, codegen's wrapper. `raise_at(exc, src)` raises the same exception
object again from frames whose files, lines and functions are the user's (`src`: a node's
`meta["stack_trace"]`, `File "f.py", line 3, in fn` lines, outermost first, the calls the node
was inlined through included), so the traceback shows the user's calls and source lines as an
eager traceback would. `place_graph_error(exc)` finds the FX node whose statement raised (the
innermost GraphModule forward frame in the traceback, its generated line, the node of that
name) and places the exception at that node's user lines.

`strip_own_frames(exc)` removes pydynamo's own frames from a traceback (optimize's wrapper calls
it on the way out, and re-raises with a bare `raise`, so its own frame goes too): a traceback
through compiled code lists the frames the eager one lists: the user's, and torch's where eager
has them. Pieces of one user call cut at graph breaks count once.

Invariants: this module imports only the standard library, pydynamo.code_origins (resume code's
origins) and torch.fx (codegen and the executor both use it); the exception object is never
replaced or wrapped (`except IndexError` in user code still works; `__cause__`/`__context__`
stay); an exception that cannot be placed is left as it is; one exception is placed at most
once (`_pydynamo_placed`).
"""
from __future__ import annotations

import functools
import linecache
import os
import re
import sys
from typing import Optional

from pydynamo.code_origins import origin_of

_SRC = r'\s*File "(.*)", line (\d+), in (.*)$'    # (compiled at first use: re's cache keeps it;
# compiling it at import cost every process 70-100 us, a warm start's first call included)
# frames of pydynamo's own making: its packages, transformed and FX-generated code
_OWN_DIRS = tuple(os.path.dirname(os.path.abspath(m)) + os.sep for m in
                  (__file__, os.path.join(os.path.dirname(__file__), "..", "codegen", "__init__.py")))
_OWN_PREFIXES = ("<pydynamo", "<eval_with_key")
_TRANSFORMED = "<pydynamo transformed"    # executor/reconstruct.py's file names
_MODULE_PY = os.path.join("torch", "nn", "modules", "module.py")


def _own_frame(filename: str, cache_dir: str) -> bool:
    return filename.startswith(_OWN_PREFIXES) or os.path.abspath(filename).startswith(_OWN_DIRS) or \
        bool(cache_dir) and filename.startswith(cache_dir) or \
        filename.endswith(os.path.join("torch", "fx", "graph_module.py"))


def strip_own_frames(exc: BaseException, cache_dir: str = "", module_call: bool = False) -> None:
    """Drop pydynamo's frames (its packages, transformed code, FX and generated wrappers under
    `cache_dir`) from the traceback of `exc` and of the exceptions chained to it
    (`__cause__`, `__context__`), so it reads like the eager one: the user's frames, lines and
    function names (resume code is named `f (resumed at file:N)`).

    Called in an `except` clause of pydynamo's frame that then re-raises with a bare `raise`:
    a bare raise takes the traceback from `exc.__traceback__` and adds no entry of its own, so
    the caller's entry links straight to the user's frames (`raise exc` would add one).
    `module_call`: the frame called an nn.Module (`orig(*args)`): the module's own
    `__call__` frames directly below it go too, as the compiled module's `__call__` above
    already shows them once (the eager traceback has one pair). The exception objects are
    unchanged; PYDYNAMO_VERBOSE=1 skips this."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop()
        if e is None or id(e) in seen:
            continue
        seen.add(id(e))
        e.__traceback__ = _user_entries(e.__traceback__, cache_dir, module_call and e is exc)
        todo += [e.__cause__, e.__context__]


def _user_entries(tb, cache_dir: str, module_call: bool):
    """The traceback `tb` without pydynamo's entries (relinked in place; None if none is left)."""
    kept = []
    while tb is not None:
        filename = tb.tb_frame.f_code.co_filename
        if not _own_frame(filename, cache_dir) and not _continued(tb) and \
                not (module_call and not kept and filename.endswith(_MODULE_PY)):
            kept.append(tb)
        tb = tb.tb_next
    for a, b in zip(kept, kept[1:] + [None]):
        a.tb_next = b
    return kept[0] if kept else None


def _continued(tb) -> bool:
    """`tb` is a piece of a user's call cut at a graph break (break or resume code) that stands
    at an instruction of pydynamo's (not one of the user's: the call of the rest of the
    function), and the next entry is that rest (resume code, or the code compiled from it):
    the rest's entry shows the same call at the line it reached, so this one goes, as the
    eager traceback has one entry per call."""
    origin = origin_of(tb.tb_frame.f_code)
    if origin is None or tb.tb_lasti in origin[1] or tb.tb_next is None:
        return False
    after = tb.tb_next.tb_frame.f_code
    rest = origin_of(after)
    if rest is not None:
        return rest[0] is origin[0]
    return after.co_filename.startswith(_TRANSFORMED) and \
        after.co_name.startswith(f"{origin[0].co_name} (resumed at ")   # bytecode.resume's naming


def raise_at(exc: BaseException, src: str, namespace: Optional[dict] = None) -> None:
    """Raise `exc` from frames at the user's `File "...", line N, in fn` lines of `src`
    (outermost first: a node's stack trace names the calls it was inlined from), one frame
    each, as an eager traceback shows them; returns only when `src` has no such line.
    `namespace`: the names the outermost frame shows (a debugger's `p x` there)."""
    frames = [m.groups() for m in map(re.compile(_SRC).match, (src or "").splitlines()) if m is not None]
    if not frames:
        return
    exc._pydynamo_placed = True
    run = None
    for k, (filename, line, name) in reversed(list(enumerate(frames))):   # innermost first
        text = "raise (__pydynamo_exc)" if run is None else "__pydynamo_next()"   # (padded inside)
        # as long as the user's line (its columns are the traceback's): no carets under a
        # part of the user's line that has nothing to do with the error
        width = len(linecache.getline(filename, int(line)).rstrip().encode())
        text = text[:-1] + " " * max(0, width - len(text)) + text[-1]
        # first line = the line itself: a renderer that shows a frame's code from its first
        # line (pytest) shows that line, not the file from its top
        code = compile(text, filename, "exec").replace(co_firstlineno=int(line), co_name=name or "<module>")
        scope = dict(namespace or {}) if k == 0 else {}
        scope.update(__pydynamo_exc=exc, __pydynamo_next=run)
        # functools.partial of exec: a C call between the frames, no frame of its own
        run = functools.partial(exec, code, scope)
    run()


def place_graph_error(exc: BaseException) -> None:
    """Raise `exc` at the user's line of the FX node that raised it; return if it cannot tell."""
    import torch.fx

    if getattr(exc, "_pydynamo_placed", False):
        return
    tb, hit = exc.__traceback__, None
    while tb is not None:           # the innermost GraphModule forward the exception passed
        frame = tb.tb_frame
        if frame.f_code.co_name == "forward" and \
                isinstance(frame.f_locals.get("self"), torch.fx.GraphModule):
            hit = (frame.f_locals["self"], frame.f_code.co_filename, tb.tb_lineno)
        tb = tb.tb_next
    if hit is None:
        return
    gm, filename, lineno = hit
    stmt = linecache.getline(filename, lineno).strip()      # `name = op(...);  x = None`
    name = stmt.split("=", 1)[0].strip() if "=" in stmt else ""
    node = next((n for n in gm.graph.nodes if n.name == name), None) if name.isidentifier() else None
    if node is not None:
        user = sys._getframe(1)    # the output code's frame (it calls this): the user's names
        names = {k: v for k, v in user.f_locals.items() if not k.startswith("__pydynamo")}
        raise_at(exc, node.meta.get("stack_trace") or "", {**user.f_globals, **names})

"""Errors raised inside a compiled graph, shown at the user's line.

An op that raises inside a compiled graph (an eager op of the graph, a kernel's error flag)
raises eager's own exception, but its traceback would end in generated code: FX's
`<eval_with_key>` forward, codegen's wrapper. `raise_at(exc, src)` raises the same exception
object again from a frame whose file, line and function are the user's (`src` is a line of a
node's `meta["stack_trace"]`: `File "f.py", line 3, in fn`), so the traceback shows the user's
source line, as an eager traceback would. `place_graph_error(exc)` finds the FX node whose
statement raised (the innermost GraphModule forward frame in the traceback, its generated line,
the node of that name) and places the exception at that node's user line.

`strip_own_frames(exc)` removes pydynamo's own frames from a traceback (optimize's wrapper calls
it on the way out), so a traceback through compiled code lists the user's frames only.

Invariants: this module imports only the standard library and torch.fx (codegen and the
executor both use it); the exception object is never replaced or wrapped (`except IndexError`
in user code still works); an exception that cannot be placed is left as it is; one exception
is placed at most once (`_pydynamo_placed`).
"""
from __future__ import annotations

import linecache
import os
import re

_SRC = re.compile(r'\s*File "(.*)", line (\d+), in (.*)$')
# frames of pydynamo's own making: its packages, transformed and FX-generated code
_OWN_DIRS = tuple(os.path.dirname(os.path.abspath(m)) + os.sep for m in
                  (__file__, os.path.join(os.path.dirname(__file__), "..", "codegen", "__init__.py")))
_OWN_PREFIXES = ("<pydynamo", "<eval_with_key")


def _own_frame(filename: str, cache_dir: str) -> bool:
    return filename.startswith(_OWN_PREFIXES) or os.path.abspath(filename).startswith(_OWN_DIRS) or \
        bool(cache_dir) and filename.startswith(cache_dir) or \
        filename.endswith(os.path.join("torch", "fx", "graph_module.py"))


def strip_own_frames(exc: BaseException, cache_dir: str = "") -> None:
    """Drop pydynamo's frames (its packages, transformed code, FX and generated wrappers under
    `cache_dir`) from `exc`'s traceback after its first entry, so it reads like the eager one:
    the user's frames, lines and function names (resume code is named `f (resumed at file:N)`).
    The exception object is unchanged; PYDYNAMO_VERBOSE=1 skips this."""
    head = exc.__traceback__
    if head is None:
        return
    prev, tb = head, head.tb_next
    while tb is not None:
        if _own_frame(tb.tb_frame.f_code.co_filename, cache_dir):
            prev.tb_next = tb.tb_next
        else:
            prev = tb
        tb = tb.tb_next


def raise_at(exc: BaseException, src: str) -> None:
    """Raise `exc` from a frame at the user's `File "...", line N, in fn` (returns only when
    `src` is not such a line)."""
    m = _SRC.match(src)
    if m is None:
        return
    exc._pydynamo_placed = True
    filename, line, name = m.group(1), int(m.group(2)), m.group(3)
    code = compile("\n" * (line - 1) + "raise __pydynamo_exc", filename, "exec")
    if name:
        code = code.replace(co_name=name)
    exec(code, {"__pydynamo_exc": exc})


def user_line(stack_trace) -> str:
    """The last `File ...` line of a node's stack trace (the user's innermost frame)."""
    lines = [ln.strip() for ln in (stack_trace or "").splitlines() if _SRC.match(ln)]
    return lines[-1] if lines else ""


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
        raise_at(exc, user_line(node.meta.get("stack_trace")))

"""User-facing errors and the graph-break record.

A graph break is data first (`GraphBreak`); `Unsupported` carries one through the translator.
Messages speak the user's terms: their file:line, source names like L['x'], never object ids.
"""
from __future__ import annotations

from typing import Optional

from pydynamo.records import record


@record(frozen=False)   # a plain dataclass without generated methods (records.py: import cost)
class GraphBreak:
    reason_code: str          # stable identifier, e.g. "print", "tensor_branch", "unsupported_opcode"
    message: str              # plain-language explanation
    filename: Optional[str] = None
    lineno: Optional[int] = None
    col: Optional[int] = None
    user_stack: tuple = ()    # ((filename, lineno, function_name), ...), outermost first
    hint: str = ""

    def location(self) -> str:
        if self.filename is None:
            return "<unknown>"
        col = f":{self.col}" if self.col is not None else ""
        return f"{self.filename}:{self.lineno}{col}"

    def __str__(self) -> str:
        text = f"{self.location()}: {self.message} [{self.reason_code}]"
        if self.hint:
            text += f"\n  hint: {self.hint}"
        return text

    def stack_text(self, indent: str = "  ") -> str:
        """The user's call chain to the break (inlined calls), outermost first."""
        return "\n".join(f"{indent}{f}:{line} in {fn}" for f, line, fn in self.user_stack)


class PydynamoError(RuntimeError):
    """Base class of every error pydynamo raises on purpose."""


class Unsupported(PydynamoError):
    """Raised inside the translator for something that cannot be traced; becomes a graph break."""

    def __init__(self, reason_code: str, message: str, hint: str = ""):
        super().__init__(message)
        self.reason_code = reason_code
        self.message = message
        self.hint = hint
        self.graph_break: Optional[GraphBreak] = None  # filled with the user location once known


class ReturnValue(Exception):
    """Control flow, not an error: a translator finished its frame (return, or a graph break
    taken); raised out of the opcode loop and caught by the translator that runs it."""


class FullGraphError(PydynamoError):
    """fullgraph=True (or pydynamo.error_on_graph_break(True): `because`) and the function needs
    a graph break."""

    def __init__(self, graph_break: GraphBreak, because: str = "fullgraph=True"):
        text = f"{because} but the function cannot be captured in one graph:\n  {graph_break}"
        if len(graph_break.user_stack) > 1:
            text += "\n  user stack (outermost first):\n" + graph_break.stack_text("    ")
        super().__init__(text)
        self.graph_break = graph_break


class BackendCompilerFailed(PydynamoError):
    """The backend raised while compiling a graph."""


class InvalidBackend(PydynamoError):
    """`optimize(backend=...)` names no registered backend (torch.compile raises its own
    InvalidBackend, also a RuntimeError, for the same call)."""

    def __init__(self, name, known):
        super().__init__(f"Invalid backend: {name!r}; known backends: {', '.join(known)} "
                         "(see pydynamo.list_backends(); any callable backend(gm, example_inputs) works too)")
        self.name = name


class InvalidArgument(TypeError, AssertionError):
    """An optimize() argument of the wrong type (torch.compile asserts on some of them: both
    `except TypeError` and `except AssertionError` catch it)."""


class PydynamoWarning(UserWarning):
    """Base class of pydynamo's warnings: `warnings.filterwarnings("ignore", category=...)`."""


class GraphBreakWarning(PydynamoWarning):
    """Code that was asked to compile runs in Python (a graph break or a frame run eagerly); issued
    once per (reason, user line), attributed to the user's file and line."""


class RecompileLimitWarning(PydynamoWarning):
    """A function reached config.recompile_limit entries; new inputs run eagerly."""


class RecompileLimitExceeded(PydynamoError):
    pass


class RecompileError(PydynamoError):
    """A call would compile while the stance is "fail_on_recompile" (pydynamo.set_stance); the
    message names the function and each guard that rejected the call."""

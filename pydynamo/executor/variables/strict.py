"""pydynamo.error_on_graph_break traced: the factory, its context object and decorated functions.

The switch's value while tracing is a stack on the root translator (`strict_breaks`, started by
convert_frame.translate from the per-thread value outside compiled code): entering a block or
calling a decorated function pushes, leaving pops. translator.graph_break_handler records the
top at the instruction that cannot be traced (`Unsupported.strict`), so the value that counts is
the one in force where the break happens, however deep the inlining. The context object, when it
must be rebuilt (a break inside its block passes its bound __exit__ on), is a fresh
pydynamo.stance._ErrorOnGraphBreak, whose __exit__ restores nothing.
"""
from __future__ import annotations

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import ContextVariable, VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.stance import _ErrorOnGraphBreak


def strict_stack(tx) -> list:
    """The root translator's stack of error_on_graph_break values (top: in force now)."""
    return tx.root.__dict__.setdefault("strict_breaks", [False])


class ErrorOnGraphBreakFactory(VariableTracker):
    """pydynamo.error_on_graph_break itself: calling it with a constant builds the context."""

    def __init__(self, fn, source=None):
        super().__init__(source)
        self.fn = fn

    def call_function(self, tx, args, kwargs):
        if len(args) != 1 or kwargs or not isinstance(args[0], ConstantVariable):
            raise Unsupported("error_on_graph_break", "error_on_graph_break() takes one constant True/False")
        return ErrorOnGraphBreakVariable(bool(args[0].value))

    def reconstruct(self, cg):
        return cg.load_const(self.fn)


class ErrorOnGraphBreakVariable(ContextVariable):
    reason = "error_on_graph_break"

    def __init__(self, on: bool):
        super().__init__()
        self.on = on

    def python_type(self):
        return _ErrorOnGraphBreak

    def enter(self, tx):
        strict_stack(tx).append(self.on)
        return ConstantVariable(None)

    def exit(self, tx):
        stack = strict_stack(tx)
        if len(stack) > 1:
            stack.pop()
        return ConstantVariable(None)

    def call_function(self, tx, args, kwargs):
        # used as a decorator in compiled code: @pydynamo.error_on_graph_break(False)
        return StrictWrappedFunction(self.on, args[0])

    def reconstruct(self, cg):
        return cg.load_const(_ErrorOnGraphBreak(self.on))


class StrictWrappedFunction(VariableTracker):
    """A function decorated with error_on_graph_break(on): the value holds for the inlined call."""

    def __init__(self, on: bool, fn: VariableTracker, source=None):
        super().__init__(source)
        self.on, self.fn = on, fn

    def call_function(self, tx, args, kwargs):
        stack = strict_stack(tx)
        stack.append(self.on)
        try:
            return self.fn.call_function(tx, args, kwargs)
        finally:
            del stack[-1]

"""VariableTracker: the abstract value the translator pushes on its stack.

Invariants:
  * A tracker whose `source` is set stands for a value that already exists outside the frame;
    the builder made it and recorded the guards it relied on. Trackers without a source were
    made during tracing and must be rebuilt by the output code if they escape.
  * Mutable containers (list, dict, set, user objects) are mutated in place in the tracker; if
    they have a source the mutation is registered with side_effects so it is replayed after the
    graph. One tracker per Python object (the builder caches by identity), so aliases agree.
  * Anything a tracker cannot do raises `Unsupported` — never a guess.
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Optional

from pydynamo.exc import Unsupported
from pydynamo.sources import Source

if TYPE_CHECKING:
    from pydynamo.executor.translator import InstructionTranslator as Tx


PROBING = [0]  # > 0 while is_python_constant() probes


def raises_here(reason: str, message: str) -> Unsupported:
    """The Unsupported for an operation that raises on the traced values themselves (exact
    constants, a list index out of range): CPython raises there too on the same values, unless
    eager took another path before (a library's `if not is_compiling()` branch). Marked `raises`:
    where no handler of the traced code can catch it, the whole frame runs eagerly instead of
    breaking at the instruction (translator.graph_break_handler; torch.compile does the same)."""
    e = Unsupported(reason, message)
    e.raises = True
    return e


class _Null:
    def __repr__(self):
        return "NULL"


# The stack's other inhabitant: CPython's NULL below a callable (a call site is
# [NULL | callable, callable | self, *args]); never a value, so never reconstructed.
NULL = _Null()


class VariableTracker:
    source: Optional[Source] = None

    def __init__(self, source: Optional[Source] = None):
        self.source = source

    # --- what it is -------------------------------------------------------------------------
    def python_type(self) -> type:
        raise Unsupported("python_type", f"type of {self} is not known while tracing")

    def is_python_constant(self) -> bool:
        # a probe: trackers whose as_python_constant() has an effect (a symbolic size pins itself
        # with a guard) answer "no" while PROBING is set
        PROBING[0] += 1
        try:
            self.as_python_constant()
            return True
        except Unsupported:
            return False
        finally:
            PROBING[0] -= 1

    def as_python_constant(self) -> Any:
        raise Unsupported("not_constant", f"{self} is not a Python constant")

    def truthy(self, tx: "Tx") -> bool:
        """bool(value) decided at trace time (branches on Python values)."""
        return bool(self.as_python_constant())

    # --- protocols --------------------------------------------------------------------------
    def var_getattr(self, tx: "Tx", name: str) -> "VariableTracker":
        try:
            cls = self.python_type()
        except Unsupported:
            cls = None
        if cls is not None and callable(getattr(cls, name, None)):
            return MethodProxyVariable(self, name)
        raise Unsupported("no_attribute", f"attribute {name!r} of {self}")

    def setattr(self, tx: "Tx", name: str, value: "VariableTracker") -> None:
        raise Unsupported("setattr", f"setting attribute {name!r} of {self}")

    def delattr(self, tx: "Tx", name: str) -> None:
        raise Unsupported("delattr", f"deleting attribute {name!r} of {self}")

    def call_function(self, tx: "Tx", args: list, kwargs: dict) -> "VariableTracker":
        raise Unsupported("call", f"calling {self}")

    def call_method(self, tx: "Tx", name: str, args: list, kwargs: dict) -> "VariableTracker":
        attr = self.var_getattr(tx, name)
        if isinstance(attr, MethodProxyVariable) and attr.obj is self:
            # the proxy would call back here: no subclass implements this method
            raise Unsupported("call", f"calling the method {name}() of a {self.type_name()} object")
        return attr.call_function(tx, args, kwargs)

    def type_name(self) -> str:
        """The traced value's type in the user's words (for messages)."""
        try:
            return self.python_type().__qualname__
        except Exception:
            return "traced"

    def has_unpack_var_sequence(self, tx: "Tx") -> bool:
        return False

    def unpack_var_sequence(self, tx: "Tx") -> list:
        raise Unsupported("unpack", f"cannot iterate over {self}")

    def get_iter(self, tx: "Tx") -> "VariableTracker":
        return ListIteratorVariable(self.unpack_var_sequence(tx))

    # --- output -----------------------------------------------------------------------------
    def reconstruct(self, cg) -> str:
        """A Python expression (in the output code) that produces this value."""
        if self.source is not None:
            return cg.load_source(self.source)
        raise Unsupported("reconstruct", f"cannot rebuild {self} after the graph")

    def __repr__(self) -> str:
        return f"{type(self).__name__}()"


class ContextVariable(VariableTracker):
    """A context manager the executor models as a whole (grad mode, autocast): `with` calls
    its enter(tx) / exit(tx); any other method is a graph break under `reason`."""
    reason = "context"

    def enter(self, tx) -> VariableTracker:
        raise NotImplementedError

    def exit(self, tx) -> VariableTracker:
        raise NotImplementedError

    def call_method(self, tx, name, args, kwargs):
        if name == "__enter__":
            return self.enter(tx)
        if name == "__exit__":
            return self.exit(tx)
        raise Unsupported(self.reason, f"{type(self).__name__.replace('Variable', '')} object .{name}")


class WithExitVariable(VariableTracker):
    """The bound __exit__ pushed by BEFORE_WITH; the normal exit path calls it with three Nones."""

    def __init__(self, ctx):
        super().__init__()
        self.ctx = ctx

    def call_function(self, tx, args, kwargs):
        return self.ctx.call_method(tx, "__exit__", args, kwargs)


class ListIteratorVariable(VariableTracker):
    def __init__(self, items, py_type=type(iter([]))):
        super().__init__()
        self.it = iter(items)
        self.py_type = py_type

    def python_type(self):
        return self.py_type

    def next_variable(self, tx, default=None):
        try:
            return next(self.it)
        except StopIteration:
            if default is not None:
                return default
            raise

    def get_iter(self, tx):
        return self

    def has_unpack_var_sequence(self, tx):
        return True

    def unpack_var_sequence(self, tx):
        return list(self.it)

    def truthy(self, tx):
        return True


class MethodProxyVariable(VariableTracker):
    """`obj.name` for a method the tracker implements in call_method (list.append, dict.items...)."""

    def __init__(self, obj: VariableTracker, name: str):
        super().__init__()
        self.obj, self.name = obj, name

    def call_function(self, tx, args, kwargs):
        return self.obj.call_method(tx, self.name, args, kwargs)

    def __repr__(self):
        return f"MethodProxyVariable({self.obj}.{self.name})"


def python_constants(vts) -> list:
    return [v.as_python_constant() for v in vts]

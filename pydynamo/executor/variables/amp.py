"""torch.autocast regions (`with torch.autocast(...)`, torch.amp.autocast, torch.cpu.amp.autocast,
torch.cuda.amp.autocast, and the same objects used as decorators).

Entering records `pydynamo.autocast.enter_autocast(device_type, dtype, enabled, cache_enabled)`
in the graph and switches the trace's autocast state (`tx.root.autocast_`), under which every
op's metadata is computed as eager computes it (pydynamo.autocast); exiting records
`exit_autocast` and restores the state from before. The arguments are resolved by building the
real autocast object once at trace time (it validates them and warns exactly as eager does, e.g.
an unsupported dtype disables the region), so the graph and eager agree on what the region does.
At a graph break inside a region the graph exits it and the break/resume code re-enters an
equal `torch.amp.autocast` object (executor/breaks.py), as for grad-mode contexts.
"""
from __future__ import annotations

import torch

from pydynamo import autocast as _autocast
from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import ContextVariable, VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable

AUTOCAST_TYPE = torch.amp.autocast_mode.autocast


# the attributes of a torch.amp.autocast object that decide what entering it does
SETTINGS_ATTRS = ("device", "fast_dtype", "_enabled", "_cache_enabled")


def settings_of(obj) -> tuple:
    """(device_type, dtype, enabled, cache_enabled) of a real autocast object."""
    device_type, dtype, enabled, cache = (getattr(obj, a, None) for a in SETTINGS_ATTRS)
    return (device_type, dtype, True if enabled is None else bool(enabled), cache)


class AutocastVariable(ContextVariable):
    reason = "autocast"

    def __init__(self, settings: tuple, source=None):
        super().__init__(source)
        self.settings = settings    # (device_type, dtype, enabled, cache_enabled)
        self.saved = []             # (enter node, prior state) per open entry

    def python_type(self):
        return AUTOCAST_TYPE

    def enter(self, tx):
        device_type, dtype, enabled, cache = self.settings
        if device_type not in _autocast.DEVICES:
            raise Unsupported("autocast", f"torch.autocast on device {device_type!r} is not traced")
        node = tx.output.add_node("call_function", _autocast.enter_autocast, (device_type, dtype, enabled, cache))
        self.saved.append((node, tx.root.autocast_))
        tx.root.autocast_ = _autocast.with_device(tx.root.autocast_, device_type, enabled, dtype)
        return ConstantVariable(None)

    def exit(self, tx):
        if not self.saved:
            raise Unsupported("autocast", "torch.autocast exited without being entered")
        node, prior = self.saved.pop()
        tx.output.add_node("call_function", _autocast.exit_autocast, (node,))
        tx.root.autocast_ = prior
        return ConstantVariable(None)

    def call_function(self, tx, args, kwargs):
        # `torch.autocast(...)(fn)` / `@torch.autocast(...)` made in the frame: wraps the call
        if len(args) != 1 or kwargs:
            raise Unsupported("autocast", "calling an autocast object with other than one function")
        return AutocastWrappedFunction(self, args[0])

    def reconstruct(self, cg):
        device_type, dtype, enabled, cache = self.settings
        return (f"{cg.load_const(torch.amp.autocast)}({device_type!r}, dtype={cg.load_const(dtype)}, "
                f"enabled={enabled!r}, cache_enabled={cache!r})")

    def __repr__(self):
        return f"AutocastVariable{self.settings}"


class AutocastWrappedFunction(VariableTracker):
    def __init__(self, ctx: AutocastVariable, fn: VariableTracker):
        super().__init__()
        self.ctx, self.fn = ctx, fn

    def call_function(self, tx, args, kwargs):
        self.ctx.enter(tx)
        out = self.fn.call_function(tx, args, kwargs)
        self.ctx.exit(tx)
        return out


class AutocastClassVariable(VariableTracker):
    """torch.autocast / torch.amp.autocast / torch.cpu.amp.autocast ... (the class): calling it
    builds the real object from the constant arguments to read what eager would enter."""

    def __init__(self, cls, source=None):
        super().__init__(source)
        self.value = cls

    def as_python_constant(self):
        return self.value

    def python_type(self):
        return type(self.value)

    def call_function(self, tx, args, kwargs):
        if "dtype" not in kwargs and len(args) < 2:
            tx.root.state_read.add("autocast_dtypes")   # the default dtype decides the region
        try:
            real = self.value(*[a.as_python_constant() for a in args],
                              **{k: v.as_python_constant() for k, v in kwargs.items()})
        except Unsupported:
            raise
        except Exception as e:
            raise Unsupported("autocast", f"torch.autocast(...) raised {type(e).__name__}: {e}") from None
        return AutocastVariable(settings_of(real))

    def reconstruct(self, cg):
        return cg.load_const(self.value)


def is_autocast_class(value) -> bool:
    return isinstance(value, type) and issubclass(value, AUTOCAST_TYPE)


# torch's autocast queries, answered from the trace's state (inside a region, not the ambient one)
_QUERIES = {
    torch.is_autocast_enabled: (lambda args: args[0] if args else "cuda", 0),
    torch.get_autocast_dtype: (lambda args: args[0], 1),
    torch.is_autocast_cpu_enabled: (lambda args: "cpu", 0),
    torch.get_autocast_cpu_dtype: (lambda args: "cpu", 1),
    torch.get_autocast_gpu_dtype: (lambda args: "cuda", 1),
}


def is_query(fn) -> bool:
    try:
        return fn in _QUERIES
    except TypeError:
        return False


def query(tx, fn, args, kwargs):
    """The answer of an autocast query in the trace's state; NotImplemented for a device the
    executor does not model (the caller folds it from the ambient state, which it guards)."""
    device_of, item = _QUERIES[fn]
    device = device_of([a.as_python_constant() for a in args])
    state = _autocast.device_state(tx.root.autocast_, str(device))
    if state is None or kwargs:
        return NotImplemented
    return ConstantVariable(state[item])

"""Grad-mode context managers (no_grad, enable_grad, set_grad_enabled, inference_mode), and
`os.environ` reads.

Entering one records `torch._C._set_grad_enabled(mode)` in the graph and switches the traced
grad mode (used for metadata); exiting restores the mode from before. `set_grad_enabled(mode)`
switches at construction, like eager. Used as decorators, they wrap the inlined call.
inference_mode is recorded as eager's own enter/exit calls (its outputs are inference tensors).
"""
from __future__ import annotations

import os

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import ContextVariable, VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable
from pydynamo.guards import GuardKind
from pydynamo.sources import MappingGetSource


class GradModeVariable(ContextVariable):
    reason = "grad_mode"

    def __init__(self, mode: bool, applied_at_init: bool, prior: bool):
        super().__init__()
        self.mode = mode
        self.applied_at_init = applied_at_init
        self.prior = prior

    def python_type(self):
        return torch.autograd.grad_mode.set_grad_enabled

    def enter(self, tx):
        self.prior = tx.grad_enabled if not self.applied_at_init else self.prior
        set_grad_mode(tx, self.mode)
        return ConstantVariable(None)

    def exit(self, tx):
        set_grad_mode(tx, self.prior)
        return ConstantVariable(None)

    def call_function(self, tx, args, kwargs):
        # used as a decorator: @torch.no_grad() def f(...)
        return GradModeWrappedFunction(self.mode, args[0])


class GradModeWrappedFunction(VariableTracker):
    def __init__(self, mode, fn):
        super().__init__()
        self.mode, self.fn = mode, fn

    def call_function(self, tx, args, kwargs):
        prior = tx.grad_enabled
        set_grad_mode(tx, self.mode)
        out = self.fn.call_function(tx, args, kwargs)
        set_grad_mode(tx, prior)
        return out


def set_grad_mode(tx, mode: bool) -> None:
    if mode != tx.grad_enabled:
        tx.output.add_node("call_function", torch._C._set_grad_enabled, (mode,))
        tx.grad_enabled = mode


def _no_grad(tx, args, kwargs):
    return GradModeVariable(False, False, tx.grad_enabled)


def _enable_grad(tx, args, kwargs):
    return GradModeVariable(True, False, tx.grad_enabled)


class InferenceModeVariable(VariableTracker):
    """`with torch.inference_mode(mode):` — recorded as the enter/exit pair eager uses, so tensors
    made inside are inference tensors exactly as in eager; grad mode is off inside."""

    def __init__(self, mode: bool):
        super().__init__()
        self.mode = mode
        self.saved = None

    def call_method(self, tx, name, args, kwargs):
        from torch.autograd import grad_mode
        if name == "__enter__":
            node = tx.output.add_node("call_function", grad_mode._enter_inference_mode, (self.mode,))
            self.saved = (node, tx.grad_enabled, tx.root.inference_mode_)
            tx.root.inference_mode_ = self.mode
            if self.mode:
                tx.grad_enabled = False  # inference mode implies no grad; no extra node needed
            return ConstantVariable(None)
        if name == "__exit__":
            node, grad, inference = self.saved
            tx.output.add_node("call_function", grad_mode._exit_inference_mode, (node,))
            tx.root.grad_enabled_ = grad
            tx.root.inference_mode_ = inference
            return ConstantVariable(None)
        raise Unsupported("inference_mode", f"inference_mode object .{name}")


def _inference_mode(tx, args, kwargs):
    mode = (args[0] if args else kwargs.get("mode", ConstantVariable(True))).as_python_constant()
    return InferenceModeVariable(bool(mode))


def _set_grad_enabled(tx, args, kwargs):
    mode = bool((args[0] if args else kwargs["mode"]).as_python_constant())
    prior = tx.grad_enabled
    set_grad_mode(tx, mode)
    return GradModeVariable(mode, True, prior)


GRAD_MODE_FNS = {torch.no_grad: _no_grad, torch.enable_grad: _enable_grad,
                 torch.inference_mode: _inference_mode, torch.set_grad_enabled: _set_grad_enabled,
                 torch._C._set_grad_enabled: _set_grad_enabled}


class GradModeClassVariable(VariableTracker):
    """The class torch.no_grad etc. (calling it makes the context manager)."""

    def __init__(self, cls):
        super().__init__()
        self.value = cls

    def as_python_constant(self):
        return self.value

    def call_function(self, tx, args, kwargs):
        return GRAD_MODE_FNS[self.value](tx, args, kwargs)


class EnvironVariable(VariableTracker):
    """`os.environ` (with a source): reads of a constant key are constants now, each guarded on
    `environ.get(key)` (value and presence), so a changed variable recompiles. Writes, and any
    other use, are graph breaks (`os.getenv` is inlined down to `environ.get`)."""

    def __init__(self, value, source):
        super().__init__(source)
        self.value = value

    def python_type(self):
        return type(self.value)

    def _read(self, tx, key_vt):
        key = key_vt.as_python_constant()
        if not isinstance(key, str):
            raise Unsupported("environ", "os.environ read with a non-str key")
        value = self.value.get(key)
        tx.add_guard(MappingGetSource(self.source, key), GuardKind.EQUALS_MATCH, value)
        return value

    def call_method(self, tx, name, args, kwargs):
        if name == "get" and 1 <= len(args) + len(kwargs) <= 2:
            value = self._read(tx, args[0] if args else kwargs["key"])
            if value is not None:
                return ConstantVariable(value)
            return args[1] if len(args) > 1 else kwargs.get("default", ConstantVariable(None))
        if name == "__contains__" and len(args) == 1:
            return ConstantVariable(self._read(tx, args[0]) is not None)
        if name == "__getitem__" and len(args) == 1:
            value = self._read(tx, args[0])
            if value is None:
                raise Unsupported("key_error", f"os.environ[{args[0].as_python_constant()!r}]: KeyError")
            return ConstantVariable(value)
        raise Unsupported("environ", f"os.environ.{name}")


def is_environ(value) -> bool:
    return value is os.environ

"""OutputGraph: the FX graph under construction for one frame, and its compilation.

Invariants:
  * Placeholders come first, in the order inputs were first used; each has a Source and the real
    value (the example input handed to the backend).
  * Every call node carries metadata: meta["val"] is a tensor on device "meta" with the output's
    shape/stride/dtype/requires_grad, meta["tensor_meta"] a pydynamo.meta.TensorMeta with the
    real device (the record type shapes/codegen share).
  * Metadata is computed by running the op on meta tensors (`_run_meta`), under the traced grad
    mode. A failure there is Unsupported (eager will raise the real error if there is one).
  * Nodes whose only effect is a mutation (in-place methods, setitem, grad-mode switches) are
    never removed by dead-code elimination.
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from typing import Any, Optional

import torch
import torch.fx

from pydynamo.exc import Unsupported
from pydynamo.meta import TensorMeta
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.sources import Source

_graph_ids = itertools.count()


@dataclasses.dataclass
class GraphInput:
    source: Source
    value: Any
    node: torch.fx.Node


@dataclasses.dataclass
class CompiledGraph:
    """What a finished graph produced (explain() and logs read these)."""
    name: str
    gm: torch.fx.GraphModule
    example_inputs: list
    compiled_fn: Any
    op_count: int


def to_meta_tensor(t: torch.Tensor) -> torch.Tensor:
    m = torch.empty_strided(tuple(t.shape), tuple(t.stride()), dtype=t.dtype, device="meta")
    if t.requires_grad:
        m.requires_grad_(True)
    return m


def _is_impure(node: torch.fx.Node) -> bool:
    if node.op == "call_method":
        return node.target.endswith("_") and not node.target.endswith("__")
    if node.op == "call_function":
        name = getattr(node.target, "__name__", "")
        if node.target in _IMPURE_FUNCTIONS:
            return True
        return (name.endswith("_") and not name.endswith("__")) or "out" in node.kwargs
    return False


_IMPURE_FUNCTIONS = {operator.setitem, torch._C._set_grad_enabled, torch.autograd.grad_mode._enter_inference_mode,
                     torch.autograd.grad_mode._exit_inference_mode, operator.iadd, operator.isub, operator.imul,
                     operator.itruediv, operator.ifloordiv, operator.imod, operator.ipow, operator.imatmul,
                     operator.iand, operator.ior, operator.ixor, operator.ilshift, operator.irshift}


def _device_of(args, kwargs, kind, target) -> Optional[torch.device]:
    """Explicit device argument, if any (device=..., or a device/str positional of Tensor.to)."""
    dev = kwargs.get("device")
    if dev is None and kind == "call_method" and target == "to":
        for a in args[1:]:
            if isinstance(a, (torch.device, str)):
                dev = a
    if dev is None and kind == "call_method" and target == "cuda":
        dev = "cuda"
    if dev is None and kind == "call_method" and target == "cpu":
        dev = "cpu"
    return torch.device(dev) if dev is not None else None


class OutputGraph:
    def __init__(self, frame_globals: dict, backend):
        self.graph = torch.fx.Graph()
        self.inputs: list[GraphInput] = []
        self.frame_globals = frame_globals
        self.backend = backend
        self.by_example: dict[int, TensorVariable] = {}  # id(meta example) -> tracker (in-place results)
        self.compiled: list[CompiledGraph] = []
        self._names: set[str] = set()

    # --- inputs ---------------------------------------------------------------------------
    def add_input(self, value: torch.Tensor, source: Source) -> TensorVariable:
        name = self._unique(re.sub(r"[^0-9a-zA-Z_]+", "_", source.name()).strip("_") or "arg")
        last = self.inputs[-1].node if self.inputs else None
        if last is not None:
            ctx = self.graph.inserting_after(last)
        elif len(self.graph.nodes):
            ctx = self.graph.inserting_before(next(iter(self.graph.nodes)))
        else:
            ctx = self.graph.inserting_after(None)
        with ctx:
            node = self.graph.placeholder(name)
        example = to_meta_tensor(value)
        self._set_meta(node, example, value.device)
        self.inputs.append(GraphInput(source, value, node))
        var = TensorVariable(node, example, value.device, source=source, cls=type(value))
        self.by_example[id(example)] = var
        return var

    def _unique(self, name: str) -> str:
        base, i = name, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    @staticmethod
    def _set_meta(node, example, device):
        node.meta["val"] = example
        node.meta["tensor_meta"] = TensorMeta.from_tensor(example, device=device)

    # --- calls ----------------------------------------------------------------------------
    def to_fx(self, v: VariableTracker, meta: bool):
        """Argument for an FX node (meta=False) or for the meta run (meta=True)."""
        from pydynamo.executor.variables.containers import BaseListVariable, ConstDictVariable, SliceVariable
        if isinstance(v, TensorVariable):
            return v.example if meta else v.node
        if isinstance(v, (ConstantVariable, ObjectVariable)):
            val = v.value
            if meta and isinstance(val, torch.device):
                return torch.device("meta")
            return val
        if isinstance(v, SliceVariable):
            return slice(*(self.to_fx(x, meta) for x in v.items))
        if isinstance(v, BaseListVariable):
            items = [self.to_fx(x, meta) for x in v.items]
            return v.python_type()(items) if v.python_type() in (list, tuple, torch.Size) else tuple(items)
        if isinstance(v, ConstDictVariable):
            return {k: self.to_fx(x, meta) for k, x in v.items.items()}
        raise Unsupported("graph_arg", f"cannot pass {v} to a torch operation")

    def call(self, tx, kind: str, target, args: list, kwargs: dict) -> VariableTracker:
        fx_args = tuple(self.to_fx(a, False) for a in args)
        fx_kwargs = {k: self.to_fx(v, False) for k, v in kwargs.items()}
        m_args = [self.to_fx(a, True) for a in args]
        m_kwargs = {k: self.to_fx(v, True) for k, v in kwargs.items()}
        device = _device_of(fx_args, fx_kwargs, kind, target)
        if kind == "call_method" and target == "to":
            m_args = [torch.device("meta") if isinstance(a, (torch.device, str)) else a for a in m_args]
        if kind == "call_method" and target in ("cuda", "cpu"):
            kind_run, target_run, m_args, m_kwargs = "call_method", "to", [m_args[0], "meta"], {}
        else:
            kind_run, target_run = kind, target
        if device is None:
            device = next((a.device for a in itertools.chain(args, kwargs.values())
                           if isinstance(a, TensorVariable)), None) or _default_device()
        elif "device" in m_kwargs:
            m_kwargs["device"] = torch.device("meta")
        out = self._run_meta(tx, kind_run, target_run, m_args, m_kwargs, args, kwargs)
        if out is not None and not _has_tensor(out):
            return tx.wrap_constant_result(out)
        node = self.graph.create_node(kind, target, fx_args, fx_kwargs)
        node.meta["stack_trace"] = f'  File "{tx.code.co_filename}", line {tx.lineno}, in {tx.code.co_name}'
        return self.wrap_node(tx, node, out, device)

    def _run_meta(self, tx, kind, target, m_args, m_kwargs, args, kwargs):
        no_tensor_in = not any(_has_tensor(a) for a in itertools.chain(m_args, m_kwargs.values()))
        if no_tensor_in and kind == "call_function" and "device" not in m_kwargs:
            m_kwargs = dict(m_kwargs, device="meta")  # a factory: build it on meta
        try:
            with torch.inference_mode(tx.root.inference_mode_), torch.set_grad_enabled(tx.grad_enabled):
                if kind == "call_method":
                    return getattr(m_args[0], target)(*m_args[1:], **m_kwargs)
                return target(*m_args, **m_kwargs)
        except Unsupported:
            raise
        except Exception as e:
            name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
            raise Unsupported("meta_failed", f"{name}: cannot compute output metadata "
                              f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") from e

    def wrap_node(self, tx, node, out, device) -> VariableTracker:
        from pydynamo.executor.variables.containers import ListVariable, NamedTupleVariable, TupleVariable
        if isinstance(out, torch.Tensor):
            if out.device.type != "meta":
                raise Unsupported("meta_failed", f"{node.target} produced a real tensor while tracing")
            existing = self.by_example.get(id(out))
            if existing is not None:
                return existing  # an in-place op returns its input: keep identity
            var = TensorVariable(node, out, device)
            self._set_meta(node, out, device)
            self.by_example[id(out)] = var
            return var
        if out is None:
            return ConstantVariable(None)
        if isinstance(out, (tuple, list)):
            items = []
            for i, o in enumerate(out):
                if isinstance(o, torch.Tensor) or isinstance(o, (tuple, list)):
                    item_node = self.graph.create_node("call_function", operator.getitem, (node, i), {})
                    items.append(self.wrap_node(tx, item_node, o, device))
                else:
                    items.append(tx.wrap_constant_result(o))
            node.meta["val"] = tuple(out)
            if isinstance(out, list):
                return ListVariable(items)
            if type(out) is tuple:
                return TupleVariable(items)
            return NamedTupleVariable(items, type(out))
        return tx.wrap_constant_result(out)

    def add_node(self, kind, target, args, kwargs=None):
        """A node with no traced output (grad-mode switches)."""
        return self.graph.create_node(kind, target, tuple(args), kwargs or {})

    # --- finishing ------------------------------------------------------------------------
    def op_count(self) -> int:
        return sum(1 for n in self.graph.nodes if n.op in ("call_function", "call_method", "call_module"))

    def compile(self, outputs: list[TensorVariable]) -> Optional[str]:
        """Close the graph with `outputs`, run the backend, install the compiled function in the
        frame's globals. Returns that global's name and the input sources (None: empty graph)."""
        self.graph.output(tuple(t.node for t in outputs))
        self._dce()
        used = [i for i in self.inputs if i.node.users]
        for i in self.inputs:
            if not i.node.users:
                self.graph.erase_node(i.node)
        self.inputs = used
        if self.op_count() == 0 and not outputs:
            return None
        self.graph.lint()
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        example_inputs = [i.value for i in self.inputs]
        gid = next(_graph_ids)
        try:
            compiled_fn = self.backend(gm, example_inputs)
        except Exception as e:
            from pydynamo.exc import BackendCompilerFailed
            raise BackendCompilerFailed(f"backend {getattr(self.backend, '__name__', self.backend)!r} "
                                        f"failed: {type(e).__name__}: {e}") from e
        compiled_fn = _without_interception(gm, compiled_fn)
        name = f"__pydynamo_compiled_fn_{gid}"
        self.frame_globals[name] = compiled_fn
        self.compiled.append(CompiledGraph(name, gm, example_inputs, compiled_fn, self.op_count()))
        return name

    def _dce(self) -> None:
        for node in reversed(list(self.graph.nodes)):
            if node.op in ("call_function", "call_method") and not node.users and not _is_impure(node):
                self.graph.erase_node(node)


def _without_interception(gm, fn):
    """The compiled function must run with the frame hook off (its own Python frames are not user
    code). The plain eager backend's `gm.forward` only needs its code marked skip (no wrapper on the
    hot path); anything else runs inside a wrapper that switches the hook off."""
    from pydynamo import _C
    if getattr(fn, "__self__", None) is gm and getattr(fn, "__func__", None) is type(gm).forward:
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


def _has_tensor(out) -> bool:
    if isinstance(out, torch.Tensor):
        return True
    if isinstance(out, (tuple, list)):
        return any(_has_tensor(o) for o in out)
    return False


def _default_device() -> torch.device:
    get = getattr(torch, "get_default_device", None)
    return get() if get is not None else torch.device("cpu")

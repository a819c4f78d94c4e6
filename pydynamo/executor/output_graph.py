"""OutputGraph: the FX graph under construction for one frame, and its compilation.

Invariants:
  * Placeholders come first, in the order inputs were first used; each has a Source and the real
    value (the example input handed to the backend).
  * Every tensor node carries one metadata record: meta["val"] (mirrored in "tensor_meta" and
    "example_value", meta.set_node_meta) is a pydynamo.meta.TensorMeta with the real device,
    static when it has no symbols, made once with the node; `is_view` says whether eager's
    value shares storage with the op's tensor argument (codegen's aliasing rules read it).
  * Metadata comes from one place per call (`_metadata`): the op run on the arguments' live
    meta examples (pointwise ops and three composites answered by meta_direct.py, without
    torch's Python reference kernels), under the traced grad mode and autocast state; or, when
    a symbolic size is among the arguments, meta.propagate on their records. A failure there
    is Unsupported (eager will raise the real error if there is one). One `wrap` turns either
    result into trackers.
  * Nodes whose only effect is a mutation are never removed by dead-code elimination: what a
    call writes is decided by pydynamo/mutation.py (in-place methods, `inplace=True`, setitem,
    out=, running statistics), plus grad-mode and autocast switches.
  * An in-place call's node becomes the written variable's node and its result IS that
    variable (identity kept; see "in-place results" below). A positional `inplace` flag is
    recorded as the keyword (`F.hardtanh(x, 0.0, 6.0, inplace=True)`).
  * Symbolic sizes (a frame with dynamic dims, pydynamo/shapes.py): the graph takes one int
    placeholder per symbol it uses (meta["val"] the sympy Symbol, meta["example_value"] the
    hint), reloaded from the symbol's source (`L['x'].size()[0]`), and sizes used as arguments
    are operator nodes over those placeholders (`sym_node`).
"""
from __future__ import annotations

import dataclasses
import itertools
import operator
import re
from typing import Any, Optional

import sympy
import torch
import torch.fx

from pydynamo import autocast as _autocast
from pydynamo import meta as _meta
from pydynamo import meta_direct as _direct
from pydynamo.exc import BackendCompilerFailed, Unsupported
from pydynamo.installed import graph_ids as _graph_ids, install, register_graph_module, wrap_compiled
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.builtins import BuiltinVariable
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable, is_numpy_scalar
from pydynamo.executor.variables.containers import (BaseListVariable, ConstDictVariable, ListVariable,
                                                    SliceVariable, TupleVariable)
from pydynamo.executor.variables.symbolic import SymNodeVariable
from pydynamo.executor.variables.tensor import CONSTANT_OPS, TensorVariable, known_value
from pydynamo.executor.variables.user_objects import NamedTupleVariable
from pydynamo.hints import meta_failure
from pydynamo.meta import TensorMeta
from pydynamo.mutation import keyword_inplace, mutation_of, node_mutation
from pydynamo.shapes import ConstraintViolation, is_truth_expr
from pydynamo.sources import Source
from pydynamo.symbols import FloorDiv


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
    backend_fn: Any = None   # what the backend returned, before wrap_compiled (warm_cache stores it)


def _meta_failed(target, e: Exception) -> Unsupported:
    name = target if isinstance(target, str) else getattr(target, "__name__", repr(target))
    return Unsupported(*meta_failure(name, e))


def _is_impure(node: torch.fx.Node) -> bool:
    """Kept by dead-code elimination without users: writes a tensor in place (pydynamo.mutation)
    or switches a global mode."""
    if node.op == "call_function" and node.target in _STATE_FUNCTIONS:
        return True
    return node_mutation(node) is not None


_PY_TYPE_DTYPES = {int: torch.int64, float: torch.float64, bool: torch.bool, complex: torch.complex128}
_STATE_FUNCTIONS = {*_autocast.GRAPH_NODES, torch._C._set_grad_enabled,
                    torch.autograd.grad_mode._enter_inference_mode,
                    torch.autograd.grad_mode._exit_inference_mode}


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


def _flat_variables(items):
    for a in items:
        inner = getattr(a, "items", None)
        if isinstance(inner, (list, tuple)):
            yield from _flat_variables(inner)
        else:
            yield a


class OutputGraph:
    def __init__(self, frame_globals: dict, backend):
        self.graph = torch.fx.Graph()
        self.inputs: list[GraphInput] = []
        self.frame_globals = frame_globals
        self.backend = backend
        self.by_example: dict[int, TensorVariable] = {}  # id(meta example) -> tracker (in-place results)
        self.compiled: list[CompiledGraph] = []
        self._names: set[str] = set()
        self.shape_env = None                       # set by the translator
        self._sym_nodes: dict = {}                  # sympy expr -> FX node (or int)

    # --- inputs ---------------------------------------------------------------------------
    def add_input(self, value: torch.Tensor, source: Source, sym_meta: Optional[TensorMeta] = None) -> TensorVariable:
        node = self._placeholder(source)
        # (the example starts its storage at 0: where an input view starts varies per call)
        static = TensorMeta.from_tensor(value, storage_offset=0)
        example = static.to_meta_tensor()
        _meta.set_node_meta(node, sym_meta if sym_meta is not None and sym_meta.is_symbolic else static)
        self.inputs.append(GraphInput(source, value, node))
        var = TensorVariable(node, example, value.device, source=source, cls=type(value),
                             meta=sym_meta, env=self.shape_env)
        self.by_example[id(example)] = var
        return var

    def _placeholder(self, source: Source) -> torch.fx.Node:
        name = self._unique(re.sub(r"[^0-9a-zA-Z_]+", "_", source.name()).strip("_") or "arg")
        last = self.inputs[-1].node if self.inputs else None
        if last is not None:
            ctx = self.graph.inserting_after(last)
        elif len(self.graph.nodes):
            ctx = self.graph.inserting_before(next(iter(self.graph.nodes)))
        else:
            ctx = self.graph.inserting_after(None)
        with ctx:
            return self.graph.placeholder(name)

    # --- symbolic sizes as graph values -----------------------------------------------------
    def sym_input(self, sym) -> torch.fx.Node:
        """The int placeholder of a symbol (made on first use), reloaded from its source."""
        node = self._sym_nodes.get(sym)
        if node is None:
            env = self.shape_env
            node = self._placeholder(env.var_to_source[sym])
            hint = env.size_hint(sym) if sym.is_integer else float(env.value_hint(sym))
            node.meta["val"] = sym
            node.meta["example_value"] = hint
            self.inputs.append(GraphInput(env.var_to_source[sym], hint, node))
            self._sym_nodes[sym] = node
        return node

    def sym_node(self, expr):
        """An FX argument computing a size expression from the int placeholders."""
        expr = self.shape_env.simplify(expr)
        if expr is sympy.true or expr is sympy.false:
            return bool(expr)
        if expr.is_Integer:
            return int(expr)
        if expr.is_number:
            return float(expr)
        hit = self._sym_nodes.get(expr)
        if hit is not None:
            return hit
        if expr.is_Symbol:
            return self.sym_input(expr)
        build = _SYM_BUILDERS.get(type(expr))
        if build is None:  # a form we do not spell in FX: pinned (guarded)
            if is_truth_expr(expr):
                return self.shape_env.evaluate(expr)
            return self.shape_env.specialize(expr, reason=f"size expression {type(expr).__name__}")
        node = build(self, expr)
        if isinstance(node, torch.fx.Node):
            node.meta["val"] = expr
            node.meta["example_value"] = (bool(expr.xreplace(self.shape_env.var_to_hint))
                                          if is_truth_expr(expr)
                                          else self.shape_env.value_hint(expr))
            self._sym_nodes[expr] = node
        return node

    def _sym_call(self, fn, *args):
        return self.graph.create_node("call_function", fn, tuple(args), {})

    def _unique(self, name: str) -> str:
        base, i = name, 0
        while name in self._names:
            i += 1
            name = f"{base}_{i}"
        self._names.add(name)
        return name

    # --- calls ----------------------------------------------------------------------------
    def to_fx(self, v: VariableTracker, tensor=None):
        """`v` as an FX node's argument, or, given `tensor` (what a TensorVariable stands for:
        its live meta example, or its record), as the metadata run's (a size is its SymInt)."""
        if isinstance(v, TensorVariable):
            if v.dead is not None:
                raise Unsupported("vmap", f"using {v.dead}")
            return tensor(v) if tensor else v.node
        if isinstance(v, SymNodeVariable):
            if tensor:
                return v.value
            node = self.sym_node(v.expr)
            if v.python_type() is float and self.shape_env.simplify(v.expr).is_integer:
                # `n + 2.0` is `n + 2` to sympy: computed from int placeholders it would be an
                # int, and torch.full / x * it would take an integer dtype
                return float(node) if isinstance(node, int) else self._sym_call(float, node)
            return node
        if isinstance(v, (ConstantVariable, ObjectVariable)):
            # a numpy number is a Python scalar to torch's argument parser (and FX spells
            # arguments as Python source, where numpy's repr would need the module)
            return v.value.item() if is_numpy_scalar(v.value) else v.value
        if isinstance(v, BuiltinVariable) and v.fn in _PY_TYPE_DTYPES:
            # dtype=int: torch's argument parser reads a Python number type as its dtype
            return _PY_TYPE_DTYPES[v.fn]
        if isinstance(v, SliceVariable):
            return slice(*(self.to_fx(x, tensor) for x in v.items))
        if isinstance(v, BaseListVariable):
            items = [self.to_fx(x, tensor) for x in v.items]
            if v.python_type() is torch.Size and not all(type(x) is int for x in items):
                return tuple(items)  # symbolic sizes (FX nodes, SymInts) a Size cannot hold
            return v.python_type()(items) if v.python_type() in (list, tuple, torch.Size) else tuple(items)
        if isinstance(v, ConstDictVariable):
            return {k: self.to_fx(x, tensor) for k, x in v.items.items()}
        raise Unsupported("graph_arg", f"cannot pass {v} to a torch operation")

    def _is_symbolic(self, v) -> bool:
        if isinstance(v, SymNodeVariable):
            return True
        if isinstance(v, TensorVariable):
            return v.meta is not None
        if isinstance(v, (BaseListVariable, SliceVariable)):
            return any(self._is_symbolic(x) for x in v.items)
        if isinstance(v, ConstDictVariable):
            return any(self._is_symbolic(x) for x in v.items.values())
        return False

    def call(self, tx, kind: str, target, args: list, kwargs: dict, meta_target=None) -> VariableTracker:
        """Trace one torch call: its metadata first (`_metadata`), then its node, then the tracker
        of its result (`wrap`; an in-place op's result is the variable it wrote). `meta_target`,
        if given, is what runs on the meta examples instead of `target` (a higher-order call's
        meta form: executor/higher_order.py)."""
        if kind == "call_function":  # one spelling of the in-place flag: inplace=...
            args, kwargs = keyword_inplace(target, tuple(args), kwargs)
            args = list(args)
        out, device = self._metadata(tx, kind, meta_target or target, args, kwargs)
        # (arguments after the metadata: a call answered without a node needs no size nodes)
        fx_args = tuple(self.to_fx(a) for a in args)
        fx_kwargs = {k: self.to_fx(v) for k, v in kwargs.items()}
        mutation = mutation_of(kind, target, fx_args, fx_kwargs)
        if mutation is None and out is not None and not _has_tensor(out):
            return self.wrap_value(tx, out)
        node = self.graph.create_node(kind, target, fx_args, fx_kwargs)
        # the user's frames, outermost first: an error of the node is raised from all of them
        node.meta["stack_trace"] = "\n".join(f'  File "{f}", line {n}, in {name}' for f, n, name in tx.user_stack())
        returned = mutation.returned(args, kwargs) if mutation is not None else None
        if isinstance(returned, TensorVariable) and isinstance(out, (torch.Tensor, TensorMeta)):
            self._rebind(returned, node, out)
            return returned
        var = self.wrap(tx, node, out, device, self._written(mutation, args, kwargs))
        if isinstance(var, TensorVariable) and kind == "call_function" and mutation is None:
            var.const_value = known_value(tx, target, args, kwargs)
        return var

    def _metadata(self, tx, kind, target, args, kwargs):
        """(the call's result metadata, its device). With a symbolic size among the arguments,
        meta.propagate on the arguments' records gives TensorMeta records (sympy sizes where the
        rules keep them); otherwise the op runs on the arguments' live meta examples (an
        in-place op updates them as it does the real tensors, see "in-place results"). Both run
        under the traced grad/inference mode and autocast state."""
        symbolic = self.shape_env is not None and \
            any(self._is_symbolic(a) for a in itertools.chain(args, kwargs.values()))
        tensor = (lambda v: v.node.meta["val"]) if symbolic else (lambda v: v.example)
        m_args = [self.to_fx(a, tensor) for a in args]
        m_kwargs = {k: self.to_fx(v, tensor) for k, v in kwargs.items()}
        try:
            with torch.inference_mode(tx.root.inference_mode_), torch.set_grad_enabled(tx.grad_enabled):
                if symbolic:
                    with _meta.autocast_state(tx.root.autocast_):
                        return _meta.propagate(target, tuple(m_args), m_kwargs, self.shape_env), None
                return self._run_meta(tx, kind, target, m_args, m_kwargs, args, kwargs)
        except (Unsupported, ConstraintViolation):
            raise
        except Exception as e:
            raise _meta_failed(target, e) from e

    def _run_meta(self, tx, kind, target, m_args, m_kwargs, args, kwargs):
        """The op on live meta examples; (result, the device the real result is on)."""
        device = _device_of(m_args, m_kwargs, kind, target)
        m_args, m_kwargs = _on_meta_device(m_args), _on_meta_device(m_kwargs)
        if kind == "call_method" and target == "to":
            m_args = [torch.device("meta") if isinstance(a, str) else a for a in m_args]
        if kind == "call_method" and target in ("cuda", "cpu"):
            kind, target, m_args, m_kwargs = "call_method", "to", [m_args[0], "meta"], {}
        if device is None:    # the first tensor argument's, also inside a list (torch.cat)
            device = next((a.device for a in _flat_variables(itertools.chain(args, kwargs.values()))
                           if isinstance(a, TensorVariable)), None) or _default_device()
        elif "device" in m_kwargs:
            m_kwargs["device"] = torch.device("meta")
        no_tensor_in = not any(_has_tensor(a) for a in itertools.chain(m_args, m_kwargs.values()))
        if no_tensor_in and kind == "call_function" and target in CONSTANT_OPS and "device" not in m_kwargs:
            return target(*m_args, **m_kwargs).to("meta"), device   # torch.div(7, 2): from numbers
        if no_tensor_in and kind == "call_function" and "device" not in m_kwargs:
            m_kwargs = dict(m_kwargs, device="meta")  # a factory: build it on meta
        if _autocast.any_enabled(tx.root.autocast_):
            return self._run_meta_autocast(tx, kind, target, m_args, m_kwargs), device
        if kind == "call_function":
            _meta.refuse_layout_dependent(target, m_args, m_kwargs)
        if kind in ("call_function", "call_method"):
            out = _direct.run(target, m_args, m_kwargs)   # eager's answer without torch's refs
            if out is not None:
                return out, device
        if kind == "call_method":
            return getattr(m_args[0], target)(*m_args[1:], **m_kwargs), device
        return target(*m_args, **m_kwargs), device

    def _run_meta_autocast(self, tx, kind, target, m_args, m_kwargs):
        """The meta run under the region's autocast state: eager's autocast dtypes."""
        if kind == "call_module":
            raise Unsupported("autocast", "a module call under torch.autocast")

        def device_of(t):
            var = self.by_example.get(id(t))
            return var.device if var is not None else _default_device()
        fn = (lambda self_arg, *a, **k: getattr(self_arg, target)(*a, **k)) if kind == "call_method" else target
        return _autocast.run_meta(tx.root.autocast_, fn, m_args, m_kwargs, device_of)

    # --- results ----------------------------------------------------------------------------
    # Every tensor node's meta["val"] is its TensorMeta record (meta.set_node_meta): static
    # when it has no symbols, made once when the node is, never changed after. A live meta
    # result's record says `is_view` as torch's op does (`_is_view()`), or when the op returned
    # an argument's example itself; a symbolic call's record comes from meta.propagate.

    def wrap(self, tx, node, out, device, written=()) -> VariableTracker:
        """The tracker of a call's result `out` (a live meta tensor, a TensorMeta, sequences of
        them, or a Python value) produced by `node`."""
        if isinstance(out, (torch.Tensor, TensorMeta)):
            return self._wrap_tensor(node, out, device, written)
        if out is None:
            return ConstantVariable(None)
        if isinstance(out, (tuple, list)):
            _meta.set_node_meta(node, _meta.map_structure(
                lambda t: self._record(t, device), out, (torch.Tensor, TensorMeta)))
            items = []
            for i, o in enumerate(out):
                if _has_tensor(o):
                    item_node = self.graph.create_node("call_function", operator.getitem, (node, i), {})
                    items.append(self.wrap(tx, item_node, o, device, written))
                else:
                    items.append(self.wrap_value(tx, o))
            return _sequence_variable(out, items)
        return self.wrap_value(tx, out)

    def wrap_value(self, tx, out) -> VariableTracker:
        """A Python result (sizes, flags): SymInts stay symbolic."""
        if isinstance(out, (tuple, list)) and any(isinstance(o, SymNodeVariable.SYM_TYPES) for o in out):
            items = [self.wrap_value(tx, o) for o in out]
            return ListVariable(items) if isinstance(out, list) else TupleVariable(items)
        if isinstance(out, SymNodeVariable.SYM_TYPES):
            return SymNodeVariable(out)
        return tx.wrap_constant_result(out)

    def _record(self, out, device) -> TensorMeta:
        """The TensorMeta of a result: a symbolic call's own, or a live meta tensor's."""
        if isinstance(out, TensorMeta):
            return out
        existing = self.by_example.get(id(out))
        return TensorMeta.from_tensor(out, device=existing.device if existing is not None else device,
                                      is_view=out._is_view() or existing is not None)

    def _wrap_tensor(self, node, out, device, written) -> TensorVariable:
        if isinstance(out, TensorMeta):
            example, device = out.to_meta_tensor(self.shape_env.size_hint), out.device
        else:
            if out.device.type != "meta":
                raise Unsupported("meta_failed", f"{node.target} produced a real tensor while tracing")
            existing = self.by_example.get(id(out))
            if existing is not None and any(existing is w for w in written):
                self._rebind(existing, node, out)  # out=(a, b): each item is a written argument
                return existing
            if existing is not None:
                # an op that returns its input (x.contiguous()): keep identity
                _meta.set_node_meta(node, self._record(out, device))
                return existing
            example = out
        record = self._record(out, device)
        _meta.set_node_meta(node, record)
        var = TensorVariable(node, example, device, meta=record, env=self.shape_env)
        self.by_example[id(example)] = var
        return var

    # --- in-place results -------------------------------------------------------------------
    # A TensorVariable's `example` stands for the real tensor: an in-place op runs on it in the
    # meta run exactly as on the real one (sizes of t_/unsqueeze_, requires_grad of add_ with a
    # grad-requiring operand, autograd errors), and the op's node becomes the variable's node
    # (`_rebind`): the result IS the written variable, and later reads go through the write.
    # Nodes keep the record made when they were (a snapshot: later writes do not change it).

    @staticmethod
    def _written(mutation, args, kwargs) -> list:
        """The TensorVariables a call writes in place (pydynamo.mutation decides)."""
        if mutation is None:
            return []
        return [v for v in mutation.written(args, kwargs) if isinstance(v, TensorVariable)]

    def _rebind(self, var: TensorVariable, node, out) -> None:
        """`node`'s value is `var`'s tensor after a write; `out` its metadata now (the live
        example, or a symbolic call's record). A view stays a view, a base a base."""
        record = self._record(out, var.device).replace(is_view=var.node.meta["val"].is_view)
        if isinstance(out, TensorMeta):
            var.meta = record if record.is_symbolic else None
            var.env = self.shape_env
            out = record.to_meta_tensor(self.shape_env.size_hint)
        if out is not var.example:
            if self.by_example.get(id(var.example)) is var:
                del self.by_example[id(var.example)]  # ids of dead examples get reused
            var.example = out
            self.by_example[id(out)] = var
        var.node = node
        _meta.set_node_meta(node, record)

    def forget_nodes(self, nodes: set) -> None:
        """`nodes` are about to leave the graph (moved into a sub-graph): drop the size nodes
        cached among them."""
        self._sym_nodes = {k: n for k, n in self._sym_nodes.items() if n not in nodes}

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
        if not outputs:
            self._drop_state_only()
        used = [i for i in self.inputs if i.node.users]
        for i in self.inputs:
            if not i.node.users:
                self.graph.erase_node(i.node)
        self.inputs = used
        if self.op_count() == 0 and not outputs:
            return None
        self.graph.lint()
        gm = torch.fx.GraphModule(torch.nn.Module(), self.graph)
        register_graph_module(gm)
        example_inputs = [i.value for i in self.inputs]
        gid = next(_graph_ids)
        try:
            compiled_fn = self.backend(gm, example_inputs)
        except Exception as e:
            raise BackendCompilerFailed(f"backend {getattr(self.backend, '__name__', self.backend)!r} "
                                        f"failed: {type(e).__name__}: {e}") from e
        backend_fn, compiled_fn = compiled_fn, wrap_compiled(gm, compiled_fn)
        name = f"__pydynamo_compiled_fn_{gid}"
        install(self.frame_globals, name, compiled_fn)
        self.compiled.append(CompiledGraph(name, gm, example_inputs, compiled_fn, self.op_count(),
                                           backend_fn))
        return name

    def _drop_state_only(self) -> None:
        """A graph that only switches grad/inference mode (or enters and leaves autocast regions)
        and ends in the mode it started in
        (the real mode now: translation runs under the frame's own, which a guard pins) does
        nothing: e.g. a resumed `with torch.no_grad():` block with no tensor work left."""
        from torch.autograd import grad_mode as gm
        calls = [n for n in self.graph.nodes if n.op in ("call_function", "call_method")]
        state = (torch._C._set_grad_enabled, gm._enter_inference_mode, gm._exit_inference_mode,
                 *_autocast.GRAPH_NODES)
        if not calls or any(n.op != "call_function" or n.target not in state for n in calls):
            return
        if sum(n.target is _autocast.enter_autocast for n in calls) != \
                sum(n.target is _autocast.exit_autocast for n in calls):
            return
        modes = [n.args[0] for n in calls if n.target is torch._C._set_grad_enabled]
        entered = sum(n.target is gm._enter_inference_mode for n in calls)
        if entered != sum(n.target is gm._exit_inference_mode for n in calls) or \
                (modes and modes[-1] != torch.is_grad_enabled()):
            return
        for n in reversed(calls):
            self.graph.erase_node(n)

    def _dce(self) -> None:
        for node in reversed(list(self.graph.nodes)):
            if node.op in ("call_function", "call_method") and not node.users and not _is_impure(node):
                self.graph.erase_node(node)


def _sequence_variable(out, items) -> VariableTracker:
    """The tracker of an op's sequence result: list, tuple, or its named tuple (x.max(dim))."""
    if isinstance(out, list):
        return ListVariable(items)
    if type(out) is tuple:
        return TupleVariable(items)
    return NamedTupleVariable(items, type(out))


def _fold(fn):
    def build(og, expr):
        nodes = [og.sym_node(a) for a in expr.args]
        acc = nodes[0]
        for n in nodes[1:]:
            acc = og._sym_call(fn, acc, n)
        return acc
    return build


def _build_mul(og, expr):
    coeff, rest = expr.as_coeff_Mul()
    if coeff == 1:  # a product of symbolic factors (s0*s1): no coefficient to split off
        return _fold(operator.mul)(og, expr)
    acc = og.sym_node(rest)
    if coeff.is_Integer:
        return acc if coeff == 1 else og._sym_call(operator.mul, int(coeff), acc)
    # a rational coefficient (sizes divided in Python floats): p * rest / q
    p, q = coeff.as_numer_denom()
    if p != 1:
        acc = og._sym_call(operator.mul, int(p), acc)
    return og._sym_call(operator.truediv, acc, int(q))


def _build_pow(og, expr):
    base, exp = expr.args
    if exp.is_Integer and exp > 0:
        return og._sym_call(operator.pow, og.sym_node(base), int(exp))
    if exp.is_Integer and exp < 0:
        return og._sym_call(operator.truediv, 1, og._sym_call(operator.pow, og.sym_node(base), int(-exp)))
    if exp.is_integer and exp.is_nonnegative is not False:  # a symbolic exponent, >= 0 as guarded
        return og._sym_call(operator.pow, og.sym_node(base), og.sym_node(exp))
    return og.shape_env.specialize(expr, reason="symbolic power")


def _binary(fn):
    return lambda og, expr: og._sym_call(fn, og.sym_node(expr.args[0]), og.sym_node(expr.args[1]))


# sympy node type -> FX spelling (operator / builtin calls, as torch.compile's graphs use)
_SYM_BUILDERS = {
    sympy.Add: _fold(operator.add), sympy.Mul: _build_mul, sympy.Pow: _build_pow,
    FloorDiv: _binary(operator.floordiv), sympy.Mod: _binary(operator.mod),
    sympy.Min: _fold(min), sympy.Max: _fold(max),
    # a SymBool used as a value (x + bool(n - 2)): the comparison, computed per call
    sympy.Eq: _binary(operator.eq), sympy.Ne: _binary(operator.ne),
    sympy.Lt: _binary(operator.lt), sympy.Le: _binary(operator.le),
    sympy.Gt: _binary(operator.gt), sympy.Ge: _binary(operator.ge),
}


def _has_tensor(out) -> bool:
    if isinstance(out, (torch.Tensor, TensorMeta)):
        return True
    if isinstance(out, (tuple, list)):
        return any(_has_tensor(o) for o in out)
    return False


def _on_meta_device(value):
    """Explicit devices in a meta run's arguments, moved to "meta" (nothing real is made)."""
    if isinstance(value, torch.device):
        return torch.device("meta")
    if isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        return type(value)(_on_meta_device(v) for v in value)
    if isinstance(value, dict):
        return {k: _on_meta_device(v) for k, v in value.items()}
    return value


def _default_device() -> torch.device:
    get = getattr(torch, "get_default_device", None)
    return get() if get is not None else torch.device("cpu")

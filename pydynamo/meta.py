"""Tensor metadata propagation: what a torch call returns, computed from its arguments' metadata.

`propagate(target, args, kwargs, env=None)` takes a torch-level callable (torch.*, F.*, operator.*,
a Tensor method *name* such as "view", or an nn.Module instance) and arguments in which tensors
are `TensorMeta` records and sizes may be symbolic (`shapes.SymInt` or sympy expressions), and
returns the output metadata: a TensorMeta, nested tuples/lists of them, or a Python value for ops
that return sizes (`size`, `dim`, `numel`, ...).

Invariants:
- The source of truth is always the eager op run on `device="meta"` tensors built from the
  arguments' concrete sizes (hints for symbolic dims): dtype, device, requires_grad, output
  structure and errors come from there, so metadata never disagrees with eager. For pointwise
  ops, F.linear, F.layer_norm and masked_fill, pydynamo/meta_direct.py gives eager's answer
  without running torch's Python reference kernels (whose first call imports torch's whole
  bytecode-tracing frontend, 1.5-2.6 s);
  where it is not sure it declines and the op runs on meta as for any other.
- When some input is symbolic, a registered shape rule (pydynamo/meta_rules.py, looked up in
  `RULES`) supplies the symbolic shape/stride, and the rule's shape evaluated on hints must equal
  the meta run's shape (a disagreement specializes instead and counts `rule_mismatch`). An op
  without a rule (or whose rule declines) specializes every symbolic value it touches to its
  hint, recording one guard per symbol (`ShapeEnv.specialize`) and counting it in
  `env.stats["specialized_ops"]` / `env.specialized_ops[name]`: correct, less general.
- Ops whose output shape depends on tensor data (nonzero, boolean masks, item(), tolist()) and
  any failure of the meta run raise `MetaUnsupported`, an `Unsupported`, which the executor
  turns into a graph break (eager then raises the real error, if there is one).
- The meta run happens under the caller's grad mode: the executor traces with the frame's grad
  mode set, so requires_grad comes out as eager's.

For FX nodes: `set_node_meta(node, value)` stores the TensorMeta (or SymInt/int/structure) in
node.meta["val"] (and "tensor_meta", "example_value").
"""
from __future__ import annotations

import contextlib
import copy
import dataclasses
import operator
import weakref
from typing import Any, Callable, Optional

import sympy
import torch

from pydynamo import autocast as _autocast
from pydynamo import meta_direct as _direct
from pydynamo.exc import Unsupported
from pydynamo.shapes import is_truth_expr, symbols_of

Dim = Any  # int or sympy.Expr

# ---------------------------------------------------------------------------------------------
# The record


@dataclasses.dataclass(frozen=True)
class TensorMeta:
    """Everything guards, FX node.meta and codegen need to know about a tensor but its data.

    shape/stride entries are Python ints or sympy expressions (never SymInt wrappers), so a
    TensorMeta is a plain value that can be hashed, compared and printed."""

    shape: tuple
    stride: tuple
    dtype: torch.dtype
    device: torch.device
    requires_grad: bool = False
    storage_offset: Dim = 0
    layout: torch.layout = torch.strided
    is_leaf: bool = True          # only meaningful for graph inputs
    is_parameter: bool = False
    is_quantized: bool = False
    memory_format: Optional[torch.memory_format] = None  # the format the tensor is dense in, if any
    # Eager's value shares storage with a tensor argument of the op that made it: a view
    # (torch's own op on meta tensors says so, `_is_view()`) or the argument itself (x.contiguous()
    # of a contiguous x). Set by whoever ran the op (`_from_meta_output`, the executor's meta runs);
    # graph inputs are False. codegen's output-aliasing rules read it (codegen/graph_outputs.py).
    is_view: bool = False

    # -- construction --------------------------------------------------------------------------
    @staticmethod
    def from_tensor(t: torch.Tensor, shape: Optional[tuple] = None,
                    stride: Optional[tuple] = None, device: Optional[torch.device] = None,
                    storage_offset: Optional[Dim] = None, is_view: bool = False) -> "TensorMeta":
        """Metadata of a real (or meta) tensor. `shape`/`stride`/`storage_offset` override the
        concrete values with symbolic ones (the builder passes what the ShapeEnv gave it);
        `device` overrides meta-device results with the device the real op would produce;
        `is_view` is the caller's to tell (see the field)."""
        shape = tuple(t.shape) if shape is None else tuple(_simplify_dim(d) for d in shape)
        if t.layout == torch.strided:
            stride = tuple(t.stride()) if stride is None else tuple(_simplify_dim(d) for d in stride)
            offset = t.storage_offset() if storage_offset is None else _simplify_dim(storage_offset)
        else:  # sparse & co have no strides
            stride, offset = (), 0
        return TensorMeta(
            shape=shape,
            stride=stride,
            dtype=t.dtype,
            device=t.device if device is None else torch.device(device),
            requires_grad=t.requires_grad,
            storage_offset=offset,
            layout=t.layout,
            is_leaf=t.is_leaf,
            is_parameter=isinstance(t, torch.nn.Parameter),
            is_quantized=t.is_quantized,
            memory_format=_memory_format_of(t),
            is_view=is_view,
        )

    def replace(self, **changes) -> "TensorMeta":
        return dataclasses.replace(self, **changes)

    # -- Tensor-like queries (concrete or symbolic) --------------------------------------------
    @property
    def ndim(self) -> int:
        return len(self.shape)

    def dim(self) -> int:
        return len(self.shape)

    def size(self, i: Optional[int] = None):
        return self.shape if i is None else self.shape[i]

    def numel(self) -> Dim:
        return _simplify_dim(sympy.Mul(*self.shape)) if self.is_symbolic else _prod(self.shape)

    @property
    def is_symbolic(self) -> bool:
        return any(isinstance(d, sympy.Basic) for d in (*self.shape, *self.stride, self.storage_offset))

    def free_symbols(self) -> set:
        out: set = set()
        for d in (*self.shape, *self.stride, self.storage_offset):
            if isinstance(d, sympy.Basic):
                out |= d.free_symbols
        return out

    @property
    def is_floating_point(self) -> bool:
        return self.dtype.is_floating_point

    @property
    def is_cuda(self) -> bool:
        return self.device.type == "cuda"

    def is_contiguous(self) -> bool:
        return _dims_equal(self.stride, contiguous_strides(self.shape), self.shape)

    def element_size(self) -> int:
        return torch.empty((), dtype=self.dtype, device="meta").element_size()

    # -- back to tensors -----------------------------------------------------------------------
    def concrete(self, hint: Callable[[Dim], int] = int) -> "TensorMeta":
        """The same record with every symbolic value replaced by `hint(expr)`."""
        if not self.is_symbolic:
            return self
        return self.replace(shape=tuple(hint(d) for d in self.shape),
                            stride=tuple(hint(d) for d in self.stride),
                            storage_offset=hint(self.storage_offset))

    def to_meta_tensor(self, hint: Callable[[Dim], int] = int) -> torch.Tensor:
        """A device="meta" tensor with this record's (hinted) sizes, strides, dtype and grad flag;
        a view (of a fresh base) when the record is one or starts at an offset."""
        c = self.concrete(hint)
        grad = self.requires_grad and (self.dtype.is_floating_point or self.dtype.is_complex)
        if self.layout != torch.strided:
            t = torch.empty(c.shape, dtype=self.dtype, device="meta")
        elif grad and not self.is_leaf:
            # a non-leaf input (e.g. `base * 1` of a parameter) may be written in place, as in
            # eager: a view of a non-leaf base keeps its geometry and its autograd rules
            need = c.storage_offset + 1 + sum((s - 1) * st for s, st in zip(c.shape, c.stride) if s > 0)
            base = torch.empty(max(need, 1), dtype=self.dtype, device="meta").requires_grad_(True)
            return base.clone().as_strided(c.shape, c.stride, c.storage_offset)
        else:
            t = torch.empty_strided(c.shape, c.stride, dtype=self.dtype, device="meta")
            if c.storage_offset or self.is_view:
                # a view into a larger storage, so ops that look at offsets (as_strided) agree
                # and a view op's result on it is a view of the same kind as eager's
                need = c.storage_offset + 1 + sum((s - 1) * st for s, st in zip(c.shape, c.stride) if s > 0)
                base = torch.empty(max(need, 1), dtype=self.dtype, device="meta")
                t = base.as_strided(c.shape, c.stride, c.storage_offset)
        if grad:
            t.requires_grad_(True)
        return t

    def example_tensor(self, hint: Callable[[Dim], int] = int, device=None) -> torch.Tensor:
        """A real tensor (random, never all-zero) with these hinted sizes — for backends that
        want example inputs."""
        c = self.concrete(hint)
        dev = self.device if device is None else device
        if self.dtype.is_floating_point or self.dtype.is_complex:
            t = torch.randn(c.shape, dtype=self.dtype, device=dev)
        elif self.dtype == torch.bool:
            t = torch.rand(c.shape, device=dev) > 0.5
        else:
            t = torch.randint(1, 10, c.shape, dtype=self.dtype, device=dev)
        return t.requires_grad_(self.requires_grad and t.is_floating_point())

    def __repr__(self) -> str:
        dev = "" if self.device.type == "cpu" else f", device={self.device}"
        rg = ", requires_grad=True" if self.requires_grad else ""
        return f"TensorMeta({list(self.shape)}, stride={list(self.stride)}, {self.dtype}{dev}{rg})"


class MetaUnsupported(Unsupported):
    """The op's output cannot be described without its data (or cannot run on meta tensors)."""


# ---------------------------------------------------------------------------------------------
# Small helpers shared with the shape rules


def _prod(xs) -> Dim:
    out: Any = 1
    for x in xs:
        out = out * x
    return out


def _simplify_dim(d) -> Dim:
    """Canonical form of one dimension: Python int when constant, sympy otherwise."""
    if isinstance(d, bool):
        raise TypeError("bool is not a size")
    if isinstance(d, int):
        return d
    if hasattr(d, "__pydynamo_symint__"):  # a shapes.SymInt
        d = d.expr
    if is_truth_expr(d):
        # a symbolic truth value used as a size: no rule spells that; the driver specializes
        raise NoRule()
    if isinstance(d, sympy.Basic):
        if d.is_Integer:
            return int(d)
        return d
    return operator.index(d)


def contiguous_strides(shape) -> tuple:
    strides: list = []
    acc: Any = 1
    for d in reversed(shape):
        strides.append(acc)
        acc = _simplify_dim(acc * d) if isinstance(d, sympy.Basic) or isinstance(acc, sympy.Basic) else acc * d
    return tuple(reversed(strides))


def _dims_equal(strides, expected, shape) -> bool:
    # strides of size-1 dims do not matter for contiguity
    return all(size == 1 or sympy.simplify(a - b) == 0 if isinstance(a, sympy.Basic) or isinstance(b, sympy.Basic)
               else size == 1 or a == b for a, b, size in zip(strides, expected, shape))


def _memory_format_of(t: torch.Tensor) -> Optional[torch.memory_format]:
    if t.layout != torch.strided:
        return None
    try:
        if t.is_contiguous():
            return torch.contiguous_format
        if t.dim() == 4 and t.is_contiguous(memory_format=torch.channels_last):
            return torch.channels_last
        if t.dim() == 5 and t.is_contiguous(memory_format=torch.channels_last_3d):
            return torch.channels_last_3d
    except RuntimeError:
        pass
    return None


def map_structure(fn: Callable[[Any], Any], value: Any, leaf_type=TensorMeta) -> Any:
    """Apply fn to every `leaf_type` inside nested tuples/lists/dicts (structseq kept)."""
    if isinstance(value, leaf_type):
        return fn(value)
    if isinstance(value, (list, tuple)):
        items = [map_structure(fn, v, leaf_type) for v in value]
        if isinstance(value, list):
            return items
        if type(value) is tuple:
            return tuple(items)
        if isinstance(value, torch.Size):
            return tuple(items)
        try:  # torch.return_types structseq / namedtuple
            return type(value)(items)
        except TypeError:
            return type(value)(*items)
    if isinstance(value, dict):
        return {k: map_structure(fn, v, leaf_type) for k, v in value.items()}
    return value


def leaves(value: Any, leaf_type=TensorMeta) -> list:
    out: list = []
    map_structure(lambda m: out.append(m), value, leaf_type)
    return out


# ---------------------------------------------------------------------------------------------
# The rule registry


@dataclasses.dataclass
class Rule:
    """A symbolic shape rule. `fn(ctx, *args, **kwargs)` gets arguments with TensorMeta kept and
    SymInts unwrapped to sympy/int; it returns, per tensor output of the meta run, a shape tuple
    or an `Out` (shape + optional stride/offset), in the same nesting; or raises `NoRule` to make
    the driver specialize instead. `python_value` rules return the final Python value themselves
    and never run the op (size, dim, numel, ...)."""

    fn: Callable
    python_value: bool = False


@dataclasses.dataclass
class Out:
    shape: tuple
    stride: Optional[tuple] = None
    storage_offset: Optional[Dim] = None


class NoRule(Exception):
    """Raised by a rule for argument forms it does not handle symbolically."""


# target → Rule. Keys: callables (torch.add, F.relu, operator.getitem), method names ("view"),
# nn.Module subclasses (their rule gets the module as first argument).
RULES: dict = {}


def register(*targets, python_value: bool = False):
    def deco(fn):
        for t in targets:
            RULES[t] = Rule(fn, python_value)
        return fn
    return deco


@dataclasses.dataclass
class RuleContext:
    """What a rule may use beside its arguments: the shape env (guards, hints) and the result
    of the meta run on hints (dtype/device/structure already right)."""

    env: Any
    target: Any
    meta_out: Any = None

    def hint(self, d) -> int:
        return _hint(self.env, d)


def rule_key(target) -> Any:
    """Registry key of a call target: modules by class; `torch.Tensor.add` (as a function) by
    its method name, so method and function spellings share one rule."""
    if isinstance(target, torch.nn.Module):
        return type(target)
    if not isinstance(target, str) and _hashable(target):
        name = _tensor_method_names().get(target)
        if name is not None:
            return name
    return target


_METHOD_NAMES: dict = {}


def _tensor_method_names() -> dict:
    if not _METHOD_NAMES:
        for name in dir(torch.Tensor):
            attr = getattr(torch.Tensor, name, None)
            if callable(attr) and _hashable(attr):
                _METHOD_NAMES.setdefault(attr, name)
    return _METHOD_NAMES


def target_name(target) -> str:
    if isinstance(target, str):
        return f"Tensor.{target}"
    if isinstance(target, torch.nn.Module):
        return type(target).__name__
    name = getattr(target, "__name__", None)
    if name:  # the public spelling when there is one: torch.add, F.relu, operator.mul
        import torch.nn.functional as F
        for prefix, namespace in (("torch", torch), ("F", F), ("operator", operator)):
            if _hashable(target) and getattr(namespace, name, None) is target:
                return f"{prefix}.{name}"
    mod = getattr(target, "__module__", None) or ""
    name = getattr(target, "__qualname__", None) or name or repr(target)
    return f"{mod}.{name}" if mod else name


# ---------------------------------------------------------------------------------------------
# Hints and argument conversion


def _hint(env, d) -> int:
    if isinstance(d, int):
        return d
    if hasattr(d, "__pydynamo_symint__"):
        d = d.expr
    if isinstance(d, sympy.Basic):
        if d.is_number:
            return int(d)
        if env is None:
            raise ValueError(f"symbolic value {d} needs a ShapeEnv for its hint")
        return env.size_hint(d)
    return operator.index(d)


def _is_symbolic_value(x) -> bool:
    return hasattr(x, "__pydynamo_symint__") or (isinstance(x, sympy.Basic) and not x.is_number)


def _has_symbolic(value) -> bool:
    found = False

    def visit(v):
        nonlocal found
        if isinstance(v, TensorMeta):
            found = found or v.is_symbolic
        elif _is_symbolic_value(v):
            found = True
        elif isinstance(v, (list, tuple)):
            for x in v:
                visit(x)
        elif isinstance(v, dict):
            for x in v.values():
                visit(x)
        elif isinstance(v, slice):
            visit((v.start, v.stop, v.step))
    visit(value)
    return found


def unwrap_symbolic(value):
    """SymInt → sympy expression (or int when constant), recursively; everything else kept."""
    if hasattr(value, "__pydynamo_symint__"):
        if is_truth_expr(value.expr):
            return value.expr   # a SymBool: a truth value, not a size
        return _simplify_dim(value.expr)
    if isinstance(value, sympy.Basic) and value.is_Integer:
        return int(value)
    if isinstance(value, list):
        return [unwrap_symbolic(v) for v in value]
    if isinstance(value, tuple) and type(value) in (tuple, torch.Size):
        return tuple(unwrap_symbolic(v) for v in value)
    if isinstance(value, slice):
        return slice(unwrap_symbolic(value.start), unwrap_symbolic(value.stop), unwrap_symbolic(value.step))
    if isinstance(value, dict):
        return {k: unwrap_symbolic(v) for k, v in value.items()}
    return value


_DEVICE_KWARGS = ("device",)


class _MetaArgs:
    """Converts arguments to what the eager op accepts on the meta device, remembering the real
    device(s) involved so outputs can be given the device the real op would produce."""

    def __init__(self, env):
        self.env = env
        self.devices: list = []           # devices of tensor inputs, in order
        self.explicit_device = None       # a device= the call asked for
        self.real_devices: dict = {}      # id(meta tensor) -> the device it stands for

    def tensor(self, m: TensorMeta) -> torch.Tensor:
        self.devices.append((m.device, m.ndim))
        t = m.to_meta_tensor(lambda d: _hint(self.env, d))
        self.real_devices[id(t)] = m.device
        return t

    def device_of(self, t: torch.Tensor) -> torch.device:
        """The real device of a meta tensor this converter made (autocast runs need it)."""
        return self.real_devices.get(id(t), _default_device())

    def convert(self, v):
        if isinstance(v, TensorMeta):
            return self.tensor(v)
        if hasattr(v, "__pydynamo_symint__"):
            return v.hint  # int for SymInt, float for SymFloat (the type drives promotion)
        if isinstance(v, sympy.Basic):
            return _hint(self.env, v)
        if isinstance(v, torch.Tensor):  # a real constant tensor (e.g. a captured buffer)
            self.devices.append((v.device, v.dim()))
            t = v.to("meta") if v.device.type != "meta" else v
            self.real_devices[id(t)] = v.device
            return t
        if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
            items = [self.convert(x) for x in v]
            return items if isinstance(v, list) else tuple(items)
        if isinstance(v, slice):
            return slice(self.convert(v.start), self.convert(v.stop), self.convert(v.step))
        if isinstance(v, dict):
            return {k: self.convert(x) for k, x in v.items()}
        return v

    def kwargs(self, kwargs: dict) -> dict:
        out = {}
        for k, v in kwargs.items():
            if k in _DEVICE_KWARGS and v is not None:
                self.explicit_device = torch.device(v)
                v = "meta"
            out[k] = self.convert(v)
        return out

    def output_device(self) -> torch.device:
        if self.explicit_device is not None:
            dev = self.explicit_device
            if dev.type == "cuda" and dev.index is None:  # eager tensors always carry an index
                dev = torch.device("cuda", torch.cuda.current_device() if torch.cuda.is_available() else 0)
            return dev
        # eager: a non-CPU tensor wins over CPU 0-dim tensors (which act like scalars)
        for dev, ndim in self.devices:
            if dev.type not in ("cpu", "meta"):
                return dev
        for dev, _ in self.devices:
            return dev
        return _default_device()


def _default_device() -> torch.device:
    get = getattr(torch, "get_default_device", None)
    return torch.device(get()) if get is not None else torch.device("cpu")


# ---------------------------------------------------------------------------------------------
# Calling the op on meta tensors


def _resolve_callable(target, self_arg):
    if isinstance(target, str):
        fn = getattr(self_arg, target, None)
        if fn is None:
            raise MetaUnsupported("meta_no_method", f"tensors have no method {target!r}")
        if not callable(fn):  # a property such as T / mT / H
            return (lambda: fn), True
        return fn, True
    return target, False


# Methods/functions whose result needs the tensor's data; never run on meta.
DATA_DEPENDENT = {
    "item", "tolist", "numpy", "nonzero", "unique", "unique_consecutive", "masked_select",
    "__bool__", "__int__", "__float__", "__index__", "argwhere", "bincount", "repeat_interleave_data",
    torch.nonzero, torch.unique, torch.unique_consecutive, torch.masked_select, torch.argwhere,
    torch.bincount, torch.Tensor.item, torch.Tensor.tolist,
}

# Methods that move tensors between devices: handled here so no real allocation ever happens.
_DEVICE_METHODS = {"cuda", "cpu", "to"}

_module_meta_cache: "weakref.WeakKeyDictionary[torch.nn.Module, torch.nn.Module]" = weakref.WeakKeyDictionary()


def meta_module(module: torch.nn.Module) -> torch.nn.Module:
    """A copy of `module` whose parameters and buffers live on the meta device (weights are never
    copied: deepcopy's memo maps each one straight to its meta twin)."""
    cached = _module_meta_cache.get(module)
    if cached is not None:
        return cached
    memo: dict = {}
    for p in module.parameters():
        memo[id(p)] = torch.nn.Parameter(p.detach().to("meta"), requires_grad=p.requires_grad)
    for b in module.buffers():
        memo[id(b)] = b.detach().to("meta")
    copied = copy.deepcopy(module, memo)
    _module_meta_cache[module] = copied
    return copied


def _module_device(module: torch.nn.Module) -> Optional[torch.device]:
    for t in module.parameters():
        return t.device
    for t in module.buffers():
        return t.device
    return None


# Meta runs are pure functions of (op, concrete argument metadata, grad/inference mode, default
# dtype); models repeat the same ops on the same shapes layer after layer, so results are
# memoized. Autocast (the trace's state in AUTOCAST) is part of the key.
_META_CACHE: dict = {}
_META_CACHE_LIMIT = 8192

# The trace's autocast state (pydynamo.autocast tuple), set by the executor around the metadata
# calls of a region under torch.autocast: meta runs then see eager's autocast dtypes.
AUTOCAST: list = [None]


@contextlib.contextmanager
def autocast_state(state):
    prior, AUTOCAST[0] = AUTOCAST[0], (state if _autocast.any_enabled(state) else None)
    try:
        yield
    finally:
        AUTOCAST[0] = prior


def _cache_key(target, args, kwargs, env):
    if isinstance(target, torch.nn.Module) or not _hashable(target):
        return None
    try:
        key = (target, _key_of(args, env), _key_of(kwargs, env), torch.is_grad_enabled(),
               torch.is_inference_mode_enabled(), torch.get_default_dtype(), AUTOCAST[0])
        hash(key)
        return key
    except _Uncacheable:
        return None
    except TypeError:
        return None


class _Uncacheable(Exception):
    pass


def _key_of(v, env):
    if isinstance(v, TensorMeta):
        return v.concrete(lambda d: _hint(env, d)) if v.is_symbolic else v
    if hasattr(v, "__pydynamo_symint__"):
        h = v.hint
        return (type(h), h)
    if isinstance(v, sympy.Basic):
        return (int, _hint(env, v))
    if isinstance(v, (bool, int, float, complex, str, type(None), torch.dtype, torch.device,
                      torch.memory_format, torch.layout, type(Ellipsis))):
        return (type(v), v)
    if isinstance(v, (list, tuple)):
        return (type(v), tuple(_key_of(x, env) for x in v))
    if isinstance(v, slice):
        return (slice, _key_of(v.start, env), _key_of(v.stop, env), _key_of(v.step, env))
    if isinstance(v, dict):
        return (dict, tuple((k, _key_of(x, env)) for k, x in v.items()))
    raise _Uncacheable()  # real tensors, generators, arbitrary objects


def run_on_meta(target, args: tuple, kwargs: dict, env=None):
    """Run the eager op on meta tensors built from hints; return concrete metadata (TensorMeta
    leaves with the real output device) in the op's own output structure. Memoized."""
    key = _cache_key(target, args, kwargs, env)
    if key is not None:
        hit = _META_CACHE.get(key)
        if hit is not None:
            if isinstance(hit, MetaUnsupported):
                raise MetaUnsupported(hit.reason_code, hit.message)
            return map_structure(lambda m: m, hit)  # fresh containers; leaves are immutable
    try:
        out = _run_on_meta(target, args, kwargs, env)
    except MetaUnsupported as e:
        if key is not None:
            _remember(key, e)
        raise
    if key is not None:
        _remember(key, out)
    return out


_LINEARS = {torch.nn.functional.linear, torch.ops.aten.linear.default}


def refuse_layout_dependent(target, margs, mkwargs) -> None:
    """Raise MetaUnsupported for a call whose eager result depends on more than its arguments'
    metadata says to torch's meta kernel (both meta runs, the executor's live one and this
    module's, ask): F.linear with a bias of another dtype than its input adds the bias in place
    into a strided input's product (the product's dtype) and raises for a contiguous input
    (addmm), where the meta kernel promotes (fuzz seed 196073: an fp64 bias on fp32 operands
    planned an fp64 result, eager's was fp32)."""
    if not (_hashable(target) and target in _LINEARS):
        return
    x = margs[0] if margs else mkwargs.get("input")
    bias = margs[2] if len(margs) > 2 else mkwargs.get("bias")
    if isinstance(x, torch.Tensor) and isinstance(bias, torch.Tensor) and bias.dtype != x.dtype:
        raise MetaUnsupported("meta_unsupported", "linear with a bias of another dtype than its "
                              "input: eager's result depends on the input's layout")


def _remember(key, value) -> None:
    if len(_META_CACHE) >= _META_CACHE_LIMIT:
        _META_CACHE.clear()
    _META_CACHE[key] = value


def _run_on_meta(target, args: tuple, kwargs: dict, env=None):
    if _hashable(target) and target in DATA_DEPENDENT:
        raise MetaUnsupported("data_dependent", f"{target_name(target)} depends on tensor data")
    if target == "type" and len(args) == 1 and not kwargs:
        raise MetaUnsupported("meta_unsupported", "Tensor.type() returns a string naming the device")
    conv = _MetaArgs(env)
    margs = conv.convert(list(args))
    mkwargs = conv.kwargs(kwargs)
    refuse_layout_dependent(target, margs, mkwargs)
    if isinstance(target, str) and target in _DEVICE_METHODS:
        margs, mkwargs = _strip_device_move(target, margs, mkwargs, conv)
        target = "to" if (margs[1:] or mkwargs) else "detach_alias"
    state = AUTOCAST[0]
    try:
        if state is not None and _autocast.any_enabled(state):
            if isinstance(target, torch.nn.Module):
                raise MetaUnsupported("autocast", "a module call under torch.autocast")
            out = _autocast.run_meta(state, _call_target(target), margs, mkwargs, conv.device_of)
        elif isinstance(target, torch.nn.Module):
            dev = _module_device(target)
            if dev is not None:
                conv.devices.insert(0, (dev, 1))
            out = meta_module(target)(*margs, **mkwargs)
        elif target == "detach_alias":
            out = margs[0]
        else:
            out = _direct.run(target, margs, mkwargs)   # eager's answer without torch's refs
            if out is None:
                fn, bound = _resolve_callable(target, margs[0] if margs else None)
                out = fn(*margs[1:], **mkwargs) if bound else fn(*margs, **mkwargs)
    except NotImplementedError as e:
        raise MetaUnsupported("meta_unsupported",
                              f"{target_name(target)} cannot be evaluated without data: {_first_line(e)}") from e
    except MetaUnsupported:
        raise
    except Exception as e:
        # Either the call is wrong (eager raises the same error when it runs) or the meta kernel
        # is more limited than the real one; both are handled by running this op eagerly, so
        # the user sees eager's own behaviour, never an error eager would not raise.
        raise MetaUnsupported("meta_error",
                              f"{target_name(target)} failed on metadata: {type(e).__name__}: {_first_line(e)}") from e
    device = conv.output_device()
    return _from_meta_output(device_results(target, args, device, out), device, conv.real_devices)


def _call_target(target):
    """target as a plain function of (self, *args) for methods and properties too."""
    if not isinstance(target, str):
        return target

    def call(self_arg, *args, **kwargs):
        fn, _ = _resolve_callable(target, self_arg)
        return fn(*args, **kwargs)
    return call


def _hashable(x) -> bool:
    try:
        hash(x)
        return True
    except TypeError:
        return False


def _first_line(e: BaseException) -> str:
    return (str(e).strip().splitlines() or [type(e).__name__])[0]


def _strip_device_move(name, margs, mkwargs, conv):
    """`.cuda()/.cpu()/.to(device, ...)`: keep dtype/copy/memory_format effects on meta, record
    the destination device."""
    self_t, rest = margs[0], list(margs[1:])
    if name == "cuda":
        idx = rest[0] if rest else mkwargs.pop("device", None)
        conv.explicit_device = torch.device("cuda", idx) if isinstance(idx, int) else torch.device(idx or "cuda")
        rest = []
        mkwargs = {k: v for k, v in mkwargs.items() if k in ("memory_format",)}
    elif name == "cpu":
        conv.explicit_device = torch.device("cpu")
        rest = []
        mkwargs = {k: v for k, v in mkwargs.items() if k in ("memory_format",)}
    else:
        kept = []
        for a in rest:
            if isinstance(a, (str, torch.device)):
                conv.explicit_device = torch.device(a)
            elif isinstance(a, torch.Tensor):  # .to(other): dtype and device of other
                conv.explicit_device = conv.devices[-1][0]
                kept.append(a.dtype)
            else:
                kept.append(a)
        rest = kept
        if mkwargs.get("device") == "meta":
            mkwargs.pop("device")
        if conv.explicit_device is None:
            conv.explicit_device = conv.devices[0][0]
    return [self_t, *rest], mkwargs


# Ops whose meta kernels answer for another device than the CPU one. Norms' statistics (and a
# functional variant's new running statistics) of an fp16/bf16 input: float32 on meta (CUDA's
# dtype), the input's dtype from eager's CPU kernels. Batch norm in evaluation: its saved
# statistics are empty tensors on CPU, (C,) on meta. Checked against torch 2.11-2.13.
_CPU_HALF_STATS = frozenset({
    "native_layer_norm", "native_batch_norm", "_native_batch_norm_legit",
    "_native_batch_norm_legit_functional", "_batch_norm_with_update",
    "_batch_norm_with_update_functional", "_batch_norm_no_update"})
# name -> position of its `training` argument (None: always evaluation)
_CPU_EVAL_BATCH_NORM = {"native_batch_norm": 5, "_native_batch_norm_legit": 5,
                        "_native_batch_norm_legit_functional": 5,
                        "_native_batch_norm_legit_no_training": None, "_batch_norm_no_update": None}


def _op_name(target) -> Optional[str]:
    return getattr(getattr(target, "overloadpacket", target), "__name__", None)


def device_results(target, args, device, out):
    """`out`, the meta run's results of `target(*args)`, made what the op returns on `device`
    where the meta kernel answers otherwise (the tables above). The executor's meta run and the
    training recorder (pydynamo/aot/recorder.py) both apply it."""
    if device is None or torch.device(device).type != "cpu" or not isinstance(out, (tuple, list)):
        return out
    name = _op_name(target)
    if name in _CPU_EVAL_BATCH_NORM and getattr(target, "_overloadname", "") != "no_stats":
        i = _CPU_EVAL_BATCH_NORM[name]
        training = i is not None and len(args) > i and args[i] is True
        if not training and len(args) > 4 and args[3] is not None:
            # (with no running statistics, "evaluation" normalizes by the batch's and saves them)
            out = type(out)([out[0], out[1].new_empty((0,)), out[2].new_empty((0,))] + list(out[3:]))
    dtype = getattr(args[0], "dtype", None) if args else None
    if name in _CPU_HALF_STATS and dtype in (torch.float16, torch.bfloat16):
        out = type(out)(t.to(dtype) if isinstance(t, torch.Tensor) and t.dtype == torch.float32
                        else t for t in out)
    return out


def _from_meta_output(out, device, inputs=()):
    """Records of the meta run's outputs; `inputs`: ids of the meta tensors the arguments became
    (an output that is one of them is its argument itself: `is_view`)."""
    def leaf(t):
        return TensorMeta.from_tensor(t, device=device, is_view=t._is_view() or id(t) in inputs)
    if isinstance(out, torch.Tensor):
        return leaf(out)
    if isinstance(out, torch.Size):
        return tuple(out)
    return map_structure(leaf, out, torch.Tensor)


# ---------------------------------------------------------------------------------------------
# The driver


def propagate(target, args: tuple = (), kwargs: Optional[dict] = None, env=None):
    """Output metadata of `target(*args, **kwargs)`.

    Tensors in args are TensorMeta; sizes may be ints, `shapes.SymInt`s or sympy expressions.
    With symbolic inputs and no `env`, raises ValueError (hints live in the ShapeEnv)."""
    kwargs = kwargs or {}
    symbolic = env is not None and (_has_symbolic(args) or _has_symbolic(kwargs))
    rule = RULES.get(rule_key(target)) if _hashable(rule_key(target)) else None
    if rule is not None and rule.python_value:
        ctx = RuleContext(env, target)
        out = rule.fn(ctx, *unwrap_symbolic(tuple(args)), **unwrap_symbolic(kwargs))
        return _wrap_python_value(out, env)
    meta_out = run_on_meta(target, tuple(args), kwargs, env)
    if not symbolic:
        return meta_out
    if rule is not None:
        ctx = RuleContext(env, target, meta_out)
        try:
            lead = (target,) if isinstance(target, torch.nn.Module) else ()
            spec = rule.fn(ctx, *lead, *unwrap_symbolic(tuple(args)), **unwrap_symbolic(kwargs))
            return _merge(spec, meta_out, env, target, leaves([list(args), kwargs]))
        except NoRule:
            pass
        except NoRuleMismatch:
            # a rule bug must never become a wrong shape: specialize, and make it visible
            env.stats["rule_mismatch"] += 1
            if STRICT_RULES:
                raise
    return _specialize_fallback(target, args, kwargs, env, meta_out)


# Tests set this so a rule that disagrees with the meta run fails loudly instead of specializing.
STRICT_RULES = False


def _wrap_python_value(value, env):
    """Sizes handed back to the executor: sympy → SymInt (ints stay ints)."""
    if isinstance(value, sympy.Basic):
        if value.is_Integer:
            return int(value)
        if env is None:
            return value
        return env.symint(value)
    if isinstance(value, (list, tuple)) and not isinstance(value, TensorMeta):
        items = [_wrap_python_value(v, env) for v in value]
        return items if isinstance(value, list) else tuple(items)
    return value


def _specialize_fallback(target, args, kwargs, env, meta_out):
    """No symbolic rule: pin every symbol the op touches to its hint (guarded); the meta run's
    concrete result is then exact."""
    for s in symbols_of(args, kwargs):
        env.specialize(s, reason=f"no symbolic shape rule for {target_name(target)}")
    env.count_specialized_op(target_name(target))
    return meta_out


def _merge(spec, meta_out, env, target, inputs):
    """Combine a rule's symbolic shapes with the meta run's concrete metadata, checking that
    they agree on the hints."""
    if isinstance(meta_out, TensorMeta):
        return _merge_one(spec, meta_out, env, target, inputs)
    if isinstance(meta_out, (list, tuple)):
        if not isinstance(spec, (list, tuple)) or len(spec) != len(meta_out):
            raise NoRuleMismatch(target, "output structure")
        items = [_merge(s, m, env, target, inputs) for s, m in zip(spec, meta_out)]
        return type(meta_out)(items) if type(meta_out) in (list, tuple) else _rebuild(meta_out, items)
    return meta_out


def _rebuild(like, items):
    try:
        return type(like)(items)
    except TypeError:
        return type(like)(*items)


class NoRuleMismatch(AssertionError):
    def __init__(self, target, what):
        super().__init__(f"shape rule for {target_name(target)} disagrees with the meta run ({what})")


def _merge_one(spec, m: TensorMeta, env, target, inputs) -> TensorMeta:
    out = spec if isinstance(spec, Out) else Out(tuple(spec))
    shape = tuple(_simplify_dim(env.simplify(d) if isinstance(d, sympy.Basic) else d) for d in out.shape)
    if tuple(_hint(env, d) for d in shape) != m.shape:
        raise NoRuleMismatch(target, f"shape {shape} vs {m.shape}")
    if out.stride is not None:
        stride = tuple(_simplify_dim(env.simplify(d) if isinstance(d, sympy.Basic) else d) for d in out.stride)
        if tuple(_hint(env, d) for d in stride) != m.stride and _dense_mismatch_matters(m, stride, env):
            raise NoRuleMismatch(target, f"stride {stride} vs {m.stride}")
    else:
        if any(not isinstance(d, int) and h <= 1 for d, h in zip(shape, m.shape)):
            # a symbolic dim that is 0 or 1 on the hints (s0 - 1 at s0 = 2) hides the layout
            # order from the meta run: pin it rather than guess
            raise NoRule()
        # an output laid out exactly like an input (in-place ops, no-op .to, detach) shares its
        # symbolic strides; otherwise a dense output's strides follow from its shape
        same = _same_layout_input(shape, m, inputs, env)
        if same is not None:
            stride = same.stride
            if out.storage_offset is None:
                out = Out(out.shape, None, same.storage_offset)
        else:
            stride = _symbolic_dense_strides(shape, m)
        if stride is None:
            raise NoRule()
    offset = out.storage_offset
    if offset is None:
        if m.storage_offset != 0:
            raise NoRule()
        offset = 0
    else:
        offset = _simplify_dim(offset)
    return m.replace(shape=shape, stride=stride, storage_offset=offset)


def _same_layout_input(shape, m: TensorMeta, inputs, env) -> Optional[TensorMeta]:
    for t in inputs:
        if not t.is_symbolic or len(t.shape) != len(shape):
            continue
        if any(sympy.expand(sympy.sympify(a) - sympy.sympify(b)) != 0 for a, b in zip(t.shape, shape)):
            continue
        if tuple(_hint(env, d) for d in t.stride) == m.stride and _hint(env, t.storage_offset) == m.storage_offset:
            return t
    return None


def _dense_mismatch_matters(m: TensorMeta, stride, env) -> bool:
    # strides of size-1 or empty dims are arbitrary; only compare the others
    if 0 in m.shape:
        return False
    return any(s != 1 and _hint(env, a) != b for s, a, b in zip(m.shape, stride, m.stride))


def _symbolic_dense_strides(shape, m: TensorMeta) -> Optional[tuple]:
    """If the meta output is dense (some permutation of contiguous), the same permutation of the
    symbolic shape gives its symbolic strides; otherwise None."""
    n = len(shape)
    if n == 0:
        return ()
    if 0 in m.shape:
        return contiguous_strides(shape)
    # dims in order of decreasing stride (ties: the later dim is inner, as torch lays them out)
    order = sorted(range(n), key=lambda i: (-m.stride[i], -i))
    expected = [0] * n
    acc = 1
    for i in reversed(order):
        expected[i] = acc
        acc *= m.shape[i]
    if any(m.shape[i] != 1 and expected[i] != m.stride[i] for i in range(n)):
        return None
    sym = [0] * n
    acc_s: Any = 1
    for i in reversed(order):
        sym[i] = m.stride[i] if isinstance(shape[i], int) and shape[i] == 1 else _simplify_dim(sympy.sympify(acc_s))
        acc_s = acc_s * shape[i]
    return tuple(_simplify_dim(s) if not isinstance(s, int) else s for s in sym)


# ---------------------------------------------------------------------------------------------
# FX node metadata


def set_node_meta(node: "torch.fx.Node", val) -> None:
    """Attach metadata to an FX node the way downstream passes expect: `meta["val"]` holds the
    TensorMeta (or nested structure / SymInt / int), `meta["tensor_meta"]` the same for tensor
    outputs, and `meta["example_value"]` mirrors `val` for code written against dynamo."""
    node.meta["val"] = val
    node.meta["example_value"] = val
    if isinstance(val, TensorMeta) or leaves(val):
        node.meta["tensor_meta"] = val




# Symbolic shape rules live in meta_rules.py (split for size); importing registers them.
from pydynamo import meta_rules as _meta_rules  # noqa: E402,F401

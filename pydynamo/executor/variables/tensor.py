"""TensorVariable: a tensor in the graph (an FX node plus its metadata).

`example` is a tensor on device "meta" with the same shape, stride, dtype and requires_grad as the
real one; `device` is the real device (meta tensors forget it). Metadata queries (shape, dtype,
dim(), numel(), ...) are answered from the example at trace time — sizes are read through
`sizes()` so a symbolic size can flow the same way later. Everything else becomes a graph call.
Reading data (item, tolist, bool(), numpy) cannot be traced: Unsupported with a reason.
"""
from __future__ import annotations

import operator

import torch

from pydynamo.exc import Unsupported
from pydynamo.executor.variables.base import VariableTracker
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.containers import BaseListVariable, ListVariable, TupleVariable
from pydynamo.executor.variables.symbolic import SymNodeVariable, size_variable
from pydynamo.hints import DATA_METHODS, HINTS

def _static_repeats(args, kwargs) -> bool:
    """repeat_interleave's output shape needs the tensor's data only when `repeats` is a tensor
    (without output_size); an int repeats is a shape computation like any other."""
    repeats = args[0] if args else kwargs.get("repeats")
    return repeats is not None and not isinstance(repeats, TensorVariable) and repeats.is_python_constant()


# Tensor methods whose result is metadata (answered from the example, no graph node).
_META_METHODS = {"dim", "ndimension", "numel", "nelement", "element_size", "is_contiguous",
                 "is_floating_point", "is_complex", "get_device", "is_signed", "stride",
                 "is_inference"}
# Attributes read from the example (all metadata).
_META_ATTRS = {"ndim", "dtype", "requires_grad", "is_leaf", "is_cuda", "is_sparse", "is_quantized",
               "is_meta", "layout", "is_mkldnn", "is_nested", "itemsize", "nbytes"}
# Attributes that are tensors (graph nodes through getattr).
_TENSOR_ATTRS = {"T", "mT", "H", "mH", "real", "imag"}


# Deterministic torch functions and operators whose result from Python numbers (and tensors of
# known value) is itself known at trace time: `torch.div(seq_len, w, rounding_mode="trunc") - 1`.
# Such a call is a graph node as any other (torch.compile keeps it too); its tracker also holds the
# value (`const_value`, small results only) for the uses that read it as a Python int: a view's size.
CONSTANT_OPS = {torch.div, torch.add, torch.sub, torch.mul, torch.floor_divide, torch.remainder,
                torch.true_divide, torch.fmod, torch.tensor, torch.scalar_tensor, operator.add,
                operator.sub, operator.mul, operator.floordiv, operator.truediv, operator.mod,
                operator.neg}
_CONST_NUMEL = 16
# methods whose integer arguments are sizes: a known 0-d integer tensor there is its int (eager
# calls its __index__)
_SIZE_METHODS = {"view", "reshape", "expand", "repeat", "new_zeros", "new_ones", "new_empty", "new_full",
                 "narrow", "as_strided", "unflatten", "tile"}


def known_value(tx, target, args, kwargs):
    """The value of a CONSTANT_OPS call whose inputs are all known (Python constants, tensors with
    `const_value`), computed now; None otherwise or when large."""
    if target not in CONSTANT_OPS:
        return None
    vals = []
    for a in list(args) + list(kwargs.values()):
        if isinstance(a, TensorVariable):
            if a.const_value is None:
                return None
            vals.append(a.const_value)
        elif a.is_python_constant():
            vals.append(a.as_python_constant())
        else:
            return None
    value = target(*vals[:len(args)], **dict(zip(kwargs, vals[len(args):])))
    return value if isinstance(value, torch.Tensor) and value.numel() <= _CONST_NUMEL else None


def _as_size(v):
    if isinstance(v, TensorVariable) and v.const_value is not None and v.const_value.dim() == 0 and \
            not v.const_value.dtype.is_floating_point and not v.const_value.dtype.is_complex:
        return ConstantVariable(operator.index(v.const_value))
    if isinstance(v, BaseListVariable) and any(isinstance(i, TensorVariable) for i in v.items):
        return v.new([_as_size(i) for i in v.items]) if type(v) is not ListVariable else \
            ListVariable([_as_size(i) for i in v.items])
    return v


class TensorVariable(VariableTracker):
    const_value = None   # a small real tensor: the value, known at trace time (CONSTANT_OPS)
    dead = None          # why the value is gone (computed inside torch.vmap's function): a use is Unsupported

    def __init__(self, node, example: torch.Tensor, device: torch.device, source=None, cls=torch.Tensor,
                 meta=None, env=None):
        super().__init__(source)
        self.node = node
        self.example = example      # hint-sized when the tensor has symbolic sizes
        self.device = device
        self.cls = cls
        # a meta.TensorMeta with sympy sizes (and its ShapeEnv) when some size is symbolic
        self.meta = meta if meta is not None and meta.is_symbolic else None
        self.env = env

    def python_type(self):
        return self.cls

    def sizes(self) -> tuple:
        """Sizes as ints, or shapes.SymInt for symbolic dims."""
        if self.meta is None:
            return tuple(self.example.shape)
        return tuple(self.env.symint(d) for d in self.meta.shape)

    def strides(self) -> tuple:
        if self.meta is None:
            return tuple(self.example.stride())
        return tuple(self.env.symint(d) for d in self.meta.stride)

    def truthy(self, tx):
        raise Unsupported("tensor_branch", "branching on the value of a tensor (data-dependent control flow)",
                          hint="use torch.where / torch.cond, or move the branch out of the compiled region")

    def var_getattr(self, tx, name):
        if name == "shape":
            return size_variable(self.sizes())
        if name == "device":
            return ObjectVariable(self.device)
        if name in _META_ATTRS:
            return tx.wrap_constant_result(getattr(self.example, name))
        if name in _TENSOR_ATTRS:
            return tx.output.call(tx, "call_function", getattr, [self, ConstantVariable(name)], {})
        if name in ("grad", "data", "_version", "grad_fn"):
            raise Unsupported("tensor_attr", f"reading Tensor.{name} inside a compiled region")
        if hasattr(torch.Tensor, name):
            return TensorMethodVariable(self, name)
        raise Unsupported("no_attribute", f"Tensor has no attribute {name!r}")

    def setattr(self, tx, name, value):
        raise Unsupported("tensor_setattr", f"setting Tensor.{name}")

    def call_method(self, tx, name, args, kwargs):
        return TensorMethodVariable(self, name).call_function(tx, args, kwargs)

    def has_unpack_var_sequence(self, tx):
        return self.example.dim() > 0

    def unpack_var_sequence(self, tx):
        if self.example.dim() == 0:
            raise Unsupported("iter_0d", "iteration over a 0-d tensor")
        return [tx.output.call(tx, "call_function", operator.getitem, [self, ConstantVariable(i)], {})
                for i in range(int(self.sizes()[0]))]  # a symbolic length is pinned (guarded)

    def reconstruct(self, cg):
        return cg.load_tensor(self)

    def __repr__(self):
        return f"TensorVariable({self.node}, {tuple(self.example.shape)}, {self.example.dtype})"


class TensorMethodVariable(VariableTracker):
    """`x.add` before it is called (also what `getattr(x, "add")` gives)."""

    def __init__(self, tensor: TensorVariable, name: str):
        super().__init__()
        self.tensor, self.name = tensor, name

    def call_function(self, tx, args, kwargs):
        name = self.name
        t = self.tensor
        if name in DATA_METHODS and not (name == "repeat_interleave" and _static_repeats(args, kwargs)):
            code = DATA_METHODS[name]
            raise Unsupported(code, f"Tensor.{name}() reads tensor data (data-dependent)",
                              hint="" if code in HINTS else "keep the value as a tensor inside the compiled region")
        if name == "size":
            sizes = t.sizes()
            if args or kwargs:
                dim = (args[0] if args else kwargs["dim"]).as_python_constant()
                return SymNodeVariable.wrap(sizes[dim])
            return size_variable(sizes)
        if t.meta is not None and name in _SYMBOLIC_META:
            return _SYMBOLIC_META[name](t, [a.as_python_constant() for a in args])
        if name in _META_METHODS:
            cargs = [a.as_python_constant() for a in args]
            ckw = {k: v.as_python_constant() for k, v in kwargs.items()}
            if name == "get_device":
                return ConstantVariable(t.device.index if t.device.type != "cpu" else -1)
            return tx.wrap_constant_result(getattr(t.example, name)(*cargs, **ckw))
        if name == "type" and not args and not kwargs:
            return ConstantVariable(_type_string(t))
        if name in _SIZE_METHODS:
            args, kwargs = [_as_size(a) for a in args], {k: _as_size(v) for k, v in kwargs.items()}
        if name in ("cpu", "cuda") or name == "to":
            return tx.output.call(tx, "call_method", name, [t, *args], kwargs)
        if name in ("__len__",):
            return SymNodeVariable.wrap(t.sizes()[0])
        return tx.output.call(tx, "call_method", name, [t, *args], kwargs)


def _numel(t, args):
    n = 1
    for d in t.sizes():
        n = n * d
    return SymNodeVariable.wrap(n)


def _stride(t, args):
    strides = t.strides()
    if args:
        return SymNodeVariable.wrap(strides[args[0]])
    return TupleVariable([SymNodeVariable.wrap(s) for s in strides])


# metadata methods whose answer depends on a symbolic size
_SYMBOLIC_META = {"numel": _numel, "nelement": _numel, "stride": _stride}


def _type_string(t: TensorVariable) -> str:
    real = torch.empty(0, dtype=t.example.dtype)
    name = real.type()
    if t.device.type == "cuda":
        return name.replace("torch.", "torch.cuda.")
    return name

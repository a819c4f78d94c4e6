"""Loop IR: buffers with layouts, and the bodies that fill them.

A `Buffer` has a name and a `Layout` (sympy size/stride/offset, dtype). Its contents come from
one of:
  * `InputBuffer`    a graph input or a module parameter/constant, never written by kernels
                     (except the write-back of an in-place op, done by the wrapper);
  * `ComputedBuffer` a `Pointwise` body (value at each index) or a `Reduction` body (value at
                     each (index, reduction index), combined by reduction_type);
  * `ExternBuffer`   the output of an eager op call made by the wrapper (matmul, conv, anything
                     not lowered).
Lowering computes with `TensorValue`s: a size, a dtype and a loader `index -> ops value`. A view
is a TensorValue whose loader re-maps the index and calls its base's loader; nothing is copied
until `realize` turns a TensorValue into a ComputedBuffer. Invariant: a ComputedBuffer's layout
is contiguous over its ranges, so the store index is the flat index of the loop variables.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any, Callable, List, Optional

import sympy
import torch

from codegen.ops import as_single_load, collect_deps, ops
from codegen.sizevars import contiguous_strides, equals, flat_index, product, simplify_index
from pydynamo.symbols import FloorDiv, ModIdx, loop_vars


class NotLowered(Exception):
    """Raised by a lowering that cannot handle these arguments: the node goes extern."""


@dataclass
class Layout:
    size: List[sympy.Expr]
    stride: List[sympy.Expr]
    dtype: torch.dtype
    offset: sympy.Expr = sympy.Integer(0)

    @staticmethod
    def contiguous(size, dtype) -> "Layout":
        size = [sympy.sympify(s) for s in size]
        return Layout(size, contiguous_strides(size), dtype)

    def index(self, idx) -> sympy.Expr:
        return flat_index(idx, self.stride, self.offset)

    @property
    def numel(self):
        return product(self.size)

    def is_contiguous(self) -> bool:
        return self.offset == 0 and all(
            equals(a, b) or s == 1
            for a, b, s in zip(self.stride, contiguous_strides(self.size), self.size))


@dataclass(eq=False)
class Buffer:
    name: str
    layout: Layout
    origins: List[Any] = field(default_factory=list)  # fx nodes this buffer computes

    def make_loader(self):
        name, layout = self.name, self.layout
        return lambda idx: ops.load(name, layout.index(idx))

    @property
    def dtype(self):
        return self.layout.dtype


@dataclass(eq=False)
class InputBuffer(Buffer):
    kind: str = "input"          # "input" (placeholder i) or "constant" (a tensor we hold)
    position: int = -1
    tensor: Optional[torch.Tensor] = None


@dataclass
class Pointwise:
    ranges: List[sympy.Expr]
    inner_fn: Callable


@dataclass
class Reduction:
    ranges: List[sympy.Expr]            # kept (outer) dims; the output is contiguous over these
    reduction_ranges: List[sympy.Expr]
    reduction_type: str                 # sum prod max min any all argmax argmin welford
    inner_fn: Callable                  # (index, rindex) -> value
    src_dtype: torch.dtype


@dataclass(eq=False)
class ComputedBuffer(Buffer):
    data: Any = None                    # Pointwise | Reduction
    # welford writes mean into this buffer and m2 into `aux` (same layout)
    aux: Optional["Buffer"] = None


@dataclass(eq=False)
class ExternBuffer(Buffer):
    """Output `k` of an eager call; `call` is shared by all outputs of that call."""
    call: Any = None
    out_path: tuple = ()                # where in the call's (nested) result this tensor lives


@dataclass(eq=False)
class ExternCall:
    target: Any                         # the eager callable (or a bound module)
    args: tuple                         # with `ArgRef`s where buffers go
    kwargs: dict
    origin: Any = None                  # fx node
    outputs: List[ExternBuffer] = field(default_factory=list)
    mutated_inputs: List[Buffer] = field(default_factory=list)


@dataclass(frozen=True)
class ArgRef:
    """A tensor argument of an extern call: a view (size/stride/offset) of a buffer."""
    buffer: Buffer
    size: tuple
    stride: tuple
    offset: Any


@dataclass(frozen=True)
class NewViewRef(ArgRef):
    """A graph output eager returns as a new tensor object viewing a graph input (`x.detach()`,
    `x.view(x.shape)`, `x[:]`): the wrapper always builds the view, never hands back the input
    object itself, even where the view's geometry is the input's. `detached`: eager's is a
    detach() result (no `_base`, no autograd history)."""
    detached: bool = False


@dataclass(frozen=True)
class OwnTensorRef(ArgRef):
    """A graph output eager returns as a new tensor (no `_base`) that this lowering laid out in a
    buffer of another geometry: a value computed contiguously in eager's permuted order, a GEMM's
    rows folded back to (..., M, N). The wrapper hands it out as a tensor of its own over the
    buffer's storage (`Tensor.set_`), not as a view of the buffer: autograd forbids in-place
    writes through views of what a custom Function returns (training), and the caller would see a
    `_base` eager's result has not."""


# --------------------------------------------------------------------------------------------
# TensorValue: the lowering currency


@dataclass(eq=False)
class TensorValue:
    size: List[sympy.Expr]
    dtype: torch.dtype
    loader: Callable
    buffer: Optional[Buffer] = None     # set iff loader is exactly buffer.make_loader()
    cost: int = 0                       # ops in the loader since the last realized buffer
    origins: List[Any] = field(default_factory=list)   # fx nodes inlined into the loader
    # (source, view): this value is the view op `view(source)` of a value not yet computed. An
    # extern handed it computes the source and takes the view of it, as eager hands it the
    # view: a permute (a matmul's transposed operand computed in its own order, not a copy
    # written across the grain), an expand (an attention bias computed once per batch row and
    # broadcast over the heads with stride 0, not written out per head)
    view_of: Optional[tuple] = None

    @property
    def ndim(self):
        return len(self.size)

    @staticmethod
    def of_buffer(buf: Buffer) -> "TensorValue":
        return TensorValue(list(buf.layout.size), buf.dtype, buf.make_loader(), buf, 0)


class _GraphLocal(threading.local):
    graph: Any = None


current = _GraphLocal()


def realize(tv: TensorValue) -> TensorValue:
    """Materialize a TensorValue into a contiguous ComputedBuffer (no-op if already a buffer)."""
    if tv.buffer is not None:
        return tv
    buf = current.graph.new_computed(tv.size, tv.dtype, Pointwise(list(tv.size), tv.loader),
                                     tv.origins)
    return TensorValue.of_buffer(buf)


def strided_view_of(tv: TensorValue) -> Optional[ArgRef]:
    """If tv is an affine view of a buffer, its (buffer, size, stride, offset); else None."""
    if tv.buffer is not None:
        lay = tv.buffer.layout
        return ArgRef(tv.buffer, tuple(lay.size), tuple(lay.stride), lay.offset)
    idx = loop_vars("v", tv.ndim)
    probe = as_single_load(tv.loader, idx)
    if probe is None:
        return None
    expr = sympy.expand(simplify_index(probe.index, dict(zip(idx, tv.size))))
    strides = []
    for v, s in zip(idx, tv.size):
        c = expr.coeff(v)
        if s == 1:
            c = sympy.Integer(0) if c == 0 else c
        if c.free_symbols & set(idx):
            return None
        strides.append(c)
    offset = sympy.expand(expr - sum(c * v for c, v in zip(strides, idx)))
    # (sizes' floor division in an offset is fine: a select at `s0 // 2`)
    if offset.free_symbols & set(idx) or any(
            isinstance(a, sympy.Function) and not isinstance(a, (FloorDiv, ModIdx))
            for a in sympy.preorder_traversal(offset)):
        return None
    buf = current.graph.buffers_by_name[probe.name]
    return ArgRef(buf, tuple(tv.size), tuple(strides), offset)


def body_cost(tv: TensorValue) -> int:
    if tv.buffer is not None:
        return 0
    return collect_deps(tv.loader, loop_vars("x", tv.ndim)).n_ops

"""What the kernel printers share: scopes, temporaries, CSE, forwarding, indices, primitives.

A kernel printer (C++: codegen/cpp.py, Triton: codegen/triton.py) is an `ops` handler
(codegen/ops.py): running a loop body under it appends one statement per op to the innermost
open scope. This base holds the machinery independent of the language:
  * scopes: `push` opens one (one indent level deeper), `pop` closes it and appends its lines
    to the enclosing one. Each scope has its own CSE table and its own store -> load
    forwarding table, so a value defined inside a loop is never used outside it;
  * `tmp(expr, dtype)`: a temporary holding `expr`, reusing an enclosing scope's temporary of
    the same text and dtype (common-subexpression elimination);
  * `idx(expr)`: an index simplified over the known loop ranges (codegen/sizevars.py) and
    printed in the language; the size symbols it reads become kernel arguments, and a runtime
    float in an index raises SpecializeFloats;
  * the ops whose meaning is language-independent: `constant` (a runtime float used as a
    literal becomes `scalar`), `scalar` (records the kernel argument), and every pointwise
    primitive, printed from its column in codegen/primitives.py.
fp16/bf16 values are computed in fp32 by both languages (`to_dtype` holds the rounding rule).
A subclass supplies the language: `declare(value, expr)` (a temporary's statement),
`print_index(expr)`, `literal(value, dtype)`, `scalar_expr(name, dtype)`,
`print_indirect(name, value, size, code)`, `op_expr(prim, args)` (an expression, or a value
it computed), the conversions `cast_expr`, `round_half_expr` and `bool_expr`, plus loads,
stores and the kernel structure.
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional

import sympy
import torch

from codegen.ops import HandlerBase, index_error_code
from codegen.primitives import PRIMITIVES
from codegen.scalars import SpecializeFloats, has_scalar, is_scalar_symbol, scalar_name
from codegen.sizevars import contiguous_strides, flat_index, simplify_index
from pydynamo.symbols import index_symbol

# fp16/bf16 are storage types: both printers compute them in fp32 (loads widen, stores round,
# a conversion to a half type rounds), as eager's CPU and CUDA kernels compute one op
HALF = (torch.float16, torch.bfloat16)


def compute_dtype(dt):
    return torch.float32 if dt in HALF else dt


@dataclass
class KValue:
    """A value in a kernel: the name that holds it and its logical dtype (what eager would
    hold; Triton computes half types in fp32)."""
    name: str
    dtype: torch.dtype
    const: object = None        # the Python value when this is a literal constant

    def __str__(self):
        return self.name


@dataclass
class Scope:
    lines: List[str] = field(default_factory=list)
    cse: Dict[str, KValue] = field(default_factory=dict)
    forward: Dict[str, KValue] = field(default_factory=dict)   # "buf[index]" -> value stored


def canonical_text(src: str, name: str, names: List[str]) -> str:
    """A kernel's text with its own name replaced by KERNEL and `names` (its buffer arguments
    and scratch arrays, named per graph) by their positions (in_ptr0, ...). Kernels with equal
    canonical text compute the same function of their arguments (a repeated block's layers: the
    same code on other buffers; sizes and literals stay in the text), so each printer emits the
    text once: Triton one function bound under every name, C++ a one-line forwarding function."""
    out = re.sub(rf"\b{re.escape(name)}\b", "KERNEL", src)
    for i, p in enumerate(names):
        out = re.sub(rf"\b{re.escape(p)}\b", f"in_ptr{i}", out)
    return out


class KernelPrinter(HandlerBase):
    """Base of the C++ and Triton printers of one scheduler FusedKernel."""

    def __init__(self, kernel, buffers: Dict[str, object]):
        self.kernel = kernel
        self.buffers = buffers
        self.params: Dict[str, bool] = {}           # buffer name -> written?
        self.size_syms = set()
        self.scalar_args: List[str] = []            # runtime float inputs read (fp64 arguments)
        self.scopes: List[Scope] = [Scope()]
        self.indent = 1
        self.n_tmp = 0
        self.n_ind = 0
        self.ranges: Dict[sympy.Symbol, sympy.Expr] = {}
        self.var_map: Dict[sympy.Symbol, sympy.Expr] = {}   # loop var -> expr of flat indices
        self.half_exact: set = set()      # fp32 temporaries holding an exact fp16/bf16 value

    # ------------------------------------------------------------ emission
    def line(self, s):
        self.scopes[-1].lines.append("    " * self.indent + s)

    def tmp(self, expr: str, dtype) -> KValue:
        for sc in reversed(self.scopes):
            hit = sc.cse.get(expr)
            if hit is not None and hit.dtype == dtype:
                return hit
        v = KValue(f"tmp{self.n_tmp}", dtype)
        self.n_tmp += 1
        self.line(self.declare(v, expr))
        self.scopes[-1].cse[expr] = v
        return v

    def push(self):
        self.scopes.append(Scope())
        self.indent += 1

    def pop(self):
        sc = self.scopes.pop()
        self.indent -= 1
        self.scopes[-1].lines.extend(sc.lines)

    def forwarded(self, key: str) -> Optional[KValue]:
        """The value an open scope stored at `key` ("buf[index]"), if any."""
        for sc in reversed(self.scopes):
            if key in sc.forward:
                return sc.forward[key]
        return None

    def idx(self, expr) -> str:
        e = simplify_index(sympy.sympify(expr).xreplace(self.var_map), self.ranges)
        for s in e.free_symbols:
            if is_scalar_symbol(s):
                raise SpecializeFloats(f"float input {s} in an index")
            if s.name.startswith("s"):
                self.size_syms.add(s)
        return self.print_index(e)

    def argument_order(self, extra=()) -> List[str]:
        """Kernel arguments in order: buffers, `extra`, size symbols, runtime floats."""
        sizes = sorted(self.size_syms, key=lambda s: s.name)
        return list(self.params) + list(extra) + [s.name for s in sizes] + self.scalar_args

    def store_node(self, node, index):
        """A computed buffer's element at `index` (loop variables), in its dtype."""
        buf = node.buf
        value = self.to_dtype(buf.data.inner_fn(index), buf.dtype)
        self.store(buf.name, flat_index(index, contiguous_strides(buf.data.ranges)), value)

    # ------------------------------------------------------------ ops handler
    def constant(self, value, dtype):
        if has_scalar(value):          # a lowering used a runtime float as a literal
            return self.scalar(scalar_name(value), dtype)
        if isinstance(value, sympy.Basic):
            value = float(value) if not value.is_Integer else int(value)
        v = self.tmp(self.literal(value, dtype), dtype)
        return KValue(v.name, v.dtype, value)

    def to_dtype(self, x, dtype):
        """`x` as `dtype`, as eager converts: a half value is rounded to its type before it
        is widened (a fused producer computed it in fp32), a conversion to a half type rounds
        and keeps computing in fp32. The language gives `cast_expr(x, compute dtype)`,
        `round_half_expr(x computed in fp32, half dtype)` and `bool_expr(x)`."""
        if x.dtype == dtype:
            return x
        if x.dtype in HALF and x.name not in self.half_exact:
            x = self.tmp(self.round_half_expr(x, x.dtype), x.dtype)
            self.half_exact.add(x.name)
        if dtype == torch.bool:
            return self.tmp(self.bool_expr(x), dtype)
        if dtype in HALF:
            # eager converts an integer to a half type through float (c10::BFloat16 and
            # c10::Half are built from a float): beyond 2**24 it rounds twice, as here
            src = x if compute_dtype(x.dtype) == torch.float32 else \
                KValue(self.cast_expr(x, torch.float32), torch.float32)
            v = self.tmp(self.round_half_expr(src, dtype), dtype)
            self.half_exact.add(v.name)
            return v
        cd = compute_dtype(dtype)
        if compute_dtype(x.dtype) == cd:
            return KValue(x.name, dtype)
        return self.tmp(self.cast_expr(x, cd), dtype)

    def scalar(self, name, dtype):
        if name not in self.scalar_args:
            self.scalar_args.append(name)
        return self.tmp(self.scalar_expr(name, dtype), dtype)

    def indirect_indexing(self, value, size, check=True):
        """An index variable `indN` holding `value` wrapped into [0, size) (`print_indirect`:
        an out-of-range value flags the op's error code and reads element 0)."""
        name = f"ind{self.n_ind}"
        self.n_ind += 1
        self.print_indirect(name, value, self.idx(size), index_error_code(check))
        s = index_symbol(name)
        self.ranges[s] = size
        return s

    def op(self, name, *args):
        """A primitive: operands share one dtype (where: its last two); the result has it or
        is bool."""
        prim = PRIMITIVES[name]
        out = self.op_expr(prim, args)
        if isinstance(out, KValue):
            return out
        return self.tmp(out, torch.bool if prim.bool_result else args[-1].dtype)

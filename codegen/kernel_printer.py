"""What the kernel printers share: scopes, temporaries, CSE, forwarding, indices, primitives.

A kernel printer (C++: codegen/cpp.py, Triton: codegen/triton.py) is an `ops` handler
(codegen/ops.py): running a loop body under it appends one statement per op to the innermost
open scope. This base holds the machinery independent of the language:
  * scopes: `push` opens one (one indent level deeper), `pop` closes it and appends its lines
    to the enclosing one. Each scope has its own CSE table and its own store -> load
    forwarding table, so a value defined inside a loop is never used outside it;
  * `tmp(expr, dtype, level)`: a temporary holding `expr`, reusing an enclosing scope's
    temporary of the same text and dtype (common-subexpression elimination). With `hoist`
    (the C++ printer) a temporary whose operands are all defined outside the innermost loops
    is declared before the outermost loop it does not depend on (loop-invariant code motion:
    a row's loads and the math on them once per row, not once per element, and no scalar
    load or libm call left in a vectorized loop). `level` is the scope the value needs (its
    operands' and index variables' deepest scope; None: the innermost, never moved). Only
    loop scopes are left (`push(header_lines)` records where the loop's header starts in the
    enclosing scope), never an `if`/block/parallel region, and never into a `sealed` scope
    (the body of a collapsed loop, which must hold only the next loop). Moved values are
    pure: loads of buffers the kernel does not write (in bounds wherever the loops that
    remain run: their index uses only those loops' variables; and moved only out of loops
    that surely run, `Scope.nonempty`: a load of an empty input before a loop of no
    iterations read element 0 of a tensor with no storage, a crash found by the gradient
    sweep on `tile` of a (0,) tensor) and primitives that flag no error; the printer decides
    which (`load_level`, `op` below). An indirect index (its
    wrap, bounds check and error flag) moves too, to the scope of the value it is built from,
    but only out of loops that surely run (`Scope.nonempty`: a static trip count above 0), so
    an error is flagged exactly when the original loops would have flagged it;
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
    header_at: int = -1     # a loop's: where its header starts in the enclosing scope's lines
    sealed: bool = False    # a collapsed loop's body: holds nothing but the next loop
    nonempty: bool = False  # a loop's body that runs at least once whenever the loop is reached
    unless_err: Optional[str] = None   # the loop's pragma line if its body flags an error


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

    hoist = False       # loop-invariant code motion (see the module docstring)

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
        self.var_level: Dict[str, int] = {}     # loop variable -> the scope it indexes
        self.value_level: Dict[str, int] = {}   # temporary -> the scope that declares it
        self.index_level = 0                    # of the last index printed by `idx`
        self.emit_at: Optional[int] = None      # `line` writes into this enclosing scope

    # ------------------------------------------------------------ emission
    def line(self, s):
        if self.emit_at is not None:
            self._insert(self.emit_at, s)
        else:
            self.scopes[-1].lines.append("    " * self.indent + s)

    def _insert(self, at: int, s: str):
        """`s` declared in enclosing scope `at`, before the header of its open child loop."""
        child = self.scopes[at + 1]
        text = "    " * (self.indent - (len(self.scopes) - 1 - at)) + s
        self.scopes[at].lines.insert(child.header_at, text)
        child.header_at += 1

    def tmp(self, expr: str, dtype, level: Optional[int] = None, nonempty=False) -> KValue:
        """`nonempty` (a load): moved only out of loops that surely run (`_hoist_target`)."""
        for sc in reversed(self.scopes):
            hit = sc.cse.get(expr)
            if hit is not None and hit.dtype == dtype:
                return hit
        v = KValue(f"tmp{self.n_tmp}", dtype)
        self.n_tmp += 1
        at = self._hoist_target(level, nonempty)
        inner = len(self.scopes) - 1
        if at == inner:
            self.line(self.declare(v, expr))
        else:       # before the header of the loop the value does not depend on
            self._insert(at, self.declare(v, expr))
        self.scopes[at].cse[expr] = v
        self.value_level[v.name] = at
        return v

    def _hoist_target(self, level: Optional[int], nonempty=False) -> int:
        """The outermost scope at or above `level` that a value can be declared in without
        leaving a non-loop scope or entering a sealed one (the innermost without `hoist`);
        `nonempty`: nor leaving a loop that may run no iterations (a statement that flags an
        error must not run where the loops around it would not have run it)."""
        t = best = len(self.scopes) - 1
        if not self.hoist or level is None:
            return best
        while t > level and self.scopes[t].header_at >= 0 and (
                self.scopes[t].nonempty or not nonempty):
            t -= 1
            if not self.scopes[t].sealed:
                best = t
        return best

    def level_of(self, *values) -> Optional[int]:
        """The deepest scope declaring one of `values` (KValues; anything else is a literal or
        an argument: scope 0), or None when one was not declared by `tmp`."""
        level = 0
        for v in values:
            if isinstance(v, KValue):
                at = self.value_level.get(v.name)
                if at is None:
                    return None
                level = max(level, at)
        return level

    def push(self, header_lines: int = 0):
        """Open a scope; `header_lines` > 0: it is a loop's body, whose header is the last
        `header_lines` lines of the enclosing scope (values may be hoisted out of it)."""
        parent = self.scopes[-1].lines
        self.scopes.append(Scope(header_at=len(parent) - header_lines if header_lines else -1))
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
        level = 0
        for s in e.free_symbols:
            if is_scalar_symbol(s):
                raise SpecializeFloats(f"float input {s} in an index")
            if s.name.startswith("s"):
                self.size_syms.add(s)
            else:       # a loop variable, or one declared by a statement (never moved past)
                level = max(level, self.var_level.get(s.name, len(self.scopes) - 1))
        self.index_level = level
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
        v = self.tmp(self.literal(value, dtype), dtype, level=0)
        return KValue(v.name, v.dtype, value)

    def to_dtype(self, x, dtype):
        """`x` as `dtype`, as eager converts: a half value is rounded to its type before it
        is widened (a fused producer computed it in fp32), a conversion to a half type rounds
        and keeps computing in fp32. The language gives `cast_expr(x, compute dtype)`,
        `round_half_expr(x computed in fp32, half dtype)` and `bool_expr(x)`."""
        if x.dtype == dtype:
            return x
        lv = self.level_of(x)
        if x.dtype in HALF and x.name not in self.half_exact:
            x = self.tmp(self.round_half_expr(x, x.dtype), x.dtype, lv)
            self.half_exact.add(x.name)
        if dtype == torch.bool:
            return self.tmp(self.bool_expr(x), dtype, lv)
        if dtype in HALF:
            # eager converts an integer to a half type through float (c10::BFloat16 and
            # c10::Half are built from a float): beyond 2**24 it rounds twice, as here
            src = x if compute_dtype(x.dtype) == torch.float32 else \
                KValue(self.cast_expr(x, torch.float32), torch.float32)
            v = self.tmp(self.round_half_expr(src, dtype), dtype, lv)
            self.half_exact.add(v.name)
            return v
        cd = compute_dtype(dtype)
        if compute_dtype(x.dtype) == cd:
            return KValue(x.name, dtype)
        return self.tmp(self.cast_expr(x, cd), dtype, lv)

    def scalar(self, name, dtype):
        if name not in self.scalar_args:
            self.scalar_args.append(name)
        return self.tmp(self.scalar_expr(name, dtype), dtype, level=0)

    def indirect_indexing(self, value, size, check=True):
        """An index variable `indN` holding `value` wrapped into [0, size) (`print_indirect`:
        an out-of-range value flags the op's error code and reads element 0)."""
        name = f"ind{self.n_ind}"
        self.n_ind += 1
        # with `hoist`, a row's index (its value computed outside the inner loops) is wrapped
        # and checked once per row, before the inner loops, which then vectorize: only past
        # loops that surely run, so the error is flagged exactly where eager would raise it
        at = self._hoist_target(self.level_of(value) if isinstance(value, KValue) else None,
                                nonempty=True)
        sz = self.idx(size)
        self.emit_at = at if at < len(self.scopes) - 1 else None
        try:
            self.print_indirect(name, value, sz, index_error_code(check))
        finally:
            self.emit_at = None
        self.var_level[name] = at
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
        # an op that flags an error (integer division by zero) stays where eager evaluates it
        level = None if "pd_err" in out else self.level_of(*args)
        return self.tmp(out, torch.bool if prim.bool_result else args[-1].dtype, level)

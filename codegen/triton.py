"""Triton kernel printer: one `@triton.jit` function per scheduler FusedKernel.

`TritonKernelPrinter` is an `ops` handler (codegen/ops.py vocabulary): running a loop body under
it appends one Triton statement per op to the innermost open scope, with common-subexpression
elimination per scope (the machinery shared with the C++ printer: codegen/kernel_printer.py;
each primitive's Triton forms: its row in codegen/primitives.py). Kernel templates, chosen per
FusedKernel:

  * pointwise (no inner loops): 1-D masked blocks over the flattened outer ranges;
  * with inner loops: 2-D blocks [XBLOCK outer rows, RBLOCK inner elements]. Each node's inner
    ranges are flattened to one index `r<g>`; nodes with equal inner ranges share it, so a value
    stored by one node is forwarded in registers to the next one reading the same element.
    An inner size up to PERSISTENT_MAX is held whole in one block (persistent); larger sizes loop
    over chunks (looped), and a node reading what an earlier looped node stored waits at a
    block barrier first (the scheduler only fuses row-local reads, so a row never leaves its
    program).

Loop variables are re-expressed over the flat indices (x_i = (xindex // stride_i) % size_i) and
simplified with codegen/sizevars.py, so contiguous accesses print as `xindex` or `r0`.
fp16/bf16 values are computed in fp32 (loads upcast, stores round, conversions to and from a
half type round, so a half value cast to a wider type is eager's rounded one);
reductions accumulate in fp32 (fp64 for fp64, int64 for integers). Welford is two passes (sum,
then squared deviations), as accurate as the C++ backend's. A looped max followed by the sum of
exponents of the same values shifted by it (softmax's and logsumexp's, an LM loss over a
vocabulary) is one pass over the row (online softmax, `_online_softmax`), special values as the
two passes give them. Index math is int32 unless some size
of the kernel reaches 2**31, then int64. Only long-stable tl.* calls are used (Triton 3.6-3.9);
special functions go through `libdevice`, which under TRITON_INTERPRET=1 is a numpy shim
(codegen/triton_launch.py).
"""
from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Dict, List, Optional

import sympy
import torch

from codegen.ir import Reduction
from codegen.kernel_printer import HALF, KernelPrinter, KValue, canonical_text, compute_dtype
from codegen.ops import record_tree, set_handler
from codegen.primitives import CUSTOM, PRIMITIVES
from codegen.scheduler import RFLAT, FusedKernel, flat_form
from codegen.sizevars import (contiguous_strides, decompose, flat_index, product, simplify_index,
                              static_int)
from codegen.triton_launch import TILE, KernelConfig, choose_config, tiled_config
from pydynamo.symbols import TritonExprPrinter, index_symbol, loop_vars

TL_DTYPES = {torch.float32: "tl.float32", torch.float64: "tl.float64",
             torch.float16: "tl.float16", torch.bfloat16: "tl.bfloat16",
             torch.int64: "tl.int64", torch.int32: "tl.int32", torch.int16: "tl.int16",
             torch.int8: "tl.int8", torch.uint8: "tl.uint8", torch.bool: "tl.int1"}
INT32_LIMIT = 2 ** 31 - 1


class TritonUnsupported(Exception):
    """This kernel cannot be printed as Triton (the graph then runs eagerly, with a warning)."""



texpr = TritonExprPrinter(TritonUnsupported)


def float_literal(v) -> str:
    v = float(v)
    if math.isnan(v):
        return 'float("nan")'
    if math.isinf(v):
        return f'float("{"-" if v < 0 else ""}inf")'
    return repr(v)


POW_BY_CONSTANT = {2: "({0} * {0})", 3: "({0} * {0} * {0})", 0.5: "tl.sqrt({0})",
                   -0.5: "(1.0 / tl.sqrt({0}))", -1: "(1.0 / {0})", -2: "(1.0 / ({0} * {0}))"}


class TritonKernelPrinter(KernelPrinter):
    """Prints one FusedKernel as a Triton function (`generate()` -> source)."""

    def __init__(self, kernel: FusedKernel, buffers: Dict[str, object], max_autotune=False):
        super().__init__(kernel, buffers)
        self.mask = "xmask"
        self.uses_err = False
        self.groups: Dict[tuple, int] = {}        # inner ranges -> group number
        self.group_info: Dict[int, dict] = {}
        self.max_autotune = max_autotune
        self.written_by_earlier: set = set()
        self.config: Optional[KernelConfig] = None
        self.idx64 = False
        self.tiled = False
        # forwarding keys: the scheduler's `flat_form` of the current node's indices, its inner
        # group's flat index named r<g>; buffers stored since the last block barrier
        self.key_inner, self.key_group = ((), ()), None
        self.unfenced: set = set()
        self.folded: Dict[str, KValue] = {}     # sum reductions computed by online softmax

    # ------------------------------------------------------------ the language
    def declare(self, v, expr):
        return f"{v.name} = {expr}"

    def print_index(self, e):
        return texpr(e)

    def literal(self, value, dtype):
        if dtype == torch.bool:
            lit = "1" if value else "0"
        elif dtype.is_floating_point:
            lit = float_literal(value)
        else:
            lit = str(int(value))
        return f"tl.full([], {lit}, {TL_DTYPES[compute_dtype(dtype)]})"

    def scalar_expr(self, name, dtype):
        # the parameter is an fp64 scalar on GPU (annotated) and a Python float under the
        # interpreter; tl.full converts either to the compute dtype (round to nearest)
        if dtype == torch.bool:
            return f"(tl.full([], {name}, tl.float64) != 0)"
        return f"tl.full([], {name}, {TL_DTYPES[compute_dtype(dtype)]})"

    # ------------------------------------------------------------ ops handler
    def forward_key(self, name, index) -> str:
        """The element `index` names, in the form the scheduler proved a fused read equal to
        its store in (codegen/scheduler.py `same_element`): a read it fused always finds the
        stored value under this key."""
        k = self.kernel
        e = flat_form(index, (loop_vars("x", len(k.outer)), k.outer), self.key_inner)
        if self.key_group is not None:
            e = e.xreplace({RFLAT: index_symbol(f"r{self.key_group}")})
        return f"{name}[{e}]"

    def load(self, name, index):
        i = self.idx(index)
        fw = self.forwarded(self.forward_key(name, index))
        if fw is not None:
            return fw
        if name in self.kernel.removed:
            raise TritonUnsupported(f"load of register-only buffer {name} not forwarded")
        if name in self.unfenced:
            # the scheduler's reload rule was broken: other lanes' stores are not ordered
            # before this load; refuse rather than read stale memory
            raise TritonUnsupported(f"{name} read back in the kernel that stores it, not at "
                                    "the element its lane stored")
        dt = self.buffers[name].dtype
        if static_int(self.buffers[name].layout.numel) == 0:
            # an empty tensor has no valid address; its value is never selected (cat, where)
            return self.constant(0, dt)
        self.params.setdefault(name, False)
        expr = f"tl.load({name} + ({self._block_index(index, i)}), {self._mask_for(index)}, other=0)"
        v = self.tmp(expr + (".to(tl.float32)" if dt in HALF else ""), dt)
        if dt in HALF:
            self.half_exact.add(v.name)
        return v

    def store(self, name, index, value):
        i = self.idx(index)
        self.scopes[-1].forward[self.forward_key(name, index)] = value
        if name in self.kernel.removed:
            return
        self.unfenced.add(name)
        self.params[name] = True
        dt = self.buffers[name].dtype
        v = str(value)
        if dt in HALF or value.dtype != dt:
            v = f"{v}.to({TL_DTYPES[dt]})"
        # a value without block shape (a constant) is broadcast by the pointer block
        self.line(f"tl.store({name} + ({self._block_index(index, i)}), {v}, "
                  f"{self._mask_for(index)})")

    def _index_syms(self, index):
        # of the index as printed (simplified: a folded `r0 // 3` leaves no block variable)
        e = simplify_index(sympy.sympify(index).xreplace(self.var_map), self.ranges)
        return {s.name for s in e.free_symbols if not s.name.startswith("s")}

    def _block_index(self, index, printed):
        """Every pointer is at least an [XBLOCK] block (a mask needs a block to apply to); in
        2-D tiles every pointer spans the whole tile."""
        if self.tiled:
            return f"{printed} + xy0"
        return printed if self._index_syms(index) else f"{printed} + 0 * xindex"

    def _mask_for(self, index):
        """A mask no wider than the pointer block: only inner-indexed accesses use the
        inner mask (tl.load broadcasts the mask to the pointer, not the other way)."""
        names = self._index_syms(index)
        if any(n.startswith(("r", "ind")) for n in names):
            return self.mask
        return "xmask"

    def index_expr(self, expr, dtype):
        i = self.idx(expr)
        cd = compute_dtype(dtype)
        if not any(c.isalpha() for c in i):
            return self.tmp(f"tl.full([], {i}, {TL_DTYPES[cd]})", dtype)
        return self.tmp(f"({i}).to({TL_DTYPES[cd]})", dtype)

    def cast_expr(self, x, cd):
        return f"{x}.to({TL_DTYPES[cd]})"

    def round_half_expr(self, x, dtype):
        return f"{x}.to({TL_DTYPES[dtype]}).to(tl.float32)"

    def bool_expr(self, x):
        return f"({x} != 0)"

    def print_indirect(self, name, value, sz, code):
        self.line(f"{name} = {value}.to(tl.int64)")
        self.line(f"{name} = tl.where({name} < 0, {name} + {sz}, {name})")
        # out of range (still negative after wrapping, or past the end): flag it (the wrapper
        # raises) and read element 0, never stray memory
        self._flag(f"(({name} < 0) | ({name} >= {sz}))", code, name)
        self.line(f"{name} = tl.where(({name} < 0) | ({name} >= {sz}), 0, {name})")

    def _flag(self, cond, code, like):
        """Record error `code` (codegen/ops.py ERR_*) where `cond` holds in a live lane;
        the pointer is widened to the condition's block so the mask always fits it."""
        self.uses_err = True
        text = (f"tl.store(pd_err + 0 * {like} + 0 * {self.mask}.to(tl.int32), {code}, "
                f"{cond} & {self.mask})")
        if any(text in sc.cse for sc in self.scopes):
            return
        self.scopes[-1].cse[text] = KValue("", torch.bool)
        self.line(text)

    def op_expr(self, prim, args):
        dt = args[-1].dtype
        form = prim.triton_form(dt)
        if form == CUSTOM:
            return self.CUSTOM_OPS[prim.name](self, prim.name, dt, *args)
        if prim.name == "pow" and dt.is_floating_point and args[1].const in POW_BY_CONSTANT:
            # eager's own special cases (aten pow_tensor_scalar_optimized_kernel), same
            # roundings, and no libdevice.pow (GELU-tanh's x**3 was compute-bound on it)
            return POW_BY_CONSTANT[args[1].const].format(args[0])
        if form is None:
            raise TritonUnsupported(f"op {prim.name} on {dt}")
        return form.format(*args, tl=TL_DTYPES[compute_dtype(dt)],
                           ibits="tl.int64" if dt == torch.float64 else "tl.int32")

    def _int_division(self, name, dt, a, b):
        """Integer division family with eager's semantics; a zero divisor flags error 2 (eager
        raises ZeroDivisionError) and b == -1 never reaches the hardware divide (INT_MIN/-1)."""
        if b.const is not None and b.const not in (0, -1):
            safe = b                 # a literal divisor: no zero or -1 to guard against
        else:
            self._flag(f"({b} == 0)", 2, f"({a} + {b})")
            safe = self.tmp(f"tl.where(({b} == 0) | ({b} == -1), 1, {b})", dt)
        q = self.tmp(f"tl.where({b} == -1, -{a}, {a} // {safe})", dt)
        r = self.tmp(f"tl.where({b} == -1, 0, {a} % {safe})", dt)
        if name == "int_truncdiv":
            return q
        if name == "int_fmod":
            return r
        if name == "int_floordiv":
            return self.tmp(f"{q} - ((({r} != 0) & (({a} < 0) != ({b} < 0))).to({TL_DTYPES[dt]}))", dt)
        return self.tmp(f"tl.where(({r} != 0) & (({r} < 0) != ({b} < 0)), {r} + {b}, {r})", dt)

    def _remainder(self, name, dt, a, b):
        m = self.tmp(PRIMITIVES["fmod"].triton_form(dt).format(a, b), dt)
        return f"tl.where(({m} != 0) & (({b} < 0) != ({m} < 0)), {m} + {b}, {m})"

    # the primitives whose Triton column is CUSTOM (codegen/primitives.py)
    CUSTOM_OPS = {"remainder": _remainder, "int_floordiv": _int_division,
                  "int_truncdiv": _int_division, "int_remainder": _int_division,
                  "int_fmod": _int_division}

    # ------------------------------------------------------------ kernel structure
    def generate(self) -> str:
        k = self.kernel
        outer = list(k.outer)
        xnumel = product(outer)
        self.idx64 = self._needs_int64()
        xflat = index_symbol("xindex")
        self.ranges[xflat] = xnumel
        self.var_map.update(decompose(loop_vars("x", len(outer)), outer, xflat))
        inner_sizes = [product(n.inner_ranges(len(outer))) for n in k.nodes] if k.has_inner else []
        self.config = choose_config(xnumel, inner_sizes, self.max_autotune)
        if not k.has_inner and self._transposed_read(outer):
            return self._generate_tiled(outer)
        with set_handler(self):
            pid = "tl.program_id(0).to(tl.int64)" if self.idx64 else "tl.program_id(0)"
            self.line(f"xnumel = {self.idx(xnumel)}")
            if k.has_inner:
                self.line(f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
            else:
                self.line(f"xindex = {pid} * XBLOCK + tl.arange(0, XBLOCK)")
            self.line("xmask = xindex < xnumel")
            for j, node in enumerate(k.nodes):
                if k.has_inner:
                    self._inner_node(j, node, outer)
                else:
                    xs = loop_vars("x", len(outer))
                    self.store_node(node, xs)
        return self._assemble()

    def _transposed_read(self, outer) -> bool:
        """A pointwise kernel reading some input along a dimension other than the store's
        contiguous last one gets 2-D tiles, so both the read and the write coalesce. A read
        that does not move along the last dimension (a per-row value broadcast over the row:
        a reduction's result, a label) is no such read: neighbouring lanes of the flat block
        load one address, and tiling it would cut every row into short segments (the LM loss's
        backward over 50257 columns ran 2.5x slower tiled)."""
        dims = [static_int(s) for s in outer]
        if len(outer) < 2 or any(d is None for d in dims) or dims[-1] < 16 or \
                static_int(product(outer[:-1])) < 16 or -(-dims[-1] // TILE) > 65535:
            return False
        xs = loop_vars("x", len(outer))
        for n in self.kernel.nodes:
            for r in n.reads(len(outer)).reads:
                e = sympy.expand(r.index)
                try:
                    last = e.coeff(xs[-1])
                    if last != 1 and last != 0 and any(e.coeff(x) == 1 for x in xs[:-1]):
                        return True
                except Exception:
                    continue
        return False

    def _generate_tiled(self, outer) -> str:
        """[XBLOCK rows of the leading dims, TILE columns of the last dim] blocks."""
        head, last = outer[:-1], outer[-1]
        xs = loop_vars("x", len(outer))
        self.var_map = decompose(xs[:-1], head, index_symbol("xindex"))
        self.var_map[xs[-1]] = index_symbol("yindex")
        self.ranges = {index_symbol("xindex"): product(head), index_symbol("yindex"): last}
        self.config = tiled_config(product(head), last)
        self.tiled = True
        pid = ".to(tl.int64)" if self.idx64 else ""
        with set_handler(self):
            self.line(f"xnumel = {self.idx(product(head))}")
            self.line(f"ynumel = {self.idx(last)}")
            self.line(f"xindex = tl.program_id(0){pid} * XBLOCK + tl.arange(0, XBLOCK)[:, None]")
            self.line(f"yindex = tl.program_id(1){pid} * {TILE} + tl.arange(0, {TILE})[None, :]")
            self.line("xmask = (xindex < xnumel) & (yindex < ynumel)")
            self.line("xy0 = 0 * xindex + 0 * yindex")
            for node in self.kernel.nodes:
                self.store_node(node, xs)
        return self._assemble()

    def _needs_int64(self):
        k = self.kernel
        sizes = [product(k.outer)]
        for n in k.nodes:
            sizes.append(product(n.full_ranges))
        for name in set().union(*[n.reads(len(k.outer)).read_names for n in k.nodes]) | \
                {nm for n in k.nodes for nm in n.output_names()}:
            b = self.buffers.get(name)
            if b is not None:
                sizes.append(b.layout.numel + b.layout.offset)
        for s in sizes:
            v = static_int(s)
            if v is None or v > INT32_LIMIT // 2:
                return True
        return False

    def _assemble(self):
        k = self.kernel
        self.arg_names = self.argument_order(["pd_err"] if self.uses_err else [])
        sig = ", ".join([a if a not in self.scalar_args else f"{a}: tl.float64"
                         for a in self.arg_names] + ["XBLOCK: tl.constexpr"])
        head = []
        if self.max_autotune and self.config.autotune:
            cfgs = ", ".join(f"triton.Config({{'XBLOCK': {x}}}, num_warps={w})"
                             for x, w in self.config.autotune)
            # the autotuner runs the kernel once per config before the real launch: what it
            # writes is restored after each (a kernel writing a buffer it reads, in place, or
            # an input's write-back, would otherwise apply its update once per run)
            written = [a for a in self.arg_names if self.params.get(a)] + \
                (["pd_err"] if self.uses_err else [])
            head.append(f"@triton.autotune(configs=[{cfgs}], key=[], "
                        f"restore_value={written!r})")
        head += ["@triton.jit", f"def {k.name}({sig}):"]
        return "\n".join(head + self.scopes[0].lines) + "\n"

    def _group(self, inner):
        key = tuple(sympy.sympify(s) for s in inner)
        if key not in self.groups:
            g = len(self.groups)
            self.groups[key] = g
            rnumel = product(inner)
            n = static_int(rnumel)
            persistent = n is not None and n <= self.config.persistent_max
            rblock = self.config.rblock(n)
            self.group_info[g] = dict(rnumel=rnumel, persistent=persistent, rblock=rblock)
            if persistent:
                self.line(f"r{g} = tl.arange(0, {rblock})[None, :]")
                self.line(f"r{g}mask = r{g} < {self.idx(rnumel)}")
                self.line(f"m{g} = xmask & r{g}mask")
        return self.groups[key], self.group_info[self.groups[key]]

    def _inner_node(self, j, node, outer):
        k = len(outer)
        inner = node.inner_ranges(k)
        g, info = self._group(inner)
        rflat = index_symbol(f"r{g}")
        self.ranges[rflat] = info["rnumel"]
        xs, inner_vars = node.vars(k)
        self.var_map.update(decompose(inner_vars, inner, rflat))
        self.key_inner, self.key_group = (inner_vars, inner), g
        reads = node.reads(k).read_names
        looped = not info["persistent"]
        if looped and reads & self.written_by_earlier:
            self.line("tl.debug_barrier()")
            self.unfenced.clear()
        if node.is_reduction:
            self._reduction(j, node, xs, inner_vars, g, info)
        else:
            self._in_loop(g, info, lambda: self.store_node(node, list(xs) + list(inner_vars)))
        if not node.is_reduction:
            self.written_by_earlier.add(node.buf.name)

    def _in_loop(self, g, info, body):
        """Run `body` over the whole inner range: once (persistent) or in chunks (looped)."""
        if info["persistent"]:
            prev, self.mask = self.mask, f"m{g}"
            body()
            self.mask = prev
            return
        rb = info["rblock"]
        self.line(f"for roff in range(0, {self.idx(info['rnumel'])}, {rb}):")
        self.push()
        self.line(f"r{g} = roff + tl.arange(0, {rb})[None, :]")
        self.line(f"m{g} = xmask & (r{g} < {self.idx(info['rnumel'])})")
        prev, self.mask = self.mask, f"m{g}"
        body()
        self.mask = prev
        self.pop()

    # ------------------------------------------------------------ reductions
    def _reduction(self, j, node, xs, rs, g, info):
        red: Reduction = node.buf.data
        rt = red.reduction_type
        src = red.src_dtype
        acc_dt = _acc_dtype(rt, src)
        store_idx = flat_index(xs, contiguous_strides(red.ranges))
        if node.buf.name in self.folded:        # computed by its max's loop (_online_softmax)
            res = self.folded.pop(node.buf.name)
            self.store(node.buf.name, store_idx, self.to_dtype(res, node.buf.dtype))
            return
        if rt == "max" and not info["persistent"]:
            fold = self._online_partner(j, node, xs, rs, store_idx, info)
            if fold is not None:
                self._online_softmax(node, fold, xs, rs, g, info, store_idx)
                return

        def value():
            return red.inner_fn(list(xs), list(rs))

        if rt == "welford":
            n = self.idx(product(red.reduction_ranges))
            s = self._reduce_pass(g, info, "sum", acc_dt, value)
            mean = self.tmp(f"({s} / {n})", acc_dt)

            def dev():
                v = value()
                d = self.tmp(f"({v}.to({TL_DTYPES[acc_dt]}) - {mean})", acc_dt)
                return self.tmp(f"({d} * {d})", acc_dt)
            m2 = self._reduce_pass(g, info, "sum", acc_dt, dev)
            self.store(node.buf.name, store_idx, self.to_dtype(mean, node.buf.dtype))
            self.store(node.buf.aux.name, store_idx, self.to_dtype(m2, node.buf.dtype))
            return
        if rt in ("argmax", "argmin"):
            best = self._reduce_pass(g, info, "max" if rt == "argmax" else "min",
                                     compute_dtype(src), value)
            f = src.is_floating_point

            def hit():
                v = value()
                cond = f"({v} == {best})"
                if f:
                    cond = f"({cond} | (({v} != {v}) & ({best} != {best})))"
                return self.tmp(f"tl.where({cond} & {self.mask}, r{g}.to(tl.int64), "
                                f"{INT32_LIMIT})",
                                torch.int64)
            idx = self._reduce_pass(g, info, "min", torch.int64, hit, masked=False)
            self.store(node.buf.name, store_idx, self.to_dtype(idx, node.buf.dtype))
            return
        res = self._reduce_pass(g, info, rt, acc_dt, value)
        self.store(node.buf.name, store_idx, self.to_dtype(res, node.buf.dtype))

    def _online_partner(self, j, node, xs, rs, store_idx, info):
        """(the sum reduction, the form of its shift) when the kernel's next node is
        sum(exp(v - c(M))) over the same rows as this max M = max(v), with c(M) = M or
        where(isinf(M), 0, M) (softmax's and logsumexp's sums), else None. Only float32
        accumulation and a static looped row length (the online form below needs a row no
        shorter than its block, so that every lane sees an element)."""
        nodes = self.kernel.nodes
        if j + 1 >= len(nodes) or static_int(info["rnumel"]) is None:
            return None
        b = nodes[j + 1]
        ra, rb = node.buf.data, b.buf.data
        if not b.is_reduction or rb.reduction_type != "sum" or \
                compute_dtype(ra.src_dtype) != torch.float32 or \
                _acc_dtype("sum", rb.src_dtype) != torch.float32 or \
                [sympy.sympify(x) for x in ra.ranges] != [sympy.sympify(x) for x in rb.ranges] or \
                [sympy.sympify(x) for x in ra.reduction_ranges] != \
                [sympy.sympify(x) for x in rb.reduction_ranges]:
            return None
        ta = record_tree(ra.inner_fn, list(xs), list(rs))
        tb = record_tree(rb.inner_fn, list(xs), list(rs))
        if ta is None or tb is None or not (tb[0] == "exp" and tb[1][0] == "sub" and
                                            tb[1][1] == ta):
            return None
        c, name, row = tb[1][2], node.buf.name, self.forward_key(node.buf.name, store_idx)

        def is_max(t):
            return t[0] == "load" and t[1] == name and self.forward_key(name, t[2]) == row
        if is_max(c):
            return b, "max"
        if c[0] == "where" and c[1][0] == "isinf" and is_max(c[1][1]) and c[2][0] == "const" \
                and c[2][1] == 0 and is_max(c[3]):
            return b, "finite_or_zero"
        return None

    def _online_softmax(self, node, fold, xs, rs, g, info, store_idx):
        """A looped max M and the sum after it, S = sum(exp(v - c(M))), in one pass over the row
        (online softmax) instead of two. Each lane keeps its running max m and
        s = sum(exp(v - k(m))) with the shift k(m) = m where finite, else 0, rescaling s when m
        grows; at the end S = sum over lanes of s * exp(k(m) - c(M)). k keeps every exponent
        free of inf - inf, so special values come out as the two passes give them: a NaN
        anywhere makes M and S NaN; a +inf makes M +inf and S what exp(inf - c) gives; a lane
        whose elements are all -inf (s == 0) adds exp(-inf - c(M)): 0, or NaN where
        c(M) = -inf (a row of -inf under softmax's shift). Rounding differs from the two passes
        by the rescaling factors only (relative 1e-7 per rescale)."""
        b, form = fold
        red = node.buf.data
        rb = info["rblock"]
        f32 = torch.float32
        n = self.n_tmp
        self.n_tmp += 1
        m, s = f"acc{n}", f"acc{n}s"
        inf = 'float("inf")'

        def shift(v):
            return f"tl.where(({v} == {v}) & (tl.abs({v}) != {inf}), {v}, 0.0)"
        self.line(f"{m} = tl.full([XBLOCK, {rb}], -{inf}, tl.float32)")
        self.line(f"{s} = tl.full([XBLOCK, {rb}], 0, tl.float32)")

        def body():
            v = red.inner_fn(list(xs), list(rs))
            if compute_dtype(v.dtype) != f32:
                v = self.tmp(f"{v}.to(tl.float32)", f32)
            v = self.tmp(f"tl.where({self.mask}, {v}, -{inf})", f32)
            new = self.tmp(_combine("max", m, v), f32)
            k_old, k_new = self.tmp(shift(m), f32), self.tmp(shift(new), f32)
            # a lane whose max was -inf holds s == 0: no rescale (its k_old - k_new may be
            # +inf's worth: 0 * exp(997) overflows to NaN)
            scale = self.tmp(f"tl.exp(tl.where({m} == -{inf}, 0.0, {k_old} - {k_new}))", f32)
            self.line(f"{s} = {s} * {scale} + tl.exp({v} - {k_new})")
            self.line(f"{m} = {new}")
        self._in_loop(g, info, body)
        big = self.tmp(_final("max", m, f32), f32)
        self.store(node.buf.name, store_idx, self.to_dtype(big, node.buf.dtype))
        c = big if form == "max" else self.tmp(f"tl.where(tl.abs({big}) == {inf}, 0.0, {big})", f32)
        k = self.tmp(shift(m), f32)
        term = self.tmp(f"tl.where({s} == 0, tl.where({c} == -{inf}, float(\"nan\"), 0.0), "
                        f"{s} * tl.exp({k} - {c}))", f32)
        self.folded[b.buf.name] = self.tmp(f"tl.sum({term}, 1)[:, None]", f32)

    def _reduce_pass(self, g, info, rt, acc_dt, value_fn, masked=True) -> KValue:
        """[XBLOCK, 1] reduction of value_fn() over the group's inner range."""
        tdt = TL_DTYPES[acc_dt]
        ident = _identity(rt, acc_dt)
        is_bool_like = rt in ("any", "all")
        n = self.n_tmp
        self.n_tmp += 1
        acc = f"acc{n}"

        def prep():
            v = value_fn()
            if is_bool_like:
                v = self.tmp(f"({v} != 0).to(tl.int8)", torch.int8)
            elif v.dtype != acc_dt and compute_dtype(v.dtype) != acc_dt:
                v = self.tmp(f"{v}.to({tdt})", acc_dt)
            if masked:
                v = self.tmp(f"tl.where({self.mask}, {v}, {ident})", acc_dt)
            return v

        if info["persistent"]:
            out = {}
            self._in_loop(g, info, lambda: out.setdefault("v", prep()))
            block = out["v"]
        else:
            rb = info["rblock"]
            cdt = "tl.int8" if is_bool_like else tdt
            self.line(f"{acc} = tl.full([XBLOCK, {rb}], {ident}, {cdt})")

            def body():
                v = prep()
                self.line(f"{acc} = {_combine(rt, acc, v)}")
            self._in_loop(g, info, body)
            block = acc
        return self.tmp(_final(rt, block, acc_dt), acc_dt if not is_bool_like else torch.bool)


def _acc_dtype(rt, src):
    if rt in ("any", "all"):
        return torch.bool
    if rt in ("sum", "prod", "welford"):
        if src.is_floating_point:
            return torch.float64 if src == torch.float64 else torch.float32
        return torch.int64
    return compute_dtype(src)


def _identity(rt, dt) -> str:
    if rt in ("sum", "welford"):
        return "0"
    if rt == "prod":
        return "1"
    if rt == "any":
        return "0"
    if rt == "all":
        return "1"
    big = {"max": "-", "min": ""}[rt]
    if dt.is_floating_point:
        return f'float("{big}inf")'
    if dt == torch.bool:
        return "0" if rt == "max" else "1"
    info = torch.iinfo(dt)
    return str(info.min if rt == "max" else info.max)


def _combine(rt, acc, v) -> str:
    if rt in ("sum", "welford"):
        return f"{acc} + {v}"
    if rt == "prod":
        return f"{acc} * {v}"
    if rt in ("max", "any"):
        return f"tl.where(({v} > {acc}) | ({v} != {v}), {v}, {acc})"
    return f"tl.where(({v} < {acc}) | ({v} != {v}), {v}, {acc})"


def _final(rt, block, acc_dt) -> str:
    if rt in ("sum", "welford"):
        return f"tl.sum({block}, 1)[:, None]"
    if rt == "prod":
        return f"tl.reduce({block}, 1, _pd_prod)[:, None]"
    if rt == "any":
        return f"(tl.max({block}, 1)[:, None] != 0)"
    if rt == "all":
        return f"(tl.min({block}, 1)[:, None] != 0)"
    fn = "tl.max" if rt == "max" else "tl.min"
    if acc_dt.is_floating_point:
        nan = f"tl.max(({block} != {block}).to(tl.int8), 1)[:, None] != 0"
        return f"tl.where({nan}, float(\"nan\"), {fn}({block}, 1)[:, None])"
    if acc_dt == torch.bool:
        return f"({fn}({block}.to(tl.int8), 1)[:, None] != 0)"
    return f"{fn}({block}, 1)[:, None]"


PRELUDE = '''# pydynamo codegen: Triton kernels for one graph
import triton
import triton.language as tl
from codegen.triton_launch import libdevice


@triton.jit
def _pd_prod(a, b):
    return a * b

'''


@dataclass
class KernelSource:
    name: str
    source: str
    arg_names: List[str]
    config: KernelConfig
    uses_err: bool
    xnumel: sympy.Expr


def generate_source(kernels: List[FusedKernel], buffers, max_autotune=False):
    """-> (module source, {kernel name: KernelSource}); KernelSource.name is the function in
    the module that runs the kernel (shared by identical kernels)."""
    parts, info, seen = [PRELUDE], {}, {}
    for k in kernels:
        pr = TritonKernelPrinter(k, buffers, max_autotune)
        src = pr.generate()
        params = [a for a in pr.arg_names if a != "pd_err"]
        canon = canonical_text(src, k.name, params)
        if canon not in seen:
            seen[canon] = k.name
            parts.append(re.sub(r"\bKERNEL\b", k.name, canon))
        info[k.name] = KernelSource(seen[canon], src, pr.arg_names, pr.config, pr.uses_err,
                                    product(k.outer))
    return "\n\n".join(parts) + "\n", info

"""Instruction list -> code object.

`make_code_like(template, instructions, ...)` is the entry point for clients: the result has the
template's argument layout (argcount, posonly, kwonly, *args/**kwargs flags and names), cellvars
and freevars, so the frame hook accepts it for the template's frames.  Local names that the
instructions use and the template lacks become new plain locals (appended to co_varnames).
`make_code(...)` is the general form with an explicit `CodeLayout` (resume functions use it).

What assembly does, in order:
1. argument indices from `argval` (constants/names are appended to the template's pools, so the
   template's own indices are kept; locals are looked up in the new localsplus order);
2. jump directions and offsets, EXTENDED_ARG prefixes widened until the layout is stable (sizes
   only grow, so this reaches CPython's own fixed point);
3. inline CACHE units, the exception table from `exn_tab_entry` runs, the location table from
   `positions`, and co_stacksize from `analysis.stack_depths`.
Assembling the unmodified output of `disassemble(code)` with `code` as template reproduces
co_code, co_exceptiontable and co_stacksize exactly (tests/bytecode/test_roundtrip_stdlib.py).
"""
from __future__ import annotations

import dis
import itertools
import math
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Sequence

from pydynamo.bytecode import opcodes as ops
from pydynamo.bytecode.instruction import UNSET, Instruction
from pydynamo.bytecode.tables import encode_exception_table, encode_linetable
from pydynamo.bytecode.analysis import max_stack_depth

CO_VARARGS = 0x04
CO_VARKEYWORDS = 0x08


@dataclass(frozen=True)
class CodeLayout:
    """The frame layout of a code object: what the hook compares between old and new code."""

    argnames: tuple[str, ...]           # positional (incl. positional-only) then keyword-only
    posonlyargcount: int = 0
    kwonlyargcount: int = 0
    varargs: str | None = None
    varkw: str | None = None
    cellvars: tuple[str, ...] = ()
    freevars: tuple[str, ...] = ()
    other_locals: tuple[str, ...] = field(default=(), compare=False)

    @staticmethod
    def of(code: CodeType) -> "CodeLayout":
        nargs = code.co_argcount + code.co_kwonlyargcount
        names = code.co_varnames
        i = nargs
        varargs = varkw = None
        if code.co_flags & CO_VARARGS:
            varargs, i = names[i], i + 1
        if code.co_flags & CO_VARKEYWORDS:
            varkw, i = names[i], i + 1
        return CodeLayout(names[:nargs], code.co_posonlyargcount, code.co_kwonlyargcount,
                          varargs, varkw, code.co_cellvars, code.co_freevars, names[i:])

    @property
    def argcount(self) -> int:
        return len(self.argnames) - self.kwonlyargcount

    @property
    def varnames(self) -> tuple[str, ...]:
        star = tuple(n for n in (self.varargs, self.varkw) if n is not None)
        return self.argnames + star + self.other_locals

    @property
    def localsplus(self) -> tuple[str, ...]:
        v = self.varnames
        return v + tuple(c for c in self.cellvars if c not in v) + self.freevars

    def flags(self, base: int) -> int:
        base &= ~(CO_VARARGS | CO_VARKEYWORDS)
        return base | (CO_VARARGS if self.varargs else 0) | (CO_VARKEYWORDS if self.varkw else 0)

    def with_locals(self, names: Sequence[str]) -> "CodeLayout":
        known = set(self.localsplus)
        extra = tuple(dict.fromkeys(n for n in names if n not in known))
        if not extra:
            return self
        return CodeLayout(self.argnames, self.posonlyargcount, self.kwonlyargcount, self.varargs,
                          self.varkw, self.cellvars, self.freevars, self.other_locals + extra)


def _const_key(value: Any) -> Any:
    """Key that tells apart constants `==` would merge (1, 1.0, True, -0.0, 0.0, nan)."""
    if isinstance(value, (tuple, frozenset)):
        return (type(value), tuple(_const_key(v) for v in value))
    if isinstance(value, float) and (value == 0.0 or math.isnan(value)):
        return (float, repr(value))
    if isinstance(value, complex):
        return (complex, repr(value))
    try:
        hash(value)
    except TypeError:
        return (type(value), id(value))
    if isinstance(value, CodeType):
        return (CodeType, id(value))
    return (type(value), value)


class _Pool:
    def __init__(self, initial: Sequence[Any], key=lambda v: v):
        self.items = list(initial)
        self.key = key
        self.index: dict[Any, int] = {}
        for i, v in enumerate(self.items):
            self.index.setdefault(key(v), i)

    def get(self, value: Any, hint: int | None = None) -> int:
        if hint is not None and 0 <= hint < len(self.items) and self.items[hint] is value:
            return hint
        k = self.key(value)
        if k not in self.index:
            self.index[k] = len(self.items)
            self.items.append(value)
        return self.index[k]


def _assign_args(insts: Sequence[Instruction], consts: _Pool, names: _Pool,
                 localsplus: Sequence[str]) -> None:
    slot = {n: i for i, n in reversed(list(enumerate(localsplus)))}
    for inst in insts:
        kind = ops.arg_kind(inst.opname)
        if kind in (None, "jump", "int"):
            if kind == "int" and inst.arg is None:
                if not isinstance(inst.argval, int):
                    raise ValueError(f"{inst.opname} needs an integer arg")
                inst.arg = inst.argval
            continue
        if inst.argval is UNSET:
            raise ValueError(f"{inst!r}: argval is required")
        bits = ops.FLAG_BITS.get(inst.opname, 0)
        if kind == "const":
            inst.arg = consts.get(inst.argval, inst.arg)
        elif kind == "name":
            hint = None if inst.arg is None else inst.arg >> bits
            inst.arg = (names.get(inst.argval, hint) << bits) | inst.flag_bits()
        elif kind == "compare":
            if inst.arg is None or (inst.arg >> bits) != dis.cmp_op.index(inst.argval):
                inst.arg = ops.COMPARE_ARGS[inst.argval]
        elif kind == "local_pair":
            first, second = (slot.get(n) for n in inst.argval)
            if first is None or second is None:
                raise ValueError(f"{inst!r}: {inst.argval!r} are not locals of the new code")
            inst.arg = (first << 4) | second  # < 16 each: _split_pairs made sure
        else:  # local / free: an index into localsplus
            if inst.arg is not None and inst.arg < len(localsplus) \
                    and localsplus[inst.arg] == inst.argval:
                continue  # keep: a name can be both a cell and a free var (class bodies)
            if inst.argval not in slot:
                raise ValueError(f"{inst!r}: {inst.argval!r} is not a local of the new code")
            inst.arg = slot[inst.argval]


def _split_pairs(insts: Sequence[Instruction], localsplus: Sequence[str]) -> list[Instruction]:
    """3.13's two-local superinstructions hold 4-bit indices: where a new layout moves either
    local past 15 (resume functions reorder locals), the instruction becomes its two halves.
    The first half keeps the object (jumps and handlers that land on it stay right)."""
    slot = {n: i for i, n in reversed(list(enumerate(localsplus)))}
    halves = {"LOAD_FAST_LOAD_FAST": ("LOAD_FAST", "LOAD_FAST"),
              "STORE_FAST_LOAD_FAST": ("STORE_FAST", "LOAD_FAST"),
              "STORE_FAST_STORE_FAST": ("STORE_FAST", "STORE_FAST")}
    out: list[Instruction] = []
    for inst in insts:
        out.append(inst)
        if inst.opname in halves and any(slot.get(n, 16) > 15 for n in inst.argval):
            (a, b), (na, nb) = halves[inst.opname], inst.argval
            inst.opname, inst.arg, inst.argval = a, None, na
            out.append(Instruction(b, argval=nb, positions=inst.positions,
                                   exn_tab_entry=inst.exn_tab_entry))
    return out


def _ext_count(arg: int | None) -> int:
    n = 0
    while arg is not None and arg > 0xFF:
        arg >>= 8
        n += 1
    return n


def _layout_jumps(insts: Sequence[Instruction]) -> list[int]:
    """Fix jump opnames/args and return each instruction's byte offset (prefix included)."""
    index = {id(i): k for k, i in enumerate(insts)}
    # 3.13's assembler starts a jump's size from its target's instruction index and lets sizes
    # shrink as well as grow; where two prefix layouts are both consistent it keeps the one it
    # reached that way, so starting alike reproduces its co_code. Earlier versions grow from 0.
    two_way = ops.PY313
    ext = [_ext_count(i.arg) if not i.is_jump
           else (_ext_count(index.get(id(i.target), 0)) if two_way else 0) for i in insts]
    for inst in insts:
        if inst.is_jump and id(inst.target) not in index:
            raise ValueError(f"{inst!r}: jump target is not in the instruction list")
        if inst.opname == "FOR_ITER" and not ops.PY311 and inst.target.opname != "END_FOR":
            # 3.12's FOR_ITER skips one unit past its target when the iterator is exhausted
            # (3.13's two: END_FOR and the POP_TOP after it)
            raise ValueError(f"{inst!r}: on 3.12+ FOR_ITER must target an END_FOR")
    for rounds in itertools.count():
        if rounds > 32:
            two_way = False  # not settling (hand-built code): grow only, which always ends
        offsets, pos = [], 0
        for k, inst in enumerate(insts):
            offsets.append(pos)
            pos += 2 * (ext[k] + 1 + ops.cache_entries(inst.opname))
        changed = False
        for k, inst in enumerate(insts):
            if not inst.is_jump:
                continue
            dest = offsets[index[id(inst.target)]]
            op_at = offsets[k] + 2 * ext[k]
            # jumps are relative to the end of the instruction's caches; both directions of a
            # pair have the same cache count
            backward = dest < op_at + 2 + 2 * ops.cache_entries(inst.opname)
            inst.opname = ops.directed(inst.opname, backward)
            after = op_at + 2 + 2 * ops.cache_entries(inst.opname)
            inst.arg = (after - dest) // 2 if backward else (dest - after) // 2
            inst.argval = dest
            need = _ext_count(inst.arg)
            if need > ext[k] or (two_way and need != ext[k]):
                ext[k] = need
                changed = True
        if not changed:
            return offsets


@dataclass
class Assembled:
    co_code: bytes
    co_exceptiontable: bytes
    co_linetable: bytes
    co_stacksize: int
    co_consts: tuple
    co_names: tuple


def assemble(insts: Sequence[Instruction], *, consts: Sequence[Any] = (),
             names: Sequence[str] = (), localsplus: Sequence[str] = (),
             firstlineno: int = 1) -> Assembled:
    """Low-level: encode `insts` (mutating their arg/offset/opname in place)."""

    if not insts:
        raise ValueError("cannot assemble an empty instruction list")
    const_pool = _Pool(consts, _const_key)
    name_pool = _Pool(names)
    insts = _split_pairs(insts, localsplus)
    _assign_args(insts, const_pool, name_pool, localsplus)
    offsets = _layout_jumps(insts)
    code = bytearray()
    runs = []
    for inst, off in zip(insts, offsets):
        arg = inst.arg or 0
        ext = [(arg >> (8 * s)) & 0xFF for s in range(_ext_count(inst.arg), 0, -1)]
        code += bytes(b for a in ext for b in (ops.EXTENDED_ARG, a))
        code += bytes((inst.opcode, arg & 0xFF))
        code += bytes((ops.CACHE, 0)) * ops.cache_entries(inst.opname)
        inst.offset = off
        runs.append((inst.positions, len(ext) + 1 + ops.cache_entries(inst.opname)))
    ends = offsets[1:] + [len(code)]
    rows: list[list] = []
    placed = {id(i) for i in insts}
    for inst, off, end in zip(insts, offsets, ends):
        e = inst.exn_tab_entry
        if e is None:
            continue
        if id(e.target) not in placed:
            raise ValueError(f"{inst!r}: its exception handler {e.target!r} is not in the list "
                             "(copied from another list? clear exn_tab_entry or clone both)")
        key = (id(e.target), e.depth, e.lasti)
        if rows and rows[-1][1] == off and rows[-1][5] == key:
            rows[-1][1] = end
        else:
            rows.append([off, end, e.target, e.depth, e.lasti, key])
    table = encode_exception_table((r[0], r[1], r[2].offset, r[3], r[4]) for r in rows)
    return Assembled(bytes(code), table, encode_linetable(runs, firstlineno),
                     max_stack_depth(insts), tuple(const_pool.items), tuple(name_pool.items))


def _used_locals(insts: Sequence[Instruction]) -> list[str]:
    out = []
    for i in insts:
        kind = ops.arg_kind(i.opname)
        if kind in ("local", "free"):
            out.append(i.argval)
        elif kind == "local_pair":
            out += i.argval
    return out


def _check_prologue(insts: Sequence[Instruction], layout: CodeLayout) -> None:
    """Cells must be made and free vars copied before RESUME, or the frame would read raw
    slots as cells (a crash, not an exception)."""
    head = []
    for inst in insts:
        if inst.opname == "RESUME":
            break
        head.append(inst)
    else:
        raise ValueError("no RESUME instruction: start the body with emit.prologue(template)")
    made = {i.argval for i in head if i.opname == "MAKE_CELL"}
    copied = [i.arg for i in head if i.opname == "COPY_FREE_VARS"]
    if made != set(layout.cellvars) or copied != ([len(layout.freevars)] if layout.freevars
                                                  else []):
        raise ValueError("the prologue does not match the layout's cells/free vars: start the "
                         "body with emit.prologue(template)")


def make_code(template: CodeType, insts: Sequence[Instruction], layout: CodeLayout, *,
              name: str | None = None, qualname: str | None = None,
              firstlineno: int | None = None, flags: int | None = None) -> CodeType:
    """Assemble `insts` into a code object with an explicit `layout`; everything else
    (filename, flags other than *args/**kwargs, pools to extend) comes from `template`."""
    layout = layout.with_locals(_used_locals(insts))
    _check_prologue(insts, layout)
    first = template.co_firstlineno if firstlineno is None else firstlineno
    asm = assemble(insts, consts=template.co_consts,
                   names=template.co_names, localsplus=layout.localsplus, firstlineno=first)
    return template.replace(
        co_argcount=layout.argcount, co_posonlyargcount=layout.posonlyargcount,
        co_kwonlyargcount=layout.kwonlyargcount, co_nlocals=len(layout.varnames),
        co_varnames=layout.varnames, co_cellvars=layout.cellvars, co_freevars=layout.freevars,
        co_flags=layout.flags(template.co_flags if flags is None else flags),
        co_code=asm.co_code, co_consts=asm.co_consts, co_names=asm.co_names,
        co_stacksize=asm.co_stacksize, co_exceptiontable=asm.co_exceptiontable,
        co_linetable=asm.co_linetable, co_firstlineno=first,
        co_name=template.co_name if name is None else name,
        co_qualname=template.co_qualname if qualname is None else qualname)


def make_code_like(template: CodeType, insts: Sequence[Instruction], *,
                   new_locals: Sequence[str] = (), name: str | None = None,
                   qualname: str | None = None) -> CodeType:
    """A code object running `insts` with `template`'s frame layout.

    `insts` must contain the whole body, prologue included (COPY_FREE_VARS / MAKE_CELL /
    RESUME: see `emit.prologue(template)`).  Locals used by `insts` but unknown to the template
    (and any listed in `new_locals`) become new plain locals."""
    layout = CodeLayout.of(template).with_locals(list(new_locals))
    return make_code(template, insts, layout, name=name, qualname=qualname)

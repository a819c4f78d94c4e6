"""Instruction objects and `disassemble(code)`.

An `Instruction` is one real instruction with its EXTENDED_ARG prefixes and inline CACHE entries
folded in.  Invariants the rest of the package relies on:

* Identity matters: instructions compare and hash by identity; a jump's `target` and an
  exception-table entry's `target` are references to Instruction objects in the same list, so
  inserting or removing instructions never requires fixing offsets by hand.
* `argval` is the source of truth for const/name/local/free/compare arguments; `arg` is
  recomputed by the assembler, except for the flag bits that some opcodes keep below the index
  (LOAD_GLOBAL push-NULL bit; on 3.12 also LOAD_ATTR method bit, LOAD_SUPER_ATTR's two bits and
  COMPARE_OP's low 4 bits, 5 on 3.13), which are read from `arg`.  3.13's two-local
  superinstructions (LOAD_FAST_LOAD_FAST, ...) have a pair of names as `argval`.  For jumps, `target` is the truth and
  `arg`/`argval` are informational (byte offset of the target after the last assembly).
* `offset` is the byte offset of the instruction's first code unit, EXTENDED_ARG prefix
  included (this is where jumps and exception handlers land); None for new instructions.
* `exn_tab_entry` is the innermost exception-table entry covering the instruction (None: not
  covered).  Runs of adjacent instructions with equal entries become one table row.
* `positions` is a `dis.Positions` (or None: no location).

Build new instructions with `Instruction("LOAD_FAST", argval="x")` or the helpers in
`pydynamo.bytecode.emit`; direction-free jump names (`"JUMP"`, `"POP_JUMP_IF_FALSE"` on 3.11)
are accepted and made concrete by the assembler.
"""
from __future__ import annotations

import dis
from dataclasses import dataclass, field
from types import CodeType
from typing import Any, Iterable

from pydynamo.bytecode import opcodes as ops
from pydynamo.bytecode.tables import parse_exception_table


class _Unset:
    def __repr__(self) -> str:
        return "<unset>"


UNSET: Any = _Unset()


@dataclass(frozen=True, eq=True)
class ExnTabEntry:
    """Handler of a protected range: on an exception the stack is cut to `depth`, the offset of
    the raising instruction is pushed when `lasti`, then the exception, and control goes to
    `target`."""

    target: "Instruction"
    depth: int
    lasti: bool


@dataclass(eq=False)
class Instruction:
    opname: str
    arg: int | None = None
    argval: Any = UNSET
    target: "Instruction | None" = None
    positions: dis.Positions | None = None
    offset: int | None = None
    exn_tab_entry: ExnTabEntry | None = None
    extra: dict = field(default_factory=dict, repr=False)  # free slot for clients' annotations

    def __post_init__(self) -> None:
        if self.opname not in ops.OPMAP and self.opname not in ops.VIRTUAL_JUMPS:
            raise ValueError(f"unknown opcode name {self.opname!r} on this Python")
        kind = ops.arg_kind(self.opname)
        if kind is None:
            if self.arg not in (None, 0):
                raise ValueError(f"{self.opname} takes no argument (got arg={self.arg})")
            self.arg = None
        elif kind == "int" and self.argval is UNSET:
            self.argval = self.arg
        if kind == "jump" and self.target is None and self.offset is None:
            raise ValueError(f"{self.opname} needs a target Instruction")

    @property
    def opcode(self) -> int:
        return ops.OPMAP[ops.DIRECTION_PAIRS[self.opname][0]
                         if self.opname in ops.VIRTUAL_JUMPS else self.opname]

    @property
    def is_jump(self) -> bool:
        return ops.arg_kind(self.opname) == "jump"

    def flag_bits(self) -> int:
        """The low flag bits of `arg` (0 when the opcode has none)."""
        bits = ops.FLAG_BITS.get(self.opname, 0)
        return (self.arg or 0) & ((1 << bits) - 1)

    def __repr__(self) -> str:
        where = f"@{self.offset}" if self.offset is not None else ""
        if self.target is not None:
            tgt = f" -> {self.target.opname}@{self.target.offset}"
        else:
            tgt = ""
        val = "" if self.argval is UNSET or self.argval == self.arg else f" ({self.argval!r})"
        arg = "" if self.arg is None else f" {self.arg}"
        return f"<{self.opname}{arg}{val}{tgt}{where}>"


def localsplus_names(code: CodeType) -> tuple[str, ...]:
    """Names of the frame's fast slots in index order: locals, non-argument cells, free vars.

    This is the order `CodeType.replace` builds from co_varnames/co_cellvars/co_freevars, and the
    index space of LOAD_FAST/LOAD_DEREF/MAKE_CELL/... arguments since 3.11."""
    varnames = code.co_varnames
    return varnames + tuple(c for c in code.co_cellvars if c not in varnames) + code.co_freevars


def _argval(code: CodeType, name: str, arg: int, localsplus) -> Any:
    kind = ops.arg_kind(name)
    index = arg >> ops.FLAG_BITS.get(name, 0)
    if kind == "const":
        return code.co_consts[arg]
    if kind == "name":
        return code.co_names[index]
    if kind in ("local", "free"):
        return localsplus[arg]
    if kind == "local_pair":
        return localsplus[arg >> 4], localsplus[arg & 15]
    if kind == "compare":
        return dis.cmp_op[index]
    return arg


def disassemble(code: CodeType) -> list[Instruction]:
    """Instructions of `code` (not of nested code objects: those stay constants)."""
    raw = code.co_code
    positions = list(code.co_positions())
    localsplus = localsplus_names(code)
    insts: list[Instruction] = []
    by_offset: dict[int, Instruction] = {}
    jumps: list[tuple[Instruction, int]] = []
    i, ext, start = 0, 0, None
    while i < len(raw):
        op, byte = raw[i], raw[i + 1]
        start = i if start is None else start
        if op == ops.EXTENDED_ARG:
            ext = (ext | byte) << 8
            i += 2
            continue
        name = ops.OPNAME[op]
        arg = (ext | byte) if ops.has_arg(name) else None
        ncache = ops.cache_entries(name)
        inst = Instruction(name, arg, offset=start, positions=dis.Positions(*positions[i // 2]))
        if arg is not None:
            inst.argval = _argval(code, name, arg, localsplus)
        if inst.is_jump:
            after = i + 2 + 2 * ncache
            dest = after - 2 * arg if ops.is_backward(name) else after + 2 * arg
            inst.argval = dest
            jumps.append((inst, dest))
        insts.append(inst)
        by_offset[start] = inst
        i += 2 + 2 * ncache
        ext, start = 0, None
    for inst, dest in jumps:
        inst.target = by_offset[dest]
    _attach_exception_table(code, insts, by_offset)
    return insts


def _attach_exception_table(code: CodeType, insts, by_offset) -> None:
    rows = parse_exception_table(code.co_exceptiontable)
    if not rows:
        return
    k = 0
    for inst in insts:  # rows are sorted by start and do not overlap
        while k < len(rows) and rows[k][1] <= inst.offset:
            k += 1
        if k == len(rows):
            break
        start, end, target, depth, lasti = rows[k]
        if start <= inst.offset < end:
            inst.exn_tab_entry = ExnTabEntry(by_offset[target], depth, lasti)


def clone_instructions(insts: Iterable[Instruction]) -> list[Instruction]:
    """Copies with jump targets and handler references remapped into the copy.

    References to instructions outside `insts` are kept as they are."""
    insts = list(insts)
    mapping = {id(i): Instruction(i.opname, i.arg, i.argval, i.target, i.positions, i.offset,
                                  i.exn_tab_entry, dict(i.extra)) for i in insts}
    entries: dict[ExnTabEntry, ExnTabEntry] = {}
    out = []
    for orig in insts:
        new = mapping[id(orig)]
        if orig.target is not None:
            new.target = mapping.get(id(orig.target), orig.target)
        e = orig.exn_tab_entry
        if e is not None:
            if e not in entries:
                entries[e] = ExnTabEntry(mapping.get(id(e.target), e.target), e.depth, e.lasti)
            new.exn_tab_entry = entries[e]
        out.append(new)
    return out

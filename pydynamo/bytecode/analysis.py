"""Static analysis over instruction lists: stack depth, jump targets, liveness, regions.

All functions take the list produced by `disassemble` (or built by a client) and never mutate
it.  Depths come from the interpreter's `dis.stack_effect`; an exception handler is entered with
``entry.depth + lasti + 1`` items (the stack cut to depth, the offset if lasti, the exception).
Instructions unreachable from the first one get depth None.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

from pydynamo.bytecode import opcodes as ops
from pydynamo.bytecode.instruction import Instruction


def _effect_arg(inst: Instruction) -> int | None:
    return (inst.arg or 0) if ops.has_arg(inst.opname) else None


def successors(inst: Instruction, nxt: Instruction | None) -> list[tuple[Instruction, bool]]:
    """(successor, taken-jump?) pairs in normal control flow (handlers excluded)."""
    out = []
    if inst.opname not in ops.TERMINATORS and inst.opname != "JUMP" and nxt is not None:
        out.append((nxt, False))
    if inst.is_jump:
        out.append((inst.target, True))
    return out


def stack_depths(insts: Sequence[Instruction]) -> list[int | None]:
    """Stack depth before each instruction (None where unreachable).

    Raises ValueError if two paths reach an instruction with different depths."""
    index = {id(i): k for k, i in enumerate(insts)}
    depth: list[int | None] = [None] * len(insts)

    strict = True

    def reach(k: int, d: int, src: Instruction) -> None:
        if d < 0:
            if not strict:
                return
            raise ValueError(f"stack underflow after {src!r}")
        if depth[k] is None:
            depth[k] = d
            work.append(k)
        elif depth[k] != d and strict:
            raise ValueError(f"inconsistent stack depth at {insts[k]!r}: {depth[k]} vs {d}")

    def run(work: list[int]) -> None:
        while work:
            k = work.pop()
            inst, d = insts[k], depth[k]
            e = inst.exn_tab_entry
            if e is not None:
                reach(index[id(e.target)], e.depth + int(e.lasti) + 1, inst)
            nxt = insts[k + 1] if k + 1 < len(insts) else None
            for succ, jumped in successors(inst, nxt):
                eff = ops.stack_effect(_real(inst.opname), _effect_arg(inst), jump=jumped)
                reach(index[id(succ)], d + eff, inst)

    work: list[int] = []
    if insts:
        reach(0, 0, insts[0])
    run(work)
    # CPython sizes the stack before it drops dead code, so handlers whose protected range is
    # empty still count.  Such a handler starts with PUSH_EXC_INFO, covered by a cleanup entry
    # whose depth equals the depth before it; analyse from there, leniently (dead code only).
    strict = False
    for k, inst in enumerate(insts):
        if depth[k] is None and inst.opname == "PUSH_EXC_INFO" and inst.exn_tab_entry:
            reach(k, inst.exn_tab_entry.depth, inst)
            run(work)
    return depth


def _real(opname: str) -> str:
    return ops.DIRECTION_PAIRS[opname][0] if opname in ops.VIRTUAL_JUMPS else opname


def max_stack_depth(insts: Sequence[Instruction]) -> int:
    """co_stacksize: the largest depth reached before or right after any instruction."""
    best = 0
    for inst, d in zip(insts, stack_depths(insts)):
        if d is None:
            continue
        name, arg = _real(inst.opname), _effect_arg(inst)
        effects = [ops.stack_effect(name, arg, jump=False)]
        if inst.is_jump:
            effects.append(ops.stack_effect(name, arg, jump=True))
        best = max(best, d, *(d + e for e in effects))
    return best


def jump_targets(insts: Sequence[Instruction]) -> set[Instruction]:
    """Instructions some jump or exception handler lands on."""
    out = {i.target for i in insts if i.target is not None}
    return out | {i.exn_tab_entry.target for i in insts if i.exn_tab_entry is not None}


def find(insts: Sequence[Instruction], offset: int) -> Instruction:
    """The instruction starting at byte `offset` (as numbered by the last disassembly)."""
    for inst in insts:
        if inst.offset == offset:
            return inst
    raise KeyError(f"no instruction starts at offset {offset}")


# -- liveness ----------------------------------------------------------------------------------

_READS = frozenset(n for n in ("LOAD_FAST", "LOAD_FAST_CHECK", "LOAD_FAST_AND_CLEAR",
                               "DELETE_FAST") if n in ops.OPMAP)
_WRITES = frozenset(n for n in ("STORE_FAST", "STORE_FAST_MAYBE_NULL") if n in ops.OPMAP)
# DELETE_FAST reads (it raises if the name is unbound) and LOAD_FAST_AND_CLEAR reads the old
# value (3.12 comprehensions save it on the stack), so both count as uses.
_PAIR_ACCESS = {"LOAD_FAST_LOAD_FAST": "rr", "STORE_FAST_LOAD_FAST": "wr",
                "STORE_FAST_STORE_FAST": "ww"}


def local_accesses(inst: Instruction) -> list[tuple[str, str]]:
    """(name, "r" | "w") for each plain local `inst` reads or writes, in execution order
    (3.13's superinstructions touch two; STORE_FAST_STORE_FAST stores TOS into the first)."""
    if inst.opname in _READS:
        return [(inst.argval, "r")]
    if inst.opname in _WRITES:
        return [(inst.argval, "w")]
    if inst.opname in _PAIR_ACCESS:
        return list(zip(inst.argval, _PAIR_ACCESS[inst.opname]))
    return []


def _all_successors(insts: Sequence[Instruction]) -> list[list[int]]:
    index = {id(i): k for k, i in enumerate(insts)}
    out = []
    for k, inst in enumerate(insts):
        nxt = insts[k + 1] if k + 1 < len(insts) else None
        succ = [index[id(s)] for s, _ in successors(inst, nxt)]
        if inst.exn_tab_entry is not None:
            succ.append(index[id(inst.exn_tab_entry.target)])
        out.append(succ)
    return out


def live_locals(insts: Sequence[Instruction]) -> list[frozenset[str]]:
    """Plain (fast) locals whose current value may be read before being overwritten, at the
    start of each instruction.  Cell and free variables are not tracked (they live in cells)."""
    succ = _all_successors(insts)
    live: list[frozenset[str]] = [frozenset()] * len(insts)
    changed = True
    while changed:
        changed = False
        for k in range(len(insts) - 1, -1, -1):
            inst = insts[k]
            out: set[str] = set()
            for s in succ[k]:
                out |= live[s]
            for name, how in reversed(local_accesses(inst)):
                if how == "w":
                    out.discard(name)
                else:
                    out.add(name)
            new = frozenset(out)
            if new != live[k]:
                live[k] = new
                changed = True
    return live


def maybe_unbound(insts: Sequence[Instruction], args: Sequence[str]) -> list[frozenset[str]]:
    """Plain locals that may be unbound at the start of each instruction (reachable ones),
    given that `args` are bound on entry."""
    if not insts:
        return []
    succ = _all_successors(insts)
    slots = stack_slots(insts)
    index = {id(i): k for k, i in enumerate(insts)}
    names = frozenset(n for i in insts for n, _ in local_accesses(i))
    bound: list[frozenset[str] | None] = [None] * len(insts)
    bound[0] = frozenset(args)
    work = [0]
    while work:
        k = work.pop()
        inst, cur = insts[k], set(bound[k])
        after = set(cur)
        if inst.opname in ("DELETE_FAST", "LOAD_FAST_AND_CLEAR"):
            after.discard(inst.argval)
        depth = 1
        for name, how in local_accesses(inst):
            if how != "w":
                continue
            # storing a maybe-NULL (3.12+ restoring a comprehension variable) may unbind
            if slots[k] and len(slots[k]) >= depth and slots[k][-depth] == MAYBE_NULL:
                after.discard(name)
            elif slots[k]:
                after.add(name)
            depth += 1
        handler = index[id(inst.exn_tab_entry.target)] if inst.exn_tab_entry else None
        for s in succ[k]:
            # an exception can be raised before the instruction's own store happens
            flow = frozenset(cur if s == handler else after)
            new = flow if bound[s] is None else bound[s] & flow
            if new != bound[s]:
                bound[s] = new
                work.append(s)
    return [names - b if b is not None else names for b in bound]


# -- exception-table regions -------------------------------------------------------------------

WITH, TRY, CLEANUP = "with", "try", "cleanup"


def _handler_kinds(insts: Sequence[Instruction]) -> dict[int, str]:
    out = {}
    for k, inst in enumerate(insts):
        if inst.opname == "PUSH_EXC_INFO":
            with_ = k + 1 < len(insts) and insts[k + 1].opname == "WITH_EXCEPT_START"
            out[id(inst)] = WITH if with_ else TRY
    return out


@dataclass(frozen=True)
class Region:
    """A maximal run of instructions protected by one handler."""

    kind: str                 # WITH / TRY / CLEANUP
    start: Instruction        # first protected instruction
    end: Instruction          # last protected instruction (inclusive)
    handler: Instruction
    depth: int                # stack depth kept when the handler runs
    lasti: bool


def exception_regions(insts: Sequence[Instruction]) -> list[Region]:
    regions: list[Region] = []
    kinds = _handler_kinds(insts)
    prev = None
    for inst in insts:
        e = inst.exn_tab_entry
        if e is not None and prev is not None and prev.exn_tab_entry == e:
            last = regions[-1]
            regions[-1] = Region(last.kind, last.start, inst, last.handler, last.depth, last.lasti)
        elif e is not None:
            regions.append(Region(kinds.get(id(e.target), CLEANUP), inst, inst, e.target,
                                  e.depth, e.lasti))
        prev = inst
    return regions


# -- what each stack slot holds ----------------------------------------------------------------

VALUE, NULL, MAYBE_NULL, WITH_EXIT = "value", "null", "maybe_null", "with_exit"


def _pushes(inst: Instruction) -> tuple[int, tuple[str, ...]] | None:
    """(pops, pushed slot kinds) for opcodes that push NULL or a with-exit; None: generic."""
    name, arg = inst.opname, inst.arg or 0
    # the callable's companion slot: below it up to 3.12, above it since 3.13 (CALL's stack is
    # [callable, self_or_null, *args] there)
    pair = (lambda extra: (VALUE, extra)) if ops.PY313 else (lambda extra: (extra, VALUE))
    if name == "PUSH_NULL":
        return 0, (NULL,)
    if name == "LOAD_GLOBAL" and arg & 1:
        return 0, pair(NULL)
    if name == "LOAD_METHOD" or (name == "LOAD_ATTR" and not ops.PY311 and arg & 1):
        return 1, pair(MAYBE_NULL)
    if name == "LOAD_SUPER_ATTR":
        return 3, (pair(MAYBE_NULL) if arg & 1 else (VALUE,))
    if name == "LOAD_FAST_AND_CLEAR":
        return 0, (MAYBE_NULL,)
    if name == "BEFORE_WITH":
        return 1, (WITH_EXIT, VALUE)
    if name == "CALL":  # dis charges 3.11's PRECALL with the arguments, CALL with 2 slots
        return (2 if ops.PY311 else arg + 2), (VALUE,)
    if name == "CALL_KW":  # 3.13: the keyword names tuple on top of the arguments
        return arg + 3, (VALUE,)
    if name == "CALL_FUNCTION_EX":  # [NULL, fn, args, kwargs?] (3.13: [fn, NULL, ...]): the
        return 3 + (arg & 1), (VALUE,)  # result replaces the NULL slot too (a net effect would
        # keep its kind)
    return None


def _merge(a: tuple[str, ...], b: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for x, y in zip(a, b):
        if x == y:
            out.append(x)
        elif {x, y} <= {NULL, MAYBE_NULL, VALUE}:
            out.append(MAYBE_NULL)
        else:
            out.append(VALUE)
    return tuple(out)


def stack_slots(insts: Sequence[Instruction]) -> list[tuple[str, ...] | None]:
    """Kind of every stack slot before each instruction (bottom first): VALUE, NULL,
    MAYBE_NULL (a method load or a 3.12 comprehension save: NULL or a value at run time) or
    WITH_EXIT (the bound __exit__ a with-statement keeps on the stack).  None: unreachable."""
    index = {id(i): k for k, i in enumerate(insts)}
    state: list[tuple[str, ...] | None] = [None] * len(insts)

    def flow(k: int, st: tuple[str, ...]) -> None:
        if state[k] is None:
            state[k] = st
            work.append(k)
        else:
            merged = _merge(state[k], st)
            if merged != state[k]:
                state[k] = merged
                work.append(k)

    work: list[int] = []
    if insts:
        flow(0, ())
    while work:
        k = work.pop()
        inst, st = insts[k], state[k]
        e = inst.exn_tab_entry
        if e is not None:
            flow(index[id(e.target)], st[:e.depth] + (VALUE,) * (int(e.lasti) + 1))
        nxt = insts[k + 1] if k + 1 < len(insts) else None
        for succ, jumped in successors(inst, nxt):
            flow(index[id(succ)], _apply(inst, st, jumped))
    return state


def _apply(inst: Instruction, st: tuple[str, ...], jumped: bool) -> tuple[str, ...]:
    name = inst.opname
    if name == "COPY":
        return st + (st[-inst.arg],)
    if name == "SWAP":
        lst = list(st)
        lst[-1], lst[-inst.arg] = lst[-inst.arg], lst[-1]
        return tuple(lst)
    special = _pushes(inst)
    if special is not None:
        pops, pushed = special
        return st[:len(st) - pops] + pushed
    eff = ops.stack_effect(_real(name), _effect_arg(inst), jump=jumped)
    return st[:len(st) + min(eff, 0)] + (VALUE,) * max(eff, 0)

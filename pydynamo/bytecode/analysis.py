"""Static analysis over instruction lists: stack depth, jump targets, liveness, regions.

All functions take the list produced by `disassemble` (or built by a client) and never mutate
it.  Depths come from the interpreter's `dis.stack_effect`; an exception handler is entered with
``entry.depth + lasti + 1`` items (the stack cut to depth, the offset if lasti, the exception).
Instructions unreachable from the first one get depth None.
"""
from __future__ import annotations

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

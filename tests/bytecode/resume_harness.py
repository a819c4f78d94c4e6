"""Split a function at an instruction: run the original code up to there, then call the
resume function with the live state (the way the executor does at a graph break), and compare
with running the function whole."""
from __future__ import annotations

import types

from pydynamo.bytecode import analysis, disassemble, make_code_like
from pydynamo.bytecode.resume import make_resume_function


_NOT_STATEMENTS = ("RESUME", "MAKE_CELL", "COPY_FREE_VARS", "END_FOR")


def split_points(code: types.CodeType) -> list[int]:
    """Offsets of statement starts (first instruction of each new source line) where the
    stack holds no maybe-NULL slot and which are reachable."""
    insts = disassemble(code)
    slots = analysis.stack_slots(insts)
    out, prev_line = [], None
    for inst, st in zip(insts, slots):
        line = inst.positions.lineno if inst.positions else None
        if line is not None and line != prev_line and st is not None \
                and analysis.MAYBE_NULL not in st and inst.opname not in _NOT_STATEMENTS:
            out.append(inst.offset)
        if line is not None:
            prev_line = line
    return out


def split_function(fn: types.FunctionType, offset: int, reenter_with: bool = False):
    """A function equal to `fn` that hands over to a resume function at `offset`."""
    code = fn.__code__
    rf = make_resume_function(code, offset, reenter_with=reenter_with)
    insts = disassemble(code)
    k = next(n for n, i in enumerate(insts) if i.offset == offset)
    maybe = analysis.maybe_unbound(insts, code.co_varnames[:code.co_argcount
                                                          + code.co_kwonlyargcount])[k]
    tail = rf.emit_call(maybe_unbound=maybe, exit_contexts=reenter_with)
    old = insts[k]
    for inst in insts:  # everything that reached `offset` now reaches the hand-over
        if inst.target is old:
            inst.target = tail[0]
    for inst in insts:
        e = inst.exn_tab_entry
        if e is not None and e.target is old:
            inst.exn_tab_entry = type(e)(tail[0], e.depth, e.lasti)
    prefix = make_code_like(code, insts[:k] + tail + insts[k:])
    new = types.FunctionType(prefix, fn.__globals__, fn.__name__, fn.__defaults__, fn.__closure__)
    new.__kwdefaults__ = fn.__kwdefaults__
    return new, rf


def outcome(fn, *args, **kwargs):
    try:
        return ("ok", fn(*args, **kwargs))
    except Exception as e:  # noqa: BLE001 - the exception is the observed behaviour
        return ("raise", type(e), str(e))

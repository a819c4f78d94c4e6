"""Unit tests of Instruction / disassemble / assemble / make_code_like on edited code."""
from __future__ import annotations

import dis

import pytest

from pydynamo.bytecode import opcodes as ops
from pydynamo.bytecode import Instruction, clone_instructions, disassemble, make_code_like
from pydynamo.bytecode.analysis import stack_depths


def _fn(code, globs=None):
    import types
    return types.FunctionType(code, globs if globs is not None else globals())


def _inverse(x):
    try:
        return 1 / x
    except ZeroDivisionError:
        return None


def test_instruction_fields_from_code():
    def f(a, b=2):
        c = a + b
        if c > 3:
            return c
        return -c
    insts = disassemble(f.__code__)
    names = [i.opname for i in insts]
    assert "RESUME" in names
    load_a = next(i for i in insts if i.opname.startswith("LOAD_FAST"))
    # 3.13 loads both operands with one LOAD_FAST_LOAD_FAST, its argval the pair of names
    assert load_a.argval == (("a", "b") if ops.PY313 else "a")
    assert load_a.positions.lineno == f.__code__.co_firstlineno + 1
    jump = next(i for i in insts if i.is_jump)
    assert jump.target in insts and jump.argval == jump.target.offset
    assert all(i.offset is not None for i in insts)


def test_unknown_opcode_and_missing_target_rejected():
    with pytest.raises(ValueError):
        Instruction("NOT_AN_OPCODE")
    with pytest.raises(ValueError):
        Instruction("JUMP")


def test_insert_instructions_keeps_jumps_and_handlers():
    def f(x):
        total = 0
        for i in range(x):
            try:
                total += 10 // (i - 2)
            except ZeroDivisionError:
                total -= 100
        return total
    insts = disassemble(f.__code__)
    # prepend `x = x + 1` after RESUME: every jump/handler offset shifts
    k = next(n for n, i in enumerate(insts) if i.opname == "RESUME") + 1
    add = [Instruction("LOAD_FAST", argval="x"), Instruction("LOAD_CONST", argval=1),
           Instruction("BINARY_OP", 0), Instruction("STORE_FAST", argval="x")]
    new = make_code_like(f.__code__, insts[:k] + add + insts[k:])
    assert _fn(new)(7) == f(8)
    assert new.co_argcount == 1 and new.co_varnames[:1] == ("x",)


def test_new_locals_extended_args_and_virtual_jumps():
    # a loop body with > 256 distinct constants forces EXTENDED_ARG on loads and on the
    # backward jump; the direction-free "JUMP" / "POP_JUMP_IF_FALSE" names are resolved
    def f(n):
        return n
    code = f.__code__
    loop_top = Instruction("LOAD_FAST", argval="i")
    exit_ = Instruction("LOAD_FAST", argval="acc")
    body = [Instruction("RESUME", 0),
            Instruction("LOAD_CONST", argval=0), Instruction("STORE_FAST", argval="acc"),
            Instruction("LOAD_CONST", argval=0), Instruction("STORE_FAST", argval="i"),
            loop_top, Instruction("LOAD_FAST", argval="n"), Instruction("COMPARE_OP",
                                                                       argval="<"),
            Instruction("POP_JUMP_IF_FALSE", target=exit_)]
    for v in range(300):
        body += [Instruction("LOAD_FAST", argval="acc"), Instruction("LOAD_CONST",
                 argval=f"c{v}"), Instruction("POP_TOP"), Instruction("STORE_FAST",
                 argval="acc")]
    body += [Instruction("LOAD_FAST", argval="acc"), Instruction("LOAD_CONST", argval=1000),
             Instruction("BINARY_OP", 0), Instruction("STORE_FAST", argval="acc"),
             Instruction("LOAD_FAST", argval="i"), Instruction("LOAD_CONST", argval=1),
             Instruction("BINARY_OP", 0), Instruction("STORE_FAST", argval="i"),
             Instruction("JUMP", target=loop_top), exit_, Instruction("RETURN_VALUE")]
    new = make_code_like(code, body)
    assert new.co_varnames == ("n", "acc", "i")
    assert _fn(new)(3) == 3000 and _fn(new)(0) == 0
    raw = [i.opname for i in dis.get_instructions(new)]
    assert "EXTENDED_ARG" in raw and "JUMP_BACKWARD" in raw
    assert any(i.is_jump and i.opname != "JUMP" for i in body)  # made concrete in place


def test_clone_remaps_targets_and_entries():
    f = _inverse
    insts = disassemble(f.__code__)
    copy = clone_instructions(insts)
    ids = {id(i) for i in copy}
    assert all(id(i.target) in ids for i in copy if i.target is not None)
    assert all(id(i.exn_tab_entry.target) in ids for i in copy if i.exn_tab_entry)
    assert not {id(i) for i in insts} & ids
    g = _fn(make_code_like(f.__code__, copy))
    assert g(4) == 0.25 and g(0) is None


def test_inconsistent_stack_is_reported():
    def f():
        return 1
    top = Instruction("RETURN_VALUE")
    insts = [Instruction("RESUME", 0), Instruction("LOAD_CONST", argval=1),
             Instruction("JUMP", target=top), Instruction("LOAD_CONST", argval=2), top]
    insts.insert(3, Instruction("LOAD_CONST", argval=3))
    # LOAD_CONST 3 / LOAD_CONST 2 are dead; the live path reaches RETURN_VALUE with depth 1
    assert stack_depths(insts)[-1] == 1
    bad = [Instruction("RESUME", 0), Instruction("POP_TOP"), Instruction("RETURN_VALUE")]
    with pytest.raises(ValueError, match="underflow"):
        make_code_like(f.__code__, bad)


def test_foreign_handler_reference_is_rejected():
    f = _inverse
    insts = disassemble(f.__code__)
    covered = next(i for i in insts if i.exn_tab_entry is not None)
    copy = Instruction(covered.opname, covered.arg, covered.argval,
                       exn_tab_entry=covered.exn_tab_entry)
    body = [Instruction("RESUME", 0), copy, Instruction("RETURN_VALUE")]
    with pytest.raises(ValueError, match="exception handler"):
        make_code_like(f.__code__, body)

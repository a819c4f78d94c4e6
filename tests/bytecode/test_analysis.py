"""Analysis: stack slot kinds, liveness, maybe-unbound, jump targets, exception regions, and
the opcode tables read from the running interpreter."""
from __future__ import annotations

import dis

import pytest

from pydynamo.bytecode import Instruction, analysis, disassemble, emit, make_code_like
from pydynamo.bytecode import opcodes as ops

from . import resume_corpus as corpus


def _at_line(fn, rel_line):
    """First instruction of line co_firstlineno + rel_line."""
    insts = disassemble(fn.__code__)
    line = fn.__code__.co_firstlineno + rel_line
    k = next(k for k, i in enumerate(insts) if i.positions and i.positions.lineno == line)
    return insts, k


def test_every_opcode_is_described():
    import opcode
    # 3.12+ list the opcodes with an argument (3.13's WITH_EXCEPT_START sits at HAVE_ARGUMENT
    # and takes none); 3.11 has only the threshold
    hasarg = set(getattr(opcode, "hasarg", range(dis.HAVE_ARGUMENT, 256)))
    for name, op in ops.OPMAP.items():
        kind = ops.arg_kind(name)
        assert (kind is None) == (op not in hasarg), name
        assert ops.OPNAME[op] == name
    assert ops.directed("JUMP", True) == "JUMP_BACKWARD"
    with pytest.raises(ValueError):
        ops.directed("FOR_ITER", True)


def with_and_try(a):
    with corpus.Rec("x"):
        try:
            b = a + 1
        except ValueError:
            b = 0
    return b


def test_regions_and_slots_inside_with_and_try():
    insts, k = _at_line(with_and_try, 3)  # b = a + 1
    slots = analysis.stack_slots(insts)[k]
    assert slots == (analysis.WITH_EXIT,)
    regions = analysis.exception_regions(insts)
    kinds = {r.kind for r in regions}
    assert kinds == {analysis.WITH, analysis.TRY, analysis.CLEANUP}
    (mine,) = [r for r in regions if insts.index(r.start) <= k <= insts.index(r.end)]
    assert mine.kind == analysis.TRY and mine.depth == 1 and not mine.lasti
    with_regions = [r for r in regions if r.kind == analysis.WITH]
    assert all(r.depth == 1 and r.lasti for r in with_regions)
    targets = analysis.jump_targets(insts)
    assert mine.handler in targets and all(r.handler in targets for r in regions)


def calls(x):
    return max(x,
               len(str(x)))


def _call_pair(extra):
    """A callable's two slots: NULL/self below the callable up to 3.12, above it on 3.13."""
    return (analysis.VALUE, extra) if ops.PY313 else (extra, analysis.VALUE)


def test_null_and_method_slots():
    insts, k = _at_line(calls, 2)  # len(str(x)) starts: stack NULL, max, x (3.13: max, NULL, x)
    assert analysis.stack_slots(insts)[k] == _call_pair(analysis.NULL) + (analysis.VALUE,)
    code = compile("def m(o):\n    return o.f(\n        1)\n", "<m>", "exec").co_consts[0]
    insts = disassemble(code)
    slots = analysis.stack_slots(insts)
    one = next(k for k, i in enumerate(insts) if i.opname == "LOAD_CONST" and i.argval == 1)
    assert slots[one] == _call_pair(analysis.MAYBE_NULL)


def liveness(a, b):
    c = a + 1
    if b:
        d = c
    return c + b


def test_liveness_and_maybe_unbound():
    insts, k = _at_line(liveness, 2)  # if b:
    live = analysis.live_locals(insts)
    assert live[k] == {"b", "c"}
    insts, k0 = _at_line(liveness, 1)
    assert live[k0] == {"a", "b"}
    insts, k4 = _at_line(liveness, 4)  # return c + b: d is dead, may be unbound
    unbound = analysis.maybe_unbound(insts, ["a", "b"])
    assert "d" in unbound[k4] and "c" not in unbound[k4] and "d" not in live[k4]


def test_depths_match_cpython_and_dead_code_is_none():
    for fn in (with_and_try, calls, liveness, corpus.try_blocks, corpus.with_blocks):
        insts = disassemble(fn.__code__)
        assert analysis.max_stack_depth(insts) == fn.__code__.co_stacksize
    ret = Instruction("RETURN_VALUE")
    insts = [Instruction("RESUME", 0), *emit.load_const(1), ret, *emit.load_const(2), ret]
    insts[-1] = Instruction("RETURN_VALUE")
    assert analysis.stack_depths(insts) == [0, 0, 1, None, None]


def test_prologue_is_checked():
    def outer(a):
        def inner():
            return a
        return inner
    body = emit.load_const(None) + emit.return_value()
    with pytest.raises(ValueError, match="prologue"):
        make_code_like(outer.__code__, [Instruction("RESUME", 0)] + body)
    with pytest.raises(ValueError, match="RESUME"):
        make_code_like(outer.__code__, body)
    new = make_code_like(outer.__code__, emit.prologue(outer.__code__) + body)
    assert new.co_cellvars == ("a",)

"""Resume functions: split functions at every statement start and compare prefix + resume
with the original (results, exceptions, side effects); caching; torch.no_grad re-entry."""
from __future__ import annotations

import dis
import linecache
import sys
import types

import pytest

from pydynamo.bytecode import analysis, disassemble, make_resume_function
from pydynamo.bytecode.resume import UNBOUND, clear_cache

from . import resume_corpus as corpus
from .resume_harness import outcome, split_function, split_points


def _split_at(code, snippet):
    """The split point at the start of the source line containing `snippet`."""
    lines = linecache.getlines(code.co_filename)
    insts = {i.offset: i for i in disassemble(code)}
    return next(o for o in split_points(code)
                if snippet in lines[insts[o].positions.lineno - 1])


def _observe(fn, args):
    corpus.LOG.clear()
    kwargs = {"extra": 1} if fn.__name__ == "calls" else {}
    res = outcome(fn, *args, **kwargs)
    return res, list(corpus.LOG)


@pytest.mark.parametrize("fn,argsets", corpus.CASES, ids=[f.__name__ for f, _ in corpus.CASES])
def test_split_at_every_statement(fn, argsets):
    points = split_points(fn.__code__)
    assert len(points) >= 4
    for offset in points:
        split, rf = split_function(fn, offset)
        assert rf.name.startswith(f"__resume_at_{offset}_")   # installed under; shown as:
        assert rf.code.co_name.startswith(f"{fn.__name__} (resumed at ") and rf.code.co_name.endswith(")")
        for args in argsets:
            assert _observe(split, args) == _observe(fn, args), (fn.__name__, offset, args)


def test_splits_cover_loops_with_and_try():
    # statement starts inside a loop body, a with-body and a try-body are all among the splits
    code = corpus.with_blocks.__code__
    insts = disassemble(code)
    slots = dict(zip((i.offset for i in insts), analysis.stack_slots(insts)))
    kinds = [slots[o] for o in split_points(code)]
    assert any(s.count(analysis.WITH_EXIT) == 2 for s in kinds)  # nested with, in the loop
    code = corpus.try_blocks.__code__
    insts = disassemble(code)
    covered = {i.offset for i in insts if i.exn_tab_entry is not None}
    assert covered & set(split_points(code))


def test_same_layout_gives_same_code_object():
    code = corpus.loops.__code__
    offset = split_points(code)[3]
    a = make_resume_function(code, offset)
    b = make_resume_function(code, offset)
    assert a is b and a.code is b.code
    other = make_resume_function(code, split_points(code)[4])
    assert other.code is not a.code
    wider = make_resume_function(code, offset, live_locals=set(a.local_args) | {"k"})
    assert wider.code is not a.code and "k" in wider.local_args
    clear_cache()
    assert make_resume_function(code, offset).code is not a.code


def test_resume_arguments_and_closure_cells():
    code = corpus.closures.__code__
    offset = _split_at(code, "return total, count")
    rf = make_resume_function(code, offset)
    assert rf.closure == ("count",) and rf.code.co_freevars == ("count",)
    assert rf.local_args == ("total",)
    cell = types.CellType(7)
    fn = rf.make_function(corpus.__dict__, [cell])
    assert fn(40) == (40, 7)


def test_reenter_with_passes_context_manager():
    fn = corpus.with_blocks
    code = fn.__code__
    insts = disassemble(code)
    slots = dict(zip((i.offset for i in insts), analysis.stack_slots(insts)))
    reentries = 0
    for offset in split_points(code):
        rf = make_resume_function(code, offset, reenter_with=True)
        assert rf.reenter_slots == tuple(i for i, s in enumerate(slots[offset])
                                         if s == analysis.WITH_EXIT)
        split, _ = split_function(fn, offset, reenter_with=True)
        for args in [(0,), (4,)]:
            got, log = _observe(split, args)
            want, wlog = _observe(fn, args)
            assert got == want
            # each hand-over exits the active blocks (innermost first) and the resume function
            # enters them again (outermost first); without those pairs the logs agree
            stripped = _strip_reentry(log)
            assert stripped == wlog
            reentries += (len(log) - len(stripped)) // 2
    assert reentries >= 10


def _strip_reentry(log):
    out = []
    for item in log:
        if out and item[0] == "enter" and out[-1] == ("exit", item[1], None):
            out.pop()
        else:
            out.append(item)
    return out


def test_unbound_locals_are_deleted_again():
    code = corpus.unbound_locals.__code__
    offset = _split_at(code, 'LOG.append("before")')  # y may be unbound here
    rf = make_resume_function(code, offset)
    assert "y" in rf.local_args
    fn = rf.make_function(corpus.__dict__)
    with pytest.raises(UnboundLocalError):
        fn(0, UNBOUND)
    assert fn(4, 4) == 4


def test_misuse_is_rejected():
    code = corpus.calls.__code__
    insts = disassemble(code)
    slots = analysis.stack_slots(insts)
    maybe = next(i for i, s in zip(insts, slots) if s and analysis.MAYBE_NULL in s)
    with pytest.raises(ValueError, match="null_slots"):
        make_resume_function(code, maybe.offset)
    k = insts.index(maybe)
    idx = slots[k].index(analysis.MAYBE_NULL)
    ok = make_resume_function(code, maybe.offset, null_slots=[idx])
    assert idx in ok.null_slots
    with pytest.raises(ValueError, match="stack depth"):
        make_resume_function(code, maybe.offset, nstack=99, null_slots=[idx])
    first = split_points(code)[0]
    with pytest.raises(ValueError, match="live locals missing"):
        make_resume_function(code, first, live_locals=())
    with pytest.raises(ValueError, match="no instruction"):
        make_resume_function(code, 1)

    if "KW_NAMES" in dis.opmap:  # 3.11/3.12: keyword names live in a register, not the stack
        after_kw = next(b for a, b in zip(insts, insts[1:]) if a.opname == "KW_NAMES")
        with pytest.raises(ValueError, match="call sequence"):
            make_resume_function(code, after_kw.offset, null_slots=range(len(slots[k])))

    def gen():
        yield 1
    with pytest.raises(ValueError, match="plain function"):
        make_resume_function(gen.__code__, 2)


def test_zero_argument_super_keeps_self_first():
    fn = corpus.Child.val
    offset = _split_at(fn.__code__, "r = super().val(t)")
    rf = make_resume_function(fn.__code__, offset)
    assert rf.params[0] == "self" and "t" in rf.params
    resume = rf.make_function(corpus.__dict__, [c for c in fn.__closure__])
    corpus.LOG.clear()
    assert resume(*rf.arguments([], {"self": corpus.Child(), "t": 3})) == 7
    assert corpus.LOG == [("base", 3)]


def many_locals(c0, c1, c2, c3, c4, c5, c6, c7, c8, c9, c10, c11, c12, c13, a, b):
    for _ in range(3):
        a, b = b, a
        c13 += a - b
    return (a, b, c0 + c1 + c2 + c3 + c4 + c5 + c6 + c7 + c8 + c9 + c10 + c11 + c12 + c13)


def test_local_pairs_past_index_15_are_split():
    # 3.13 reads/writes a, b (slots 14, 15) with LOAD_FAST_LOAD_FAST / STORE_FAST_STORE_FAST; in
    # a resume function inside the loop the iterator's stack slot comes first and moves them to
    # 15, 16, past what a 4-bit pair index holds: the assembler splits the pair (regression)
    code = many_locals.__code__
    args = tuple(range(14)) + (100, 7)
    pairs = [i for i in disassemble(code) if i.opname in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_STORE_FAST")]
    assert bool(pairs) == (sys.version_info >= (3, 13))
    split_any = False
    for offset in split_points(code):
        split, rf = split_function(many_locals, offset)
        assert outcome(split, *args) == outcome(many_locals, *args), offset
        names = rf.code.co_varnames
        split_any |= names.index("b") > 15 and any(i.argval == "b" for i in disassemble(rf.code))
    assert split_any or not pairs

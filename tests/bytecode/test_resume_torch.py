"""Resume inside `with torch.no_grad():` -- grad mode must still be off in the resumed code,
whether the caller keeps the context entered or exits it and lets the resume function re-enter."""
from __future__ import annotations

import torch

from pydynamo.bytecode import UNBOUND, analysis, disassemble, make_resume_function

from .resume_harness import split_function, split_points
from .test_resume import _split_at


def f(x):
    y = x * 2
    with torch.no_grad():
        a = x * 3
        g1 = torch.is_grad_enabled()
        b = a + y
        g2 = torch.is_grad_enabled()
    c = b * x
    return a, b, c, g1, g2, torch.is_grad_enabled()


def test_no_grad_still_active_after_resume():
    x = torch.randn(4, requires_grad=True)
    want = f(x)
    insts = disassemble(f.__code__)
    slots = dict(zip((i.offset for i in insts), analysis.stack_slots(insts)))
    inside = [o for o in split_points(f.__code__) if analysis.WITH_EXIT in slots[o]]
    assert len(inside) >= 3
    for offset in split_points(f.__code__):
        for reenter in (False, True):
            split, rf = split_function(f, offset, reenter_with=reenter)
            got = split(x)
            assert got[3:] == want[3:] == (False, False, True)
            for g, w in zip(got[:3], want[:3]):
                assert torch.equal(g, w) and g.requires_grad == w.requires_grad
            assert torch.is_grad_enabled()
    # called directly, as the executor's code does: grad mode is on at the call, the resume
    # function re-enters the no_grad() object it is given
    offset = _split_at(f.__code__, "g2 = torch.is_grad_enabled()")
    assert offset in inside
    rf = make_resume_function(f.__code__, offset, reenter_with=True)
    assert rf.reenter_slots == (0,) and rf.stack_args == (0,)
    # g2 counts as live: were the exception suppressed by __exit__, `return` would read it
    env = {"x": x, "y": want[0] / 3 * 2, "a": want[0], "b": want[1], "g1": False,
           "g2": UNBOUND}
    fn = rf.make_function(globals())
    assert torch.is_grad_enabled()
    got = fn(*rf.arguments([torch.no_grad()], env))
    assert got[4] is False and got[5] is True and torch.is_grad_enabled()
    assert not got[1].requires_grad and got[2].requires_grad

"""Property tests on generated functions (see program_gen): behaviour is identical after a
disassemble/assemble round trip (nested code objects too), and when split at a statement start
into prefix + resume function.  The split test samples up to 8 statement starts per generated
function (test_resume.py splits its fixed corpus at every statement start)."""
from __future__ import annotations

import types

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pydynamo.bytecode import disassemble, make_code_like

from . import resume_corpus as corpus
from .program_gen import ARGS, build, programs
from .resume_harness import outcome, split_function, split_points

SETTINGS = dict(deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _roundtrip(code: types.CodeType) -> types.CodeType:
    new = make_code_like(code, disassemble(code))
    consts = tuple(_roundtrip(c) if isinstance(c, types.CodeType) else c
                   for c in new.co_consts)
    return new.replace(co_consts=consts)


def _namespace() -> dict:
    return {"LOG": corpus.LOG, "Rec": corpus.Rec}


def _observe(fn, args):
    corpus.LOG.clear()
    res = outcome(fn, *args)
    return res, list(corpus.LOG)


@settings(max_examples=60, **SETTINGS)
@given(programs())
def test_roundtrip_preserves_behaviour(source):
    f = build(source, _namespace())
    code = f.__code__
    g = types.FunctionType(_roundtrip(code), f.__globals__)
    assert g.__code__.co_code == code.co_code
    for args in ARGS:
        assert _observe(g, args) == _observe(f, args), source


@settings(max_examples=25, **SETTINGS)
@given(programs(), st.data())
def test_split_anywhere_preserves_behaviour(source, data):
    f = build(source, _namespace())
    points = split_points(f.__code__)
    if len(points) > 8:
        points = data.draw(st.lists(st.sampled_from(points), min_size=8, max_size=8,
                                    unique=True))
    for offset in points:
        split, _ = split_function(f, offset)
        for args in ARGS[:2]:
            assert _observe(split, args) == _observe(f, args), (source, offset, args)

"""Exceptions in guards, in the callback and in replacement code surface as ordinary Python
exceptions in the caller, leak nothing, and leave the cache and the thread's setting usable."""
import sys
import traceback
import weakref

import pytest

from pydynamo import _C
from hookutil import Recorder, hooked, only_tests, with_const


class Token:
    """An argument whose refcount and lifetime the tests watch."""


def add(x, y):
    return (x, y, 10)


class GuardError(Exception):
    pass


def test_guard_exception_propagates_and_cache_keeps_working():
    mode = {"raise": False}

    def guard(L):
        if mode["raise"]:
            raise GuardError("bad guard")
        return True

    rec = Recorder({add.__code__: with_const(add, 10, 20)}, guard=guard)
    t = Token()
    base = sys.getrefcount(t)
    with hooked(rec):
        assert add(t, 1) == (t, 1, 20)
        mode["raise"] = True
        for _ in range(50):
            with pytest.raises(GuardError, match="bad guard"):
                add(t, 1)
        assert _C.get_eval_frame() is rec  # setting intact
        mode["raise"] = False
        assert add(t, 2) == (t, 2, 20)
    assert len(rec.calls) == 1
    rec.calls.clear()  # it held the first call's inputs
    assert sys.getrefcount(t) == base  # the original frame's arguments were released (3.12)


def test_guard_returning_unconvertible_truth_value():
    class NoBool:
        def __bool__(self):
            raise GuardError("no truth")

    rec = Recorder({add.__code__: with_const(add, 10, 20)}, guard=lambda L: NoBool())
    with hooked(rec):
        add(1, 2)
        with pytest.raises(GuardError, match="no truth"):
            add(1, 2)


def test_callback_exception_propagates_state_intact():
    t = Token()
    base = sys.getrefcount(t)

    @only_tests
    def cb(code, inputs, *rest):
        raise KeyError("from callback")

    with hooked(cb):
        for _ in range(20):
            with pytest.raises(KeyError, match="from callback"):
                add(t, 1)
        assert _C.get_eval_frame() is cb
    assert sys.getrefcount(t) == base
    assert _C.get_cache_entries(add.__code__) == []


@pytest.mark.parametrize("verdict", [42, (1, 2), (lambda L: True,), "skip", [lambda L: True, None]])
def test_malformed_callback_result_is_type_error(verdict):
    with hooked(only_tests(lambda *a: verdict)):
        with pytest.raises(TypeError):
            add(1, 2)
    assert _C.get_cache_entries(add.__code__) == []


def test_replacement_not_a_code_object():
    with hooked(only_tests(lambda *a: (lambda L: True, "not code"))):
        with pytest.raises(TypeError, match="code object"):
            add(1, 2)


def _gen():
    yield 1


@pytest.mark.parametrize("other", [
    lambda x: x,                         # too few arguments
    lambda y, x: (x, y),                  # names differ
    lambda x, y, *a: (x, y),              # *args added
    lambda x, *, y: (x, y),               # keyword-only instead of positional
])
def test_layout_mismatch_is_value_error(other):
    with hooked(only_tests(lambda code, *a: (lambda L: True, other.__code__) if code is add.__code__ else None)):
        with pytest.raises(ValueError, match="cannot stand in"):
            add(1, 2)
    assert _C.get_cache_entries(add.__code__) == []


def test_generator_or_free_var_mismatch_is_value_error():
    k = 3

    def closure(x, y):
        return x + k

    for bad in (_gen.__code__.replace(co_varnames=("x", "y"), co_argcount=2, co_nlocals=2),
                closure.__code__):
        with hooked(only_tests(lambda code, *a: (lambda L: True, bad) if code is add.__code__ else None)):
            with pytest.raises(ValueError):
                add(1, 2)


def fails(x):
    return x / 1


def test_replacement_exception_traceback_shows_replacement_frame():
    repl = with_const(fails, 1, 0)
    t = Token()
    wr = weakref.ref(t)
    with hooked(Recorder({fails.__code__: repl})):
        for _ in range(3):
            with pytest.raises(TypeError) as info:
                fails(t)  # Token / 0 -> TypeError raised inside the replacement
    frames = [fs for fs in traceback.extract_tb(info.value.__traceback__)]
    assert frames[-1].name == "fails" and frames[-1].line.strip() == "return x / 1"
    # the traceback's frame is the shadow, kept alive by the traceback: its locals are intact
    tb = info.value.__traceback__
    while tb.tb_next is not None:
        tb = tb.tb_next
    assert tb.tb_frame.f_code is repl
    assert tb.tb_frame.f_locals["x"] is t
    del tb, info
    del t
    assert wr() is None  # nothing else kept the argument alive


def escape(x):
    return sys._getframe(), x + 1


def test_frame_escaping_via_getframe_stays_valid():
    repl = with_const(escape, 1, 2)
    with hooked(Recorder({escape.__code__: repl})):
        results = [escape(i) for i in range(5)]
    here = sys._getframe()
    for i, (fr, val) in enumerate(results):
        assert val == i + 2
        assert fr.f_code is repl
        assert fr.f_locals == {"x": i}
        back = fr.f_back
        while back is not None and back.f_code is not here.f_code:
            back = back.f_back  # comprehension frames on 3.11
        assert back is here
    del results


def test_locals_freed_after_call():
    def keep(x):
        y = [x]
        return len(y) * 10

    t = Token()
    wr = weakref.ref(t)
    with hooked(Recorder({keep.__code__: with_const(keep, 10, 11)})):
        assert keep(t) == 11
        assert keep(t) == 11
    del t
    assert wr() is None

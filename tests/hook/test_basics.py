"""Cache behaviour of the C hook: replacement runs, hit/miss counts, most-recent-first order,
skip / run-only marks, modes, per-call install."""
import random

import pytest

from pydynamo import _C
from hookutil import Recorder, hooked, only_tests, with_const


def scale(x):
    return x * 10


def test_replacement_runs_and_is_cached():
    x = random.randint(1, 10**6)
    rec = Recorder({scale.__code__: with_const(scale, 10, 1000)})
    with hooked(rec):
        assert scale(x) == x * 1000
        assert scale(x + 1) == (x + 1) * 1000
    assert rec.calls == [("scale", {"x": x}, 0)]  # second call was a hit
    assert scale(x) == x * 10  # hook off: original
    entries = _C.get_cache_entries(scale.__code__)
    assert len(entries) == 1 and entries[0][1] is rec.table[scale.__code__]


def test_guard_hits_misses_and_mru_order():
    codes = {k: with_const(scale, 10, k) for k in (100, 200, 300)}
    hits = {k: 0 for k in codes}

    def guard_for(k):
        def guard(L):
            ok = L["x"] % 3 == k // 100 - 1
            hits[k] += ok
            return ok
        guard.k = k
        return guard

    def cb(code, inputs, g, b, entries):
        k = (inputs["x"] % 3 + 1) * 100
        return (guard_for(k), codes[k])

    misses = []
    def counting_cb(*a):
        misses.append(a[1]["x"])
        assert [e[0].k for e in a[4]] == [e[0].k for e in _C.get_cache_entries(scale.__code__)]
        return cb(*a)

    with hooked(only_tests(counting_cb)):
        for x in [3, 4, 5, 6, 7, 8, 5]:
            assert scale(x) == x * ((x % 3 + 1) * 100)
    assert misses == [3, 4, 5]  # one compile per guard class, then hits
    order = [e[0].k for e in _C.get_cache_entries(scale.__code__)]
    assert order == [300, 200, 100]  # last hits: x=5 (300), x=7 (200), x=6 (100)
    assert hits == {100: 1, 200: 1, 300: 2}  # compiles run the new code without its guard


def test_truthy_guard_results_and_none_verdict():
    calls = []
    def cb(code, inputs, g, b, entries):
        calls.append(len(entries))
        if len(entries) == 0:
            return ([], with_const(scale, 10, 7))  # list is not callable: TypeError
        return None
    with hooked(only_tests(cb)):
        with pytest.raises(TypeError):
            scale(2)
    guards = iter([1, 0, "yes"])
    with hooked(only_tests(lambda *a: ((lambda L: next(guards)), with_const(scale, 10, 5)))):
        assert scale(2) == 10  # compiled now, guard not consulted
        assert scale(2) == 10  # guard -> 1 (truthy)
        # guard -> 0: miss, callback adds a second entry (front) and runs it
        assert scale(3) == 15


def test_none_verdict_runs_original_and_asks_again():
    rec = Recorder()
    with hooked(rec):
        assert scale(4) == 40 and scale(5) == 50
    assert rec.names() == ["scale", "scale"]
    assert _C.get_cache_entries(scale.__code__) == []


def test_skip_code_never_offered_again():
    seen = []
    @only_tests
    def cb(code, *a):
        seen.append(code.co_name)
        return _C.SKIP_CODE
    with hooked(cb):
        for i in range(5):
            assert scale(i) == i * 10
    assert seen == ["scale"]
    assert _C.get_code_state(scale.__code__) == "skip"
    _C.clear_code(scale.__code__)
    assert _C.get_code_state(scale.__code__) == "default"
    with hooked(cb):
        scale(1)
    assert seen == ["scale", "scale"]


def test_run_only_verdict_serves_entries_without_callback():
    state = {"n": 0}
    @only_tests
    def cb(code, inputs, g, b, entries):
        state["n"] += 1
        if state["n"] == 1:
            return (lambda L: L["x"] > 0, with_const(scale, 10, 3))
        return _C.RUN_ONLY
    with hooked(cb):
        assert scale(2) == 6
        assert scale(-2) == -20  # miss -> RUN_ONLY -> original
        assert scale(-3) == -30  # run-only: no callback
        assert scale(4) == 12  # entry still served
    assert state["n"] == 2
    assert _C.get_code_state(scale.__code__) == "run_only"


def test_run_only_thread_mode():
    rec = Recorder({scale.__code__: with_const(scale, 10, 2)}, guard=lambda L: L["x"] < 100)
    with hooked(rec):
        assert scale(1) == 2
    with hooked(False):
        assert _C.get_eval_frame() is False
        assert scale(5) == 10  # hit
        assert scale(500) == 5000  # miss: original, never compiles
    assert len(rec.calls) == 1


def test_code_state_marks_and_errors():
    _C.set_code_state(scale.__code__, "skip")
    rec = Recorder({scale.__code__: with_const(scale, 10, 2)})
    with hooked(rec):
        assert scale(3) == 30
    assert rec.calls == []
    _C.set_code_state(scale.__code__, "default")
    with hooked(rec):
        assert scale(3) == 6
    with pytest.raises(ValueError):
        _C.set_code_state(scale.__code__, "bogus")
    with pytest.raises(TypeError):
        _C.get_cache_entries(scale)
    with pytest.raises(TypeError):
        _C.set_eval_frame(42)


def test_hook_installed_only_while_a_callback_is_set():
    assert not _C.hook_installed() and _C.active_threads() == 0
    with hooked(False):
        assert _C.hook_installed() and _C.active_threads() == 1
        with hooked(None):
            assert not _C.hook_installed() and _C.active_threads() == 0
            with hooked(Recorder()):
                assert _C.hook_installed()
        assert _C.hook_installed()
    assert not _C.hook_installed()


def test_set_eval_frame_returns_previous_so_calls_nest():
    a, b = Recorder(), Recorder()
    assert _C.set_eval_frame(a) is None
    assert _C.set_eval_frame(b) is a
    assert _C.get_eval_frame() is b
    assert _C.set_eval_frame(None) is b
    assert _C.get_eval_frame() is None


def test_clear_all_drops_every_code():
    def other(x):
        return x + 10
    rec = Recorder({scale.__code__: with_const(scale, 10, 2), other.__code__: with_const(other, 10, 2)})
    before = _C.cached_code_count()
    with hooked(rec):
        scale(1), other(1)
    assert _C.cached_code_count() == before + 2
    _C.clear_all()
    assert _C.get_cache_entries(scale.__code__) == [] == _C.get_cache_entries(other.__code__)
    assert _C.cached_code_count() == 0

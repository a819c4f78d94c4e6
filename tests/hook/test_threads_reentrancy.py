"""Per-thread settings, and re-entrancy: frames run by guards and the callback are never
intercepted; set_eval_frame / clear_code from inside guards, callbacks and replacement code."""
import threading

from pydynamo import _C
from hookutil import Recorder, hooked, is_test_code, only_tests, with_const


def work(x):
    return x * 10


def helper(x):
    return x + 1


def test_two_threads_with_different_callbacks():
    code_a, code_b = with_const(work, 10, 100), with_const(work, 10, 1000)
    seen = {"a": [], "b": []}
    ready = threading.Barrier(2)
    results = {}

    def make_cb(name, code):
        @only_tests
        def cb(c, inputs, *rest):
            if c is not work.__code__:
                return None
            seen[name].append(threading.current_thread().name)
            return (lambda L, name=name: threading.current_thread().name == name, code)
        return cb

    def run(name, code):
        with hooked(make_cb(name, code)):
            ready.wait()
            results[name] = [work(i) for i in range(200)]
            ready.wait()
            results[name + "_setting"] = _C.get_eval_frame() is not None

    ta = threading.Thread(target=run, args=("a", code_a), name="a")
    tb = threading.Thread(target=run, args=("b", code_b), name="b")
    ta.start(); tb.start(); ta.join(); tb.join()
    assert results["a"] == [i * 100 for i in range(200)]
    assert results["b"] == [i * 1000 for i in range(200)]
    assert seen["a"] == ["a"] and seen["b"] == ["b"]  # each thread compiled once, on its own cb
    assert results["a_setting"] and results["b_setting"]
    assert _C.active_threads() == 0 and not _C.hook_installed()


def test_other_thread_not_intercepted_while_main_has_callback():
    rec = Recorder({work.__code__: with_const(work, 10, 100)})
    out = []
    with hooked(rec):
        assert work(1) == 100
        t = threading.Thread(target=lambda: out.append((work(2), _C.get_eval_frame())))
        t.start(); t.join()
        assert _C.active_threads() == 1
    assert out == [(20, None)]
    assert rec.names().count("work") == 1


def test_install_follows_active_thread_count():
    inside = threading.Event()
    release = threading.Event()

    def worker():
        with hooked(False):
            inside.set()
            release.wait()

    t = threading.Thread(target=worker)
    t.start()
    inside.wait()
    assert _C.active_threads() == 1 and _C.hook_installed()
    with hooked(Recorder()):
        assert _C.active_threads() == 2
    assert _C.active_threads() == 1 and _C.hook_installed()
    release.set(); t.join()
    assert _C.active_threads() == 0 and not _C.hook_installed()


def test_callback_not_reentered_by_frames_it_runs():
    rec_inner = []

    @only_tests
    def cb(code, inputs, *rest):
        rec_inner.append(code.co_name)
        helper(1)  # a hooked-looking call made by the callback itself
        work(3)
        return (lambda L: helper(L["x"]) > 0, with_const(work, 10, 7))

    with hooked(cb):
        assert work(2) == 14
        assert work(5) == 35  # guard calls helper: not intercepted either
    assert rec_inner == ["work"]


def test_set_eval_frame_inside_callback_guard_and_replacement():
    other = Recorder()

    def guard(L):
        prev = _C.set_eval_frame(other)
        _C.set_eval_frame(prev)
        return True

    def replacement_body(x):
        prev = _C.set_eval_frame(None)
        try:
            return helper(x) * 100  # runs unhooked
        finally:
            _C.set_eval_frame(prev)

    def target(x):
        prev = _C.set_eval_frame(None)
        try:
            return helper(x) * 10
        finally:
            _C.set_eval_frame(prev)

    repl = replacement_body.__code__.replace(co_name="target")

    @only_tests
    def cb(code, inputs, *rest):
        if code is not target.__code__:
            return None
        prev = _C.set_eval_frame(other)  # switching inside the callback
        assert prev is cb_ref[0]
        _C.set_eval_frame(prev)
        return (guard, repl)

    cb_ref = [cb]
    with hooked(cb):
        assert target(1) == 200
        assert target(2) == 300
        assert _C.get_eval_frame() is cb
    assert other.calls == []


def test_callback_calling_hooked_functions_with_its_own_setting():
    @only_tests
    def cb(code, inputs, *rest):
        if code is work.__code__:
            # a nested compile scope started by the callback: its frames are still not hooked
            with hooked(Recorder({helper.__code__: with_const(helper, 1, 50)})):
                assert helper(1) == 2
            return (lambda L: True, with_const(work, 10, 9))
        return None

    with hooked(cb):
        assert work(1) == 9
        assert helper(1) == 2


def test_clear_from_inside_guard_and_callback_is_safe():
    calls = {"n": 0}

    def guard(L):
        _C.clear_code(work.__code__)  # drops the very entry being checked
        return True

    @only_tests
    def cb(code, inputs, *rest):
        if code is not work.__code__:
            return None
        calls["n"] += 1
        _C.clear_all()
        return (guard, with_const(work, 10, 3))

    with hooked(cb):
        for i in range(5):
            assert work(i) == i * 3
    # calls alternate: compile (clears all, inserts) / hit (guard drops the entry, which still
    # runs this once) / compile again ...
    assert calls["n"] == 3
    assert _C.get_cache_entries(work.__code__) != []


def test_thread_exiting_with_callback_set_is_safe():
    """No per-thread destructor: the setting leaks (hook stays installed) but nothing breaks.
    Run in a child process so the leaked installation does not reach other tests."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import threading
        from pydynamo import _C

        def f(x):
            return x + 1

        def g(x):
            return x + 100

        t = threading.Thread(target=lambda: _C.set_eval_frame(lambda *a: None))
        t.start(); t.join()
        assert _C.active_threads() == 1 and _C.hook_installed()
        prev = _C.set_eval_frame(lambda c, *a: ((lambda L: True), g.__code__) if c is f.__code__ else None)
        assert [f(i) for i in range(3)] == [100, 101, 102]
        _C.set_eval_frame(prev)
        assert f(1) == 2 and _C.active_threads() == 1
        t2 = threading.Thread(target=lambda: print(f(5)))
        t2.start(); t2.join()
        print("ok")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["6", "ok"]

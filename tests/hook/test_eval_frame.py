"""pydynamo.eval_frame: optimize / disable / reset wrappers around the C hook."""
import sys
import types

import pytest

import pydynamo
from pydynamo import _C, eval_frame
from hookutil import Recorder, with_const


def double(x):
    return x * 2


def inner(x):
    return x + 10


def outer(x):
    return inner(x) * 2


def test_optimize_with_callback_sets_and_restores_around_each_call():
    rec = Recorder({double.__code__: with_const(double, 2, 3)})
    fn = eval_frame._optimize_with_callback(double, rec)
    assert fn.__wrapped__ is double and fn.__name__ == "double"
    assert fn(5) == 15 and fn(6) == 18
    assert _C.get_eval_frame() is None and not _C.hook_installed()
    assert double(5) == 10  # outside the wrapper: untouched
    assert rec.names() == ["double"]


def test_wrapper_restores_setting_when_fn_raises():
    def bad(x):
        raise KeyError(x)

    fn = eval_frame._optimize_with_callback(bad, Recorder())
    with pytest.raises(KeyError):
        fn(1)
    assert _C.get_eval_frame() is None


def test_context_manager_form_and_nesting():
    rec = Recorder({double.__code__: with_const(double, 2, 3)})
    with eval_frame._optimize_with_callback(None, rec):
        assert _C.get_eval_frame() is rec
        assert double(2) == 6
        with pydynamo.disable():
            assert _C.get_eval_frame() is None
            assert double(2) == 4
        assert _C.get_eval_frame() is rec
    assert _C.get_eval_frame() is None


def test_disable_marks_wrapper_and_runs_unhooked():
    rec = Recorder({inner.__code__: with_const(inner, 10, 100)})
    dis_inner = pydynamo.disable(inner)
    assert dis_inner.__pydynamo_disabled__ is True and dis_inner.__wrapped__ is inner

    def uses_disabled(x):
        return dis_inner(x) * 2

    assert eval_frame._optimize_with_callback(outer, rec)(1) == 202
    assert eval_frame._optimize_with_callback(uses_disabled, rec)(1) == 22
    assert "inner" in rec.names() and rec.names().count("inner") == 1


def test_wrapper_code_is_never_offered_to_the_callback():
    rec = Recorder()
    seen = []
    fn = eval_frame._optimize_with_callback(double, rec)

    def spy(code, *rest):
        seen.append(code)
        return None

    with eval_frame._optimize_with_callback(None, spy):
        fn(1)
    assert not any(c.co_filename == eval_frame.__file__ for c in seen)


def test_optimize_imports_make_callback_lazily(monkeypatch):
    made = []

    def make_callback(**kwargs):
        made.append(kwargs)
        return Recorder({double.__code__: with_const(double, 2, 7)})

    fake = types.ModuleType("pydynamo.convert_frame")
    fake.make_callback = make_callback
    monkeypatch.setitem(sys.modules, "pydynamo.convert_frame", fake)
    fn = pydynamo.optimize(double, backend="eager", fullgraph=True, dynamic=False)
    assert made == []  # nothing built at decoration time
    assert fn(3) == 21 and fn(4) == 28
    assert made == [dict(backend="eager", fullgraph=True, dynamic=False, mode=None, options=None,
                         recompile_limit=None)]

    deco = pydynamo.optimize(backend="eager")
    assert deco(double)(1) == 7


def test_reset_clears_entries_and_runs_hooks():
    ran = []
    eval_frame.on_reset(lambda: ran.append(1))
    try:
        rec = Recorder({double.__code__: with_const(double, 2, 3)})
        eval_frame._optimize_with_callback(double, rec)(1)
        assert _C.get_cache_entries(double.__code__) != []
        pydynamo.reset()
        assert _C.get_cache_entries(double.__code__) == []
        assert ran == [1]
        # own wrapper codes are skipped again after the reset
        probe = eval_frame._CallbackScope().wrap(len)
        assert _C.get_code_state(probe.__code__) == "skip"
    finally:
        eval_frame._reset_hooks.pop()


def test_optimize_rejects_non_callables():
    with pytest.raises(TypeError):
        pydynamo.optimize(42)


def test_nn_module_in_callable_module_out(monkeypatch):
    torch = pytest.importorskip("torch")
    lin = torch.nn.Linear(3, 2)
    fake = types.ModuleType("pydynamo.convert_frame")
    fake.make_callback = lambda **kw: Recorder()
    monkeypatch.setitem(sys.modules, "pydynamo.convert_frame", fake)
    opt = pydynamo.optimize(lin, backend="eager")
    assert isinstance(opt, torch.nn.Module)
    x = torch.randn(4, 3)
    torch.testing.assert_close(opt(x), lin(x))
    assert opt.weight is lin.weight


def test_one_scope_entered_by_two_threads_restores_each_threads_setting():
    import threading

    scope = eval_frame._optimize_with_callback(None, False)
    a_in, b_in, a_out = threading.Event(), threading.Event(), threading.Event()
    out = {}

    def worker(name, own, after_enter, wait_before_exit):
        with eval_frame._optimize_with_callback(None, own):
            with scope:
                after_enter.set()
                wait_before_exit.wait()
                out[name + "_in"] = _C.get_eval_frame()
            out[name] = _C.get_eval_frame()
            if name == "a":
                a_out.set()

    a_cb, b_cb = Recorder(), Recorder()
    # order: a enters, b enters, a exits (last in, first out would hand a b's setting), b exits
    ta = threading.Thread(target=worker, args=("a", a_cb, a_in, b_in))
    tb = threading.Thread(target=worker, args=("b", b_cb, b_in, a_out))
    ta.start()
    a_in.wait()
    tb.start()
    ta.join(); tb.join()
    assert out == {"a_in": False, "b_in": False, "a": a_cb, "b": b_cb}

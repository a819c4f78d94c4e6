"""Frames the hook must hand to CPython untouched: generators, coroutines, async generators,
generator throw()/close(), and everything run by trace and monitoring callbacks."""
import asyncio
import sys

import pytest

from hookutil import Recorder, hooked, with_const


def gen(n):
    try:
        for i in range(n):
            yield i * 10
    finally:
        gen.finalized += 1


gen.finalized = 0


async def coro(x):
    await asyncio.sleep(0)
    return x * 10


async def agen(n):
    for i in range(n):
        yield i


def plain(x):
    return x * 10


def test_generators_never_reach_the_callback():
    rec = Recorder({plain.__code__: with_const(plain, 10, 11)})
    with hooked(rec):
        assert list(gen(4)) == [0, 10, 20, 30]
        g = gen(3)
        assert next(g) == 0
        assert plain(1) == 11
        assert next(g) == 10
    assert "gen" not in rec.names()
    assert list(g) == [20]


def test_generator_throw_and_close_run_finally_and_exit():
    exits = []

    class CM:
        def __enter__(self):
            return self

        def __exit__(self, *a):
            exits.append(a[0])
            return False

    def gen_cm():
        with CM():
            yield 1
            yield 2

    rec = Recorder()
    before = gen.finalized
    with hooked(rec):
        g = gen(10)
        next(g)
        g.close()
        assert gen.finalized == before + 1
        g = gen(10)
        next(g)
        with pytest.raises(ValueError):
            g.throw(ValueError("into generator"))
        assert gen.finalized == before + 2
        h = gen_cm()
        next(h)
        with pytest.raises(KeyError):
            h.throw(KeyError("x"))
        assert exits == [KeyError]
    assert "__exit__" in rec.names()  # an ordinary method called during throw(): intercepted


def test_coroutines_and_async_generators_untouched():
    rec = Recorder({plain.__code__: with_const(plain, 10, 11)})

    async def main():
        vals = [await coro(i) for i in range(3)]
        vals += [i async for i in agen(3)]
        return vals, plain(2)

    with hooked(rec):
        assert asyncio.run(main()) == ([0, 10, 20, 0, 1, 2], 22)
    assert not {"coro", "agen", "main"} & set(rec.names())


def test_settrace_function_not_intercepted_and_results_correct():
    events = []

    def tracer(frame, event, arg):
        events.append((frame.f_code.co_name, event))
        return None

    rec = Recorder({plain.__code__: with_const(plain, 10, 11)})
    sys.settrace(tracer)
    try:
        with hooked(rec):
            r = [plain(i) for i in range(3)]
    finally:
        sys.settrace(None)
    assert r == [0, 11, 22]
    assert "tracer" not in rec.names()
    assert ("plain", "call") in events  # the shadow frame is an ordinary traced frame


@pytest.mark.skipif(sys.version_info < (3, 12), reason="sys.monitoring is new in 3.12")
def test_monitoring_callbacks_not_intercepted():
    mon = sys.monitoring
    tool = mon.PROFILER_ID
    starts = []

    def on_start(code, offset):
        starts.append(code.co_name)

    mon.use_tool_id(tool, "pydynamo-test")
    try:
        mon.register_callback(tool, mon.events.PY_START, on_start)
        mon.set_events(tool, mon.events.PY_START)
        rec = Recorder({plain.__code__: with_const(plain, 10, 11)})
        with hooked(rec):
            assert plain(3) == 33 and plain(4) == 44
        mon.set_events(tool, 0)
    finally:
        mon.register_callback(tool, mon.events.PY_START, None)
        mon.free_tool_id(tool)
    assert "on_start" not in rec.names()
    assert "plain" in starts

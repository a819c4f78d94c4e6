"""Room under intercepted calls (csrc/frame_compat.c pd_room_enter/pd_room_exit): guards,
callback and shadow frame run in a spare data-stack chunk of the thread's own when the current
chunk is nearly full, so calls made from the shadow never map and unmap a chunk per call.
Checked here: results, exceptions, surviving frame objects and deep recursion at every caller
depth across chunk boundaries; the spare is reused (a few allocations per thread, not one per
call); threads get their own."""
import sys
import threading
import traceback

import pytest

from pydynamo import _C
from hookutil import Recorder, hooked, with_const


def work(x):
    # calls from the shadow frame: where the data stack runs out, these would cross
    acc = 0
    for i in range(20):
        acc += helper(x, i)
    return acc * 10


def helper(x, i):
    return x + i


def recurse(n, x):
    return work(x) if n == 0 else recurse(n - 1, x)


def expected(x, k=1000):
    return sum(x + i for i in range(20)) * k


def at_depth(depth, fn, *args):
    return fn(*args) if depth == 0 else at_depth(depth - 1, fn, *args)


def test_results_at_every_caller_depth_and_the_spare_is_reused():
    rec = Recorder({work.__code__: with_const(work, 10, 1000)})
    before = _C.room_chunks_allocated()
    with hooked(rec):
        for depth in range(120):        # spans several 16 KB chunks of caller frames
            for x in (depth, depth + 7):
                assert at_depth(depth, work, x) == expected(x)
    assert _C.room_chunks_allocated() - before <= 2


def raising(x):
    if x > 0:
        raise ValueError(f"bad {x}")
    return 10


def test_exceptions_and_frames_that_outlive_the_call():
    rec = Recorder({raising.__code__: with_const(raising, 10, 1000)})
    kept = []
    with hooked(rec):
        for depth in range(60):
            try:
                at_depth(depth, raising, depth + 1)
            except ValueError as e:
                kept.append(e)           # holds the shadow's frame through the traceback
            assert at_depth(depth, raising, 0) == 1000
    assert len(kept) == 60
    for e in kept:
        frames = traceback.extract_tb(e.__traceback__)
        assert frames[-1].name == "raising" and str(e).startswith("bad ")
        assert e.__traceback__.tb_frame.f_locals is not None


def deep(n, a=0, b=0, c=0, d=0, e=0, f=0, g=0, h=0):     # ~22 words of data stack a frame
    return 0 if n == 0 else 1 + deep(n - 1)


def calls_deep(x):
    return deep(x) * 10     # 600 frames, past the 64 KB spare: CPython adds chunks above it


def test_recursion_deeper_than_the_spare():
    rec = Recorder({calls_deep.__code__: with_const(calls_deep, 10, 1000)})
    with hooked(rec):       # (3.12 under a PEP 523 hook stops near 900 Python frames)
        for depth in (0, 1, 37, 80):
            assert at_depth(depth, calls_deep, 600) == 600 * 1000


def test_nested_intercepted_calls():
    rec = Recorder({work.__code__: with_const(work, 10, 1000),
                    recurse.__code__: recurse.__code__.replace()})
    with hooked(rec):
        for depth in range(0, 80, 3):
            assert at_depth(depth, recurse, 30, depth) == expected(depth)


def test_threads_have_their_own_spares():
    errors = []

    def run(seed):
        try:
            rec = Recorder({work.__code__: with_const(work, 10, 1000)})
            with hooked(rec):
                for depth in range(50):
                    assert at_depth(depth, work, seed + depth) == expected(seed + depth)
        except BaseException as e:    # report in the main thread
            errors.append(e)
    before = _C.room_chunks_allocated()
    threads = [threading.Thread(target=run, args=(i * 100,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    # a new thread's first chunk (16 KB) never has the room left: each thread made exactly
    # one spare, the first time, and reused it for its 50 calls
    assert _C.room_chunks_allocated() - before == 4


if __name__ == "__main__":
    sys.exit(pytest.main([__file__, "-q"]))

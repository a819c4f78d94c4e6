"""Per-call overhead of the pydynamo._C frame hook, in ns per call (best of --repeat runs).

Rows:
  plain call                    no hook installed
  hook installed, thread off    another thread has a callback set; this thread's frames pass by
  hook installed, code skipped  this thread has a callback; the code is marked "skip"
  cache hit, trivial guard      one Python guard `lambda L: True` + shadow frame + function

Run (timings are only meaningful on a quiet machine):
    python benchmarks/bench_hook.py [--calls 200000] [--repeat 5]
Each figure includes the Python loop around the call, like the reference figures
(/work/shared/reference/cpython_frame_hook.md section 16).
"""
import argparse
import sys
import threading
import time

from pydynamo import _C


def f(x):
    return x + 1


def _loop(fn, n):
    r = range(n)
    t0 = time.perf_counter_ns()
    for _ in r:
        fn(1)
    return time.perf_counter_ns() - t0


def _best(n, repeat):
    return min(_loop(f, n) for _ in range(repeat)) / n


def _skip_everything_else(code, *args):
    # The timing loop's own frame starts under the callback too: mark it (and the rest) skip.
    assert code is not f.__code__, "f is marked skip: the callback must not see it"
    return _C.SKIP_CODE


def bench(n, repeat):
    rows = []
    _C.clear_all()
    rows.append(("plain call", _best(n, repeat)))

    # Another thread holds a callback: the hook is installed for every thread.
    ready, done = threading.Event(), threading.Event()

    def holder():
        prev = _C.set_eval_frame(False)  # run-only: its own frames never call back
        ready.set()
        done.wait()
        _C.set_eval_frame(prev)

    t = threading.Thread(target=holder)
    t.start()
    ready.wait()
    assert _C.hook_installed()
    rows.append(("hook installed, thread off", _best(n, repeat)))
    done.set()
    t.join()

    _C.set_code_state(f.__code__, "skip")
    prev = _C.set_eval_frame(_skip_everything_else)
    try:
        rows.append(("hook installed, code skipped", _best(n, repeat)))
    finally:
        _C.set_eval_frame(prev)
    _C.clear_code(f.__code__)

    guard = lambda L: True  # noqa: E731
    prev = _C.set_eval_frame(lambda code, *a: (guard, code) if code is f.__code__ else _C.SKIP_CODE)
    try:
        f(1)  # compile: the replacement is f's own code
        assert len(_C.get_cache_entries(f.__code__)) == 1
        rows.append(("cache hit, trivial guard", _best(n, repeat)))
    finally:
        _C.set_eval_frame(prev)
    _C.clear_all()
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=200_000)
    ap.add_argument("--repeat", type=int, default=5)
    args = ap.parse_args()
    rows = bench(args.calls, args.repeat)
    print(f"CPython {sys.version.split()[0]}, {args.calls} calls of `def f(x): return x + 1`, "
          f"best of {args.repeat}")
    print(f"{'case':<32}{'ns/call':>10}")
    for name, ns in rows:
        print(f"{name:<32}{ns:>10.1f}")


if __name__ == "__main__":
    main()

"""Lifetime: a dead code object frees its entries; long loops of hits and of compiles leave
object counts, refcounts and memory flat."""
import gc
import sys
import weakref

from pydynamo import _C
from hookutil import hooked, only_tests, with_const


def make_function(k):
    """A fresh function with its own code object (not shared with any constant)."""
    ns = {}
    exec(compile(f"def fresh(x):\n    return x + {k}\n", f"<fresh{k}>", "exec"), ns)
    return ns["fresh"]


class Guard:
    def __call__(self, L):
        return True


def test_code_deallocation_frees_entries():
    fn = make_function(1)
    guard = Guard()
    repl = with_const(fn, 1, 2)
    wr_guard, wr_repl, wr_code = weakref.ref(guard), weakref.ref(repl), weakref.ref(fn.__code__)
    before = _C.cached_code_count()
    with hooked(lambda code, *a: (guard, repl) if code is fn.__code__ else None):
        assert fn(1) == 3
    assert _C.cached_code_count() == before + 1
    del guard, repl
    gc.collect()
    assert wr_guard() is not None and wr_repl() is not None  # the cache keeps them
    del fn
    gc.collect()
    assert wr_code() is None
    assert wr_guard() is None and wr_repl() is None
    assert _C.cached_code_count() == before


def test_skip_mark_of_dead_code_is_freed():
    fn = make_function(2)
    wr_code = weakref.ref(fn.__code__)
    _C.set_code_state(fn.__code__, "skip")
    n = _C.cached_code_count()
    del fn
    gc.collect()
    assert wr_code() is None and _C.cached_code_count() == n - 1


def _memory():
    gc.collect()
    return sys.getallocatedblocks(), len(gc.get_objects())


def test_100k_cache_hits_leave_counts_and_memory_flat():
    def f(a, b, *rest, k=1, **kw):
        return a + b + 10

    cell_val = [5]

    def g(x):
        return x + cell_val[0] + 10

    t = object()
    guard = lambda L: L["a"] is not None  # noqa: E731
    repl_f, repl_g = with_const(f, 10, 11), with_const(g, 10, 11)
    table = {f.__code__: (guard, repl_f), g.__code__: (lambda L: L["x"] >= 0, repl_g)}

    def run(n):
        for i in range(n):
            f(i, 1, t, k=2, z=t)
            g(i)

    with hooked(only_tests(lambda code, *a: table.get(code))):
        run(1000)  # warm up
        assert f(1, 2) == 14 and g(1) == 17
        rc_before = [sys.getrefcount(o) for o in (t, guard, repl_f, cell_val)]
        blocks0, objs0 = _memory()
        run(50_000)  # 100,000 hooked cache-hit calls in all
        blocks1, objs1 = _memory()
    assert [sys.getrefcount(o) for o in (t, guard, repl_f, cell_val)] == rc_before
    assert objs1 - objs0 < 50, (objs0, objs1)
    assert blocks1 - blocks0 < 500, (blocks0, blocks1)


def test_1000_compiles_leave_counts_and_memory_flat():
    fns = [make_function(k) for k in range(20)]

    def cb(code, inputs, g, b, entries):
        if not code.co_filename.startswith("<fresh"):
            return None
        k = int(code.co_filename[6:-1])
        consts = tuple(k + 1000 if (type(c) is int and c == k) else c for c in code.co_consts)
        return (Guard(), code.replace(co_consts=consts))

    def compile_all(rounds):
        for _ in range(rounds):
            _C.clear_all()
            for k, fn in enumerate(fns):
                assert fn(1) == 1 + k + 1000

    with hooked(cb):
        compile_all(5)
        blocks0, objs0 = _memory()
        compile_all(50)  # 1,000 compiles
        blocks1, objs1 = _memory()
    assert objs1 - objs0 < 50, (objs0, objs1)
    assert blocks1 - blocks0 < 500, (blocks0, blocks1)

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


def test_closure_contents_die_after_hooked_calls():
    """Shadow frames reuse a function object; it must not keep the last closure alive."""
    class Payload:
        pass

    def make(p):
        def use(x):
            return (p is not None) + x + 10
        return use

    code = make(None).__code__
    repl = code.replace(co_consts=tuple(11 if c == 10 and type(c) is int else c for c in code.co_consts))
    with hooked(lambda c, *a: (Guard(), repl) if c is code else None):
        for _ in range(3):
            p = Payload()
            wr = weakref.ref(p)
            fn = make(p)
            assert fn(1) == 13
            del fn, p
            gc.collect()
            assert wr() is None


def test_replacement_clearing_its_own_cache_while_running():
    def target(x):
        _C.clear_code(target.__code__)
        return x + 10

    repl = with_const(target, 10, 20)
    with hooked(only_tests(lambda c, *a: (Guard(), repl) if c is target.__code__ else None)):
        for i in range(5):
            assert target(i) == i + 20  # each call compiles again, runs, and clears
    assert _C.get_cache_entries(target.__code__) == []


def test_idle_shadow_functions_found_through_gc_are_harmless():
    def f(x):
        return x + 10

    with hooked(only_tests(lambda c, *a: (Guard(), with_const(f, 10, 11)) if c is f.__code__ else None)):
        assert f(1) == 12 and f(2) == 13
    gc.collect()
    idle = [o for o in gc.get_objects()
            if type(o) is type(f) and o.__code__.co_filename == "<pydynamo>"]
    assert idle  # the cache of f keeps one
    for fn in idle:
        assert fn.__globals__ == {} and fn.__closure__ is None and fn() is None

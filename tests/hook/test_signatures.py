"""Frame inputs and shadow frames across signatures: closures, cells, free variables, defaults,
*args/**kwargs, keyword-only arguments, methods, lambdas, super(), recursion."""
import random
import sys

import pytest

from pydynamo import _C
from hookutil import Recorder, hooked, only_tests, with_const


def compiled(fn, old, new, guard=None):
    """Recorder that replaces `fn`'s constant `old` by `new` (guard defaults to always)."""
    return Recorder({fn.__code__: with_const(fn, old, new)}, guard=guard)


def test_closure_free_variables_seen_by_guard_and_new_code():
    k = random.randint(2, 1000)
    shared = [k]

    def f(x):
        return x + shared[0] * 10

    seen = []
    rec = compiled(f, 10, 1000, guard=lambda L: seen.append(L["shared"][0]) or True)
    with hooked(rec):
        assert f(1) == 1 + k * 1000
        shared[0] = k + 1
        assert f(1) == 1 + (k + 1) * 1000  # new code reads the live closure cell
    assert rec.calls[0][1] == {"x": 1, "shared": [k + 1]}  # free var's contents, by name
    assert seen == [k + 1]


def test_argument_cell_reaches_guard_as_raw_value_and_inner_closure_works():
    def f(x, y):
        def inner():
            return x * 10 + y  # x and y are argument cells of f
        z = 5
        def inner2():
            return z  # z: a non-argument cell
        return inner() + inner2() + 1000

    seen = []
    rec = compiled(f, 1000, 2000, guard=lambda L: seen.append(dict(L)) or True)
    with hooked(only_tests(rec)):
        assert f(3, 4) == 30 + 4 + 5 + 2000
        assert f(6, 7) == 60 + 7 + 5 + 2000
    assert rec.inputs("f") == {"x": 3, "y": 4}  # raw values; z unbound, not reported
    assert seen == [{"x": 6, "y": 7}]


def test_nested_closures_three_levels():
    a = 3

    def outer(b):
        def middle(c):
            def leaf(d):
                return a + b + c + d * 10
            return leaf
        return middle

    leaf = outer(20)(300)
    rec = compiled(leaf, 10, 1000)
    with hooked(rec):
        assert leaf(4) == 3 + 20 + 300 + 4000
        assert leaf(5) == 3 + 20 + 300 + 5000
    assert rec.inputs("leaf") == {"d": 4, "a": 3, "b": 20, "c": 300}
    # another closure of the same code: hit, run with *its* cells
    other = outer(7)(8)
    with hooked(rec):
        assert other(1) == 3 + 7 + 8 + 1000
    assert len(rec.calls) == 1


def test_zero_argument_super_in_method():
    class Base:
        def val(self, x):
            return x

    class Child(Base):
        def val(self, x):
            return super().val(x) + 10

    rec = compiled(Child.val, 10, 77)
    with hooked(only_tests(rec)):
        assert Child().val(1) == 78
        assert Child().val(2) == 79
    assert set(rec.inputs("val")) == {"self", "x", "__class__"}
    assert rec.inputs("val")["__class__"] is Child


@pytest.mark.parametrize("call", [
    lambda f: f(1),
    lambda f: f(1, 2),
    lambda f: f(1, b=2, c=3),
    lambda f: f(1, 2, 3, 4, c=5, k=6),
    lambda f: f(a=1, c=9, q=0),
])
def test_all_argument_kinds(call):
    def f(a, b=2, *args, c=3, d=4, **kw):
        return (a, b, args, c, d, sorted(kw.items()), 10)

    def eager(a, b=2, *args, c=3, d=4, **kw):
        return (a, b, args, c, d, sorted(kw.items()), 10)

    rec = compiled(f, 10, 11)
    with hooked(rec):
        got = call(f)
        got2 = call(f)  # hit
    want = call(eager)
    assert got == got2 == want[:-1] + (11,)
    inputs = rec.inputs("f")
    assert inputs["a"] == want[0] and inputs["args"] == want[2] and inputs["c"] == want[3]
    assert sorted(inputs["kw"].items()) == want[5]


def test_positional_only_and_keyword_only():
    def f(a, /, b, *, c):
        return a * 100 + b * 10 + c + 0.5

    rec = compiled(f, 0.5, 0.25)
    with hooked(rec):
        assert f(1, 2, c=3) == 123.25
        assert f(4, b=5, c=6) == 456.25


def test_methods_bound_static_class_and_lambda():
    class A:
        k = 10

        def m(self, x):
            return x + 10

        @staticmethod
        def s(x):
            return x - 10

        @classmethod
        def c(cls, x):
            return x * cls.k

    lam = lambda x: x * 10  # noqa: E731
    rec = Recorder({
        A.m.__code__: with_const(A.m, 10, 20),
        A.s.__code__: with_const(A.s, 10, 20),
        lam.__code__: with_const(lam, 10, 3),
    })
    with hooked(rec):
        for _ in range(2):
            assert A().m(1) == 21
            assert A.s(1) == -19
            assert A.c(2) == 20  # not replaced, still intercepted and run as is
            assert lam(5) == 15
    assert sorted(set(rec.names())) == ["<lambda>", "c", "m", "s"]
    assert rec.names().count("c") == 2 and rec.names().count("m") == 1


def test_recursion_every_level_hits():
    def fact(n):
        return 1 if n <= 1 else n * fact(n - 1) + 0

    rec = compiled(fact, 0, 1)  # each level adds 1
    with hooked(rec):
        got = fact(200)
    want = 1
    for n in range(2, 201):
        want = n * want + 1
    assert got == want
    assert rec.names().count("fact") == 1  # compiled once, all deeper levels were hits


def test_deep_recursion_hundreds_of_levels_under_hook():
    def depth(n):
        return 0 if n == 0 else 1 + depth(n - 1)

    rec = Recorder({depth.__code__: depth.__code__}, guard=lambda L: L["n"] >= 0)
    with hooked(rec):
        assert depth(400) == 400


def test_runaway_recursion_gives_clean_recursion_error_repeatedly():
    def runaway(n):
        return runaway(n + 1) + 1

    rec = compiled(runaway, 1, 2)
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(400)
    try:
        for _ in range(3):
            with hooked(rec):
                with pytest.raises(RecursionError):
                    runaway(0)
    finally:
        sys.setrecursionlimit(old)

    def ok(n):
        return n + 1
    with hooked(compiled(ok, 1, 2)):
        assert ok(1) == 3  # the hook still works afterwards


def test_every_recursion_depth_crosses_data_stack_chunks_cleanly():
    """Shadow frames pushed at every offset within a data-stack chunk, including the ones that
    need a new chunk (pushed by us, popped by CPython on 3.12, and the reverse)."""
    def depth(n, pad=None):
        big = [n] * 3
        return 0 if n == 0 else 7 + depth(n - 1, big)

    rec = Recorder({depth.__code__: with_const(depth, 7, 9)}, guard=lambda L: True)
    with hooked(rec):
        for n in range(0, 260, 3):
            assert depth(n) == 9 * n
    assert rec.names().count("depth") == 1


def test_replacement_with_different_cell_variables():
    """Arguments that are cells in only one of the two codes: the raw value is copied and the
    replacement's own MAKE_CELL wraps it if it needs to."""
    def plain(x, y):
        return x * 10 + y

    def celled(x, y):
        get = lambda: x * 20 + y  # noqa: E731  (x and y become cells here)
        return get()

    def celled_orig(x, y):
        return (lambda: x * 10 + y)()

    def plain_repl(x, y):
        return x * 30 + y

    rec = Recorder({plain.__code__: celled.__code__.replace(co_name="plain"),
                    celled_orig.__code__: plain_repl.__code__})
    with hooked(only_tests(rec)):
        for i in range(3):
            assert plain(i, 1) == i * 20 + 1
            assert celled_orig(i, 2) == i * 30 + 2

"""One tracker per object, never per number: side effects around a graph break happen exactly once
per call when an int argument is symbolic, and an object reached through two sources is guarded
to stay one object.

Regression for fuzz F7 (tests/fuzz/test_fuzz_regressions.py): `k = n + 1; self.steps += 1` under
dynamic=True moved `steps` by 0 or 2. The builder shares a tracker between sources that hold the
same object (by id), and CPython interns small ints: `n == self.steps` made the attribute read
return n's symbol, so the break function stored `n + 1` into `steps`. Numbers are not shared now,
and every shared tracker gets an aliasing guard (`second is first`), which a list passed both as
an argument and as a module attribute lacked (a later call where they differ read the argument's
list for both).

The seeded sweep below (side effects on int/float/list/dict attributes, a buffer and a tensor
attribute before, at and after a break: module setattr, pydynamo.graph_break(), a break inside an
inlined helper, a print) also found that a float computed from a symbolic int (`self.f += n`,
`n + 2.0`) came back as an int, in the output code and as a graph argument.

Every case runs through tests/differential.py (the compiled function called as a user does,
module state including plain int/float attributes compared after each call), under
dynamic None/True/False, with int arguments equal to the attribute's value on some calls.
"""
import os
import random
import sys
import textwrap

import pytest
import torch

import pydynamo

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import assert_same_as_eager  # noqa: E402

DYNAMIC = [None, True, False]
# n over the calls: equal to the attribute's value on some calls (interned ints share an id)
NS = [(1, 4, 3), (2, 2, 2), (3, 3, 5, 6)]


def _calls(ns, shape=(1, 7)):
    return [lambda n=n: (torch.randn(*shape), n) for n in ns]


class IntAttr(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 1

    def forward(self, x, n):
        k = n + 1
        self.steps += 1          # graph break: module setattr
        return x * k


class IntAttrUsedAfter(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.steps = 2

    def forward(self, x, n):
        k = n * 2
        self.steps += n          # the attribute's new value is symbolic
        return x * k + self.steps


class FloatAttr(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x, n, f):
        k = n + f
        self.scale *= 1.5
        return x * k * self.scale


class ListAppend(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.hist = []
        self.steps = 0

    def forward(self, x, n):
        k = n + 1
        self.hist.append(n)
        self.steps += 1          # graph break after the append
        self.hist.append(k)
        return x * k, self.hist


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("ns", NS)
def test_int_attribute_increment_with_equal_int_arg_once_per_call(dynamic, ns):
    assert_same_as_eager(IntAttr(), _calls(ns), backend="eager", dynamic=dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("ns", NS)
def test_int_attribute_incremented_by_symbolic_arg_then_read(dynamic, ns):
    assert_same_as_eager(IntAttrUsedAfter(), _calls(ns), backend="eager", dynamic=dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
def test_float_attribute_scaled_with_equal_float_arg_once_per_call(dynamic):
    # f is 2.0 then 3.0 then 4.5: the attribute's values on those calls (the same float object
    # is passed where the maker hands the attribute's value)
    calls = [lambda: (torch.randn(1, 7), 2, 2.0), lambda: (torch.randn(1, 7), 3, 3.0),
             lambda: (torch.randn(1, 7), 4, 4.5)]
    assert_same_as_eager(FloatAttr(), calls, backend="eager", dynamic=dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("ns", NS)
def test_list_append_on_module_attribute_around_break_once_per_call(dynamic, ns):
    assert_same_as_eager(ListAppend(), _calls(ns), backend="eager", dynamic=dynamic)


def _global_counter_fn():
    """A fresh function with its own globals (eager and compiled sides must not share them)."""
    g = {"torch": torch, "pydynamo": pydynamo, "COUNT": 1}
    exec(textwrap.dedent("""
        def f(x, n):
            global COUNT
            k = n + 1
            COUNT += 1
            pydynamo.graph_break()
            COUNT += k
            return x * COUNT
    """), g)
    return g["f"], g


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("ns", NS)
def test_global_counter_around_break_with_equal_int_arg_once_per_call(dynamic, ns):
    pydynamo.reset()
    eager_f, eager_g = _global_counter_fn()
    comp_f, comp_g = _global_counter_fn()
    compiled = pydynamo.optimize(comp_f, backend="eager", dynamic=dynamic)
    for n in ns:
        x = torch.randn(2, 3)
        expected = eager_f(x.clone(), n)
        got = compiled(x, n)
        assert comp_g["COUNT"] == eager_g["COUNT"], (n, comp_g["COUNT"], eager_g["COUNT"])
        torch.testing.assert_close(got, expected)
    pydynamo.reset()


class TwoSources(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.cfg = [1.0]

    def forward(self, x, c):
        return x * c[0] + self.cfg[0]


def test_object_reached_through_two_sources_is_guarded_to_stay_one():
    """A list that is both an argument and a module attribute on call 1, two lists on call 2: the
    entry compiled for call 1 must not run (it read the argument's list for both)."""
    pydynamo.reset()
    m = TwoSources()
    compiled = pydynamo.optimize(m, backend="eager")
    a = [2.0]
    x = torch.randn(3)
    m.cfg = a
    torch.testing.assert_close(compiled(x, a), m(x, a))
    m.cfg = [5.0]
    torch.testing.assert_close(compiled(x, a), m(x, a))
    m.cfg = a
    torch.testing.assert_close(compiled(x, a), m(x, a))
    pydynamo.reset()


# --- a seeded sweep of small programs: side effects before, at and after a graph break ---------

_BEFORE = ["k = n + {c}", "k = n * {c}", "k = n - {c}", "k = (n + {c}) * 2", "k = {c}"]
_EFFECTS = ["self.a += {c}", "self.a += n", "self.a = self.a + k", "self.f *= 1.5", "self.f += n",
            "self.hist.append(k)", "self.hist.append(n + self.a)", "self.b = n", "self.b += k",
            "self.d['k'] = self.d.get('k', 0) + n", "self.d[n] = k", "self.buf.add_(n)",
            "helper(self, n)", "x = x + n", "self.t = x * n", "self.hist.extend([n, k])",
            "self.hist[0:0] = [self.a]"]
# module setattr and explicit breaks, a break inside an inlined call, a print
_BREAKS = ["self.a += 1", "pydynamo.graph_break()", "self.f = self.f + 0.5", "helper(self, k)",
           "print('', end='')", "self.t = x + 1"]
_AFTER = ["y = x * k", "y = x * k + self.a", "y = x + self.f * n", "y = x * (self.b + 1)",
          "y = x * len(self.hist)", "y = x * self.d.get('k', 1) + self.buf", "y = self.t * k"]
_HELPER = """
def helper(m, v):
    m.hist.append(v)
    pydynamo.graph_break()
    m.hist.append(v + 1)
"""


def _program(seed: int) -> str:
    r = random.Random(seed)
    lines = [r.choice(_BEFORE).format(c=r.randint(0, 3))]
    for _ in range(r.randint(0, 2)):
        lines.append(r.choice(_EFFECTS).format(c=r.randint(1, 3)))
    lines.append(r.choice(_BREAKS))
    for _ in range(r.randint(0, 2)):
        lines.append(r.choice(_EFFECTS).format(c=r.randint(1, 3)))
    lines.append(r.choice(_AFTER))
    lines.append("return y, self.hist, self.d")
    return "\n".join(lines)


def _module(body: str) -> torch.nn.Module:
    g = {"torch": torch, "pydynamo": pydynamo}
    exec(_HELPER, g)
    exec("def forward(self, x, n):\n" + textwrap.indent(body, "    "), g)
    cls = type("Swept", (torch.nn.Module,), {"forward": g["forward"]})
    m = cls()
    m.a, m.b, m.f, m.hist, m.d = 1, 2, 2.0, [], {}
    m.register_buffer("buf", torch.ones(2, 3))
    m.t = torch.zeros(2, 3)
    return m


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("seed", range(16))
def test_side_effects_around_break_sweep_once_per_call(seed, dynamic):
    body = _program(seed)
    r = random.Random(1000 + seed)
    ns = [r.choice([1, 2, 3, 4]) for _ in range(3)]
    try:
        assert_same_as_eager(_module(body), _calls(ns, (2, 3)), backend="eager", dynamic=dynamic)
    except AssertionError as e:
        raise AssertionError(f"program (seed {seed}, ns {ns}):\n{body}\n{e}") from None


# --- found by the sweep above: a float made from a symbolic int keeps its type ------------------

def test_float_from_symbolic_int_stays_float_across_break():
    """`2.0 + n` with n symbolic is `2 + n` to sympy: the output code rebuilt it as an int
    (`self.f += n` on a float attribute stored 6, eager 6.0)."""
    def f(x, n):
        y = 2.0 + n
        z = n * 1.5
        pydynamo.graph_break()
        return x * 2, y, z
    for dynamic in DYNAMIC:
        assert_same_as_eager(f, _calls((3, 4, 4)), backend="eager", dynamic=dynamic)


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_float_from_symbolic_int_in_graph_keeps_float_dtype(backend):
    """The same value as a graph argument: torch.full / an int tensor times it took an integer
    dtype (the FX node computed `2 + n` from the int placeholder)."""
    def f(x, n):
        return torch.full((2,), n + 2.0), x * (n + 2.0), x * (2.5 * n)
    calls = [lambda n=n: (torch.arange(3), n) for n in (3, 4, 5)]
    assert_same_as_eager(f, calls, backend=backend, dynamic=True)

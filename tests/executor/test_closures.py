"""Functions made inside the compiled region that outlive it (returned, stored in containers):
rebuilt by the output code with their defaults, keyword defaults, globals and closure cells.
A cell of the frame stays the frame's cell (its final value written back); a cell of an inlined
call becomes one new cell shared by every function that closed over it. torch.compile captures
each of these in one graph."""
import torch

import pydynamo


def make_adder(k):
    def add(t):
        return t + k
    return add


def helper_closure_escapes(x):
    g = make_adder(x.shape[0])
    return g(x), g


def frame_cell_rebound_after_closure(x):
    n = 1

    def g(t):
        return t * n
    n = 3
    return g(x), g


def two_closures_share_a_cell(x):
    def mk():
        c = [0]

        def inc():
            c[0] += 1
            return c[0]

        def get():
            return c[0]
        return inc, get
    inc, get = mk()
    inc()
    return x + get(), inc, get


def defaults_and_kwdefaults_in_a_dict(x):
    y = x.sum()

    def h(a, b=2, *, c=3):
        return a * b + c + y
    return {"h": h, "v": h(x)}


def argument_cell_reassigned(x, n):
    def g():
        return n
    n = n + 1
    return x * g(), g, n


def _run(fn, cnt, *extra):
    opt = pydynamo.optimize(fn, backend=cnt)
    for _ in range(3):
        x = torch.randn(3)
        yield x, opt(x, *extra), fn(x, *extra)
    assert cnt.count == 1


def test_closure_of_an_inlined_helper(cnt):
    for x, (out, g), (ref, rg) in _run(helper_closure_escapes, cnt):
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g(x + 1), rg(x + 1))
        assert g.__closure__[0].cell_contents == 3 and g.__name__ == "add"
        assert g.__globals__ is make_adder.__globals__


def test_frame_cell_keeps_its_final_value(cnt):
    for x, (out, g), (ref, _) in _run(frame_cell_rebound_after_closure, cnt):
        torch.testing.assert_close(out, ref)
        torch.testing.assert_close(g(x), x * 3)


def test_functions_sharing_one_cell_share_it_after_the_graph(cnt):
    for x, (out, inc, get), (ref, _, _) in _run(two_closures_share_a_cell, cnt):
        torch.testing.assert_close(out, ref)
        assert get() == 1 and inc() == 2 and get() == 2  # one cell, as in eager
        assert inc.__closure__[0] is get.__closure__[0]


def test_defaults_kwdefaults_and_container(cnt):
    for x, out, ref in _run(defaults_and_kwdefaults_in_a_dict, cnt):
        torch.testing.assert_close(out["v"], ref["v"])
        torch.testing.assert_close(out["h"](x, c=1), ref["h"](x, c=1))
        assert out["h"].__defaults__ == (2,) and out["h"].__kwdefaults__ == {"c": 3}


def test_argument_cell_reassigned(cnt):
    for x, (out, g, n), (ref, _, _) in _run(argument_cell_reassigned, cnt, 2):
        torch.testing.assert_close(out, ref)
        assert g() == 3 and n == 3

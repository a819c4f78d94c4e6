"""The shared compare (tests/differential.py) catches each way a backend can be wrong that the
project's older harnesses missed: backends built to be wrong in one way each must be reported
(and a faithful one must not)."""
from __future__ import annotations

import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import differential  # noqa: E402
from differential import run_differential  # noqa: E402


def _mutating(x, y):
    x.add_(y)
    return x * 2, (x > 0).sum()


def _makers(n=3):
    return [lambda: (torch.randn(5, 7)[1:], torch.randn(7)) for _ in range(n)]


def test_faithful_backend_passes():
    res = run_differential(_mutating, _makers(), backend="eager")
    assert res.ok and not res.problems, res.report()


def test_first_call_double_mutation_is_caught():
    """A backend that runs the graph on the user's tensors once at compile time (as ShapeProp on
    the example inputs did) applies in-place updates twice on the first call."""
    def backend(gm, example_inputs):
        gm(*example_inputs)
        return gm.forward
    res = run_differential(_mutating, _makers(), backend=backend)
    assert [c for k, c, _ in res.problems if k == "wrong"][:1] == [0], res.report()


def test_integer_off_by_one_is_caught():
    def backend(gm, example_inputs):
        def run(*args):
            out = gm(*args)
            return out[0], out[1] + 1          # 20001 vs 20000 must not pass a relative tolerance
        return run
    res = run_differential(lambda x: (x * 2, (x.abs() * 10000).long().sum()),
                           [lambda: (torch.randn(4) + 3,)], backend=backend)
    assert any("exact compare" in t for _, _, t in res.problems), res.report()


def test_lost_aliasing_is_caught():
    def backend(gm, example_inputs):
        return lambda *args: tuple(o.clone() for o in gm(*args))
    res = run_differential(lambda x: (x[1:], x.t()), [lambda: (torch.randn(3, 4),)], backend=backend)
    assert any(t.startswith("aliasing") for _, _, t in res.of("wrong")), res.report()


def test_other_exception_type_is_caught():
    def backend(gm, example_inputs):
        def run(*args):
            raise IndexError("index out of range in kernel0")
        return run
    res = run_differential(lambda x, i: (torch.gather(x, 0, i),),
                           [lambda: (torch.randn(3), torch.tensor([5]))], backend=backend)
    assert res.of("error") and "eager raised RuntimeError" in res.of("error")[0][2], res.report()


def test_layout_difference_is_reported_apart():
    def backend(gm, example_inputs):
        return lambda *args: tuple(o.contiguous() for o in gm(*args))
    res = run_differential(lambda x: (x * 2,), [lambda: (torch.randn(4, 3).t(),)], backend=backend)
    assert res.ok and res.of("layout"), res.report()


def test_inputs_keep_strides_and_storage_offset():
    seen = []

    def f(x):
        seen.append((x.stride(), x.storage_offset()))
        return x + 1
    x = torch.randn(6, 5)[1:].t()
    run_differential(f, [lambda: (x,)], backend="eager")
    assert seen and all(s == (x.stride(), x.storage_offset()) for s in seen), seen


@pytest.mark.parametrize("a,b,same", [(torch.tensor([20001]), torch.tensor([20000]), False),
                                      (torch.tensor([True]), torch.tensor([False]), False),
                                      (torch.tensor([1.0, float("nan")]), torch.tensor([1.0, float("nan")]), True),
                                      (torch.tensor([1.0]), torch.tensor([1.0 + 1e-7]), True)])
def test_tensor_diff_exact_for_integers(a, b, same):
    assert (differential.tensor_diff(a, b) is None) == same

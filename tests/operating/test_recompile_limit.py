"""recompile_limit (issue 20): optimize(recompile_limit=N) and the global
pydynamo.config.recompile_limit against torch._dynamo.config.recompile_limit on the same
programs: the same number of graphs compiled, existing entries keep serving, new inputs run
eagerly from the limit on, one warning naming the function and the last failing guard."""
import warnings

import pytest
import torch

import pydynamo
from counting import Counting
from pydynamo import config
from pydynamo.exc import RecompileLimitWarning


@pytest.fixture(autouse=True)
def fresh():
    pydynamo.reset()
    torch._dynamo.reset()
    saved, saved_torch = config.recompile_limit, torch._dynamo.config.recompile_limit
    yield
    config.recompile_limit, torch._dynamo.config.recompile_limit = saved, saved_torch
    pydynamo.reset()
    torch._dynamo.reset()


def add_n(x, n):
    return x + n


def _program(compiled):
    x = torch.arange(3.0)
    out = []
    for n in range(5):                       # each constant n is a new entry (dynamic=False)
        out.append(compiled(x, n))
    out += [compiled(x, 0), compiled(x, 1)]  # entries compiled before the limit keep serving
    return out


def _reference(limit):
    torch._dynamo.config.recompile_limit = limit
    ref = Counting()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = _program(torch.compile(add_n, backend=ref, dynamic=False))
    return out, (ref.compiles, ref.runs)


@pytest.mark.parametrize("limit", [1, 2, 3])
def test_optimize_argument_matches_torch(limit):
    ref_out, ref_counts = _reference(limit)
    mine = Counting()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        out = _program(pydynamo.optimize(add_n, backend=mine, dynamic=False, recompile_limit=limit))
    for a, b in zip(out, ref_out):
        torch.testing.assert_close(a, b)
    assert (mine.compiles, mine.runs) == ref_counts
    assert mine.compiles == limit
    limit_warnings = [w for w in caught if issubclass(w.category, RecompileLimitWarning)]
    assert len(limit_warnings) == 1     # once, however many calls run eagerly after it
    text = str(limit_warnings[0].message)
    assert f"add_n hit the recompile limit ({limit}, optimize(recompile_limit=...))" in text
    if limit > 1:
        assert "last reason" in text and "L['n']" in text and "expected 0, got" in text


def test_global_setting_read_at_each_miss():
    ref_out, ref_counts = _reference(2)
    config.recompile_limit = 2             # set after import: taken at the next miss
    mine = Counting()
    with pytest.warns(RecompileLimitWarning, match=r"\(2, pydynamo.config.recompile_limit\)"):
        out = _program(pydynamo.optimize(add_n, backend=mine, dynamic=False))
    for a, b in zip(out, ref_out):
        torch.testing.assert_close(a, b)
    assert (mine.compiles, mine.runs) == ref_counts


def test_argument_overrides_global_and_counts_apart():
    config.recompile_limit = 1
    one, three = Counting(), Counting()
    f_one = pydynamo.optimize(add_n, backend=one, dynamic=False)
    f_three = pydynamo.optimize(add_n, backend=three, dynamic=False, recompile_limit=3)
    x = torch.randn(2)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RecompileLimitWarning)
        for n in range(4):
            torch.testing.assert_close(f_one(x, n), x + n)
            torch.testing.assert_close(f_three(x, n), x + n)
    assert (one.compiles, three.compiles) == (1, 3)


def test_limit_zero_runs_everything_eagerly():
    mine = Counting()
    compiled = pydynamo.optimize(add_n, backend=mine, recompile_limit=0)
    with pytest.warns(RecompileLimitWarning):
        torch.testing.assert_close(compiled(torch.ones(2), 1), torch.full((2,), 2.0))
    assert mine.compiles == 0


@pytest.mark.parametrize("bad", [-1, 1.5, "8", True])
def test_bad_values(bad):
    with pytest.raises(ValueError, match="recompile_limit"):
        pydynamo.optimize(add_n, recompile_limit=bad)

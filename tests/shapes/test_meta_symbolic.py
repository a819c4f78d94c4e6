"""Symbolic shape rules: each op traced with every input dim dynamic must (1) match eager at the
traced sizes, (2) use its rule rather than specializing, (3) have guards that accept other sizes,
and (4) give the right shape/strides at those other sizes by substitution."""
import operator

import pytest
import torch

from shapes_cases import CASES, r
from shapes_harness import Sym, check_op

# the traced sizes (first) avoid the constants the cases use, so duck shaping links nothing by
# accident; the others must pass the guards and are checked by substitution
P = [dict(n=11, m=13), dict(n=9, m=4), dict(n=3, m=2), dict(n=17, m=6)]


@pytest.mark.parametrize("name,target,build", CASES, ids=[c[0] for c in CASES])
def test_symbolic_rule(name, target, build):
    check_op(target, build, P)


def test_requires_grad_propagates():
    check_op(torch.mul, lambda n, m: ((r(n, m, requires_grad=True), r(m)), {}), P)
    with torch.no_grad():  # eager gives requires_grad=False here; the metadata must agree
        check_op(torch.mul, lambda n, m: ((r(n, m, requires_grad=True), r(m)), {}), P)


def test_broadcast_equal_symbols_guarded():
    # two different sizes that happen to be traced equal share a symbol (duck shaping); the
    # guard then rejects unequal sizes
    env = check_op(torch.add, lambda n, m: ((r(n, m), r(m, 1)), {}), [dict(n=5, m=5), dict(n=7, m=7)])
    check = env.make_check_fn()
    assert not check({"a0": r(5, 6), "a1": r(6, 1)})
    assert "L['a1'].size()[0] == L['a0'].size()[0]" in env.guard_texts()


def test_cat_guards_non_cat_dims():
    env = check_op(torch.cat, lambda n, m: (([r(n, m), r(m, n)], 0), {}),
                   [dict(n=4, m=4), dict(n=9, m=9)])
    assert len(env.guard_texts()) >= 1


def test_no_rule_specializes_and_counts():
    # torch.kron has no symbolic rule: the dims it touches are pinned, with guards, and the
    # fallback is counted
    env = check_op(torch.kron, lambda n, m: ((r(n, m), r(2, 3)), {}), [dict(n=5, m=7)], expect_rule=False)
    assert env.stats["specialized_ops"] == 1
    assert env.specialized_ops == {"torch.kron": 1}
    texts = env.guard_texts()
    assert "L['a0'].size()[0] == 5" in texts and "L['a0'].size()[1] == 7" in texts
    check = env.make_check_fn()
    assert check({"a0": r(5, 7), "a1": r(2, 3)}) and not check({"a0": r(6, 7), "a1": r(2, 3)})
    assert not check({"a0": r(5, 7), "a1": r(2, 4)})


def test_slicing_past_a_symbolic_end_guards():
    # x[:4] on a dim of size s: the result depends on whether s >= 4, and that is guarded
    env = check_op(operator.getitem, lambda n, m: ((r(n, m), slice(None, 4)), {}),
                   [dict(n=9, m=3), dict(n=5, m=3), dict(n=100, m=2)])
    assert any(">= 4" in t or "4 <=" in t or "< 4" in t or "> 3" in t or "<= 4" in t
               for t in env.guard_texts()), env.guard_texts()
    check = env.make_check_fn()
    assert not check({"a0": r(3, 3)})


def test_view_needs_divisibility_guard():
    env = check_op("view", lambda n, m: ((r(n * 4), -1, Sym(n)), {}), [dict(n=3, m=0), dict(n=5, m=0)])
    texts = env.guard_texts()
    assert texts, texts


def test_unbind_on_a_dynamic_dim_specializes():
    # the number of outputs would depend on a symbolic size: specialized (guarded), counted
    env = check_op(torch.unbind, lambda n, m: ((r(n, m),), {}),
                   [dict(n=4, m=5), dict(n=4, m=9), dict(n=6, m=5)], expect_rule=False)
    assert env.stats["specialized_ops"] == 1
    check = env.make_check_fn()
    assert check({"a0": r(4, 5)}) and not check({"a0": r(6, 5)})


@pytest.mark.parametrize("target, arg", [("chunk", 2), ("split", 3)])
def test_split_on_a_dynamic_dim_guards_the_piece_count(target, arg):
    # chunk(2) / split(3) of a symbolic dim: as many pieces as on the hint, guarded
    env = check_op(target, lambda n, m: ((r(n, m), arg), {}), [dict(n=5, m=3), dict(n=6, m=9), dict(n=4, m=5)])
    assert env.stats["specialized_ops"] == 0
    check = env.make_check_fn()
    assert check({"a0": r(6, 5)})
    assert check({"a0": r(7, 5)}) == (target == "chunk")  # split(3) of 7 gives 3 pieces

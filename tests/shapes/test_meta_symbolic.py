"""Symbolic shape rules: each op traced with every input dim dynamic must (1) match eager at the
traced sizes, (2) use its rule rather than specializing, (3) have guards that accept other sizes,
and (4) give the right shape/strides at those other sizes by substitution."""
import operator

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

from shapes_harness import Static, Sym, check_op

# the traced sizes (first) avoid the constants the cases use, so duck shaping links nothing by
# accident; the others must pass the guards and are checked by substitution
P = [dict(n=11, m=13), dict(n=9, m=4), dict(n=3, m=2), dict(n=17, m=6)]


def r(*shape, **kw):
    return torch.randn(*shape, **kw)


CASES = [
    # pointwise and broadcasting
    ("add", torch.add, lambda n, m: ((r(n, m), r(m)), {})),
    ("add_scalar", torch.add, lambda n, m: ((r(n, m), 2.5), {})),
    ("mul_bcast_both", torch.mul, lambda n, m: ((r(n, 1), r(1, m)), {})),
    ("sub_3d", operator.sub, lambda n, m: ((r(2, n, m), r(n, 1)), {})),
    ("method_add", "add", lambda n, m: ((r(n, m), r(n, m)), {"alpha": 2})),
    ("radd", "__radd__", lambda n, m: ((r(n, m), 3), {})),
    ("div_int_tensor", torch.div, lambda n, m: ((torch.randint(1, 9, (n, m)), r(m)), {})),
    ("lt", operator.lt, lambda n, m: ((r(n, m), r(1, m)), {})),
    ("where", torch.where, lambda n, m: ((r(n, 1) > 0, r(n, m), r(m)), {})),
    ("masked_fill", "masked_fill", lambda n, m: ((r(n, m), r(m) > 0, 0.5), {})),
    ("clamp", torch.clamp, lambda n, m: ((r(n, m),), {"min": -0.5, "max": 0.5})),
    ("transposed_add", torch.add, lambda n, m: ((r(m, n).t(), r(m)), {})),
    ("inplace_add", "add_", lambda n, m: ((r(n, m), r(m)), {})),
    ("iadd", operator.iadd, lambda n, m: ((r(n, m), r(n, 1)), {})),
    # unary
    ("relu", F.relu, lambda n, m: ((r(n, m),), {})),
    ("sin_t", torch.sin, lambda n, m: ((r(m, n).t(),), {})),
    ("gelu", F.gelu, lambda n, m: ((r(2, n, m),), {})),
    ("softmax", F.softmax, lambda n, m: ((r(n, m),), {"dim": -1})),
    ("layer_norm", F.layer_norm, lambda n, m: ((r(n, 6), (6,)), {})),
    ("to_dtype", "to", lambda n, m: ((r(n, m), torch.float64), {})),
    ("float", "float", lambda n, m: ((torch.randint(0, 5, (n, m)),), {})),
    ("contiguous", "contiguous", lambda n, m: ((r(m, n).t(),), {})),
    ("clone_t", torch.clone, lambda n, m: ((r(m, n).t(),), {})),
    ("detach", "detach", lambda n, m: ((r(n + 1, m)[1:],), {})),
    ("cumsum", torch.cumsum, lambda n, m: ((r(n, m), 1), {})),
    ("sort", torch.sort, lambda n, m: ((r(n, m),), {"dim": 0})),
    ("zeros_like", torch.zeros_like, lambda n, m: ((r(n, m),), {})),
    # reductions
    ("sum_all", torch.sum, lambda n, m: ((r(n, m),), {})),
    ("sum_dim", torch.sum, lambda n, m: ((r(n, m), 1), {})),
    ("sum_keepdim", "sum", lambda n, m: ((r(n, m, 3), (0, 2), True), {})),
    ("mean_neg", torch.mean, lambda n, m: ((r(n, m), -1), {"keepdim": True})),
    ("amax", torch.amax, lambda n, m: ((r(n, m), 0), {})),
    ("max_dim", torch.max, lambda n, m: ((r(n, m), 1), {})),
    ("max_pair", torch.max, lambda n, m: ((r(n, m), r(m)), {})),
    ("argmax", torch.argmax, lambda n, m: ((r(n, m),), {"dim": 0})),
    ("var", torch.var, lambda n, m: ((r(n, m), 1), {})),
    ("std_all", torch.std, lambda n, m: ((r(n, m),), {})),
    ("norm_dim", torch.norm, lambda n, m: ((r(n, m),), {"dim": 1})),
    ("topk", torch.topk, lambda n, m: ((r(n, m), 2), {})),
    ("logsumexp", torch.logsumexp, lambda n, m: ((r(n, m), 1), {})),
    # matmul family
    ("matmul_2d", torch.matmul, lambda n, m: ((r(n, m), r(m, 3)), {})),
    ("matmul_batched", operator.matmul, lambda n, m: ((r(4, n, m), r(m, n)), {})),
    ("matmul_bcast", torch.matmul, lambda n, m: ((r(2, 1, n, m), r(3, m, 5)), {})),
    ("matmul_vec", torch.matmul, lambda n, m: ((r(n, m), r(m)), {})),
    ("matmul_vec_left", torch.matmul, lambda n, m: ((r(n), r(2, n, m)), {})),
    ("dot", torch.dot, lambda n, m: ((r(n), r(n)), {})),
    ("mm", torch.mm, lambda n, m: ((r(n, m), r(m, n)), {})),
    ("bmm", torch.bmm, lambda n, m: ((r(3, n, m), r(3, m, 4)), {})),
    ("addmm", torch.addmm, lambda n, m: ((r(m), r(n, 3), r(3, m)), {})),
    ("linear", F.linear, lambda n, m: ((r(n, m, 8), r(5, 8), r(5)), {})),
    ("sdpa", F.scaled_dot_product_attention, lambda n, m: ((r(2, n, 8), r(2, m, 8), r(2, m, 4)), {})),
    # views
    ("view_infer", "view", lambda n, m: ((r(n, m, 2), -1, 2), {})),
    ("view_sym", "view", lambda n, m: ((r(n, m), Sym(m), Sym(n)), {})),
    ("view_tuple", "view", lambda n, m: ((r(n, 6), (Sym(n), 2, 3)), {})),
    ("reshape_noncontig", "reshape", lambda n, m: ((r(m, n).t(), -1), {})),
    ("reshape_fn", torch.reshape, lambda n, m: ((r(n, m, 4), (-1, 4)), {})),
    ("view_as", "view_as", lambda n, m: ((r(n, m), r(m, n)), {})),
    ("flatten", torch.flatten, lambda n, m: ((r(2, n, m, 3), 1), {})),
    ("flatten_mid", "flatten", lambda n, m: ((r(2, n, m, 3), 1, 2), {})),
    ("unflatten", "unflatten", lambda n, m: ((r(n, 12), 1, (3, -1)), {})),
    ("permute", "permute", lambda n, m: ((r(n, m, 3), 2, 0, 1), {})),
    ("transpose", torch.transpose, lambda n, m: ((r(n, m, 3), 0, 2), {})),
    ("t", "t", lambda n, m: ((r(n, m),), {})),
    ("mT_like_transpose", "transpose", lambda n, m: ((r(2, n, m), -1, -2), {})),
    ("movedim", torch.movedim, lambda n, m: ((r(n, m, 3), 0, -1), {})),
    ("unsqueeze", "unsqueeze", lambda n, m: ((r(n, m), 1), {})),
    ("unsqueeze_end", torch.unsqueeze, lambda n, m: ((r(n, m), -1), {})),
    ("squeeze", "squeeze", lambda n, m: ((r(n, 1, m),), {})),
    ("squeeze_dim", torch.squeeze, lambda n, m: ((r(n, 1, m), 1), {})),
    ("squeeze_sym_noop", torch.squeeze, lambda n, m: ((r(n, m), 0), {})),
    ("expand", "expand", lambda n, m: ((r(n, 1), Sym(n), Sym(m)), {})),
    ("expand_lead", "expand", lambda n, m: ((r(1, m), 3, -1, Sym(m)), {})),
    ("expand_as", "expand_as", lambda n, m: ((r(m), r(n, m)), {})),
    ("select", torch.select, lambda n, m: ((r(n, m), 1, -1), {})),
    ("narrow", "narrow", lambda n, m: ((r(n, m), 0, 1, 1), {})),
    ("unbind", torch.unbind, lambda n, m: ((Static(r(3, n, m), 0),), {})),
    ("split_static_dim", torch.split, lambda n, m: ((Static(r(n, 6), 1), 4, 1), {})),
    ("chunk", "chunk", lambda n, m: ((Static(r(n, 6, m), 1), 3, 1), {})),
    # indexing
    ("getitem_int", operator.getitem, lambda n, m: ((r(n, m), 1), {})),
    ("getitem_neg", operator.getitem, lambda n, m: ((r(n, m), -1), {})),
    ("getitem_slice", operator.getitem, lambda n, m: ((r(n, m), (slice(1, None), slice(None, -1))), {})),
    ("getitem_step", operator.getitem, lambda n, m: ((r(n, m), (slice(None), slice(None, None, 2))), {})),
    ("getitem_none_ellipsis", operator.getitem, lambda n, m: ((r(n, m, 3), (None, Ellipsis, 0)), {})),
    ("getitem_sym_bound", operator.getitem, lambda n, m: ((r(n, m), (slice(None, Sym(n - 1)),)), {})),
    ("getitem_big_stop", operator.getitem, lambda n, m: ((r(n, m), slice(0, 100)), {})),
    ("getitem_index_tensor", operator.getitem, lambda n, m: ((r(n, m), torch.randint(0, n, (4, 3))), {})),
    ("getitem_index_tensor_dim1", operator.getitem,
     lambda n, m: ((r(n, m), (slice(None), torch.randint(0, m, (5,)))), {})),
    ("index_select", torch.index_select, lambda n, m: ((r(n, m), 1, torch.randint(0, m, (n,))), {})),
    ("gather", torch.gather, lambda n, m: ((r(n, m), 1, torch.randint(0, m, (n, 2))), {})),
    ("embedding", F.embedding, lambda n, m: ((torch.randint(0, 10, (n, m)), r(10, 4)), {})),
    # joining, padding, repeat
    ("cat0", torch.cat, lambda n, m: (([r(n, m), r(m + 1, m)],), {})),
    ("cat1", torch.cat, lambda n, m: (([r(n, m), r(n, 3), r(n, m)], 1), {})),
    ("stack", torch.stack, lambda n, m: (([r(n, m), r(n, m)],), {"dim": 1})),
    ("pad", F.pad, lambda n, m: ((r(n, m), (1, 2)), {})),
    ("pad_sym", F.pad, lambda n, m: ((r(3, n, m), (1, 1, Sym(m), 0)), {})),
    ("repeat", "repeat", lambda n, m: ((r(n, m), 2, 3), {})),
    # factories
    ("zeros_sym", torch.zeros, lambda n, m: ((Sym(n), Sym(m)), {})),
    ("new_zeros", "new_zeros", lambda n, m: ((r(n, m), (Sym(m), 3)), {})),
    ("new_ones_from_size", "new_ones", lambda n, m: ((r(n, m), Sym(n), Sym(m)), {})),
    ("full", torch.full, lambda n, m: (((Sym(n), 2), 1.5), {})),
    ("arange", torch.arange, lambda n, m: ((Sym(n),), {})),
    ("arange_start_step", torch.arange, lambda n, m: ((1, Sym(n * 3), 2), {})),
    # convolution and pooling
    ("conv2d", F.conv2d, lambda n, m: ((r(2, 3, n + 4, m + 4), r(4, 3, 3, 3)), {"stride": 2, "padding": 1})),
    ("conv1d_dil", F.conv1d, lambda n, m: ((r(2, 3, n + 8), r(4, 3, 3)), {"dilation": 2})),
    ("conv2d_same", F.conv2d, lambda n, m: ((r(1, 3, n, m), r(2, 3, 3, 3)), {"padding": "same"})),
    ("max_pool2d", F.max_pool2d, lambda n, m: ((r(2, 3, n + 4, m + 4), 2), {})),
    ("avg_pool1d", F.avg_pool1d, lambda n, m: ((r(2, 3, n + 4), 3, 2, 1), {})),
    ("adaptive_avg", F.adaptive_avg_pool2d, lambda n, m: ((r(2, 3, n, m), (1, 1)), {})),
    # nn.Module calls
    ("mod_linear", nn.Linear(6, 4), lambda n, m: ((r(n, m, 6),), {})),
    ("mod_conv", nn.Conv2d(3, 4, 3, padding=1), lambda n, m: ((r(2, 3, n, m),), {})),
    ("mod_layernorm", nn.LayerNorm(6), lambda n, m: ((r(n, m, 6),), {})),
    ("mod_embedding", nn.Embedding(10, 5), lambda n, m: ((torch.randint(0, 10, (n, m)),), {})),
    ("mod_flatten", nn.Flatten(), lambda n, m: ((r(n, m, 3),), {})),
    ("mod_maxpool", nn.MaxPool2d(2), lambda n, m: ((r(1, 2, n + 2, m + 2),), {})),
    # Python values
    ("size", "size", lambda n, m: ((r(n, m),), {})),
    ("size_dim", "size", lambda n, m: ((r(n, m), -1), {})),
    ("numel", "numel", lambda n, m: ((r(n, m, 3),), {})),
    ("dim", "dim", lambda n, m: ((r(n, m),), {})),
    ("stride", "stride", lambda n, m: ((r(n, m, 3),), {})),
]


@pytest.mark.parametrize("name,target,build", CASES, ids=[c[0] for c in CASES])
def test_symbolic_rule(name, target, build):
    check_op(target, build, P)


def test_requires_grad_propagates():
    check_op(torch.mul, lambda n, m: ((r(n, m, requires_grad=True), r(m)), {}), P)
    with torch.no_grad():
        env = check_op(torch.mul, lambda n, m: ((r(n, m, requires_grad=True), r(m)), {}), P)
    assert not env.guards or env.guard_texts()


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
    # torch.diagonal has no symbolic rule: the dims it touches are pinned, with guards, and the
    # fallback is counted
    env = check_op(torch.diagonal, lambda n, m: ((r(n, m),), {}), [dict(n=5, m=7)], expect_rule=False)
    assert env.stats["specialized_ops"] == 1
    assert [k for k in env.specialized_ops if "diagonal" in k], env.specialized_ops
    texts = env.guard_texts()
    assert "L['a0'].size()[0] == 5" in texts and "L['a0'].size()[1] == 7" in texts
    check = env.make_check_fn()
    assert check({"a0": r(5, 7)}) and not check({"a0": r(6, 7)})


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


@pytest.mark.parametrize("target", [torch.unbind, "chunk"])
def test_split_on_a_dynamic_dim_specializes(target):
    # the number of outputs would depend on a symbolic size: specialized (guarded), counted
    env = check_op(target, lambda n, m: ((r(n, m), 2) if target == "chunk" else (r(n, m),), {}),
                   [dict(n=4, m=5), dict(n=4, m=9), dict(n=6, m=5)], expect_rule=False)
    assert env.stats["specialized_ops"] == 1
    check = env.make_check_fn()
    assert check({"a0": r(4, 5)}) and not check({"a0": r(6, 5)})

"""torch.vmap traced as a sub-graph (pydynamo/executor/higher_order.py): what the compat corpus
(semantics_corpus/s_transforms.py, against torch.compile) cannot state — the clean breaks where
the transform runs eagerly, backends (codegen, aot training) taking the node, dynamic sizes, and
the pytree helpers' structures. Each compares with eager."""
from __future__ import annotations

import warnings

import pytest
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.associative_scan import associative_scan

import pydynamo
from pydynamo.executor.higher_order import VmapCall


def _explain(fn, *args):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return pydynamo.explain(fn)(*args)


def _reasons(e) -> list[str]:
    return [str(r) for r in e.break_reasons]


def _vmap_nodes(e) -> list:
    return [n for g in e.graphs for n in g.graph.nodes if isinstance(n.target, VmapCall)]


def combine(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


def scan_model(a, b, w):
    _, s = associative_scan(combine, (a.sigmoid(), b), dim=2, combine_mode="generic")
    m = torch.vmap(lambda r: r * w.sum() + r.mean())(s.flatten(0, 1))
    return (m * 2).sum(-1)


def test_vmap_is_one_node_calling_a_sub_graph():
    def f(x, y):
        return torch.vmap(torch.vmap(lambda a, b: a * b + 1, in_dims=(0, None)), in_dims=(0, None))(x, y).cos()
    x, y = torch.randn(2, 3, 4), torch.randn(4)
    e = _explain(f, x, y)
    assert e.graph_count == 1 and not e.break_reasons
    (node,) = _vmap_nodes(e)
    inner = [n for n in node.target.gm.graph.nodes if isinstance(n.target, VmapCall)]
    assert len(inner) == 1           # the nested vmap is a node of the outer sub-graph
    torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(x, y), f(x, y))


def test_value_escaping_the_vmapped_function_is_a_clean_break():
    """eager leaks a dead BatchedTensor and raises when it is used; the per-example tracker is
    dead after the call, so its use is a break and eager's error is raised."""
    def f(x):
        leak = []

        def g(r):
            leak.append(r * 2)
            return r + 1
        out = torch.vmap(g)(x)
        return out + leak[0]
    x = torch.randn(3, 4)
    with pytest.raises(RuntimeError) as eager:
        f(x)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises(RuntimeError) as compiled:
            pydynamo.optimize(f, backend="eager")(x)
    assert str(compiled.value).split("\n")[0] == str(eager.value).split("\n")[0]


def _log(r):
    print("row of", tuple(r.shape))     # a graph break inside the vmapped function
    return r * 2


@pytest.mark.parametrize("kind", ["chunk_size", "in_place_argument", "break_inside"])
def test_what_the_sub_graph_cannot_hold_runs_eagerly(kind):
    def f(x):
        y = x * 2
        if kind == "chunk_size":
            out = torch.vmap(lambda r: r.sin(), chunk_size=2)(y)
        elif kind == "in_place_argument":
            out = torch.vmap(lambda r: r.add_(1))(y)
        else:
            out = torch.vmap(_log)(y)
        return out + 1
    x = torch.randn(3, 4)
    e = _explain(f, x)
    assert e.graph_count >= 1 and e.break_reasons and not _vmap_nodes(e)
    torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(x), f(x))


def test_codegen_and_training_take_the_vmap_node():
    a, b, w = torch.randn(2, 3, 5, 4), torch.randn(2, 3, 5, 4), torch.randn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("error")      # no eager fallback warning from codegen
        torch.testing.assert_close(pydynamo.optimize(scan_model, backend="codegen")(a, b, w),
                                   scan_model(a, b, w))
    for backend in ("aot_eager", "codegen"):
        a1, w1 = a.clone().requires_grad_(), w.clone().requires_grad_()
        a2, w2 = a.clone().requires_grad_(), w.clone().requires_grad_()
        pydynamo.optimize(scan_model, backend=backend)(a1, b, w1).sum().backward()
        scan_model(a2, b, w2).sum().backward()
        torch.testing.assert_close((a1.grad, w1.grad), (a2.grad, w2.grad))


def test_dynamic_sizes_are_guarded_not_assumed():
    """The scan's own Python branches on the sequence length (specialized, guarded): every new
    length recompiles and each answer is eager's."""
    w = torch.randn(4)
    opt = pydynamo.optimize(scan_model, backend="eager", dynamic=True)
    for n in (5, 7, 9, 5):
        a, b = torch.randn(2, 3, n, 4), torch.randn(2, 3, n, 4)
        torch.testing.assert_close(opt(a, b, w), scan_model(a, b, w))


def test_vmap_keeps_sizes_symbolic(monkeypatch):
    """The vmap node's shape rule (per-example shape with the batch size at out_dim) agrees with
    the run on hints (STRICT_RULES: a disagreement raises): one compile serves every size."""
    from pydynamo import convert_frame, meta
    monkeypatch.setattr(meta, "STRICT_RULES", True)
    w = torch.randn(4)

    def f(x, y):
        a, s = torch.vmap(lambda p, q: (p * q + w.sum(), p.sum()), in_dims=(1, None), out_dims=(1, 0))(x, y)
        return torch.vmap(torch.vmap(lambda v: v.softmax(0)))(a.unsqueeze(-1).expand(-1, -1, 4)), s
    items = []
    monkeypatch.setattr(convert_frame, "RECORDERS", [items.append])
    opt = pydynamo.optimize(f, backend="eager", dynamic=True)
    for n in (5, 7, 9):
        x, y = torch.randn(3, n), torch.randn(3)
        torch.testing.assert_close(opt(x, y), f(x, y))
    assert sum(type(i).__name__ == "FrameResult" for i in items) == 1


def test_pytree_structures_are_torchs():
    def f(x, y):
        leaves, spec = pytree.tree_flatten({"b": [y, (x, None)], "a": x})
        back = pytree.tree_unflatten([v if v is None else v + 1 for v in leaves], spec)
        return back["b"][1][0] * back["a"], spec == pytree.tree_structure({"b": [0, (0, None)], "a": 0})
    x, y = torch.randn(3), torch.randn(3)
    e = _explain(f, x, y)
    assert e.graph_count == 1 and not e.break_reasons
    torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(x, y), f(x, y))


def test_pytree_of_a_namedtuple_is_a_clean_break():
    import collections
    P = collections.namedtuple("P", "a b")

    def f(x):
        leaves, spec = pytree.tree_flatten(P(x, x * 2))
        return pytree.tree_unflatten([v + 1 for v in leaves], spec).b
    x = torch.randn(3)
    e = _explain(f, x)
    assert any("pytree" in r for r in _reasons(e))
    torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(x), f(x))


def test_torch_function_under_a_shadowed_submodule_is_traced_not_a_node():
    """`torch._higher_order_ops.associative_scan` is a function on its package, so FX could not
    spell the submodule's `_interleave` as a node target (the graph raised AttributeError when it
    ran): such a helper is traced through."""
    from torch._higher_order_ops.associative_scan import _interleave

    def f(a, b):
        return _interleave(a, b, dim=0) * 2
    a, b = torch.randn(3, 2), torch.randn(2, 2)
    e = _explain(f, a, b)
    assert e.graph_count == 1 and not e.break_reasons
    assert all(getattr(n.target, "__name__", "") != "_interleave" for g in e.graphs for n in g.graph.nodes)
    torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(a, b), f(a, b))

"""A tied embedding's gradient added into the LM head's in place (codegen/reinplace.py
`accumulate_embedding_grads`): GPT-2's token embedding is also its LM head, and its backward
was `add(head_grad, embedding_dense_backward(...))`, two vocabulary-sized passes more than the
rows seen. The rows are now index_add_-ed into the head's product, which nothing else reads.
Gradients equal eager's; the rewrite applies only where it keeps eager's rows and values."""
import copy

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import codegen
import pydynamo
from codegen.reinplace import accumulate_embedding_grads, embedding_grad_into

aten = torch.ops.aten


class TiedLM(nn.Module):
    def __init__(self, vocab=37, dim=16, padding_idx=None):
        super().__init__()
        self.emb = nn.Embedding(vocab, dim, padding_idx=padding_idx)
        self.proj = nn.Linear(dim, dim)

    def forward(self, ids):
        h = torch.tanh(self.proj(self.emb(ids)))
        logits = F.linear(h, self.emb.weight)         # the LM head: the embedding, tied
        return F.cross_entropy(logits.flatten(0, 1), ids.flatten())


def _train_both(model, ids):
    ref = copy.deepcopy(model)
    before = codegen.counters["embedding_grads_accumulated"]
    pydynamo.reset()
    pydynamo.optimize(model, backend="codegen")(ids).backward()
    ref(ids).backward()
    for (name, p), q in zip(model.named_parameters(), ref.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-6, msg=name)
    pydynamo.reset()
    return codegen.counters["embedding_grads_accumulated"] - before


def test_tied_embedding_gradient_is_added_in_place_and_equals_eager():
    torch.manual_seed(0)
    ids = torch.randint(0, 37, (3, 11))
    ids[0, :4] = 5                       # a row seen several times: its sum
    assert _train_both(TiedLM(), ids) == 1


def test_padding_idx_keeps_the_eager_kernel():
    """padding_idx rows get no gradient in eager; that rewrite is not made (gradients equal)."""
    torch.manual_seed(1)
    ids = torch.randint(0, 37, (2, 9))
    ids[:, 0] = 0
    assert _train_both(TiedLM(padding_idx=0), ids) == 0


def _graph(extra_reader: bool):
    g = torch.fx.Graph()
    a, b, go, idx = (g.placeholder(n) for n in ("a", "b", "go", "idx"))
    prod = g.call_function(aten.mm.default, (a, b))
    t1 = g.call_function(aten.t.default, (prod,))
    t2 = g.call_function(aten.t.default, (t1,))
    e = g.call_function(aten.embedding_dense_backward.default, (go, idx, 7, -1, False))
    s = g.call_function(aten.add.Tensor, (t2, e))
    outs = [s]
    if extra_reader:
        outs.append(g.call_function(aten.mul.Tensor, (prod, 2.0)))
    g.output(tuple(outs))
    gm = torch.fx.GraphModule(torch.nn.Module(), g)
    for n, v in zip(gm.graph.nodes, _vals()):
        n.meta["val"] = v
    return gm


def _vals():
    a, b = torch.randn(7, 5), torch.randn(5, 4)
    go, idx = torch.randn(3, 6, 4), torch.randint(0, 7, (3, 6))
    prod = a @ b
    e = aten.embedding_dense_backward(go, idx, 7, -1, False)
    return [a, b, go, idx, prod, prod.t(), prod, e, prod + e, prod * 2]


@pytest.mark.parametrize("extra_reader", [False, True])
def test_only_a_product_nothing_else_reads_is_written(extra_reader):
    gm = _graph(extra_reader)
    a, b = torch.randn(7, 5), torch.randn(5, 4)
    go, idx = torch.randn(3, 6, 4), torch.randint(0, 7, (3, 6))
    expect = gm(a, b, go, idx)
    assert accumulate_embedding_grads(gm) == (0 if extra_reader else 1)
    assert any(n.target is embedding_grad_into for n in gm.graph.nodes) != extra_reader
    for x, y in zip(gm(a, b, go, idx), expect):
        torch.testing.assert_close(x, y)


def test_not_under_deterministic_algorithms():
    gm = _graph(False)
    prev = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert accumulate_embedding_grads(gm) == 0
    finally:
        torch.use_deterministic_algorithms(prev)

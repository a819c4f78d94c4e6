"""The partition's minimum cut (pydynamo/aot/partition.py, mincut.py): cases the old greedy
rule saved too much on, found on GPT-2's training graph (1 layer, bf16 autocast: 31 MiB saved
now against torch.compile's 121, `python benchmarks/saved_activations.py`), each checked for the
saved set and for eager's gradients."""
import pytest
import torch
import torch.nn.functional as F

import pydynamo
from pydynamo import aot
from pydynamo.aot.mincut import INF, FlowGraph
from pydynamo.aot.partition import _free, nbytes, partition
from pydynamo.aot.recorder import record


pytestmark = pytest.mark.usefixtures("fresh_aot")


def _chain(*caps):
    """s -> v0 -> v1 -> ... -> t, the inner edges with these capacities."""
    g = FlowGraph()
    names = ["s"] + [f"v{i}" for i in range(len(caps) + 1)] + ["t"]
    for a, b, c in zip(names, names[1:], (INF,) + caps + (INF,)):
        g.add_edge(a, b, c)
    return g


def test_min_cut_takes_the_cheapest_cut_nearest_the_sink():
    # a tie between two edges of 5: the cut nearest the sink
    assert _chain(5, 5).min_cut("s", "t") == (5, {"v2", "t"})
    # a cheaper edge anywhere wins
    assert _chain(2, 5).min_cut("s", "t") == (2, {"v1", "v2", "t"})
    # two paths: the cut is the sum of their bottlenecks
    g = FlowGraph()
    for mid, cap in (("x", 3), ("y", 4)):
        g.add_edge("s", mid, cap)
        g.add_edge(mid, "t", 10)
    assert g.min_cut("s", "t")[0] == 7


def test_min_cut_of_a_long_chain_does_not_recurse():
    g = FlowGraph()
    for i in range(5000):
        g.add_edge(i, i + 1, 7)
    assert g.min_cut(0, 5000)[0] == 7


def _split(f, *args):
    gm = torch.fx.symbolic_trace(f)
    joint = record(gm, list(args))
    return partition(joint.gm, len(joint.computed), joint.num_tangents, joint.num_inputs)


def _check_grads(f, *args):
    """aot_eager runs the same aten ops recomputed: eager's gradients bit for bit."""
    eager = torch.autograd.grad(f(*args)[0].float().sum(), args)
    fresh = [a.detach().clone().requires_grad_() for a in args]
    out = pydynamo.optimize(f, backend="aot_eager")(*fresh)[0]
    out.float().sum().backward()
    assert aot.counters["backward_compiled"] == 1
    for got, want in zip([a.grad for a in fresh], eager):
        assert torch.equal(got, want)


def _gelu_tanh(x):
    # transformers' "gelu_new": a pointwise chain of six ops
    return 0.5 * x * (1.0 + torch.tanh(0.7978845608028654 * (x + 0.044715 * torch.pow(x, 3.0))))


def test_a_pointwise_chain_with_two_inputs_per_op_saves_only_its_root():
    """The greedy rule looked at one node at a time: a product of two chain values needs two
    saved tensors to recompute, more bytes than itself, so it kept the chain. The cut sees the
    whole chain hangs off the matmul result."""
    def f(x, w1, w2):
        return (_gelu_tanh(x @ w1) @ w2,)
    x, w1, w2 = (torch.randn(8, 16, requires_grad=True), torch.randn(16, 64, requires_grad=True),
                 torch.randn(64, 16, requires_grad=True))
    fw, bw, saved, positions, recompute = _split(f, x, w1, w2)
    computed = [n for n in saved if not _free(n)]     # inputs and their views cost nothing
    assert [str(n.target) for n in computed] == ["aten.mm.default"], computed
    assert sum(nbytes(n) for n in computed) == 8 * 64 * 4
    _check_grads(f, x, w1, w2)


def test_an_autocast_weight_copy_is_recast_not_saved():
    """Under autocast the weight's bfloat16 copy (and its transposes) were saved: a copy of
    every weight. Recasting from the weight, which is alive anyway, saves nothing. (The casts
    are spelled out: autocast inserts the same `_to_copy`s.)"""
    def f(x, w):
        return (F.linear(x.bfloat16(), w.bfloat16()).relu(),)
    x, w = torch.randn(8, 32, requires_grad=True), torch.randn(64, 32, requires_grad=True)
    fw, bw, saved, positions, recompute = _split(f, x, w)
    costly = [n for n in saved if not _free(n)]
    assert not [n for n in costly if tuple(n.meta["val"].shape) in ((64, 32), (32, 64))], saved
    assert any(str(n.target) == "aten._to_copy.default" for n in recompute)
    _check_grads(f, x, w)


def test_log_softmax_of_an_upcast_saves_the_narrow_logits():
    """cross_entropy(logits.float()) with bfloat16 logits: saving log_softmax's float32 output
    takes twice the bytes of the logits it is recomputed from."""
    def f(h, w, target):
        logits = (h.bfloat16() @ w.bfloat16())
        return (F.cross_entropy(logits.float(), target),)
    h, w = torch.randn(16, 8, requires_grad=True), torch.randn(8, 1000, requires_grad=True)
    target = torch.randint(0, 1000, (16,))
    fw, bw, saved, positions, recompute = _split(f, h, w, target)
    big = [n for n in saved if n.op != "placeholder" and nbytes(n) >= 16 * 1000 * 2]
    assert [(n.meta["val"].dtype, nbytes(n)) for n in big] == [(torch.bfloat16, 16 * 1000 * 2)]
    assert any(str(n.target) == "aten._log_softmax.default" for n in recompute)
    eager = torch.autograd.grad(f(h, w, target)[0], (h, w))
    hg, wg = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    pydynamo.optimize(f, backend="aot_eager")(hg, wg, target)[0].backward()
    assert torch.equal(hg.grad, eager[0]) and torch.equal(wg.grad, eager[1])


def test_a_fusing_compiler_saves_the_log_softmax_row_statistic():
    """split_statistics (codegen): the log-softmax becomes x - logsumexp(x); the forward saves
    the logsumexp (one value per row) beside the logits, the backward recomputes only the
    subtraction. Without the split the backward recomputed the log-softmax whole: its max and
    sum over every row again. (The loss of a transformers model: a graph of its own, the
    logits its input, alive anyway. Where the logits are computed in the same graph, saving
    the log-softmax costs what the logits do, and the cut saves it instead.)"""
    def f(logits, target):
        return (F.cross_entropy(logits, target),)
    logits = torch.randn(16, 1000, requires_grad=True)
    target = torch.randint(0, 1000, (16,))
    gm = torch.fx.symbolic_trace(f)
    joint = record(gm, [logits, target])
    fw, bw, saved, positions, recompute = partition(
        joint.gm, len(joint.computed), joint.num_tangents, joint.num_inputs, split_statistics=True)
    assert "aten.logsumexp.default" in {str(n.target) for n in saved}, saved
    assert [tuple(n.meta["val"].shape) for n in saved
            if str(n.target) == "aten.logsumexp.default"] == [(16, 1)]
    bw_ops = {str(n.target) for n in bw.graph.nodes if n.op == "call_function"}
    assert "aten.logsumexp.default" not in bw_ops and "aten._log_softmax.default" not in bw_ops
    assert "aten.sub.Tensor" in bw_ops
    assert sum(nbytes(n) for n in saved if not _free(n)) <= 16 * 8 + 16 * 4   # stats only
    torch.testing.assert_close(fw(logits, target)[0], f(logits, target)[0])


def test_a_random_mask_is_never_recomputed():
    def f(x, w):
        return (F.dropout(x @ w, 0.5, training=True) * 2,)
    x, w = torch.randn(8, 16, requires_grad=True), torch.randn(16, 32, requires_grad=True)
    fw, bw, saved, positions, recompute = _split(f, x, w)
    assert not any("bernoulli" in str(n.target) or "rand" in str(n.target) for n in recompute)
    assert all(n.op == "placeholder" or "tangent" not in n.name for n in saved)


def test_recomputed_values_come_just_before_their_first_use_in_the_backward():
    """Copied in forward order, each layer's recomputed GELU came first in the backward and
    stayed alive through all of it (GPT-2 small fp32: 12 x 24 MiB at the step's memory peak).
    Every recomputed node now comes right before the first backward node that needs it: between
    a recomputed node and its first user in the backward graph lie only other recomputed nodes
    feeding that same user."""
    def f(x, w1, w2, w3, w4):
        h = _gelu_tanh(x @ w1) @ w2          # layer 1
        return (_gelu_tanh(h @ w3) @ w4,)    # layer 2
    args = [torch.randn(8, 16, requires_grad=True), torch.randn(16, 64, requires_grad=True),
            torch.randn(64, 16, requires_grad=True), torch.randn(16, 64, requires_grad=True),
            torch.randn(64, 16, requires_grad=True)]
    fw, bw, saved, positions, recompute = _split(f, *args)
    assert recompute, "the GELU chains are recomputed"
    nodes = [n for n in bw.graph.nodes if n.op == "call_function"]
    order = {n: i for i, n in enumerate(nodes)}
    recomputed_names = {n.name for n in recompute}
    tangent_users = [n for n in nodes if n.name not in recomputed_names]
    first_bw = order[tangent_users[0]]
    for n in nodes:
        if n.name not in recomputed_names:
            continue
        first_use = min(order[u] for u in n.users if u in order)
        between = nodes[order[n] + 1:first_use]
        assert all(m.name in recomputed_names for m in between), (n, between)
    # and the second layer's chain (used first by the backward) is not computed before it:
    # some recomputed node comes after the backward's first own node
    assert any(order[n] > first_bw for n in nodes if n.name in recomputed_names)
    _check_grads(f, *args)

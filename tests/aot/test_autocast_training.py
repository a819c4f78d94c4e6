"""Training under torch.autocast (issue 16): the joint graph carries eager autocast's casts.

The recorder's stand-ins report the real device, so torch's own autocast layer casts them while
the torch-level graph runs (above autograd, as in eager): the joint graph holds the casts
(`aten._to_copy`) and their backward. Checked here on CPU bfloat16, per case: the compiled
function's outputs and the gradients of everything that requires grad equal eager's (dtypes
exactly, values at bfloat16 tolerances), the backward ran compiled
(pydynamo.aot.counters["backward_compiled"]) and no graph fell back to eager autograd. Regions
inside the compiled function (enter/exit nodes in the graph) and an ambient region around the
call (the backward is then called outside it, as a training loop does).
"""
import copy
import math

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import codegen
import pydynamo
import pydynamo.aot as aot
from differential import assert_close_or_no_less_accurate

BF16 = torch.bfloat16


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 8)
        self.ln = nn.LayerNorm(32)

    def forward(self, x, target):
        h = self.ln(F.gelu(self.fc1(x)))
        logits = self.fc2(h)
        return logits, F.cross_entropy(logits, target)


def _attention(x, w):
    q = (x @ w).view(2, 4, 2, 8).transpose(1, 2)
    att = (q @ q.transpose(-2, -1)) * (1.0 / math.sqrt(8))
    y = F.softmax(att, dim=-1) @ q
    return y.transpose(1, 2).reshape(2, 4, 16), F.scaled_dot_product_attention(q, q, q,
                                                                              is_causal=True)


def _x(*s, grad=True):
    return torch.randn(*s, requires_grad=grad)


_T = torch.tensor([1, 0, 7, 3])
CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: (_x(4, 16), _x(8, 16), _x(8))),
    "matmul": (lambda x, w: (x @ w, torch.matmul(x, w), x.matmul(w)),
               lambda: (_x(4, 16), _x(16, 8))),
    "softmax": (lambda x, w: (torch.softmax(x @ w, -1), F.softmax(x, -1), F.log_softmax(x @ w, 1)),
                lambda: (_x(4, 16), _x(16, 8))),
    "layer_norm": (lambda x, w, g, b: (F.layer_norm(x @ w, (8,), g, b), F.layer_norm(x, (16,))),
                   lambda: (_x(4, 16), _x(16, 8), _x(8), _x(8))),
    "conv2d": (lambda x, k, b: F.conv2d(x, k, b, padding=1),
               lambda: (_x(2, 3, 8, 8), _x(4, 3, 3, 3), _x(4))),
    "addmm": (lambda b, x, w: (torch.addmm(b, x, w), b.addmm(x, w)),
              lambda: (_x(4, 8), _x(4, 16), _x(16, 8))),
    "sum": (lambda x, w: ((x @ w).sum(), x.sum(dim=1), torch.sum(x @ w, 0), (x @ w).mean()),
            lambda: (_x(4, 16), _x(16, 8))),
    "cross_entropy": (lambda x, w, t: (F.cross_entropy(x @ w, t),
                                       F.nll_loss(F.log_softmax(x @ w, 1), t)),
                      lambda: (_x(4, 16), _x(16, 8), _T)),
    "bmm_einsum": (lambda a, b: (torch.bmm(a, b), torch.baddbmm(a @ b, a, b),
                                 torch.einsum("bij,bjk->bik", a, b)),
                   lambda: (_x(2, 4, 4), _x(2, 4, 4))),
    "promote": (lambda x, w: (torch.cat([x @ w, x[:, :8]], 1), (x @ w) + x[:, :8]),
                lambda: (_x(4, 16), _x(16, 8))),
    "pointwise": (lambda x, w: ((x @ w).exp(), 2.0 / (x @ w), (x @ w) ** 2, F.gelu(x @ w)),
                  lambda: (_x(4, 16), _x(16, 8))),
    "losses": (lambda x, w, y: (F.mse_loss(x @ w, y), F.l1_loss(x @ w, y),
                                F.binary_cross_entropy_with_logits(x @ w, y.sigmoid())),
               lambda: (_x(4, 16), _x(16, 8), torch.randn(4, 8))),
    "attention": (_attention, lambda: (_x(2, 4, 16), _x(16, 16))),
}


def _region(fn):
    def f(*args):
        with torch.autocast("cpu", BF16):
            return fn(*args)
    return f


def _outs(v):
    return list(v) if isinstance(v, (tuple, list)) else [v]


def _run(fn, args, wrt, ambient):
    with torch.autocast("cpu", BF16, enabled=ambient):
        outs = _outs(fn(*args))
    loss = sum(o.float().sum() for o in outs if o.requires_grad)
    return outs, torch.autograd.grad(loss, wrt, allow_unused=True)


def _close(a, b, exact=None):
    """aot_eager runs eager's bf16 ops: bf16 tolerances; codegen's fused kernels compute bf16
    chains in fp32, so where a value sums large terms (the 2 / y gradients, attention's) it
    must instead be as close to a float64 run (`exact`) as eager is (differential.py)."""
    assert_close_or_no_less_accurate(a, b, exact, rtol=1.6e-2, atol=1e-2)


def _exact(fn, args, wrt):
    """The outputs and gradients in float64 (autocast leaves float64 alone)."""
    args64 = [a.detach().double().requires_grad_(a.requires_grad)
              if isinstance(a, torch.Tensor) and a.is_floating_point() else a for a in args]
    w64 = [args64[i] for i, a in enumerate(args) if any(a is w for w in wrt)]
    outs, grads = _run(fn, args64, w64, False)
    return outs, grads


def _compare(fn, args, wrt, backend="aot_eager", ambient=False, exact_run=None):
    pydynamo.reset()
    aot.counters.clear()
    codegen.counters.clear()
    ref, gref = _run(fn, args, wrt, ambient)
    got, g = _run(pydynamo.optimize(fn, backend=backend), args, wrt, ambient)
    if backend != "codegen":
        exact, gexact = [None] * len(ref), [None] * len(gref)
    elif exact_run is not None:
        exact, gexact = exact_run()
    else:
        exact, gexact = _exact(fn, args, wrt)
    assert [o.dtype for o in got] == [o.dtype for o in ref]
    for a, b, e in zip(got, ref, exact):
        _close(a, b, e)
    assert [None if x is None else x.dtype for x in g] == \
        [None if x is None else x.dtype for x in gref]
    for a, b, e in zip(g, gref, gexact):
        if b is not None:
            _close(a, b, e)
    assert aot.counters["backward_compiled"] > 0 and not aot.counters["eager_fallback"], \
        dict(aot.counters)
    if backend == "codegen":    # the C++ kernels take bfloat16 (computed in fp32, rounded on store)
        assert codegen.counters["cpp_graphs_compiled"] >= 2 and \
            not codegen.counters["eager_fallback_graphs"], dict(codegen.counters)


@pytest.mark.parametrize("name", sorted(CASES))
def test_region_in_graph(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    _compare(_region(fn), args, [a for a in args if a.requires_grad])


@pytest.mark.parametrize("name", ["softmax", "layer_norm", "cross_entropy", "pointwise", "sum",
                                  "attention"])
def test_region_in_graph_codegen(name):
    """CPU bf16 autocast lowered natively: forward and backward graphs compiled to C++ kernels,
    none run eagerly (before, the C++ backend took no bfloat16 inputs)."""
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    _compare(_region(fn), args, [a for a in args if a.requires_grad], backend="codegen")


@pytest.mark.parametrize("name", ["linear", "softmax", "cross_entropy", "attention"])
def test_ambient_region(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    args = make()
    _compare(fn, args, [a for a in args if a.requires_grad], ambient=True)


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
def test_tiny_mlp(backend):
    torch.manual_seed(0)
    m = MLP()
    x = torch.randn(4, 16)
    m64 = copy.deepcopy(m).double()
    _compare(_region(lambda x, t: m(x, t)), (x, _T), list(m.parameters()), backend=backend,
             exact_run=lambda: _run(_region(lambda x, t: m64(x, t)), (x.double(), _T),
                                    list(m64.parameters()), False))


def test_joint_graph_holds_the_casts():
    """The casts are ops of the joint graph, each with its backward cast; a weight used twice in a
    region is cast once (eager's cast cache)."""
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    w = nn.Parameter(torch.randn(16, 16))
    pydynamo.reset()
    pydynamo.optimize(_region(lambda x: (x @ w) @ w), backend=backend)(torch.randn(4, 16))
    (gm, inputs), = graphs
    joint = aot.record(gm, inputs)
    casts = [n for n in joint.gm.graph.nodes if n.target is torch.ops.aten._to_copy.default]
    to_bf16 = [n for n in casts if n.kwargs.get("dtype") == BF16]
    to_f32 = [n for n in casts if n.kwargs.get("dtype") == torch.float32]
    assert len(to_bf16) == 2, [n.format_node() for n in casts]      # x and w, w once
    assert to_f32, "the weight's gradient is cast back to float32 in the backward"
    out, grad_w = joint.gm.graph.output_node().args[0][0], joint.gm.graph.output_node().args[0][-1]
    assert out.meta["val"].dtype == BF16 and grad_w.meta["val"].dtype == torch.float32

"""pydynamo/aot/autocast_policy.py: autocast emulated above autograd on meta tensors gives eager
autocast's dtypes, node by node, forward and backward.

Each case is a function with a `torch.autocast("cpu", torch.bfloat16)` region, traced by
pydynamo into its torch-level graph (what the training recorder interprets). The graph then runs
twice with FX interpreters: on the real CPU tensors (enter_autocast nodes enter eager's autocast)
and on meta stand-ins where every call first goes through `cast_for_state` (autocast does not
act on meta). Every node's result dtypes, and the dtypes of the gradients of the inputs that
require grad, must agree. The end-to-end test (aot_eager under autocast, outputs and grads equal
to eager's) runs once pydynamo's training path exists.
"""
import math

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import pydynamo
from pydynamo import autocast as _autocast
from pydynamo.aot import autocast_policy as P

BF16 = torch.bfloat16


def _region(fn):
    def f(*args):
        with torch.autocast("cpu", BF16):
            return fn(*args)
    f.__name__ = fn.__name__
    return f


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


CASES = {
    "linear": (lambda x, w, b: F.linear(x, w, b), lambda: (_x(4, 16), _x(8, 16), _x(8))),
    "matmul": (lambda x, w: (x @ w, torch.matmul(x, w), x.matmul(w)),
               lambda: (_x(4, 16), _x(16, 8))),
    "softmax": (lambda x, w: (torch.softmax(x @ w, -1), F.softmax(x, -1), F.log_softmax(x @ w, 1)),
                lambda: (_x(4, 16), _x(16, 8))),
    "layer_norm": (lambda x, w, g, b: (F.layer_norm(x @ w, (8,), g, b), F.layer_norm(x, (16,))),
                   lambda: (_x(4, 16), _x(16, 8), _x(8), _x(8))),
    "conv2d": (lambda x, k, b: F.conv2d(x, k, b, padding=1), lambda: (_x(2, 3, 8, 8),
                                                                       _x(4, 3, 3, 3), _x(4))),
    "addmm": (lambda b, x, w: (torch.addmm(b, x, w), b.addmm(x, w)),
              lambda: (_x(4, 8), _x(4, 16), _x(16, 8))),
    "sum": (lambda x, w: ((x @ w).sum(), x.sum(dim=1), torch.sum(x @ w, 0), (x @ w).mean()),
            lambda: (_x(4, 16), _x(16, 8))),
    "cross_entropy": (lambda x, w, t: (F.cross_entropy(x @ w, t), F.cross_entropy(x, t % 8 * 2),
                                       F.nll_loss(F.log_softmax(x @ w, 1), t)),
                      lambda: (_x(4, 16), _x(16, 8), torch.tensor([1, 0, 7, 3]))),
    "bmm_einsum": (lambda a, b: (torch.bmm(a, b), torch.baddbmm(a @ b, a, b),
                                 torch.einsum("bij,bjk->bik", a, b), torch.tensordot(a, b, ([2], [1]))),
                   lambda: (_x(2, 4, 4), _x(2, 4, 4))),
    "promote": (lambda x, w: (torch.cat([x @ w, x[:, :8]], 1), torch.stack([x @ w, x @ w]),
                              torch.cat([x, x], 0), (x @ w) + x[:, :8]),
                lambda: (_x(4, 16), _x(16, 8))),
    "pointwise": (lambda x, w: ((x @ w).exp(), torch.pow(x @ w, 2), 2.0 / (x @ w), (x @ w) ** 2,
                                F.gelu(x @ w), torch.tanh(x @ w).prod(), (x @ w).cumsum(0)),
                  lambda: (_x(4, 16), _x(16, 8))),
    "losses": (lambda x, w, y: (F.mse_loss(x @ w, y), F.l1_loss(x @ w, y),
                                F.smooth_l1_loss(x @ w, y), F.kl_div(x @ w, y),
                                F.binary_cross_entropy_with_logits(x @ w, y.sigmoid())),
               lambda: (_x(4, 16), _x(16, 8), torch.randn(4, 8))),
    "pad_pool": (lambda x, k: (F.pad(F.conv2d(x, k), (1, 1, 1, 1), mode="reflect"),
                               F.pad(x, (1, 1)), F.max_pool2d(F.conv2d(x, k), 2),
                               F.interpolate(F.conv2d(x, k), scale_factor=2.0)),
                 lambda: (_x(1, 3, 8, 8), _x(2, 3, 3, 3))),
    "attention": (_attention, lambda: (_x(2, 4, 16), _x(16, 16))),
    "float64_untouched": (lambda x, w: (x @ w, x.double() @ w.double()),
                          lambda: (_x(4, 16), _x(16, 8))),
}


def _capture(fn, args):
    graphs = []

    def backend(gm, example_inputs):
        graphs.append((gm, list(example_inputs)))
        return gm.forward
    pydynamo.optimize(fn, backend=backend)(*args)
    assert len(graphs) == 1, f"expected one graph, got {len(graphs)}"
    return graphs[0]


class _Recorder(torch.fx.Interpreter):
    """Runs the graph and keeps each node's result dtypes; `emulate` applies cast_for_state."""

    def __init__(self, gm, emulate):
        super().__init__(gm)
        self.emulate, self.dtypes, self.cache = emulate, {}, {}

    def run_node(self, n):
        out = super().run_node(n)
        self.dtypes[n.name] = _dtypes(out)
        return out

    def _call(self, kind, target, args, kwargs):
        if self.emulate and target not in _autocast.GRAPH_NODES:
            args, kwargs = P.cast_for_state(kind, target, args, kwargs, _autocast.current(),
                                            device_of=_on_cpu, cache=self.cache)
        return args, kwargs

    def call_function(self, target, args, kwargs):
        args, kwargs = self._call("call_function", target, args, kwargs)
        return super().call_function(target, args, kwargs)

    def call_method(self, target, args, kwargs):
        args, kwargs = self._call("call_method", target, args, kwargs)
        return super().call_method(target, args, kwargs)


def _on_cpu(t):
    return "cpu"      # the real device of every meta stand-in here


def _dtypes(v):
    if isinstance(v, torch.Tensor):
        return v.dtype
    if isinstance(v, (tuple, list)):
        return tuple(_dtypes(x) for x in v)
    return None


def _to_meta(t):
    if not isinstance(t, torch.Tensor):
        return t
    m = t.detach().to("meta")
    return m.requires_grad_(t.requires_grad)


def _grad_dtypes(outs, inputs):
    outs = [o for o in (outs if isinstance(outs, (tuple, list)) else (outs,))
            if isinstance(o, torch.Tensor) and o.requires_grad]
    wrt = [i for i in inputs if isinstance(i, torch.Tensor) and i.requires_grad]
    loss = sum(o.float().sum() for o in outs)
    grads = torch.autograd.grad(loss, wrt, allow_unused=True)
    return [None if g is None else g.dtype for g in grads]


def _check(fn, args):
    gm, real_inputs = _capture(_region(fn), args)
    eager = _Recorder(gm, emulate=False)
    outs = eager.run(*real_inputs)
    meta_inputs = [_to_meta(a) for a in real_inputs]
    emu = _Recorder(gm, emulate=True)
    mouts = emu.run(*meta_inputs)
    assert _autocast.open_regions() == 0 and not torch.is_autocast_enabled("cpu")
    for n in gm.graph.nodes:
        assert emu.dtypes[n.name] == eager.dtypes[n.name], \
            f"{n.format_node()}: emulated {emu.dtypes[n.name]}, eager {eager.dtypes[n.name]}"
    assert _grad_dtypes(mouts, meta_inputs) == _grad_dtypes(outs, real_inputs)
    return gm, emu


@pytest.mark.parametrize("name", sorted(CASES))
def test_dtypes_match_eager_autocast(name):
    fn, make = CASES[name]
    torch.manual_seed(0)
    _check(fn, make())


def test_tiny_mlp():
    torch.manual_seed(0)
    m = MLP()
    x, t = torch.randn(4, 16), torch.tensor([1, 0, 7, 3])
    _check(lambda x, t: m(x, t), (x, t))


def test_weight_cast_once_per_region():
    """A parameter used twice in a region is cast once (eager's cast cache)."""
    w = nn.Parameter(torch.randn(16, 16))
    gm, emu = _check(lambda x: (x @ w) @ w, (torch.randn(4, 16),))
    assert len(emu.cache) == 1


def test_direct_policies():
    m = torch.randn(4, 4, device="meta")
    mb = m.to(BF16)
    cast = P.cast_args
    # CPU: lower for matmul family, untouched for unlisted ops, float32 for listed losses
    (a, b), _ = cast("call_function", torch.mm, (m, m), {}, "cpu", BF16)
    assert a.dtype == b.dtype == BF16
    assert cast("call_method", "relu", (m,), {}, "cpu", BF16)[0][0] is m
    assert cast("call_function", F.mse_loss, (mb, m), {}, "cpu", BF16)[0][0].dtype == torch.float32
    # CUDA: sum/softmax are float32 unless dtype= is given; layer_norm float32
    assert cast("call_method", "sum", (mb,), {}, "cuda", BF16)[0][0].dtype == torch.float32
    assert cast("call_function", torch.softmax, (mb, -1), {"dtype": BF16}, "cuda",
                BF16)[0][0] is mb
    assert cast("call_function", F.layer_norm, (mb, (4,)), {}, "cuda",
                BF16)[0][0].dtype == torch.float32
    # out= and float64 are never autocast; a tensor on another device is not cast
    assert cast("call_function", torch.mm, (m, m), {"out": m}, "cpu", BF16)[0][0] is m
    d = m.double()
    assert cast("call_function", torch.mm, (d, d), {}, "cpu", BF16)[0][0] is d
    assert cast("call_function", torch.mm, (m, m), {}, "cuda", BF16,
                device_of=lambda t: "cpu")[0][0] is m
    with pytest.raises(RuntimeError, match="unsafe to autocast"):
        cast("call_function", F.binary_cross_entropy, (m, m), {}, "cuda", BF16)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_cuda_policies_match_eager(dtype):
    """The CUDA table against eager autocast on the device (run on the GPU machine)."""
    x, w = torch.randn(4, 16, device="cuda"), torch.randn(16, 16, device="cuda")
    t = torch.tensor([1, 0, 7, 3], device="cuda")
    calls = [("call_function", torch.mm, (x, w), {}), ("call_method", "sum", (x,), {}),
             ("call_function", torch.softmax, (x, -1), {}),
             ("call_function", F.layer_norm, (x, (16,)), {}),
             ("call_function", F.cross_entropy, (x, t), {}),
             ("call_function", torch.exp, (x,), {}), ("call_function", operator_pow, (x, 2), {}),
             ("call_function", torch.einsum, ("ij,jk->ik", x, w), {}),
             ("call_function", F.gelu, (x,), {}), ("call_function", torch.cat, ([x, w],), {}),
             ("call_function", F.scaled_dot_product_attention, (x[None], x[None], x[None]), {}),
             ("call_function", torch.tensordot, (x, w, 1), {})]
    for kind, target, args, kwargs in calls:
        for inputs in (args, tuple(a.to(dtype) if isinstance(a, torch.Tensor) and
                                   a.is_floating_point() else a for a in args)):
            f = getattr(torch.Tensor, target) if kind == "call_method" else target
            with torch.autocast("cuda", dtype):
                want = f(*inputs, **kwargs).dtype
            margs, mkw = P.cast_args(kind, target, tuple(_to_meta(a) for a in inputs), kwargs,
                                     "cuda", dtype)
            assert f(*margs, **mkw).dtype == want, (target, [getattr(a, "dtype", a)
                                                             for a in inputs])


def operator_pow(a, b):
    return a ** b


operator_pow.__module__ = "operator"


def _r(*s):
    return torch.randn(*s)


# torch-level calls checked one by one on CPU, with float32 and with bfloat16 inputs
SWEEP = [
    (torch.inner, lambda: (_r(4, 8), _r(3, 8))),
    (torch.linalg.multi_dot, lambda: ([_r(4, 8), _r(8, 8), _r(8, 2)],)),
    (torch.chain_matmul, lambda: (_r(4, 8), _r(8, 8), _r(8, 2))),
    (torch.hstack, lambda: ([_r(4, 8), _r(4, 8)],)),
    (torch.concat, lambda: ([_r(4, 8), _r(4, 8)],)),
    (torch.mv, lambda: (_r(4, 8), _r(8))),
    (torch.dot, lambda: (_r(8), _r(8))),
    (torch.addmv, lambda: (_r(4), _r(4, 8), _r(8))),
    (torch.addr, lambda: (_r(4, 8), _r(4), _r(8))),
    (torch.addbmm, lambda: (_r(4, 4), _r(2, 4, 4), _r(2, 4, 4))),
    (torch.linalg.vecdot, lambda: (_r(4, 8), _r(4, 8))),
    (torch.cdist, lambda: (_r(4, 8), _r(3, 8))),
    (torch.prod, lambda: (_r(4, 8),)),
    (F.normalize, lambda: (_r(4, 8),)),
    (F.group_norm, lambda: (_r(2, 4, 8), 2, _r(4), _r(4))),
    (F.batch_norm, lambda: (_r(4, 8), _r(8), _r(8).abs(), _r(8), _r(8))),
    (F.silu, lambda: (_r(4, 8),)),
    (F.conv1d, lambda: (_r(2, 3, 8), _r(4, 3, 3))),
    (F.conv_transpose2d, lambda: (_r(1, 3, 4, 4), _r(3, 2, 3, 3))),
    (F.prelu, lambda: (_r(2, 3, 4), _r(3))),
    (F.avg_pool3d, lambda: (_r(1, 2, 4, 4, 4), 2)),
    (F.max_pool3d, lambda: (_r(1, 2, 4, 4, 4), 2)),
    (F.adaptive_avg_pool3d, lambda: (_r(1, 2, 4, 4, 4), 2)),
    (torch.trace, lambda: (_r(4, 4),)),
    (F.huber_loss, lambda: (_r(4, 8), _r(4, 8))),
    (F.margin_ranking_loss, lambda: (_r(4), _r(4), _r(4).sign())),
    (F.soft_margin_loss, lambda: (_r(4, 8), _r(4, 8).sign())),
    (F.hinge_embedding_loss, lambda: (_r(4, 8), _r(4, 8).sign())),
    (F.poisson_nll_loss, lambda: (_r(4, 8), _r(4, 8).abs())),
    (F.cosine_embedding_loss, lambda: (_r(4, 8), _r(4, 8), _r(4).sign())),
    (F.triplet_margin_loss, lambda: (_r(4, 8), _r(4, 8), _r(4, 8))),
    (F.multi_margin_loss, lambda: (_r(4, 8), torch.tensor([1, 0, 7, 3]))),
    (F.binary_cross_entropy, lambda: (_r(4, 8).sigmoid(), _r(4, 8).sigmoid())),
    (torch.index_copy, lambda: (_r(4, 8), 0, torch.tensor([0, 2]), _r(2, 8))),
    (F.grid_sample, lambda: (_r(1, 2, 4, 4), _r(1, 3, 3, 2).tanh())),
    (F.pad, lambda: (_r(1, 2, 4, 4), (1, 1, 1, 1), "replicate")),
    (F.embedding, lambda: (torch.tensor([1, 2]), _r(4, 8))),
    (torch.var_mean, lambda: (_r(4, 8),)),
    (F.bilinear, lambda: (_r(4, 3), _r(4, 5), _r(2, 3, 5))),
    (torch.logsumexp, lambda: (_r(4, 8), 1)),
    (torch.fft.rfft, lambda: (_r(4, 8),)),
    (torch.atan2, lambda: (_r(4, 8), _r(4, 8))),
    (torch.addcmul, lambda: (_r(4, 8), _r(4, 8), _r(4, 8))),
]


def _low(v):
    if isinstance(v, torch.Tensor):
        return v.to(BF16) if v.is_floating_point() else v
    if isinstance(v, list):
        return [_low(x) for x in v]
    return v


def _meta(v):
    return [_meta(x) for x in v] if isinstance(v, list) else _to_meta(v)


@pytest.mark.parametrize("target,make", SWEEP, ids=[t.__name__ for t, _ in SWEEP])
def test_sweep_cpu(target, make):
    torch.manual_seed(0)
    base = make()
    for args in (base, tuple(_low(a) for a in base)):
        with torch.autocast("cpu", BF16):
            want = _dtypes(target(*args))
        margs, _ = P.cast_args("call_function", target, tuple(_meta(a) for a in args), {}, "cpu",
                               BF16)
        try:
            got = _dtypes(target(*margs))
        except (NotImplementedError, RuntimeError) as e:
            if "meta" not in str(e).lower():
                raise
            pytest.skip(f"no meta kernel: {e}")
        assert got == want, [getattr(a, "dtype", a) for a in args]

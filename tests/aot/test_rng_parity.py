"""Random ops in compiled training draw eager's numbers (issue 16's RNG promise).

The recorder records dropout as eager runs it on the device (CPU: bernoulli_ on an empty
tensor; CUDA: the fused native_dropout kernel), and the partition never recomputes a random op,
so the compiled forward consumes the generator exactly as eager does and the backward reuses the
forward's mask. Promised, and checked here on CPU (and on CUDA where there is a GPU): from the
same seed, the dropout masks equal eager's bit for bit, the generator's state afterwards equals
eager's (so the next step draws the same numbers too), and the gradients flow through the same
masks.
"""
import pytest
import torch
import torch.nn.functional as F

import pydynamo
import pydynamo.aot as aot

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])


def _program(x, w):
    # what the dropouts keep is never 0 (x @ w almost surely, sigmoid + 0.5 surely): a zero
    # in a result is a dropped element, so `== 0` reads the mask
    h = F.dropout(x @ w, 0.3, training=True)
    y = F.dropout(torch.sigmoid(h) + 0.5, 0.5, training=True)
    return h, y, y.sum(-1)


def _rng_state(device):
    return torch.cuda.get_rng_state() if device == "cuda" else torch.get_rng_state()


def _run(fn, x, w, seed, device):
    torch.manual_seed(seed)
    h, y, s = fn(x, w)
    gx, gw = torch.autograd.grad((s * torch.arange(s.shape[0], device=device)).sum(), (x, w))
    return h, y, gx, gw, _rng_state(device)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
def test_dropout_masks_and_generator_state_equal_eagers(device, backend):
    torch.manual_seed(0)
    x = torch.randn(64, 96, device=device, requires_grad=True)
    w = torch.randn(96, 80, device=device, requires_grad=True)
    pydynamo.reset()
    aot.counters.clear()
    compiled = pydynamo.optimize(_program, backend=backend)
    for seed in (1234, 99):          # the first call compiles; the second runs the cached code
        ref = _run(_program, x, w, seed, device)
        got = _run(compiled, x, w, seed, device)
        assert torch.equal(got[0] == 0, ref[0] == 0), "first dropout mask differs from eager's"
        assert torch.equal(got[1] == 0, ref[1] == 0), "second dropout mask differs from eager's"
        assert torch.equal(got[4], ref[4]), "the generator advanced differently from eager"
        for a, b in zip(got[:4], ref[:4]):
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4)
    assert aot.counters["backward_compiled"] >= 1 and not aot.counters["eager_fallback"], \
        dict(aot.counters)

"""GPU check of the training path (pydynamo/aot/): small models trained a few steps under
aot_eager and codegen against eager on CUDA (fp32 and bf16 autocast), losses, grads and buffers
compared, counters printed. Dropout on CUDA: eager's fused kernel is recorded as eager runs it.

    python benchmarks/gpu/aot_smoke.py
"""
import copy
import sys
import warnings

import torch

import pydynamo

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def make_mlp():
    return torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.BatchNorm1d(128), torch.nn.GELU(),
                               torch.nn.Dropout(0.0), torch.nn.Linear(128, 10))


def make_block():
    return torch.nn.TransformerEncoderLayer(64, 4, 128, dropout=0.0, batch_first=True)


def run(name, make, shape, backend, autocast, steps=3):
    torch.manual_seed(0)
    m1 = make().to(DEV)
    m2 = copy.deepcopy(m1)
    f = pydynamo.optimize(m1, backend=backend)
    o1 = torch.optim.SGD(m1.parameters(), lr=0.1)
    o2 = torch.optim.SGD(m2.parameters(), lr=0.1)
    worst = 0.0
    for s in range(steps):
        torch.manual_seed(s)
        x = torch.randn(*shape, device=DEV)
        with torch.autocast(DEV, torch.bfloat16, enabled=autocast):
            l1 = f(x).float().square().mean()
            l2 = m2(x).float().square().mean()
        l1.backward(); l2.backward()
        worst = max(worst, abs(l1.item() - l2.item()) / max(abs(l2.item()), 1e-6))
        scale = max(q.grad.abs().max().item() for q in m2.parameters())
        for p, q in zip(m1.parameters(), m2.parameters()):
            # against the largest gradient: a bias before a batch norm has a gradient that is
            # rounding noise around zero, whose relative error means nothing
            worst = max(worst, ((p.grad - q.grad).abs().max() / scale).item())
        o1.step(); o2.step(); o1.zero_grad(); o2.zero_grad()
    for b1, b2 in zip(m1.buffers(), m2.buffers()):
        worst = max(worst, (b1.float() - b2.float()).abs().max().item())
    tol = 3e-2 if autocast else 1e-4
    print(f"{name:6s} {backend:9s} autocast={autocast!s:5s} worst rel diff {worst:.2e} "
          f"{'OK' if worst <= tol else 'MISMATCH'} {dict(pydynamo.aot.counters)}", flush=True)
    pydynamo.reset()
    pydynamo.aot.counters.clear()
    return worst <= tol


def main():
    print(torch.__version__, torch.cuda.get_device_name() if DEV == "cuda" else "cpu")
    ok = True
    for backend in ("aot_eager", "codegen"):
        for autocast in (False, True):
            with warnings.catch_warnings(record=True) as w:
                warnings.simplefilter("always")
                ok &= run("mlp", make_mlp, (32, 64), backend, autocast)
                ok &= run("block", make_block, (4, 16, 64), backend, autocast)
            for x in {str(x.message)[:200] for x in w}:
                print("   warning:", x)
    # dropout on CUDA: runs, and the backward sees the forward's mask
    torch.manual_seed(0)
    d = torch.nn.Dropout(0.5).to(DEV)
    f = pydynamo.optimize(lambda x: d(x) * 2, backend="codegen")
    x = torch.randn(1000, device=DEV, requires_grad=True)
    y = f(x)
    y.sum().backward()
    mask_ok = torch.equal((y != 0), (x.grad != 0))
    print("dropout mask forward == backward:", mask_ok)
    ok &= mask_ok
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()

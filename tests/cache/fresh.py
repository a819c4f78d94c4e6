"""The start of a fresh interpreter's script for the warm-start tests (test_warm_start.py,
test_warm_start_training.py): the module at argv[1] imported as `mod`, pydynamo with the warm
cache on against the cache dir argv[2], its version key pinned to argv[3] (pydynamo's files
change under a tree being edited), and every translation counted: `traced` (qualnames),
`origins` (for a resume function, the qualname of the function it continues).
TRAIN_STEPS: `train_steps(model, compiled, device, forward_only)`, three SGD steps of `compiled`
(the optimized `model`) beside eager's on a copy, the third with an input that requires grad
too; whether every loss and gradient matched (forward_only: one forward, no backward)."""

PRELUDE = """
import importlib.util, json, sys
import torch
spec = importlib.util.spec_from_file_location("warm_fresh_model", sys.argv[1])
mod = importlib.util.module_from_spec(spec)
sys.modules[spec.name] = mod
spec.loader.exec_module(mod)
import pydynamo
from pydynamo import convert_frame, stages, warm_cache
from pydynamo.code_origins import origin_of
warm_cache._versions[:] = [sys.argv[3]]
pydynamo.config.cache_dir = sys.argv[2]
pydynamo.config.warm_start = True
traced, origins, real = [], [], convert_frame.translate
def counting(code, *args, **kwargs):
    traced.append(code.co_qualname)
    origins.append(origin_of(code)[0].co_qualname if origin_of(code) else None)
    return real(code, *args, **kwargs)
convert_frame.translate = counting
"""

TRAIN_STEPS = """
import copy
def train_steps(model, compiled, dev="cpu", forward_only=False):
    ref = copy.deepcopy(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    ref_opt = torch.optim.SGD(ref.parameters(), lr=0.1)
    ok = True
    torch.manual_seed(1)
    for step in range(3):
        x = torch.randn(5, 6, device=dev, requires_grad=step == 2)
        xr = x.detach().clone().requires_grad_(x.requires_grad)
        loss = compiled(x).pow(2).mean()
        if forward_only:
            break
        loss.backward()
        want = ref(xr).pow(2).mean()
        want.backward()
        ok = ok and bool(torch.allclose(loss, want, atol=1e-5))
        for p, q in zip(model.parameters(), ref.parameters()):
            ok = ok and bool(torch.allclose(p.grad, q.grad, atol=1e-5))
        if x.requires_grad:
            ok = ok and bool(torch.allclose(x.grad, xr.grad, atol=1e-5))
        opt.step(); ref_opt.step(); opt.zero_grad(); ref_opt.zero_grad()
    return ok
"""

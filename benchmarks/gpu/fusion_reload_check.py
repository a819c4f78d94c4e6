"""GPU check of the scheduler's reload rule (codegen/scheduler.py): GPT-2's MLP as transformers
writes it (Conv1D = addmm over a view, NewGELU with torch.pow) on the training path, codegen
(Triton) against eager, with and without CUDA bf16 autocast. Before the rule, the forward's
fused kernel stored two GELU factors and loaded them back through the view chain's
(unsimplified) index in the same Triton program: forward 10% off, grads 30-170% off under bf16
(fp32 exact). Prints the forward's and each input grad's relative error (worst of 3 calls: the
race was timing-dependent); exit 1 if any is above 1e-2 under bf16 autocast or 1e-4 in fp32.

    PYTHONPATH=$PWD python benchmarks/gpu/fusion_reload_check.py
"""
import math
import sys
import warnings

import torch

import pydynamo

warnings.simplefilter("ignore")
DEV = "cuda" if torch.cuda.is_available() else "cpu"
D, B, T = 128, 2, 64
LIMIT = {True: 1e-2, False: 1e-4}


def rel(a, b):
    return ((a.float() - b.float()).norm() / b.float().norm().clamp_min(1e-30)).item()


def new_gelu(x):
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


def mlp(x, w1, b1, w2, b2):
    h = new_gelu(torch.addmm(b1, x.view(-1, D), w1).view(B, T, 4 * D))
    return torch.addmm(b2, h.view(-1, 4 * D), w2).view(B, T, D)


def inputs():
    torch.manual_seed(0)
    return [torch.randn(B, T, D, device=DEV), torch.randn(D, 4 * D, device=DEV) * 0.05,
            torch.randn(4 * D, device=DEV) * 0.1, torch.randn(4 * D, D, device=DEV) * 0.05,
            torch.randn(D, device=DEV) * 0.1]


def main():
    print(torch.__version__, torch.cuda.get_device_name() if DEV == "cuda" else "cpu", flush=True)
    worst_ok = True
    for ac in (True, False):
        base = inputs()
        ref_args = [a.clone().requires_grad_() for a in base]
        got_args = [a.clone().requires_grad_() for a in base]
        errs = {}
        for rep in range(3):
            with torch.autocast(DEV, torch.bfloat16, enabled=ac):
                ref = mlp(*ref_args)
                if rep == 0:
                    pydynamo.reset()
                    fn = pydynamo.optimize(mlp, backend="codegen")
                out = fn(*got_args)
            g = torch.randn_like(ref)
            gr = torch.autograd.grad(ref, ref_args, g)
            go = torch.autograd.grad(out, got_args, g)
            errs["forward"] = max(errs.get("forward", 0.0), rel(out, ref))
            for i, (a, b) in enumerate(zip(go, gr)):
                errs[f"grad{i}"] = max(errs.get(f"grad{i}", 0.0), rel(a, b))
        ok = all(v <= LIMIT[ac] for v in errs.values())
        worst_ok &= ok
        print(f"autocast={ac}: " + ", ".join(f"{k} {v:.2e}" for k, v in errs.items())
              + f"  (limit {LIMIT[ac]:.0e}) {'OK' if ok else 'FAIL'}", flush=True)
    from pydynamo.aot import counters
    print("aot counters:", dict(counters))
    sys.exit(0 if worst_ok else 1)


if __name__ == "__main__":
    main()

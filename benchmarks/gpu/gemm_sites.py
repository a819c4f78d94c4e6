"""Every GEMM of one GPT-2 small training step (forward, LM loss, backward), by layout, timed
alone as it runs and with its unaligned sizes padded: which products the padding rule
(codegen/gemm.py) should take, in float32 too.

    python benchmarks/gpu/gemm_sites.py [--engine ours|eager|torch_compile] [--dtype fp32|bf16-autocast]

A TorchDispatchMode logs each mm/addmm/bmm/baddbmm call of one step (after warm-up) with its
operands' sizes, strides and dtype, whichever code issued it (eager's autograd, our compiled
wrappers, torch.compile's). Each distinct call is then rebuilt on fresh random operands of the
same layout and timed (do_bench median): as it ran; with every size that breaks 16-byte
alignment zero-padded in the stored operands, the pad copies included ("padded+copy") and
excluded ("padded", as when a producer kernel writes the padded buffer); and with both operands
made contiguous first (copy excluded). The padded and contiguous forms time the product alone
(an addmm's bias add left out). The step's GEMM time by site
is count x time.
"""
import argparse
import collections
import contextlib
import copy
import os
import sys

import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

aten = torch.ops.aten
GEMMS = {aten.mm.default: "mm", aten.addmm.default: "addmm", aten.bmm.default: "bmm",
         aten.baddbmm.default: "baddbmm"}


class LogGemms(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if func in GEMMS:
            sig = (GEMMS[func],) + tuple((tuple(a.shape), a.stride(), a.dtype)
                                         for a in args if isinstance(a, torch.Tensor))
            self.calls[sig] += 1
        return func(*args, **(kwargs or {}))


def operand(shape, stride, dtype):
    # the smallest storage that holds this layout, filled with random values
    n = 1 + sum((s - 1) * st for s, st in zip(shape, stride))
    return torch.randn(n, device="cuda").to(dtype).as_strided(shape, stride)


def padded_operand(t, m):
    """The same values in storage whose every size is padded to a multiple of m (zeros), as a
    view with the original layout order; returns (view of the padded sizes, copy thunk)."""
    order = sorted(range(t.dim()), key=lambda d: t.stride(d))      # innermost first
    base = t.permute(*reversed(order)).contiguous()                  # stored order, dense
    pads = []
    for d in range(base.dim() - 1, -1, -1):
        size = base.shape[d]
        pads += [0, -(-size // m) * m - size]
    pb = F.pad(base, pads)
    inv = [0] * t.dim()
    for i, d in enumerate(reversed(order)):
        inv[d] = i
    return pb.permute(*inv), (lambda: F.pad(base, pads))


def time_site(sig):
    from triton.testing import do_bench
    op, operands = sig[0], sig[1:]
    ts = [operand(*o) for o in operands]
    fn = {"mm": torch.mm, "addmm": torch.addmm, "bmm": torch.bmm, "baddbmm": torch.baddbmm}[op]
    plain = do_bench(lambda: fn(*ts), warmup=10, rep=100, return_mode="median")
    m = 16 // ts[0].element_size()
    prods = ts[-2:]
    if all(s % m == 0 for t in prods for s in t.shape[-2:]):
        return plain, None, None, None
    pads = [padded_operand(t, m) for t in prods]
    prod = torch.bmm if prods[0].dim() == 3 else torch.mm     # the padded forms drop the bias
    pts = [p for p, _ in pads]
    padded = do_bench(lambda: prod(*pts), warmup=10, rep=100, return_mode="median")

    def with_copies():
        [c() for _, c in pads]
        return prod(*pts)
    padded_copy = do_bench(with_copies, warmup=10, rep=100, return_mode="median")
    cts = [t.contiguous() for t in prods]
    contig = do_bench(lambda: prod(*cts), warmup=10, rep=100, return_mode="median")
    return plain, padded, padded_copy, contig


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", default="ours", choices=["ours", "eager", "torch_compile"])
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16-autocast"])
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    import pydynamo
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    m = {"ours": lambda: pydynamo.optimize(model, backend="codegen"), "eager": lambda: model,
         "torch_compile": lambda: torch.compile(model)}[a.engine]()
    autocast = a.dtype == "bf16-autocast"

    def step():
        ctx = torch.autocast("cuda", torch.bfloat16) if autocast else contextlib.nullcontext()
        with ctx:
            loss = m(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in model.parameters():
            p.grad = None
    step()
    step()
    log = LogGemms()
    with log:
        step()
    torch.cuda.synchronize()
    rows, tot = [], [0.0, 0.0, 0.0]
    for sig, n in log.calls.items():
        plain, padded, padded_copy, contig = time_site(sig)
        rows.append((n * plain, n, sig, plain, padded, padded_copy, contig))
    rows.sort(key=lambda r: -r[0])
    print(f"== {a.engine} {a.dtype}: {sum(log.calls.values())} GEMM calls, "
          f"{sum(r[0] for r in rows):.3f} ms alone (sum of count x median)")
    print("  step us  n  op       plain us  padded  pad+copy  contiguous  operands (shape stride dtype)")
    f = lambda v: f"{v * 1000:8.1f}" if v is not None else "       -"   # noqa: E731
    for total, n, sig, plain, padded, padded_copy, contig in rows:
        ops = "; ".join(f"{list(s)} {list(st)} {str(d)[6:]}" for s, st, d in sig[1:])
        print(f"{total * 1000:9.1f} {n:2d}  {sig[0]:7s} {f(plain)} {f(padded)} {f(padded_copy)} "
              f"{f(contig)}   {ops}")


if __name__ == "__main__":
    main()

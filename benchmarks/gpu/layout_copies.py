"""Which extern results get copied to another layout on every call (codegen/runtime.py
`ensure_layout`: the compile-time layout guess the device's kernel did not follow), in a GPT-2
small training step (forward, LM loss, backward) under pydynamo's codegen on the GPU: prints
each copying call site once (the generated wrapper's line and the FX node comment above it) and
the copies per step.

    python benchmarks/gpu/layout_copies.py [--dtype fp32|bf16-autocast] [--layers 12]
"""
import argparse
import linecache
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16-autocast"])
    ap.add_argument("--layers", type=int, default=12)
    a = ap.parse_args()
    import codegen.gpu_wrapper as gw
    import codegen.runtime as rt
    import pydynamo
    from transformers import GPT2Config, GPT2LMHeadModel
    sites = {}
    plain = rt.ensure_layout

    def copies():
        return rt.counters["extern_layout_copies"] + rt.counters["extern_device_copies"]

    def spy(t, size, stride, dtype, view=False, device=None):
        before = copies()
        out = plain(t, size, stride, dtype, view, device)
        if copies() != before:
            f = sys._getframe(1)
            key = (f.f_code.co_filename, f.f_lineno)
            if key not in sites:
                lines = [linecache.getline(key[0], n).strip() for n in range(key[1] - 3, key[1] + 1)]
                sites[key] = (f"{tuple(t.stride())} on {t.device}", tuple(stride), lines)
        return out
    gw.ensure_layout = spy
    cfg = GPT2Config(n_layer=a.layers, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    m = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    c = pydynamo.optimize(m, backend="codegen")

    def step():
        with torch.autocast("cuda", torch.bfloat16, enabled=a.dtype == "bf16-autocast"):
            loss = c(input_ids=ids, labels=ids).loss
        loss.backward()
        for p in m.parameters():
            p.grad = None
    for _ in range(2):
        step()
    n0, d0 = rt.counters["extern_layout_copies"], rt.counters["extern_device_copies"]
    step()
    torch.cuda.synchronize()
    print(f"== {a.dtype}: per step {rt.counters['extern_layout_copies'] - n0} extern layout "
          f"copies, {rt.counters['extern_device_copies'] - d0} CPU-to-GPU copies of extern "
          f"results (not waiting); {len(sites)} call sites")
    for (path, line), (got, want, lines) in sites.items():
        print(f"-- {os.path.basename(path)}:{line}: result strides {got}, compiled for {want}")
        for text in lines:
            print("     " + text[:300])


if __name__ == "__main__":
    main()

"""Kernels and the backward's kernel-buffer peak of a GPT-2 training step, from the generated
wrappers (CPU, codegen): a device-free proxy for how a change moves the step's memory peak.

    python benchmarks/training_buffers.py [--layers 12] [--width 128] [--dtype fp32|bf16-autocast]

GPT2LMHeadModel (n_layer --layers, n_embd --width, 2 heads, vocab 1000, dropout 0), batch 2,
seq 64, one forward+loss+backward compiled into a fresh cache directory. Printed: the kernels
compiled (codegen.counters) and, per backward wrapper (the boxed `call_boxed` ones), the peak
of the bytes of buffers it allocates (`bufN = _empty_<dtype>(...)` adds, `del bufN` frees), walking its
lines in order. Saved activations, extern outputs and gradients are not counted: the figure
shows what the backward's own kernels hold at once (a recomputation run early and kept alive
raises it).
"""
from __future__ import annotations

import argparse
import glob
import math
import os
import re
import tempfile

SIZES = {"float32": 4, "bfloat16": 2, "float16": 2, "int64": 8, "bool": 1, "int32": 4,
         "float64": 8, "uint8": 1}
EMPTY = re.compile(r"\s+(buf\d+) = _empty_(\w+)\(\(([^)]*)\), \([^)]*\)\)")


def buffer_peak(path: str) -> int:
    live, cur, peak = {}, 0, 0
    with open(path) as f:
        for line in f:
            m = EMPTY.match(line)
            if m:
                dims = [int(x) for x in m.group(3).split(",") if x.strip()]
                live[m.group(1)] = math.prod(dims) * SIZES.get(m.group(2), 4)
                cur += live[m.group(1)]
                peak = max(peak, cur)
                continue
            m = re.match(r"\s+del (.*)", line)
            if m:
                for b in m.group(1).split(","):
                    cur -= live.pop(b.strip(), 0)
    return peak


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--width", type=int, default=128)
    ap.add_argument("--dtype", default="fp32", choices=["fp32", "bf16-autocast"])
    args = ap.parse_args()
    cache = tempfile.mkdtemp(prefix="pydynamo-training-buffers-")
    os.environ["PYDYNAMO_CACHE_DIR"] = cache      # before pydynamo reads it
    import torch
    import transformers as t
    import codegen
    import pydynamo
    torch.manual_seed(0)
    cfg = t.GPT2Config(n_layer=args.layers, n_embd=args.width, n_head=2, vocab_size=1000,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    model = t.GPT2LMHeadModel(cfg)
    ids = torch.randint(0, 1000, (2, 64))
    with torch.autocast("cpu", torch.bfloat16, enabled=args.dtype == "bf16-autocast"):
        loss = pydynamo.optimize(model, backend="codegen")(input_ids=ids, labels=ids).loss
    loss.backward()
    print(f"GPT-2 {args.layers} layers x {args.width}, {args.dtype}: "
          f"{codegen.counters['kernels']} kernels compiled")
    for path in sorted(glob.glob(os.path.join(cache, "wrappers", "*", "*.py"))):
        with open(path) as f:
            text = f.read()
        if "def call_boxed" not in text:
            continue
        kernels = len(re.findall(r"^\s+kernel\d+_\w*\(", text, re.M))
        if kernels:
            print(f"  backward wrapper {os.path.basename(path)[:12]}: {kernels} kernels, "
                  f"kernel-buffer peak {buffer_peak(path) / 2**20:.2f} MiB")


if __name__ == "__main__":
    main()

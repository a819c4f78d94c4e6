"""What is alive at the peak of a GPT-2 small training step's forward+loss+backward (issue 16's
memory goal), pydynamo (codegen) against torch.compile, from the CUDA caching allocator's own
history.

    python benchmarks/gpu/peak_memory.py [--dtype fp32|bf16-autocast] [--engines codegen,torch.compile]
        [--batch 8] [--seq 256] [--top 15]

Per engine: GPT2LMHeadModel(GPT2Config(), dropout 0, use_cache False unless --use-cache), random weights, loss on
labels=input_ids, two warm-up steps (compiling), then one recorded step with every .grad set to
None first (`torch.cuda.memory._record_memory_history(stacks="python")`). The allocation trace
is replayed to find the moment of the most live bytes; printed: that peak above the bytes live
before the step, the bytes live then by kind of the innermost Python frame that allocated them
(a generated wrapper line of pydynamo's, an Inductor output file, torch's autograd, ...), and the
largest blocks with that frame's file:line and source text.
"""
from __future__ import annotations

import argparse
import collections
import linecache
import os

import torch


def _frame(frames):
    """The innermost Python frame that is not torch's own library plumbing."""
    for f in frames:
        name = f.get("filename", "")
        if "/torch/" in name and "/torch/_inductor" not in name and "torchinductor" not in name:
            continue
        return f
    return frames[0] if frames else {"filename": "?", "line": 0, "name": "?"}


def _peak(snapshot, dev):
    live, cur, peak, at = {}, 0, 0, None
    for e in snapshot["device_traces"][dev]:
        if e["action"] == "alloc":
            live[e["addr"]] = (e["size"], e.get("frames", []))
            cur += e["size"]
            if cur > peak:
                peak, at = cur, dict(live)
        elif e["action"] in ("free_requested",) and e["addr"] in live:
            cur -= live.pop(e["addr"])[0]
    return peak, at or {}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="fp32")
    ap.add_argument("--engines", default="codegen,torch.compile")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--top", type=int, default=15)
    ap.add_argument("--use-cache", action="store_true",
                    help="GPT2Config(use_cache=True), the config's default: the forward builds a "
                         "key/value cache (benchmarks/bench_training.py's default)")
    args = ap.parse_args()
    import transformers as t
    import pydynamo
    dev = torch.device("cuda")
    for engine in args.engines.split(","):
        torch.manual_seed(0)
        cfg = t.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0,
                           use_cache=args.use_cache)
        model = t.GPT2LMHeadModel(cfg).to(dev)
        ids = torch.randint(0, cfg.vocab_size, (args.batch, args.seq), device=dev)
        fn = torch.compile(model) if engine == "torch.compile" else pydynamo.optimize(model, backend=engine)

        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def step(optimize=False):
            for p in model.parameters():
                p.grad = None
            with torch.autocast("cuda", torch.bfloat16, enabled=args.dtype == "bf16-autocast"):
                loss = fn(input_ids=ids, labels=ids).loss
            loss.backward()
            if optimize:
                torch.cuda.synchronize()
                after_backward = torch.cuda.memory_allocated()
                opt.step()
                return after_backward
        step(True)
        step(True)
        # the whole step as benchmarks/bench_training.py measures it (AdamW included), and what
        # stays allocated once the backward returned beyond the gradients
        for p in model.parameters():
            p.grad = None
        torch.cuda.synchronize()
        start = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        after_backward = step(True)
        grads = sum(p.grad.untyped_storage().nbytes() for p in model.parameters() if p.grad is not None)
        print(f"\n== {engine} {args.dtype}: whole step (AdamW) peak above its start "
              f"{(torch.cuda.max_memory_allocated() - start) / 2**20:.0f} MiB; after the backward "
              f"{(after_backward - start) / 2**20:.0f} MiB live beyond the start, of which "
              f"gradients {grads / 2**20:.0f} MiB")
        for p in model.parameters():
            p.grad = None
        torch.cuda.synchronize()
        before = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        torch.cuda.memory._record_memory_history(max_entries=1_000_000, stacks="python")
        step()
        torch.cuda.synchronize()
        snap = torch.cuda.memory._snapshot()
        torch.cuda.memory._record_memory_history(enabled=None)
        peak, live = _peak(snap, dev.index or 0)
        print(f"== {engine} {args.dtype}: forward+loss+backward peak above the step's start {peak / 2**20:.0f} MiB "
              f"(max_memory_allocated - before: {(torch.cuda.max_memory_allocated() - before) / 2**20:.0f} MiB)")
        kinds = collections.Counter()
        rows = []
        for size, frames in live.values():
            f = _frame(frames)
            where = f"{os.path.basename(f['filename'])}:{f['line']}"
            kinds[os.path.basename(f["filename"]) + " " + f.get("name", "")] += size
            rows.append((size, where, linecache.getline(f["filename"], f["line"]).strip()[:110]))
        for k, v in kinds.most_common(10):
            print(f"   {v / 2**20:8.1f} MiB  allocated in {k}")
        for size, where, text in sorted(rows, key=lambda r: -r[0])[:args.top]:
            print(f"   {size / 2**20:8.1f} MiB  {where}  {text}")
        del fn, model, opt
        pydynamo.reset()
        torch._dynamo.reset()
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

"""Why a GPT-2 training step is split or falls back on the GPU: graph breaks, eager fallbacks and
codegen's refusals, with their messages, for fp32 and bf16 autocast (GPT-2 tiny, transformers).

    python benchmarks/gpu/train_breaks.py [--layers 2] [--no-cache]
"""
import argparse
import collections
import warnings

import torch

import pydynamo


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--no-cache", action="store_true")
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2LMHeadModel
    dev = "cuda" if torch.cuda.is_available() else "cpu"
    for autocast in (False, True):
        torch.manual_seed(0)
        cfg = GPT2Config(n_layer=a.layers, n_embd=128, n_head=2, vocab_size=1000, n_positions=128,
                         resid_pdrop=0, embd_pdrop=0, attn_pdrop=0, use_cache=not a.no_cache)
        m = GPT2LMHeadModel(cfg).to(dev)
        ids = torch.randint(0, 1000, (2, 64), device=dev)
        pydynamo.reset()
        pydynamo.aot.counters.clear()
        f = pydynamo.optimize(m, backend="codegen")
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for _ in range(2):
                with torch.autocast(dev, torch.bfloat16, enabled=autocast):
                    loss = f(input_ids=ids, labels=ids).loss
                loss.backward()
        msgs = collections.Counter(str(x.message)[:300] for x in w)
        print(f"== autocast={autocast}: aot {dict(pydynamo.aot.counters)}")
        for msg, n in msgs.most_common():
            print(f"  {n}x {msg}")


if __name__ == "__main__":
    main()

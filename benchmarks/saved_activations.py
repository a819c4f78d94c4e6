"""How many bytes of activations a training step saves for its backward: eager, pydynamo's
partition and torch.compile's, side by side (parameters excluded: they are alive anyway).

    python benchmarks/saved_activations.py [--layers 1] [--dtype bf16-autocast|fp32]

GPT2LMHeadModel (GPT2Config with --layers layers, full width, vocabulary 50257, dropout 0),
batch 2, seq 128, its LM loss, on CPU. Every tensor autograd saves passes through a
saved_tensors_hooks pack hook; distinct storages are summed. pydynamo runs with backend
"aot_eager" (the same partition as "codegen", without compiling kernels).
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402


def saved_mib(fn, model, ids, autocast):
    params = {p.untyped_storage().data_ptr() for p in model.parameters()}
    seen = {}

    def pack(t):
        ptr = t.untyped_storage().data_ptr()
        if ptr not in params:
            seen[ptr] = t.untyped_storage().nbytes()
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        with torch.autocast("cpu", torch.bfloat16, enabled=autocast):
            loss = fn(input_ids=ids, labels=ids).loss
    loss.backward()
    return sum(seen.values()) / 2**20, len(seen)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layers", type=int, default=1)
    ap.add_argument("--dtype", default="bf16-autocast", choices=["bf16-autocast", "fp32"])
    a = ap.parse_args()
    import warnings
    warnings.simplefilter("ignore")
    from transformers import GPT2Config, GPT2LMHeadModel
    import pydynamo
    cfg = GPT2Config(n_layer=a.layers, resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    torch.manual_seed(0)
    model = GPT2LMHeadModel(cfg)
    ids = torch.randint(0, cfg.vocab_size, (2, 128))
    autocast = a.dtype == "bf16-autocast"
    engines = {"eager": lambda: model,
               "pydynamo (aot_eager)": lambda: pydynamo.optimize(model, backend="aot_eager"),
               "torch.compile": lambda: torch.compile(model)}
    print(f"GPT-2, {a.layers} layer(s), batch 2, seq 128, {a.dtype}, torch {torch.__version__}")
    for name, make in engines.items():
        fn = make()
        saved_mib(fn, model, ids, autocast)          # compile
        model.zero_grad()
        mib, n = saved_mib(fn, model, ids, autocast)
        model.zero_grad()
        print(f"  {name:22s} {mib:8.1f} MiB saved in {n} storages", flush=True)


if __name__ == "__main__":
    main()

"""Capture one tiny transformers model under ONE engine in this process; print a JSON record.

    python tests/models/model_runner.py --engine {torch,pydynamo} --model {gpt2,bert}

Models are built from configs (2 layers, hidden 64, vocab 100), random seeded weights, eval mode,
HF_HUB_OFFLINE=1: nothing is downloaded. Eager outputs are computed in this same process before
the compiler is involved (eager installs no hook), then the compiled model is called on the same
inputs (call 1 compiles) and on fresh inputs (call 2 must be a cache hit). The record holds graph
counts and ops per graph from a counting backend, and the largest difference from eager.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import traceback

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")

import torch  # noqa: E402

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
VOCAB, HIDDEN, LAYERS, SEQ, BATCH = 100, 64, 2, 12, 2


def build_gpt2():
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(vocab_size=VOCAB, n_positions=64, n_embd=HIDDEN, n_layer=LAYERS, n_head=2,
                     resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False,
                     bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1)
    return GPT2LMHeadModel(cfg).eval()


def build_bert():
    from transformers import BertConfig, BertModel
    cfg = BertConfig(vocab_size=VOCAB, hidden_size=HIDDEN, num_hidden_layers=LAYERS, num_attention_heads=4,
                     intermediate_size=128, max_position_embeddings=64, hidden_dropout_prob=0.0,
                     attention_probs_dropout_prob=0.0)
    return BertModel(cfg).eval()


def gpt2_inputs(g):
    return {"input_ids": torch.randint(1, VOCAB, (BATCH, SEQ), generator=g)}


def bert_inputs(g):
    mask = torch.ones(BATCH, SEQ, dtype=torch.long)
    mask[1, SEQ - 3:] = 0  # one padded row, so the mask path is exercised
    return {"input_ids": torch.randint(1, VOCAB, (BATCH, SEQ), generator=g), "attention_mask": mask}


MODELS = {"gpt2": (build_gpt2, gpt2_inputs), "bert": (build_bert, bert_inputs)}


def _engine(name):
    if name == "torch":
        return lambda m, be: torch.compile(m, backend=be)
    try:
        import pydynamo
    except ImportError:
        sys.path.insert(0, REPO)
        import pydynamo
    return lambda m, be: pydynamo.optimize(m, backend=be)


def _tensors(out):
    items = out.to_tuple() if hasattr(out, "to_tuple") else (out if isinstance(out, tuple) else (out,))
    return [x for x in items if isinstance(x, torch.Tensor)]


def max_diff(got, want) -> float:
    g, w = _tensors(got), _tensors(want)
    if len(g) != len(w) or not w:
        return float("inf")
    return max(float((a.double() - b.double()).abs().max()) if a.shape == b.shape else float("inf")
               for a, b in zip(g, w))


def run(engine: str, model: str) -> dict:
    build, inputs = MODELS[model]
    torch.manual_seed(0)
    m = build()
    graphs: list[int] = []

    def backend(gm, example_inputs):
        graphs.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
        return gm.forward

    rec = {"engine": engine, "model": model, "error": None}
    try:
        compiled = _engine(engine)(m, backend)
        diffs, per_call = [], []
        for i in range(2):
            kw = inputs(torch.Generator().manual_seed(100 + i))
            with torch.no_grad():
                want = m(**kw)
                n = len(graphs)
                got = compiled(**kw)
            diffs.append(max_diff(got, want))
            per_call.append(len(graphs) - n)
        rec.update(graphs=len(graphs), ops=graphs, new_graphs_per_call=per_call, max_diff=diffs)
    except Exception as e:
        rec["error"] = f"{type(e).__name__}: {e}\n" + traceback.format_exc(limit=-6)[-2500:]
    return rec


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--engine", required=True, choices=["torch", "pydynamo"])
    ap.add_argument("--model", required=True, choices=sorted(MODELS))
    ns = ap.parse_args()
    print("MODEL_RECORD " + json.dumps(run(ns.engine, ns.model)))


if __name__ == "__main__":
    main()

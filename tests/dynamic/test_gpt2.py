"""GPT-2 (transformers GPT2Model from a tiny config, random weights, no download) over sequence
lengths 16, 17, 32, 64 (issue 6's acceptance): as many compiles as torch.compile (probed with
torch 2.13, and compared live in tests/compat_dynamic's d_gpt2 case): under automatic dynamic a
static graph, then one dynamic graph serving every later length; under dynamic=True one graph.
Outputs equal eager at every length."""
import os

import pytest
import torch

import pydynamo

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")

LENGTHS = (16, 17, 32, 64)
TORCH_COMPILES = {None: [1, 1, 0, 0], True: [1, 0, 0, 0]}   # new graphs per call


def gpt2(use_cache):
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                                  bos_token_id=0, eos_token_id=0, use_cache=use_cache)
    return transformers.GPT2Model(cfg).eval()


@pytest.mark.parametrize("use_cache", [False, True], ids=["no_cache", "cache"])
@pytest.mark.parametrize("dynamic", [None, True], ids=["auto", "dynamic"])
def test_gpt2_sequence_lengths(rec, dynamic, use_cache):
    model = gpt2(use_cache)
    opt = pydynamo.optimize(model, backend=rec, dynamic=dynamic)
    new = []
    with torch.no_grad():
        for n in LENGTHS:
            ids = torch.randint(0, 1000, (2, n))
            before = rec.count
            torch.testing.assert_close(opt(ids).last_hidden_state, model(ids).last_hidden_state)
            new.append(rec.count - before)
    assert new == TORCH_COMPILES[dynamic]
    # the dynamic graph reads the sequence length (and, under dynamic=True, the batch) as ints
    assert rec.int_inputs(-1) == ([16, 2] if dynamic else [17])   # hints: the first symbolic call
    # frames of the model only: a gc callback another test's library left behind (hypothesis'
    # timing hook) can run, and be translated, in the middle of a call
    assert not any(f.graph_break for f in rec.frames if "transformers" in f.code.co_filename)

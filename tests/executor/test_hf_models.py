"""GPT-2 and BERT from transformers configs (tiny sizes, random weights, no download) capture as
one graph each, outputs equal to eager, the second call a cache hit. Needs `transformers`
(installed in the 3.11 CI venv; the test is skipped where the package is absent)."""
import os

import pytest
import torch

import pydynamo

os.environ.setdefault("HF_HUB_OFFLINE", "1")
transformers = pytest.importorskip("transformers")


def _gpt2():
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2Model(cfg).eval()


def _bert():
    cfg = transformers.BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=32,
                                  intermediate_size=64, vocab_size=100, max_position_embeddings=64)
    return transformers.BertModel(cfg).eval()


@pytest.mark.parametrize("make", [_gpt2, _bert], ids=["gpt2", "bert"])
def test_hf_model_one_graph(make, cnt):
    torch.manual_seed(0)
    model = make()
    opt = pydynamo.optimize(model, backend=cnt)
    with torch.no_grad():
        for _ in range(2):
            ids = torch.randint(0, 100, (2, 8))
            out = opt(ids)
            ref = model(ids)
            torch.testing.assert_close(out.last_hidden_state, ref.last_hidden_state)
    assert cnt.count == 1

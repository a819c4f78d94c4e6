"""GPT-2 (GPT2Model and GPT2LMHeadModel) and BERT from transformers configs (tiny sizes, random
weights, no download) capture as one graph each, outputs equal to eager, the second call a cache
hit; with `labels` GPT2LMHeadModel breaks once where torch.compile does (the loss function's
`logger.warning_once`). Needs `transformers`
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


def _gpt2_lm():
    cfg = transformers.GPT2Config(n_layer=2, n_head=2, n_embd=32, vocab_size=100, n_positions=64,
                                  bos_token_id=0, eos_token_id=0)
    return transformers.GPT2LMHeadModel(cfg).eval()


@pytest.mark.parametrize("grad", [False, True], ids=["no_grad", "grad"])
def test_gpt2_lm_head_one_graph(grad, cnt):
    """Masking utils build closures in the frame and call them (sdpa/causal mask functions),
    the output is a ModelOutput rebuilt after the graph, past_key_values a DynamicCache made in
    the frame; torch.compile: 1 graph."""
    model = _gpt2_lm()
    opt = pydynamo.optimize(model, backend=cnt)
    with torch.set_grad_enabled(grad):
        for i in range(3):
            ids = torch.randint(0, 100, (2, 8))
            mask = torch.ones(2, 8, dtype=torch.long)
            mask[0, :i] = 0  # left padding on later calls: same graph, different data
            out, ref = opt(ids, attention_mask=mask), model(ids, attention_mask=mask)
            assert type(out) is type(ref) and list(out.keys()) == list(ref.keys())
            torch.testing.assert_close(out.logits, ref.logits)
            assert out.logits.requires_grad == grad
            assert type(out.past_key_values) is type(ref.past_key_values)
            for a, b in zip(out.past_key_values.layers, ref.past_key_values.layers):
                torch.testing.assert_close(a.keys, b.keys)
                torch.testing.assert_close(a.values, b.values)
    assert cnt.count == 1


def test_gpt2_lm_head_with_labels_breaks_like_torch_compile(cnt):
    """With labels the loss function calls `logger.warning_once` (an lru_cache'd logging call):
    torch.compile takes one graph break there and compiles 2 graphs; so does pydynamo, and the
    loss equals eager's. The break runs `self.warning(*args, **kwargs)` in CPython (a
    CALL_FUNCTION_EX on a method whose result replaces the NULL slot)."""
    model = _gpt2_lm()
    opt = pydynamo.optimize(model, backend=cnt)
    for _ in range(2):
        ids = torch.randint(0, 100, (2, 8))
        out, ref = opt(ids, labels=ids), model(ids, labels=ids)
        torch.testing.assert_close(out.loss, ref.loss)
        torch.testing.assert_close(out.logits, ref.logits)
    assert cnt.count == 2

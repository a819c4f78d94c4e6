"""Attention masks that are graph constants equal to the causal mask become `is_causal=True`
(codegen/causal_mask.py): transformers' causal LMs build a (batch, 1, L, S) boolean mask from
`arange`s under a compiler, where eager passes `is_causal=True`; the fused kernels then add the
mask to every block instead of skipping the blocks above the diagonal. Each case compares the
compiled result with eager's on random inputs and counts the rewrites
(`counters["causal_masks_dropped"]`): what must not be rewritten (a mask reading an input, an
off-by-one or finite "minus infinity" mask, a random one, symbolic sizes) is checked too."""
import math

import pytest
import torch
import torch.nn.functional as F

import codegen
import pydynamo
from codegen.causal_mask import is_causal_mask


@pytest.fixture(autouse=True)
def _fresh():
    pydynamo.reset()
    codegen.counters.clear()
    yield
    pydynamo.reset()


def _qkv(b=2, h=3, L=12, S=12, d=8):
    torch.manual_seed(0)
    return (torch.randn(b, h, L, d), torch.randn(b, h, S, d), torch.randn(b, h, S, d))


def _run(fn, *args, dynamic=None):
    want = fn(*args)
    got = pydynamo.optimize(fn, backend="codegen", dynamic=dynamic)(*args)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
    return codegen.counters["causal_masks_dropped"]


def causal_from_arange(q, k, v):
    i = torch.arange(q.shape[-2])
    j = torch.arange(k.shape[-2])
    mask = (j[None, :] <= i[:, None])[None, None]
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def causal_positional(q, k, v):
    mask = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, mask, 0.0, False)


def causal_float(q, k, v):
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(~keep, -math.inf)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def shifted(q, k, v):                   # j <= i + 1: one diagonal more than causal
    i = torch.arange(q.shape[-2])
    j = torch.arange(k.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=j[None, :] <= i[:, None] + 1)


def finite_minus_infinity(q, k, v):     # what older models add: not exactly is_causal's mask
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    mask = torch.zeros(q.shape[-2], k.shape[-2]).masked_fill(~keep, torch.finfo(q.dtype).min)
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def from_input(q, k, v):                # reads an input's values: a different mask each call
    keep = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool).tril()
    return F.scaled_dot_product_attention(q, k, v, attn_mask=keep & (q[..., :1] > -10))


@pytest.mark.parametrize("fn", [causal_from_arange, causal_positional, causal_float])
def test_constant_causal_masks_become_is_causal(fn):
    assert _run(fn, *_qkv()) == 1


@pytest.mark.parametrize("fn", [shifted, finite_minus_infinity, from_input])
def test_other_masks_are_kept(fn):
    assert _run(fn, *_qkv()) == 0


def test_rectangular_causal_mask_is_top_left():
    # L < S: is_causal is top-left aligned, the same as tril of ones(L, S)
    assert _run(causal_from_arange, *_qkv(L=5, S=12)) == 1


def test_random_mask_is_not_evaluated():
    def fn(q, k, v):
        mask = torch.rand(q.shape[-2], k.shape[-2]) > 2.0      # all False: never causal
        mask = mask | torch.ones_like(mask).tril()
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    # the mask's value equals causal, but an ancestor is random: not replayed at compile time
    assert _run(fn, *_qkv()) == 0


def test_symbolic_sizes_are_left_alone():
    assert _run(causal_from_arange, *_qkv(), dynamic=True) == 0


def test_is_causal_mask_exact():
    keep = torch.ones(4, 6, dtype=torch.bool).tril()
    assert is_causal_mask(keep, 4, 6)
    assert is_causal_mask(keep[None, None].expand(2, 3, 4, 6), 4, 6)
    assert not is_causal_mask(torch.ones(4, 6, dtype=torch.bool).tril(1), 4, 6)
    assert not is_causal_mask(keep[:1], 4, 6)          # broadcast rows: not causal
    other = keep[None].repeat(2, 1, 1)
    other[1, 3, 0] = False                                 # one batch differs
    assert not is_causal_mask(other, 4, 6)
    f = torch.zeros(4, 6).masked_fill(~keep, -math.inf)
    assert is_causal_mask(f, 4, 6)
    assert not is_causal_mask(f.masked_fill(~keep, -1e30), 4, 6)
    assert not is_causal_mask(keep.long(), 4, 6)


@pytest.fixture
def transformers():
    return pytest.importorskip("transformers")


def _lm(transformers, name):
    T = transformers
    if name == "gpt2":
        return T.GPT2LMHeadModel(T.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=300))
    return T.LlamaForCausalLM(T.LlamaConfig(hidden_size=64, num_hidden_layers=2,
                                            num_attention_heads=4, num_key_value_heads=2,
                                            intermediate_size=128, vocab_size=300))


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_prefill_attention_is_causal(transformers, name):
    torch.manual_seed(0)
    model = _lm(transformers, name).eval()
    ids = torch.randint(0, 300, (2, 16))
    with torch.no_grad():
        want = model(input_ids=ids, use_cache=False).logits
        got = pydynamo.optimize(model, backend="codegen")(input_ids=ids, use_cache=False).logits
    torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    assert codegen.counters["causal_masks_dropped"] == 2          # one per layer


@pytest.mark.parametrize("name", ["gpt2", "llama"])
def test_causal_lm_with_padding_keeps_its_mask(transformers, name):
    torch.manual_seed(0)
    model = _lm(transformers, name).eval()
    ids = torch.randint(0, 300, (2, 16))
    attention = torch.ones(2, 16, dtype=torch.long)
    attention[1, :5] = 0                                          # left padding in row 1
    with torch.no_grad():
        want = model(input_ids=ids, attention_mask=attention, use_cache=False).logits
        got = pydynamo.optimize(model, backend="codegen")(
            input_ids=ids, attention_mask=attention, use_cache=False).logits
    torch.testing.assert_close(got[:, 5:], want[:, 5:], rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(got[0], want[0], rtol=1e-4, atol=1e-4)
    assert codegen.counters["causal_masks_dropped"] == 0

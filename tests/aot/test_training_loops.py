"""Issue 16's training acceptance: 5 optimizer steps under pydynamo equal 5 steps in eager.

Models (MODELS): tiny GPT-2 (transformers config; with and without dropout), tiny BERT for
sequence classification (dropout 0.1), an MLP with BatchNorm1d (train mode) and Dropout, a small
CNN (Conv2d, BatchNorm2d, ReLU, MaxPool2d, Linear), and the MLP again with a batch size per step;
SGD with momentum or AdamW. Backends:
"aot_eager", "codegen" (C++ kernels) and, for the MLP and the CNN, "triton" (codegen's Triton
kernels).

Per model, one module is built from a seed and deep-copied for each side; the batches are made
up front by their own generator, and the global RNG is re-seeded before each side's loop, so
dropout draws from the same RNG stream in both (the compiled forward must advance it as eager
does and draw the same masks: the dropout variants compare losses and parameters like the
others). Each step: forward of the pydynamo.optimize'd module (the loss inside the compiled
code), backward, optimizer step (eager: optimizers are not compiled here). Then one validation
step: eval mode, no_grad, the first batch (its loss is the sixth compared).

Compared with eager after the loop: the 5 losses, every parameter and buffer (BatchNorm running
statistics and num_batches_tracked included), at torch.testing's float32 defaults (rtol=1.3e-6,
atol=1e-5). That holds because the comparison is kept well-conditioned: no parameter whose
gradient is zero in exact arithmetic meets AdamW's normalisation at the default eps (a bias
before BatchNorm, an attention key's bias: see adamw_attention), where any reordering of a sum
flips the sign of round-off and AdamW turns it into a ~lr-sized step.

Counted: frames translated and graphs compiled (pydynamo.convert_frame.RECORDERS), and
pydynamo.aot.counters; `backward_compiled` must grow (the training path ran, not eager autograd
silently) and `eager_fallback` must not, nor (codegen) codegen's `eager_fallback_graphs`. The
counts are printed (`pytest -s`); the graph count is asserted (GRAPHS).
"""
from __future__ import annotations

import copy
import os

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pydynamo
import pydynamo.aot
from codegen.pipeline import counters as codegen_counters
from pydynamo import convert_frame

os.environ.setdefault("HF_HUB_OFFLINE", "1")

STEPS = 5
TOL = {}            # torch.testing's float32 defaults: rtol=1.3e-6, atol=1e-5
BACKENDS = ["aot_eager", "codegen", "triton"]
# "triton": codegen's Triton kernels (TRITON_INTERPRET=1 on CPU, set by conftest.py), run for the
# small models only (the interpreter is slow)
TRITON_MODELS = ("mlp_bn_dropout", "cnn")

# model -> reason; a failing (model, backend) is listed here (strict) and in
# /work/notes/aot_failures.md, never made to pass by loosening the comparison
XFAIL: dict[tuple, str] = {}


def _transformers():
    return pytest.importorskip("transformers")


# ---- models: factory() -> module; batches(gen) -> list of STEPS argument tuples; the module
# returns the loss

class LossWrapper(nn.Module):
    """A model plus its loss, so that the loss is part of the compiled code."""

    def __init__(self, net):
        super().__init__()
        self.net = net

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


def gpt2(dropout: float, use_cache: bool = False):
    def factory():
        t = _transformers()
        # use_cache=False as in training scripts (no DynamicCache built per step)
        cfg = t.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                           resid_pdrop=dropout, embd_pdrop=dropout, attn_pdrop=dropout,
                           bos_token_id=0, eos_token_id=0, use_cache=use_cache)
        return t.GPT2LMHeadModel(cfg).train()
    return factory


def gpt2_batches(gen):
    """(input_ids, labels): transformers computes the shifted LM loss inside the model."""
    out = []
    for _ in range(STEPS):
        ids = torch.randint(0, 128, (2, 16), generator=gen)
        out.append(dict(input_ids=ids, labels=ids.clone()))
    return out


def bert():
    t = _transformers()
    cfg = t.BertConfig(num_hidden_layers=2, num_attention_heads=2, hidden_size=64,
                       intermediate_size=128, vocab_size=128, max_position_embeddings=64,
                       num_labels=3, problem_type="single_label_classification")
    # problem_type preset: left None, the first forward sets `self.config.problem_type` (that
    # write is test_bert_config_set_in_forward's; here the loop's losses are the subject)
    return t.BertForSequenceClassification(cfg).train()


def bert_batches(gen):
    return [dict(input_ids=torch.randint(0, 128, (2, 16), generator=gen),
                 labels=torch.randint(0, 3, (2,), generator=gen)) for _ in range(STEPS)]


def mlp_bn():
    return LossWrapper(nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(),
                                     nn.Dropout(0.2), nn.Linear(32, 5)).train())


def mlp_batches(gen):
    return [dict(x=torch.randn(8, 16, generator=gen), y=torch.randint(0, 5, (8,), generator=gen))
            for _ in range(STEPS)]


def mlp_varying_batches(gen):
    """A batch size per step: the second step recompiles with a symbolic batch dim (automatic
    dynamic); the joint graph is specialized per size, so each new size records its own."""
    return [dict(x=torch.randn(n, 16, generator=gen), y=torch.randint(0, 5, (n,), generator=gen))
            for n in (8, 12, 16, 6, 10)]


def cnn():
    return LossWrapper(nn.Sequential(
        # no bias before BatchNorm: its gradient is zero in exact arithmetic (see adamw_attention)
        nn.Conv2d(3, 8, 3, padding=1, bias=False), nn.BatchNorm2d(8), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(8, 8, 3, padding=1), nn.ReLU(), nn.Flatten(), nn.Linear(8 * 4 * 4, 10)).train())


def cnn_batches(gen):
    return [dict(x=torch.randn(4, 3, 8, 8, generator=gen), y=torch.randint(0, 10, (4,), generator=gen))
            for _ in range(STEPS)]


def sgd(params):
    return torch.optim.SGD(params, lr=0.05, momentum=0.9)


def adamw(params):
    return torch.optim.AdamW(params, lr=1e-3)


def adamw_attention(params):
    """eps=1e-6: an attention key's bias has a gradient that is zero in exact arithmetic (softmax
    is shift-invariant), ~1e-10 of round-off in float32; with the default eps=1e-8 AdamW scales
    that noise up to ~lr/100 per step, whose sign depends on the summation order, so eager against
    ANY reordering differs there by ~1e-5 after 5 steps. With eps=1e-6 it stays below 1e-7."""
    return torch.optim.AdamW(params, lr=1e-3, eps=1e-6)


# name -> (factory, batches, optimizer)
MODELS = {
    "gpt2": (gpt2(0.0), gpt2_batches, adamw_attention),
    "gpt2_dropout": (gpt2(0.1), gpt2_batches, sgd),
    # the config's default: a DynamicCache is built (and concatenated to) in each forward
    "gpt2_use_cache": (gpt2(0.0, use_cache=True), gpt2_batches, adamw_attention),
    "bert": (bert, bert_batches, adamw_attention),      # BertConfig's dropout 0.1 left on
    "mlp_bn_dropout": (mlp_bn, mlp_batches, sgd),
    "mlp_varying_batch": (mlp_bn, mlp_varying_batches, sgd),
    "cnn": (cnn, cnn_batches, adamw),
}
# graphs compiled per model, training steps + the validation step (eval mode and no_grad fail the
# training graphs' guards: one recompile per graph). GPT-2's loss path (labels) takes one graph
# break, at transformers' `logger.warning_once` in its loss function, as torch.compile does: 2 + 2;
# the others are one graph: 1 + 1; mlp_varying_batch: the first size's graph, then one with a
# symbolic batch, + 1
GRAPHS = {"gpt2": 4, "gpt2_dropout": 4, "gpt2_use_cache": 4, "bert": 2, "mlp_bn_dropout": 2, "cnn": 2,
          "mlp_varying_batch": 3}


def _train(model: nn.Module, batches, make_opt, backend: str | None):
    opt = make_opt(model.parameters())
    if backend is None:
        step = model
    elif backend == "triton":
        step = pydynamo.optimize(model, backend="codegen", options={"backend_kernels": "triton"})
    else:
        step = pydynamo.optimize(model, backend=backend)
    torch.manual_seed(7)            # dropout's stream: the same on both sides
    losses = []
    for kwargs in batches:
        opt.zero_grad(set_to_none=True)
        out = step(**kwargs)
        loss = out if isinstance(out, torch.Tensor) else out.loss   # transformers: a ModelOutput
        loss.backward()
        opt.step()
        losses.append(loss.detach())
    # a validation step after training: eval mode (dropout off, BatchNorm reads the running
    # statistics the compiled steps updated) under no_grad, through the same compiled module
    model.eval()
    with torch.no_grad():
        out = step(**batches[0])
    model.train()
    losses.append(out if isinstance(out, torch.Tensor) else out.loss)
    return torch.stack(losses)


_EAGER: dict = {}


def _reference(name):
    """(initial module, batches, eager losses, eager final state): computed once per model."""
    if name not in _EAGER:
        factory, make_batches, make_opt = MODELS[name]
        torch.manual_seed(0)
        init = factory()
        batches = make_batches(torch.Generator().manual_seed(1))
        ref = copy.deepcopy(init)
        losses = _train(ref, batches, make_opt, None)
        _EAGER[name] = (init, batches, losses, ref.state_dict())
    return _EAGER[name]


def _params():
    out = []
    for name in MODELS:
        for backend in BACKENDS:
            if backend == "triton" and name not in TRITON_MODELS:
                continue
            reason = XFAIL.get((name, backend))
            marks = [pytest.mark.xfail(strict=True, reason=reason)] if reason else []
            out.append(pytest.param(name, backend, marks=marks, id=f"{name}-{backend}"))
    return out


@pytest.mark.parametrize("name,backend", _params())
def test_training_matches_eager(name, backend):
    if backend != "triton" and backend not in pydynamo.list_backends():
        pytest.skip(f"backend {backend} not registered yet")
    init, batches, ref_losses, ref_state = _reference(name)
    _, _, make_opt = MODELS[name]
    model = copy.deepcopy(init)
    frames = []
    pydynamo.reset()
    before = dict(pydynamo.aot.counters)
    cg_before = dict(codegen_counters)
    convert_frame.RECORDERS.append(frames.append)
    try:
        losses = _train(model, batches, make_opt, backend)
    finally:
        convert_frame.RECORDERS.remove(frames.append)
        pydynamo.reset()
    aot = {k: v - before.get(k, 0) for k, v in pydynamo.aot.counters.items() if v != before.get(k, 0)}
    cg = {k: v - cg_before.get(k, 0) for k, v in codegen_counters.items() if v != cg_before.get(k, 0)}
    results = [f for f in frames if isinstance(f, convert_frame.FrameResult)]
    n_graphs = sum(len(f.graphs) for f in results)
    print(f"\n{name} [{backend}]: {len(results)} frames translated, {n_graphs} graphs, "
          f"aot counters {aot}, codegen counters {cg}, losses {[round(float(x), 5) for x in losses]}")
    torch.testing.assert_close(losses, ref_losses, **TOL, msg=lambda m: f"losses: {m}")
    state = model.state_dict()
    assert list(state) == list(ref_state)
    for k, v in ref_state.items():
        torch.testing.assert_close(state[k], v, **TOL, msg=lambda m, k=k: f"{k} after {STEPS} steps: {m}")
    assert n_graphs == GRAPHS[name]
    assert aot.get("backward_compiled", 0) > 0, f"no backward graph compiled (eager autograd?): {aot}"
    assert aot.get("eager_fallback", 0) == 0, f"graphs fell back to eager autograd: {aot}"
    assert cg.get("eager_fallback_graphs", 0) == 0, f"codegen ran graphs eagerly: {cg}"
    if backend == "triton":
        assert cg.get("triton_graphs_compiled", 0) > 0, cg


def test_bert_config_set_in_forward():
    """BertForSequenceClassification with problem_type None assigns config.problem_type in its
    first forward (any backend: the executor, not the training path). Regression: setting a
    transformers PretrainedConfig attribute in a compiled frame recursed without end in its
    transformed __getattribute__ (fixed with the executor's plain-attribute re-reads,
    sources.PlainAttrSource; a strict xfail until then)."""
    t = _transformers()
    cfg = t.BertConfig(num_hidden_layers=1, num_attention_heads=2, hidden_size=8,
                       intermediate_size=8, vocab_size=16, max_position_embeddings=16, num_labels=2)

    def f(x):
        cfg.problem_type = "single_label_classification"
        return x + 1
    pydynamo.reset()
    try:
        assert torch.equal(pydynamo.optimize(f, backend="eager")(torch.ones(2)), torch.full((2,), 2.0))
    finally:
        pydynamo.reset()

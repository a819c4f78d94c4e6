"""The embedded default model: a small GPT-style transformer defined here, so the demo (and later
benchmarks) need no download and no third-party model code.

Token + position embeddings, `n_layer` pre-norm blocks (LayerNorm -> causal multi-head attention
-> residual; LayerNorm -> GELU MLP -> residual), a final LayerNorm and a linear head. Written in
plain PyTorch the way users write models (submodules, a ModuleList loop, view/transpose for heads,
a registered causal-mask buffer), so capturing it exercises the executor's common paths.
Weights are seeded by `build_model`, so every run and every process builds the same model.
"""
from __future__ import annotations

import dataclasses
import math

import torch
import torch.nn as nn
import torch.nn.functional as F


@dataclasses.dataclass(frozen=True)
class DemoConfig:
    vocab_size: int = 256
    max_seq: int = 64
    d_model: int = 64
    n_head: int = 4
    n_layer: int = 2
    mlp_ratio: int = 4


class CausalSelfAttention(nn.Module):
    def __init__(self, cfg: DemoConfig):
        super().__init__()
        self.n_head = cfg.n_head
        self.qkv = nn.Linear(cfg.d_model, 3 * cfg.d_model)
        self.proj = nn.Linear(cfg.d_model, cfg.d_model)
        mask = torch.tril(torch.ones(cfg.max_seq, cfg.max_seq, dtype=torch.bool))
        self.register_buffer("mask", mask.view(1, 1, cfg.max_seq, cfg.max_seq), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, d = x.shape
        hd = d // self.n_head
        q, k, v = self.qkv(x).split(d, dim=-1)
        q = q.view(b, s, self.n_head, hd).transpose(1, 2)
        k = k.view(b, s, self.n_head, hd).transpose(1, 2)
        v = v.view(b, s, self.n_head, hd).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(hd))
        att = att.masked_fill(~self.mask[:, :, :s, :s], float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        return self.proj(y.transpose(1, 2).reshape(b, s, d))


class MLP(nn.Module):
    def __init__(self, cfg: DemoConfig):
        super().__init__()
        self.fc = nn.Linear(cfg.d_model, cfg.mlp_ratio * cfg.d_model)
        self.out = nn.Linear(cfg.mlp_ratio * cfg.d_model, cfg.d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.out(F.gelu(self.fc(x)))


class Block(nn.Module):
    def __init__(self, cfg: DemoConfig):
        super().__init__()
        self.ln1 = nn.LayerNorm(cfg.d_model)
        self.attn = CausalSelfAttention(cfg)
        self.ln2 = nn.LayerNorm(cfg.d_model)
        self.mlp = MLP(cfg)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class TinyTransformer(nn.Module):
    def __init__(self, cfg: DemoConfig = DemoConfig()):
        super().__init__()
        self.cfg = cfg
        self.tok = nn.Embedding(cfg.vocab_size, cfg.d_model)
        self.pos = nn.Embedding(cfg.max_seq, cfg.d_model)
        self.blocks = nn.ModuleList([Block(cfg) for _ in range(cfg.n_layer)])
        self.ln_f = nn.LayerNorm(cfg.d_model)
        self.head = nn.Linear(cfg.d_model, cfg.vocab_size, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        s = ids.shape[1]
        x = self.tok(ids) + self.pos(torch.arange(s, device=ids.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def build_model(cfg: DemoConfig = DemoConfig(), seed: int = 0) -> TinyTransformer:
    """The demo model in eval mode, with weights from `seed` (the global RNG is left as it was)."""
    with torch.random.fork_rng():
        torch.manual_seed(seed)
        return TinyTransformer(cfg).eval()


def example_inputs(cfg: DemoConfig = DemoConfig(), batch: int = 2, seq: int = 16, seed: int = 0,
                   dtype: torch.dtype = torch.int64) -> torch.Tensor:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, cfg.vocab_size, (batch, seq), generator=g).to(dtype)


def next_token_probs(model: TinyTransformer, ids: torch.Tensor, temperature: float = 1.0):
    """User code around the model with two graph breaks, the kind real programs have: a print,
    and a Python `if` on a tensor's value. Used by the demo's graph-break step."""
    logits = model(ids)[:, -1] / temperature
    print(f"    (user print) last-position logits: {tuple(logits.shape)}")
    if logits.max() > 4.0:
        logits = logits - logits.max()
    return torch.softmax(logits, dim=-1)

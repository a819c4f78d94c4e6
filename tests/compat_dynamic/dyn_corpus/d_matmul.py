"""The matmul family with symbolic batch / sequence dims."""
import math

import torch
import torch.nn.functional as F

from dyn_case import dyn_case, t


@dyn_case((t(3, 4), t(4, 5)), (t(6, 4), t(4, 5)), (t(6, 7), t(7, 2)), (t(9, 7), t(7, 2)))
def mm_chain(x, w):
    return (x @ w).relu() @ w.t()


@dyn_case((t(2, 3, 4), t(2, 4, 5)), (t(2, 6, 4), t(2, 4, 5)), (t(3, 6, 7), t(3, 7, 2)))
def bmm(a, b):
    return torch.bmm(a, b) * 0.5


@dyn_case((t(3, 6), t(5, 6), t(5)), (t(7, 6), t(5, 6), t(5)), (t(11, 6), t(5, 6), t(5)))
def linear_bias(x, w, b):
    return F.linear(x, w, b).tanh()


@dyn_case((t(2, 3, 4), t(4, 5)), (t(2, 6, 4), t(4, 5)), (t(4, 6, 4), t(4, 5)))
def matmul_bcast(x, w):
    return x @ w


@dyn_case((t(2, 5, 8), t(2, 6, 8)), (t(2, 7, 8), t(2, 9, 8)), (t(3, 7, 8), t(3, 11, 8)))
def attention(q, k):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    return torch.softmax(scores, dim=-1) @ k


@dyn_case((t(5), t(3, 4), t(4, 5)), (t(5), t(6, 4), t(4, 5)), (t(7), t(6, 4), t(4, 7)))
def addmm(b, x, w):
    return torch.addmm(b, x, w)


@dyn_case((t(2, 5, 8),), (t(2, 7, 8),), (t(3, 9, 8),))
def sdpa(x):
    q = x.view(x.shape[0], x.shape[1], 2, 4).transpose(1, 2)
    return F.scaled_dot_product_attention(q, q, q, is_causal=True).transpose(1, 2).reshape(x.shape)

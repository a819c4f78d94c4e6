"""Reductions with dim / keepdim, softmax and normalization over symbolic dims."""
import torch
import torch.nn.functional as F

from dyn_case import dyn_case, t


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 7),), (t(9, 3),))
def sum_keepdim(x):
    return x.sum(dim=1, keepdim=True) / x.shape[1]


@dyn_case((t(3, 4),), (t(6, 4),), (t(6, 8),), (t(2, 5),))
def mean_var(x):
    return x.mean(-1) + x.var(0).sum()


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),), (t(7, 3),))
def amax_argmax(x):
    return x.amax(dim=0) + x.argmax(dim=1).float().sum()


@dyn_case((t(2, 3, 4),), (t(2, 5, 4),), (t(3, 5, 8),), (t(4, 2, 3),))
def softmax_sum(x):
    return torch.softmax(x, -1).sum(0) * x.shape[-1]


@dyn_case((t(3, 8),), (t(5, 8),), (t(5, 16),), (t(4, 6),))
def layer_norm_last(x):
    return F.layer_norm(x, (x.shape[-1],))


@dyn_case((t(3, 4),), (t(6, 4),), (t(6, 5),))
def logsumexp_keep(x):
    return x.logsumexp(1, keepdim=True) - x


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),), (t(8, 2),))
def cumsum_max(x):
    return x.cumsum(0).max(dim=1).values


@dyn_case((t(2, 3, 4),), (t(2, 5, 4),), (t(4, 5, 7),))
def sum_multi_dims(x):
    return x.sum((0, 2)) + x.mean(dim=(1, 2), keepdim=True).squeeze(-1).sum()

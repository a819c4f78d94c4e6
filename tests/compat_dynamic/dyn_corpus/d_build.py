"""cat / stack and factories (new_zeros, zeros, full, arange, ones) with symbolic sizes."""
import torch
import torch.nn.functional as F

from dyn_case import dyn_case, t


@dyn_case((t(3, 4), t(2, 4)), (t(5, 4), t(2, 4)), (t(5, 4), t(6, 4)), (t(7, 3), t(3, 3)))
def cat_dim0(x, y):
    return torch.cat([x, y], 0) * 2


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),), (t(2, 8),))
def stack_pair(x):
    return torch.stack([x, x * 2], dim=1).sum(1)


@dyn_case((t(3, 4),), (t(5, 4),), (t(8, 6),), (t(4, 3),))
def new_zeros_arith(x):
    n = x.shape[0]
    return x.new_zeros(n * 2 - 1, x.shape[1]) + x.sum()


@dyn_case((t(3, 4),), (t(5, 4),), (t(7, 4),))
def zeros_full(x):
    n = x.shape[0]
    return torch.zeros(n, 3) + torch.full((n, 3), 2.0) + x[:, :3]


@dyn_case((t(2, 4),), (t(2, 6),), (t(3, 9),), (t(3, 5),))
def arange_pos(x):
    return torch.arange(x.shape[-1]) * x


@dyn_case((t(4, 4),), (t(6, 6),), (t(3, 3),), (t(9, 9),))
def ones_tril_mask(x):
    n = x.shape[-1]
    mask = torch.ones(n, n).tril().bool()
    return x.masked_fill(~mask, 0.0)


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),))
def zeros_like_plus_size(x):
    return torch.zeros_like(x) + x.shape[0] + x


@dyn_case((t(2, 3),), (t(2, 5),), (t(4, 5),))
def pad_cat(x):
    return torch.cat([F.pad(x, (1, 1)), x.new_ones(x.shape[0], 2)], dim=1)


@dyn_case((t(3, 4),), (t(6, 4),), (t(6, 5),))
def triu_arange_full(x):
    n, m = x.shape
    r = torch.arange(n).unsqueeze(1) + torch.arange(m)
    return torch.where(r < m, x, torch.full_like(x, -1.0)).triu()

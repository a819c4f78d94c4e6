"""Slicing and indexing with symbolic bounds."""
import torch

from dyn_case import dyn_case, t


@dyn_case((t(5, 6),), (t(7, 6),), (t(7, 9),), (t(3, 4),))
def slice_head_tail(x):
    return x[1:, : x.shape[1] - 1] * 2


@dyn_case((t(3, 8),), (t(3, 10),), (t(5, 11),), (t(4, 6),))
def slice_half(x):
    h = x.shape[1] // 2
    return x[:, :h] * x[:, h:2 * h]


@dyn_case((t(6, 3),), (t(8, 3),), (t(9, 3),), (t(10, 4),))
def slice_negative(x):
    return x[-(x.shape[0] // 2):] + 1


@dyn_case((t(5, 3),), (t(7, 3),), (t(9, 4),))
def index_arange(x):
    idx = torch.arange(x.shape[0] - 1)
    return x[idx] + x[1:]


@dyn_case((t(2, 5, 4), t(4, 3)), (t(2, 7, 4), t(4, 3)), (t(3, 9, 4), t(4, 3)))
def last_token(x, w):
    return x[:, -1, :] @ w


@dyn_case((t(4, 6),), (t(6, 6),), (t(6, 9),), (t(8, 3),))
def step_slice(x):
    return x[::2, ::2] * 2 + x[: (x.shape[0] + 1) // 2, : (x.shape[1] + 1) // 2]

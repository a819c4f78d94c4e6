"""Views and reshapes whose sizes are computed from x.shape."""
import torch

from dyn_case import dyn_case, t


@dyn_case((t(8, 3),), (t(10, 3),), (t(12, 3),), (t(6, 5),))
def view_half(x):
    return x.view(x.shape[0] // 2, -1) * 2


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 7),), (t(6, 2),))
def reshape_flat(x):
    return x.reshape(x.shape[0] * x.shape[1]) + 1


@dyn_case((t(2, 4, 8),), (t(2, 6, 8),), (t(3, 6, 8),), (t(3, 5, 12),))
def reshape_heads(x):
    b, n, d = x.shape
    return x.reshape(b, n, 2, d // 2).transpose(1, 2).contiguous() * 3


@dyn_case((t(2, 3, 4, 5),), (t(2, 3, 6, 5),), (t(4, 3, 6, 7),))
def permute_4d(x):
    return x.permute(0, 2, 3, 1).reshape(x.shape[0], -1) + 1


@dyn_case((t(4, 5), t(3, 4, 5)), (t(6, 5), t(3, 6, 5)), (t(6, 7), t(3, 6, 7)))
def expand_unsqueeze(x, y):
    return x.unsqueeze(0).expand(3, -1, -1) + y


@dyn_case((t(2, 3, 4),), (t(2, 5, 4),), (t(3, 5, 6),))
def flatten_unflatten(x):
    return x.flatten(1).unflatten(1, (x.shape[1], x.shape[2])) * x


@dyn_case((t(4, 6),), (t(4, 8),), (t(5, 10),), (t(7, 12),))
def chunk_halves(x):
    a, b = x.chunk(2, dim=-1)
    return a * b


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),), (t(8, 2),))
def transpose_mm(x):
    return x.t() @ x


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 6),))
def select_narrow(x):
    return x.select(0, x.shape[0] - 1) + x.narrow(0, 0, 1).squeeze(0)


@dyn_case((t(4, 6),), (t(6, 6),), (t(6, 8),), (t(10, 4),))
def split_sizes(x):
    a, b = x.split([x.shape[1] // 2, x.shape[1] - x.shape[1] // 2], dim=1)
    return a.sum(1) - b.sum(1)

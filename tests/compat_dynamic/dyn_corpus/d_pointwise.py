"""Pointwise work over 1-D to 4-D inputs, broadcasting, duck-shaped inputs."""
import torch

from dyn_case import dyn_case, t


@dyn_case((t(4),), (t(5),), (t(7),), (t(5),), (t(16),))
def pw_1d(x):
    return x * 2 + 1


@dyn_case((t(3, 4), t(3, 4)), (t(5, 4), t(5, 4)), (t(5, 6), t(5, 6)), (t(9, 2), t(9, 2)))
def pw_2d(x, y):
    return x.sin() + x.cos() * y


@dyn_case((t(2, 3, 4),), (t(2, 5, 4),), (t(3, 5, 6),), (t(4, 7, 6),))
def pw_3d(x):
    return torch.relu(x) - 0.5 * x


@dyn_case((t(2, 3, 4, 5),), (t(2, 3, 6, 5),), (t(2, 3, 6, 7),), (t(3, 2, 6, 7),))
def pw_4d(x):
    return (x * x).sigmoid() + x.abs()


@dyn_case((t(4, 3), t(3)), (t(6, 3), t(3)), (t(6, 5), t(5)), (t(8, 5), t(5)))
def bcast_row(x, b):
    return x + b


@dyn_case((t(4, 1), t(1, 5)), (t(6, 1), t(1, 7)), (t(3, 1), t(1, 3)), (t(9, 1), t(1, 2)))
def bcast_outer(x, y):
    return x * y + y


@dyn_case((t(2, 4, 3), t(4, 1)), (t(2, 6, 3), t(6, 1)), (t(3, 6, 5), t(6, 1)), (t(5, 7, 5), t(7, 1)))
def bcast_3d(x, y):
    return (x - y).exp()


@dyn_case((t(4), t(4)), (t(5), t(5)), (t(6), t(7)), (t(8), t(8)), (t(9), t(3)))
def duck_two(x, y):
    return x.sum() + y.sum()


@dyn_case((t(3, 4), t(4)), (t(5, 4), t(4)), (t(5, 7), t(7)), (t(2, 9), t(9)))
def where_bcast(x, y):
    return torch.where(x > 0, x, y)

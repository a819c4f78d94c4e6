"""Loops bounded by a size (small sizes: a symbolic range bound is specialized)."""
import torch

from dyn_case import dyn_case, t


@dyn_case((t(2, 3),), (t(3, 3),), (t(4, 3),), (t(3, 3),))
def loop_rows(x):
    acc = torch.zeros(x.shape[1])
    for i in range(x.shape[0]):
        acc = acc + x[i] * (i + 1)
    return acc


@dyn_case((t(8),), (t(9),), (t(12),), (t(13),), (t(11),))
def loop_quarter(x):
    for i in range(x.shape[0] // 4):
        x = x + i
    return x * 2


@dyn_case((t(3, 2),), (t(3, 4),), (t(3, 6),), (t(3, 5),))
def loop_fixed_over_dynamic(x):
    # the bound is a static dim; the other dim stays symbolic
    out = x
    for _ in range(x.shape[0]):
        out = out * 0.5 + x
    return out

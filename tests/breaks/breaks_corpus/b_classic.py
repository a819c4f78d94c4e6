"""The classic examples of the issue: sin / print(shape) / cos, and print + tensor branch +
sorted with a tensor-valued key."""
import io

import torch

from compat_case import case, t

SINK = io.StringIO()


@case(t(8))
def sin_print_cos(x):
    y = torch.sin(x)
    print(f"Shape: {y.shape}", file=SINK)
    return torch.cos(y)


@case(t(8))
def print_branch_sorted(x):
    print("calling", file=SINK)
    y = x * 2
    if x.sum() > 0:
        y = y + 1
    else:
        y = y - 1
    return sorted([y, y.cos()], key=lambda t: t.sum())

"""The design notes' example (DESIGN.md section 5) and marked-dynamic dims."""
import torch

from dyn_case import dyn_case, marked, t


@dyn_case((t(8),), (t(9),), (t(100),))
def design(a):
    return a if a.shape[0] * 2 < 16 else a + 1


@dyn_case((t(8),), (t(9),), (t(100),), (t(3),), (t(4),), (t(7),))
def design_both_sides(a):
    return (a if a.shape[0] * 2 < 16 else a + 1) * 2


@dyn_case((marked(t(8), 0),), (marked(t(9), 0),), (marked(t(3), 0),), (marked(t(5), 0),))
def marked_branch(a):
    return (a + 1 if a.shape[0] > 4 else a - 1) * 2


@dyn_case((marked(t(4, 3), 0), t(3)), (marked(t(6, 3), 0), t(3)), (marked(t(6, 5), 0), t(5)))
def marked_broadcast(x, y):
    return torch.tanh(x + y)

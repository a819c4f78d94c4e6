"""Python arithmetic and comparisons on sizes: + - * // % ** min max, int()/bool(), branches."""
import torch

from dyn_case import dyn_case, t


@dyn_case((t(3, 4),), (t(5, 4),), (t(5, 7),), (t(9, 2),))
def arith_ops(x):
    n, m = x.shape
    a = (n + m) * 2 - n // 2 + n % 3 + n ** 2
    b = min(n, m) * max(n, m) - (m - n)
    return x.sum() * a + b, a, b


@dyn_case((t(4),), (t(6),), (t(5),), (t(7),), (t(8),))
def branch_mod(x):
    return (x * 2 if x.shape[0] % 2 == 0 else x) + 1


@dyn_case((t(8), t(4)), (t(10), t(5)), (t(10), t(4)), (t(6), t(3)))
def branch_relation(x, y):
    return (x + 1 if x.shape[0] == y.shape[0] * 2 else x - 1).sum() + y.sum()


@dyn_case((t(8, 8),), (t(4, 20),), (t(5, 5),), (t(3, 3),), (t(9, 9),))
def branch_product(x):
    return (x * 2 if x.shape[0] * x.shape[1] > 50 else x) + 1


@dyn_case((t(8),), (t(11),), (t(12),), (t(10),))
def float_div(x):
    return (x * 2 if x.shape[0] / 4 > 2.5 else x) + x.shape[0] / 2


@dyn_case((t(3),), (t(4),), (t(5),), (t(4),))
def int_of_size(x):
    return x * int(x.shape[0] * 3)


@dyn_case((t(3, 2),), (t(5, 2),), (t(4, 2),), (t(6, 3),))
def numel_size(x):
    return x / x.numel() + x.size(0) - x.size(-1)


@dyn_case((t(3), 3), (t(3), 4), (t(3), 5), (t(4), 6))
def int_input(x, n):
    return x * n + n


@dyn_case((t(6), 3), (t(8), 4), (t(12), 3), (t(10), 5))
def int_and_size(x, n):
    return x.view(-1, n) + n

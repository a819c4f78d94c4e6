"""Typing of scalars, comparisons, bools and half types in printed Triton kernels (CPU:
TRITON_INTERPRET=1; GPU: compiled kernels), through the user's path (pydynamo.optimize, the same
tensors for the compiled call, outputs and mutated inputs compared with eager, exactly for
integers and bools: tests/differential.py).

The class behind fuzz findings F8 and F9: a comparison of two 0-d values (a size symbol, a
constant, a filled bool) combined with a block. Compiled Triton types it int1; the interpreter
rebuilt it in the operands' dtype when broadcasting, so a store mask or `|` with it failed
(codegen/triton_launch.py `fix_interpreter`). Beside it, conversions to bfloat16: the interpreter
truncated fp32 and took ints and bools as bit patterns, and eager rounds an integer through float.
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import assert_same_as_eager  # noqa: E402

DEV = "cuda" if torch.cuda.is_available() else "cpu"
FLOATS = [torch.float16, torch.bfloat16, torch.float32, torch.float64]
INTS = [torch.int8, torch.uint8, torch.int16, torch.int32, torch.int64]


def make(dt, *shape):
    if dt == torch.bool:
        return torch.rand(*shape, device=DEV) > 0.5
    if dt.is_floating_point:
        return (torch.randn(*shape, device=DEV) * 50).to(dt)
    lo = 0 if dt == torch.uint8 else -100
    return torch.randint(lo, 100, shape, device=DEV).to(dt)


def check(f, makers, dynamic=None):
    assert_same_as_eager(f, makers, backend="triton", dynamic=dynamic)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


# ---------------------------------------------------------------- comparisons of 0-d values

@pytest.mark.parametrize("op", ["remainder", "floordiv", "where_lt", "fmod"])
def test_mask_from_comparison_of_size_symbol_dynamic(op):
    """F8's class: integer division by a size symbol guards `(s0 == 0)`, a 0-d comparison, and
    ANDs it with the block mask of the error store."""
    def f(v, i):
        n = v.shape[0]
        if op == "remainder":
            j = i % n
        elif op == "floordiv":
            j = (i * n) // n - 1
        elif op == "fmod":
            j = torch.fmod(i, n)
        else:
            j = torch.where(i < n, i, i - n)
        return v.index_select(0, j), j
    check(f, [lambda n=n: (torch.randn(8, 5, device=DEV), torch.randint(1, 9, (n,), device=DEV))
              for n in (5, 6, 5)], dynamic=True)


def test_index_select_of_computed_index_static_and_dynamic():
    def f(v, i):
        return v.index_select(0, i % v.shape[0]) * (i.shape[0] > 4)
    for dynamic in (None, True):
        check(f, [lambda n=n: (torch.randn(7, 3, device=DEV), torch.randint(0, 20, (n,), device=DEV))
                  for n in (5, 6, 9)], dynamic=dynamic)


@pytest.mark.parametrize("dt", FLOATS + INTS)
def test_comparison_of_constants_or_blocks(dt):
    """A filled tensor (a 0-d constant) compared with itself and with a block, combined with
    block comparisons by | & ^, as a where condition and as a value."""
    def f(a, y):
        a.fill_(3)
        c = (a != a) | (y > a)
        d = (a == 3) & (y < 0)
        return c, d ^ c, torch.where(c, a, y), (a >= 3).sum()
    check(f, [lambda: (make(dt, 4, 5), make(dt, 5))] * 2)


# ---------------------------------------------------------------- bools with every dtype

@pytest.mark.parametrize("dt", FLOATS + INTS)
@pytest.mark.parametrize("fill", [False, True], ids=["random", "filled"])
def test_bool_in_minimum_maximum_where_and_arith(dt, fill):
    """F9's class: a bool tensor (random, or filled in place so it prints as a 0-d constant)
    against every float and int dtype, in minimum/maximum (NaN checks `x != x` of the bool
    converted), where, arithmetic and comparison, reduced too."""
    def f(b, y):
        if fill:
            b.fill_(True)
        lo, hi = torch.minimum(b, y), torch.maximum(y, b)
        out = (lo, hi, torch.where(b, y, hi), b + y, y * b, b < y, b == y)
        if dt.is_floating_point:
            out += (lo.mean(), hi.amax(0))
        else:
            out += (lo.sum(), hi.amin(0))
        return out
    check(f, [lambda: (make(torch.bool, 5, 4, 5), make(dt, 5))] * 2)


def test_minimum_of_filled_bool_and_float64_dynamic():
    def f(b, y):
        b.fill_(True)
        return torch.minimum(b, y).mean(), torch.maximum(b, -y).sum()
    check(f, [lambda n=n: (make(torch.bool, n, 4, 5), make(torch.float64, 5)) for n in (5, 3, 6)],
          dynamic=True)


# ---------------------------------------------------------------- bfloat16 / float16 rounding

@pytest.mark.parametrize("src", INTS + [torch.bool, torch.float32, torch.float64])
@pytest.mark.parametrize("half", [torch.bfloat16, torch.float16])
def test_conversion_to_half_types_rounds_like_eager(src, half):
    """Integer-valued data shows a rounding difference exactly (tolerance hides it in random
    floats): fp32 -> bf16 rounds to nearest even, an int or bool is a value (never bits)."""
    def f(x, y):
        return x.to(half), x.to(half) * y, (x.to(half) + 1).to(torch.float32)
    if src == torch.bool:
        mk = lambda: (make(torch.bool, 300), torch.ones(300, dtype=half, device=DEV))
    elif src.is_floating_point:
        mk = lambda: (torch.arange(-300, 300, 2, device=DEV).to(src) + 0.5,
                      torch.ones(300, dtype=half, device=DEV))
    else:
        hi = 127 if src == torch.int8 else 255 if src == torch.uint8 else 1000
        lo = 0 if src == torch.uint8 else -hi
        mk = lambda: (torch.randint(lo, hi, (300,), device=DEV).to(src),
                      torch.ones(300, dtype=half, device=DEV))
    check(f, [mk] * 2)


def test_large_int_to_bfloat16_rounds_through_float_like_eager():
    """16842753 -> float 16842752 (a tie) -> bf16 16777216 in eager; a direct int -> bf16
    conversion gives 16908288."""
    def f(x):
        return x.to(torch.bfloat16), torch.arange(300, device=DEV, dtype=torch.bfloat16) + x[:1]
    check(f, [lambda: (torch.tensor([16842753, 2 ** 25 + 2 ** 17 + 3, -16842753, 7],
                                    device=DEV, dtype=torch.int64),)] * 2)


def test_arange_in_bfloat16_rounds_each_value():
    def f(y):
        return torch.arange(300, dtype=torch.bfloat16, device=DEV) * y, \
            (torch.arange(300, device=DEV) + 1).to(torch.bfloat16) * y
    check(f, [lambda: (torch.ones(300, dtype=torch.bfloat16, device=DEV),)] * 2)


def test_reduction_loop_bound_of_min_of_sizes_view_chain_seed_90():
    """View-chain sweep seeds 90 and 100 (Triton 3.6's interpreter on the lent H100 host):
    `movedim; [1:]; diagonal(1)` then `sum` loops to `tl.minimum(s0 - 1, s1 - 1)`; that
    interpreter's `__index__` refused the one-element array a scalar is there."""
    def f(x):
        return x.movedim(-2, -1)[1:].diagonal(1, 0, 1).sum(-1)
    check(f, [lambda a=a: (torch.randn(a, a + 1, device=DEV)[:, 1:].permute(1, 0),)
              for a in (6, 10, 14)])


@pytest.mark.skipif(DEV == "cuda", reason="the interpreter's own behaviour")
def test_interpreter_index_of_one_element_array_is_fixed_where_it_does_not_squeeze(monkeypatch):
    """An interpreter whose tensor `__index__` is `int(data)` (Triton 3.6) gets the squeezing
    one; NumPy >= 2.3 refuses int() of a one-dim array."""
    import numpy as np
    import triton.runtime.interpreter as interp
    from codegen import triton_launch

    def _patch_lang_tensor(tensor):          # 3.6's form: no scope, int() of the array
        tensor.__index__ = lambda self: int(self.handle.data)

    class Handle:
        data = np.array([7])

    class Tensor:
        handle = Handle()
    monkeypatch.setattr(interp, "_patch_lang_tensor", _patch_lang_tensor)
    triton_launch._fix_interpreter_index()
    interp._patch_lang_tensor(Tensor)
    assert list(range(0, Tensor(), 3)) == [0, 3, 6]

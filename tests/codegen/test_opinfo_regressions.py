"""Named regression tests for what the OpInfo variants sweep found (benchmarks/opinfo_sweep.py
--variants all; /work/notes/opinfo_findings.md). Each calls the compiled function as a user
does, on the user's tensors, and compares with eager (integers exactly, aliasing, layout)."""
import torch

import pydynamo


def _compiled(fn):
    pydynamo.reset()
    return pydynamo.optimize(backend="codegen")(fn)


def test_linspace_of_one_step_is_start_not_end():
    # the decomposition filled the first half from start and the rest back from end: with one
    # step, "the rest" was everything, so it returned [end]
    def f(x):
        return x + torch.linspace(-2.0, -3.0, 1)
    x = torch.randn(1)
    torch.testing.assert_close(_compiled(f)(x), f(x))
    torch.testing.assert_close(_compiled(lambda: torch.linspace(-2.0, 5.0, 1))(),
                               torch.tensor([-2.0]))


def test_cast_with_channels_last_memory_format_is_a_new_tensor_in_that_layout():
    # x.bool(memory_format=torch.channels_last) on a bool input lowered to the input itself
    # (memory_format ignored): the result aliased the input and kept its strides
    def f(x):
        return x.bool(memory_format=torch.channels_last)
    x = torch.rand(2, 3, 2, 3) > 0.5
    got, want = _compiled(f)(x), f(x)
    assert torch.equal(got, want)
    assert got.stride() == want.stride()
    assert got.untyped_storage().data_ptr() != x.untyped_storage().data_ptr()

    def g(x):
        return x.to(memory_format=torch.contiguous_format) + 0
    y = torch.randn(4, 3).t()
    torch.testing.assert_close(_compiled(g)(y), g(y))


def test_cat_with_an_empty_piece_never_loads_from_it():
    # cat's clamped index read element 0 of a piece of length 0 along the cat dim: out of
    # bounds, a segfault when the empty piece's storage is null (OpInfo cat int64, 4 layouts)
    def f(a, b):
        return torch.cat([a, b], dim=0) * 2
    a = torch.empty(0, 5, dtype=torch.int64)
    b = torch.randint(-9, 9, (5, 5))
    assert a.data_ptr() == 0
    assert torch.equal(_compiled(f)(a, b), f(a, b))

    def g(a, b, c):
        return torch.cat([a, b, c], dim=1) + 1
    a, b, c = torch.randint(-9, 9, (3, 2)), torch.empty(3, 0, dtype=torch.int64), torch.randint(-9, 9, (3, 1))
    assert torch.equal(_compiled(g)(a, b, c), g(a, b, c))


def test_sum_to_size_of_a_0d_tensor_to_the_empty_shape_is_a_new_tensor():
    # eager's sum_to with shape () is tensor.sum() (a new tensor; bool sums to int64); the
    # decomposition found nothing to reduce and returned the input itself
    def f(x):
        return x.sum_to_size(())
    for x in (torch.randn(()), torch.tensor(True), torch.tensor(7)):
        got, want = _compiled(f)(x), f(x)
        assert got.dtype == want.dtype and torch.equal(got, want)
        assert got.data_ptr() != x.data_ptr()

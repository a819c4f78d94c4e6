"""Views of views of inputs that are views themselves: values, aliasing and strides vs eager.

Named regressions of issue 14 item 2 (storage offsets lost), then a fixed-seed subset of the
random view-chain sweep (tests/codegen/view_chains.py; the long sweep is
scripts/view_chain_sweep.py). Inputs are passed as they are, never cloned (a clone drops the
storage offset the bugs needed).
"""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from differential import assert_same_as_eager  # noqa: E402
import view_chains  # noqa: E402

DYNAMIC = [None, True, False]


def _offset_rows(n, cols=6):
    """An (n, cols) input that starts one row into its storage."""
    return lambda: (torch.randn(n + 1, cols)[1:],)


@pytest.mark.parametrize("dynamic", DYNAMIC)
def test_slice_of_offset_input_into_matmul(dynamic):
    w = torch.randn(6, 3)
    assert_same_as_eager(lambda x: x[1:] @ w, [_offset_rows(n) for n in (5, 7, 9)],
                         backend="codegen", dynamic=dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
def test_cumsum_of_slice_of_offset_input(dynamic):
    assert_same_as_eager(lambda x: torch.cumsum(x[2:], 0), [_offset_rows(n) for n in (5, 7, 9)],
                         backend="codegen", dynamic=dynamic)


@pytest.mark.parametrize("dynamic", DYNAMIC)
@pytest.mark.parametrize("offset", [0, 1])
def test_select_then_step_slice_view_output_keeps_offset(dynamic, offset):
    """`x[:, 1][::2]` is a view starting one element in: under symbolic shapes it was read
    from offset 0 (the extern's view result re-strided with an absolute offset of 0)."""
    makers = [(lambda n=n: (torch.randn(n + offset, 6)[offset:],)) for n in (5, 7, 9)]
    assert_same_as_eager(lambda x: x[:, 1][::2], makers, backend="codegen", dynamic=dynamic,
                         allow_layout=False)


def test_reshape_over_size_one_dims_stays_a_view():
    """A fold of FloorDiv to 0 was dropped by the index simplifier (`rewrite(e) or e`), so a
    view through size-1 dims came back as a copy: not aliasing the input as eager's does."""
    def f(x):
        return x.movedim(-1, 1).view(-1).unflatten(-1, (2, -1)).movedim(1, 0)
    assert_same_as_eager(f, [lambda: (torch.randn(4, 3, 14)[2:3, 1:2, 1:13:2],)],
                         backend="codegen", dynamic=False, allow_layout=False, max_fallbacks=0)


@pytest.mark.parametrize("dynamic", [None, True])
def test_unflatten_of_symbolic_size_stays_a_view(dynamic):
    """With a symbolic size, `(a * (s0 // 2) + b) // s0` did not fold to 0: upper_bound gave up
    on a symbolic coefficient and 2 * (s0 // 2) <= s0 was not provable, so the view output
    ran the graph eagerly."""
    def f(x):
        return x.movedim(-1, 1).view(-1).unflatten(-1, (2, -1)).movedim(1, 0)
    makers = [lambda n=n: (torch.randn(4, 3, 2 * n + 1)[2:3, 1:2, 1::2],) for n in (6, 8, 10)]
    assert_same_as_eager(f, makers, backend="codegen", dynamic=dynamic, allow_layout=False,
                         max_fallbacks=0)


def test_view_output_of_extern_with_symbolic_strides_is_eagers_view():
    """An extern's view result whose symbolic strides were matched on colliding hints (a size
    and a stride both 8) was copied to the guessed layout: the output no longer aliased the
    input. Now the strides are confirmed on other sizes (no eager run here), and a view result
    of another layout than planned runs the graph eagerly instead of being copied."""
    def f(x):
        return x.select(0, 0).chunk(2, 2)[-1]
    makers = [lambda e=e: (eval(e),) for e in (
        "torch.randn(4, 3, 13, 4)[0:4, 1:3:2, 0:12:2, 1:3:2]",
        "torch.randn(9, 3, 20, 4)[0:8, 1:3:2, 0:20:2, 1:3:2]",
        "torch.randn(12, 3, 29, 3)[0:12, 1:3:2, 0:28:2, 1:3:2]")]
    assert_same_as_eager(f, makers, backend="codegen", dynamic=None, allow_layout=False,
                         max_fallbacks=0)


def test_storage_offset_read_is_not_baked_into_the_graph():
    """`y.storage_offset()` was answered from the trace's meta example, which starts at 0, so
    as_strided read another window than eager; the offset is now read at run time."""
    def f(x):
        y = x.narrow(0, 1, 2)
        return y.as_strided((1,), y.stride(), y.storage_offset())
    makers = [lambda: (torch.randn(10)[1:9:2],), lambda: (torch.randn(12)[3:11:2],)]
    for backend in ("eager", "codegen"):
        assert_same_as_eager(f, makers, backend=backend)


@pytest.mark.parametrize("dynamic", [None, False])
def test_reshape_that_eager_copies_is_not_a_view_of_the_input(dynamic):
    """flatten(2, 3) of dims that are not contiguous with each other copies under eager; a
    diagonal after it folded to an affine map over the input, so the graph returned a view of
    the input (other strides, other storage) and as_strided on it read another window
    (sweep seed 784). The reshape lowering now copies where torch's rule says eager does."""
    def f(x):
        y = x.flatten(2, 3).unflatten(0, (2, -1)).diagonal(0, 1, 3)
        y = y.as_strided((y.shape[0], y.shape[1], y.shape[2] - 1), y.stride(), y.storage_offset())
        return y.amax(0)
    makers = [lambda e=e: (eval(e),) for e in (
        "torch.randn(7, 9, 13, 6)[2:6, 2:8, 0:12:2, 2:6]",
        "torch.randn(9, 13, 12, 7)[2:8, 2:12, 0:12:2, 2:6]")]
    assert_same_as_eager(f, makers, backend="codegen", dynamic=dynamic)


def test_flatten_copy_then_views_keep_eagers_strides():
    def f(x):
        return x.flatten(2, 3).unflatten(0, (2, -1)).diagonal(0, 1, 3)
    assert_same_as_eager(f, [lambda: (torch.randn(7, 9, 13, 6)[2:6, 2:8, 0:12:2, 2:6],)],
                         backend="codegen", dynamic=False, allow_layout=False, max_fallbacks=0)


@pytest.mark.parametrize("dynamic", [None, True])
def test_flatten_viewable_on_one_call_and_copied_on_another(dynamic):
    """flatten(2, 3) of an input whose rows are padded (stride 9 for 8 columns) copies, of one
    whose rows are not (stride 10 for 10) is a view: with symbolic sizes the graph copied
    always, and the output no longer aliased the input where eager's did (sweep seed 1215).
    The decision is now torch's rule on the example sizes, the relations it used checked at
    each call."""
    def f(x):
        return x.flatten(2, 3).split(2, 1)[0]
    makers = [lambda e=e: (eval(e),) for e in (
        "torch.randn(15, 7, 6, 7)[2:14:2, 1:7, 0:6, 0:6]",
        "torch.randn(23, 12, 6, 9)[2:22:2, 1:11, 0:6, 0:8]",
        "torch.randn(22, 15, 6, 10)[2:22:2, 1:15, 0:6, 0:10]")]
    assert_same_as_eager(f, makers, backend="codegen", dynamic=dynamic, allow_layout=False)


def test_view_after_a_copying_contiguous():
    """x.t().contiguous().view(-1): contiguous lowers to its input, so the view saw the
    transposed layout and, asked as an extern, raised where eager views its copy."""
    for dynamic in (None, True):
        assert_same_as_eager(lambda x: x.t().contiguous().view(-1),
                             [lambda: (torch.randn(4, 6),), lambda: (torch.randn(5, 7),)],
                             backend="codegen", dynamic=dynamic, allow_layout=False)


@pytest.mark.parametrize("dynamic", [None, True])
def test_view_of_an_extern_view_of_the_input_stays_a_view(dynamic):
    """A select after an extern (chunk of a symbolic size) that returned a view of the input
    came back as a copy: the output no longer aliased the input (sweep seed 807); a select
    at `s0 // 2` also made the view's offset unprintable."""
    def f(x):
        return x.unflatten(2, (2, -1)).chunk(2, 3)[0].select(2, 1).unsqueeze(3)
    makers = [lambda e=e: (eval(e),) for e in (
        "torch.randn(8, 7, 6)[0:8:2, 2:6, 2:6]", "torch.randn(17, 11, 10)[0:16:2, 2:10, 2:10]",
        "torch.randn(16, 11, 11)[0:16:2, 2:10, 2:10]")]
    assert_same_as_eager(f, makers, backend="codegen", dynamic=dynamic, allow_layout=False)


# the first 40 seeds; PYDYNAMO_VIEW_CHAIN_SEEDS=n takes the first n (.ci/run: fewer on 3.12 and 3.13)
SUBSET = range(0, int(os.environ.get("PYDYNAMO_VIEW_CHAIN_SEEDS", "40")))


@pytest.mark.parametrize("seed", SUBSET)
def test_random_view_chain(seed):
    chain = view_chains.generate(seed)
    for backend, dynamic in (("codegen", None), ("codegen", True), ("codegen", False),
                             ("eager", None)):
        res = view_chains.check(chain, backend, dynamic)
        assert res.ok, f"{backend} dynamic={dynamic}\n{chain.repro(backend, dynamic)}\n{res.report()}"

"""Outputs keep eager's memory layout (issue 14 item 6): a pointwise op on a transposed,
permuted or channels_last input returns that layout under eager (TensorIterator follows its
inputs' dim order), and the compiled function must return the same strides, first call on.
A value already realized for other reasons (a reduction, a value with several users) keeps
the contiguous layout: see GraphLowering._output_in_eager_order."""
import os
import sys

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import assert_same_as_eager  # noqa: E402

CASES = {
    "transposed_sin": (lambda x: torch.sin(x) * 2, lambda: (torch.randn(5, 7).t(),)),
    "channels_last_relu": (lambda x: torch.relu(x) + 1,
                           lambda: (torch.randn(2, 3, 4, 5).contiguous(memory_format=torch.channels_last),)),
    "transposed_plus_contiguous": (lambda x, y: x + y, lambda: (torch.randn(5, 7).t(), torch.randn(7, 5))),
    "permuted_3d_exp": (lambda x: x.exp(), lambda: (torch.randn(3, 4, 5).permute(2, 0, 1),)),
    "sliced_transposed": (lambda x: x * x, lambda: (torch.randn(9, 6)[1::2].t(),)),
}


@pytest.mark.parametrize("dynamic", [None, True, False])
@pytest.mark.parametrize("case", sorted(CASES))
def test_pointwise_output_keeps_eager_strides(case, dynamic):
    fn, make = CASES[case]
    assert_same_as_eager(fn, [make, make, make], backend="codegen", dynamic=dynamic,
                         allow_layout=False, max_fallbacks=0)


COPY_OR_SELF = {
    # eager copies: the input is not contiguous
    "transposed_contiguous": (lambda x: x.t().contiguous(), lambda: (torch.randn(4, 6),)),
    "offset_slice_contiguous": (lambda x: x[:, 1:].contiguous(), lambda: (torch.randn(4, 6)[1:],)),
    "channels_last_of_contiguous": (lambda x: x.contiguous(memory_format=torch.channels_last),
                                    lambda: (torch.randn(2, 3, 4, 5),)),
    # eager returns the input itself
    "contiguous_of_contiguous": (lambda x: x.contiguous(), lambda: (torch.randn(4, 6),)),
    # a cast keeps the input's dim order (preserve_format)
    "transposed_to_double": (lambda x: x.t().to(torch.float64), lambda: (torch.randn(4, 6),)),
}


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("case", sorted(COPY_OR_SELF))
def test_contiguous_and_casts_copy_exactly_when_eager_does(case, dynamic):
    """`x.t().contiguous()` as an output was returned as the transposed view of x (aliasing
    the input, not contiguous): contiguous lowers to its input, and the output took it as a
    view op's result."""
    fn, make = COPY_OR_SELF[case]
    assert_same_as_eager(fn, [make, make], backend="codegen", dynamic=dynamic,
                         allow_layout=False, allow_identity=False)


def _identities(outs):
    """Which outputs are the same object, and which is another's `_base`."""
    return ([[a is b for b in outs] for a in outs],
            [[a._base is b for b in outs] for a in outs])


@pytest.mark.parametrize("case", ["t_of_1x1_product", "view_as_itself", "contiguous_is_self",
                                  "own_tensor_and_views"])
def test_a_view_output_is_its_own_object_as_in_eager(case):
    """Found by level C's zoo sweep (CLIP-like heads at batch 1: `logits_per_text =
    logits_per_image.t()` of a 1x1 product): codegen handed back the same tensor object for a
    base and its view of equal geometry (`y, y.t()`), where eager returns two (the view's
    `_base` is the first). A view op's output is now always a view object (graph_outputs
    `_new_view_object`); `contiguous()` of a contiguous value stays the value itself."""
    fn, shape = {
        "t_of_1x1_product": (lambda x: (lambda y: (y, y.t()))((x @ x.T) * 2), (1, 4)),
        "view_as_itself": (lambda x: (lambda y: (y, y.view(y.shape), y.t()))(x * 2), (1, 1)),
        "contiguous_is_self": (lambda x: (lambda y: (y, y.contiguous()))(x * 2), (3, 4)),
        # a GEMM's rows folded back to (2, 3, 5): a tensor of its own over the product's buffer
        # (ir.OwnTensorRef), its views views of it
        "own_tensor_and_views": (lambda x: (lambda y: (y, y[0], y.view(y.shape), y))(
            x @ torch.ones(4, 5)), (2, 3, 4)),
    }[case]
    import pydynamo
    pydynamo.reset()
    try:
        torch.manual_seed(0)
        x = torch.randn(*shape)
        got, want = pydynamo.optimize(fn, backend="codegen")(x), fn(x)
        assert _identities(got) == _identities(want)
        for a, b in zip(got, want):
            torch.testing.assert_close(a, b)
            assert a.stride() == b.stride()
    finally:
        pydynamo.reset()

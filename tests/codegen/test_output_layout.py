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

"""An extern's argument that is a permutation of a value a kernel computes (a matmul's transposed
operand: the weight gradient's `h.t() @ g`) is computed in its own order and handed over as the
permuted view; before, the kernel wrote it transposed, across the grain (on GPT-2's backward
on an H100, a 730 us kernel of 2-column programs)."""
import os

import pytest
import torch

import pydynamo
from codegen import codecache, pipeline

os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.mark.parametrize("kernels", ["cpp", "triton"])
def test_transposed_operand_is_a_view_of_its_natural_layout(kernels):
    def f(a, g):
        h = torch.tanh(a) * 2
        return torch.mm(h.t(), g), torch.mm(g.t(), h)
    a, g = torch.randn(64, 48), torch.randn(64, 32)
    sources = []
    write = codecache.write_wrapper
    pipeline.codecache.write_wrapper = lambda src: sources.append(src) or write(src)
    try:
        pydynamo.reset()
        out = pydynamo.optimize(f, options={"backend_kernels": kernels})(a, g)
    finally:
        pipeline.codecache.write_wrapper = write
        pydynamo.reset()
    text = "\n".join(sources)
    assert "(64, 48), (48, 1)" in text            # h computed once, row-major
    assert "(48, 64), (1, 48)" in text            # h.t(): a view of it
    assert "(48, 64), (64, 1)" not in text        # no transposed copy
    for got, want in zip(out, f(a, g)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)

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


def test_a_cpu_extern_result_on_a_device_graph_is_copied_without_waiting():
    """An extern's CPU result where the graph was compiled for another device (CUDA's fused
    attention returns its 0-d random-state tensors on the CPU without dropout) is copied with
    non_blocking, so the host does not wait for the queued device work on every call (24 such
    waits per fp32 GPT-2 training step on an H100); a layout mismatch on one device is a plain
    copy, counted apart. The meta device stands in for the GPU here."""
    from codegen.runtime import counters, ensure_layout
    seed = torch.tensor(7, dtype=torch.int64)
    d0, l0 = counters["extern_device_copies"], counters["extern_layout_copies"]
    out = ensure_layout(seed, (), (), torch.int64, view=True, device=torch.device("meta"))
    assert out.device.type == "meta" and out.shape == () and out.dtype is torch.int64
    assert counters["extern_device_copies"] == d0 + 1 and counters["extern_layout_copies"] == l0
    t = torch.randn(3, 4).t()
    fixed = ensure_layout(t, (4, 3), (3, 1), torch.float32)
    assert fixed.stride() == (3, 1) and torch.equal(fixed, t)
    assert counters["extern_layout_copies"] == l0 + 1 and counters["extern_device_copies"] == d0 + 1
    same = torch.randn(4, 3)
    assert ensure_layout(same, (4, 3), (3, 1), torch.float32) is same

"""Float graph inputs as kernel arguments on the Triton printer (CPU: TRITON_INTERPRET=1, the
conftest; GPU: real kernels, fp64 scalar parameters): the cases of
tests/codegen/test_float_args.py with `kernels` set to "triton"."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "codegen"))
from test_float_args import *  # noqa: E402,F401,F403  (the cases, collected here too)


@pytest.fixture
def kernels():
    return "triton"


def test_kernel_parameter_is_an_fp64_scalar():
    import torch
    import torch.fx

    import codegen
    gm = torch.fx.symbolic_trace(lambda x, f: x * f)
    c = codegen.compile_fx(gm, [torch.randn(8), 0.5], strict=True, backend_kernels="triton")
    assert ": tl.float64" in c.kernel_source
    assert "tl.full([], in_ptr" in c.kernel_source or "tl.full([], f0" in c.kernel_source


def test_cuda_graph_capture_is_skipped_for_float_inputs():
    # a capture would freeze the float's value into the recorded launches; one kernel serves
    # every value instead (counted as a plain launch)
    import torch
    import torch.fx

    import codegen
    from codegen.cudagraphs import maybe_wrap
    from codegen.graph import GraphLowering
    from codegen.options import Options
    from codegen.pipeline import CPP
    gm = torch.fx.symbolic_trace(lambda x, f: x * f)
    g = GraphLowering(gm, [torch.randn(4), 0.5], backend=CPP).run()
    assert [a.source for a in g.scalars.args] == ["arg1"]
    call = object()
    before = codegen.counters["cudagraph_plain_launch"]
    assert maybe_wrap(call, gm, g, Options(cudagraphs=True), None) is call
    assert codegen.counters["cudagraph_plain_launch"] == before + 1

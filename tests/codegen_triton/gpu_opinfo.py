"""OpInfo samples on CUDA through the Triton path, in float32 / bfloat16 / float16.

Reuses tests/codegen/opinfo_harness.py (one FX graph per op, every sample a node) with two
changes: sample tensors are moved to the GPU before compiling, so compile_fx takes the Triton
path, and the comparison tolerance follows the dtype (the kernels compute half types in fp32
and round once; eager rounds after every op, so they may differ by a few half-precision ulps).
"""
from __future__ import annotations

import contextlib

import torch

from tests.codegen import opinfo_harness as H

TOL = {torch.float32: (1e-4, 1e-4), torch.bfloat16: (3e-2, 3e-2), torch.float16: (5e-3, 5e-3)}


def _to_cuda(x):
    if isinstance(x, torch.Tensor):
        return x.detach().to("cuda").clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_to_cuda(a) for a in x)
    if isinstance(x, dict):
        return {k: _to_cuda(v) for k, v in x.items()}
    return x


@contextlib.contextmanager
def on_cuda(dtype):
    clone, equal, assert_close = H._clone, H._equal, torch.testing.assert_close
    rtol, atol = TOL.get(dtype, (1e-4, 1e-4))

    def close(a, b, **kw):
        kw.update(rtol=rtol, atol=atol)
        return assert_close(a, b, **kw)
    H._clone = _to_cuda
    H.torch.testing.assert_close = close
    try:
        yield
    finally:
        H._clone = clone
        H._equal = equal
        H.torch.testing.assert_close = assert_close


def run(name, dtype, max_samples=8):
    op = next(o for o in H.op_db() if o.name == name)
    with on_cuda(dtype):
        return H.run_op(op, dtype, max_samples=max_samples)

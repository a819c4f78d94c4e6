"""Fast CI subset of the OpInfo sweep (benchmarks/opinfo_sweep.py runs all of op_db).

test_opinfo_matches_eager: every sample of each listed op as one FX graph through
codegen.compile_fx, compared with eager: no wrong result, and each op lowered natively for at
least one sample (not just passed through extern).

test_opinfo_variants_match_eager: the ops as a user calls them, through
pydynamo.optimize(backend="codegen") on the user's own tensors (first call included): function,
in-place and out= variants (right-shaped and resized out), on contiguous, noncontiguous,
transposed and storage-offset inputs; results, mutated inputs and aliasing compared with eager
(integers and bools exactly), no pydynamo exception where eager works.
"""
import pytest
import torch

from tests.codegen import opinfo_harness as H

# what tests/codegen_triton/test_opinfo_interp.py re-collects through the Triton printer
__all__ = ["H", "FLOAT_OPS", "INT_OPS", "BOOL_OPS", "CASES", "test_opinfo_matches_eager"]

FLOAT_OPS = ["add", "sub", "mul", "div", "exp", "log1p", "sigmoid", "tanh", "erf", "rsqrt",
             "abs", "clamp", "where", "maximum", "pow", "sum", "mean", "amax", "argmax", "var",
             "prod", "softmax", "log_softmax", "logsumexp", "nn.functional.gelu",
             "nn.functional.layer_norm", "cat", "stack", "permute", "transpose", "flip",
             "index_select", "tril", "nn.functional.silu", "masked_fill", "nn.functional.mse_loss",
             "diag", "nn.functional.pad", "nn.functional.cosine_similarity"]
INT_OPS = ["add", "mul", "sum", "bitwise_and", "eq", "amax", "floor_divide", "remainder"]
BOOL_OPS = ["logical_and", "logical_not", "any", "all"]

_DB = {}


def _op(name):
    if not _DB:
        for o in H.op_db():
            _DB.setdefault(o.name, o)
    return _DB[name]


CASES = [(n, torch.float32) for n in FLOAT_OPS] + [(n, torch.int64) for n in INT_OPS] + \
    [(n, torch.bool) for n in BOOL_OPS]


@pytest.mark.parametrize("name,dtype", CASES, ids=[f"{n}-{str(d)[6:]}" for n, d in CASES])
def test_opinfo_matches_eager(name, dtype):
    torch.manual_seed(0)
    r = H.run_op(_op(name), dtype, max_samples=12)
    assert r.samples > 0, r.error
    assert not r.wrong, r.wrong[:3]
    assert r.partly_native, r.extern_reasons


# ops with in-place and out= variants across pointwise, reductions, scans, indexing and views
VARIANT_CASES = [(n, torch.float32) for n in
                 ["add", "mul", "div", "clamp", "sigmoid", "abs", "pow", "where", "sum", "amax",
                  "cumsum", "index_select", "gather", "masked_fill", "transpose", "cat", "tril",
                  "nn.functional.relu"]] + \
    [(n, torch.int64) for n in ["add", "mul", "floor_divide", "remainder", "bitwise_and", "sum",
                                "cumsum"]] + \
    [(n, torch.bool) for n in ["logical_and", "logical_not"]]


@pytest.mark.parametrize("name,dtype", VARIANT_CASES,
                         ids=[f"{n}-{str(d)[6:]}" for n, d in VARIANT_CASES])
def test_opinfo_variants_match_eager(name, dtype):
    torch.manual_seed(0)
    r = H.run_variants(_op(name), dtype, max_samples=4)
    assert r.cases > 0, r.error
    assert not r.error, r.error
    assert not r.wrong, r.wrong[:3]
    assert not r.exceptions, r.exceptions[:3]
    assert not r.alias, r.alias[:3]

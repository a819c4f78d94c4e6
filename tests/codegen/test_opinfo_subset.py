"""Fast CI subset of the OpInfo sweep (benchmarks/opinfo_sweep.py runs all of op_db).

Every sample of each listed op, compiled by codegen and compared with eager: no wrong result,
and each op must be lowered natively for at least one sample (not just pass through extern).
"""
import pytest
import torch

from tests.codegen import opinfo_harness as H

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

"""Fast CI subset of the gradient parity sweep (scripts/grad_sweep.py runs every OpInfo entry that
supports autograd in float32 on CPU).

test_grad_matches_eager: the first samples of 48 representative ops (pointwise, reductions,
scans, matmuls, norms, losses, convolution, pooling, indexing, views) compiled by
pydynamo.optimize(backend="aot_eager"), and of 31 of them with "codegen", called twice on fresh leaves, each call followed
by torch.autograd.grad with a fixed random cotangent: outputs, which outputs require grad and
every input grad equal eager's under torch.testing's default float32 tolerances
(tests/codegen/opinfo_harness.py run_grad). No pydynamo exception where eager differentiates.

test_backward_compiled: the same ops took the training path (pydynamo.aot.counters: a joint
graph recorded and, unless the outputs are only views of the inputs, its backward compiled; no
graph left to eager autograd) unless FALLS_BACK names the op and says why.

A wrong gradient found here is an xfail(strict) naming its entry in /work/notes/aot_failures.md
(WRONG below): fixed, it fails as XPASS until the entry goes.
"""
import pytest

from tests.codegen import opinfo_harness as H

pytest.importorskip("pydynamo.aot")

OPS = ["add", "mul", "div.no_rounding_mode", "pow", "exp", "log", "tanh", "sigmoid", "abs",
       "clamp", "where", "sum", "mean", "amax", "prod", "var", "cumsum", "max.reduction_with_dim",
       "mm", "bmm", "addmm", "matmul", "softmax", "log_softmax", "logsumexp",
       "nn.functional.gelu", "nn.functional.silu", "nn.functional.relu",
       "nn.functional.layer_norm", "nn.functional.batch_norm", "nn.functional.conv2d",
       "nn.functional.max_pool2d", "nn.functional.cross_entropy", "nn.functional.mse_loss",
       "nn.functional.embedding", "nn.functional.linear", "nn.functional.group_norm", "std",
       "index_select", "gather", "cat", "permute", "transpose", "expand", "masked_fill", "tril",
       "nn.functional.pad.constant", "baddbmm", "fft.ifft"]
# not here: OpInfo's dropout and scaled_dot_product_attention call torch.manual_seed inside the
# op (wrapper_set_seed), which pydynamo cannot put in a graph: their frames run eagerly
# ops whose outputs are views of their inputs: the runtime replays the views on the inputs, so
# gradients flow through eager's view functions and there is no backward graph to compile
VIEWS = {"permute", "transpose", "expand"}
# codegen builds a forward and a backward library per op: a smaller set keeps CI fast
CODEGEN_OPS = ["add", "mul", "div.no_rounding_mode", "pow", "exp", "tanh", "sigmoid", "where",
               "sum", "mean", "amax", "var", "cumsum", "mm", "addmm", "softmax", "log_softmax",
               "nn.functional.gelu", "nn.functional.relu", "nn.functional.layer_norm",
               "nn.functional.batch_norm", "nn.functional.conv2d", "nn.functional.cross_entropy",
               "nn.functional.embedding", "index_select", "gather", "cat", "masked_fill",
               "transpose", "nn.functional.pad.constant", "fft.ifft"]
BACKENDS = {"aot_eager": OPS, "codegen": CODEGEN_OPS}
SAMPLES = 3

# (label, backend) -> why: wrong gradients, each with its entry in /work/notes/aot_failures.md
WRONG = {
    ("nn.functional.layer_norm", "codegen"):
        "sample 2 normalizes over one element (exact input grad 0): grad differs by 5.1e-5 > "
        "atol 1e-5, float32 rounding (compiled 7.1e-5 from float64, eager 1.2e-4)",
}
# label -> why its graphs run their backward with eager autograd
FALLS_BACK = {
    # fuzz of the grad sweep: the training path returned ifft's conjugate (a lazy conj bit the
    # stand-ins did not carry); the recorder now refuses conj/neg-bit tensors
    "fft.ifft": "a lazily conjugated tensor (conj bit): the recorder refuses it",
}

_DB = {}


def _op(label):
    if not _DB:
        for o in H.op_db():
            _DB[o.name + (f".{o.variant_test_name}" if o.variant_test_name else "")] = o
    return _DB[label]


_RESULTS = {}


def _run(label, backend):
    if (label, backend) not in _RESULTS:
        import torch
        torch.manual_seed(0)
        _RESULTS[label, backend] = H.run_grad(_op(label), backend, max_samples=SAMPLES)
    return _RESULTS[label, backend]


def _params(mark_wrong):
    out = []
    for backend, ops in BACKENDS.items():
        for label in ops:
            marks = [pytest.mark.xfail(strict=True, reason=WRONG[label, backend])] \
                if mark_wrong and (label, backend) in WRONG else []
            out.append(pytest.param(label, backend, marks=marks, id=f"{label}-{backend}"))
    return out


@pytest.mark.parametrize("label,backend", _params(True))
def test_grad_matches_eager(label, backend):
    r = _run(label, backend)
    assert r.samples > 0, r.error
    assert not r.wrong, r.wrong[:2]
    assert not r.exceptions, r.exceptions[:2]
    assert r.ok == r.samples


@pytest.mark.parametrize("label,backend", _params(False))
def test_backward_compiled(label, backend):
    r = _run(label, backend)
    if label in FALLS_BACK:
        assert r.counters.get("eager_fallback", 0) > 0, r.counters
        return
    assert r.counters.get("joint_graphs", 0) > 0, (r.counters, r.fallback_reasons)
    assert r.counters.get("eager_fallback", 0) == 0, r.fallback_reasons
    if label not in VIEWS:
        assert r.counters.get("backward_compiled", 0) > 0, r.counters

"""Rows longer than one block (a vocabulary): softmax's and logsumexp's max and sum of exponents
in one pass over the row (codegen/triton.py `_online_softmax`), special values as eager gives
them; and the LM loss's backward reads the row statistic its forward saved
(pydynamo/aot/partition.py `_split_log_softmax`) instead of recomputing it."""
import math

import pytest
import torch
import torch.nn.functional as F

import codegen
import pydynamo
from pydynamo import aot

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
COLS = 9000          # above PERSISTENT_MAX (8192): a looped row


@pytest.fixture(autouse=True)
def _fresh():
    pydynamo.reset()
    aot.counters.clear()
    yield
    pydynamo.reset()


@pytest.fixture
def sources(monkeypatch):
    """The Triton source of every graph compiled in the test, in order."""
    seen = []
    real = codegen.compile_fx

    def recording(*args, **kwargs):
        call = real(*args, **kwargs)
        path = getattr(call, "library_path", None)
        if path:
            with open(path) as f:
                seen.append(f.read())
        return call
    monkeypatch.setattr(codegen, "compile_fx", recording)
    return seen


def _compile(fn):
    return pydynamo.optimize(fn, options={"backend_kernels": "triton"})


def _rows():
    """Random rows, then rows of special values: all -inf; -inf with one finite; one +inf;
    two +inf; a NaN; large negative values with whole blocks of -inf (a lane that sees only
    -inf while the row's max is finite and far below 0)."""
    torch.manual_seed(0)
    x = torch.randn(12, COLS, device=DEVICE) * 4
    x[4] = -math.inf
    x[5] = -math.inf
    x[5, 7000] = 2.5
    x[6, 123] = math.inf
    x[7, 5] = math.inf
    x[7, 8999] = math.inf
    x[8, 4000] = math.nan
    x[9] = -1000.0 + torch.randn(COLS, device=DEVICE)
    x[9, :3000] = -math.inf
    x[10] = 80.0 + torch.randn(COLS, device=DEVICE)        # exp(x) overflows without the shift
    x[11, 8191:] = -math.inf
    return x


@pytest.mark.parametrize("name,fn", [
    ("softmax", lambda x: torch.softmax(x, -1)),
    ("log_softmax", lambda x: F.log_softmax(x, -1)),
    ("logsumexp", lambda x: torch.logsumexp(x, -1)),
    ("logsumexp_keepdim", lambda x: torch.logsumexp(x, 1, keepdim=True) * 2),
])
def test_one_pass_rows_match_eager_with_special_values(name, fn, sources):
    x = _rows()
    c = _compile(fn)
    got, want = c(x), fn(x)
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5, equal_nan=True)
    src = sources[-1]
    # the max and the sum share one loop: the running sum is rescaled in it
    assert "* tl.exp(" in src and src.count("for roff") == (2 if name in ("softmax", "log_softmax") else 1), src


def test_bfloat16_rows_use_the_one_pass_form(sources):
    torch.manual_seed(3)
    x = (torch.randn(3, COLS, device=DEVICE) * 3).bfloat16()
    got = _compile(lambda x: torch.softmax(x, -1))(x)
    want = torch.softmax(x, -1)
    assert got.dtype == torch.bfloat16
    torch.testing.assert_close(got.float(), want.float(), rtol=1e-2, atol=1e-4)
    assert "* tl.exp(" in sources[-1]


def test_a_sum_of_other_values_keeps_two_passes(sources):
    """sum(exp(y - max(x))) with y not x: the online form needs the max's own values."""
    torch.manual_seed(1)
    x, y = torch.randn(4, COLS, device=DEVICE), torch.randn(4, COLS, device=DEVICE)

    def f(x, y):
        return torch.exp(y - x.amax(1, keepdim=True)).sum(1)
    got = _compile(f)(x, y)
    torch.testing.assert_close(got, f(x, y), rtol=1e-5, atol=1e-5)
    assert "* tl.exp(" not in sources[-1] and sources[-1].count("for roff") == 2


def test_lm_loss_backward_reads_the_saved_row_statistic(sources):
    """cross_entropy over a long vocabulary: the forward saves logsumexp's row values, the
    backward recomputes only the subtraction (no max or sum over the row in the backward's
    kernels), and the gradients equal eager's."""
    torch.manual_seed(2)
    logits = torch.randn(6, COLS, device=DEVICE, requires_grad=True)
    target = torch.randint(0, COLS, (6,), device=DEVICE)
    target[1] = -100

    def f(logits, target):
        return F.cross_entropy(logits * 1.5, target)
    want = torch.autograd.grad(f(logits, target), logits)[0]
    x = logits.detach().clone().requires_grad_()
    loss = _compile(f)(x, target)
    torch.testing.assert_close(loss, f(logits, target), rtol=1e-5, atol=1e-5)
    loss.backward()
    torch.testing.assert_close(x.grad, want, rtol=1e-5, atol=1e-6)
    assert aot.counters["backward_compiled"] == 1
    assert len(sources) == 2
    bw = sources[1]
    assert 'float("-inf")' not in bw and "tl.log(" not in bw, bw

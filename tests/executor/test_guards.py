"""Guards are data compiled into one check: ordering, miss explanations, failing safely,
dispatch-key changes recompiling exactly when torch.compile's do."""
import json
import os
import subprocess
import sys
import warnings

import pytest
import torch

import pydynamo
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards, failures, sort_guards
from pydynamo.sources import AttrSource, GlobalSource, LocalSource

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import dispatch_cases  # noqa: E402


def test_order_cheapest_first_and_dedup():
    gs = [Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorSpec.of(torch.randn(2))),
          Guard(LocalSource("n"), GuardKind.EQUALS_MATCH, 3),
          Guard(LocalSource("m"), GuardKind.ID_MATCH, (id(len), "len")),
          Guard(LocalSource("n"), GuardKind.EQUALS_MATCH, 3)]
    kinds = [g.kind for g in sort_guards(gs)]
    assert kinds == [GuardKind.ID_MATCH, GuardKind.EQUALS_MATCH, GuardKind.TENSOR_MATCH]


def test_check_and_explain_miss():
    x = torch.randn(2, 3)

    class O:
        pass
    o = O()
    o.k = 4
    g = {"W": 1.5}
    guards = [Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorSpec.of(x), "f.py:3"),
              Guard(AttrSource(LocalSource("o"), "k"), GuardKind.EQUALS_MATCH, 4, "f.py:4"),
              Guard(GlobalSource("W"), GuardKind.EQUALS_MATCH, 1.5, "f.py:5")]
    check = compile_guards(guards, g)
    assert check({"x": torch.randn(2, 3), "o": o})
    assert not check({"x": torch.randn(2, 3, dtype=torch.float64), "o": o})
    assert not check({"x": torch.randn(3, 2), "o": o})
    assert not check({"x": torch.randn(3, 2).t(), "o": o})  # same shape, other strides
    assert not check({"x": x, "o": O()})                     # attribute gone: a miss, not an error
    g["W"] = 2.5
    assert not check({"x": x, "o": o})
    why = failures(check.guards, {"x": x.double(), "o": o}, g)
    assert any("L['x']" in w and "float64" in w and "f.py:3" in w for w in why)
    assert any("G['W']" in w for w in why)


def test_recompile_explained_in_log(cnt, caplog):
    import logging
    from pydynamo import config
    old = config.logs
    config.logs = "recompiles"
    try:
        f = pydynamo.optimize(lambda x: x + 1, backend=cnt)
        f(torch.randn(2))
        with caplog.at_level(logging.INFO, logger="pydynamo.recompiles"):
            f(torch.randn(2, dtype=torch.float64))
    finally:
        config.logs = old
    assert cnt.count == 2
    assert any("float64" in r.getMessage() for r in caplog.records)


def test_explain_reports_break():
    def f(x):
        print("x")
        return x + 1
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pydynamo.explain(f)(torch.randn(2))
    # torch._dynamo.explain counts graph_count - 1: a print before any tensor work splits nothing
    assert out.graph_count == 1 and out.graph_break_count == 0
    assert len(out.break_reasons) == 1 and out.break_reasons[0].reason_code == "print"
    assert "test_guards.py" in out.break_reasons[0].location()


def test_autocast_state_is_guarded_and_never_wrong(cnt):
    import warnings

    def f(x, w):
        return x @ w
    opt = pydynamo.optimize(f, backend=cnt)
    x, w = torch.randn(4, 4), torch.randn(4, 4)
    torch.testing.assert_close(opt(x, w), f(x, w))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.autocast("cpu", dtype=torch.bfloat16):
            r, e = opt(x, w), f(x, w)
    assert r.dtype == e.dtype == torch.bfloat16
    torch.testing.assert_close(r, e)
    # leaving autocast: the code is still compiled and served (autocast did not mark it skip)
    before = cnt.count
    torch.testing.assert_close(opt(x, w), f(x, w))
    assert cnt.count == before


@pytest.fixture(scope="module")
def torch_dispatch_reference():
    """torch.compile's graph counts on the dispatch-key cases (its own process: both engines
    install a frame hook)."""
    p = subprocess.run([sys.executable, os.path.join(HERE, "dispatch_cases.py")], capture_output=True,
                       text=True, timeout=600)
    assert p.returncode == 0, p.stderr[-2000:]
    return json.loads(p.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("name", list(dispatch_cases.CASES))
def test_dispatch_key_changes_recompile_like_torch_compile(name, torch_dispatch_reference):
    """Inference tensors, negative and conjugate views keep class, dtype, device, shape and
    strides: TENSOR_MATCH must still tell them apart, exactly when torch.compile does."""
    ours = dispatch_cases.run(lambda f, b: pydynamo.optimize(f, backend=b), pydynamo.reset)[name]
    pydynamo.reset()
    assert ours[2], "outputs differ from eager"
    assert list(ours[:2]) == torch_dispatch_reference[name][:2]


def test_dispatch_key_bits_in_tensor_match():
    x = torch.randn(3)
    with torch.inference_mode():
        xi = torch.randn(3)
    neg = torch.randn(3, dtype=torch.complex64).conj().imag
    check = compile_guards([Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorSpec.of(neg * 0 + x))], {})
    assert check({"x": torch.randn(3)})
    assert not check({"x": xi})                       # no Autograd/ADInplaceOrView keys
    assert not check({"x": torch._neg_view(x)})       # Negative key on a real tensor
    check_i = compile_guards([Guard(LocalSource("x"), GuardKind.TENSOR_MATCH, TensorSpec.of(xi))], {})
    assert check_i({"x": xi}) and not check_i({"x": x})
    why = failures(check_i.guards, {"x": x}, {})
    assert len(why) == 1 and "is_inference=True" in why[0] and "now dtype" in why[0]


def test_torch_func_transform_runs_eagerly_and_never_hits_a_plain_entry(cnt):
    """Under vmap the inputs are functorch wrappers (no storage): the frame runs eagerly (as
    torch.compile's does) and an entry compiled outside the transform is not used inside it."""
    def f(x):
        return x * 2 + x.sum()
    x = torch.randn(3, 4)
    opt = pydynamo.optimize(f)  # the codegen backend: its kernels read storage
    torch.testing.assert_close(opt(x[0]), f(x[0]))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(torch.func.vmap(opt)(x), torch.func.vmap(f)(x))
    pydynamo.reset()  # warnings are once per code until a reset
    optc = pydynamo.optimize(f, backend=cnt)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        torch.testing.assert_close(torch.func.vmap(optc)(x), torch.func.vmap(f)(x))
    assert cnt.count == 0 and any("torch.func transform" in str(m.message) for m in w)
    torch.testing.assert_close(optc(x[1]), f(x[1]))
    assert cnt.count == 1

"""Guards are data compiled into one check: ordering, miss explanations, failing safely."""
import torch

import pydynamo
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards, failures, sort_guards
from pydynamo.sources import AttrSource, GlobalSource, LocalSource


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

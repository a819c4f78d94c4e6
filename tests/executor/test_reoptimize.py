"""Re-optimizing a function with other settings (issue 14 item 4).

Every cache entry is keyed by the optimize() settings it was compiled under (backend, mode,
options, fullgraph, dynamic): its guard checks the thread's current compile callback, and equal
settings share one callback (and so one set of entries). Regressions: `optimize(f, backend=B2)`
after `optimize(f, backend=B1)` never called B2; `fullgraph=True` after a non-fullgraph compile
of the same code did not raise.
"""
import pytest
import torch

import pydynamo
from pydynamo import config, convert_frame
from pydynamo.exc import FullGraphError


class Tagged:
    """A backend whose compiled functions record that they ran (and under which backend)."""

    def __init__(self, tag, log):
        self.tag, self.log, self.compiles = tag, log, 0

    def __call__(self, gm, example_inputs, **options):
        self.compiles += 1
        self.options = options

        def run(*args):
            self.log.append(self.tag)
            return gm.forward(*args)
        return run


@pytest.fixture(autouse=True)
def _fresh():
    pydynamo.reset()
    yield
    pydynamo.reset()


def f(x):
    return torch.sin(x) * 2 + 1


def _recorded(call):
    """Run `call()`; return (its result, what convert_frame reported meanwhile)."""
    seen = []
    convert_frame.RECORDERS.append(seen.append)
    try:
        return call(), seen
    finally:
        convert_frame.RECORDERS.remove(seen.append)


def test_second_backend_is_called_and_both_wrappers_keep_their_own():
    log = []
    b1, b2 = Tagged("b1", log), Tagged("b2", log)
    x = torch.randn(5)
    g1 = pydynamo.optimize(f, backend=b1)
    torch.testing.assert_close(g1(x), f(x))
    g2 = pydynamo.optimize(f, backend=b2)
    torch.testing.assert_close(g2(x), f(x))
    assert (b1.compiles, b2.compiles) == (1, 1)
    assert log == ["b1", "b2"]
    for _ in range(2):
        g1(x)
        g2(x)
    assert (b1.compiles, b2.compiles) == (1, 1)   # each served from its own entry
    assert log == ["b1", "b2"] + ["b1", "b2"] * 2


def test_named_backends_switch_too():
    x = torch.randn(5)
    pydynamo.optimize(f, backend="eager")(x)
    out, seen = _recorded(lambda: pydynamo.optimize(f, backend="codegen")(x))
    torch.testing.assert_close(out, f(x))
    compiled = [r for r in seen if isinstance(r, convert_frame.FrameResult)]
    assert len(compiled) == 1, seen


def test_equal_settings_share_entries():
    log = []
    b = Tagged("b", log)
    x = torch.randn(5)
    pydynamo.optimize(f, backend=b, options={"k": [1, 2]})(x)
    pydynamo.optimize(f, backend=b, options={"k": [1, 2]})(x)
    assert b.compiles == 1 and log == ["b", "b"]


@pytest.mark.parametrize("change", [dict(options={"k": 2}), dict(mode="max-autotune"),
                                    dict(dynamic=True), dict(dynamic=False), dict(fullgraph=True)])
def test_each_setting_is_part_of_the_key(change):
    log = []
    b = Tagged("b", log)
    x = torch.randn(5)
    base = dict(options={"k": 1})
    pydynamo.optimize(f, backend=b, **base)(x)
    pydynamo.optimize(f, backend=b, **dict(base, **change))(x)
    assert b.compiles == 2
    if "options" in change:
        assert b.options == {"k": 2}


def breaks(x):
    y = x + 1
    pydynamo.graph_break()
    return y * 2


def test_fullgraph_raises_after_a_non_fullgraph_compile_with_breaks():
    x = torch.randn(4)
    # (graph_break() was asked for: no warning, tests/messages)
    torch.testing.assert_close(pydynamo.optimize(breaks, backend="eager")(x), breaks(x))
    with pytest.raises(FullGraphError):
        pydynamo.optimize(breaks, backend="eager", fullgraph=True)(x)
    # the non-fullgraph wrapper still serves its entries
    torch.testing.assert_close(pydynamo.optimize(breaks, backend="eager")(x), breaks(x))


def unsupported(x):
    torch.manual_seed(0)     # changes process state: the whole frame runs eagerly
    return x + 1


def test_fullgraph_raises_after_a_non_fullgraph_compile_gave_up_on_the_frame():
    x = torch.randn(4)
    with pytest.warns(UserWarning):
        pydynamo.optimize(unsupported, backend="eager")(x)
    with pytest.raises(FullGraphError):
        pydynamo.optimize(unsupported, backend="eager", fullgraph=True)(x)
    with pytest.raises(FullGraphError):   # every call, not only the first
        pydynamo.optimize(unsupported, backend="eager", fullgraph=True)(x)


def test_fullgraph_module_after_non_fullgraph():
    class M(torch.nn.Module):
        def forward(self, x):
            torch.manual_seed(0)
            return x + 1

    m, x = M(), torch.randn(3)
    with pytest.warns(UserWarning):
        pydynamo.optimize(m, backend="eager")(x)
    with pytest.raises(FullGraphError):
        pydynamo.optimize(m, backend="eager", fullgraph=True)(x)


def test_recompile_explanation_names_the_settings():
    x = torch.randn(5)
    pydynamo.optimize(f, backend="eager")(x)
    _, seen = _recorded(lambda: pydynamo.optimize(f, backend="eager", dynamic=True)(x))
    from pydynamo.recompiles import RecompileExplanation
    why = [r for r in seen if isinstance(r, RecompileExplanation)]
    assert why and why[0].entries[0][0].what == "compile settings"
    text = str(why[0])
    assert "dynamic=None" in text and "dynamic=True" in text, text


def test_recompile_limit_counts_entries_of_the_same_settings_only(monkeypatch):
    monkeypatch.setattr(config, "recompile_limit", 2)
    log = []
    b1, b2 = Tagged("b1", log), Tagged("b2", log)
    g1 = pydynamo.optimize(f, backend=b1)
    for n in (2, 3):
        g1(torch.randn(n, 7))
    g2 = pydynamo.optimize(f, backend=b2, dynamic=False)
    for n in (2, 3):
        g2(torch.randn(n, 7))
    assert b2.compiles == 2


def test_other_settings_compile_after_the_first_hit_its_recompile_limit(monkeypatch):
    """The limit used to mark the code run-only for everyone: a later optimize() with another
    backend was never called for it."""
    import gc
    monkeypatch.setattr(config, "recompile_limit", 1)
    gc.collect()   # callbacks of earlier tests' dead wrappers
    log = []
    b1, b2 = Tagged("b1", log), Tagged("b2", log)
    g1 = pydynamo.optimize(f, backend=b1, dynamic=False)
    with pytest.warns(UserWarning, match="recompile limit"):
        for n in (2, 3, 4):
            x = torch.randn(n)
            torch.testing.assert_close(g1(x), f(x))
    assert b1.compiles == 1
    g2 = pydynamo.optimize(f, backend=b2, dynamic=False)
    x = torch.randn(5)
    torch.testing.assert_close(g2(x), f(x))
    assert b2.compiles == 1 and log[-1] == "b2"


def test_run_only_mode_serves_entries_of_any_settings():
    from pydynamo import _C, eval_frame
    log = []
    b = Tagged("b", log)
    x = torch.randn(5)
    pydynamo.optimize(f, backend=b)(x)
    eval_frame._optimize_with_callback(f, False)(x)
    assert log == ["b", "b"]
    assert _C.get_eval_frame() is None

"""The design notes' example (DESIGN.md section 5, issue 6's first acceptance item) as a golden test.

torch.compile(dynamic=True) on this function, probed with torch 2.13 (tests/compat_dynamic runs the
same function against torch.compile's live records, d_design.design@dynamic): one graph for
randn(8), randn(9) and randn(100), guarded by `8 <= L['a'].size()[0]` (its text for
`2*L['a'].size()[0] >= 16` folded into the symbol's range).
"""
import torch

import pydynamo

TORCH_GUARD = "8 <= L['a'].size()[0]"
TORCH_COMPILES = 1


def design(a):
    return a if a.shape[0] * 2 < 16 else a + 1


def test_design_example(rec):
    fn = pydynamo.optimize(design, backend=rec, dynamic=True)
    for n in (8, 9, 100):
        a = torch.randn(n)
        torch.testing.assert_close(fn(a), design(a))
    assert rec.count == TORCH_COMPILES
    assert rec.shape_guards(0) == [TORCH_GUARD]
    origins = [g.describe() for g in rec.frames[0].guards if g.kind.value == "SHAPE_ENV"]
    assert origins == [f"SHAPE_ENV: {TORCH_GUARD}  # {__file__}:{design.__code__.co_firstlineno + 1}"]


def test_design_example_other_branch_recompiles(rec):
    """Below the guard the other branch runs: a second frame (returning its input, no graph)
    guarded by the opposite relation; a recompile explanation names the failed guard."""
    fn = pydynamo.optimize(design, backend=rec, dynamic=True)
    for n in (8, 100, 3, 7):
        a = torch.randn(n)
        torch.testing.assert_close(fn(a), design(a))
    assert rec.count == 1 and len(rec.frames) == 2
    assert rec.shape_guards(1) == ["2 <= L['a'].size()[0] <= 7"]
    assert len(rec.recompiles) == 1 and TORCH_GUARD in str(rec.recompiles[0])


def test_design_example_in_explain():
    out = pydynamo.explain(design, dynamic=True)(torch.randn(9))
    assert out.graph_count == 1
    assert any(g.startswith("SHAPE_ENV: " + TORCH_GUARD) for g in out.guards), out.guards
    assert TORCH_GUARD in str(out)

"""The view-chain subset (tests/codegen/test_view_chains.py) on the Triton printer: on CPU
through Triton's interpreter (conftest.py), on a GPU when there is one."""
import os
import sys

import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "codegen"))
import view_chains  # noqa: E402


@pytest.mark.parametrize("dynamic", [None, True])
@pytest.mark.parametrize("seed", range(0, 40, 4))
def test_random_view_chain_triton(seed, dynamic):
    chain = view_chains.generate(seed)
    res = view_chains.check(chain, "triton", dynamic)
    assert res.ok, f"triton dynamic={dynamic}\n{chain.repro('triton', dynamic)}\n{res.report()}"


def test_load_at_a_folded_constant_index_in_a_reduction():
    """x.unsqueeze(1).expand(-1, 3).flatten(0, 1).unsqueeze(0).expand(3, -1).sum(-1) on a
    1-element input: the load index folded to a constant while its mask was the 2-D one, which
    Triton refuses (sweep seed 880): the block shape now follows the folded index."""
    import torch
    sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    from differential import assert_same_as_eager

    def f(x):
        return x.unsqueeze(1).expand(-1, 3).flatten(0, 1).unsqueeze(0).expand(3, -1).sum(-1)
    assert_same_as_eager(f, [lambda: (torch.randn(3)[1:2],)], backend="triton")

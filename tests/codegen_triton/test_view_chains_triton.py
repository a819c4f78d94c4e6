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

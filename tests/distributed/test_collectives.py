"""Issue 22, never a wrong answer: torch.distributed calls inside compiled code (gloo, 2 ranks).

A collective is an effect on other processes, not a graph op: before this test, dist.all_reduce
on a tensor went into the graph as an opaque node with no users and was dropped as dead code
(the compiled function returned the unreduced value on both ranks), and all_gather likewise; a
functional collective's result (AsyncCollectiveTensor, a wrapper subclass without storage)
reached codegen's kernels, which read its data pointer (segfault). Now every torch.distributed
call with a tensor argument is a graph break (reason "distributed": it runs in Python between
graphs; queries such as get_rank() are traced through, and break at the ProcessGroup), and a graph with
a __torch_dispatch__ subclass input runs with eager ops (warned). Compared: each call's result
with the uncompiled function's, per rank, under "eager" and "codegen".
"""
from __future__ import annotations

import pytest
import torch

import collectives
import harness


@pytest.mark.parametrize("backend", ["eager", "codegen"])
@pytest.mark.parametrize("name", ["f_allreduce", "f_rank", "f_allgather", "f_fc"])
def test_collective_in_compiled_code_equals_eager(name, backend):
    out = harness.run_ranks(collectives.run, name, backend, timeout=120)
    for r, o in enumerate(out):
        for i, pair in enumerate(o["outs"]):
            assert isinstance(pair, tuple), f"rank {r} call {i}: {pair}"
            torch.testing.assert_close(pair[0], pair[1], rtol=0, atol=0,
                                       msg=lambda m: f"rank {r} call {i}: {m}")
        if name != "f_rank":    # get_rank(): no tensor, traced through to its ProcessGroup
            assert any("[distributed]" in b for b in o["breaks"]), o["breaks"]
        if name == "f_fc" and backend == "codegen":
            assert any("AsyncCollectiveTensor" in w for w in o["warns"]), o["warns"]

"""Issue 22: FSDP2 (torch.distributed.fsdp.fully_shard) under pydynamo (gloo, 2 ranks, CPU).

fully_shard on each layer (the MLP's Linears, GPT-2's blocks) and on the root. A sharded
module's call runs FSDP2's hooks (pre-forward all-gather, post-forward reshard, and through
autograd the pre-backward all-gather and post-backward reduce-scatter): pydynamo does not trace
a module with hooks (a graph break, reason module_hooks), so the collectives stay where FSDP2
puts them, outside the graphs, and the code between them (the activations, the loss; GPT-2's
block bodies) is compiled for training (joint graphs, compiled backward). A torch.nn module's
own forward called from such a break (the MLP's Linears) runs as is, as under torch.compile
(since session 12: the MLP's count went from 8 graphs per rank to 4). Compared with eager FSDP2 per rank: the
5 losses and the full parameters (gathered) after 5 SGD steps, float32 exactly at
torch.testing's defaults, bf16 mixed precision (MixedPrecisionPolicy(param_dtype=bfloat16))
exactly under aot_eager and within bf16 tolerance under codegen (its fused kernels round once
where eager rounds per op); graph counts equal on both ranks and to the count stated.
"""
from __future__ import annotations

import pytest
import torch

import harness
import workloads

TIMEOUT = 120
# (model, bf16) -> graphs per rank
GRAPHS = {("mlp", False): 4, ("mlp", True): 4, ("gpt2", False): 6}
BF16_TOL = dict(rtol=1.6e-2, atol=1e-3)


@pytest.mark.parametrize("model,bf16,backend", [
    ("mlp", False, "aot_eager"), ("mlp", False, "codegen"), ("mlp", True, "aot_eager"),
    ("mlp", True, "codegen"), ("gpt2", False, "aot_eager"), ("gpt2", False, "codegen")])
def test_fsdp2_matches_eager(model, bf16, backend):
    ref = harness.run_ranks(workloads.fsdp_kw, model, None, bf16, timeout=TIMEOUT)
    out = harness.run_ranks(workloads.fsdp_kw, model, backend, bf16, timeout=TIMEOUT)
    tol = BF16_TOL if bf16 and backend == "codegen" else {}
    for r, (o, e) in enumerate(zip(out, ref)):
        torch.testing.assert_close(o["losses"], e["losses"], **tol, msg=lambda m: f"rank {r} losses: {m}")
        for k, v in e["params"].items():
            torch.testing.assert_close(o["params"][k], v, **tol, msg=lambda m, k=k: f"rank {r} {k}: {m}")
        assert o["graphs"] == GRAPHS[(model, bf16)], o["graphs"]
        assert o["counters"].get("backward_compiled", 0) > 0 and not o["counters"].get("eager_fallback")
        assert any("module_hooks" in b for b in o["breaks"]), o["breaks"]
    assert out[0]["graphs"] == out[1]["graphs"]

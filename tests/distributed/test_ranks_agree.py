"""Issue 22: ranks agree on guard outcomes (gloo, 2 ranks, loopback).

workloads' "mlp_varying" gives rank 1 a batch of 9 rows at step 2 where every other batch (and
every batch of rank 0) has 8: rank 1's guards fail there and it recompiles, rank 0's pass.
Without the check that is a silent divergence (the ranks run different graphs; here still
eager's answers, and different graph counts per rank). With
pydynamo.config.distributed_guard_check on, both ranks raise GuardDivergence at that call,
naming each rank's outcome and rank 1's failing guard, within the timeout (no deadlock).
"""
from __future__ import annotations

import pytest
import torch

import harness
import workloads

TIMEOUT = 120


def test_divergence_is_silent_without_the_check():
    ref = harness.run_ranks(workloads.train_kw, "mlp_varying", None, None, {}, timeout=TIMEOUT)
    out = harness.run_ranks(workloads.train_kw, "mlp_varying", "aot_eager", None, {},
                            timeout=TIMEOUT)
    for o, e in zip(out, ref):
        torch.testing.assert_close(o["losses"], e["losses"])
        for k, v in e["params"].items():
            torch.testing.assert_close(o["params"][k], v)
    assert [o["graphs"] for o in out] == [1, 2]      # rank 1 recompiled, rank 0 did not


def test_guard_check_turns_divergence_into_an_error():
    with pytest.raises(AssertionError) as info:
        harness.run_ranks(workloads.train_kw, "mlp_varying", "aot_eager", None,
                          {"config": {"distributed_guard_check": True}}, timeout=TIMEOUT)
    text = str(info.value)
    assert "GuardDivergence" in text and "ranks disagree" in text, text
    assert "rank 0: forward" in text and "compiled entry 0 passes its guards" in text, text
    assert "rank 1: forward" in text and "no compiled entry passes its guards" in text, text
    assert "9" in text.split("rank 1: forward", 1)[1], text    # rank 1's failing size guard


def test_guard_check_agreeing_ranks_run_normally():
    """Equal shapes on every rank: the check all-gathers on each call and changes nothing."""
    ref = harness.run_ranks(workloads.train_kw, "mlp", None, None, {}, timeout=TIMEOUT)
    out = harness.run_ranks(workloads.train_kw, "mlp", "aot_eager", None,
                            {"config": {"distributed_guard_check": True}}, timeout=TIMEOUT)
    for o, e in zip(out, ref):
        torch.testing.assert_close(o["losses"], e["losses"])
        assert o["graphs"] == 1
        assert o["guard_checks"] == workloads.STEPS - 1     # every call after the first

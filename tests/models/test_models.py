"""Acceptance (issue 4): tiny GPT-2 and BERT from transformers configs are captured by
pydynamo.optimize as ONE graph each, like torch.compile, with outputs equal to eager, and the
second call (fresh inputs) is a cache hit. Each (engine, model) runs in its own process
(model_runner.py); the four processes run concurrently."""
import json
import os
import subprocess
import sys

import pytest

pytest.importorskip("transformers", reason="transformers is not installed in this environment")

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
# GPT2LMHeadModel (use_cache=False) and BertModel: one graph each under both engines.
MODEL_NAMES = ["gpt2", "bert"]
TOL = 1e-5


@pytest.fixture(scope="module")
def records():
    env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
    procs = {(e, m): subprocess.Popen([sys.executable, os.path.join(HERE, "model_runner.py"), "--engine", e,
                                       "--model", m], cwd=REPO, env=env, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)
             for e in ("torch", "pydynamo") for m in MODEL_NAMES}
    out = {}
    for key, p in procs.items():
        stdout, stderr = p.communicate(timeout=600)
        line = [x for x in stdout.splitlines() if x.startswith("MODEL_RECORD ")]
        out[key] = (json.loads(line[-1][len("MODEL_RECORD "):]) if line else
                    {"error": f"runner died rc={p.returncode}: {stderr[-3000:]}"})
    return out


def _check(rec, engine):
    assert rec["error"] is None, f"{engine}: {rec['error']}"
    ops = rec["ops"][:20] + (["..."] if len(rec["ops"]) > 20 else [])
    assert rec["graphs"] == 1, f"{engine} captured {rec['graphs']} graphs (ops per graph {ops}), want 1"
    assert rec["new_graphs_per_call"] == [1, 0], f"{engine}: graphs per call {rec['new_graphs_per_call']}; call 2 must hit"
    assert max(rec["max_diff"]) <= TOL, f"{engine}: outputs differ from eager by {rec['max_diff']}"


@pytest.mark.parametrize("model", MODEL_NAMES)
def test_model_one_graph(records, model):
    ref, rec = records[("torch", model)], records[("pydynamo", model)]
    _check(ref, "torch.compile (reference)")
    _check(rec, "pydynamo")
    assert rec["graphs"] == ref["graphs"]

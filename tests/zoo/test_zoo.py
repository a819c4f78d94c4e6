"""The transformers model zoo's fast subset in CI (issue 17); the whole zoo is scripts/model_zoo.py.

Each model of SUBSET (one or two per family: decoders, encoders, encoder-decoders, vision, audio,
multimodal) is built from a tiny config and run once under pydynamo in one worker process
(tests/zoo/zoo_runner.py). Asserted per model: the forward gives eager's outputs (every tensor),
and pydynamo compiles no more graphs than torch.compile did on the same model (torch.compile's
counts are read from tests/zoo/torch_reference.jsonl, written by scripts/model_zoo.py for this
torch and transformers version: torch.compile is not run here). Skipped without transformers.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
RUNNER = os.path.join(HERE, "zoo_runner.py")
REFERENCE = os.path.join(HERE, "torch_reference.jsonl")

SUBSET = [
    "LlamaModel", "GPT2Model", "Gemma2Model",           # decoders (finfo, os.environ, Mapping.get)
    "BertModel", "DebertaModel", "FunnelModel",         # encoders (module attribute writes)
    "ViTModel", "ConvNextModel",                        # vision
    "Wav2Vec2Model",                                    # audio (a filled lru_cache)
    "CLIPModel", "ChineseCLIPModel",                    # multimodal (ModelOutput field writes)
]
WORKER_TIMEOUT_S = 600


@pytest.fixture(scope="module")
def rows():
    pytest.importorskip("transformers")
    env = dict(os.environ)
    env.setdefault("PYDYNAMO_CACHE_DIR", os.path.join(REPO, ".cache-test-zoo"))
    p = subprocess.run([sys.executable, RUNNER, "--engine", "pydynamo", *SUBSET], cwd=REPO,
                       capture_output=True, text=True, timeout=WORKER_TIMEOUT_S, env=env)
    got = {}
    for line in p.stdout.splitlines():
        if line.startswith("{"):
            r = json.loads(line)
            got[r["model"]] = r
    assert got, f"zoo worker printed nothing (rc={p.returncode}):\n{p.stderr[-3000:]}"
    return got


def _reference() -> dict:
    with open(REFERENCE) as f:
        return {r["model"]: r for r in map(json.loads, f)}


@pytest.mark.parametrize("model", SUBSET)
def test_zoo_model(rows, model):
    r = rows.get(model)
    assert r is not None, f"{model}: no result (the worker died before it)"
    assert r["status"] == "ok", f"{model}: {r['status']}: {r.get('why')}\n{r.get('tb', '')}"
    ref = _reference().get(model)
    assert ref is not None and ref["status"] == "ok", f"{model}: no torch.compile reference row"
    assert r["graphs"] <= ref["graphs"], (
        f"{model}: pydynamo compiled {r['graphs']} graphs, torch.compile {ref['graphs']}; "
        f"pydynamo's breaks: {sorted(set(r['breaks']))[:5]}")

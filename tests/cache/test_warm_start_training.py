"""Warm start of training graphs (issue 20): a frame whose graph takes grad-requiring inputs
(pydynamo/aot: a recorded joint graph, compiled forward and backward) is stored once its backward
is compiled (the first `.backward()`), and a new process runs its training steps from the entry:
nothing traced, recorded, partitioned or compiled (aot's counters stay at zero), losses and
gradients equal eager's, and neither the tracing stage nor codegen's lowering is imported (the
training stage is: aot's runtime module imports its recorder, which imports sympy).
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fresh  # noqa: E402

MODEL = textwrap.dedent("""
    import torch
    import torch.nn.functional as F


    class Net(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc = torch.nn.Linear(6, 8)
            self.norm = torch.nn.LayerNorm(8)
            self.out = torch.nn.Linear(8, 3)

        def forward(self, x):
            h = F.gelu(self.norm(self.fc(x)))
            return self.out(h * 2 + 1)


    def build():
        torch.manual_seed(0)
        return Net()
""")

# A fresh interpreter (fresh.PRELUDE: the model file argv[1], the cache dir argv[2], the version
# key argv[3]): three training steps (SGD) side by side with eager's (argv[4] "forward_only":
# one forward); prints what it traced, loaded, compiled and imported, and whether every loss
# and gradient matched.
FRESH = fresh.PRELUDE + fresh.TRAIN_STEPS + textwrap.dedent("""
    model = mod.build()
    compiled = pydynamo.optimize(model, backend="codegen")
    ok = train_steps(model, compiled, forward_only=sys.argv[4:] == ["forward_only"])
    aot = sys.modules.get("pydynamo.aot.runtime")
    counters = dict(aot.counters) if aot else {}
    print(json.dumps({"traced": traced, "hits": warm_cache.stats["hits"],
                      "stores": warm_cache.stats["stores"], "ok": ok,
                      "joint_graphs": counters.get("joint_graphs", 0),
                      "backward_compiled": counters.get("backward_compiled", 0),
                      "heavy": [m for m in stages.HEAVY if m in sys.modules]}))
""")


def _fresh(path, cache, *mode) -> dict:
    r = subprocess.run([sys.executable, "-c", FRESH, str(path), str(cache), "pinned-" + str(cache),
                        *mode],
                       capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_training_steps_of_a_new_process_load_forward_and_backward(tmp_path):
    path, cache = tmp_path / "train_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    cold = _fresh(path, cache)
    # steps 1-2 (parameters require grad) and step 3 (the input too: another guard, another entry)
    assert cold["ok"] and cold["hits"] == 0 and cold["stores"] == 2, cold
    assert cold["joint_graphs"] == 2 and cold["backward_compiled"] == 2, cold
    warm = _fresh(path, cache)
    # (the training stage's runtime is imported: its module imports the recorder, which imports
    # sympy; not the executor, nor codegen's lowering)
    assert {**warm, "heavy": set(warm["heavy"])} == {
        "traced": [], "hits": 2, "stores": 0, "ok": True, "joint_graphs": 0,
        "backward_compiled": 0, "heavy": {"pydynamo.aot", "sympy"}}, warm


def test_an_entry_waits_for_its_backward(tmp_path):
    """A forward whose process never ran its backward stores nothing (the entry would lack the
    compiled backward), so the next process traces and compiles it as a cold one does."""
    path, cache = tmp_path / "train_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    first = _fresh(path, cache, "forward_only")
    assert first["stores"] == 0 and first["joint_graphs"] == 1 and first["backward_compiled"] == 0
    second = _fresh(path, cache)
    assert second["ok"] and second["hits"] == 0 and second["traced"], second

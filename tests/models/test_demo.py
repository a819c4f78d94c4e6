"""`python -m pydynamo.demo` (the README's one command, minus the venv setup of scripts/demo.sh):
it must finish with every output matching eager, capture the embedded transformer as one graph,
and recompile exactly once when the token ids change dtype (int64 -> int32), then hit the cache
when they change back."""
import os
import re
import subprocess
import sys

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


@pytest.fixture(scope="module")
def demo_output():
    p = subprocess.run([sys.executable, "-m", "pydynamo.demo", "--no-timings"], cwd=REPO,
                       capture_output=True, text=True, timeout=600)
    return p.returncode, p.stdout + p.stderr


def test_demo_outputs_match_eager(demo_output):
    rc, out = demo_output
    assert rc == 0 and "every output checked matched eager" in out, out[-4000:]
    assert "MISMATCH" not in out


def test_demo_model_is_one_graph(demo_output):
    _, out = demo_output
    m = re.search(r"graphs captured: (\d+); ops per graph: (\[.*?\])", out)
    assert m, out[-4000:]
    assert m.group(1) == "1", f"embedded model captured as {m.group(1)} graphs (ops {m.group(2)[:200]})"


def test_demo_dtype_change_recompiles_once(demo_output):
    _, out = demo_output
    assert "input ids int64 -> int32: compiled 1 new graph(s)" in out, out[-4000:]
    assert "back to int64 (cache hit)" in out, out[-4000:]


def test_demo_sequence_change_recompiles_once_into_a_dynamic_entry(demo_output):
    _, out = demo_output
    assert "seq 16 -> 17 (compiled 1 graph(s))" in out and "seq 16 -> 35 (cache hit)" in out, out[-4000:]
    assert "the new entry's shape guards: SHAPE_ENV: " in out and "2 <= L['ids'].size()[1] <= 64" in out, out[-4000:]


def test_demo_graph_breaks_named_with_user_lines_and_hints(demo_output):
    """next_token_probs: a print and an `if` on a tensor around the model; torch.compile gives 3
    graphs of [66, 2, 1] ops for it (scripts/demo_reference.py prints its count when timings run)."""
    _, out = demo_output
    assert "graphs: 3; ops per graph: [66, 2, 1]; graph breaks: 2" in out, out[-4000:]
    src = open(os.path.join(REPO, "pydynamo", "demo", "model.py")).read().splitlines()
    line_print = 1 + next(i for i, ln in enumerate(src) if "(user print)" in ln)
    line_if = 1 + next(i for i, ln in enumerate(src) if "if logits.max() > 4.0" in ln)
    assert f"break at model.py:{line_print}:5 [print]" in out, out[-4000:]
    assert f"break at model.py:{line_if}:8 [tensor_branch]" in out, out[-4000:]
    assert out.count("      hint: ") == 2
    assert "pydynamo.optimize(next_token_probs) call 2: matches eager" in out

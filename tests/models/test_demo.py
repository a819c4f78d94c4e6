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


def test_demo_recompile_reason_prints_before_the_next_call(demo_output):
    """The 16 -> 17 recompile's explanation and new shape guards come right after that call's
    line, before the next call's cache hit (issue 21)."""
    _, out = demo_output
    a, why = out.index("seq 16 -> 17 (compiled"), out.index("recompiling forward", out.index("seq 16 -> 17"))
    guards, b = out.index("the new entry's shape guards"), out.index("seq 16 -> 35 (cache hit)")
    assert a < why < guards < b, out[a:b + 100]


def test_demo_timings_are_interleaved_medians_with_a_busy_flag():
    """timing.interleaved_us runs the callables in turn in every round (load hits all rows alike)
    and reports the median round; a row whose rounds spread widely is BUSY and the table says
    it cannot be trusted (issue 21: eager looked slower than torch.compile backend=eager under load)."""
    import io
    import time
    from contextlib import redirect_stdout

    from pydynamo.demo.__main__ import print_timings
    from pydynamo.demo.timing import interleaved_us

    order, slow = [], iter([0.0] * 3 + [0.0, 0.004, 0.0, 0.0, 0.0, 0.0, 0.0] * 10)

    def steady(x):
        order.append("a")

    def noisy(x):
        order.append("b")
        time.sleep(next(slow))

    t = interleaved_us({"steady": steady, "noisy": noisy}, None, iters=1, rounds=7)
    assert order[6:] == ["a", "b"] * 7            # after 3 warm-up calls each: interleaved
    assert t["noisy"].busy and t["noisy"].min_us <= t["noisy"].median_us < t["noisy"].max_us
    buf = io.StringIO()
    with redirect_stdout(buf):
        print_timings([(name, v, t["steady"]) for name, v in t.items()], 1)
    text = buf.getvalue()
    assert "BUSY" in text and "too busy to trust" in text and "x eager" in text, text

"""Warm start of joints recorded with symbolic sizes (issue 20): a training graph compiled with
dynamic=True (pydynamo/aot's recording over the size symbols) is stored with its size relations
(the spec's generated source and its sympy expressions) and the geometry of its output views,
which recorder.attach_sizes turns back into functions at load; a new process trains on several
sizes from the one loaded entry: nothing traced, recorded or compiled, outputs, losses and
gradients equal eager's. Also: an output that views an input at a symbolic offset and size, an
output the loss does not reach (a backward variant with zeros of a symbolic size), and sizes the
frame's guards admit but the joint's relations do not (eager autograd, never a wrong answer).
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


    def fn(x, w):
        h = torch.tanh(x @ w) * 2
        # a view of the input at a symbolic size and offset; a sum some losses do not reach
        return h, x[:, 1:], h.sum(0)
""")

# argv[4]: the sizes (comma-separated) of x's first dimension, called in that order; a size
# marked "-": that call's loss does not reach the third output (a backward variant). Prints what
# was traced, loaded, recorded and compiled.
FRESH = fresh.PRELUDE + textwrap.dedent("""
    import codegen
    logs = []
    warm_cache.log.info = lambda msg, *a: logs.append(msg % a)
    if sys.argv[5:]:        # "refuse:N": the loaded joint's relations do not admit size N
        from pydynamo.aot import recorder
        attach, refused = recorder.attach_sizes, int(sys.argv[5][7:])
        def narrower(joint, spec):
            attach(joint, spec)
            admits = spec.admits
            spec.admits = lambda args: args[0].shape[0] != refused and admits(args)
        recorder.attach_sizes = narrower
    compiled = pydynamo.optimize(mod.fn, backend="codegen", dynamic=True)
    w = torch.randn(6, 4, requires_grad=True)
    wr = w.detach().clone().requires_grad_()
    ok = True
    for size in sys.argv[4].split(","):
        n, full = int(size.rstrip("-")), not size.endswith("-")
        x = torch.randn(n, 6, requires_grad=True)
        xr = x.detach().clone().requires_grad_()
        got, want = compiled(x, w), mod.fn(xr, wr)
        ok = ok and all(bool(torch.allclose(a, b, atol=1e-5)) for a, b in zip(got, want))
        ok = ok and got[1]._base is x and got[1].shape == want[1].shape   # eager's view
        (got[0].pow(2).mean() + got[1].sum() + full * got[2].sum()).backward()
        (want[0].pow(2).mean() + want[1].sum() + full * want[2].sum()).backward()
        ok = ok and bool(torch.allclose(x.grad, xr.grad, atol=1e-5))
        ok = ok and bool(torch.allclose(w.grad, wr.grad, atol=1e-5))
        w.grad = wr.grad = None
    aot = sys.modules.get("pydynamo.aot.runtime")
    counters = dict(aot.counters) if aot else {}
    print(json.dumps({"traced": traced, "hits": warm_cache.stats["hits"],
                      "stores": warm_cache.stats["stores"], "ok": ok,
                      "uncacheable": warm_cache.stats["uncacheable"],
                      "joint_graphs": counters.get("joint_graphs", 0),
                      "joint_recompiles": counters.get("joint_recompiles", 0),
                      "graphs_compiled": codegen.counters["graphs_compiled"], "logs": logs}))
""")


def _fresh(path, cache, sizes, *mode) -> dict:
    r = subprocess.run([sys.executable, "-c", FRESH, str(path), str(cache), "pinned-" + str(cache),
                        sizes, *mode], capture_output=True, text=True, timeout=600, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def cache(tmp_path):
    """(model file, a cache holding fn's entry: its joint recorded at 5, a variant run at 9)"""
    path, cache = tmp_path / "dyn_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    cold = _fresh(path, cache, "5,9-")
    assert cold["ok"] and cold["stores"] == 1 and cold["joint_graphs"] == 1, cold
    assert cold["joint_recompiles"] == 0, cold          # (one recording served both sizes)
    return path, cache


def test_a_symbolic_joint_serves_other_sizes_in_a_new_process(cache):
    warm = _fresh(*cache, "7-,13,6-,11")
    assert warm["ok"] and warm["traced"] == [] and warm["hits"] == 1, warm
    assert warm["joint_graphs"] == 0 and warm["graphs_compiled"] == 0, warm
    assert not any("eager autograd" in m for m in warm["logs"]), warm["logs"]


def test_sizes_the_loaded_relations_refuse_run_with_eager_autograd(cache):
    """The frame's guards admit 13 and the joint's relations (narrowed here) do not: no recorder
    runs in a loaded process, so that call runs the graph with eager autograd, equal to eager,
    logged; the other sizes still run the loaded joint."""
    warm = _fresh(*cache, "7,13-,11", "refuse:13")
    assert warm["ok"] and warm["traced"] == [] and warm["hits"] == 1, warm
    assert warm["joint_graphs"] == 0 and warm["graphs_compiled"] == 0, warm
    assert sum("eager autograd" in m for m in warm["logs"]) == 1, warm["logs"]

"""Warm start of graphs that write (issue 20): in-place writes on inputs and through views
(`x[:, 1:] += y`, `y = x * w + 1; y[0].zero_()`, a diagonal, a chain of views, two writes) and a
buffer (`self.count += 1`), x also a view at a storage offset, compiled with dynamic=True (C++
kernels, and Triton's through its interpreter). The recorder functionalizes each over the
size symbols (pydynamo/aot/recorder.py: a functionalized inference graph, or a training joint),
so the frame's entry holds one joint with its size spec; a new process runs every case at other
sizes from the entries: nothing traced, recorded or compiled, outputs, written inputs, the buffer
and gradients equal eager's. What cannot be cached (a graph with symbolic sizes recorded at
concrete ones) says why in one log line, and its new process (traced again) is still right.
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


    def slice_add(x, y):
        x[:, 1:] += y
        return x * 2


    def view_zero(x, y):
        h = x * 1.5 + 1
        h[0].zero_()
        return h * 2 + y.sum()


    def diagonal_add(x, y):
        x[:, :2].t().diagonal().add_(y[0, 0])
        return x.sin() + y.sum(1, keepdim=True)


    def chained(x, y):
        x[1:].t()[::2].add_(1)
        return x - y.mean()


    def two_writes(x, y):
        x[:, 0].mul_(2)
        x[0].add_(y[0, :1])
        return x.sum(1) + y[:, 0]


    def scaled(x, y):
        # a float of a size: the recorder records it at concrete sizes, once per size
        x.mul_(x.shape[0] / 3.0)
        return x + y.sum()


    class Counter(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros(()))
            self.lin = torch.nn.Linear(7, 3)

        def forward(self, x, y):
            self.count += 1
            return self.lin(x) * self.count + y.sum()


    def build_counter():
        torch.manual_seed(0)
        return Counter()
""")

# ":rows": x is a view of a larger tensor at a storage offset (the write lands in its storage)
CASES = ["slice_add", "view_zero", "diagonal_add", "chained", "two_writes", "Counter",
         "slice_add:rows", "chained:rows"]

# A fresh interpreter (fresh.PRELUDE: the model file argv[1], the cache dir argv[2], the version
# key argv[3]); argv[4] "train", "train+x" or "infer"; argv[7] the kernels ("cpp", "triton"),
# argv[8] optimize's dynamic ("True", "None"); argv[6] the cases; argv[5] the row counts of x, which
# is (n, 7) and y (n, 6) (n never 6 or 7: no two sizes share a symbol). Every case is called at
# every size beside eager on copies of the same random inputs; in training x is a non-leaf (a
# view of a leaf that requires grad cannot be written in eager) and y a leaf, and the loss
# reaches the output. Prints what was traced, loaded, recorded and compiled, the cases whose
# outputs, written inputs, buffer or gradients differed from eager's, and the warm cache's log.
FRESH = fresh.PRELUDE + textwrap.dedent("""
    import copy
    import codegen
    logs = []
    warm_cache.log.info = lambda msg, *a: logs.append(msg % a)
    options = {"backend_kernels": sys.argv[7]}
    dynamic = {"True": True, "None": None}[sys.argv[8]]    # None: automatic (static, then dynamic)
    train = sys.argv[4].startswith("train")
    reach_x = sys.argv[4] == "train+x"      # the loss reaches x's new value too
    wrong = []

    def close(a, b):
        if isinstance(a, int):
            return a == b
        return a is None and b is None or a.shape == b.shape and bool(
            torch.allclose(a, b, rtol=1e-4, atol=1e-5))

    for case in sys.argv[6].split(","):
        name, _, kind = case.partition(":")     # kind "rows": x is a view at a storage offset
        if name == "Counter":
            eager_fn = mod.build_counter()
            model = copy.deepcopy(eager_fn)
            if not train:
                for p in list(model.parameters()) + list(eager_fn.parameters()):
                    p.requires_grad_(False)
            fn = pydynamo.optimize(model, backend="codegen", dynamic=dynamic, options=options)
        else:
            eager_fn = getattr(mod, name)
            fn = pydynamo.optimize(eager_fn, backend="codegen", dynamic=dynamic, options=options)
        for n in [int(s) for s in sys.argv[5].split(",")]:
            g = torch.Generator().manual_seed(n)
            base = torch.randn(n, 7, generator=g)
            y0 = torch.randn(n, 6, generator=g)
            results = []
            for f in (fn, eager_fn):
                leaf = (torch.cat([base[:1], base]) if kind else base.clone()).requires_grad_(train)
                y = y0.clone().requires_grad_(train)
                x = leaf * 1 if train else leaf
                x = x[1:] if kind else x
                out = f(x, y)
                got = [out.detach().clone(), x.detach().clone(), x.storage_offset()]
                if name == "Counter":
                    got.append(f.count.clone() if f is eager_fn else model.count.clone())
                if train:
                    loss = out.pow(2).sum()
                    (loss + x.pow(2).sum() if reach_x else loss).backward()
                    got += [leaf.grad, y.grad]
                    if name == "Counter":
                        m = eager_fn if f is eager_fn else model
                        got += [p.grad.clone() for p in m.parameters()]
                        m.zero_grad()
                results.append(got)
            if not all(close(a, b) for a, b in zip(*results)):
                wrong.append(f"{case}@{n}")
    aot = sys.modules.get("pydynamo.aot.runtime")
    report = {name: warm_cache.stats[name] for name in ("hits", "stores", "uncacheable")}
    for name in ("joint_graphs", "functional_graphs", "joint_recompiles", "joint_concrete",
                 "eager_fallback"):
        report[name] = aot.counters.get(name, 0) if aot else 0
    report.update(traced=traced, wrong=wrong, logs=logs,
                  graphs_compiled=codegen.counters["graphs_compiled"])
    print(json.dumps(report))
""")


def _fresh(path, cache, mode, sizes, cases=CASES, kernels="cpp", dynamic="True") -> dict:
    r = subprocess.run([sys.executable, "-c", FRESH, str(path), str(cache), "pinned-" + str(cache),
                        mode, sizes, ",".join(cases), kernels, dynamic],
                       capture_output=True, text=True, timeout=900, env=dict(os.environ))
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


SOME = ["slice_add", "view_zero", "Counter", "chained:rows"]


@pytest.mark.parametrize("mode,cases,kernels,dynamic", [
    ("infer", CASES, "cpp", "True"), ("train", CASES, "cpp", "True"),
    # codegen's Triton kernels (the interpreter here: TRITON_INTERPRET=1)
    ("infer", SOME, "triton", "True"), ("train", SOME, "triton", "True"),
    # automatic dynamic: a static entry for the first size, a symbolic one from the second
    ("infer", SOME, "cpp", "None"), ("train", SOME, "cpp", "None")],
    ids=["infer-cpp", "train-cpp", "infer-triton", "train-triton", "infer-auto", "train-auto"])
def test_writes_under_dynamic_sizes_load_in_a_new_process(tmp_path, mode, cases, kernels, dynamic):
    path, cache = tmp_path / "writes_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    cold = _fresh(path, cache, mode, "4,5,9", cases, kernels, dynamic)
    assert cold["wrong"] == [] and cold["uncacheable"] == 0, cold
    # one frame (automatic dynamic: two) and one recording per function, over the size symbols,
    # serving every size (and x as a view at an offset: the same entry)
    frames = len({c.partition(":")[0] for c in cases})
    entries = frames * (2 if dynamic == "None" else 1)
    assert cold["stores"] == entries and len(cold["traced"]) == entries, cold
    assert cold["joint_concrete"] == 0 and cold["joint_recompiles"] == 0, cold
    assert cold["functional_graphs" if mode == "infer" else "joint_graphs"] == entries, cold
    warm = _fresh(path, cache, mode, "8,11,3", cases, kernels, dynamic)
    assert warm["wrong"] == [] and warm["traced"] == [] and warm["hits"] == frames, warm
    for counter in ("joint_graphs", "functional_graphs", "joint_recompiles", "graphs_compiled",
                    "eager_fallback", "stores"):
        assert warm[counter] == 0, (counter, warm)
    assert not any("eager autograd" in m for m in warm["logs"]), warm["logs"]


@pytest.mark.parametrize("cold_mode,warm_mode", [("train", "train+x"), ("train+x", "train")])
def test_a_backward_the_storing_process_did_not_compile_runs_its_graph(tmp_path, cold_mode,
                                                                      warm_mode):
    """The loss of the storing process left the written input's tangent absent (only a variant
    of the backward compiled: the entry holds it; pydynamo's runtime used to store nothing then)
    or present (the full backward); a new process whose loss differs runs the backward it needs
    from the entry's backward graph, eagerly: nothing traced or compiled, equal to eager."""
    cases = ["slice_add", "two_writes"]
    path, cache = tmp_path / "writes_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    cold = _fresh(path, cache, cold_mode, "4,5", cases)
    assert cold["wrong"] == [] and cold["stores"] == len(cases), cold
    warm = _fresh(path, cache, warm_mode, "8,3", cases)
    assert warm["wrong"] == [] and warm["traced"] == [] and warm["hits"] == len(cases), warm
    assert warm["joint_graphs"] == 0 and warm["graphs_compiled"] == 0, warm


@pytest.mark.parametrize("mode", ["infer", "train"])
def test_a_graph_recorded_at_concrete_sizes_says_why_and_stays_right(tmp_path, mode):
    """A float computed from a size: the symbolic recording fails, the joint is recorded per size
    (a load has no recorder to record the next one): not cached, one log line saying why, and a
    new process traces and compiles it again, equal to eager."""
    path, cache = tmp_path / "writes_model.py", tmp_path / "cache"
    path.write_text(MODEL)
    for sizes in ("4,5", "8,3"):
        run = _fresh(path, cache, mode, sizes, ["scaled"])
        assert run["wrong"] == [] and run["traced"] == ["scaled"], run
        assert run["stores"] == 0 and run["uncacheable"] == 1 and run["joint_concrete"] == 1, run
        why = [m for m in run["logs"] if "not cached" in m]
        assert len(why) == 1 and "symbolic sizes recorded at concrete ones" in why[0], run["logs"]

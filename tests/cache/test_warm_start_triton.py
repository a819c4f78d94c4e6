"""Warm start of Triton-compiled entries (issue 20): the codegen backend's Triton wrappers (on a GPU,
the CUDA tensors' path; here the same kernels on CPU tensors through Triton's interpreter,
TRITON_INTERPRET=1, as tests/codegen_triton does) are stored with their kernels' source, how
each kernel is bound and, behind CUDA-graph replay, the replay's settings; a new process loads
them: nothing traced, no graph compiled, outputs (and, training, gradients) equal eager's.

Every scenario runs in fresh interpreters (fresh.PRELUDE): one fills the cache, another hits it.
The CUDA-graph runner's record is checked in this process (a simulated device: no GPU here), and
a real-GPU test (cuda:0 stored, cuda:1 must not hit it) runs where there are two GPUs.
"""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
import textwrap

import pytest
import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fresh  # noqa: E402
import test_warm_start_training  # noqa: E402
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                "operating"))
from test_cudagraph_outputs import Replayer  # noqa: E402  (a simulated CUDA-graph device)

# the training model is test_warm_start_training's (Net, build)
MODEL = test_warm_start_training.MODEL + textwrap.dedent("""


    def fn(x):                      # Triton kernels: pointwise and a reduction
        return (x * 2).sin().sum(0) + x.cos()[0]


    def mm_fn(x, w):                # extern calls only: a wrapper with no kernel module
        return x @ w


    def index_fn(x, i):             # an indirect read: a kernel whose bad index raises
        return (x[i] * 2).cos()     # eager's error (an extern argument with no text)
""")

# argv[4]: "infer" (fn, mm_fn, index_fn under no_grad) or "train" (fresh.TRAIN_STEPS on Net);
# argv[5]: the device. Prints what was traced, loaded, stored and compiled.
FRESH = fresh.PRELUDE + fresh.TRAIN_STEPS + textwrap.dedent("""
    import codegen
    logs = []       # the warm cache's reasons (not stored, stale), as they are logged
    warm_cache.log.info = lambda msg, *a: logs.append(msg % a)
    dev = sys.argv[5]
    opts = {"backend_kernels": "triton"}
    ok = True
    torch.manual_seed(1)
    if sys.argv[4] == "infer":
        with torch.no_grad():
            x, w = torch.randn(8, 5, device=dev), torch.randn(5, 7, device=dev)
            i = torch.randint(0, 8, (6,), device=dev)
            for f, args in ((mod.fn, (x,)), (mod.mm_fn, (x, w)), (mod.index_fn, (x, i))):
                got = pydynamo.optimize(f, backend="codegen", options=opts)(*args)
                ok = ok and bool(torch.allclose(got, f(*args), atol=1e-5))
    else:
        model = mod.build().to(dev)
        ok = train_steps(model, pydynamo.optimize(model, backend="codegen", options=opts), dev)
    # (before codegen.counters, which imports the pipeline)
    imported = sorted(m for m in sys.modules if m.split(".")[0] in ("codegen", "sympy", "pydynamo"))
    aot = sys.modules.get("pydynamo.aot.runtime")
    print(json.dumps({"traced": traced, "hits": warm_cache.stats["hits"],
                      "stores": warm_cache.stats["stores"], "stale": warm_cache.stats["stale"],
                      "uncacheable": warm_cache.stats["uncacheable"], "ok": ok,
                      "graphs_compiled": codegen.counters["graphs_compiled"],
                      "triton_graphs": codegen.counters["triton_graphs_compiled"],
                      "backward_compiled": dict(aot.counters).get("backward_compiled", 0)
                      if aot else 0, "logs": logs, "imported": imported}))
""")

# what a Triton hit does not import: codegen's lowering and printing (the pipeline, the Triton
# backend's printer), sympy, the tracer; a Triton wrapper is rebuilt from codegen/run_wrapper.py,
# codegen/triton_runtime.py and codegen/triton_launch.py (a hit used to import the whole pipeline
# through codegen.gpu_wrapper: 0.65 s of thread CPU against 0.21 s on the 2-core machine). A
# training hit imports pydynamo.aot, whose recorder imports sympy (test_warm_start_training.py).
OFF_TRITON_HIT = {"codegen.gpu_wrapper", "codegen.pipeline", "codegen.lowering", "codegen.triton",
                  "codegen.ir", "codegen.scheduler", "codegen.wrapper", "codegen.graph",
                  "codegen.decompositions", "codegen.sizevars", "codegen.cudagraphs",
                  "pydynamo.executor.translator", "pydynamo.bytecode"}


def _fresh(path, cache, mode, device="cpu", interpret=True) -> dict:
    env = dict(os.environ)
    env.pop("TRITON_INTERPRET", None)
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    r = subprocess.run([sys.executable, "-c", FRESH, str(path), str(cache),
                        "pinned-" + str(cache), mode, device],
                       capture_output=True, text=True, timeout=600, env=env)
    assert r.returncode == 0, r.stderr[-3000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


@pytest.fixture
def model(tmp_path):
    path = tmp_path / "triton_model.py"
    path.write_text(MODEL)
    return path


CPU_ONLY = pytest.mark.skipif(torch.cuda.is_available(), reason="the interpreter's scenario")
# the fresh-interpreter scenarios: CPU tensors through the interpreter, and a GPU where there is one
DEVICES = ["cpu", pytest.param("cuda:0", marks=pytest.mark.skipif(
    not torch.cuda.is_available(), reason="needs a CUDA device"))]


@pytest.mark.parametrize("device", DEVICES)
def test_triton_wrappers_load_in_a_new_process_without_compiling(model, tmp_path, device):
    """The three graphs (a kernel module; externs only, whose wrapper needs the Triton
    namespace, not the C++ one; an indirect read) are stored, then loaded: nothing traced or
    compiled in the warm process, outputs equal eager's on random inputs."""
    cache, interpret = tmp_path / "cache", device == "cpu"
    cold = _fresh(model, cache, "infer", device, interpret)
    assert cold["ok"] and cold["stores"] == 3 and cold["triton_graphs"] == 3, cold
    warm = _fresh(model, cache, "infer", device, interpret)
    assert warm["ok"] and warm["traced"] == [] and warm["hits"] == 3, warm
    assert warm["graphs_compiled"] == 0 and warm["stores"] == 0, warm
    assert (OFF_TRITON_HIT | {"sympy", "pydynamo.aot"}) & set(warm["imported"]) == set(), \
        warm["imported"]


@CPU_ONLY
def test_an_interpreted_entry_is_not_loaded_where_triton_does_not_interpret(model, tmp_path):
    """Kernels of CPU tensors run only under the interpreter: a process without it finds the
    entry stale (one log line) and compiles as a cold one does (codegen then runs the graph
    eagerly: compiled Triton cannot read CPU tensors), never a launch that fails."""
    cache = tmp_path / "cache"
    assert _fresh(model, cache, "infer")["stores"] == 3
    plain = _fresh(model, cache, "infer", interpret=False)
    assert plain["ok"] and plain["hits"] == 0 and plain["traced"] == ["fn", "mm_fn", "index_fn"]
    assert any("does not interpret" in m for m in plain["logs"]), plain["logs"]


@pytest.mark.parametrize("device", DEVICES)
def test_training_steps_load_triton_forward_and_backward(model, tmp_path, device):
    """The joints' compiled forward and backward are Triton wrappers; steps 1-2 and step 3 (the
    input requires grad too) are two entries."""
    cache, interpret = tmp_path / "cache", device == "cpu"
    cold = _fresh(model, cache, "train", device, interpret)
    assert cold["ok"] and cold["stores"] == 2 and cold["backward_compiled"] == 2, cold
    assert cold["triton_graphs"] == 4, cold
    warm = _fresh(model, cache, "train", device, interpret)
    assert warm["ok"] and warm["traced"] == [] and warm["hits"] == 2, warm
    assert warm["graphs_compiled"] == 0 and warm["backward_compiled"] == 0, warm
    assert OFF_TRITON_HIT & set(warm["imported"]) == set(), warm["imported"]


def test_what_a_reduce_overhead_hit_loads_imports_no_lowering():
    """A GPU hit in mode "reduce-overhead" loads the wrapper (run_wrapper, triton_runtime) and a
    new CUDA-graph runner (codegen/cudagraphs.py, whose counters are codegen.runtime's): in a
    fresh interpreter none of them imports the pipeline, its lowering or sympy (cudagraphs.py
    imported the pipeline for its counters; a CUDA device is needed to run such a hit, not to
    import it)."""
    script = ("import json, sys, torch, codegen.run_wrapper, codegen.triton_runtime, "
              "codegen.cudagraphs; print(json.dumps(sorted(sys.modules)))")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-3000:]
    imported = set(json.loads(r.stdout.strip().splitlines()[-1]))
    assert ((OFF_TRITON_HIT - {"codegen.cudagraphs"}) | {"sympy"}) & imported == set()


@pytest.mark.skipif(torch.cuda.device_count() < 2, reason="needs two GPUs")
def test_a_cuda1_tensor_never_hits_a_cuda0_entry(model, tmp_path):
    cache = tmp_path / "cache"
    assert _fresh(model, cache, "infer", "cuda:0", interpret=False)["stores"] == 3
    assert _fresh(model, cache, "infer", "cuda:0", interpret=False)["hits"] == 3
    other = _fresh(model, cache, "infer", "cuda:1", interpret=False)
    assert other["ok"] and other["hits"] == 0 and len(other["traced"]) == 3, other


# ---- in this process: the records themselves ---------------------------------------------

@CPU_ONLY
def test_a_cuda_graph_runner_is_stored_as_its_wrapper_and_wrapped_again(monkeypatch):
    """reduce-overhead: the record holds the wrapper and the runner's settings; a load builds a
    new runner (its captures are made again) around the rebuilt wrapper, with the wrapper's
    entry checks; its outputs equal eager's through warm-up, capture and replays."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import codegen
    from codegen.cudagraphs import CudaGraphRunner
    from pydynamo import warm_cache, warm_store

    def f(x):
        return (x * 3).sin() + 1
    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(6, 4)
    call = codegen.compile_fx(gm, [x], backend_kernels="triton")
    built = codegen.counters["graphs_compiled"]

    def round_trip(runner):
        rec = warm_store._wrapper_record("g", runner, pickle.dumps(gm))
        rec = pickle.loads(pickle.dumps(rec))       # (as stored)
        loaded = warm_cache._rebuild_compiled(rec, warm_cache._LazyGraph(rec[1]))
        assert rec[0] == "triton" and isinstance(loaded, CudaGraphRunner)
        assert loaded is not runner and loaded.fn is not call and loaded.entries == {}
        return rec, loaded
    rec, loaded = round_trip(CudaGraphRunner(call, [0], None, copy_back=[(0, 0)],
                                             outputs="copy_held"))
    assert rec[4]["cudagraphs"] == {"mutated": [0], "copy_back": [(0, 0)],
                                    "outputs": "copy_held", "matches": False}
    assert (loaded.mutated, loaded.copy_back, loaded.outputs, loaded.matches) == \
        ([0], [(0, 0)], "copy_held", None)
    _, loaded = round_trip(CudaGraphRunner(call, (), call.__globals__["matches"],
                                           outputs="static"))
    assert loaded.matches is loaded.fn.__globals__["matches"] and loaded.outputs == "static"
    loaded.device = Replayer()
    with torch.no_grad():
        for _ in range(5):          # warm-up calls, the capture, replays
            x = torch.randn(6, 4)
            assert torch.allclose(loaded(x), f(x), atol=1e-5)
    assert loaded.cg_stats["captures"] == 1 and loaded.cg_stats["replays"] >= 1, loaded.cg_stats
    assert codegen.counters["graphs_compiled"] == built


@CPU_ONLY
def test_a_runner_the_pipeline_wraps_is_recorded(monkeypatch):
    """On a GPU the pipeline's callable is the CUDA-graph runner TritonBackend.finish wraps
    around the wrapper function; the warm cache records that function, which must carry the
    wrapper's paths and launch spec itself (it did not: every reduce-overhead frame on an H100
    was 'not cached: a compiled function', session 17). finish wraps here as it does there."""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import codegen
    from codegen import gpu_wrapper
    from codegen.cudagraphs import CudaGraphRunner
    from pydynamo import warm_store
    monkeypatch.setattr(gpu_wrapper.TritonBackend, "finish",
                        lambda self, call, gm, g, options, stats, ns:
                        CudaGraphRunner(call, [], ns.get("matches"), outputs="static"))
    gm = torch.fx.symbolic_trace(lambda x: (x * 3).cos() - 1)
    runner = codegen.compile_fx(gm, [torch.randn(5, 3)], backend_kernels="triton")
    assert isinstance(runner, CudaGraphRunner)
    rec = warm_store._wrapper_record("g", runner, pickle.dumps(gm))
    assert rec[0] == "triton" and rec[4]["cudagraphs"]["outputs"] == "static"
    assert rec[3] == runner.kernel_source


def test_a_tensor_guard_record_keeps_the_device_index():
    """The stored TENSOR_MATCH spec is the traced tensor's, device index included, and the bound
    guard compares devices exactly (cuda:0 is not cuda:1; the C++ check compares c10 devices)."""
    from pydynamo import guards, tensor_check, warm_cache
    from pydynamo.sources import LocalSource
    spec = guards.TensorSpec(torch.Tensor, torch.float32, torch.device("cuda", 0), (2,), (1,),
                             False)
    rec = pickle.loads(pickle.dumps(("tensor", LocalSource("x"),
                                     (pickle.dumps(torch.Tensor), "torch", "Tensor", None),
                                     spec, None)))
    g = warm_cache._guard(rec, None, {}, {})
    assert g.expected.device == torch.device("cuda", 0) != torch.device("cuda", 1)
    with tensor_check.disabled():
        fn = guards.compile_guards([g], {})
    assert "device ==" in fn.source_text and "is_cpu" not in fn.source_text, fn.source_text


@CPU_ONLY
def test_a_cuda_entry_of_another_gpu_model_is_stale(monkeypatch):
    """The lowering chose layouts, padding and launch configurations for the GPU it compiled
    on: a record made for an H100 does not load on another model (Stale: the frame is traced
    and compiled again), and loads on the same one. (CUDA simulated: the record's device
    renamed, torch.cuda's answers patched.)"""
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    import codegen
    from pydynamo import warm_cache, warm_store

    def f(x):
        return x.exp() - 1
    gm = torch.fx.symbolic_trace(f)
    call = codegen.compile_fx(gm, [torch.randn(3, 4)], backend_kernels="triton")
    rec = warm_store._wrapper_record("g", call, pickle.dumps(gm))
    assert rec[4]["gpu"] is None                    # (a CPU entry: no model)
    rec[4].update(device="cuda:0", gpu=("NVIDIA H100 80GB HBM3", (9, 0)))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA A100-SXM4-80GB")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (8, 0))
    with pytest.raises(warm_cache.Stale, match="another GPU"):
        warm_cache._rebuild_compiled(rec, warm_cache._LazyGraph(rec[1]))
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda d: "NVIDIA H100 80GB HBM3")
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda d: (9, 0))
    monkeypatch.setattr(warm_cache.run_wrapper, "namespace", lambda *a: {"_externs": []})
    with pytest.raises(Exception) as e:     # past the model check: the (patched) namespace
        warm_cache._rebuild_compiled(rec, warm_cache._LazyGraph(rec[1]))
    assert not isinstance(e.value, warm_cache.Stale), e.value

"""First-call time of a new process: eager, pydynamo cold and warm (pydynamo/warm_cache.py), and
torch.compile with its caches warm, side by side (issue 20's acceptance: warm <= 2x eager).

    python benchmarks/warm_start.py [--models demo gpt2] [--backend codegen] [--repeat 3]

Every figure is the first call of a fresh process (`--child`), timed around the call only (the
model is built and the inputs made before it, under torch.no_grad(): inference on CPU):
  * eager: the model itself (its first call pays torch's one-time CPU kernel setup too);
  * pydynamo cold: an empty cache dir (tracing, codegen, C++ kernels compiled); and the same
    with pydynamo/meta_direct.py switched off ("torch's meta refs": every pointwise op's metadata
    from torch's Python references, whose first call imports torch._dynamo, as before it);
  * pydynamo warm: the cache the cold run filled (the frame loads from disk, kernels verified),
    `import pydynamo` inside the clock as for the other engines; and "imported before": the
    package (and its hit path) imported before the clock, as a script that imports it at its top
    pays it before building its model;
  * torch.compile cold / warm: inductor with an empty cache dir, then in a new process with the
    cache it filled (its FX-graph and AOT caches hit; dynamo traces again, as it does by default).
The warm row also splits its thread CPU time (medians): imports and optimize() (before the
call), the load of the cache entries (warm_cache.lookup: read, verify, bind guards, rebuild the
wrappers, load the kernel libraries), and the rest of the call (the compiled code's first run,
the frame hook). Eager and the warm runs are repeated (--repeat; the median is printed, runs interleaved); cold
runs once each. Ratios are against eager's median; "cpu ms" is the thread's CPU time of the call
(steadier than wall time on a shared machine; a compiler's child processes are not in it), and
"gc" the median part of it spent in the interpreter's cyclic garbage collector (a collection the
hit's allocations trigger walks every young object, the model's too: a deterministic 1.3-1.5 ms
on the demo's warm call in session 16; eager's first call allocates too little to trigger one). The
load average is printed: the acceptance figure (warm <= 2x eager) is for an idle machine.
    OMP_NUM_THREADS=1 python benchmarks/warm_start.py --models demo gpt2 --repeat 5

Caveats, stated so the figures are read right: children write bytecode caches into a temporary
pycache prefix filled by one throwaway run first (an installed package has its .pyc files; this
checkout runs with PYTHONDONTWRITEBYTECODE set); and pydynamo's version key (its files' names,
sizes and mtimes) is computed once here and handed to every child, so an edit of the tree by
someone else during the run does not turn the warm runs cold.
"""
from __future__ import annotations

import argparse
import gc
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def build(model: str):
    import torch
    torch.manual_seed(0)
    if model == "demo":
        from pydynamo.demo.model import build_model, example_inputs
        return build_model().eval(), (example_inputs(),)
    if model == "gpt2":
        import transformers
        from transformers import GPT2Config, GPT2Model
        transformers.logging.set_verbosity_error()
        return GPT2Model(GPT2Config()).eval(), (torch.randint(0, 50257, (1, 64)),)
    raise ValueError(model)


def child(model: str, engine: str, cache: str, backend: str, versions: str) -> dict:
    """One first call in this process (the --child side): timed from the built model to its
    first output, so the compilers' own imports (pydynamo's first call imports its tracing
    stack; torch.compile imports dynamo and inductor) count, as they do for a user."""
    import torch
    m, args = build(model)
    stats = {}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    if engine == "pydynamo-preimported":     # the package imported before the clock starts
        import pydynamo
        from pydynamo import convert_frame, warm_cache  # noqa: F401
    before = "torch._dynamo" in sys.modules      # (transformers imports it with the model)
    collections = []        # (the interpreter's cyclic GC inside the clock: its thread CPU time)

    def on_gc(phase, info):
        collections.append(time.thread_time() * (1 if phase == "stop" else -1))
    gc.callbacks.append(on_gc)
    with torch.no_grad():
        t0, c0 = time.perf_counter(), time.thread_time()
        if engine == "eager":
            fn = m
        elif engine.startswith("pydynamo"):
            import pydynamo
            if engine == "pydynamo-refs":
                from pydynamo import meta_direct
                meta_direct.run = lambda *a, **k: None
            from pydynamo import warm_cache     # (what the first call imports anyway: timed)
            warm_cache._versions[:] = [versions]
            pydynamo.config.cache_dir = cache
            pydynamo.config.warm_start = True
            fn = pydynamo.optimize(m, backend=backend)
            lookup, spent = warm_cache.lookup, []

            def timed_lookup(*a, **k):      # (the hit's load: read, verify, bind, rebuild)
                t = time.thread_time()
                try:
                    return lookup(*a, **k)
                finally:
                    spent.append(time.thread_time() - t)
            warm_cache.lookup = timed_lookup
        else:
            fn = torch.compile(m)
        c1 = time.thread_time()
        out = fn(*args)
        dt, cpu = time.perf_counter() - t0, time.thread_time() - c0
        gc.callbacks.remove(on_gc)
        in_gc = sum(collections[:len(collections) // 2 * 2])
        if engine.startswith("pydynamo"):
            # thread CPU time: imports and optimize(); the load of the entries; the rest of the call
            stats = dict(warm_cache.stats, split=[c1 - c0, sum(spent), cpu - (c1 - c0) - sum(spent)])
        want = m(*args)
    out = getattr(out, "last_hidden_state", out)
    want = getattr(want, "last_hidden_state", want)
    return {"seconds": dt, "cpu": cpu, "gc": in_gc, "ok": bool(torch.allclose(out, want, atol=1e-4)),
            "stats": dict(stats),
            "dynamo": "torch._dynamo" in sys.modules, "dynamo_before": before}


def run_child(model, engine, cache, backend, versions, env) -> dict:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", model, engine,
                        cache, backend, versions], capture_output=True, text=True, env=env,
                       timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"{model} {engine} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["demo", "gpt2"])
    ap.add_argument("--backend", default="codegen")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child", nargs=5)     # model engine cache backend versions
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(*a.child)))
        return
    load0 = f"{os.getloadavg()[0]:.2f}"
    from pydynamo import warm_cache
    versions = warm_cache.versions()
    tmp = tempfile.mkdtemp(prefix="warm-start-bench-")
    env = dict(os.environ, PYTHONPYCACHEPREFIX=os.path.join(tmp, "pyc"))
    env.pop("PYTHONDONTWRITEBYTECODE", None)
    rows = []
    try:
        for model in a.models:
            pd_cache, tc_cache = os.path.join(tmp, model, "pd"), os.path.join(tmp, model, "tc")
            run_child(model, "eager", "-", a.backend, versions, env)    # fills the pycache
            times = {"eager": [], "pydynamo warm": [], "pydynamo warm, imported before": [],
                     "torch.compile warm": []}
            splits = []
            cpus = {k: [] for k in times}
            gcs = {k: [] for k in times}
            cold = {"pydynamo cold": run_child(model, "pydynamo", pd_cache, a.backend, versions, env),
                    "pydynamo cold, torch's meta refs": run_child(
                        model, "pydynamo-refs", os.path.join(tmp, model, "pd-refs"), a.backend,
                        versions, env),
                    "torch.compile cold": run_child(model, "torch.compile", tc_cache, a.backend,
                                                    versions, env)}
            checks = [c["ok"] for c in cold.values()]
            for _ in range(a.repeat):
                for name, engine, cache in (("eager", "eager", "-"),
                                            ("pydynamo warm", "pydynamo", pd_cache),
                                            ("pydynamo warm, imported before",
                                             "pydynamo-preimported", pd_cache),
                                            ("torch.compile warm", "torch.compile", tc_cache)):
                    r = run_child(model, engine, cache, a.backend, versions, env)
                    times[name].append(r["seconds"])
                    cpus[name].append(r["cpu"])
                    gcs[name].append(r["gc"])
                    checks.append(r["ok"])
                    if engine.startswith("pydynamo") and r["stats"].get("hits", 0) < 1:
                        raise RuntimeError(f"{model}: the warm run missed the cache: {r['stats']}")
                    if engine == "pydynamo":
                        splits.append(r["stats"]["split"])
            eager = statistics.median(times["eager"])
            eager_cpu = statistics.median(cpus["eager"])
            for name in ("eager", "pydynamo cold", "pydynamo cold, torch's meta refs",
                         "pydynamo warm", "pydynamo warm, imported before", "torch.compile cold",
                         "torch.compile warm"):
                t = statistics.median(times[name]) if name in times else cold[name]["seconds"]
                c = statistics.median(cpus[name]) if name in times else cold[name]["cpu"]
                spread = f"{min(times[name]):.3f}-{max(times[name]):.3f}" if name in times else "(1 run)"
                if name.startswith("pydynamo cold"):
                    spread += (" torch._dynamo imported by the model's library" if
                               cold[name]["dynamo_before"] else " torch._dynamo imported"
                               if cold[name]["dynamo"] else " no torch._dynamo")
                if name == "pydynamo warm":
                    spread += " cpu: imports+optimize %.1f, load %.1f, call %.1f ms" % tuple(
                        statistics.median(s[i] for s in splits) * 1e3 for i in range(3))
                if name in gcs:
                    spread += " (gc %.1f ms)" % (statistics.median(gcs[name]) * 1e3)
                rows.append((model, name, t, t / eager, c, c / eager_cpu, spread))
            if not all(checks):
                raise RuntimeError(f"{model}: a compiled output differs from eager")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    print(f"first call of a new process (CPU, inference, backend={a.backend}, median of "
          f"{a.repeat} for eager and warm; OMP_NUM_THREADS={os.environ.get('OMP_NUM_THREADS')}); "
          f"load average before {load0}, after {os.getloadavg()[0]:.2f}")
    print(f"{'model':6} {'engine':33} {'wall ms':>9} {'x eager':>8} {'cpu ms':>9} {'x eager':>8}"
          f"  wall range (s)")
    for model, name, t, ratio, c, cratio, spread in rows:
        print(f"{model:6} {name:33} {t * 1e3:9.1f} {ratio:8.2f} {c * 1e3:9.1f} {cratio:8.2f}  {spread}")


if __name__ == "__main__":
    main()

"""First-call time of a new process: eager, pydynamo cold and warm (pydynamo/warm_cache.py), and
torch.compile with its caches warm, side by side (issue 20's acceptance: warm <= 2x eager).

    python benchmarks/warm_start.py [--models demo gpt2] [--backend codegen] [--repeat 3]
                                    [--no-torch-compile]

Every figure is the first call of a fresh process (`--child`), timed around the call only (the
model is built and the inputs made before it, under torch.no_grad(): inference on CPU; eager's
figure leaves `import torch` out, as every row does):
  * eager: the model itself (its first call pays torch's one-time CPU kernel setup too);
  * pydynamo cold: an empty cache dir (tracing, codegen, C++ kernels compiled); and the same
    with pydynamo/meta_direct.py switched off ("torch's meta refs": every pointwise op's metadata
    from torch's Python references, whose first call imports torch._dynamo, as before it);
  * pydynamo warm: the cache the cold run filled (the frame loads from disk, kernels verified),
    `import pydynamo` and optimize() inside the clock as for the other engines (the strict row);
  * pydynamo warm, setup lines before: a user's script, which runs `import pydynamo` and
    `pydynamo.optimize(model)` as setup lines before its first call: exactly those two lines
    before the clock (the warm cache on through $PYDYNAMO_WARM_START and $PYDYNAMO_CACHE_DIR, as
    a user turns it on), nothing else imported. With the warm cache on, optimize() imports the
    hit path (convert_frame, warm_cache, guards, sources, installed, codegen's runtime,
    run_wrapper and codecache), loads the C++ guard extension and computes the version key and
    the kernel cache's toolchain (eval_frame._prepare_warm_start, warm_cache.prepare), as
    torch.compile imports its stack when it wraps: those moved out of the first call into
    optimize(), whose cost the row prints as "setup before the clock" (`import pydynamo`
    itself is unchanged: the package, explain, exc and records, about 1.2 ms; optimize() with
    the warm cache on 14-15 ms, off 7.5 ms, in a fresh interpreter after torch, session 17).
    What the first call still does: find, read and verify the entry, bind its guards, rebuild
    the wrapper, load the kernel library, run;
  * pydynamo warm, imported before: the package's convert_frame and warm_cache imported before
    the clock, optimize() (and its setup) inside it;
  * torch.compile cold / warm: inductor with an empty cache dir, then in a new process with the
    cache it filled (its FX-graph and AOT caches hit; dynamo traces again, as it does by default).
    `--no-torch-compile` leaves these out (and the torch's-meta-refs cold row).
The warm rows also split their thread CPU time (medians): imports and optimize() (inside the
clock), the load of the cache entries (warm_cache.lookup: read, verify, bind guards, rebuild the
wrappers, load the kernel libraries), and the rest of the call (the compiled code's first run,
the frame hook). Eager and the warm runs are repeated (--repeat; the median is printed, runs
interleaved); cold runs once each. Ratios are against eager's median; "cpu ms" is the thread's
CPU time of the call (steadier than wall time on a shared machine; a compiler's child processes
are not in it), and "gc" the median part of it spent in the interpreter's cyclic garbage
collector (a collection the hit's allocations trigger walks every young object; a generation-1
one, 1.5-2.5 ms, lands in the strict row's imports: eager's first call allocates too little to
trigger any). The load average is printed: the acceptance figure (warm <= 2x eager) is for an
idle machine.
    OMP_NUM_THREADS=1 python benchmarks/warm_start.py --models demo gpt2 --repeat 5

Caveats, stated so the figures are read right: children write bytecode caches into a temporary
pycache prefix filled by one throwaway run first (an installed package has its .pyc files; this
checkout runs with PYTHONDONTWRITEBYTECODE set); and pydynamo's version key (its files' names,
sizes and mtimes) is computed in each warm child, inside the clock or in optimize() as a user's
process computes it, and then replaced by the one computed here, so an edit of the tree by
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
    stack; torch.compile imports dynamo and inductor) count, as they do for a user; the
    "pydynamo-setup" engine runs a script's setup lines first (see the module docstring)."""
    if engine == "pydynamo-setup":      # a user's environment: read by pydynamo.config at import
        os.environ.update(PYDYNAMO_WARM_START="1", PYDYNAMO_CACHE_DIR=cache)
    import torch
    m, args = build(model)
    stats = {}
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = cache
    if engine == "pydynamo-preimported":     # the package imported before the clock starts
        import pydynamo
        from pydynamo import convert_frame, warm_cache  # noqa: F401
    setup = 0.0
    if engine == "pydynamo-setup":      # a script's setup lines, exactly, before the clock
        s0 = time.thread_time()
        import pydynamo
        fn = pydynamo.optimize(m, backend=backend)
        setup = time.thread_time() - s0
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
            # the version key is computed (a user's first call pays it, here or in optimize())
            # and then pinned to the parent's, so an edit of the tree during the run does not
            # turn the warm runs cold
            warm_cache.versions()
            warm_cache._versions[:] = [versions]
            if engine != "pydynamo-setup":
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
            # thread CPU time: imports and optimize() (setup: before the clock); the load of
            # the entries; the rest of the call
            stats = dict(warm_cache.stats, split=[c1 - c0, sum(spent), cpu - (c1 - c0) - sum(spent)],
                         setup=setup)
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


SETUP_ROW = "pydynamo warm, setup lines before"    # `import pydynamo` + optimize() before the clock


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", nargs="+", default=["demo", "gpt2"])
    ap.add_argument("--backend", default="codegen")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--no-torch-compile", action="store_true",
                    help="leave out the torch.compile rows (and the torch's-meta-refs cold row)")
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
    for name in ("PYDYNAMO_WARM_START", "PYDYNAMO_CACHE_DIR"):   # (the children set their own)
        env.pop(name, None)
    reference = not a.no_torch_compile
    warm = [("eager", "eager", None), ("pydynamo warm", "pydynamo", "pd"),
            (SETUP_ROW, "pydynamo-setup", "pd"),
            ("pydynamo warm, imported before", "pydynamo-preimported", "pd")]
    warm += [("torch.compile warm", "torch.compile", "tc")] if reference else []
    rows = []
    try:
        for model in a.models:
            caches = {"pd": os.path.join(tmp, model, "pd"), "tc": os.path.join(tmp, model, "tc"),
                      None: "-"}
            run_child(model, "eager", "-", a.backend, versions, env)    # fills the pycache
            times = {name: [] for name, _, _ in warm}
            splits = {name: [] for name, _, _ in warm}
            cpus = {k: [] for k in times}
            gcs = {k: [] for k in times}
            cold = {"pydynamo cold": run_child(model, "pydynamo", caches["pd"], a.backend, versions, env)}
            if reference:
                cold["pydynamo cold, torch's meta refs"] = run_child(
                    model, "pydynamo-refs", os.path.join(tmp, model, "pd-refs"), a.backend,
                    versions, env)
                cold["torch.compile cold"] = run_child(model, "torch.compile", caches["tc"],
                                                       a.backend, versions, env)
            checks = [c["ok"] for c in cold.values()]
            for _ in range(a.repeat):
                for name, engine, cache in warm:
                    r = run_child(model, engine, caches[cache], a.backend, versions, env)
                    times[name].append(r["seconds"])
                    cpus[name].append(r["cpu"])
                    gcs[name].append(r["gc"])
                    checks.append(r["ok"])
                    if engine.startswith("pydynamo") and r["stats"].get("hits", 0) < 1:
                        raise RuntimeError(f"{model}: the warm run missed the cache: {r['stats']}")
                    if engine.startswith("pydynamo"):
                        splits[name].append(r["stats"]["split"] + [r["stats"]["setup"]])
            eager = statistics.median(times["eager"])
            eager_cpu = statistics.median(cpus["eager"])
            order = ["eager", "pydynamo cold", "pydynamo cold, torch's meta refs", "pydynamo warm",
                     SETUP_ROW, "pydynamo warm, imported before", "torch.compile cold",
                     "torch.compile warm"]
            for name in [n for n in order if n in times or n in cold]:
                t = statistics.median(times[name]) if name in times else cold[name]["seconds"]
                c = statistics.median(cpus[name]) if name in times else cold[name]["cpu"]
                spread = f"{min(times[name]) * 1e3:.1f}-{max(times[name]) * 1e3:.1f}" \
                    if name in times else "(1 run)"
                if name.startswith("pydynamo cold"):
                    spread += (" torch._dynamo imported by the model's library" if
                               cold[name]["dynamo_before"] else " torch._dynamo imported"
                               if cold[name]["dynamo"] else " no torch._dynamo")
                med = [statistics.median(s[i] for s in splits[name]) * 1e3 for i in range(4)] \
                    if splits.get(name) else None
                if name == "pydynamo warm":
                    spread += " cpu: imports+optimize %.1f, load %.1f, call %.1f ms" % tuple(med[:3])
                elif name == SETUP_ROW:
                    spread += " cpu: load %.1f, call %.1f ms; setup before the clock %.1f ms" % (
                        med[1], med[2], med[3])
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
          f"  wall range (ms)")
    for model, name, t, ratio, c, cratio, spread in rows:
        print(f"{model:6} {name:33} {t * 1e3:9.1f} {ratio:8.2f} {c * 1e3:9.1f} {cratio:8.2f}  {spread}")


if __name__ == "__main__":
    main()

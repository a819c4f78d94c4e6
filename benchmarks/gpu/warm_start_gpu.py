"""Warm start on the GPU (issue 20): a model's first call in a new process, eager, pydynamo cold
(empty caches: tracing, codegen, Triton compiling) and pydynamo warm (the frame entries the cold
process stored: nothing traced, no graph compiled; the Triton kernels re-created from their
stored source, which Triton's own on-disk cache, filled by the cold run, makes a hit), in mode
"default" and "reduce-overhead" (CUDA-graph replay: a warm runner captures again).

    python benchmarks/gpu/warm_start_gpu.py [--model demo|gpt2-tiny] [--modes default reduce-overhead]
    python benchmarks/gpu/warm_start_gpu.py --device cpu --smoke   (this CPU: the same Triton
        kernels on CPU tensors through Triton's interpreter, TRITON_INTERPRET=1; a small input)

Each figure is a fresh process (`--child`): the model built and moved to the device and the
inputs made before the clock; the clock covers `import pydynamo`, optimize() and the first call
(synchronized). Each child then calls CALLS more times on new random inputs (reduce-overhead:
the warm-up calls, the capture, replays) and checks every output against eager's. The checks
that fail the script (exit 1): a compiled output differs from eager's; the cold run stored no
entry; the warm run traced a frame, compiled a graph or missed the cache. With two GPUs or more a
third process runs the warm cache on cuda:1 and must not hit (the device index is guarded), its
outputs equal eager's. Per mode both caches (pydynamo's and Triton's, $TRITON_CACHE_DIR) start
empty. pydynamo's version key is computed once here and handed to the children (an edit of the
tree by someone else during the run does not turn the warm runs cold). The load average is
printed; with OMP_NUM_THREADS=1 on a shared CPU.
"""
from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
CALLS = 5


def build(model: str, device: str, smoke: bool):
    import torch
    torch.manual_seed(0)
    if model == "demo":
        from pydynamo.demo.model import build_model, example_inputs
        m = build_model().to(device)
        return m, lambda seed: (example_inputs(batch=1 if smoke else 2, seq=8 if smoke else 64,
                                               seed=seed).to(device),)
    if model == "gpt2-tiny":
        import transformers
        from transformers import GPT2Config, GPT2Model
        transformers.logging.set_verbosity_error()
        cfg = GPT2Config(n_layer=2, n_embd=64, n_head=4, n_positions=128, vocab_size=1000)
        m = GPT2Model(cfg).eval().to(device)
        seq = 8 if smoke else 64

        def inputs(seed):
            g = torch.Generator().manual_seed(seed)
            return (torch.randint(0, cfg.vocab_size, (1, seq), generator=g).to(device),)
        return m, inputs
    raise ValueError(model)


def _out(x):
    return getattr(x, "last_hidden_state", x)


def child(model: str, engine: str, mode: str, device: str, cache: str, versions: str,
          smoke: bool) -> dict:
    import torch
    m, inputs = build(model, device, smoke)
    cuda = device.startswith("cuda")
    if cuda:
        torch.cuda.set_device(torch.device(device))

    def sync():
        if cuda:
            torch.cuda.synchronize()
    report = {}
    with torch.no_grad():
        args = inputs(0)
        sync()
        t0 = time.perf_counter()
        if engine == "eager":
            fn = m
        else:
            import pydynamo
            import codegen
            from pydynamo import convert_frame, warm_cache
            warm_cache._versions[:] = [versions]
            logs = []

            class Keep(logging.Handler):      # why a frame was not stored, or not loaded
                def emit(self, record):
                    logs.append(record.getMessage())
            logging.getLogger("pydynamo.warm_cache").addHandler(Keep())
            logging.getLogger("pydynamo.warm_cache").setLevel(logging.INFO)
            pydynamo.config.cache_dir = cache
            pydynamo.config.warm_start = True
            traced, real = [], convert_frame.translate

            def counting(code, *a, **k):
                traced.append(code.co_qualname)
                return real(code, *a, **k)
            convert_frame.translate = counting
            # on CPU the Triton backend is asked for by name (kernels on CPU tensors, interpreted)
            options = None if cuda else {"backend_kernels": "triton"}
            fn = pydynamo.optimize(m, backend="codegen", mode=mode, options=options)
        out = _out(fn(*args))
        sync()
        report["seconds"] = time.perf_counter() - t0
        ok = bool(torch.allclose(out, _out(m(*args)), atol=1e-4, rtol=1e-4))
        for seed in range(1, CALLS + 1):        # (reduce-overhead: warm-up, capture, replays)
            args = inputs(seed)
            ok = ok and bool(torch.allclose(_out(fn(*args)), _out(m(*args)), atol=1e-4,
                                            rtol=1e-4))
        sync()
    report["ok"] = ok
    if engine != "eager":
        report.update(traced=traced, hits=warm_cache.stats["hits"],
                      stores=warm_cache.stats["stores"],
                      uncacheable=warm_cache.stats["uncacheable"],
                      graphs_compiled=codegen.counters["graphs_compiled"],
                      triton_graphs=codegen.counters["triton_graphs_compiled"],
                      eager_graphs=codegen.counters["eager_fallback_graphs"], logs=logs)
    return report


def run_child(env, *argv) -> dict:
    r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", *argv],
                       capture_output=True, text=True, env=env, timeout=1800, cwd=ROOT)
    if r.returncode != 0:
        raise RuntimeError(f"{argv[:3]} failed:\n{r.stderr[-3000:]}")
    return json.loads(r.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="demo", choices=["demo", "gpt2-tiny"])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--modes", nargs="+", default=["default", "reduce-overhead"])
    ap.add_argument("--smoke", action="store_true", help="a small input (this CPU's check)")
    ap.add_argument("--child", nargs=7)    # model engine mode device cache versions smoke
    a = ap.parse_args()
    if a.child:
        *rest, smoke = a.child
        print(json.dumps(child(*rest, smoke == "1")))
        return 0
    import torch
    from pydynamo import warm_cache
    versions = warm_cache.versions()
    device = str(torch.device(a.device if a.device != "cuda" else "cuda:0"))
    cuda = device.startswith("cuda")
    if cuda and not torch.cuda.is_available():
        print("no CUDA device here: run with --device cpu --smoke")
        return 2
    tmp = tempfile.mkdtemp(prefix="warm-start-gpu-")
    env = dict(os.environ, PYTHONPATH=ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""))
    if not cuda:
        env["TRITON_INTERPRET"] = "1"
    smoke = "1" if a.smoke else "0"
    failures, rows = [], []
    load0 = os.getloadavg()[0]
    try:
        for mode in a.modes:
            cache = os.path.join(tmp, mode, "pydynamo")
            menv = dict(env, TRITON_CACHE_DIR=os.path.join(tmp, mode, "triton"))
            eager = run_child(menv, a.model, "eager", mode, device, "-", versions, smoke)
            cold = run_child(menv, a.model, "pydynamo", mode, device, cache, versions, smoke)
            warm = run_child(menv, a.model, "pydynamo", mode, device, cache, versions, smoke)
            runs = [("eager", eager), ("pydynamo cold", cold), ("pydynamo warm", warm)]
            if not all(r["ok"] for _, r in runs):
                failures.append(f"{mode}: a compiled output differs from eager's")
            if cold["stores"] < 1 or cold["triton_graphs"] < 1:
                failures.append(f"{mode}: the cold run stored {cold['stores']} entries, compiled "
                                f"{cold['triton_graphs']} Triton graphs")
            if warm["traced"] or warm["graphs_compiled"] or warm["hits"] < 1:
                failures.append(f"{mode}: the warm run traced {warm['traced']}, compiled "
                                f"{warm['graphs_compiled']} graphs, hit {warm['hits']}")
            if cuda and torch.cuda.device_count() > 1:
                other = run_child(menv, a.model, "pydynamo", mode, "cuda:1", cache, versions,
                                  smoke)
                runs.append(("pydynamo on cuda:1 (must miss)", other))
                if other["hits"] or not other["ok"]:
                    failures.append(f"{mode}: cuda:1 hit {other['hits']} cuda:0 entries "
                                    f"(ok={other['ok']})")
            for name, r in runs:
                extra = "" if name == "eager" else (
                    f"traced {len(r['traced'])}, graphs compiled {r['graphs_compiled']}, "
                    f"hits {r['hits']}, stores {r['stores']}, eager graphs {r['eager_graphs']}")
                rows.append((mode, name, r["seconds"], r["seconds"] / eager["seconds"], extra,
                             r.get("logs", [])))
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    where = torch.cuda.get_device_name(device) if cuda else "CPU, Triton interpreted"
    print(f"# warm start on {device} ({where}), model {a.model}{' (smoke)' if a.smoke else ''}, "
          f"load average {load0:.2f} -> {os.getloadavg()[0]:.2f}")
    print(f"{'mode':<16} {'run':<32} {'first call s':>12} {'x eager':>8}  what the cache did")
    for mode, name, s, ratio, extra, _ in rows:
        print(f"{mode:<16} {name:<32} {s:>12.3f} {ratio:>8.2f}  {extra}")
    for f in failures:
        print("FAILED:", f)
    if failures:
        for mode, name, *_ , logs in rows:
            for line in logs:
                print(f"  {mode} {name}: {line}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

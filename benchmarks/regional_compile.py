"""Regional compilation (issue 20): the first call of GPT-2 small (12 layers) and a 24-layer BERT
(BERT-large's shape) compiled whole, with pydynamo's region templates off and on (level B: traced
once), and with templates on and codegen's `compile_regions` (level C: each block's sub-graph
compiled once and called per layer), against torch.compile of the whole model and torch's
regional recipe (`block.compile()` per layer).

    python benchmarks/regional_compile.py [--repeat N] [--models gpt2,bert] [--no-torch]

CPU, inference under no_grad, ids 1 x 32, random weights, eager attention, use_cache off.
pydynamo: backend codegen, one graph per model; each run is a fresh process with a fresh
PYDYNAMO_CACHE_DIR (cold: g++ builds every library). Its columns: the first call's wall time,
the perf clock's tracing phase, graph passes (lowering, scheduling), codegen (printing kernels
and wrappers) and C++ compile, and all compile phases together (tracing + graph passes +
codegen + C++ compile + loading); every mode also the median of 5 later calls (steady state:
level C gives up fusion across a block's boundary). torch.compile: a fresh inductor cache dir with the FX graph
and autograd caches off; its regional recipe with recompile_limit raised to 64 so every block
is compiled (at the default 8 the blocks past the 8th ran eagerly on this torch). Every
first call's output is checked against eager. Ranges over --repeat runs (the machine is shared).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODES = ["pd_off", "pd_on", "pd_c", "torch_whole", "torch_regional"]
LABELS = {"pd_off": "pydynamo (templates off)", "pd_on": "pydynamo (templates on)",
          "pd_c": "pydynamo (templates on, compile_regions)",
          "torch_whole": "torch.compile whole", "torch_regional": "torch.compile regional"}


def build(kind):
    import torch
    import transformers
    torch.manual_seed(0)
    if kind == "gpt2":
        cfg = transformers.GPT2Config(n_layer=12, use_cache=False)
        cfg._attn_implementation = "eager"
        m = transformers.GPT2Model(cfg).eval()
        return m, m.h, torch.randint(0, cfg.vocab_size, (1, 32))
    cfg = transformers.BertConfig(num_hidden_layers=24, hidden_size=1024, num_attention_heads=16,
                                  intermediate_size=4096)
    cfg._attn_implementation = "eager"
    m = transformers.BertModel(cfg).eval()
    return m, m.encoder.layer, torch.randint(0, cfg.vocab_size, (1, 32))


def one(kind, mode):
    """Child process: one cold first call; prints a JSON line."""
    if mode.startswith("torch"):
        os.environ["TORCHINDUCTOR_CACHE_DIR"] = tempfile.mkdtemp()
        os.environ["TORCHINDUCTOR_FX_GRAPH_CACHE"] = "0"
        os.environ["TORCHINDUCTOR_AUTOGRAD_CACHE"] = "0"
    import torch
    m, blocks, ids = build(kind)
    with torch.no_grad():
        ref = m(ids)[0]
    row = {"model": kind, "mode": mode}
    if mode.startswith("pd"):
        import pydynamo
        from pydynamo import config, convert_frame
        from pydynamo.executor import regions
        from codegen.runtime import counters
        config.region_templates = mode != "pd_off"
        records = []
        convert_frame.RECORDERS.append(records.append)
        f = pydynamo.optimize(m, options={"compile_regions": mode == "pd_c"})
        t = time.perf_counter()
        with torch.no_grad():
            out = f(ids)[0]
        row["first"] = time.perf_counter() - t
        phases = {}
        for r in records:
            for k, v in getattr(getattr(r, "times", None), "seconds", {}).items():
                phases[k] = phases.get(k, 0) + v
        for k in ("tracing", "graph passes", "codegen", "compile"):
            row[k] = phases.get(k, 0.0)
        row["compile phases"] = sum(phases.values())
        row["region compiles"] = counters["region_graphs_compiled"]
        row["graphs"] = sum(len(r.graphs) for r in records if hasattr(r, "graphs"))
        row["replayed"] = regions.STATS["replayed"]
    else:
        import torch._dynamo
        if mode == "torch_whole":
            f = torch.compile(m)
        else:
            torch._dynamo.config.recompile_limit = 64
            for blk in blocks:
                blk.compile()
            f = m
        t = time.perf_counter()
        with torch.no_grad():
            out = f(ids)[0]
        row["first"] = time.perf_counter() - t
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    steady = []
    with torch.no_grad():
        for _ in range(5):
            t = time.perf_counter()
            out = f(ids)[0]
            steady.append(time.perf_counter() - t)
    row["steady_ms"] = sorted(steady)[2] * 1e3
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-4)
    print(json.dumps(row))


def rng(vals, fmt="{:.1f}"):
    vals = [v for v in vals if v is not None]
    if not vals:
        return "-"
    lo, hi = min(vals), max(vals)
    return fmt.format(lo) if len(vals) == 1 or fmt.format(lo) == fmt.format(hi) else \
        f"{fmt.format(lo)}-{fmt.format(hi)}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--one", nargs=2)
    ap.add_argument("--repeat", type=int, default=2)
    ap.add_argument("--models", default="gpt2,bert")
    ap.add_argument("--no-torch", action="store_true")
    a = ap.parse_args()
    if a.one:
        return one(*a.one)
    rows = []
    for kind in a.models.split(","):
        for rep in range(a.repeat):
            for mode in MODES:
                if mode.startswith("torch") and (a.no_torch or rep > 0):
                    continue    # torch.compile once per model (minutes each)
                env = dict(os.environ, PYDYNAMO_CACHE_DIR=tempfile.mkdtemp(prefix="pd-regional-"))
                p = subprocess.run([sys.executable, __file__, "--one", kind, mode], env=env, cwd=REPO,
                                   capture_output=True, text=True)
                line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
                if p.returncode or not line:
                    print(f"{kind} {mode}: failed\n{p.stderr[-2000:]}", file=sys.stderr)
                    continue
                rows.append(json.loads(line[-1]))
                print("  ", line[-1], file=sys.stderr)
    for kind in a.models.split(","):
        got = {mode: [r for r in rows if r["model"] == kind and r["mode"] == mode] for mode in MODES}
        print(f"\n{kind}: first call and phases (s), steady call (ms), range over runs")
        print("| | " + " | ".join(LABELS[m] for m in MODES) + " |")
        print("|---|" + "---|" * len(MODES))
        print("| first call | " + " | ".join(rng([r["first"] for r in got[m]]) for m in MODES) + " |")
        for k in ("tracing", "graph passes", "codegen", "compile"):
            print(f"| {k} | " + " | ".join(rng([r.get(k) for r in got[m]], "{:.2f}") for m in MODES) + " |")
        print("| compile phases | " + " | ".join(rng([r.get("compile phases") for r in got[m]]) for m in MODES) + " |")
        print("| steady call (ms) | " + " | ".join(rng([r.get("steady_ms") for r in got[m]]) for m in MODES) + " |")
        print("| graphs / replayed calls / region compiles | " + " | ".join(
            (f"{got[m][0]['graphs']} / {got[m][0]['replayed']} / {got[m][0]['region compiles']}"
             if got[m] and "graphs" in got[m][0] else "-") for m in MODES) + " |")

        def med(m, k):
            v = sorted(r[k] for r in got[m] if r.get(k) is not None)
            return v[len(v) // 2] if v else None
        ratios = []
        for k in ("tracing", "first"):
            # off/on of the runs made one after the other (the load drifts between repeats)
            pairs = [a[k] / b[k] for a, b in zip(got["pd_off"], got["pd_on"]) if b.get(k)]
            if pairs:
                ratios.append(f"{'first call' if k == 'first' else k} off/on {rng(pairs, '{:.2f}')}x")
        for k in ("first", "compile phases"):
            pairs = [a[k] / b[k] for a, b in zip(got["pd_on"], got["pd_c"]) if b.get(k)]
            if pairs:
                ratios.append(f"{'first call' if k == 'first' else k} templates on / compile_regions "
                              f"{rng(pairs, '{:.2f}')}x")
        for m in ("torch_whole", "torch_regional"):
            for p in ("pd_on", "pd_c"):
                if med(m, "first") and med(p, "first"):
                    ratios.append(f"{LABELS[m]} / {LABELS[p]} (medians) "
                                  f"{med(m, 'first') / med(p, 'first'):.1f}x")
        print("ratios: " + "; ".join(ratios))


if __name__ == "__main__":
    main()

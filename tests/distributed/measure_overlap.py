"""Issue 22's CPU figures: eager DDP against pydynamo under DDP (gloo, 2 ranks, loopback).

    python tests/distributed/measure_overlap.py MODELS BACKENDS [BUCKET_CAP_MB] [--no-split]

MODELS, BACKENDS: comma lists (workloads.MODELS; "aot_eager", "codegen", ...). Per model and
backend, per rank: the largest loss and parameter difference from eager DDP after 5 SGD steps,
frames and graphs compiled, compiled backward pieces per step, the aot counters, and the last
step's DDP bucket all-reduce launches and completions as (bucket, compiled backward pieces begun
before it): a bucket that completes before the last piece begins overlapped the backward.
--no-split: pydynamo.config.optimize_ddp = False (one Function per graph: issue 22's "before").
"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
import workloads  # noqa: E402


def main(argv):
    flags = [a for a in argv if a.startswith("--")]
    args = [a for a in argv if not a.startswith("--")]
    models, backends = args[0].split(","), args[1].split(",")
    cap = float(args[2]) if len(args) > 2 else None
    kw = {"config": {"optimize_ddp": False}} if "--no-split" in flags else {}
    for model in models:
        t = time.time()
        ref = harness.run_ranks(workloads.train_kw, model, None, cap, {}, timeout=600)
        print(f"{model} eager DDP ({time.time() - t:.1f}s): last step's launches "
              f"{ref[0]['traces'][-1]}", flush=True)
        for backend in backends:
            t = time.time()
            out = harness.run_ranks(workloads.train_kw, model, backend, cap, kw, timeout=600)
            for r, (o, e) in enumerate(zip(out, ref)):
                dl = (o["losses"] - e["losses"]).abs().max().item()
                dp = max((o["params"][k] - v).abs().max().item() for k, v in e["params"].items())
                print(f"{model} {backend} rank {r} ({time.time() - t:.1f}s): max|dloss| {dl:.3g} "
                      f"max|dparam| {dp:.3g} frames {o['frames']} graphs {o['graphs']} "
                      f"pieces/step {o['pieces']} {o['counters']}\n    last step's launches "
                      f"(bucket, pieces begun before): {o['traces'][-1]}; completions "
                      f"{o['completions'][-1]}", flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])

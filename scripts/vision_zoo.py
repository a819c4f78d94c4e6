"""Vision models nobody here wrote, compiled and compared with eager (issue 14's re-check).

    python scripts/vision_zoo.py [--backends eager,codegen] [--modes eval,train] [--jobs 8]
                                 [--models resnet18,...] [--size 64] [--timeout 300] [--out f.jsonl]

Every classification model of torchvision (`torchvision.models.list_models`, random weights,
nothing downloaded) runs on a random batch of 2 at `--size` pixels, eagerly and under
`pydynamo.optimize(backend=...)`, on the CPU: in eval mode (logits compared) and in train mode
(logits and every buffer after the call: batch-norm statistics are in-place updates;
dropout and stochastic depth set to p=0, as the compiled RNG stream need not be eager's). Each
(model, backend, mode) runs in its own process, with the same seeded weights and input for eager
and compiled. A model eager itself cannot run at that size is skipped. Prints one line per run
and the counts; exit status 1 when any result is wrong or pydynamo raised where eager worked.
torchvision is not a dependency of the project: without it the script says so and exits 0.
"""
from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import os
import sys
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _run(task):
    name, backend, mode, size = task
    sys.path.insert(0, REPO)
    import torch
    import torchvision
    import pydynamo
    torch.manual_seed(0)
    try:
        model = torchvision.models.get_model(name, weights=None, num_classes=10)
    except TypeError:
        model = torchvision.models.get_model(name, weights=None)
    model.train(mode == "train")
    for m in model.modules():       # train mode tests batch-norm updates, not RNG streams
        if "Dropout" in type(m).__name__ or "StochasticDepth" in type(m).__name__:
            m.p = 0.0
    x = torch.randn(2, 3, size, size)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    try:
        torch.manual_seed(1)        # any random op in a forward draws the same numbers
        with torch.no_grad():
            want = model(x)
    except Exception as e:          # the model needs another input size: not ours to judge
        return {"model": name, "backend": backend, "mode": mode, "status": "skip",
                "why": f"eager: {type(e).__name__}: {str(e)[:120]}"}
    want = getattr(want, "logits", want)
    want_state = {k: v.clone() for k, v in model.state_dict().items()}
    model.load_state_dict(state)
    t0 = time.perf_counter()
    pydynamo.reset()
    opt = pydynamo.optimize(model, backend=backend)
    try:
        torch.manual_seed(1)
        with torch.no_grad():
            got = opt(x)
    except Exception as e:
        return {"model": name, "backend": backend, "mode": mode, "status": "error",
                "why": f"{type(e).__name__}: {str(e)[:300]}"}
    got = getattr(got, "logits", got)
    secs = time.perf_counter() - t0
    bad = []
    scale = max(1.0, float(want.abs().max()))
    err = float((got - want).abs().max()) / scale
    if got.shape != want.shape or not err < 1e-3:
        bad.append(f"logits off by {err:.3g} (relative to max |logit|)")
    for k, v in model.state_dict().items():
        w = want_state[k]
        if v.dtype.is_floating_point:
            if not torch.allclose(v, w, rtol=1e-4, atol=1e-5):
                bad.append(f"buffer {k} off by {float((v - w).abs().max()):.3g}")
        elif not torch.equal(v, w):
            bad.append(f"buffer {k}: {v.flatten()[:3].tolist()} vs eager {w.flatten()[:3].tolist()}")
    return {"model": name, "backend": backend, "mode": mode,
            "status": "wrong" if bad else "ok", "why": "; ".join(bad[:3]),
            "err": err, "seconds": round(secs, 1)}


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--backends", default="eager,codegen")
    ap.add_argument("--modes", default="eval,train")
    ap.add_argument("--models", default="")
    ap.add_argument("--size", type=int, default=64)
    ap.add_argument("--jobs", type=int, default=max(1, (os.cpu_count() or 2) // 2))
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds per run")
    ap.add_argument("--out", default="")
    ns = ap.parse_args(argv)
    try:
        import torchvision
    except ImportError:
        print("torchvision is not installed: nothing to run")
        return 0
    names = ns.models.split(",") if ns.models else \
        sorted(torchvision.models.list_models(module=torchvision.models))
    tasks = [(n, b, m, ns.size) for n in names for b in ns.backends.split(",")
             for m in ns.modes.split(",")]
    ctx = mp.get_context("spawn")
    counts, rows = {}, []
    out = open(ns.out, "w") if ns.out else None
    with ctx.Pool(ns.jobs, maxtasksperchild=1) as pool:
        pending = [(t, pool.apply_async(_run, (t,))) for t in tasks]
        for t, res in pending:
            try:
                row = res.get(timeout=ns.timeout)
            except mp.TimeoutError:
                row = {"model": t[0], "backend": t[1], "mode": t[2], "status": "timeout",
                       "why": f"over {ns.timeout:.0f} s"}
            except Exception as e:      # a crashed worker
                row = {"model": t[0], "backend": t[1], "mode": t[2], "status": "error",
                       "why": f"worker: {type(e).__name__}: {e}"}
            rows.append(row)
            counts[row["status"]] = counts.get(row["status"], 0) + 1
            print(f"{row['status']:7s} {row['model']:28s} {row['backend']:8s} {row['mode']:5s} "
                  f"{row.get('why', '')}", flush=True)
            if out:
                out.write(json.dumps(row) + "\n")
                out.flush()
    print(f"\n{len(names)} models x {ns.backends} x {ns.modes} at {ns.size}px: "
          + ", ".join(f"{k}={v}" for k, v in sorted(counts.items())))
    return 1 if counts.get("wrong") or counts.get("error") else 0


if __name__ == "__main__":
    sys.exit(main())

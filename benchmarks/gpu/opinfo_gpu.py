"""OpInfo sweep on CUDA through the Triton path (float32 and bfloat16), within a time budget.

    python benchmarks/gpu/opinfo_gpu.py [--budget 480] [--samples 3] [--out gpu_opinfo.json] [--skip N]

Each op and dtype: every eager-runnable sample (up to --samples) in one graph, compiled and
compared with eager on CUDA (tolerances per dtype: tests/codegen_triton/gpu_opinfo.py).
Random ops are compared too; the harness's NONDETERMINISTIC list names the ones it skips.
Prints one line per wrong op and a summary: ops run, wrong, partly native, time.
"""
import argparse
import json
import os
import sys
import time
import warnings

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
warnings.filterwarnings("ignore")

import torch  # noqa: E402

from tests.codegen import opinfo_harness as H  # noqa: E402
from tests.codegen_triton import gpu_opinfo  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--budget", type=float, default=480)
    ap.add_argument("--samples", type=int, default=3)
    ap.add_argument("--out", default="gpu_opinfo.json")
    ap.add_argument("--skip", type=int, default=0,
                    help="start at the op_db entry with this index (sweep a tail a budget left out)")
    a = ap.parse_args()
    t0 = time.time()
    summary = {str(d): dict(run=0, wrong=[], native=0, errors=0) for d in
               (torch.float32, torch.bfloat16)}
    seen, left = set(), []
    for op in H.op_db()[a.skip:]:
        if op.name in seen or op.name in left:
            continue
        if time.time() - t0 > a.budget:
            left.append(op.name)          # not visited: the budget ran out
            continue
        seen.add(op.name)
        for dt in (torch.float32, torch.bfloat16):
            try:
                if dt not in op.supported_dtypes("cuda"):
                    continue
                with gpu_opinfo.on_cuda(dt):
                    r = H.run_op(op, dt, max_samples=a.samples)
            except Exception as e:
                summary[str(dt)]["errors"] += 1
                print("ERROR", op.name, dt, type(e).__name__, str(e)[:120], flush=True)
                continue
            if r.samples == 0:
                continue
            s = summary[str(dt)]
            s["run"] += 1
            s["native"] += int(r.partly_native)
            if r.wrong:
                s["wrong"].append([op.name, r.wrong[0][:200]])
                print("WRONG", op.name, dt, r.wrong[0][:200], flush=True)
    summary["seconds"] = time.time() - t0
    summary["ops_visited"] = len(seen)
    summary["ops_left_by_budget"] = left
    summary["ops_in_db"] = len({o.name for o in H.op_db()})
    summary["skipped_first"] = a.skip
    summary["ops_compared"] = sorted(seen)
    print(json.dumps({k: (len(v) if k == "ops_left_by_budget" else v if not isinstance(v, dict)
                          else {**v, "wrong": len(v["wrong"])}) for k, v in summary.items()}))
    with open(a.out, "w") as f:
        json.dump(summary, f, indent=1)


if __name__ == "__main__":
    main()

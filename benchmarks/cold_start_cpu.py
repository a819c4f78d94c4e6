"""In-process CPU time of the demo's cold first call, with pydynamo/meta_direct.py and without it
(torch's Python reference kernels answer every meta run, and their first call imports
torch._dynamo), runs interleaved, each in a new process with an empty cache dir.

    OMP_NUM_THREADS=1 python benchmarks/cold_start_cpu.py [--repeat 3]

CPU time (`time.process_time()`) leaves out g++ (child processes) and the other agents' load;
wall time is printed beside it. Figures: benchmarks/results/CPU.md, "Warm start".
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time


def child(mode: str) -> dict:
    import torch
    from pydynamo.demo.model import build_model, example_inputs
    m, x = build_model().eval(), example_inputs()
    import pydynamo
    if mode == "refs":
        from pydynamo import meta_direct
        meta_direct.run = lambda *a, **k: None
    pydynamo.config.warm_start = False
    fn = pydynamo.optimize(m, backend="codegen")
    c0, t0 = time.process_time(), time.perf_counter()
    with torch.no_grad():
        fn(x)
    return {"cpu": time.process_time() - c0, "wall": time.perf_counter() - t0,
            "dynamo": "torch._dynamo" in sys.modules}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--child")
    a = ap.parse_args()
    if a.child:
        print(json.dumps(child(a.child)))
        return
    rows = {"direct": [], "refs": []}
    for _ in range(a.repeat):
        for mode in rows:
            tmp = tempfile.mkdtemp(prefix="cold-cpu-")
            try:
                r = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", mode],
                                   capture_output=True, text=True, check=True,
                                   env=dict(os.environ, PYDYNAMO_CACHE_DIR=tmp))
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
            rows[mode].append(json.loads(r.stdout.strip().splitlines()[-1]))
    for mode, runs in rows.items():
        label = "meta_direct" if mode == "direct" else "torch's references"
        print(f"{label:20} cpu " + " / ".join(f"{r['cpu']:.2f}" for r in runs) + " s   wall "
              + " / ".join(f"{r['wall']:.2f}" for r in runs) + " s   torch._dynamo imported: "
              + str(sorted({r["dynamo"] for r in runs})))


if __name__ == "__main__":
    main()

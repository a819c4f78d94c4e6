"""Full OpInfo sweep of codegen.compile_fx against eager (float32, int64, bool on CPU).

    python benchmarks/opinfo_sweep.py [--ops add,mul] [--dtypes float32] [--jobs N] [--out f.json]

One FX graph per (op, dtype) holding every sample (so one g++ build per pair). Prints each op
with a wrong result, the extern reasons of ops not lowered natively, and a summary: ops tried,
ops lowered natively (every sample node lowered, no extern), wrong results (must be 0).
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool}


def _work(item):
    from tests.codegen import opinfo_harness as H
    name, variant, dtype_name = item
    op = next(o for o in H.op_db() if o.name == name and o.variant_test_name == variant)
    t0 = time.time()
    try:
        r = H.run_op(op, DTYPES[dtype_name])
    except Exception as e:
        return dict(op=name, variant=variant, dtype=dtype_name, error=f"harness: {e}", wrong=[],
                    samples=0, native=False, seconds=time.time() - t0, extern_reasons=[])
    return dict(op=name, variant=variant, dtype=dtype_name, samples=r.samples, wrong=r.wrong,
                native=r.native, partly_native=r.partly_native, error=r.error, extern_reasons=r.extern_reasons,
                seconds=time.time() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="")
    ap.add_argument("--dtypes", default="float32,int64,bool")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="")
    a = ap.parse_args()
    from tests.codegen import opinfo_harness as H
    want = set(filter(None, a.ops.split(",")))
    items = []
    for op in H.op_db():
        if want and op.name not in want:
            continue
        for dt in H.supported_dtypes(op):
            name = str(dt).replace("torch.", "")
            if name in a.dtypes.split(","):
                items.append((op.name, op.variant_test_name, name))
    t0 = time.time()
    results = []
    log = open(a.out + "l", "w") if a.out else None     # one JSON line per pair, as they finish

    def record(r):
        results.append(r)
        if log:
            log.write(json.dumps(r, default=str) + "\n")
            log.flush()
    if a.jobs > 1:
        with ProcessPoolExecutor(a.jobs) as ex:
            for r in ex.map(_work, items):
                record(r)
    else:
        for i in items:
            record(_work(i))
    wrong = [r for r in results if r["wrong"]]
    native_ops = {r["op"] for r in results if r["native"] and r["dtype"] == "float32"}
    native_any = {r["op"] for r in results if r["native"]}
    tried = {r["op"] for r in results if r["samples"]}
    partly = {r["op"] for r in results if r.get("partly_native")}
    for r in wrong:
        print(f"WRONG {r['op']}.{r['variant']} {r['dtype']}: {r['wrong'][:3]}")
    summary = dict(pairs=len(results), ops_tried=len(tried), samples=sum(r["samples"] for r in results),
                   ops_native_float32=len(native_ops), ops_native_any_dtype=len(native_any), ops_partly_native=len(partly),
                   wrong_pairs=len(wrong), seconds=round(time.time() - t0, 1))
    print("SUMMARY", json.dumps(summary))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(summary=summary, results=results), f, indent=1, default=str)
    return 1 if wrong else 0


if __name__ == "__main__":
    sys.exit(main())

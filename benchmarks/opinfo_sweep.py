"""Full OpInfo sweep of the codegen backend against eager on CPU (float32, int64, bool; bfloat16
and float16 with half-type tolerances: tests/codegen/opinfo_harness.py _tolerance).

    python benchmarks/opinfo_sweep.py --variants all [--layouts ...] [--samples N]
                                      [--ops add,mul] [--dtypes float32] [--jobs N] [--shard i/n] [--table] [--out f.json]
    python benchmarks/opinfo_sweep.py --variants graph     (the FX-graph-only sweep below)

--variants all (or a comma list of function,inplace,out,out_resize): each op's samples called as
a user would through pydynamo.optimize(backend="codegen") on the user's own tensors, for the
function, in-place and out= variants (out= of the right shape and an empty one eager resizes),
on contiguous, noncontiguous (strided, offset 1), transposed and storage-offset inputs
(tests/codegen/opinfo_harness.py run_variants). Per op: cases compared, wrong (values of results
or inputs afterwards; integers and bools exactly), pydynamo exceptions where eager works,
aliasing differences, eager fallbacks; stride differences are listed but not counted wrong.
Summary line: SUMMARY {...}; exit status 1 on any wrong result or exception.

--variants graph: one FX graph per (op, dtype) holding every sample, through codegen.compile_fx
directly (one g++ build per pair); counts ops lowered natively.
"""
import argparse
import json
import os
import sys
import time
from concurrent.futures import ProcessPoolExecutor, as_completed

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

DTYPES = {"float32": torch.float32, "int64": torch.int64, "bool": torch.bool,
          "bfloat16": torch.bfloat16, "float16": torch.float16}


def _work_variants(item):
    from tests.codegen import opinfo_harness as H
    name, variant, dtype_name, variants, layouts, samples = item
    op = next(o for o in H.op_db() if o.name == name and o.variant_test_name == variant)
    t0 = time.time()
    torch.manual_seed(0)
    try:
        r = H.run_variants(op, DTYPES[dtype_name], variants, layouts, max_samples=samples)
    except Exception as e:
        return dict(op=name, variant=variant, dtype=dtype_name, error=f"harness: {type(e).__name__}: {e}",
                    cases=0, wrong=[], exceptions=[], alias=[], strides=[], seconds=time.time() - t0)
    return dict(op=name, variant=variant, dtype=dtype_name, cases=r.cases, by_variant=r.by_variant,
                eager_raises=r.eager_raises, wrong=r.wrong, exceptions=r.exceptions, alias=r.alias,
                strides=r.strides[:5], n_strides=len(r.strides), eager_fallbacks=r.eager_fallbacks,
                fallback_reasons=r.fallback_reasons, graph_breaks=r.graph_breaks, graphs=r.graphs,
                native_nodes=r.native_nodes, error=r.error, seconds=time.time() - t0)


def _isolated(item, limit=300, work=None):
    """work(item) (default _work) in a forked child: a crash (signal) or hang of one op is
    recorded as that op's exception instead of taking the whole pool down."""
    import select
    import signal
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(r)
        try:
            data = json.dumps((work or _work)(item), default=str).encode()
        except BaseException as e:     # noqa: BLE001  (report anything, then leave)
            data = json.dumps(dict(op=item[0], variant=item[1], dtype=item[2], cases=0, wrong=[],
                                   exceptions=[f"harness: {type(e).__name__}: {e}"], alias=[],
                                   strides=[], error="harness", seconds=0)).encode()
        with os.fdopen(w, "wb") as f:
            f.write(data)
        os._exit(0)
    os.close(w)
    chunks, t0 = [], time.time()
    with os.fdopen(r, "rb") as f:
        while True:
            ready, _, _ = select.select([f], [], [], max(0.0, limit - (time.time() - t0)))
            if not ready:
                os.kill(pid, signal.SIGKILL)
                break
            b = os.read(f.fileno(), 1 << 16)
            if not b:
                break
            chunks.append(b)
    _, status = os.waitpid(pid, 0)
    if chunks and os.WIFEXITED(status):
        return json.loads(b"".join(chunks))
    why = (f"killed by signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else
           f"exit status {os.WEXITSTATUS(status)}")
    return dict(op=item[0], variant=item[1], dtype=item[2], cases=0, wrong=[], alias=[], strides=[],
                exceptions=[f"process died ({why}; over {limit}s)" if time.time() - t0 >= limit
                            else f"process died ({why})"], error="crash", seconds=time.time() - t0)


def _work(item):
    from tests.codegen import opinfo_harness as H
    name, variant, dtype_name = item[:3]
    if len(item) > 3:
        return _work_variants(item)
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


def run_items(items, work, jobs=1, out=""):
    """work(item) for every item, `jobs` processes at a time (work must pickle: a module-level
    function or a partial of one); the results as they finish, each also a JSON line of
    out + "l" when out is given (a sweep stopped by a time limit still leaves its lines)."""
    results = []
    log = open(out + "l", "w") if out else None

    def record(r):
        results.append(r)
        if log:
            log.write(json.dumps(r, default=str) + "\n")
            log.flush()
    if jobs > 1:
        with ProcessPoolExecutor(jobs) as ex:
            for fut in as_completed([ex.submit(work, it) for it in items]):
                record(fut.result())
    else:
        for it in items:
            record(work(it))
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ops", default="")
    ap.add_argument("--dtypes", default="float32,int64,bool")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--out", default="")
    ap.add_argument("--variants", default="all",
                    help="all, a comma list of function,inplace,out,out_resize, or graph")
    ap.add_argument("--layouts", default="contiguous,noncontiguous,transposed,offset")
    ap.add_argument("--samples", type=int, default=0, help="samples per op (0: all)")
    ap.add_argument("--shard", default="", help="i/n: every n-th (op, dtype) pair from the i-th")
    ap.add_argument("--table", action="store_true",
                    help="print a line per op and dtype: compared, wrong, exceptions, fallbacks")
    a = ap.parse_args()
    from tests.codegen import opinfo_harness as H
    graph = a.variants == "graph"
    variants = H.VARIANTS if a.variants == "all" else tuple(a.variants.split(","))
    layouts = tuple(a.layouts.split(","))
    want = set(filter(None, a.ops.split(",")))
    items = []
    for op in H.op_db():
        if want and op.name not in want:
            continue
        for dt in H.supported_dtypes(op):
            name = str(dt).replace("torch.", "")
            if name in a.dtypes.split(","):
                items.append((op.name, op.variant_test_name, name) if graph else
                             (op.name, op.variant_test_name, name, variants, layouts, a.samples))
    t0 = time.time()
    isolate = not graph      # a pydynamo crash is a result of the variants sweep
    if a.shard:
        i, n = map(int, a.shard.split("/"))
        items = items[i::n]
    results = run_items(items, _isolated if isolate else _work, a.jobs, a.out)
    if not graph:
        return _summarize_variants(results, time.time() - t0, a.out, a.table)
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


def _summarize_variants(results, seconds, out, table=False):
    if table:       # per op and dtype: compared / wrong / exceptions / eager fallbacks
        print(f"{'op':48} {'dtype':8} {'compared':>8} {'wrong':>5} {'exc':>4} {'alias':>5} "
              f"{'fallback':>8}")
        for r in sorted(results, key=lambda r: (r["op"], r["variant"], r["dtype"])):
            name = r["op"] + (f".{r['variant']}" if r["variant"] else "")
            print(f"{name:48} {r['dtype']:8} {r['cases']:8} {len(r['wrong']):5} "
                  f"{len(r['exceptions']):4} {len(r['alias']):5} {r.get('eager_fallbacks', 0):8}")
    bad = [r for r in results if r["wrong"] or r["exceptions"]]
    for r in bad:
        what = r["wrong"][:2] + r["exceptions"][:2]
        print(f"WRONG {r['op']}.{r['variant']} {r['dtype']}: {what}")
    for r in results:
        if r["alias"]:
            print(f"ALIAS {r['op']}.{r['variant']} {r['dtype']}: {r['alias'][:2]}")
    by_variant = {}
    for r in results:
        for k, v in (r.get("by_variant") or {}).items():
            by_variant[k] = by_variant.get(k, 0) + v
    summary = dict(pairs=len(results), ops_compared=len({r["op"] for r in results if r["cases"]}),
                   cases=sum(r["cases"] for r in results), cases_by_variant=by_variant,
                   wrong_cases=sum(len(r["wrong"]) for r in results),
                   exception_cases=sum(len(r["exceptions"]) for r in results),
                   alias_cases=sum(len(r["alias"]) for r in results),
                   stride_cases=sum(r.get("n_strides", 0) for r in results),
                   eager_fallback_graphs=sum(r.get("eager_fallbacks", 0) for r in results),
                   pairs_wrong=len(bad), harness_errors=sum(1 for r in results if r["error"].startswith("harness")),
                   seconds=round(seconds, 1))
    print("SUMMARY", json.dumps(summary))
    if out:
        with open(out, "w") as f:
            json.dump(dict(summary=summary, results=results), f, indent=1, default=str)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())

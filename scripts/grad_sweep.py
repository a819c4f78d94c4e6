"""Gradient parity sweep over torch's OpInfo database (issue 16's acceptance).

    python scripts/grad_sweep.py [--backend codegen|aot_eager|eager] [--ops add,sum,max.binary]
                                 [--samples N | --sample 2,5] [--jobs N] [--timeout S] [--out f.json]
                                 [--failures notes.md] [--no-table]
    python scripts/grad_sweep.py --summarize f.jsonl [--backend B]   (a run cut short)

Every OpInfo entry that supports autograd in float32 on CPU: each sample's outputs and input
grads, compiled by pydynamo.optimize(backend=...), against eager, with torch.testing's default
float32 tolerances (tests/codegen/opinfo_harness.py run_grad says exactly what is compared and
what is dropped). One forked process per op (benchmarks/opinfo_sweep.py _isolated: a crash or a
hang past --timeout is that op's exception). Prints a table (op, samples compared, ok, wrong,
exceptions, graphs that fell back to eager autograd and backward graphs compiled, from
pydynamo.aot.counters), the wrong samples, the fallback reasons, and a line
`SUMMARY {...}`; --out writes the summary and per-op results as JSON (and a .jsonl line per op as
they finish); --failures appends each wrong sample (op, sample, backend, max error, a repro
command) to a markdown file. Exit status 1 on any wrong gradient or exception.
"""
import argparse
import functools
import json
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

from benchmarks.opinfo_sweep import _isolated, run_items  # noqa: E402
from tests.codegen import opinfo_harness as H  # noqa: E402


def _label(name, variant):
    return name + (f".{variant}" if variant else "")


def grad_ops(want=()):
    """OpInfo entries with float32 autograd on CPU; `want` filters by name or name.variant."""
    out = []
    for op in H.op_db():
        if not op.supports_autograd or torch.float32 not in op.supported_backward_dtypes("cpu"):
            continue
        if want and op.name not in want and _label(op.name, op.variant_test_name) not in want:
            continue
        out.append(op)
    return out


def _work(item):
    name, variant, _dtype, backend, samples, only = item
    op = next(o for o in H.op_db() if o.name == name and o.variant_test_name == variant)
    t0 = time.time()
    torch.manual_seed(0)
    try:
        r = H.run_grad(op, backend, max_samples=samples or None, only=only)
    except Exception as e:
        return dict(op=name, variant=variant, dtype="float32", samples=0, ok=0, wrong=[],
                    exceptions=[f"harness: {type(e).__name__}: {e}"], error="harness",
                    seconds=time.time() - t0)
    return dict(op=name, variant=variant, dtype="float32", backend=backend, samples=r.samples,
                ok=r.ok, wrong=r.wrong, exceptions=r.exceptions,
                eager_backward_raises=r.eager_backward_raises, no_grad_output=r.no_grad_output,
                nondeterministic=r.nondeterministic, counters=r.counters, graphs=r.graphs,
                graph_breaks=r.graph_breaks, frames_eager=r.frames_eager,
                fallback_reasons=r.fallback_reasons, error=r.error, seconds=time.time() - t0)


def _rounding(w):
    """The compiled result is at least half as close to eager-in-float64 as eager's float32 one:
    a rounding difference, not a wrong formula (still counted wrong; reported apart)."""
    if "rounding" in w:
        return w["rounding"]
    return w.get("f64_err_compiled") is not None and \
        0 < w["f64_err_compiled"] <= 2 * w["f64_err_eager"]


def _f64(w):
    if w.get("f64_err_compiled") is None:
        return w.get("f64_note", "no float64 comparison")
    return (f"against eager float64: compiled {w['f64_err_compiled']:.3g}, eager float32 "
            f"{w['f64_err_eager']:.3g}{', rounding' if _rounding(w) else ''}")


def _failures_md(results, backend):
    lines = []
    for r in results:
        for w in r["wrong"]:
            err = f"max abs {w.get('max_abs')}, max rel {w.get('max_rel')}; {_f64(w)}"
            lines += [f"### grad sweep: {_label(r['op'], r['variant'])} sample {w['sample']} "
                      f"({backend})",
                      f"- what: {w['what']} ({w.get('alone', '')})",
                      f"- error: {err}",
                      f"- sample: `{w['call']}`",
                      f"- repro: `python scripts/grad_sweep.py --backend {backend} --ops "
                      f"{_label(r['op'], r['variant'])} --sample {w['sample']}`", ""]
    return lines


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="codegen")
    ap.add_argument("--ops", default="", help="comma list of op names or name.variant")
    ap.add_argument("--samples", type=int, default=0, help="samples per op (0: all)")
    ap.add_argument("--sample", default="", help="comma list of sample indices (a repro)")
    ap.add_argument("--jobs", type=int, default=1)
    ap.add_argument("--timeout", type=int, default=600, help="seconds per op")
    ap.add_argument("--out", default="")
    ap.add_argument("--failures", default="", help="append wrong samples to this markdown file")
    ap.add_argument("--no-table", action="store_true")
    ap.add_argument("--summarize", default="",
                    help="print the table and summary of a sweep's .jsonl (a run cut short)")
    a = ap.parse_args()
    if a.summarize:
        with open(a.summarize) as f:
            results = [json.loads(line) for line in f]
        return _summarize(results, a, sum(r.get("seconds", 0) for r in results))
    want = set(filter(None, a.ops.split(",")))
    only = {int(i) for i in a.sample.split(",")} if a.sample else None
    items = [(op.name, op.variant_test_name, "float32", a.backend, a.samples, only)
             for op in grad_ops(want)]
    t0 = time.time()
    results = run_items(items, functools.partial(_isolated, limit=a.timeout, work=_work), a.jobs,
                        a.out)
    return _summarize(results, a, time.time() - t0)


def _summarize(results, a, seconds):
    results.sort(key=lambda r: (r["op"], r["variant"]))
    for r in results:       # a crashed or timed-out op's record (_isolated) has no counts
        r.setdefault("samples", 0)
        r.setdefault("ok", 0)
    cnt = lambda r, k: (r.get("counters") or {}).get(k, 0)  # noqa: E731
    if not a.no_table:
        print(f"{'op':44} {'samples':>7} {'ok':>5} {'wrong':>5} {'error':>5} "
              f"{'eager_fallback':>14} {'bw_compiled':>11}")
        for r in results:
            print(f"{_label(r['op'], r['variant']):44} {r['samples']:7} {r['ok']:5} "
                  f"{len(r['wrong']):5} {len(r['exceptions']):5} {cnt(r, 'eager_fallback'):14} "
                  f"{cnt(r, 'backward_compiled'):11}")
    for r in results:
        for w in r["wrong"]:
            print(f"WRONG {_label(r['op'], r['variant'])} sample{w['sample']}: {w['what']} "
                  f"(max abs {w.get('max_abs')}; {_f64(w)}) {w.get('alone', '')}")
        for e in r["exceptions"][:3]:
            print(f"ERROR {_label(r['op'], r['variant'])}: {e.splitlines()[0] if e else e}")
    reasons = {}
    for r in results:
        for why in r.get("fallback_reasons") or []:
            # the first line says why; the rest names the op's node and line
            why = why.splitlines()[0] if why else why
            ops = reasons.setdefault(why, [])
            if _label(r["op"], r["variant"]) not in ops:
                ops.append(_label(r["op"], r["variant"]))
    for why, ops in sorted(reasons.items(), key=lambda kv: -len(kv[1])):
        print(f"FALLBACK {len(ops)} ops ({', '.join(ops[:6])}{', ...' if len(ops) > 6 else ''}): "
              f"{why}")
    summary = dict(
        backend=a.backend, torch=torch.__version__, python=sys.version.split()[0],
        ops=len(results), ops_compared=sum(1 for r in results if r["samples"]),
        samples=sum(r["samples"] for r in results), ok=sum(r["ok"] for r in results),
        wrong=sum(len(r["wrong"]) for r in results),
        wrong_within_eager_rounding=sum(_rounding(w) for r in results for w in r["wrong"]),
        ops_wrong=sum(1 for r in results if r["wrong"]),
        errors=sum(len(r["exceptions"]) for r in results),
        ops_error=sum(1 for r in results if r["exceptions"]),
        crashed_or_timed_out=sum(1 for r in results if r.get("error") in ("crash", "harness")),
        dropped_eager_backward_raises=sum(r.get("eager_backward_raises", 0) for r in results),
        dropped_no_grad_output=sum(r.get("no_grad_output", 0) for r in results),
        nondeterministic_not_compared=sum(r.get("nondeterministic", 0) for r in results),
        ops_no_sample=sum(1 for r in results if not r["samples"] and not r["exceptions"]),
        **{k: sum(cnt(r, k) for r in results) for k in H.GRAD_COUNTERS},
        ops_eager_fallback=sum(1 for r in results if cnt(r, "eager_fallback")),
        ops_backward_compiled=sum(1 for r in results if cnt(r, "backward_compiled")),
        seconds=round(seconds, 1))
    print("SUMMARY", json.dumps(summary))
    if a.out:
        with open(a.out, "w") as f:
            json.dump(dict(summary=summary, fallback_reasons=reasons, results=results), f,
                      indent=1, default=str)
    if a.failures and summary["wrong"]:
        with open(a.failures, "a") as f:
            f.write("\n".join(_failures_md(results, a.backend)) + "\n")
    return 1 if summary["wrong"] or summary["errors"] else 0


if __name__ == "__main__":
    sys.exit(main())

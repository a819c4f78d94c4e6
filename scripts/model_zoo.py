"""The whole transformers model zoo under pydynamo and torch.compile, side by side (issue 17).

    python scripts/model_zoo.py [--models A,B,...] [--limit N] [--timeout 120]
                                [--engines pydynamo,torch] [--out DIR] [--reuse-torch FILE]
                                [--backend eager|codegen] [--options JSON] [--layers N]
    python scripts/model_zoo.py --summarize PY.jsonl[,PY2.jsonl] --reuse-torch T.jsonl[,T2.jsonl]

Every base model class of transformers' auto mapping (tests/zoo/zoo_runner.py builds each from a
tiny config and runs one forward on the CPU) under each engine. Engines run in separate worker
processes (both install a PEP 523 hook), one model after another in a worker; a model whose
result does not come within --timeout seconds is recorded as "timeout" and its worker replaced.
Writes DIR/<engine>.jsonl (one row per model, zoo_runner's fields) and prints the summary table
(tests/zoo/ZOO.md holds the last one). --reuse-torch takes torch.compile's rows from earlier
torch.jsonl files (the reference does not change with pydynamo's code); --summarize only merges
row files (a later file's row replaces an earlier one's: a partial re-run after a fix) and
prints the table. --backend, --options and --layers go to pydynamo's workers (zoo_runner:
pydynamo's backend, default "eager"; codegen options as a JSON object, e.g.
'{"compile_regions": true}' with --backend codegen; every layer-count knob, default 1), and the
run prints how many models outlined regions (codegen's region_* counters). Exit status 1 when
pydynamo gave a wrong result or raised where eager worked.
"""
from __future__ import annotations

import argparse
import collections
import json
import os
import select
import subprocess
import sys
import threading
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
RUNNER = os.path.join(REPO, "tests", "zoo", "zoo_runner.py")
sys.path.insert(0, os.path.join(REPO, "tests", "zoo"))


def run_engine(engine: str, models: list[str], timeout: float, out_path: str, env=None,
               worker_args=()) -> dict:
    """Rows for `models` under `engine`, model by model, a fresh worker after a timeout/crash.
    `worker_args`: zoo_runner's flags for pydynamo (--backend, --options, --layers)."""
    rows, todo = {}, list(models)
    with open(out_path, "w") as out:
        while todo:
            proc = subprocess.Popen(
                ["nice", "-n", "10", sys.executable, RUNNER, "--engine", engine, *worker_args, *todo],
                stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
            while todo:
                ready, _, _ = select.select([proc.stdout], [], [], timeout)
                line = proc.stdout.readline() if ready else None
                if not line:
                    name = todo.pop(0)
                    why = f"over {timeout:.0f} s" if not ready else "worker died"
                    row = {"model": name, "engine": engine, "status": "timeout" if not ready else "error",
                           "why": why}
                    proc.kill()
                    proc.wait()
                else:
                    row = json.loads(line)
                    assert row["model"] == todo[0], (row["model"], todo[0])
                    todo.pop(0)
                rows[row["model"]] = row
                out.write(json.dumps(row) + "\n")
                out.flush()
                print(f"{engine:8s} {row['status']:8s} {row['model']:40s} graphs={row.get('graphs', '-')} "
                      f"{row.get('why', '')[:100]}", flush=True)
                if not line:
                    break
            proc.wait()
    return rows


def _short(reason: str) -> str:
    return reason.split(" @ ")[0][:110]


def _rows(paths: str) -> dict:
    rows = {}
    for path in paths.split(","):
        with open(path) as f:
            rows.update((r["model"], r) for r in map(json.loads, f))
    return rows


def summarize(py: dict, tc: dict) -> str:
    """The markdown table: per-engine counts and break reasons by how many models they cost."""
    both = [m for m in py if m in tc and py[m]["status"] != "nobuild" and tc[m]["status"] != "nobuild"]
    lines = []
    # values: "wrong" under both engines is the library's own compile path (is_compiling())
    library = [m for m in both if py[m]["status"] == "wrong" and tc[m]["status"] == "wrong"]
    counted = [m for m in both if py[m]["status"] in ("ok", "wrong") and tc[m]["status"] in ("ok", "wrong")
               and (py[m]["status"] == "ok" or m in library)]
    st = collections.Counter(py[m]["status"] for m in both)
    st_t = collections.Counter(tc[m]["status"] for m in both)
    one = sum(py[m]["graphs"] == 1 for m in counted)
    one_t = sum(tc[m]["graphs"] == 1 for m in counted)
    le = [m for m in counted if py[m]["graphs"] <= tc[m]["graphs"]]
    lines.append(f"Model classes tried: {len(py)}; built and ran eagerly: {len(both)}; "
                 f"both engines ran: {len(counted)}")
    lines.append("")
    lines.append("| | pydynamo | torch.compile |")
    lines.append("|---|---|---|")
    lines.append(f"| status | {dict(sorted(st.items()))} | {dict(sorted(st_t.items()))} |")
    lines.append(f"| one graph | {one}/{len(counted)} | {one_t}/{len(counted)} |")
    lines.append(f"| graphs total | {sum(py[m]['graphs'] for m in counted)} | "
                 f"{sum(tc[m]['graphs'] for m in counted)} |")
    lines.append(f"| graph count <= torch.compile's | {len(le)}/{len(counted)} "
                 f"({100.0 * len(le) / max(1, len(counted)):.1f}%) | |")
    for title, rows in (("pydynamo", py), ("torch.compile", tc)):
        c = collections.Counter()
        for m in counted:
            for r in set(_short(b) for b in rows[m].get("breaks", [])):
                c[r] += 1
        lines.append("")
        lines.append(f"Break reasons, {title} (models affected):")
        lines.append("")
        for r, n in c.most_common():
            lines.append(f"- {n}: `{r}`")
    worse = [m for m in counted if py[m]["graphs"] > tc[m]["graphs"]]
    lines.append("")
    lines.append(f"Models where pydynamo takes more graphs than torch.compile ({len(worse)}):")
    lines.append("")
    for m in worse:
        lines.append(f"- {m}: {py[m]['graphs']} vs {tc[m]['graphs']}: "
                     f"{sorted(set(_short(b) for b in py[m]['breaks']))[:3]}")
    lines.append("")
    lines.append(f"Outputs differ from eager under both engines, identically (transformers takes its "
                 f"is_compiling() path; not counted as wrong): {', '.join(library) or 'none'}")
    bad = [m for m in both if py[m]["status"] in ("wrong", "error", "timeout") and m not in library]
    lines.append("")
    lines.append(f"pydynamo wrong / error / timeout ({len(bad)}):")
    lines.append("")
    for m in bad:
        lines.append(f"- {m}: {py[m]['status']}: {py[m].get('why', '')[:200]} (torch.compile: "
                     f"{tc[m]['status']} {tc[m].get('why', '')[:100]})")
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models", default="")
    ap.add_argument("--limit", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=120.0)
    ap.add_argument("--engines", default="pydynamo,torch")
    ap.add_argument("--out", default="/tmp/model_zoo")
    ap.add_argument("--reuse-torch", default="")
    ap.add_argument("--summarize", default="", help="pydynamo row files to merge; runs nothing")
    ap.add_argument("--backend", default="eager", help="pydynamo's backend in the workers")
    ap.add_argument("--options", default="", help='codegen options, JSON: \'{"compile_regions": true}\'')
    ap.add_argument("--layers", type=int, default=1, help="layer-count knobs of the tiny configs")
    ns = ap.parse_args(argv)
    if ns.options:
        json.loads(ns.options)      # (a bad value fails here, not in every worker)
    py_args = ["--backend", ns.backend, "--layers", str(ns.layers)] + (
        ["--options", ns.options] if ns.options else [])
    if ns.summarize:
        print(summarize(_rows(ns.summarize), _rows(ns.reuse_torch)))
        return 0
    from zoo_runner import all_model_classes
    models = ns.models.split(",") if ns.models else all_model_classes()
    if ns.limit:
        models = models[:ns.limit]
    os.makedirs(ns.out, exist_ok=True)
    results = {}
    if ns.reuse_torch:
        results["torch"] = _rows(ns.reuse_torch)
    engines = [e for e in ns.engines.split(",") if e not in results]
    threads = []
    for e in engines:
        th = threading.Thread(target=lambda e=e: results.__setitem__(
            e, run_engine(e, models, ns.timeout, os.path.join(ns.out, f"{e}.jsonl"),
                          worker_args=py_args if e == "pydynamo" else ())))
        th.start()
        threads.append(th)
    for th in threads:
        th.join()
    if "pydynamo" in results and "torch" in results:
        text = summarize(results["pydynamo"], results["torch"])
        print("\n" + text)
        with open(os.path.join(ns.out, "summary.md"), "w") as f:
            f.write(text + "\n")
    py = results.get("pydynamo", {})
    outlined = [m for m, r in py.items() if r.get("regions", {}).get("region_instances_outlined")]
    if any("regions" in r for r in py.values()):
        print(f"\nmodels that outlined regions ({len(outlined)}/{len(py)}): {', '.join(outlined)}")
    return 1 if any(r["status"] in ("wrong", "error") for r in py.values()) else 0


if __name__ == "__main__":
    sys.exit(main())

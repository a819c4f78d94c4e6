"""`python -m pydynamo.demo`: capture the embedded transformer with pydynamo.optimize and show
what happened — graphs and ops, guards, a recompile when the input dtype changes (with the
recompile explanation), one dynamic recompile when the sequence length changes, graph breaks in
user code around the model (reasons, user lines, hints), outputs checked against eager, and
per-call timings (interleaved rounds: median, spread, each row against the eager timed beside it,
rows too noisy to trust marked BUSY).

The demo is a table of steps; each prints its findings. A step whose feature is not built yet
prints "unavailable: <why>" and the demo goes on, but an output that differs from eager is never
softened: it is printed as a MISMATCH and the exit status is 1. torch.compile timings come from
scripts/demo_reference.py, run in its own process (both compilers install a frame hook, and
product code never calls torch.compile); outside a source checkout that column is unavailable.
"""
from __future__ import annotations

import argparse
import collections
import contextlib
import dataclasses
import json
import logging
import os
import subprocess
import sys
import warnings
from typing import Callable

import torch

import pydynamo
from pydynamo import convert_frame, logs
from pydynamo.demo.model import DemoConfig, build_model, example_inputs, next_token_probs
from pydynamo.demo.timing import BUSY_SPREAD, Timing, interleaved_us

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
REFERENCE_SCRIPT = os.path.join(REPO, "scripts", "demo_reference.py")


@dataclasses.dataclass
class Demo:
    """State shared by the steps."""
    args: argparse.Namespace
    cfg: DemoConfig
    model: torch.nn.Module
    graphs: list = dataclasses.field(default_factory=list)     # ops per graph the backend received
    mismatches: list = dataclasses.field(default_factory=list)

    def counting_backend(self, gm, example_inputs):
        self.graphs.append(sum(1 for n in gm.graph.nodes if n.op in ("call_function", "call_method", "call_module")))
        return gm.forward

    def check(self, what: str, got, want) -> None:
        try:
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
            err = (got - want).abs().max().item()
            print(f"  {what}: matches eager (max abs diff {err:.2e})")
        except (AssertionError, TypeError) as e:
            self.mismatches.append(what)
            print(f"  {what}: MISMATCH against eager: {str(e).splitlines()[0]}")


class Unavailable(Exception):
    """A feature the demo wants is not built yet (printed, not fatal)."""


def _header(title: str) -> None:
    print(f"\n== {title} " + "=" * max(0, 70 - len(title)))


def _short_origin(text: str) -> str:
    head, sep, where = text.partition("  # ")
    return f"{head}  # {os.path.basename(where)}" if sep else text


# --- steps -------------------------------------------------------------------------------------

def step_model(d: Demo) -> None:
    n = sum(p.numel() for p in d.model.parameters())
    print(f"  TinyTransformer {d.cfg}: {n:,} parameters; input: token ids [batch={d.args.batch}, seq={d.args.seq}]")


def step_capture(d: Demo) -> None:
    x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=1)
    try:
        ex = pydynamo.explain(d.model)(x)
    except Exception as e:
        raise Unavailable(f"pydynamo.explain failed: {type(e).__name__}: {e}") from e
    print(f"  graphs captured: {ex.graph_count}; ops per graph: {ex.ops_per_graph}; "
          f"graph breaks: {ex.graph_break_count}")
    for b in ex.break_reasons:
        print(f"    break: {b}")
    if ex.graph_count != 1:
        print("  note: the model did not capture as one graph; see the guards' origins below for which "
              "frames were traced")
    kinds = collections.Counter(g.split(":", 1)[0] for g in ex.guards)
    print(f"  guards: {len(ex.guards)} ({', '.join(f'{k} {v}' for k, v in kinds.most_common())})")
    shown = ex.guards if d.args.all_guards else ex.guards[:d.args.guards]
    for g in shown:
        print(f"    {_short_origin(g)}")
    if len(shown) < len(ex.guards):
        print(f"    ... {len(ex.guards) - len(shown)} more (--all-guards)")
    with torch.no_grad():
        d.check("explain() output", ex.out, d.model(x))
    if d.args.show_graph and ex.graphs:
        print(ex.graphs[0].code)


def step_run(d: Demo) -> None:
    pydynamo.reset()
    d.compiled = pydynamo.optimize(d.model, backend=d.counting_backend)
    for i in range(3):
        x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=10 + i)
        before = len(d.graphs)
        with torch.no_grad():
            got, want = d.compiled(x), d.model(x)
        new = len(d.graphs) - before
        d.check(f"call {i + 1} ({'compiled ' + str(new) + ' graph(s)' if new else 'cache hit'})", got, want)


class _Capture(logging.Handler):
    def __init__(self):
        super().__init__(logging.DEBUG)
        self.lines: list[str] = []

    def emit(self, record):
        self.lines.append(record.getMessage())


@contextlib.contextmanager
def _recompile_log():
    """The lines pydynamo logs on its `recompiles` channel while the block runs (not printed)."""
    log = logging.getLogger("pydynamo.recompiles")
    cap = _Capture()
    old_level = log.level
    log.setLevel(logging.DEBUG)
    # let pydynamo.logs attach its stderr handler now, and detach it: the demo prints the lines
    logs.get("recompiles")
    for h in list(log.handlers):
        log.removeHandler(h)
    log.setLevel(logging.DEBUG)  # after logs.get, which sets INFO
    log.addHandler(cap)
    try:
        yield cap.lines
    finally:
        log.removeHandler(cap)
        log.setLevel(old_level)


def _print_why(lines: list) -> None:
    if not lines:
        print("  why: unavailable (no recompile explanation was logged on pydynamo.recompiles)")
        return
    print("  why:")
    for line in lines:
        for part in line.splitlines():
            print(f"    {_short_origin(part.strip())}")


def step_recompile(d: Demo) -> None:
    if not hasattr(d, "compiled"):
        raise Unavailable("the run step did not complete")
    with _recompile_log() as lines:
        x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=20, dtype=torch.int32)
        before = len(d.graphs)
        with torch.no_grad():
            got, want = d.compiled(x), d.model(x)
        print(f"  input ids int64 -> int32: compiled {len(d.graphs) - before} new graph(s)")
        _print_why(lines)
        d.check("int32 call", got, want)
        x64 = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=21)
        before = len(d.graphs)
        with torch.no_grad():
            got, want = d.compiled(x64), d.model(x64)
        d.check(f"back to int64 ({'cache hit' if len(d.graphs) == before else 'recompiled'})", got, want)


def step_dynamic(d: Demo) -> None:
    """Automatic dynamic: a new sequence length recompiles once into a graph whose length is a
    symbol (guarded by relations), and further lengths hit that entry."""
    if not hasattr(d, "compiled"):
        raise Unavailable("the run step did not complete")
    frames: list = []
    convert_frame.RECORDERS.append(frames.append)
    try:
        with _recompile_log() as lines:
            for seq in (d.args.seq + 1, min(d.cfg.max_seq, 2 * d.args.seq + 3)):
                x = example_inputs(d.cfg, d.args.batch, seq, seed=40 + seq)
                before, seen = len(d.graphs), len(frames)
                with torch.no_grad():
                    got, want = d.compiled(x), d.model(x)
                new = len(d.graphs) - before
                d.check(f"seq {d.args.seq} -> {seq} ({'compiled ' + str(new) + ' graph(s)' if new else 'cache hit'})",
                        got, want)
                if new:   # why, and the new entry, before the next call's line
                    _print_why(lines[:1])
                    del lines[:]
                    for f in frames[seen:]:
                        for g in getattr(f, "guards", ()):
                            if g.kind.value == "SHAPE_ENV":
                                print(f"  the new entry's shape guards: {_short_origin(g.describe())}")
    finally:
        convert_frame.RECORDERS.remove(frames.append)


def step_breaks(d: Demo) -> None:
    """next_token_probs (demo/model.py) prints and branches on a tensor around the model: two
    graph breaks, three graphs, as torch.compile gives; each reason names the user's line."""
    x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=50)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")        # the same reasons are printed below
        ex = pydynamo.explain(next_token_probs)(d.model, x)
        print(f"  graphs: {ex.graph_count}; ops per graph: {ex.ops_per_graph}; "
              f"graph breaks: {ex.graph_break_count}")
        for b in ex.break_reasons:
            print(f"    break at {os.path.basename(b.filename)}:{b.lineno}:{b.col} "
                  f"[{b.reason_code}] {b.message}")
            print(f"      hint: {b.hint}")
        ref = _reference(d)
        if ref and "breaks" in ref:
            r = ref["breaks"]
            same = r["graph_count"] == ex.graph_count and r["ops_per_graph"] == ex.ops_per_graph
            print(f"  torch.compile: {r['graph_count']} graphs, ops per graph {r['ops_per_graph']}"
                  f" ({'the same' if same else 'DIFFERENT'})")
        pydynamo.reset()
        f = pydynamo.optimize(next_token_probs)
        for i in range(2):
            x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=51 + i)
            with torch.no_grad():
                got, want = f(d.model, x), next_token_probs(d.model, x)
            d.check(f"pydynamo.optimize(next_token_probs) call {i + 1}", got, want)


def _codegen_available() -> str | None:
    try:
        import codegen
        codegen.compile_fx  # noqa: B018
        return None
    except (ImportError, AttributeError) as e:
        return f"{type(e).__name__}: {e}"


def step_timings(d: Demo) -> None:
    if d.args.no_timings:
        raise Unavailable("skipped (--no-timings)")
    x = example_inputs(d.cfg, d.args.batch, d.args.seq, seed=30)
    pydynamo.reset()
    fns = {"eager": d.model, "pydynamo backend=eager": pydynamo.optimize(d.model, backend="eager")}
    why = _codegen_available()
    if why is None and d.args.codegen:
        import codegen
        compiled = []

        def codegen_keeping_result(gm, example_inputs):  # the "codegen" backend, kept for display
            compiled.append(codegen.compile_fx(gm, example_inputs))
            return compiled[-1]

        comp = pydynamo.optimize(d.model, backend=codegen_keeping_result)
        with torch.no_grad():
            d.check("codegen output", comp(x), d.model(x))
        for c in compiled:
            path = getattr(c, "wrapper_path", None)
            print(f"  generated code: {getattr(c, 'kernel_count', '?')} kernel(s); wrapper {path}")
            if path and os.path.exists(path):
                # entry checks (shape/dtype/grad escapes) are long and alike: show the kernel calls
                lines = [ln for ln in open(path).read().splitlines()
                         if not ln.lstrip().startswith(("if ", "return _eager_grad", "return _mismatch"))]
                shown = 40 if d.args.show_graph else 15
                print("\n".join("    | " + ln for ln in lines[:shown]))
                print(f"    | ... ({len(lines)} lines without the entry checks; kernels beside it in the cache dir)")
        fns["pydynamo backend=codegen"] = comp
    else:
        print(f"  pydynamo backend=codegen: unavailable ({why or 'pass --codegen'})")
    timings = interleaved_us(fns, x, d.args.iters, d.args.rounds)
    rows = [(name, t, timings["eager"]) for name, t in timings.items()]
    rows += _reference_timings(d)
    print_timings(rows, d.args.iters)


def print_timings(rows: list, iters: int) -> None:
    """rows: (name, Timing, the eager Timing measured beside it, in the same process)."""
    print(f"  per call: median of interleaved rounds of {iters} calls, [fastest - slowest round], and the"
          " ratio to eager timed beside it (torch.compile rows: in its own process)")
    for name, t, eager in rows:
        flag = "  BUSY" if t.busy else ""
        print(f"    {name:32s} {t.median_us:10.1f} us  [{t.min_us:8.1f} - {t.max_us:8.1f}]  "
              f"{t.median_us / eager.median_us:5.2f}x eager{flag}")
    busy = [name for name, t, _ in rows if t.busy]
    if busy:
        print(f"  note: the machine was too busy to trust the rows marked BUSY (their rounds differ by more "
              f"than {BUSY_SPREAD:.0%} of the median); rerun on an idle machine, or see the benchmarks")


def _reference(d: Demo) -> dict | None:
    """torch.compile's figures from scripts/demo_reference.py (run once, in its own process;
    skipped with --no-timings); None when unavailable (said once)."""
    if hasattr(d, "reference"):
        return d.reference
    d.reference = None
    if d.args.no_timings:
        return None
    if not os.path.exists(REFERENCE_SCRIPT):
        print("  torch.compile: unavailable (scripts/demo_reference.py not found; run from a source checkout)")
        return None
    cmd = [sys.executable, REFERENCE_SCRIPT, "--batch", str(d.args.batch), "--seq", str(d.args.seq),
           "--iters", str(d.args.iters)] + (["--inductor"] if d.args.codegen else [])
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    line = [ln for ln in p.stdout.splitlines() if ln.startswith("{")]
    if p.returncode or not line:
        print(f"  torch.compile: unavailable (reference run failed: {p.stderr.strip()[-300:]})")
        return None
    d.reference = json.loads(line[-1])
    if not d.reference.get("matches_eager", False):
        d.mismatches.append("torch.compile reference")
        print("  torch.compile reference: MISMATCH against eager")
    return d.reference


def _reference_timings(d: Demo) -> list:
    rec = _reference(d)
    if not rec:
        return []
    return [(name, Timing(**t), Timing(**rec["eager_us"][name])) for name, t in rec["timings_us"].items()]


STEPS = [
    ("the embedded model", step_model),
    ("capture: pydynamo.explain(model)(ids)", step_capture),
    ("run: pydynamo.optimize(model), 3 calls with fresh inputs", step_run),
    ("recompile: the input dtype changes", step_recompile),
    ("dynamic shapes: the sequence length changes", step_dynamic),
    ("graph breaks: user code around the model", step_breaks),
    ("timings", step_timings),
]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(prog="python -m pydynamo.demo", description=__doc__.split("\n\n")[0])
    ap.add_argument("--batch", type=int, default=2)
    ap.add_argument("--seq", type=int, default=16)
    ap.add_argument("--iters", type=int, default=50, help="calls per timing round")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--guards", type=int, default=12, help="guards to print")
    ap.add_argument("--all-guards", action="store_true")
    ap.add_argument("--show-graph", action="store_true", help="print the captured graph's code")
    ap.add_argument("--codegen", action="store_true", help="also time backend=codegen (and inductor)")
    ap.add_argument("--no-timings", action="store_true")
    args = ap.parse_args(argv)
    cfg = DemoConfig()
    d = Demo(args, cfg, build_model(cfg))
    print(f"pydynamo demo — Python {sys.version.split()[0]}, torch {torch.__version__}")
    for title, step in STEPS:
        _header(title)
        try:
            step(d)
        except Unavailable as e:
            print(f"  unavailable: {e}")
        except Exception as e:  # a feature not there yet; results already checked stay checked
            print(f"  unavailable: {type(e).__name__}: {e}")
    _header("result")
    if d.mismatches:
        print(f"  WRONG RESULTS in: {', '.join(d.mismatches)}")
        return 1
    print("  every output checked matched eager")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""Resume functions that never raise (issue 17): a graph break at every call site of generated
programs, compared with eager.

    python tests/semantics/resume_property.py [--seeds 0:200] [--backend eager]

Programs come from the differential fuzzer's generator (tests/fuzz/program_gen.py). For each
program and each call site in its body (every `ast.Call`, outermost statement order), a variant
routes that call through `_pydynamo_break_at(...)`: the first argument (or, for a call without
arguments, the call's result) passes through a helper whose body is `pydynamo.graph_break()`.
The helper is inlined, so the program's own frame is cut at that call with whatever the stack
holds there (a callable and its NULL, earlier arguments, a with-block's exit, a loop iterator);
its resume function must restore all of it. A call site the program never reaches (a branch
not taken) takes no break and is not counted as blind. Each variant runs under pydynamo for the program's
calls (changing sizes included) through tests/differential.py: any exception eager does not
raise, and any wrong value, is a failure. CI runs a fixed seed range (test_resume_property.py);
this script sweeps more. Programs with a deliberate raise are skipped (the exception's type is
the differential check's business, not this test's).
"""
from __future__ import annotations

import argparse
import ast
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TESTS = os.path.dirname(HERE)
sys.path.insert(0, TESTS)
sys.path.insert(0, os.path.join(TESTS, "fuzz"))

import torch  # noqa: E402

import program_gen as pg  # noqa: E402
from differential import run_differential  # noqa: E402

HELPER = "_pydynamo_break_at"  # one underscore: class bodies would mangle two


_REACHED = [0]


def _break_at(v):
    import pydynamo
    _REACHED[0] += 1    # counted when it really runs (eagerly, or in a break function)
    pydynamo.graph_break()
    return v


class _Wrap(ast.NodeTransformer):
    def __init__(self, k: int):
        self.k, self.n = k, 0

    def visit_FunctionDef(self, node):
        # only the compiled body: f, or a module's forward (its __init__ runs eagerly)
        return self.generic_visit(node) if node.name in ("f", "forward") else node

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == HELPER:
            return node
        if ast.unparse(node.func).endswith("graph_break"):
            return node
        i, self.n = self.n, self.n + 1
        if i != self.k:
            return node
        if node.args and not isinstance(node.args[0], ast.Starred):
            node.args[0] = ast.Call(ast.Name(HELPER, ast.Load()), [node.args[0]], [])
            return node
        return ast.Call(ast.Name(HELPER, ast.Load()), [node], [])


def call_sites(src: str) -> int:
    w = _Wrap(-1)
    w.visit(ast.parse(src))
    return w.n


def variant(p: pg.Program, k: int):
    """The program with its k-th call site routed through the breaking helper, built."""
    tree = _Wrap(k).visit(ast.parse(pg.HEADER + p.source()))
    ns: dict = {HELPER: _break_at}
    exec(compile(ast.fix_missing_locations(tree), f"<resume property {p.seed}:{k}>", "exec"), ns)
    if p.is_module:
        torch.manual_seed(p.seed)
        return ns["M"]()
    return ns["f"]


def check_program(seed: int, backend: str = "eager") -> list[str]:
    """Every call-site variant of program `seed` against eager: one line per failure."""
    import pydynamo
    from pydynamo import convert_frame
    p = pg.generate(seed)
    if p.raises:
        return []
    bad, cuts = [], []

    def record(item):   # frames cut at a break (a frame run eagerly whole is no resume test)
        if getattr(item, "graph_break", None) is not None:
            cuts.append(item.graph_break)
    convert_frame.RECORDERS.append(record)
    try:
        for k in range(call_sites(pg.HEADER + p.source())):
            pydynamo.reset()
            cuts.clear()
            _REACHED[0] = 0
            try:
                res = run_differential(variant(p, k), p.makers(), backend=backend)
            except Exception as e:  # the harness itself failed: a failure, not a crash of the sweep
                bad.append(f"program {p.seed} call site {k}: {type(e).__name__}: {e}")
                continue
            if not res.ok:
                bad.append(f"program {p.seed} call site {k}: {(res.of('error') + res.of('wrong'))[:2]}")
            elif not cuts and _REACHED[0]:
                bad.append(f"program {p.seed} call site {k}: no frame was cut (the test is blind)")
    finally:
        convert_frame.RECORDERS.remove(record)
    return bad


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seeds", default="0:200")
    ap.add_argument("--backend", default="eager")
    ns = ap.parse_args(argv)
    lo, hi = map(int, ns.seeds.split(":"))
    failures = sites = 0
    for seed in range(lo, hi):
        sites += call_sites(pg.HEADER + pg.generate(seed).source())
        for line in check_program(seed, ns.backend):
            failures += 1
            print(line, flush=True)
    print(f"seeds {lo}..{hi - 1}: {sites} call sites, {failures} failing variant(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

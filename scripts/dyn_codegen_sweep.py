"""Sweep: the compat corpora through pydynamo's codegen backend with symbolic sizes, vs eager.

    python scripts/dyn_codegen_sweep.py [--corpus compat,dyn] [--out DIR]

  compat: tests/compat's corpus under optimize(dynamic=True) (every size symbolic from the start);
  dyn:    tests/compat_dynamic's corpus (size sequences), every case in its `@codegen` mode
          (automatic dynamic, codegen behind the counting backend).
Each engine runs in its own process (both install a frame hook), through the corpora's own
runners; this process compares the records with tests/compat's `compare` and prints one line per
case that differs from eager, raised, or warned (a warning is an eager fallback or a graph break),
then a summary. Not a test: the corpora's own suites assert the compile counts; this measures
how much of them codegen serves with symbolic sizes.
"""
from __future__ import annotations

import argparse
import glob
import os
import subprocess
import sys
import tempfile

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
COMPAT = os.path.join(REPO, "tests", "compat")
DYN = os.path.join(REPO, "tests", "compat_dynamic")


def _child(corpus: str, engine: str, out: str) -> int:
    """Runs in the engine's process: the corpus runner with pydynamo wired to codegen."""
    sys.path[:0] = [COMPAT, DYN]
    argv = ["--engine", engine, "--out", out]
    if corpus == "dyn":
        import dyn_case
        for reg in (dyn_case.dyn_case, dyn_case.dyn_module_case):
            reg.__kwdefaults__ = {"modes": ("codegen",)}     # before the corpus registers
        import runpy
        sys.argv = [os.path.join(DYN, "dyn_runner.py")] + argv
        runpy.run_path(sys.argv[0], run_name="__main__")
        return 0
    import compat_runner as cr

    def engine_():
        import pydynamo
        from pydynamo.backends import lookup_backend
        codegen = lookup_backend("codegen")

        def wrap(fn, counting):
            return pydynamo.optimize(fn, dynamic=True,
                                     backend=lambda gm, ex: (counting(gm, ex), codegen(gm, ex))[1])
        return pydynamo.reset, wrap
    cr.ENGINES["pydynamo"] = engine_
    return cr.main(argv)


def _compare(eager_dir: str, pyd_dir: str) -> tuple:
    import torch
    sys.path[:0] = [COMPAT]
    import test_compat as tc
    ok, bad = 0, []
    for f in sorted(glob.glob(os.path.join(pyd_dir, "*.pt"))):
        name = os.path.basename(f)[:-3]
        rec = torch.load(f, weights_only=False)
        eager = torch.load(os.path.join(eager_dir, name + ".pt"), weights_only=False)
        why = tc.compare(rec, eager, "pydynamo")
        if rec["error"]:
            why.append("error: " + rec["error"].splitlines()[0][:200])
        why += ["warned: " + w.splitlines()[0][:200] for c in rec["calls"] for w in c["warnings"]][:2]
        if why:
            bad.append((name, why))
        else:
            ok += 1
    return ok, bad


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--corpus", default="compat,dyn")
    ap.add_argument("--out", default="")
    ap.add_argument("--child", nargs=3, metavar=("CORPUS", "ENGINE", "OUT"), help=argparse.SUPPRESS)
    ns = ap.parse_args()
    if ns.child:
        return _child(*ns.child)
    out = ns.out or tempfile.mkdtemp(prefix="dyn_codegen_sweep_")
    total_bad = 0
    for corpus in ns.corpus.split(","):
        dirs = {e: os.path.join(out, corpus, e) for e in ("eager", "pydynamo")}
        for engine, d in dirs.items():
            subprocess.run([sys.executable, __file__, "--child", corpus, engine, d], cwd=REPO,
                           stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
        ok, bad = _compare(dirs["eager"], dirs["pydynamo"])
        for name, why in bad:
            print(f"{corpus}: {name}\n    " + "\n    ".join(why))
        print(f"== {corpus}: {ok} cases equal eager without warnings, {len(bad)} not (records: {out})")
        total_bad += len(bad)
    return 1 if total_bad else 0


if __name__ == "__main__":
    sys.exit(main())

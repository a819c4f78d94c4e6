"""The Triton fuzz with codegen's size thresholds lowered to the fuzzer's small sizes, so every
unaligned 16-bit matrix product pads (codegen/gemm.py), every column sum of >= 4 rows splits
in chunks of 2 (codegen/lowering.py), and every inner (reduction) size above 8 loops in blocks
of 4 (codegen/triton_launch.py: looped reductions, the one-pass softmax of codegen/triton.py):
those paths otherwise start at sizes the generator never makes. One process (the thresholds are
module constants, set before any program runs).

    python scripts/fuzz_lowered_thresholds.py [--seed 50000] [--programs 150]
"""
import argparse
import collections
import os
import sys

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
os.environ.setdefault("TRITON_INTERPRET", "1")
sys.path[:0] = [os.path.join(REPO, "tests", "fuzz"), REPO]

import codegen.gemm as gemm  # noqa: E402
import codegen.lowering as lowering  # noqa: E402
import codegen.triton as triton_printer  # noqa: E402
import codegen.triton_launch as launch  # noqa: E402
import fuzz_runner as fr  # noqa: E402
import program_gen as pg  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=50000)
    ap.add_argument("--programs", type=int, default=150)
    a = ap.parse_args()
    gemm.PAD_MIN_MACS = 1
    lowering.SPLIT_MIN_ROWS, lowering.SPLIT_CHUNK = 4, 2
    launch.PERSISTENT_MAX, launch.RBLOCK_LOOP = 8, 4
    choose = launch.choose_config

    def lowered(*args, **kwargs):
        cfg = choose(*args, **kwargs)
        cfg.persistent_max = launch.PERSISTENT_MAX
        return cfg
    triton_printer.choose_config = lowered
    failures, runs = collections.Counter(), 0
    for seed in range(a.seed, a.seed + a.programs):
        p = pg.generate(seed)
        for dyn in (None, True):
            o = fr.run_program(p, "triton", dyn)
            runs += 1
            if o.failed:
                failures[o.signature()] += 1
                if failures[o.signature()] == 1:
                    print("FAIL", seed, dyn, o.signature(), flush=True)
    print(f"{a.programs} programs from seed {a.seed}, {runs} runs (triton x {{None, True}}), "
          f"failures: {dict(failures) or 0}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

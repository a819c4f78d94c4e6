"""A/B of the C++ path's GEMM-bias rule in one process, interleaved rounds: the old rule
(Backend.gemm_bias_min_numel None: a linear's bias joins the kernel that reads the product) against
the current one (the bias stays in addmm for products of at least that many elements), beside
torch.compile. Cases are bench_codegen.py's, by a word of their name:

    python benchmarks/gemm_bias_ab.py "BERT-base 4" --rounds 16
    python benchmarks/gemm_bias_ab.py "GPT-2 blocks" "GPT-2 tiny" --rounds 15
    OMP_NUM_THREADS=1 python benchmarks/gemm_bias_ab.py "BERT-base 2" --cpu-time

`--setting out_reuse` A/Bs Backend.gemm_out_reuse instead (old: off, every product a new
tensor; new: on, a product written with `out=` into a dead buffer of its layout):

    python benchmarks/gemm_bias_ab.py "BERT-base 2" "BERT-base 4" --setting out_reuse --rounds 16

`--setting act` A/Bs Backend.gemm_act_min_numel (old: None, a GELU/relu after a product is our
kernel's; new: the bound, above it torch's `_addmm_activation`).

Prints the median ms per call of each contender and the ratios; the rounds rotate the order of
the three, each block after untimed warm calls (bench_codegen.timeit_interleaved).
"""
import argparse
import copy
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import benchmarks.bench_codegen as B  # noqa: E402
import codegen  # noqa: E402
import pydynamo  # noqa: E402
from codegen.pipeline import Backend  # noqa: E402


# --setting: the Backend attribute A/B'd and its old value (new: the class's current one)
SETTINGS = {"bias": ("gemm_bias_min_numel", None), "out_reuse": ("gemm_out_reuse", False),
            "act": ("gemm_act_min_numel", None)}


def contenders(word, setting="bias"):
    """(name, {"old": fn, "new": fn, "inductor": fn}, iters) for the case named by `word`."""
    attr, old_value = SETTINGS[setting]
    bound = getattr(Backend, attr)
    fns = {}
    found = [c for c in B.cases(False) if word.lower() in c[0].lower()]
    try:
        if found:
            name, mod, args = found[0]
            mod.eval()
            ref = mod(*args)
            for key, b in (("old", old_value), ("new", bound)):
                setattr(Backend, attr, b)
                f = codegen.compile_fx(torch.fx.symbolic_trace(mod), args)
                torch.testing.assert_close(f(*args), ref, rtol=1e-3, atol=1e-3)
                fns[key] = (lambda f: lambda: f(*args))(f)
            ind = torch.compile(mod)
            fns["inductor"] = lambda: ind(*args)
            return name, fns, 20
        name, model, kwargs, attr = next(c for c in B.model_cases(False)
                                         if word.lower() in c[0].lower())
        model.eval()
        ref = getattr(model(**kwargs), attr)
        for key, b in (("old", old_value), ("new", bound)):
            setattr(Backend, attr, b)
            m = pydynamo.optimize(copy.deepcopy(model), backend="codegen")
            torch.testing.assert_close(getattr(m(**kwargs), attr), ref, rtol=1e-3, atol=1e-3)
            fns[key] = (lambda m: lambda: getattr(m(**kwargs), attr))(m)
        ind = torch.compile(copy.deepcopy(model))
        fns["inductor"] = lambda: getattr(ind(**kwargs), attr)
        fns["inductor"]()
        t0 = time.perf_counter()
        fns["old"]()
        return name, fns, max(2, min(20, int(0.3 / (time.perf_counter() - t0))))
    finally:
        setattr(Backend, attr, bound)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("cases", nargs="+", help="words of bench_codegen case names")
    ap.add_argument("--rounds", type=int, default=15)
    ap.add_argument("--setting", choices=sorted(SETTINGS), default="bias",
                    help="the Backend attribute A/B'd (SETTINGS)")
    ap.add_argument("--cpu-time", action="store_true",
                    help="time by this thread's CPU time (needs OMP_NUM_THREADS=1), as "
                         "bench_codegen.py --cpu-time")
    a = ap.parse_args()
    if a.cpu_time:
        if torch.get_num_threads() != 1 or os.environ.get("OMP_NUM_THREADS") != "1":
            sys.exit("--cpu-time needs OMP_NUM_THREADS=1 (every kernel on this thread)")
        B.CLOCK = time.thread_time
    print(f"torch {torch.__version__}, threads {torch.get_num_threads()}, "
          f"load {os.getloadavg()[0]:.2f}")
    with torch.no_grad():
        for word in a.cases:
            name, fns, iters = contenders(word, a.setting)
            old, new, ind = B.timeit_interleaved(list(fns.values()), [], iters, a.rounds,
                                                 warm=1 if iters < 5 else 3)
            print(f"{name:32s} old {old * 1e3:8.3f} ms | new {new * 1e3:8.3f} ms | inductor "
                  f"{ind * 1e3:8.3f} ms | old/ind {ind / old:5.3f} new/ind {ind / new:5.3f} "
                  f"new/old {old / new:5.3f} (iters {iters}, load {os.getloadavg()[0]:.2f})",
                  flush=True)


if __name__ == "__main__":
    main()

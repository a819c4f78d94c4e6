"""Per-step time of our generated wrapper beside torch.compile's, for one model of
bench_codegen.py, in one process with the calls of the two engines alternating:

    OMP_NUM_THREADS=1 python benchmarks/perop_vs_inductor.py "BERT-base 2" --calls 30
    OMP_NUM_THREADS=2 python benchmarks/perop_vs_inductor.py "BERT-base 4" --calls 10

Ours: every `kernelN` and extern of the wrapper(s) pydynamo compiled (as profile_wrapper.py
does). torch.compile's: its output module's `extern_kernels` calls, its C++ kernels
(`cpp_fused_*`) and the attention op it calls directly, each wrapped in the same timer. Each
engine's steps are printed in order with the median and the minimum over the calls, then the
call's total and the sum of its steps (the rest is Python around the steps: guards, the
wrapper's own lines, the model's code outside the graph). With OMP_NUM_THREADS=1 the timer is
this thread's CPU time (robust to other load on a shared machine; every step then runs on
this thread); otherwise wall time, which other processes on two cores distort badly (take
the minimum column, and the load average printed at the end). Session 20 (issue 18's BERT line)
read the engines' differences from this table.
"""
import argparse
import copy
import os
import statistics
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import benchmarks.bench_codegen as B  # noqa: E402
import codegen  # noqa: E402
import pydynamo  # noqa: E402

CLOCK = time.thread_time if os.environ.get("OMP_NUM_THREADS") == "1" else time.perf_counter
ATTENTION_OPS = ("_scaled_dot_product_flash_attention_for_cpu",)


class Steps:
    """The (label, seconds) of each timed step of the call being run."""
    def __init__(self):
        self.current = []

    def timed(self, label, fn):
        def call(*args, **kwargs):
            t0 = CLOCK()
            out = fn(*args, **kwargs)
            self.current.append((label, CLOCK() - t0))
            return out
        return call


def instrument_ours(steps, fn):
    glb = fn.__globals__
    for k in [k for k in glb if k.startswith("kernel")]:
        glb[k] = steps.timed(k, glb[k])
    externs = glb.get("_externs", [])
    for i, e in enumerate(externs):
        externs[i] = steps.timed(f"extern{i}:{getattr(e, '__name__', type(e).__name__)}", e)


def instrument_inductor(steps):
    """Wrap the steps of torch.compile's latest output module (its loaded Python module)."""
    from torch._inductor.codecache import PyCodeCache

    mod = [m for m in PyCodeCache.modules if hasattr(m, "call") or hasattr(m, "Runner")][-1]

    class Externs:
        def __init__(self, inner):
            self.inner = inner

        def __getattr__(self, name):
            return steps.timed(name, getattr(self.inner, name))
    mod.extern_kernels = Externs(mod.extern_kernels)
    for k in [k for k in vars(mod) if k.startswith("cpp_fused")]:
        setattr(mod, k, steps.timed(k, getattr(mod, k)))
    for op in ATTENTION_OPS:
        packet = getattr(torch.ops.aten, op)
        packet.default = steps.timed(op, packet.default)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="a word of a bench_codegen model case name")
    ap.add_argument("--calls", type=int, default=30)
    a = ap.parse_args()
    name, model, kwargs, attr = next(c for c in B.model_cases(False)
                                     if a.case.lower() in c[0].lower())
    model.eval()
    steps = Steps()

    def backend(gm, example_inputs):
        f = codegen.compile_fx(gm, example_inputs)
        instrument_ours(steps, f)
        return f
    seq = {"ours": [], "inductor": []}
    total = {"ours": [], "inductor": []}
    with torch.no_grad():
        ours = pydynamo.optimize(model, backend=backend)
        ind = torch.compile(copy.deepcopy(model))
        ind(**kwargs)
        instrument_inductor(steps)
        fns = {"ours": lambda: getattr(ours(**kwargs), attr),
               "inductor": lambda: getattr(ind(**kwargs), attr)}
        torch.testing.assert_close(fns["ours"](), fns["inductor"](), rtol=1e-3, atol=1e-3)
        for _ in range(3):
            for f in fns.values():
                f()
        for c in range(a.calls):
            for k in (("ours", "inductor") if c % 2 else ("inductor", "ours")):
                steps.current = []
                t0 = CLOCK()
                fns[k]()
                total[k].append(CLOCK() - t0)
                seq[k].append(steps.current)
    print(f"{name}: threads {torch.get_num_threads()}, "
          f"{'thread CPU time' if CLOCK is time.thread_time else 'wall time'}, {a.calls} calls")
    for k in ("ours", "inductor"):
        sums = [sum(d for _, d in s) for s in seq[k]]
        print(f"== {k}: call median {statistics.median(total[k]) * 1e6:.0f} us, its steps "
              f"{statistics.median(sums) * 1e6:.0f} us")
        for i, (label, _) in enumerate(seq[k][0]):
            v = [s[i][1] for s in seq[k] if len(s) > i]
            print(f"  {i:3d} {label:60s} {statistics.median(v) * 1e6:9.1f} us "
                  f"(min {min(v) * 1e6:9.1f})")
    print(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()

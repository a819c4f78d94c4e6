"""Where a compiled graph's time goes: per kernel and per extern call of the generated wrapper.

    python benchmarks/profile_wrapper.py "GPT-2"          # a case of bench_codegen.py by name
    python benchmarks/profile_wrapper.py softmax --calls 500
    python benchmarks/profile_wrapper.py BERT --calls 20     # a model of bench_codegen.py

Compiles the case with codegen.compile_fx (C++ path; a transformers model of
bench_codegen.model_cases goes through pydynamo.optimize with a backend that calls compile_fx and
keeps every graph's callable), wraps every `kernelN` and extern call of
the generated wrapper in a timer, and prints µs per call for the slowest steps beside the total;
the wrapper file (printed first) says which FX nodes and user lines each step implements. Then
torch's profiler gives eager's per-op times for the same module, to compare step by step.
"""
import argparse
import collections
import os
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)

import torch  # noqa: E402

import benchmarks.bench_codegen as B  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("case", help="a word of a bench_codegen case name")
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--top", type=int, default=20)
    a = ap.parse_args()
    import codegen
    found = [c for c in B.cases(False) if a.case.lower() in c[0].lower()]
    model = None
    if found:
        name, mod, args = found[0]
        mod.eval()
    else:
        name, model, kwargs, attr = next(c for c in B.model_cases(False)
                                         if a.case.lower() in c[0].lower())
        model.eval()
    spent = collections.defaultdict(float)

    def timed(label, fn):
        def call(*args, **kwargs):
            t0 = time.perf_counter()
            out = fn(*args, **kwargs)
            spent[label] += time.perf_counter() - t0
            return out
        return call

    def instrument(fn, prefix=""):
        print(f"{name}: wrapper {fn.wrapper_path}")
        glb = fn.__globals__
        for k in [k for k in glb if k.startswith("kernel")]:
            glb[k] = timed(prefix + k, glb[k])
        externs = glb.get("_externs", [])
        for i in range(len(externs)):
            externs[i] = timed(f"{prefix}extern{i}", externs[i])

    with torch.no_grad():
        if model is None:
            fn = codegen.compile_fx(torch.fx.symbolic_trace(mod), args)
            instrument(fn)
        else:
            import pydynamo
            graphs = []

            def backend(gm, example_inputs):
                graphs.append(codegen.compile_fx(gm, example_inputs))
                instrument(graphs[-1], f"g{len(graphs) - 1}.")
                return graphs[-1]
            compiled = pydynamo.optimize(model, backend=backend)
            args = []

            def fn():
                return getattr(compiled(**kwargs), attr)
            mod = lambda: model(**kwargs)   # noqa: E731  (eager, for the profiler below)
        for _ in range(20):
            fn(*args)
        spent.clear()
        t0 = time.perf_counter()
        for _ in range(a.calls):
            fn(*args)
        total = (time.perf_counter() - t0) / a.calls
        print(f"total {total * 1e6:.1f} us per call; kernels + externs "
              f"{sum(spent.values()) / a.calls * 1e6:.1f} us")
        for k, v in sorted(spent.items(), key=lambda kv: -kv[1])[:a.top]:
            print(f"  {k:10s} {v / a.calls * 1e6:9.1f} us")
        from torch.profiler import profile
        with profile() as p:
            for _ in range(a.calls // 4 or 1):
                mod(*args)
        print(p.key_averages().table(sort_by="self_cpu_time_total", row_limit=12))


if __name__ == "__main__":
    main()

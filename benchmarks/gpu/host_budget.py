"""Where the host's time goes in one LM forward under pydynamo's codegen (default: GPT2Model, bf16,
batch 8, seq 256), measured without a profiler (cProfile inflates every Python call): host-loop
µs per forward of
  forward      the whole `model(input_ids=ids)` through pydynamo (frame hook, guards, the
               compiled graph, rebuilding the transformers output);
  graph        the generated wrapper `call` alone, on the arguments pydynamo passed it;
  no kernels   the wrapper with every Triton launch replaced by a no-op;
  no externs   the wrapper with every extern (mm, addmm, SDPA, ...) replaced by a function
               returning that extern's first result (same tensor, no work);
  bare         no kernels and no externs: the wrapper's own lines (entry checks, allocations,
               views, the output);
  forward, bare  the whole forward with the graph bare: frame hook, guards, output rebuild;
so forward - graph is pydynamo's frame and guard cost, graph - no kernels the Triton launches,
graph - no externs the extern calls. With --device cpu (a smoke-sized model, Triton kernels
under TRITON_INTERPRET=1) only the bare rows are timed: the host's own work without any device
work, which is the same Python on either device.

    python benchmarks/gpu/host_budget.py [--model gpt2|gpt2-lmhead|llama] [--dtype bfloat16] [--n 50]
    TRITON_INTERPRET=1 python benchmarks/gpu/host_budget.py --device cpu --dtype float32
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))   # bench_gpu

import torch  # noqa: E402


def per_call_us(fn, n, sync):
    for _ in range(20):
        fn()
    sync()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    sync()
    return host


def host_us(fn, n, sync):
    """Best over caller depths 0..5: a direct call of the wrapper (not under pydynamo's frame
    hook) can straddle a CPython data-stack chunk end at one depth and pay an mmap per call
    (see benchmarks/bench_call_depth.py); the forward itself is measured the same way."""
    def at(depth):
        return per_call_us(fn, n, sync) if depth == 0 else at(depth - 1)
    return min(at(d) for d in range(6))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default="gpt2", choices=["gpt2", "gpt2-lmhead", "llama"])
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    ap.add_argument("--n", type=int, default=50)
    ap.add_argument("--per-extern", action="store_true",
                    help="also each extern's own host time per forward (perf_counter around "
                         "each call, grouped by what it calls), the most expensive first")
    a = ap.parse_args()
    import pydynamo
    from bench_gpu import lm_model
    from codegen import pipeline
    from codegen.triton_launch import TritonLauncher
    gpu = a.device == "cuda"
    sync = torch.cuda.synchronize if gpu else (lambda: None)
    graphs = []
    build = pipeline.build       # the one pipeline's last step: a lowered graph -> its callable

    def recording(*args, **kw):
        call = build(*args, **kw)
        seen = {}

        def call_and_keep(*xs):
            seen.setdefault("args", xs)
            return call(*xs)
        graphs.append((call, seen))
        return call_and_keep
    pipeline.build = recording
    model, ids = lm_model(a.model, not gpu, a.device, getattr(torch, a.dtype))
    m = pydynamo.optimize(model, backend="codegen", options={"backend_kernels": "triton"})
    fwd = lambda: m(input_ids=ids, use_cache=False)      # noqa: E731
    rows = []
    with torch.no_grad():
        fwd()
        (call, seen), = graphs
        args = seen["args"]
        ns = call.__globals__
        launchers = {k: v for k, v in ns.items() if TritonLauncher.of(v) is not None}
        externs = list(ns["_externs"])
        firsts = {}

        def fake(i):
            def f(*xs, **kw):
                if i not in firsts:
                    firsts[i] = externs[i](*xs, **kw)
                return firsts[i]
            return f
        if gpu:
            rows += [("forward", host_us(fwd, a.n, sync)),
                     ("graph", host_us(lambda: call(*args), a.n, sync))]
            ns.update({k: (lambda *xs: None) for k in launchers})
            rows.append(("no kernels", host_us(lambda: call(*args), a.n, sync)))
            ns.update(launchers)
            ns["_externs"][:] = [fake(i) for i in range(len(externs))]
            call(*args)
            rows.append(("no externs", host_us(lambda: call(*args), a.n, sync)))
        ns["_externs"][:] = [fake(i) for i in range(len(externs))]
        call(*args)
        ns.update({k: (lambda *xs: None) for k in launchers})
        rows.append(("bare", host_us(lambda: call(*args), a.n, sync)))
        rows.append(("forward, bare", host_us(fwd, a.n, sync)))
        ns.update(launchers)
        ns["_externs"][:] = externs
        if a.per_extern:
            per = _per_extern(ns, externs, lambda: call(*args), a.n, sync)
    print(f"{a.model} {a.dtype} on {a.device}: {len(launchers)} kernels, {len(externs)} externs, "
          f"{len(args)} inputs per forward")
    for name, us in rows:
        print(f"  {name:<14} {us:9.1f} us per forward")
    d = dict(rows)
    print(f"  => frame+guards+output {d['forward, bare'] - d['bare']:.1f} us, "
          f"wrapper's own lines {d['bare']:.1f} us", end="")
    if gpu:
        print(f", Triton launches {d['graph'] - d['no kernels']:.1f} us, externs "
              f"{d['graph'] - d['no externs']:.1f} us", end="")
    print()
    if a.per_extern:
        for name, (us, count) in per[:15]:
            print(f"  extern {name[:70]:<70} {us:8.1f} us per forward over {count} calls")


def _per_extern(ns, externs, fn, n, sync):
    """[(name, (host us per forward, calls per forward))] of the graph's externs, largest first."""
    spent = {}

    def timed(i):
        f = externs[i]
        name = getattr(f, "__qualname__", None) or repr(f)
        name = f"{getattr(f, '__module__', '') or ''}.{name}"

        def g(*xs, **kw):
            t0 = time.perf_counter()
            try:
                return f(*xs, **kw)
            finally:
                rec = spent.setdefault(name, [0.0, 0])
                rec[0] += time.perf_counter() - t0
                rec[1] += 1
        return g
    ns["_externs"][:] = [timed(i) for i in range(len(externs))]
    for _ in range(5):
        fn()
    sync()
    spent.clear()
    for _ in range(n):
        fn()
    sync()
    ns["_externs"][:] = externs
    return sorted(((k, (v[0] / n * 1e6, v[1] // n)) for k, v in spent.items()),
                  key=lambda kv: -kv[1][0])


if __name__ == "__main__":
    main()

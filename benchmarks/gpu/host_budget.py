"""Where the host's time goes in one GPT-2 small forward under pydynamo's codegen (bf16, batch 8,
seq 256), measured without a profiler (cProfile inflates every Python call): host-loop µs per
forward of
  forward      the whole `model(input_ids=ids)` through pydynamo (frame hook, guards, the
               compiled graph, rebuilding the transformers output);
  graph        the generated wrapper `call` alone, on the arguments pydynamo passed it;
  no kernels   the wrapper with every Triton launch replaced by a no-op;
  no externs   the wrapper with every extern (mm, addmm, SDPA, ...) replaced by a function
               returning that extern's first result (same tensor, no work);
so forward - graph is pydynamo's frame and guard cost, graph - no kernels the Triton launches,
graph - no externs the extern calls.

    python benchmarks/gpu/host_budget.py [--dtype bfloat16] [--n 50]
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))     # launch_cost's timer

import torch  # noqa: E402


def host_us(fn, n):
    """Best over caller depths 0..5: a direct call of the wrapper (not under pydynamo's frame
    hook) can straddle a CPython data-stack chunk end at one depth and pay an mmap per call
    (see benchmarks/bench_call_depth.py); the forward itself is measured the same way."""
    from launch_cost import per_call_us

    def at(depth):
        return per_call_us(fn, n) if depth == 0 else at(depth - 1)
    return min(at(d) for d in range(6))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", type=int, default=50)
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2Model
    import pydynamo
    from codegen import pipeline
    from codegen.triton_launch import TritonLauncher
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
    cfg = GPT2Config(n_layer=12)
    torch.manual_seed(0)
    model = GPT2Model(cfg).cuda().eval().to(getattr(torch, a.dtype))
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    m = pydynamo.optimize(model, backend="codegen")
    with torch.no_grad():
        m(input_ids=ids)
        (call, seen), = graphs
        args = seen["args"]
        ns = call.__globals__
        rows = [("forward", host_us(lambda: m(input_ids=ids), a.n)),
                ("graph", host_us(lambda: call(*args), a.n))]
        launchers = {k: v for k, v in ns.items() if isinstance(v, TritonLauncher)}
        ns.update({k: (lambda *xs: None) for k in launchers})
        rows.append(("no kernels", host_us(lambda: call(*args), a.n)))
        ns.update(launchers)
        externs = list(ns["_externs"])
        firsts = {}

        def fake(i):
            def f(*xs, **kw):
                if i not in firsts:
                    firsts[i] = externs[i](*xs, **kw)
                return firsts[i]
            return f
        ns["_externs"][:] = [fake(i) for i in range(len(externs))]
        call(*args)
        rows.append(("no externs", host_us(lambda: call(*args), a.n)))
        ns["_externs"][:] = externs
    print(f"GPT-2 {a.dtype}: {len(launchers)} kernels, {len(externs)} externs per forward")
    for name, us in rows:
        print(f"  {name:<12} {us:9.1f} us per forward")
    d = dict(rows)
    print(f"  => frame+guards+output {d['forward'] - d['graph']:.1f} us, Triton launches "
          f"{d['graph'] - d['no kernels']:.1f} us, externs {d['graph'] - d['no externs']:.1f} us, "
          f"rest of the wrapper {d['no kernels'] - (d['graph'] - d['no externs']):.1f} us")


if __name__ == "__main__":
    main()

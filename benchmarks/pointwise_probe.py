"""Why the CPU pointwise chain (benchmarks/bench_codegen.py) ran at 0.98 of torch.compile on the
16-core host: times eager, inductor and our codegen in its variants, interleaved in one process
per thread count (OMP_NUM_THREADS=1 and 16 by default, each a fresh worker process).

    python benchmarks/pointwise_probe.py            # full size (4M floats), threads 1 and 16
    python benchmarks/pointwise_probe.py --quick    # tiny size, checks that everything runs

Our variants are codegen options (codegen/options.py; one process compiles them all):
  vector_width  512 (default now) | 256 | native (g++'s choice: 256 on Intel Xeons)
  cpp_tanh      inline (default now: pd_tanhf) | libm (libmvec's tanhf)
  omp_schedule  "" (static, one chunk per thread) | e.g. static,65536
"main" is what main compiled before this probe (native width, libmvec tanh). "kernel only" calls
the default variant's kernel into a preallocated output: the gap to "ours" is allocation plus the
Python wrapper. The table gives ms per call (median of interleaved rounds), inductor's time over
ours (above 1 = ours faster), minor page faults per call, and which libmvec widths the library
links (eN16 = 16 floats, dN8 = 8). Written to $OUT/pointwise_probe.txt as well when OUT is set.
"""
import argparse
import json
import os
import re
import resource
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

VARIANTS = {   # name -> codegen options
    "main (native, libm tanh)": {"vector_width": "native", "cpp_tanh": "libm"},
    "ours (512, inline tanh)": {},
    "512, libm tanh": {"cpp_tanh": "libm"},
    "native, inline tanh": {"vector_width": "native"},
    "512, static,65536": {"omp_schedule": "static,65536"},
    "512, dynamic,65536": {"omp_schedule": "dynamic,65536"},
}


def _vector_widths(so):
    data = open(so, "rb").read()
    return " ".join(sorted({m.decode() for m in re.findall(rb"_ZGV([bcde]N\d+)v_", data)})) or "-"


def _kernel_only(fn, x, y):
    """The compiled kernel called straight into one preallocated output."""
    import ctypes
    import torch
    k = fn._lib.kernel0
    k.argtypes, k.restype = [ctypes.c_void_p] * 3, ctypes.c_int
    out = torch.empty_like(x)
    xp, yp, op = x.data_ptr(), y.data_ptr(), out.data_ptr()
    return lambda a, b, keep=(x, y, out): k(xp, yp, op)    # keep: the buffers outlive the call


def _faults_per_call(fn, args, calls=10):
    for _ in range(3):
        fn(*args)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(calls):
        fn(*args)
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before) / calls


def worker(n, rounds, iters):
    """One thread count (set by the parent through OMP_NUM_THREADS): JSON rows on stdout."""
    sys.path.insert(0, ROOT)
    import torch
    import torch.fx
    import codegen
    from benchmarks.bench_codegen import PointwiseChain, timeit_interleaved
    torch.manual_seed(0)
    x, y = torch.randn(n), torch.randn(n)
    mod = PointwiseChain().eval()
    names, fns, libs = ["eager", "inductor"], [mod], {}
    with torch.no_grad():
        ref = mod(x, y)
        t0 = time.perf_counter()
        fns.append(torch.compile(mod))
        fns[-1](x, y)
        print(f"  inductor compiled in {time.perf_counter() - t0:.1f} s", file=sys.stderr)
        gm = torch.fx.symbolic_trace(mod)
        for name, opts in VARIANTS.items():
            fn = codegen.compile_fx(gm, [x, y], strict=True, **opts)
            names.append(name)
            fns.append(fn)
            libs[name] = _vector_widths(fn.library_path)
        names.append("kernel only (512, inline)")
        fns.append(_kernel_only(fns[names.index("ours (512, inline tanh)")], x, y))
        for name, fn in zip(names, fns):
            if not name.startswith("kernel only"):
                torch.testing.assert_close(fn(x, y), ref, rtol=1e-4, atol=1e-4, msg=name)
        times = timeit_interleaved(fns, [x, y], iters, rounds)
        faults = [_faults_per_call(f, [x, y]) for f in fns]
    for name, t, f in zip(names, times, faults):
        print("ROW " + json.dumps(dict(name=name, ms=t * 1e3, faults=f, lib=libs.get(name, ""))))


def run_workers(a):
    threads = [int(t) for t in a.threads.split(",")]
    n = 1 << 12 if a.quick else 1 << 22
    rounds, iters = (2, 2) if a.quick else (a.rounds, None)
    results = {}
    with tempfile.TemporaryDirectory() as cache:
        for t in threads:
            env = dict(os.environ, OMP_NUM_THREADS=str(t), PYDYNAMO_CACHE_DIR=cache)
            it = iters or (3 if t == 1 else 20)
            print(f"threads {t}: worker ...", file=sys.stderr, flush=True)
            r = subprocess.run([sys.executable, os.path.abspath(__file__), "--worker", str(n),
                                str(rounds), str(it)], env=env, capture_output=True, text=True,
                               timeout=600)
            sys.stderr.write(r.stderr[-3000:] if r.returncode else r.stderr)
            if r.returncode:
                raise SystemExit(f"worker for {t} threads failed (exit {r.returncode})")
            results[t] = [json.loads(ln[4:]) for ln in r.stdout.splitlines()
                          if ln.startswith("ROW ")]
    return threads, n, results


def _gxx_target():
    """What -march=native means to this g++ (its tuning decides the default vector width)."""
    sys.path.insert(0, ROOT)
    from codegen.codecache import CXX
    try:
        out = subprocess.run([CXX, "-march=native", "-Q", "--help=target"], capture_output=True,
                             text=True, timeout=60).stdout
    except Exception as e:
        return f"g++ target unknown ({e})"
    found = re.findall(r"^\s+-m(arch|tune)=\s+(\S+)", out, re.M)
    return "g++ native: " + " ".join(f"{k}={v}" for k, v in found)


def table(threads, n, results):
    import torch
    rows = [r["name"] for r in results[threads[0]]]
    head = f"{'contender':28s}" + "".join(f" | {t:>2d} thr ms  ind/this  flt/call"
                                         for t in threads)
    if len(threads) > 1:
        head += f" | scaling {threads[0]}->{threads[-1]}"
    lines = [f"pointwise chain, {n} floats; torch {torch.__version__}, cpus {os.cpu_count()}, "
             f"{time.strftime('%Y-%m-%d %H:%M:%S')}; {_gxx_target()}", head, "-" * len(head)]
    for name in rows:
        line = f"{name:28s}"
        by_t = {t: next(r for r in results[t] if r["name"] == name) for t in threads}
        for t in threads:
            ind = next(r for r in results[t] if r["name"] == "inductor")["ms"]
            r = by_t[t]
            line += f" | {r['ms']:10.3f}  {ind / r['ms']:8.2f}  {r['faults']:8.1f}"
        if len(threads) > 1:
            line += f" | {by_t[threads[0]]['ms'] / by_t[threads[-1]]['ms']:6.2f}x"
        lib = by_t[threads[0]]["lib"]
        lines.append(line + (f"   libmvec: {lib}" if lib else ""))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true", help="tiny size and 2 rounds (smoke test)")
    ap.add_argument("--threads", default="1,16", help="comma-separated OMP_NUM_THREADS values")
    ap.add_argument("--rounds", type=int, default=7, help="interleaved timing rounds")
    ap.add_argument("--worker", nargs=3, type=int, help=argparse.SUPPRESS)
    a = ap.parse_args()
    if a.worker:
        return worker(*a.worker)
    t0 = time.perf_counter()
    text = table(*run_workers(a))
    text += f"\n(total {time.perf_counter() - t0:.0f} s)"
    print(text)
    if os.environ.get("OUT"):
        os.makedirs(os.environ["OUT"], exist_ok=True)
        with open(os.path.join(os.environ["OUT"], "pointwise_probe.txt"), "w") as f:
            f.write(text + "\n")


if __name__ == "__main__":
    main()

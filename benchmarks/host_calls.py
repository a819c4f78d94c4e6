"""Host cost of the per-call steps a generated wrapper takes, on the CPU (no device needed), in
µs per call (best of 3 timeit runs):
  * the entry check of 100 tensor inputs: the C++ `entry` (codegen/runtime.py entry_check),
    its straight-line Python fallback, and the per-input Python conditions wrappers used before;
  * one allocation: `torch.empty_strided(size, stride, dtype=, device=)` through the partial
    wrappers used before, and the bound `new_empty_strided` of `runtime.allocator`;
  * one Triton launch of five arguments through `triton_launch.direct_launch`, with a no-op in
    place of the compiled launcher: before arming (the key built and looked up) and armed.

    OMP_NUM_THREADS=1 python benchmarks/host_calls.py [--n 20000]
"""
import argparse
import functools
import os
import sys
import timeit

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import torch  # noqa: E402

from codegen import runtime  # noqa: E402
from codegen.triton_launch import direct_launch, specialization_key  # noqa: E402


def us(fn, n):
    return min(timeit.repeat(fn, number=n, repeat=3)) / n * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=20000)
    n = ap.parse_args().n
    rows = []
    ts = tuple(torch.randn(4, 4) for _ in range(100))
    spec = (torch.float32, "cpu", (4, 4), (4, 1))
    entry, make = runtime.entry_check()
    specs = make((spec,) * 100)
    if entry is not runtime._python_entry:
        rows.append(("entry check, 100 inputs: C++ entry", us(lambda: entry(ts, specs, 1), n)))
    py = runtime._python_specs((spec,) * 100)
    rows.append(("entry check, 100 inputs: Python fallback",
                 us(lambda: runtime._python_entry(ts, py, 1), n // 10)))
    old = "\n".join(["def old(" + ", ".join(f"a{i}" for i in range(100)) + "):"] +
                    [f"    if not a{i}.is_cpu or a{i}.dtype is not torch.float32 or "
                     f"a{i}.shape != (4, 4) or a{i}.stride() != (4, 1): return {i}"
                     for i in range(100)] + ["    return -1"])
    ns = {"torch": torch}
    exec(old, ns)
    rows.append(("entry check, 100 inputs: per-input conditions (before)",
                 us(lambda: ns["old"](*ts), n // 10)))
    before = functools.partial(torch.empty_strided, device=torch.device("cpu"))
    after = runtime.allocator(torch.device("cpu"))(torch.float32)
    rows.append(("allocation: partial(empty_strided) (before)",
                 us(lambda: before((2, 32, 64), (2048, 64, 1), dtype=torch.float32), n)))
    rows.append(("allocation: bound new_empty_strided", us(lambda: after((2, 32, 64), (2048, 64, 1)), n)))
    args = [torch.randn(64) for _ in range(4)] + [64]

    def noop(*a):
        pass
    key = specialization_key("tttti")
    for armed in (False, True):
        launch = direct_launch("tttti", 1024, {key(*args): (noop, (0,) * 9, "flat")}, noop)
        if armed:
            launch(0, (1, 1, 1), *args)      # the first aligned hit arms it
        else:
            launch.__globals__["arm"] = None  # keep the lookup path
        rows.append((f"launch, 5 arguments, no-op launcher: {'armed' if armed else 'key lookup'}",
                     us(lambda: launch(0, (1, 1, 1), *args), n)))
    for name, t in rows:
        print(f"{name:<62} {t:8.3f} us")


if __name__ == "__main__":
    main()

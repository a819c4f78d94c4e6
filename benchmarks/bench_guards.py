"""Cost of TENSOR_MATCH with its dispatch-key checks, relative to the guard before them.

    python benchmarks/bench_guards.py [--tensors N ...] [--iters I] [--repeat R] [--smoke]

A guard over N tensor inputs (a cache hit on a frame with N tensors, e.g. a module's parameters)
in three variants of the per-tensor condition:
  * "before": class, dtype, shape, stride, requires_grad, `device ==` (TENSOR_MATCH before the
    dispatch-key checks; conj/neg were checked for complex dtypes only);
  * "now": what `compile_guards` emits today: one call per tensor to the C++ check of
    pydynamo/tensor_check.py (the Python conditions below when it cannot be built);
  * "python": the Python conditions `compile_guards` emits without the C++ check
    (TensorSpec.key_checks: inference, neg for floating dtypes, conj for complex; `is_cpu`
    instead of building a device per call);
  * "full key set": "before" plus `torch._C._dispatch_keys(t).raw_repr() == k`, the exact
    DispatchKeySet (the alternative not taken).
Variants are interleaved over the repeats; the figure is the best repeat, in ns per guard call,
and each variant relative to "before". Only the ratios mean something on a shared machine;
--smoke runs a few iterations to check that the script works.
"""
from __future__ import annotations

import argparse
import contextlib
import timeit

import torch

from pydynamo import tensor_check
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards
from pydynamo.sources import LocalSource


def _handwritten(names: list[str], spec: TensorSpec, extra: str):
    conds = [f"type({{v}}) is C", f"{{v}}.dtype is D", f"{{v}}.shape == S", f"{{v}}.stride() == ST",
             f"{{v}}.requires_grad is {spec.requires_grad}", "{v}.device == DEV"] + ([extra] if extra else [])
    body = "".join(f"        {n} = L[{n!r}]\n        if not ({' and '.join(c.format(v=n) for c in conds)}): "
                   "return False\n" for n in names)
    text = ("def make(C, D, S, ST, DEV, DK, K):\n    def guard(L):\n      try:\n" + body +
            "      except Exception:\n        return False\n      return True\n    return guard\n")
    scope: dict = {}
    exec(text, scope)
    return scope["make"]


def build(n: int, mode: str):
    tensors = {f"x{i}": torch.randn(2, 2) for i in range(n)}
    spec = TensorSpec.of(tensors["x0"])
    if mode in ("now", "python"):
        guards = [Guard(LocalSource(k), GuardKind.TENSOR_MATCH, TensorSpec.of(v)) for k, v in tensors.items()]
        with tensor_check.disabled() if mode == "python" else contextlib.nullcontext():
            check = compile_guards(guards, {})
    else:
        extra = "DK({v}).raw_repr() == K" if mode == "full key set" else ""
        key = torch._C._dispatch_keys(tensors["x0"]).raw_repr()
        check = _handwritten(list(tensors), spec, extra)(spec.cls, spec.dtype, torch.Size(spec.shape),
                                                         spec.stride, spec.device, torch._C._dispatch_keys, key)
    assert check(tensors), f"{mode}: the guard must pass on its own inputs"
    return check, tensors


def main(argv=None) -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tensors", type=int, nargs="*", default=[1, 20])
    ap.add_argument("--iters", type=int, default=20000)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--smoke", action="store_true")
    ns = ap.parse_args(argv)
    if ns.smoke:
        ns.iters, ns.repeat = 20, 1
    modes = ("before", "python", "now", "full key set")
    print(f"{'tensors':>7}  {'variant':<13} {'ns/call':>9}  relative")
    for n in ns.tensors:
        built = {m: build(n, m) for m in modes}
        best = dict.fromkeys(modes, float("inf"))
        for _ in range(ns.repeat):
            for m, (check, L) in built.items():
                t = timeit.timeit(lambda: check(L), number=ns.iters) / ns.iters * 1e9
                best[m] = min(best[m], t)
        for m in modes:
            print(f"{n:>7}  {m:<13} {best[m]:>9.0f}  {best[m] / best['before']:.2f}x")


if __name__ == "__main__":
    main()

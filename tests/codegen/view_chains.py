"""Seeded random chains of view ops on strided, offset inputs, compared with eager.

    chain = generate(seed)        # a Chain: chain.source() is a readable, pasteable program
    res = check(chain, backend="codegen", dynamic=True)   # tests/differential.Result

A chain is `y = x`, then 1-4 view ops on `y` (slice with steps, select, narrow, transpose,
permute, t, movedim, unsqueeze, squeeze, expand, view, reshape, flatten, unflatten, diagonal,
as_strided relative to `y`'s own layout, split/chunk/unbind items), then a consumer: none (the
view itself is returned: its strides and storage offset must be eager's exactly), a pointwise
op, a reduction, a matmul or a cumsum, or the view and a pointwise op of it.

Invariants:
  * `generate(seed)` is a pure function of the seed (its own random.Random); each call's input
    is a pure function of (chain, call): `torch.manual_seed(seed * 8 + call)` then the input
    expression, so a repro is the source plus those lines;
  * inputs have rank 1-4, sizes that change across the 3 calls in some dims (even, >= 4) and
    size-1 dims now and then, and are views themselves: a storage offset, steps (non-contiguous
    strides) and a permutation, chosen per chain; random values, never all zero;
  * every op is checked on every call's input as it is generated: a chain that eager cannot
    run on all three calls is never produced (each op is drawn again until it runs).
Used by tests/codegen/test_view_chains.py (a fixed-seed subset) and scripts/view_chain_sweep.py
(the long sweep).
"""
from __future__ import annotations

import dataclasses
import linecache
import os
import random
import sys
from typing import Callable, List, Optional

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import backend_spec, run_differential  # noqa: E402  (tests/ is not a package)

NCALLS = 3


@dataclasses.dataclass
class Chain:
    seed: int
    ops: List[str]            # statements on y, one per view op
    consumer: str             # the return expression
    inputs: List[str]         # the input expression of each call

    def source(self) -> str:
        body = ["y = x"] + [f"y = {op}" for op in self.ops] + [f"return {self.consumer}"]
        return "def f(x):\n" + "".join(f"    {ln}\n" for ln in body)

    def build(self) -> Callable:
        name = f"<view chain {self.seed}>"
        src = self.source()
        linecache.cache[name] = (len(src), None, src.splitlines(True), name)
        ns = {"torch": torch}
        exec(compile(src, name, "exec"), ns)
        return ns["f"]

    def makers(self, device: str = "cpu") -> list:
        def maker(call, expr):
            if device != "cpu":     # made there (a copy with .to() would drop the offset)
                expr = expr.replace(")", f", device={device!r})", 1)

            def make():
                torch.manual_seed(self.seed * 8 + call)
                return (eval(expr, {"torch": torch}),)
            return make
        return [maker(i, e) for i, e in enumerate(self.inputs)]

    def repro(self, backend="codegen", dynamic=None) -> str:
        calls = "\n".join(f"torch.manual_seed({self.seed * 8 + i}); x = {e}; print(f(x))"
                          for i, e in enumerate(self.inputs))
        be, opts = backend_spec(backend)
        return (f"import torch, pydynamo\n{self.source()}\n"
                f"f = pydynamo.optimize(f, backend={be!r}, dynamic={dynamic!r}, options={opts!r})"
                f"\n{calls}\n")


# --------------------------------------------------------------------------------------------
# inputs


def _input_exprs(r: random.Random) -> List[str]:
    """One input expression per call: a strided view with an offset of a larger random tensor."""
    ndim = r.randint(1, 4)
    sizes = []               # per dim, its size on each call
    for _ in range(ndim):
        kind = r.random()
        if kind < 0.12:
            sizes.append((1,) * NCALLS)
        elif kind < 0.45:
            sizes.append((r.choice((4, 6)),) * NCALLS)
        else:
            s = r.choice((4, 6))
            sizes.append(tuple(s + 2 * c * r.choice((1, 2)) for c in range(NCALLS)))
    steps = [r.choice((1, 1, 2)) for _ in range(ndim)]
    starts = [r.choice((0, 0, 1, 2)) for _ in range(ndim)]
    if not any(starts):
        starts[r.randrange(ndim)] = 1          # always a storage offset
    perm = list(range(ndim))
    if r.random() < 0.5:
        r.shuffle(perm)
    out = []
    for c in range(NCALLS):
        # b (the sliced base) has x's size i in dim perm[i], and x = b.permute(perm)
        bsize, index = [0] * ndim, [""] * ndim
        for i in range(ndim):
            j, n = perm[i], sizes[i][c]
            bsize[j] = starts[j] + n * steps[j] + r.choice((0, 1))
            index[j] = f"{starts[j]}:{starts[j] + n * steps[j]}:{steps[j]}"
        e = f"torch.randn({', '.join(map(str, bsize))})[{', '.join(index)}]"
        if perm != list(range(ndim)):
            e += f".permute({', '.join(map(str, perm))})"
        out.append(e)
    return out


# --------------------------------------------------------------------------------------------
# view ops: each returns an expression on `y` for a tensor of rank `nd` (None: not applicable)


def _d(r, nd):
    return r.randrange(nd) - (nd if r.random() < 0.3 else 0)     # negative dims too


def _slice(r, nd):
    d = r.randrange(nd)
    start = r.choice(("", "1", "-3", "2"))
    stop = r.choice(("", "", "-1", f"y.shape[{d}] - 1"))
    step = r.choice(("", "", ":2", ":3"))
    lead = "..., " if d == nd - 1 and nd > 1 and r.random() < 0.5 else ":, " * d
    return f"y[{lead}{start}:{stop}{step}]"


def _select(r, nd):
    if r.random() < 0.4:
        return f"y[{':, ' * r.randrange(nd)}{r.choice((0, 1, -1))}]"
    return f"y.select({_d(r, nd)}, {r.choice((0, 1, -1))})"


def _narrow(r, nd):
    d = r.randrange(nd)
    return r.choice((f"y.narrow({d}, 1, 2)", f"y.narrow({d}, 1, y.shape[{d}] - 2)"))


def _transpose(r, nd):
    return f"y.transpose({_d(r, nd)}, {_d(r, nd)})" if nd >= 2 else None


def _permute(r, nd):
    p = list(range(nd))
    r.shuffle(p)
    return f"y.permute({', '.join(map(str, p))})" if nd >= 2 else None


def _t(r, nd):
    return "y.t()" if nd <= 2 else None


def _movedim(r, nd):
    return f"y.movedim({_d(r, nd)}, {_d(r, nd)})" if nd >= 2 else None


def _unsqueeze(r, nd):
    return f"y.unsqueeze({r.randint(-nd - 1, nd)})" if nd < 5 else None


def _squeeze(r, nd):
    return r.choice(("y.squeeze()", f"y.squeeze({_d(r, nd)})"))


def _expand(r, nd):
    d = r.randint(0, nd)
    sizes = ["-1"] * nd
    sizes.insert(d, "3")
    return f"y.unsqueeze({d}).expand({', '.join(sizes)})" if nd < 4 else None


def _view(r, nd):
    fn = r.choice(("view", "reshape"))
    forms = ["-1"]
    if nd >= 2:
        forms += ["y.shape[0], -1", "-1, y.shape[-1]", "y.shape[0] * y.shape[1], -1"]
    return f"y.{fn}({r.choice(forms)})"


def _flatten(r, nd):
    if nd < 2:
        return "y.flatten()"
    a = r.randrange(nd - 1)
    return f"y.flatten({a}, {r.randrange(a + 1, nd)})"


def _unflatten(r, nd):
    return f"y.unflatten({_d(r, nd)}, (2, -1))" if nd < 4 else None


def _diagonal(r, nd):
    if nd < 2:
        return None
    a, b = r.sample(range(nd), 2)
    return f"y.diagonal({r.choice((0, 0, 1, -1))}, {a}, {b})"


def _as_strided(r, nd):
    """A sub-block of y spelled through y's own layout (as_strided's offset is absolute)."""
    d = r.randrange(nd)
    sizes = ", ".join(f"y.shape[{i}] - 1" if i == d else f"y.shape[{i}]" for i in range(nd))
    off = r.choice(("", f" + y.stride({d})"))
    return f"y.as_strided(({sizes},), y.stride(), y.storage_offset(){off})"


def _split(r, nd):
    d = r.randrange(nd)
    k = r.choice((0, -1))
    return r.choice((f"y.split(2, {d})[{k}]", f"y.chunk(2, {d})[{k}]", f"y.unbind({d})[{k}]"))


VIEW_OPS = [_slice, _select, _narrow, _transpose, _permute, _t, _movedim, _unsqueeze, _squeeze,
            _expand, _view, _flatten, _unflatten, _diagonal, _as_strided, _split]


def _consumer(r, nd) -> str:
    forms = ["y", "y", "y * 2 + 1", "torch.sin(y) + y", "(y, y * 2)"]
    if nd >= 1:
        forms += ["y.sum(-1)", "y.amax(0)", "torch.cumsum(y, 0)", "torch.cumsum(y, -1)"]
    if nd >= 2:
        forms += ["y @ y.transpose(-1, -2)", "y.sum((0, -1))"]
    if nd == 1:
        forms += ["y @ y"]
    return r.choice(forms)


def _runs(exprs, values) -> Optional[list]:
    """Each call's value after `exprs` (None if eager raises or a value is empty)."""
    out = []
    for e, y in zip(exprs, values):
        try:
            v = eval(e, {"torch": torch, "y": y})
        except Exception:
            return None
        if isinstance(v, torch.Tensor) and v.numel() == 0:
            return None
        out.append(v)
    return out


def generate(seed: int) -> Chain:
    r = random.Random(seed)
    inputs = _input_exprs(r)
    values = [eval(e.replace("torch.randn", "torch.empty"), {"torch": torch}) for e in inputs]
    ops = []
    for _ in range(r.randint(1, 4)):
        for _try in range(30):
            op = r.choice(VIEW_OPS)(r, values[0].dim())
            nxt = _runs([op] * NCALLS, values) if op is not None else None
            if nxt is not None and all(isinstance(v, torch.Tensor) and v.dim() for v in nxt) \
                    and len({v.dim() for v in nxt}) == 1:
                ops.append(op)
                values = nxt
                break
    for _try in range(30):
        consumer = _consumer(r, values[0].dim())
        if _runs([consumer] * NCALLS, values) is not None:
            break
    else:
        consumer = "y"
    return Chain(seed, ops, consumer, inputs)


def check(chain: Chain, backend: str = "codegen", dynamic=None, options=None, device="cpu"):
    """Eager vs compiled on the chain's three calls (tests/differential.py: values, aliasing,
    the inputs after each call, and a view output's strides and storage offset); inputs on
    `device` (codegen takes its Triton path for CUDA inputs)."""
    return run_differential(chain.build(), chain.makers(device), backend=backend,
                            dynamic=dynamic, options=options)

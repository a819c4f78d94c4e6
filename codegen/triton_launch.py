"""Triton launch support: block-size heuristics, launch grids, module loading, libdevice.

Heuristics (static sizes; symbolic ones get the large-size choice):
  * pointwise: XBLOCK = 1024 (fewer for small tensors), 4 warps; 16M fp32 elements then stream
    at copy bandwidth with 16-byte vector accesses; a pointwise kernel with a transposed read
    uses 2-D tiles (64 rows x TILE columns), grid (rows / XBLOCK, columns / TILE);
  * inner loops: an inner size up to PERSISTENT_MAX is one block (persistent), larger ones
    loop in RBLOCK_LOOP chunks; XBLOCK rows per program so a block holds ~4096 elements;
    warps grow with the block (about 16 elements per thread);
  * mode="max-autotune": a few (XBLOCK, num_warps) candidates through `triton.autotune`.
`libdevice` is Triton's special-function library on GPU; under TRITON_INTERPRET=1 (kernels on
CPU tensors, used by the CI tests) it is a numpy shim with the same names, since the
interpreter cannot call extern device functions.
"""
from __future__ import annotations

import hashlib
import importlib.util
import math
import os
import sys
from dataclasses import dataclass, field
from typing import List, Optional, Tuple

PERSISTENT_MAX = 8192
RBLOCK_LOOP = 2048
BLOCK_ELEMS = 4096
POINTWISE_XBLOCK = 1024
TILE = 64             # columns per 2-D pointwise tile


def interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def next_pow2(n: int) -> int:
    return 1 << max(0, (int(n) - 1).bit_length())


@dataclass
class KernelConfig:
    xblock: int
    num_warps: int
    persistent_max: int = PERSISTENT_MAX
    autotune: List[Tuple[int, int]] = field(default_factory=list)
    inner_block: int = 1
    tile: Optional[Tuple[int, int]] = None      # 2-D pointwise tiles: (rows, columns) extents

    def rblock(self, rnumel: Optional[int]) -> int:
        if rnumel is not None and rnumel <= self.persistent_max:
            return next_pow2(max(rnumel, 1))
        return RBLOCK_LOOP

    def grid(self, xnumel: int) -> Tuple[int, ...]:
        if self.tile:
            rows, cols = self.tile
            return (max(1, -(-rows // self.xblock)), max(1, -(-cols // TILE)))
        return (max(1, -(-int(xnumel) // self.xblock)),)


def tiled_config(rows, cols) -> KernelConfig:
    """2-D pointwise tiles (a transposed read): 64 x TILE elements, 4 warps."""
    r, c = _static(rows), _static(cols)
    return KernelConfig(min(64, next_pow2(r)), 4, tile=(r, c))


def _static(e) -> Optional[int]:
    try:
        import sympy
        e = sympy.sympify(e)
        return int(e) if e.is_Integer else None
    except Exception:
        return None


def choose_config(xnumel, inner_sizes, max_autotune=False) -> KernelConfig:
    xn = _static(xnumel)
    if not inner_sizes:
        xb = POINTWISE_XBLOCK if xn is None else min(POINTWISE_XBLOCK, next_pow2(max(xn, 1)))
        xb = max(xb, 16)
        warps = 4 if xb >= 512 else (2 if xb >= 128 else 1)
        cfg = KernelConfig(xb, warps)
        if max_autotune and (xn is None or xn > 4096):
            cfg.autotune = [(512, 4), (1024, 4), (2048, 8), (4096, 8)]
        return cfg
    blocks = []
    for s in inner_sizes:
        n = _static(s)
        blocks.append(next_pow2(max(n, 1)) if n is not None and n <= PERSISTENT_MAX
                      else RBLOCK_LOOP)
    rb = max(blocks)
    xb = max(1, BLOCK_ELEMS // rb)
    if xn is not None:
        xb = min(xb, next_pow2(max(xn, 1)))
    elems = xb * rb
    warps = min(16, max(2, next_pow2(max(elems // 512, 1))))
    cfg = KernelConfig(xb, warps, inner_block=rb)
    if max_autotune and xb > 1:
        cfg.autotune = [(max(1, xb // 2), warps), (xb, warps), (xb, max(1, warps // 2)),
                        (min(xb * 2, 64), min(16, warps * 2))]
    elif max_autotune:
        cfg.autotune = [(1, max(1, warps // 2)), (1, warps), (1, min(32, warps * 2))]
    return cfg


# ------------------------------------------------------------------ libdevice


def _lgamma(v):
    """math.lgamma with libdevice's values at the poles (inf) instead of an exception."""
    try:
        return math.lgamma(v)
    except (ValueError, OverflowError):
        return math.inf


class _InterpLibdevice:
    """numpy stand-ins for libdevice under the Triton interpreter (same names, same dtypes)."""

    def __getattr__(self, name):
        import numpy as np
        fns = {
            "expm1": np.expm1, "log10": np.log10, "log1p": np.log1p, "tan": np.tan,
            "asin": np.arcsin, "acos": np.arccos, "atan": np.arctan, "sinh": np.sinh,
            "cosh": np.cosh, "tanh": np.tanh, "asinh": np.arcsinh, "acosh": np.arccosh,
            "atanh": np.arctanh, "nearbyint": np.rint, "trunc": np.trunc, "pow": np.power,
            "atan2": np.arctan2, "hypot": np.hypot, "nextafter": np.nextafter,
            "copysign": np.copysign, "fmod": np.fmod,
            "erfc": np.vectorize(math.erfc, otypes=[np.float64]),
            "lgamma": np.vectorize(_lgamma, otypes=[np.float64]),
        }
        if name not in fns:
            raise AttributeError(name)
        fn = fns[name]

        def call(*args):
            import triton.language as tl
            from triton.runtime.interpreter import TensorHandle
            first = next(a for a in args if isinstance(a, tl.core.tensor))
            data = [a.handle.data if isinstance(a, tl.core.tensor) else a for a in args]
            with np.errstate(all="ignore"):
                out = np.asarray(fn(*data)).astype(first.handle.data.dtype)
            return tl.core.tensor(TensorHandle(out, first.handle.dtype.scalar), first.type)
        return call


def __getattr__(name):
    """`libdevice` is resolved when a kernel module imports it, so TRITON_INTERPRET set after
    this module was imported still takes effect."""
    if name != "libdevice":
        raise AttributeError(name)
    if interpreting():
        return _InterpLibdevice()
    from triton.language.extra import libdevice
    return libdevice


# ------------------------------------------------------------------ module loading

_modules = {}


def load_module(source: str, cache_dir: str):
    """Write `source` (content-addressed) and import it; Triton's jit needs a real file."""
    key = hashlib.sha256(source.encode()).hexdigest()
    if (key, interpreting()) in _modules:
        return _modules[key, interpreting()], _modules[key, interpreting()].__file__
    path = os.path.join(cache_dir, "triton", key[:2], f"pd_triton_{key[:24]}.py")
    if not os.path.exists(path):
        from codegen.codecache import _atomic_write
        _atomic_write(path, source)
    name = f"pd_triton_{key[:24]}_{int(interpreting())}"
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    sys.modules[name] = mod
    spec.loader.exec_module(mod)
    _modules[key, interpreting()] = mod
    return mod, path

"""Measured choices for mode="max-autotune" on the GPU (elsewhere codegen/gemm.py's stated rules
choose): whether a product's pointwise epilogue runs inside its extern call (`epilogue_fused`:
the fused call against the product alone plus the epilogue's bytes), and the way one 16-bit
product runs:

  * "plain":  torch.mm on the operands as they are (cuBLAS's unaligned kernels where a leading
              dimension breaks 16-byte alignment);
  * "padded": torch.mm on zero-padded operands, the result sliced back (gemm.py's padding);
  * "rows":   codegen/gemm_rows.py's Triton matmul writing the dense result directly.

What is timed: each variant's own GPU work on random operands of the product's sizes, dtype and
layouts (a row-major left operand; the right one column-major where the graph's is, as a
weight's transpose), CUDA events, the median of REPS runs after warm-up. The padded variant's
copies are our kernels in the compiled graph, not torch's: they are charged as bytes at the
bandwidth of a dense device copy measured once per device (each operand that pads is read and
written; a graph-output result is read and written again into eager's dense layout), since
torch's strided copy runs well below our kernel's speed (the GPT-2 logits' copy: 253 us against
our 143 on an H100) and would bias the choice. One answer per (sizes, layouts, dtype, device,
output, candidates) per process; each choice is logged with its figures.
"""
from __future__ import annotations

import logging
import statistics
from typing import Dict, Sequence, Tuple

import torch
import torch.nn.functional as F

log = logging.getLogger("pydynamo.codegen")

REPS = 10
_choices: Dict[tuple, Tuple[str, Dict[str, float]]] = {}
_bandwidth: Dict[str, float] = {}        # device -> bytes per us of a dense copy


def can_measure(device) -> bool:
    return device is not None and device.type == "cuda" and torch.cuda.is_available()


def _time_us(fn) -> float:
    for _ in range(3):
        fn()
    times = []
    for _ in range(REPS):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def _copy_bandwidth(device) -> float:
    key = str(device)
    if key not in _bandwidth:
        src = torch.empty(1 << 26, dtype=torch.uint8, device=device)
        dst = torch.empty_like(src)
        _bandwidth[key] = 2 * src.numel() / _time_us(lambda: dst.copy_(src))
    return _bandwidth[key]


def fastest(candidates: Sequence[str], m: int, k: int, n: int, padded: Sequence[int],
            b_column_major: bool, dtype, device, output: bool) -> str:
    """The candidate (of "plain", "padded", "rows") that runs a (m, k) @ (k, n) product fastest
    on `device`; `padded` is gemm.py's padded (M, K, N); `output`: the result is a graph output
    (the padded variant copies it dense)."""
    key = (tuple(candidates), m, k, n, tuple(padded), b_column_major, dtype, str(device), output)
    if key not in _choices:
        _choices[key] = _measure(candidates, m, k, n, padded, b_column_major, dtype, device,
                                 output)
        choice, us = _choices[key]
        log.info("codegen max-autotune: (%d, %d) @ (%d, %d) %s%s: %s (%s)", m, k, k, n,
                 str(dtype).replace("torch.", ""), ", a graph output" if output else "", choice,
                 ", ".join(f"{c} {t:.1f} us" for c, t in us.items()))
    return _choices[key][0]


def epilogue_fused(m: int, k: int, n: int, parts: Sequence[str], dtype, device) -> bool:
    """Is the product (m, k) @ (k, n) with its epilogue `parts` ("bias", "resid", "relu",
    "gelu_tanh", codegen/gemm.py's chain) faster as one extern call (addmm with the bias or
    residual as its input, _addmm_activation with the activation) than as the product alone
    and the chain as our kernel (read the product and a residual, write the result: charged at
    the device's copy bandwidth, as `_measure` charges copies)? Measured once per key."""
    key = ("epilogue", m, k, n, tuple(parts), dtype, str(device))
    if key not in _choices:
        _choices[key] = _measure_epilogue(m, k, n, parts, dtype, device)
        choice, us = _choices[key]
        log.info("codegen max-autotune: (%d, %d) @ (%d, %d) %s + %s: %s (%s)", m, k, k, n,
                 str(dtype).replace("torch.", ""), " + ".join(parts), choice,
                 ", ".join(f"{c} {t:.1f} us" for c, t in us.items()))
    return _choices[key][0] == "fused"


def _measure_epilogue(m, k, n, parts, dtype, device):
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, dtype=dtype, device=device, generator=gen)
    b = torch.randn(n, k, dtype=dtype, device=device, generator=gen).t()   # a weight's .t()
    c = torch.randn(m, n, dtype=dtype, device=device, generator=gen) if "resid" in parts \
        else torch.randn(n, dtype=dtype, device=device, generator=gen)
    act = next((p for p in parts if p in ("relu", "gelu_tanh")), None)
    if act is None:
        fused = lambda: torch.addmm(c, a, b)       # noqa: E731
    else:
        fused = lambda: torch._addmm_activation(c, a, b, use_gelu=act == "gelu_tanh")  # noqa
    size = torch.tensor([], dtype=dtype).element_size()
    moved = (2 + ("resid" in parts)) * m * n * size
    us = {"fused": _time_us(fused),
          "separate": _time_us(lambda: torch.mm(a, b)) + moved / _copy_bandwidth(device)}
    del a, b, c
    return min(us, key=us.get), us


def measured() -> Dict[tuple, Tuple[str, Dict[str, float]]]:
    """Every choice made so far, with its figures (for tests and reports)."""
    return dict(_choices)


def _measure(candidates, m, k, n, padded, b_column_major, dtype, device, output):
    gen = torch.Generator(device=device).manual_seed(0)
    a = torch.randn(m, k, dtype=dtype, device=device, generator=gen)
    b = (torch.randn(n, k, dtype=dtype, device=device, generator=gen).t() if b_column_major
         else torch.randn(k, n, dtype=dtype, device=device, generator=gen))
    pm, pk, pn = padded
    size = torch.tensor([], dtype=dtype).element_size()
    us: Dict[str, float] = {}
    for c in candidates:
        if c == "plain":
            us[c] = _time_us(lambda: torch.mm(a, b))
        elif c == "padded":
            pa = F.pad(a, [0, pk - k, 0, pm - m])
            pb = (F.pad(b.t(), [0, pk - k, 0, pn - n]).t() if b_column_major
                  else F.pad(b, [0, pn - n, 0, pk - k]))
            copied = (2 * pm * pk if (pm, pk) != (m, k) else 0) + \
                (2 * pk * pn if (pk, pn) != (k, n) else 0) + (2 * m * n if output else 0)
            us[c] = _time_us(lambda: torch.mm(pa, pb)) + copied * size / _copy_bandwidth(device)
        elif c == "rows":
            from codegen.gemm_rows import mm_rows_aligned_out   # (Triton, imported on use)
            us[c] = _time_us(lambda: mm_rows_aligned_out(a, b))
    del a, b
    return min(us, key=us.get), us

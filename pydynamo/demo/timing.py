"""Per-call wall time for the demo's timing table. Imports torch only (no pydynamo), so
scripts/demo_reference.py can load it by path in a process where no pydynamo hook exists."""
import time
from typing import Callable

import torch


def per_call_us(fn: Callable, x, iters: int, repeats: int = 5) -> float:
    """Best of `repeats` runs of `iters` calls, in microseconds per call, after 3 warm-up calls."""
    with torch.no_grad():
        for _ in range(3):
            fn(x)
        best = float("inf")
        for _ in range(repeats):
            t0 = time.perf_counter()
            for _ in range(iters):
                fn(x)
            best = min(best, (time.perf_counter() - t0) / iters)
    return best * 1e6

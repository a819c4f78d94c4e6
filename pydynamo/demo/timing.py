"""Per-call wall time for the demo's timing table. Imports torch only (no pydynamo), so
scripts/demo_reference.py can load it by path in a process where no pydynamo hook exists.

`interleaved_us` times several callables in rounds (each round runs every callable once for
`iters` calls, in turn), so a burst of load from other processes hits all of them alike instead
of one row; each row reports the median of its rounds and their spread. A spread above
`BUSY_SPREAD` of the median means the machine was too busy for the figure to be trusted.
"""
import dataclasses
import statistics
import time
from typing import Callable, Dict

import torch

BUSY_SPREAD = 0.25   # (max - min) / median over the rounds beyond this: not a trustworthy figure


@dataclasses.dataclass
class Timing:
    median_us: float
    min_us: float
    max_us: float

    @property
    def spread(self) -> float:
        return (self.max_us - self.min_us) / self.median_us if self.median_us else 0.0

    @property
    def busy(self) -> bool:
        return self.spread > BUSY_SPREAD

    def as_dict(self) -> dict:
        return dataclasses.asdict(self)


def interleaved_us(fns: Dict[str, Callable], x, iters: int, rounds: int = 7) -> Dict[str, Timing]:
    """Microseconds per call of each `fns[name](x)`: `rounds` interleaved rounds of `iters` calls
    each, after 3 warm-up calls of each; the median round and the fastest and slowest."""
    per_round: Dict[str, list] = {name: [] for name in fns}
    with torch.no_grad():
        for fn in fns.values():
            for _ in range(3):
                fn(x)
        for _ in range(rounds):
            for name, fn in fns.items():
                t0 = time.perf_counter()
                for _ in range(iters):
                    fn(x)
                per_round[name].append((time.perf_counter() - t0) / iters * 1e6)
    return {name: Timing(statistics.median(ts), min(ts), max(ts)) for name, ts in per_round.items()}


def per_call_us(fn: Callable, x, iters: int, rounds: int = 7) -> float:
    """Median microseconds per call of one callable (interleaved_us of one)."""
    return interleaved_us({"fn": fn}, x, iters, rounds)["fn"].median_us

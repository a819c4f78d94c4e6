"""Compile time split into phases: the one clock of a compile (the `perf` log and the compile report read it).

    with phases.compiling() as clock:        # convert_frame.translate: one frame's compile
        ...                                   # time here counts as "tracing"
        with phases.phase("codegen"):         # codegen/pipeline.py, codecache.py, aot/...
            ...
    clock.seconds -> {"tracing": s, "graph passes": s, "codegen": s, "compile": s, "loading": s}

Invariants:
  * Exclusive accounting: time inside a nested phase counts to it alone, never also to the phase
    around it, so the phases of one clock sum to its `total()` (the frame's compile time).
  * A phase opened outside any `compiling()` (a training graph's backward, compiled at the first
    backward call) gets a clock of its own, handed to each of `LATE` when its outermost phase
    closes; nothing is kept here.
  * `generated(kind, path)` notes a file the compile wrote (a wrapper, a kernel source or library)
    on the innermost clock; the report links them.
  * Per thread (a compile runs on the calling thread); a leaf: imports nothing of the project, so
    codegen may use it.
"""
from __future__ import annotations

import contextlib
import threading
import time
from typing import Callable, Iterator, List, Tuple

PHASES = ("tracing", "graph passes", "codegen", "compile", "loading")

# Observers of clocks that ran outside a frame's compile (see the module docstring).
LATE: List[Callable[["Clock"], None]] = []


class Clock:
    """The seconds one compile spent in each phase, and the files it wrote."""

    def __init__(self, root: str):
        self.seconds = dict.fromkeys(PHASES, 0.0)
        self.files: List[Tuple[str, str]] = []     # (kind, path), in the order written
        self._open = [root]
        self._since = time.perf_counter()

    def _credit(self) -> None:
        now = time.perf_counter()
        self.seconds[self._open[-1]] += now - self._since
        self._since = now

    def total(self) -> float:
        return sum(self.seconds.values())

    def split_text(self) -> str:
        """'tracing 12.0 ms, graph passes 3.1 ms, ...' (phases that took time only)."""
        return ", ".join(f"{p} {s * 1e3:.1f} ms" for p, s in self.seconds.items() if s > 0)


_local = threading.local()


def _clocks() -> list:
    stack = getattr(_local, "clocks", None)
    if stack is None:
        stack = _local.clocks = []
    return stack


@contextlib.contextmanager
def compiling() -> Iterator[Clock]:
    """A frame's compile: its time counts as "tracing" except inside the phases opened within."""
    clock = Clock("tracing")
    stack = _clocks()
    if stack:                       # (a compile inside a compile: the outer one's clock pauses)
        stack[-1]._credit()
    stack.append(clock)
    try:
        yield clock
    finally:
        clock._credit()
        stack.pop()
        if stack:
            stack[-1]._since = time.perf_counter()


@contextlib.contextmanager
def phase(name: str) -> Iterator[None]:
    """Time inside counts to phase `name` (one of PHASES) of the compile in progress."""
    stack = _clocks()
    late = not stack
    if late:
        stack.append(Clock(name))
    clock = stack[-1]
    clock._credit()
    clock._open.append(name)
    try:
        yield
    finally:
        clock._credit()
        clock._open.pop()
        if late:
            stack.pop()
            for observer in LATE:
                observer(clock)


def generated(kind: str, path: str) -> None:
    """The compile in progress wrote `path` (kind: "wrapper", "kernels", "library")."""
    stack = _clocks()
    if stack:
        stack[-1].files.append((kind, path))

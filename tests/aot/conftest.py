"""tests/aot: issue 16's user-level acceptance (mutation/aliasing corpus, training loops).
Test modules import tests/differential.py and mutation_corpus.py by name. Without a GPU the
Triton kernels run on CPU tensors through Triton's interpreter (TRITON_INTERPRET=1, set before
any kernel module imports Triton)."""
import collections
import os
import sys

import pytest
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))

if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

from mutation_corpus import NOTED  # noqa: E402  (after the path and the environment are set)


@pytest.fixture
def fresh_aot():
    """No compiled code and zeroed training counters before and after a test."""
    import pydynamo
    from pydynamo import aot
    pydynamo.reset()
    aot.counters.clear()
    yield
    pydynamo.reset()


def pytest_terminal_summary(terminalreporter):
    """How many corpus runs had a graph run with eager ops or a graph break, by backend and mode:
    not failures (values are still compared), but what a run under a backend did not compile;
    and how many took the training path (a joint graph recorded)."""
    if not NOTED:
        return
    terminalreporter.section("tests/aot: eager fallbacks and graph breaks in the corpus")
    for (backend, mode, kind), hits in sorted(NOTED.items()):
        cases = sorted({c for c, _ in hits})
        reasons = collections.Counter(w.split(": ", 2)[-1][:90] for _, w in hits)
        names = "" if kind.startswith("training") else \
            ": " + ", ".join(cases[:6]) + (" ..." if len(cases) > 6 else "")
        terminalreporter.write_line(f"{backend:9} {mode:11} {kind}: {len(cases)} cases{names}")
        for r, n in reasons.most_common(8):
            if r:
                terminalreporter.write_line(f"    {n:3}x {r}")

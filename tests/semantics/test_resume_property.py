"""CI slice of the resume-function property test (tests/semantics/resume_property.py): a graph
break at every call site of the generated programs of a fixed seed range, each variant compared
with eager (values, in-place updates, exceptions) and required to take its break. The larger
sweep is `python tests/semantics/resume_property.py --seeds 0:200`."""
from __future__ import annotations

import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import resume_property as rp  # noqa: E402

SEEDS = range(0, 4)


@pytest.mark.parametrize("seed", list(SEEDS))
def test_break_at_every_call_site(seed):
    bad = rp.check_program(seed)
    assert not bad, "\n".join(bad)

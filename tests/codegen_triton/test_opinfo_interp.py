"""tests/codegen/test_opinfo_subset.py again (every sample of each listed op vs eager), with
every graph through the Triton printer (interpreter on CPU, real kernels on a GPU)."""
import pytest

import codegen
from tests.codegen import test_opinfo_subset as base
from tests.codegen.test_opinfo_subset import *  # noqa: F401,F403  (re-collected here)


@pytest.fixture(autouse=True)
def _triton(monkeypatch):
    real = base.H.codegen.compile_fx
    before = codegen.counters["triton_path"]

    calls = []

    def forced(gm, example_inputs, **options):
        calls.append(1)
        options.setdefault("backend_kernels", "triton")
        return real(gm, example_inputs, **options)
    monkeypatch.setattr(codegen, "compile_fx", forced)
    yield
    if calls:
        assert codegen.counters["triton_path"] > before, "no graph took the Triton path"

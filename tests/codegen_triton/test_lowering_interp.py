"""tests/codegen/test_codegen.py again, every graph through the Triton printer.

`codegen.compile_fx` is patched to force options backend_kernels="triton"; the tests are the
CPU backend's own (outputs vs eager, kernel counts, fallbacks). Tests about the C++ backend's
artifacts (shared libraries, the g++ cache) are skipped with the reason.
"""
import pytest

import codegen
from tests.codegen import test_codegen as base
from tests.codegen.test_codegen import *  # noqa: F401,F403  (re-collected here)

CPP_ONLY = {
    "test_cache_hit_compiles_nothing_and_wrapper_is_readable":
        "checks the C++ shared-library cache (the Triton module cache is tested in test_triton.py)",
    "test_warm_process_compiles_nothing": "counts g++ runs of a fresh process",
    "test_output_code_log": "expects the C++ source in the log (test_triton.py checks Triton's)",
    "test_column_reduction_block_width": "the C++ column-block width (Triton tiles its own way)",
    "test_tall_skinny_column_reduction_splits_rows": "the C++ row split (Triton tiles its own way)",
}


@pytest.fixture(autouse=True)
def _triton(monkeypatch, request):
    reason = CPP_ONLY.get(request.node.originalname)
    if reason:
        pytest.skip(f"C++-backend specific: {reason}")
    real = base.codegen.compile_fx

    calls = []

    def forced(gm, example_inputs, **options):
        calls.append(1)
        options.setdefault("backend_kernels", "triton")
        return real(gm, example_inputs, **options)
    monkeypatch.setattr(codegen, "compile_fx", forced)
    before = codegen.counters["triton_path"]
    yield
    if calls:
        assert codegen.counters["triton_path"] > before, "no graph took the Triton path"

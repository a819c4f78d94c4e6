"""Fixtures for the frame-hook tests: every test starts and ends with the hook off and no cache
state (callbacks are set through hookutil.hooked, which always restores the previous setting)."""
import gc

import pytest

from pydynamo import _C, eval_frame


@pytest.fixture(autouse=True)
def clean_hook():
    _C.clear_all()
    eval_frame._mark_own_code_skipped()
    yield
    assert _C.get_eval_frame() is None, "a test left a callback set"
    _C.clear_all()
    eval_frame._mark_own_code_skipped()
    gc.collect()

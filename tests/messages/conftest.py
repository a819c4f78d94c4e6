"""Every test in tests/messages starts and ends with no compiled code (warnings, tracebacks and
names depend on what was compiled before)."""
import pytest

import pydynamo


@pytest.fixture(autouse=True)
def fresh():
    pydynamo.reset()
    yield
    pydynamo.reset()

"""A Python outside pydynamo.versions.SUPPORTED_PYTHONS: compiled functions run eagerly, with one
clear warning for the process, and the translator refuses the frame (never a crash, never a
half-supported trace). Simulated by emptying the supported list."""
import warnings

import pytest
import torch

import pydynamo
from pydynamo import eval_frame, versions
from pydynamo.convert_frame import translate
from pydynamo.exc import Unsupported


@pytest.fixture
def unsupported(monkeypatch):
    monkeypatch.setattr(versions, "SUPPORTED_PYTHONS", ())
    monkeypatch.setattr(eval_frame, "_version_warned", False)
    pydynamo.reset()
    yield
    pydynamo.reset()


def test_unsupported_python_runs_eagerly_with_one_warning(unsupported):
    calls = []

    def f(x):
        calls.append(1)
        return x.sin() + 1

    x = torch.randn(3)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        for _ in range(3):
            torch.testing.assert_close(pydynamo.optimize(f)(x), x.sin() + 1)
        torch.testing.assert_close(pydynamo.optimize(f, backend="eager")(x), x.sin() + 1)
    msgs = [str(m.message) for m in w if "pydynamo supports CPython" in str(m.message)]
    assert len(msgs) == 1 and "run eagerly" in msgs[0], [str(m.message) for m in w]
    assert w[0].filename == __file__  # points at the user's call
    assert len(calls) == 4  # the body ran in Python every time


def test_translate_refuses_an_unsupported_python(unsupported):
    def f(x):
        return x + 1
    with pytest.raises(Unsupported) as ei:
        translate(f.__code__, {"x": torch.ones(1)}, f.__globals__)
    assert ei.value.reason_code == "python_version"


def test_message_names_the_supported_versions():
    assert versions.unsupported_python((3, 13)) is None
    msg = versions.unsupported_python((3, 14))
    assert "3.11, 3.12, 3.13" in msg and "not 3.14" in msg

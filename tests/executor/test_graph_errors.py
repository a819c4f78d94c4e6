"""An op that raises inside a compiled graph raises eager's exception, and the traceback shows the
user's line of that op (issue 14 item 6; pydynamo/user_errors.py). Under backend="eager" the
traceback used to end in FX's generated forward (`getitem = mul[l_i]`) without the user's line."""
import traceback

import pytest
import torch

import pydynamo


def _index_past_the_end(x, i):
    y = x * 2
    return y[i] + 1          # the failing line


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_error_inside_the_graph_is_eagers_and_shows_the_user_line(backend):
    x, i = torch.randn(4), torch.tensor([7])
    with pytest.raises(IndexError) as eager:
        _index_past_the_end(x, i)
    pydynamo.reset()
    with pytest.raises(IndexError) as compiled:
        pydynamo.optimize(_index_past_the_end, backend=backend)(x, i)
    assert str(compiled.value) == str(eager.value)
    frames = traceback.extract_tb(compiled.value.__traceback__)
    user = [f for f in frames if f.filename == __file__ and f.name == "_index_past_the_end"]
    assert user and user[-1].line == "return y[i] + 1          # the failing line"


def test_error_placed_once_and_still_catchable_by_type():
    def f(x):
        return torch.cat([x, x.t()], 0).sum()       # shape mismatch: RuntimeError

    pydynamo.reset()
    g = pydynamo.optimize(f, backend="eager")
    for _ in range(2):                # the cached entry raises the same way on later calls
        try:
            g(torch.randn(2, 3))
        except RuntimeError as e:
            lines = [fr.line for fr in traceback.extract_tb(e.__traceback__)]
            assert lines.count("return torch.cat([x, x.t()], 0).sum()       # shape mismatch: RuntimeError") == 1
        else:
            pytest.fail("no RuntimeError")

"""pydynamo.error_on_graph_break against torch._dynamo.error_on_graph_break (issue 20): the same
programs raise, or compile the same number of graphs with the same results, in both; the switch
works around a compiled call, as a decorator, inside compiled code, and off again for a sub-call."""
import pytest
import torch

import pydynamo
from counting import Counting
from pydynamo import stance
from pydynamo.exc import FullGraphError

# each test program is written once against `egb`, the module-level switch, so both systems run
# the same code: set to pydynamo's or torch's before the call
egb = None


@pytest.fixture(autouse=True)
def fresh():
    pydynamo.reset()
    torch._dynamo.reset()
    yield
    pydynamo.reset()
    torch._dynamo.reset()
    assert stance.error_on_graph_break_now() is False


def breaks(x):
    n = x.sum().item()          # a graph break in both systems
    return x + n


def strict_block(x):
    with egb(True):
        return breaks(x) * 2


def loose_inside_strict(x):
    with egb(True):
        y = x + 1
        with egb(False):
            y = breaks(y)
        return y * 2


def strict_then_loose_call(x):
    with egb(True):
        return loose_helper(x) - 1


def loose_helper(x):
    return _loose_decorated[0](x)


_loose_decorated = {}


def no_break(x):
    with egb(True):
        return torch.relu(x) + 1


def _run(program, system, *, wrap=None, fullgraph=False, outside=None):
    """(raised, compiles, result) for `program` compiled by `system`."""
    global egb
    egb = pydynamo.error_on_graph_break if system == "mine" else torch._dynamo.error_on_graph_break
    _loose_decorated[0] = egb(False)(breaks)
    explicit_break[0] = pydynamo.graph_break if system == "mine" else torch._dynamo.graph_break
    fn = wrap(egb)(program) if wrap else program
    backend = Counting()
    compiled = pydynamo.optimize(fn, backend=backend, fullgraph=fullgraph) if system == "mine" else \
        torch.compile(fn, backend=backend, fullgraph=fullgraph)
    x = torch.arange(4.0)
    try:
        if outside is not None:
            with egb(outside):
                out = compiled(x)
        else:
            out = compiled(x)
    except (FullGraphError, torch._dynamo.exc.Unsupported) as e:
        assert system == "mine" or not isinstance(e, FullGraphError)
        return True, backend.compiles, None
    return False, backend.compiles, out


def _compare(program, counts=True, **kw):
    mine, ref = _run(program, "mine", **kw), _run(program, "ref", **kw)
    assert mine[:2] == ref[:2] if counts else mine[0] == ref[0]
    if not mine[0]:
        torch.testing.assert_close(mine[2], ref[2])
        torch.testing.assert_close(mine[2], program_eager(program))
    return mine


def program_eager(program):
    global egb
    egb = pydynamo.error_on_graph_break
    return program(torch.arange(4.0))


def test_strict_block_raises_at_a_break_in_a_callee():
    raised, _, _ = _compare(strict_block)
    assert raised


def test_switched_off_for_a_sub_call():
    raised, compiles, _ = _compare(loose_inside_strict)
    assert not raised


def test_decorated_callee_switches_off():
    # torch.compile compiles 4 graphs here, 3 without the decorator: its decorator's wrapper is
    # a frame boundary; pydynamo inlines it (3 graphs either way)
    raised, compiles, _ = _compare(strict_then_loose_call, counts=False)
    assert not raised and compiles == 3


def test_no_break_no_error():
    raised, compiles, _ = _compare(no_break)
    assert (raised, compiles) == (False, 1)


def test_decorator_on_the_compiled_function():
    raised, _, _ = _compare(breaks, wrap=lambda e: e(True))
    assert raised


def test_around_the_compiled_call():
    assert _compare(breaks, outside=True)[0]
    assert not _compare(breaks, outside=False)[0]


def test_cannot_switch_off_fullgraph():
    # an explicit break (torch.compile's fullgraph captures .item() in the graph instead)
    def loose(x):
        with egb(False):
            explicit_break[0]()
            return x + 1
    assert _compare(loose, fullgraph=True)[0]


explicit_break = {}


def test_error_names_the_switch_and_the_user_line():
    global egb
    egb = pydynamo.error_on_graph_break
    with pytest.raises(FullGraphError, match=r"error_on_graph_break\(True\) is on") as info:
        pydynamo.optimize(strict_block, backend="eager")(torch.ones(2))
    assert f"{__file__}:{breaks.__code__.co_firstlineno + 1}" in str(info.value)
    assert "user stack" in str(info.value)


def test_the_switch_is_restored_after_errors():
    with pytest.raises(KeyError):
        with pydynamo.error_on_graph_break(True):
            raise KeyError
    assert stance.error_on_graph_break_now() is False

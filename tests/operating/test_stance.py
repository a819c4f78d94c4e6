"""pydynamo.set_stance against torch.compiler.set_stance (issue 20): the same program under each
stance compiles the same number of graphs and runs compiled code on the same calls; the plain
call, context-manager and decorator forms set and restore the stance as torch's do; a
"fail_on_recompile" miss raises naming the function and the failing guard."""
import pytest
import torch

import pydynamo
from counting import Counting
from pydynamo import stance as stance_mod
from pydynamo.exc import RecompileError


@pytest.fixture(autouse=True)
def fresh():
    pydynamo.reset()
    torch._dynamo.reset()
    yield
    pydynamo.set_stance("default")
    torch.compiler.set_stance("default")
    pydynamo.reset()
    torch._dynamo.reset()


def body(x):
    return x * 2 + 1


def _both(fn, **kw):
    """(pydynamo-compiled fn, its backend), (torch-compiled fn, its backend)."""
    mine, ref = Counting(), Counting()
    return (pydynamo.optimize(fn, backend=mine, **kw), mine), (torch.compile(fn, backend=ref, **kw), ref)


def _same(program):
    """Run program(compiled, set_stance) with pydynamo and with torch; compare counts and results."""
    (cf, mine), (tf, ref) = _both(body)
    got_mine = program(cf, pydynamo.set_stance)
    got_ref = program(tf, torch.compiler.set_stance)
    for a, b in zip(got_mine, got_ref):
        torch.testing.assert_close(a, b)
    assert mine.counts() == ref.counts()
    return mine


def _inputs():
    torch.manual_seed(0)
    return torch.randn(3), torch.randn(3, dtype=torch.float64), torch.randn(4, 4)


def test_force_eager_runs_no_compiled_code():
    a, b, c = _inputs()

    def program(cf, set_stance):
        out = [cf(a)]                       # compiles
        set_stance("force_eager")
        out += [cf(a), cf(b), cf(c)]        # a hit and two misses: all eager, nothing compiles
        set_stance("default")
        out.append(cf(a))                   # the cached entry again
        return out

    mine = _same(program)
    assert mine.counts() == (1, 2)


def test_force_eager_module_and_context_block():
    mod = torch.nn.Linear(3, 2)
    mine, ref = Counting(), Counting()
    cm, tm = pydynamo.optimize(mod, backend=mine), torch.compile(mod, backend=ref)
    x = torch.randn(2, 3)
    for compiled, set_stance in ((cm, pydynamo.set_stance), (tm, torch.compiler.set_stance)):
        compiled(x)
        with set_stance("force_eager"):
            torch.testing.assert_close(compiled(x), mod(x))
    assert mine.counts() == ref.counts() == (1, 1)
    # a `with pydynamo.optimize():` block compiles nothing under force_eager either
    block = Counting()
    with pydynamo.set_stance("force_eager"):
        with pydynamo.optimize(backend=block):
            _call_body(x)
    assert block.counts() == (0, 0)


def _call_body(x):
    return body(x)


def test_eager_on_recompile_uses_cache_runs_misses_eagerly():
    a, b, c = _inputs()

    def program(cf, set_stance):
        out = [cf(a)]
        with set_stance("eager_on_recompile"):
            out += [cf(a), cf(b), cf(c), cf(a)]   # hits run compiled code, misses run eagerly
        out += [cf(b)]                            # default again: compiles
        return out

    mine = _same(program)
    assert mine.counts() == (2, 4)


def test_eager_on_recompile_never_compiled_function_runs_eagerly():
    # as torch.compile: a first compile is a "recompile" too under this stance
    def program(cf, set_stance):
        with set_stance("eager_on_recompile"):
            return [cf(torch.ones(3)), cf(torch.ones(3))]

    mine = _same(program)
    assert mine.counts() == (0, 0)


def test_fail_on_recompile_raises_naming_the_guard():
    a, b, _ = _inputs()
    (cf, mine), (tf, ref) = _both(body)
    for compiled, set_stance in ((cf, pydynamo.set_stance), (tf, torch.compiler.set_stance)):
        compiled(a)
        with set_stance("fail_on_recompile"):
            compiled(a)     # a hit is fine
            with pytest.raises(RuntimeError, match="Detected recompile when .* stance is 'fail_on_recompile'"):
                compiled(b)
        compiled(b)         # default again: compiles
    assert mine.counts() == ref.counts() == (2, 3)
    with pydynamo.set_stance("fail_on_recompile"):
        with pytest.raises(RecompileError) as info:
            cf(torch.ones(3, dtype=torch.int64))
    text = str(info.value)
    assert f"filename: {__file__!r}" in text and "function name: 'body'" in text
    assert f"line number: {body.__code__.co_firstlineno}" in text
    assert "triggered by the following guard failure(s)" in text
    assert "L['x'].dtype: expected torch.float32, got torch.int64" in text
    assert "L['x'].dtype: expected torch.float64, got torch.int64" in text   # each entry's failure


def test_fail_on_recompile_never_compiled_function_raises_like_torch():
    (cf, mine), (tf, ref) = _both(body)
    for compiled, set_stance in ((cf, pydynamo.set_stance), (tf, torch.compiler.set_stance)):
        with set_stance("fail_on_recompile"):
            with pytest.raises(RuntimeError, match="Detected recompile"):
                compiled(torch.ones(2))
    assert mine.counts() == ref.counts() == (0, 0)


def with_break(x):
    x = x + 1
    pydynamo.graph_break()
    torch._dynamo.graph_break()
    return x * 3


def test_stances_with_graph_breaks_count_like_torch():
    a, b, c = _inputs()

    def program(cf, set_stance):
        out = [cf(a)]
        with set_stance("eager_on_recompile"):
            out += [cf(a), cf(c)]
        with set_stance("fail_on_recompile"):
            out += [cf(a)]
        return out

    mine, ref = Counting(), Counting()
    cf, tf = pydynamo.optimize(with_break, backend=mine), torch.compile(with_break, backend=ref)
    for x, y in zip(program(cf, pydynamo.set_stance), program(tf, torch.compiler.set_stance)):
        torch.testing.assert_close(x, y)
    assert mine.counts() == ref.counts()


def test_plain_call_context_and_decorator_forms_match_torch():
    (cf, mine), (tf, ref) = _both(body)
    x = torch.randn(3)
    log = {}
    for name, compiled, set_stance in (("mine", cf, pydynamo.set_stance),
                                       ("ref", tf, torch.compiler.set_stance)):
        scope = set_stance("force_eager")      # a plain call takes effect at once
        compiled(x)
        with scope:                             # and its block restores what was before the call
            compiled(x)
        compiled(x)                             # default again: compiles

        @set_stance("force_eager")              # decorating does not change the stance ...
        def run_eager(v):
            return compiled(v)

        compiled(x)
        run_eager(torch.randn(5, 5))            # ... calling does, for the call only
        compiled(x)
        with set_stance("force_eager"):         # nested blocks restore in order
            with set_stance("eager_on_recompile"):
                compiled(torch.randn(6))        # miss: eager
            compiled(x)                         # force_eager again: no compiled code
        compiled(x)
        log[name] = (mine if name == "mine" else ref).counts()
    assert log["mine"] == log["ref"] == (1, 4)
    assert stance_mod.current() == "default"


def test_stance_restored_after_an_exception():
    with pytest.raises(ValueError):
        with pydynamo.set_stance("force_eager"):
            raise ValueError
    assert stance_mod.current() == "default"

    @pydynamo.set_stance("fail_on_recompile")
    def boom():
        raise KeyError

    with pytest.raises(KeyError):
        boom()
    assert stance_mod.current() == "default"


def test_invalid_stance():
    with pytest.raises(RuntimeError, match="invalid pydynamo stance 'bogus'.*force_eager"):
        pydynamo.set_stance("bogus")
    assert stance_mod.current() == "default"


def test_set_stance_inside_compiled_code_raises():
    def inside(x):
        pydynamo.set_stance("force_eager")
        return x + 1

    @pydynamo.set_stance("force_eager")
    def decorated(x):
        return x - 1

    def calls_decorated(x):
        return decorated(x) * 2

    for fn in (inside, calls_decorated):
        with pytest.raises(RuntimeError, match="cannot be called inside a compiled function"):
            pydynamo.optimize(fn, backend="eager")(torch.randn(2))
        assert stance_mod.current() == "default"
    # torch forbids it too (its error is an AssertionError naming the forbidden callable)
    with pytest.raises(Exception):
        torch.compile(lambda x: (torch.compiler.set_stance("force_eager"), x + 1)[1],
                      backend="eager")(torch.randn(2))
    torch.compiler.set_stance("default")


def test_reset_does_not_change_the_stance():
    pydynamo.set_stance("eager_on_recompile")
    pydynamo.reset()
    assert stance_mod.current() == "eager_on_recompile"

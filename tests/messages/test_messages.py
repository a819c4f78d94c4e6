"""What a torch.compile user reads (issue 21): optimize()'s arguments checked at the call with
torch.compile's exception types, environment variables checked at import, the `perf` and `all`
log channels, graph-break warnings (once per (reason, user line), at the user's line, none for
breaks asked for or inside explain()), `with pydynamo.disable()` around a compiled call,
generated frame names in tracebacks, help(). torch.compile is the reference where it has one."""
import io
import os
import subprocess
import sys
import traceback
import warnings

import pytest
import torch

import pydynamo
from pydynamo import config
from pydynamo.exc import GraphBreakWarning, InvalidBackend, PydynamoWarning

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))


def f(x):
    return torch.sin(x) + 1


def _torch_raises(**kw):
    """The exception type torch.compile raises for these arguments (None: it accepts them)."""
    try:
        torch.compile(f, **kw)
    except Exception as e:
        return type(e)
    return None


# --- optimize()'s arguments -------------------------------------------------------------------

@pytest.mark.parametrize("kw, valid", [
    (dict(backend="no_such_backend"), "codegen"),
    (dict(mode="fastest"), "max-autotune"),
    (dict(options={"no_such_option": 1}), "vector_width"),
])
def test_bad_argument_raises_at_the_call_like_torch_compile(kw, valid):
    ref = _torch_raises(**kw)
    assert ref is not None and issubclass(ref, RuntimeError)
    with pytest.raises(RuntimeError) as info:
        pydynamo.optimize(f, **kw)          # at the call of optimize, not the first call of f
    assert valid in str(info.value), str(info.value)   # the valid values are listed


def test_unknown_backend_is_invalid_backend_naming_the_known_ones():
    with pytest.raises(InvalidBackend, match="aot_eager, codegen, cudagraphs, eager, inductor"):
        pydynamo.optimize(backend="nope")
    assert issubclass(InvalidBackend, RuntimeError)   # torch's InvalidBackend is a RuntimeError


def test_bad_option_value_raises_value_error_at_the_call():
    with pytest.raises(ValueError, match="vector_width"):
        pydynamo.optimize(f, options={"vector_width": "7"})


def test_dynamic_of_the_wrong_type_raises_what_torch_compile_raises():
    assert _torch_raises(dynamic="yes") is AssertionError
    with pytest.raises(AssertionError):
        pydynamo.optimize(f, dynamic="yes")
    with pytest.raises(TypeError):
        pydynamo.optimize(f, fullgraph="yes")


def test_mode_with_the_eager_backend_warns_at_the_call_site():
    with pytest.warns(PydynamoWarning, match="ignores mode='reduce-overhead'") as rec:
        pydynamo.optimize(f, backend="eager", mode="reduce-overhead")
    assert rec[0].filename == __file__


@pytest.mark.parametrize("mode", ["default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"])
def test_torch_compile_modes_are_accepted(mode):
    assert _torch_raises(mode=mode) is None
    x = torch.randn(8)
    torch.testing.assert_close(pydynamo.optimize(f, mode=mode)(x), f(x))


# --- environment variables and log channels ---------------------------------------------------

def _python(code: str, **env):
    e = dict(os.environ, PYDYNAMO_CACHE_DIR=config.cache_dir, **env)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e, cwd=REPO,
                          timeout=300)


def test_unknown_log_channel_warns_at_import_naming_the_valid_ones():
    p = _python("import pydynamo.config", PYDYNAMO_LOGS="graph_break,recompiles")
    assert p.returncode == 0, p.stderr
    assert "unknown log channel(s) graph_break" in p.stderr and "graph_breaks, recompiles" in p.stderr, p.stderr
    assert "all" in p.stderr


def test_bad_recompile_limit_warns_and_keeps_the_default():
    p = _python("import pydynamo.config as c; print(c.recompile_limit)", PYDYNAMO_RECOMPILE_LIMIT="many")
    assert p.returncode == 0 and p.stdout.strip() == "8", p.stderr
    assert "PYDYNAMO_RECOMPILE_LIMIT='many' is not an integer" in p.stderr


def test_perf_channel_prints_compile_time_and_per_call_figures():
    code = ("import torch, pydynamo\n"
            "g = pydynamo.optimize(lambda x: torch.sin(x) + 1, backend='eager')\n"
            "for _ in range(12): g(torch.ones(3))\n")
    p = _python(code, PYDYNAMO_LOGS="perf")
    assert p.returncode == 0, p.stderr
    assert "[pydynamo.perf] compiled <lambda>" in p.stderr and " ms: 1 graph(s)" in p.stderr, p.stderr
    assert "call 1 (compiles)" in p.stderr and "calls 2-10: median" in p.stderr, p.stderr


def test_all_channel_turns_on_every_channel():
    code = ("import torch, pydynamo\n"
            "def g(x):\n    y = x + 1\n    print('mid')\n    return y * 2\n"
            "c = pydynamo.optimize(g, backend='eager')\n"
            "c(torch.ones(3)); c(torch.ones(3, dtype=torch.float64))\n")
    p = _python(code, PYDYNAMO_LOGS="all")
    assert p.returncode == 0, p.stderr
    for channel in ("graph_breaks", "recompiles", "guards", "graph_code", "bytecode", "output_code", "perf"):
        assert f"[pydynamo.{channel}]" in p.stderr, (channel, p.stderr[-3000:])


# --- graph-break warnings ---------------------------------------------------------------------

def prints(x):
    y = x + 1
    print("in prints")       # line PRINT_LINE
    return y * 2


PRINT_LINE = prints.__code__.co_firstlineno + 2


def _breaks(fn, *args, calls=1):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        compiled = pydynamo.optimize(fn, backend="eager")
        for _ in range(calls):
            compiled(*args)
    return [w for w in rec if issubclass(w.category, GraphBreakWarning)]


def test_break_warning_names_the_users_file_and_line(capsys):
    ws = _breaks(prints, torch.ones(3))
    assert [(w.filename, w.lineno) for w in ws] == [(__file__, PRINT_LINE)]
    assert "[print]" in str(ws[0].message) and "hint:" in str(ws[0].message)


def test_break_warning_once_per_reason_and_line_over_calls_and_recompiles(capsys):
    ws = _breaks(prints, torch.ones(3), calls=3)
    ws += _breaks(prints, torch.ones(3, dtype=torch.float64))   # a recompile: the same break
    assert len(ws) == 1, [str(w.message) for w in ws]


def test_break_warning_shows_the_users_source_line(capsys):
    with warnings.catch_warnings():
        warnings.simplefilter("always")
        err = io.StringIO()
        old = warnings.showwarning
        warnings.showwarning = lambda m, c, fn, ln, file=None, line=None: err.write(
            warnings.formatwarning(m, c, fn, ln, line))
        try:
            pydynamo.optimize(prints, backend="eager")(torch.ones(3))
        finally:
            warnings.showwarning = old
    assert 'print("in prints")' in err.getvalue() and "convert_frame" not in err.getvalue(), err.getvalue()


def test_break_warnings_respect_filters(capsys):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        warnings.filterwarnings("ignore", category=GraphBreakWarning)
        pydynamo.optimize(prints, backend="eager")(torch.ones(3))
    assert not rec
    pydynamo.reset()
    with warnings.catch_warnings():
        warnings.simplefilter("error", GraphBreakWarning)
        with pytest.raises(GraphBreakWarning):
            pydynamo.optimize(prints, backend="eager")(torch.ones(3))


def asks_for_break(x):
    y = x + 1
    pydynamo.graph_break()
    return y * 2


@pydynamo.disable
def disabled_helper(x):
    return x * 3


def calls_disabled(x):
    return disabled_helper(x + 1) + 1


@pytest.mark.parametrize("fn", [asks_for_break, calls_disabled])
def test_breaks_the_user_asked_for_do_not_warn(fn):
    ex = pydynamo.explain(fn)(torch.ones(3))
    assert ex.graph_count == 2 and len(ex.break_reasons) == 1   # the break is still taken and reported
    pydynamo.reset()
    assert _breaks(fn, torch.ones(3)) == []


def raises(x):
    y = x + 1
    raise ValueError("bad input")


def test_a_single_raise_warns_once():
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        with pytest.raises(ValueError, match="bad input"):
            pydynamo.optimize(raises, backend="eager")(torch.ones(3))
    ws = [w for w in rec if issubclass(w.category, GraphBreakWarning)]
    assert len(ws) == 1, [str(w.message) for w in ws]
    assert ws[0].lineno == raises.__code__.co_firstlineno + 2


def test_explain_counts_breaks_without_warning(capsys):
    with warnings.catch_warnings(record=True) as rec:
        warnings.simplefilter("always")
        ex = pydynamo.explain(prints)(torch.ones(3))
    assert not [w for w in rec if issubclass(w.category, PydynamoWarning)]
    assert ex.graph_break_count == 1 and [b.reason_code for b in ex.break_reasons] == ["print"]


# --- disable ----------------------------------------------------------------------------------

class Counting:
    def __init__(self):
        self.count = 0

    def __call__(self, gm, example_inputs):
        self.count += 1
        return gm.forward


def test_disable_context_around_a_compiled_call_does_not_compile():
    be = Counting()
    compiled = pydynamo.optimize(f, backend=be)
    x = torch.randn(4)
    with pydynamo.disable():
        torch.testing.assert_close(compiled(x), f(x))
        with pydynamo.optimize(backend=be):
            f(x)
    assert be.count == 0
    compiled(x)
    assert be.count == 1      # outside the disable scope it compiles again


def test_disabled_function_calling_a_compiled_one_does_not_compile():
    be = Counting()
    compiled = pydynamo.optimize(f, backend=be)
    outer = pydynamo.disable(lambda x: compiled(x))
    outer(torch.randn(4))
    assert be.count == 0


# --- names in tracebacks, logs and help() -----------------------------------------------------

def fails_after_break(x):
    y = x + 1
    print("before the failure")
    return y[10]


def test_traceback_shows_user_frames_with_named_resume_code(capsys):
    with pytest.raises(IndexError) as info:
        pydynamo.optimize(fails_after_break, backend="eager")(torch.ones(3))
    text = "".join(traceback.format_exception(info.value))
    frames = traceback.extract_tb(info.value.__traceback__)
    assert "__resume_at" not in text and "__break_at" not in text and "__pydynamo" not in text, text
    assert "<pydynamo transformed" not in text and "breaks.py" not in text, text
    last = frames[-1]
    base = os.path.basename(__file__)
    assert (last.filename, last.lineno) == (__file__, fails_after_break.__code__.co_firstlineno + 3), text
    assert last.name.startswith("fails_after_break (") and f"{base}:" in last.name, last.name


def test_verbose_keeps_internal_frames(capsys, monkeypatch):
    monkeypatch.setattr(config, "verbose", True)
    with pytest.raises(IndexError) as info:
        pydynamo.optimize(fails_after_break, backend="eager")(torch.ones(3))
    text = "".join(traceback.format_exception(info.value))
    assert "eval_frame.py" in text and "<pydynamo transformed" in text, text


def test_help_of_optimize_documents_the_settings():
    doc = pydynamo.optimize.__doc__
    for word in ("backend", "mode", "options", "fullgraph", "dynamic", "Training", "PYDYNAMO_LOGS",
                 '"inductor" is', "reduce-overhead", "max-autotune", "InvalidBackend", "docs/USER_GUIDE.md"):
        assert word in doc, word
    for name in pydynamo.__all__:
        obj = getattr(pydynamo, name)
        assert (obj.__doc__ or "").strip(), f"pydynamo.{name} has no docstring"


def test_resume_code_rebuilt_after_reset_keeps_its_origin(capsys):
    """Regression: after reset() the rebuilt resume code equals the old one (code objects
    compare by content); the origin map kept the old key, and when the old code died the new
    one lost its origin, so its stack arguments (and its name in messages) fell back to
    internal names."""
    import gc
    from pydynamo import convert_frame
    from pydynamo.bytecode import origin_of

    pydynamo.explain(prints)(torch.ones(3))        # compiles a resume code, then resets
    frames = []
    convert_frame.RECORDERS.append(frames.append)
    try:
        pydynamo.optimize(prints, backend="eager")(torch.ones(3))
    finally:
        convert_frame.RECORDERS.remove(frames.append)
    gc.collect()                                   # the first resume code is gone now
    resumed = [f.code for f in frames if isinstance(f, convert_frame.FrameResult) and f.code is not prints.__code__]
    assert resumed and all(origin_of(c) is not None for c in resumed)

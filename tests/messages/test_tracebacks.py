"""Tracebacks through compiled code (issue 21): an exception raised inside compiled code -- in
a function cut at a graph break, in its resume code, in a compiled graph, in a module's
forward -- has a traceback with the frames the eager traceback has (same files, lines and
functions; generated pieces keep a name that says what they are, `f (graph break at
file:N)`), no frame of pydynamo's (its wrapper in eval_frame.py, transformed code, FX code),
the same exception object and its `__cause__`/`__context__`; traceback.format_exc(), pytest's
report and pdb.post_mortem read it as they read an eager one.

torch.compile (2.x, same programs) shows its `compile_wrapper` frame of torch/_dynamo/eval_frame.py
under the caller, for errors met while tracing some 30 frames of torch/_dynamo, and for an
Inductor kernel's error the aot_autograd/inductor runtime frames and the generated file's line
instead of the user's."""
import inspect
import io
import os
import pdb
import subprocess
import sys
import textwrap
import traceback

import pytest
import torch

import pydynamo

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PYDYNAMO_DIR = os.path.join(REPO, "pydynamo") + os.sep


def _raised(call):
    try:
        call()
    except Exception as e:
        return e
    raise AssertionError("did not raise")


def _frames(exc) -> list:
    """(file, line, function) of each traceback entry below the _raised helper and the lambda
    it calls; a generated piece's name `f (graph break at x.py:3)` counts as `f`."""
    return [(fs.filename, fs.lineno, fs.name.split(" (")[0])
            for fs in traceback.extract_tb(exc.__traceback__)[2:]]


def _same_as_eager(fn, *args, compile_args=None, **kw):
    eager = _raised(lambda: fn(*args))
    compiled = pydynamo.optimize(fn, **(compile_args or dict(backend="eager")))
    for warm in kw.get("warm", ()):   # calls that compile before the failing one
        compiled(*warm)
    got = _raised(lambda: compiled(*args))
    assert type(got) is type(eager) and str(got) == str(eager)
    text = "".join(traceback.format_exception(got))
    assert _frames(got) == _frames(eager), text
    assert PYDYNAMO_DIR not in text and "<pydynamo" not in text and "eval_with_key" not in text, text
    return got


# --- programs ---------------------------------------------------------------------------------

def inner(x):
    y = x + 1
    print("break")
    return y[10]


def outer(x):
    z = x * 2
    return inner(z)


def test_error_in_resume_code_after_breaks_in_two_frames(capsys):
    """The failing line is in inner's resume code after a print break; outer broke at the call
    of inner. Before: eval_frame.py's wrapper frame between the caller and outer, and inner
    twice (its break code at the print, calling the resume code, then the resume code)."""
    got = _same_as_eager(outer, torch.ones(3))
    names = [fs.name for fs in traceback.extract_tb(got.__traceback__)]
    assert any(n.startswith("inner (graph break at test_tracebacks.py:") for n in names), names


def _under_optimize_block(fn, *args):
    with pydynamo.optimize(backend="eager"):
        return fn(*args)


def _called(fn, *args):
    return fn(*args)


def test_optimize_as_a_context_manager_has_eagers_frames(capsys):
    """`with pydynamo.optimize():` trims the traceback in its __exit__ as the wrapper does.
    Before: transformed code and executor/installed.py frames between every user frame."""
    eager = _raised(lambda: _called(outer, torch.ones(3)))
    got = _raised(lambda: _under_optimize_block(outer, torch.ones(3)))
    text = "".join(traceback.format_exception(got))
    assert _frames(got)[1:] == _frames(eager)[1:] and len(_frames(got)) == 3, text
    assert PYDYNAMO_DIR not in text and "<pydynamo" not in text, text


def g(x, idx):
    y = x.sin()
    z = y[idx]
    return z.cos()


def caller(x, idx):
    return g(x * 2, idx) + 1


def long_lines(x, idx):
    a_rather_long_name_for_a_value = x.sin() * 2 + x.cos() * 3 + x.tan() * 4 + x.exp() * 5
    the_value_we_index_out_of_range = a_rather_long_name_for_a_value[idx] + a_rather_long_name_for_a_value
    return the_value_we_index_out_of_range


@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_error_raised_by_a_compiled_graph_shows_the_inlined_calls(backend):
    """One graph for caller with g inlined; the graph raises (an index out of range, known only
    at run time): the traceback is caller's line, then g's, as eager's. Before: the wrapper's
    frame and g's line only (caller's call of g missing)."""
    _same_as_eager(caller, torch.ones(3), torch.tensor([5]), compile_args=dict(backend=backend),
                   warm=[(torch.ones(3), torch.tensor([1]))])


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_graph_error_on_a_line_longer_than_the_frames_code(backend):
    """Regression: the generated frame is padded to the user's line's width; the padding of
    `raise __pydynamo_exc` went inside the name (a SyntaxError instead of the user's error)."""
    _same_as_eager(long_lines, torch.ones(3), torch.tensor([5]), compile_args=dict(backend=backend),
                   warm=[(torch.ones(3), torch.tensor([1]))])


def test_error_raised_by_a_codegen_kernel_shows_the_inlined_calls():
    """codegen: the indexing kernel flags the out-of-range index; the traceback is caller's line,
    then g's, as eager's. Before: g's line only (KernelSite kept the innermost line)."""
    _same_as_eager(caller, torch.ones(3), torch.tensor([5]), compile_args=dict(backend="codegen"),
                   warm=[(torch.ones(3), torch.tensor([1]))])


def _cholesky(a):
    return torch.linalg.cholesky(a * 2)


def _calls_cholesky(a):
    return _cholesky(a + 1) + 1


def test_error_raised_by_a_codegen_extern_shows_the_inlined_calls():
    """codegen: cholesky runs as an extern call in the wrapper and raises on a matrix that is not
    positive-definite (known only at run time); the traceback is the caller's line, then the
    inlined _cholesky's, as eager's. Before: _cholesky's line only (the wrapper's step comment,
    which shows the innermost line, was the extern's only source)."""
    _same_as_eager(_calls_cholesky, -2 * torch.eye(3), compile_args=dict(backend="codegen"),
                   warm=[(torch.eye(3),)])


def test_error_raised_by_a_codegen_kernel_is_at_the_users_line():
    f = pydynamo.optimize(caller, backend="codegen")
    f(torch.ones(3), torch.tensor([1]))
    got = _raised(lambda: f(torch.ones(3), torch.tensor([5])))
    text = "".join(traceback.format_exception(got))
    assert _frames(got)[-1] == (__file__, g.__code__.co_firstlineno + 2, "g"), text
    assert PYDYNAMO_DIR not in text and "<pydynamo" not in text, text


def matmul(x, w):
    y = x.sin()
    return y @ w


def test_shape_mismatch(capsys):
    """A shape mismatch is found while tracing (a graph break), then raised by eager's op."""
    _same_as_eager(matmul, torch.ones(3, 4), torch.ones(5, 2))


class Model(torch.nn.Module):
    def forward(self, x):
        y = x.cos()
        print("break")
        return y[7]


def test_module_forward_has_eagers_frames(capsys):
    """A compiled module's traceback has the one pair of nn.Module.__call__ frames an eager
    call has. Before: those of the compiled module, OptimizedModule.forward in eval_frame.py,
    the wrapper, and the original module's pair again."""
    m = Model()
    eager = _raised(lambda: m(torch.ones(3)))
    got = _raised(lambda: pydynamo.optimize(m, backend="eager")(torch.ones(3)))
    assert _frames(got) == _frames(eager), "".join(traceback.format_exception(got))


@pydynamo.disable
def disabled_fails(x):
    return x[9]


def calls_disabled(x):
    y = x + 1
    return disabled_fails(y)


def test_error_in_a_disabled_function(capsys):
    got = _raised(lambda: pydynamo.optimize(calls_disabled, backend="eager")(torch.ones(3)))
    frames = _frames(got)
    assert [f[2] for f in frames] == ["calls_disabled", "disabled_fails"], frames
    assert frames[-1][1] == disabled_fails.__wrapped__.__code__.co_firstlineno + 2


# --- the exception object and its chain -----------------------------------------------------

def reraises_from(x):
    y = x + 1
    print("break")
    try:
        return y[10]
    except IndexError as e:
        raise ValueError("wrapped") from e


def reraises_during(x):
    y = x + 1
    print("break")
    try:
        return y[10]
    except IndexError:
        raise KeyError("during")


@pytest.mark.parametrize("fn, link", [(reraises_from, "__cause__"), (reraises_during, "__context__")])
def test_chained_exceptions_keep_their_links_and_lose_our_frames(fn, link, capsys):
    got = _same_as_eager(fn, torch.ones(3))
    eager = _raised(lambda: fn(torch.ones(3)))
    first = getattr(got, link)
    assert isinstance(first, IndexError)
    assert got.__suppress_context__ == eager.__suppress_context__
    assert [f[1:] for f in _frames_all(first)] == [f[1:] for f in _frames_all(getattr(eager, link))]
    text = "".join(traceback.format_exception(got))
    assert ("direct cause" if link == "__cause__" else "During handling") in text
    assert PYDYNAMO_DIR not in text and "<pydynamo" not in text, text


def _frames_all(exc):
    return [(fs.filename, fs.lineno, fs.name.split(" (")[0]) for fs in traceback.extract_tb(exc.__traceback__)]


ERROR = LookupError("the very object")


def raises_object(x):
    y = x + 1
    print("break")
    if y.sum() > 0:
        raise ERROR
    return y


def test_the_exception_object_is_the_users(capsys):
    with pytest.raises(LookupError) as info:
        pydynamo.optimize(raises_object, backend="eager")(torch.ones(3))
    assert info.value is ERROR


def test_format_exc_lists_user_frames_only(capsys):
    try:
        pydynamo.optimize(outer, backend="eager")(torch.ones(3))
    except IndexError:
        text = traceback.format_exc()
    assert "in outer" in text and "return inner(z)" in text and "return y[10]" in text, text
    assert PYDYNAMO_DIR not in text and "<pydynamo" not in text, text


# --- debuggers and test runners --------------------------------------------------------------

def _post_mortem(exc, commands: str) -> str:
    out = io.StringIO()
    p = pdb.Pdb(stdin=io.StringIO(commands), stdout=out)
    p.reset()
    p.interaction(None, exc.__traceback__)   # what pdb.post_mortem(tb) does
    return out.getvalue()


def test_pdb_post_mortem_walks_the_users_frames(capsys):
    f = pydynamo.optimize(caller, backend="eager")
    f(torch.ones(3), torch.tensor([1]))
    got = _raised(lambda: f(torch.full((3,), 4.0), torch.tensor([5])))
    out = _post_mortem(got, "where\nup\np x\nq\n")
    assert f"{__file__}({g.__code__.co_firstlineno + 2})g()" in out, out
    assert f"{__file__}({caller.__code__.co_firstlineno + 1})caller()" in out, out
    assert "tensor([4., 4., 4.])" in out, out         # the caller's argument, from its frame
    assert PYDYNAMO_DIR not in out and "<pydynamo" not in out, out


def test_pytest_reports_the_users_lines(tmp_path):
    text = "import torch, pydynamo\n\n\n" + "\n\n".join(inspect.getsource(f) for f in (g, caller, inner)) + \
        textwrap.dedent("""

        def test_graph():
            f = pydynamo.optimize(caller, backend="eager")
            f(torch.ones(3), torch.tensor([1]))
            f(torch.ones(3), torch.tensor([5]))

        def test_resume():
            pydynamo.optimize(inner, backend="eager")(torch.ones(3))
        """)
    (tmp_path / "test_user.py").write_text(text)
    line = {s.strip(): n for n, s in enumerate(text.splitlines(), 1)}
    p = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-W", "ignore",
                        str(tmp_path / "test_user.py")], capture_output=True, text=True, cwd=tmp_path,
                       env={**os.environ, "PYTHONPATH": REPO})
    out = p.stdout
    assert "2 failed" in out, out
    assert f"test_user.py:{line['return g(x * 2, idx) + 1']}: in caller" in out, out
    assert f"test_user.py:{line['z = y[idx]']}: IndexError" in out and ">   z = y[idx]" in out, out
    assert f"test_user.py:{line['return y[10]']}: IndexError" in out, out
    # a placed frame shows its line, not the file from its top
    assert "import torch, pydynamo" not in out.split("test_graph ___")[1].split("test_resume ___")[0], out
    assert "eval_frame.py" not in out and "<pydynamo" not in out and PYDYNAMO_DIR not in out, out

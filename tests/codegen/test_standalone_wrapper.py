"""`python <wrapper file>` runs a generated wrapper on its own (issue 21): random inputs of the
recorded layouts, the median time per call printed (codegen/standalone.py, run_wrapper.py); under
the pipeline's exec the footer is inert; a wrapper whose namespace cannot be written down says
so instead of failing."""
import os
import subprocess
import sys

import pytest
import torch

import codegen


def _run_file(path):
    env = dict(os.environ, TRITON_INTERPRET="1")
    return subprocess.run([sys.executable, path], capture_output=True, text=True, env=env,
                          timeout=300)


@pytest.mark.parametrize("kernels", ["cpp", "triton"])
def test_a_wrapper_file_runs_on_its_own_and_prints_its_time(kernels):
    def f(x, w, b):
        return torch.relu(torch.nn.functional.linear(x, w, b)).sum(-1) * 2 + x.mean()
    args = [torch.randn(16, 8), torch.randn(4, 8), torch.randn(4)]
    compiled = codegen.compile_fx(torch.fx.symbolic_trace(f), args, backend_kernels=kernels)
    torch.testing.assert_close(compiled(*args), f(*args), rtol=1e-5, atol=1e-5)  # inert in exec
    text = open(compiled.wrapper_path).read()
    assert "codegen.run_wrapper" in text
    done = _run_file(compiled.wrapper_path)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "us per call" in done.stdout and kernels in done.stdout


def _opaque(x):
    return x.flip(0) * 3


torch.fx.wrap("_opaque")


def test_a_wrapper_it_cannot_write_down_says_so():
    """An extern that is this test's own function: a fresh process may not import it."""
    from codegen import standalone
    assert standalone.qualified_name(torch.ops.aten.mm.default) == "torch.ops.aten.mm.default"
    assert standalone.resolve("torch.nn.functional.linear") is torch.nn.functional.linear
    assert standalone.qualified_name(_opaque) is None

    def f(x):
        return _opaque(torch.sin(x)) + 1
    x = torch.randn(5)
    compiled = codegen.compile_fx(torch.fx.symbolic_trace(f), [x])
    torch.testing.assert_close(compiled(x), f(x))
    done = _run_file(compiled.wrapper_path)
    assert done.returncode == 0 and "not runnable on its own: extern" in done.stdout, \
        (done.stdout, done.stderr[-2000:])

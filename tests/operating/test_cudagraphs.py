"""The "cudagraphs" backend (issue 20): registered; on CPU and for graphs that need autograd it
runs each graph as is (results and gradients equal eager); on CUDA (skipped without a GPU) it
replays recordings, returns fresh outputs, and runs eagerly where replay could be wrong."""
import warnings

import pytest
import torch

import pydynamo
from pydynamo import cudagraphs as cg
# every test with both ways the replay runner copies a held output out (swapping storages'
# memory, or set_ as on torch 2.11's CUDA build): the backend's runner copies every output
# and a fresh pydynamo around each test, as there
from tests.operating.test_cudagraph_outputs import copy_out, cuda, fresh  # noqa: F401


def mlp(x, w, b):
    return torch.relu(x @ w + b).sum(dim=-1) * 0.5


class Recorder:
    """The cudagraphs backend, keeping what it returned for each graph."""

    def __init__(self):
        self.made = []

    def __call__(self, gm, example_inputs):
        fn = cg.cudagraphs(gm, example_inputs)
        self.made.append((fn, cg.eager_reason(gm, example_inputs)))
        return fn


def _args(device, grad=False):
    torch.manual_seed(0)
    return [torch.randn(4, 8, device=device), torch.randn(8, 3, device=device, requires_grad=grad),
            torch.randn(3, device=device, requires_grad=grad)]


def test_registered():
    assert "cudagraphs" in pydynamo.list_backends()


def test_cpu_runs_each_graph_as_is():
    rec = Recorder()
    compiled = pydynamo.optimize(mlp, backend=rec)
    args = _args("cpu")
    torch.testing.assert_close(compiled(*args), mlp(*args))
    torch.testing.assert_close(pydynamo.optimize(mlp, backend="cudagraphs")(*args), mlp(*args))
    assert [reason for _, reason in rec.made] == ["inputs not on one CUDA device"]


def test_autograd_graph_runs_eagerly_with_equal_gradients():
    args = _args("cpu", grad=True)
    ref = [a.detach().clone().requires_grad_(a.requires_grad) for a in args]
    rec = Recorder()
    pydynamo.optimize(mlp, backend=rec)(*args).sum().backward()
    mlp(*ref).sum().backward()
    for a, r in zip(args[1:], ref[1:]):
        torch.testing.assert_close(a.grad, r.grad)
    assert [reason for _, reason in rec.made] == ["inputs need autograd"]


def test_first_call_decides_whether_outputs_alias_inputs():
    """(CPU, with a stand-in runner) an output sharing storage with an input keeps the graph
    plain; otherwise later calls go to the runner."""
    runner_calls = []

    def runner(*args):
        runner_calls.append(args)
        return "replayed"

    x = torch.arange(4.0)
    view = cg._FirstCallChecked(lambda t: (t[1:], t.sum()), runner)
    assert view(x)[0].data_ptr() == x[1:].data_ptr() and view(x)[0].data_ptr() == x[1:].data_ptr()
    fresh = cg._FirstCallChecked(lambda t: t + 1, runner)
    torch.testing.assert_close(fresh(x), x + 1)
    assert fresh(x) == "replayed" and len(runner_calls) == 1


@cuda
def test_cuda_replays_and_outputs_stay_fresh():
    rec = Recorder()
    compiled = pydynamo.optimize(mlp, backend=rec)
    outs, refs = [], []
    for seed in range(6):
        torch.manual_seed(seed)
        args = [torch.randn(4, 8, device="cuda"), torch.randn(8, 3, device="cuda"), torch.randn(3, device="cuda")]
        outs.append(compiled(*args))
        refs.append(mlp(*args))
    for o, r in zip(outs, refs):          # earlier outputs are not overwritten by later replays
        torch.testing.assert_close(o, r)
    (fn, reason), = rec.made
    # call 1: the alias check, 2: the runner's warm-up, 3: capture, 4-6: replays
    assert reason is None and fn.target is fn.runner and fn.runner.cg_stats["replays"] >= 3


@cuda
def test_cuda_in_place_and_aliasing_graphs_run_eagerly():
    def writes(x):
        x.add_(1)
        return x * 2

    def view_of_input(x):
        return x[1:], x.sum()

    for fn in (writes, view_of_input):
        x, y = torch.ones(5, device="cuda"), torch.ones(5, device="cuda")
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = pydynamo.optimize(fn, backend="cudagraphs")(x)
        want = fn(y)
        torch.testing.assert_close(got, want)
        torch.testing.assert_close(x, y)
    base = torch.ones(5, device="cuda")
    view, _ = pydynamo.optimize(view_of_input, backend="cudagraphs")(base)
    base.fill_(3)
    assert view.tolist() == [3.0] * 4     # a view of the caller's tensor, as eager's is

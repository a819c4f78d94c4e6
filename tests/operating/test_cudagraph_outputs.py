"""What a CUDA-graph replay hands out (issue 18; codegen/cudagraphs.py's "outputs" policy).

mode="reduce-overhead" returns the graph's own output memory (no copy per call). Before the next
replay overwrites it, an output the caller still holds (the tensor, a view of it, its storage) is
copied out, or, where torch has the storage access error (CUDA builds) and the caller does not
pass it back in, made to raise when read (torch.compile's behaviour). An output dropped before
the next call costs nothing. On the CPU the runner runs with a simulated device (`Replayer`: a
replay re-runs the call into the captured outputs, so a stale output would show old values
overwritten), with and without a stand-in invalidation, and with both ways of copying out
(fixture `copy_out`: swapping storages' memory, or `set_` as where torch lacks the swap); the CUDA
tests (skipped here) check the real error and the values on the device.
"""
import copy
import types
import weakref

import pytest
import torch
import torch.nn as nn

import codegen
import codegen.cudagraphs as cgr
from codegen import cudagraph_steps as steps
import pydynamo
from codegen.cudagraphs import STALE_OUTPUT, CudaGraphRunner
from codegen.options import Options

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@pytest.fixture(autouse=True)
def fresh():
    pydynamo.reset()
    yield
    pydynamo.reset()


@pytest.fixture(autouse=True, params=["swap", "set_"])
def copy_out(request, monkeypatch):
    """Every test runs with both ways of copying a held output out: swapping the storage's
    memory (views follow) and, as on a torch without UntypedStorage._swap_data_ptr_ (torch
    2.11's CUDA build), `set_` of the tensors the runner handed out."""
    if request.param == "swap" and not hasattr(torch.UntypedStorage, "_swap_data_ptr_"):
        pytest.skip("this torch cannot swap a storage's memory")
    monkeypatch.setattr(cgr, "CAN_SWAP", request.param == "swap")
    return request.param


def _tensors(out):
    return [out] if isinstance(out, torch.Tensor) else \
        [t for o in out for t in _tensors(o)] if isinstance(out, (list, tuple)) else []


class Replayer(cgr.Device):
    """Capture: one run of the call (writes undone: a real capture runs nothing); replay: the
    call again, its results written into the captured output tensors (the graph's memory)."""

    def __init__(self, invalidating=False):
        self.invalidated = []       # storage addresses the runner invalidated
        if invalidating:
            self.invalidate = lambda addr, msg: self.invalidated.append((addr, msg))
        else:
            self.invalidate = None

    def pool(self):
        return "pool"

    def capture(self, fn, args, pool):
        before = [a.clone() if isinstance(a, torch.Tensor) else a for a in args]
        outs = fn(*args)
        for a, b in zip(args, before):      # (only those written: a copy bumps the version
            if isinstance(a, torch.Tensor) and not torch.equal(a, b):    # autograd checks)
                a.copy_(b)
        captured = _tensors(outs)

        class Graph:
            @staticmethod
            def replay():
                for mine, new in zip(captured, _tensors(fn(*args))):
                    if mine.data_ptr() != new.data_ptr():
                        mine.copy_(new)
        return Graph, outs

    def failed(self):
        pass

    def checking_syncs(self, fn, args):
        return fn(*args)


def f(x, w):
    return (x @ w).relu() + 1, (x * 2).sum(0)


def _runner(outputs="static", invalidating=False):
    dev = Replayer(invalidating)
    return CudaGraphRunner(f, device=dev, outputs=outputs), dev


def _replaying(run, w):
    """Calls until the runner replays (warm-up, capture): later calls are replays."""
    for _ in range(2):
        run(torch.randn(4, 3), w)
    assert run.cg_stats["captures"] == 1


@pytest.fixture
def w():
    torch.manual_seed(0)
    return torch.randn(3, 5)


def test_outputs_are_the_graphs_memory_and_dropped_ones_cost_nothing(w):
    run, _ = _runner()
    _replaying(run, w)
    (g,) = run.entries[next(iter(run.entries))].graphs.values()
    for _ in range(5):
        x = torch.randn(4, 3)
        a, b = run(x, w)
        torch.testing.assert_close(a, f(x, w)[0])
        torch.testing.assert_close(b, f(x, w)[1])
        assert a.data_ptr() == g.outputs[0].data_ptr()      # no copy: the static buffer
        assert b.data_ptr() == g.outputs[1].data_ptr()
        del a, b                                            # dropped before the next call
    assert run.cg_stats["output_copies"] == 0 and run.cg_stats["replays"] == 6


def test_an_output_held_across_a_replay_is_copied_out_without_the_access_error(w):
    run, _ = _runner()
    _replaying(run, w)
    kept = []
    for _ in range(4):
        x = torch.randn(4, 3)
        kept.append((run(x, w), f(x, w)))
    for got, want in kept:                     # every output kept its own call's values
        torch.testing.assert_close(got, want)
    # each later replay copied out the two outputs of the replay before
    assert run.cg_stats["output_copies"] == 2 * 3
    assert kept[0][0][0].data_ptr() != kept[-1][0][0].data_ptr()


def test_a_view_of_an_output_held_across_a_replay_keeps_its_values(w, copy_out):
    run, _ = _runner()
    _replaying(run, w)
    x, x2 = torch.randn(4, 3), torch.randn(4, 3)
    row = run(x, w)[0][1:3, ::2]                # the output itself is dropped, its view kept
    storage_only = run(x2, w)[1].untyped_storage()
    run(torch.randn(4, 3), w)
    torch.testing.assert_close(row, f(x, w)[0][1:3, ::2])
    torch.testing.assert_close(torch.empty(0).set_(storage_only), f(x2, w)[1])
    if copy_out == "swap":
        assert run.cg_stats["output_copies"] == 2   # the viewed output and the kept storage
        return
    # without swapping, `row` (a view the runner never saw) cannot be moved: the two calls
    # while it is held run plainly (the graph's memory untouched) and the runner copies every
    # output from then on; once `row` is dropped it replays again. (The output itself, kept
    # alive as the view's base, was moved by set_ once: one copy.)
    assert run.cg_stats["held_plain_calls"] == 2 and run.cg_stats["replays"] == 2
    assert run.copying and run.cg_stats["output_copies"] == 1
    del row
    x3 = torch.randn(4, 3)
    a, b = run(x3, w)
    torch.testing.assert_close((a, b), f(x3, w))
    assert run.cg_stats["replays"] == 3 and run.cg_stats["output_copies"] == 1 + 2
    assert not run.handed


def test_the_loop_that_replaces_its_output_invalidates_it_at_no_copy(w):
    """`out = f(x)` holds the previous `out` during the call: with the storage access error
    it is invalidated (torch.compile's behaviour), never copied; without it, copied."""
    messages = []
    for invalidating, copies in ((True, 0), (False, 2 * 4)):
        run, dev = _runner(invalidating=invalidating)
        _replaying(run, w)
        out = run(torch.randn(4, 3), w)
        for _ in range(4):
            held = [o.untyped_storage()._cdata for o in out]
            x = torch.randn(4, 3)
            out = run(x, w)
            torch.testing.assert_close(out, f(x, w))
            if invalidating:
                assert [a for a, _ in dev.invalidated[-2:]] == held
        assert run.cg_stats["output_copies"] == copies
        assert run.cg_stats["outputs_invalidated"] == (8 if invalidating else 0)
        messages += [m for _, m in dev.invalidated]
    assert set(messages) == {STALE_OUTPUT}
    assert "pydynamo" in STALE_OUTPUT and ".clone()" in STALE_OUTPUT and \
        "docs/USER_GUIDE.md" in STALE_OUTPUT


def test_an_output_passed_back_in_is_copied_out_not_invalidated():
    """`y = g(x); z = g(y) + y`: the caller passes the held output in, and reads it after."""
    def g(x):
        return (x.sin() * 3,)
    dev = Replayer(invalidating=True)
    run = CudaGraphRunner(g, device=dev, outputs="static")
    x = torch.randn(6)
    ref = x
    for _ in range(5):
        (y,) = run(x)
        (z,) = run(y)
        want_y = ref.sin() * 3
        torch.testing.assert_close(y, want_y)              # read after the replay of g(y)
        torch.testing.assert_close(z, want_y.sin() * 3)
        x = ref = z.clone()
    # from the second round on: y is passed in (copied out, never invalidated); the z of the
    # round before, still bound to its name at g(x), is invalidated
    assert run.cg_stats["replays"] == 9
    assert run.cg_stats["output_copies"] == 4 and run.cg_stats["outputs_invalidated"] == 4


def test_a_view_of_an_output_passed_back_in_keeps_its_values_and_never_raises(copy_out):
    """`y = g(x); v = y[2:]; z = g(y)`: y is to be kept (passed back in). Without swapping, y
    itself is moved by set_ but the view `v` cannot be: that call runs plainly rather than
    invalidating what the caller still uses."""
    def g(x):
        return (x.sin() * 3,)
    dev = Replayer(invalidating=True)
    run = CudaGraphRunner(g, device=dev, outputs="static")
    for _ in range(2):
        run(torch.randn(6))
    x = torch.randn(6)
    (y,) = run(x)
    v = y[2:]
    (z,) = run(y)
    torch.testing.assert_close(y, x.sin() * 3)
    torch.testing.assert_close(v, (x.sin() * 3)[2:])
    torch.testing.assert_close(z, (x.sin() * 3).sin() * 3)
    assert not dev.invalidated and run.cg_stats["output_copies"] == 1
    held = run.cg_stats["held_plain_calls"]
    assert (held, run.copying) == ((0, False) if copy_out == "swap" else (1, True))


def test_set_out_keeps_autograd_versions_and_skips_moved_tensors():
    """The set_ copy-out: a tensor autograd saved for backward keeps its version (set_ bumps
    it, and a changed version fails the backward); tensors already moved are not copied
    again."""
    x = torch.randn(5, requires_grad=True)
    base = torch.randn(5)
    out = torch.empty(0).set_(cgr._alias_of(base).untyped_storage(), 0, (5,), (1,))
    storage = out.untyped_storage()
    h = cgr._Handed(storage, 0)
    h.tensors.append(weakref.ref(out))
    del storage
    loss = (x * out).sum()               # `out` saved for x's gradient
    version = out._version
    assert cgr._set_out(h)
    assert out._version == version and out.data_ptr() != base.data_ptr()
    base.fill_(7.0)                      # the graph's memory, overwritten by a later replay
    loss.backward()
    torch.testing.assert_close(x.grad, out)
    assert not torch.equal(out, base) and torch._C._storage_Use_Count(h.addr) == 0
    assert not cgr._set_out(h)           # moved already: nothing left on that storage
    cgr._free_weak(h.ref)


def test_outputs_aliasing_inputs_stay_the_callers_tensors():
    def h(cache, x):
        cache.add_(x)
        return cache, cache[1:], x * 2
    run = CudaGraphRunner(h, [0], device=Replayer(), outputs="static")
    cache, ref = torch.zeros(4), torch.zeros(4)
    for _ in range(5):
        x = torch.randn(4)
        same, view, fresh = run(cache, x)
        h(ref, x)
        assert same is cache and view.data_ptr() == cache.data_ptr() + 4
        torch.testing.assert_close(fresh, x * 2)
        assert len(run.handed) == (1 if run.cg_stats["replays"] else 0)    # `fresh` only
        del same, view, fresh
    torch.testing.assert_close(cache, ref)
    assert run.cg_stats["output_copies"] == 0 and run.cg_stats["replays"] == 4


def test_outputs_sharing_a_storage_still_alias_each_other_after_a_copy_out():
    def h(x):
        y = x + 1
        return y, y[2:], y
    run = CudaGraphRunner(h, device=Replayer(), outputs="static")
    for _ in range(2):
        run(torch.randn(5))
    x = torch.randn(5)
    a, b, c = run(x)
    run(torch.randn(5))                             # one storage copied out, once
    assert run.cg_stats["output_copies"] == 1
    torch.testing.assert_close(a, x + 1)
    a[3] = 100.0                                    # still one tensor's memory, as in eager
    assert b[1].item() == 100.0 and c[3].item() == 100.0


def test_copy_policies():
    for outputs, copies in (("copy", 2 * 4), ("copy_held", 2)):
        run, dev = _runner(outputs, invalidating=True)
        w = torch.randn(3, 5)
        _replaying(run, w)        # the capture's replay: one call
        kept = run(torch.randn(4, 3), w)
        run(torch.randn(4, 3), w)
        x = torch.randn(4, 3)
        torch.testing.assert_close(run(x, w), f(x, w))
        del kept
        assert run.cg_stats["output_copies"] == copies and not dev.invalidated
    with pytest.raises(ValueError, match="cudagraph_outputs"):
        Options(cudagraph_outputs="never")
    assert Options.of({"mode": "reduce-overhead"}).cudagraph_outputs == "static"


def test_marked_steps_keep_their_outputs_and_invalidate_earlier_ones(monkeypatch, w):
    """pydynamo.cudagraph_mark_step_begin(): outputs of the current step held at a replay are
    copied out (`f(x) + f(y)` in one step is right), outputs of earlier steps invalidated."""
    monkeypatch.setattr(steps, "step", 0)
    assert pydynamo.cudagraph_mark_step_begin is steps.mark_step_begin
    run, dev = _runner(invalidating=True)
    _replaying(run, w)
    x1, x2, x3 = torch.randn(4, 3), torch.randn(4, 3), torch.randn(4, 3)
    pydynamo.cudagraph_mark_step_begin()
    a = run(x1, w)
    b = run(x2, w)                  # the same step: `a` copied out
    torch.testing.assert_close(a, f(x1, w))
    torch.testing.assert_close(b, f(x2, w))
    assert run.cg_stats["output_copies"] == 2 and not dev.invalidated
    pydynamo.cudagraph_mark_step_begin()
    run(x3, w)                      # a new step: `b`, of the step before, is invalidated
    assert [addr for addr, _ in dev.invalidated] == [o.untyped_storage()._cdata for o in b]
    pydynamo.cudagraph_mark_step_begin()
    total = run(x1, w)[0] + run(x2, w)[0]
    torch.testing.assert_close(total, f(x1, w)[0] + f(x2, w)[0])
    assert run.cg_stats["output_copies"] == 3 and len(dev.invalidated) == 2


def test_an_output_dlpack_cannot_alias_is_copied(monkeypatch, w):
    def no_alias(t):
        raise BufferError("Bit types are not supported by dlpack")
    monkeypatch.setattr(cgr, "_alias_of", no_alias)
    run, _ = _runner()
    _replaying(run, w)
    x = torch.randn(4, 3)
    kept = run(x, w)
    run(torch.randn(4, 3), w)
    torch.testing.assert_close(kept, f(x, w))
    assert run.cg_stats["output_copies"] == 2 * 3 and not run.handed


def test_a_training_backward_copies_held_outputs_and_options_reach_the_runner():
    gm = torch.fx.symbolic_trace(lambda x: x * 2)
    g = types.SimpleNamespace(mutations={}, scalars=None, size_bindings=None)
    for opts, policy in (({}, "static"), ({"boxed": True}, "copy_held"),
                         ({"cudagraph_outputs": "copy"}, "copy"),
                         ({"boxed": True, "cudagraph_outputs": "copy"}, "copy")):
        run = cgr.maybe_wrap(gm.forward, gm, g, Options(cudagraphs=True, **opts), None)
        assert run.outputs == policy, opts


def test_the_runner_forgets_outputs_of_the_replay_before():
    run, _ = _runner()
    w = torch.randn(3, 5)
    _replaying(run, w)
    for _ in range(3):
        run(torch.randn(4, 3), w)
        assert len(run.handed) == 2     # weak references to the last replay's two outputs


def test_training_with_gradient_accumulation_and_a_kept_view_on_the_triton_interpreter(
        monkeypatch, copy_out):
    """Gradients accumulated over two backwards per zero_grad(set_to_none=True) (the first
    backward's gradients, autograd's .grad, are still held at the second's replay), and a view
    of one forward's output kept across the next forward (a view autograd saves for the loss):
    eager's gradients. Without swapping both are held beyond the tensors the runner handed out,
    so those calls run plainly and the runners turn to copying; with it nothing runs plainly."""
    runners, m, ref, fast = _training(monkeypatch)
    for step in range(6):
        xs = [torch.randn(4, 6) for _ in range(3)]
        for mod, fn in ((m, fast), (ref, ref)):
            mod.zero_grad()
            fn(xs[0]).square().mean().backward()
            y = fn(xs[1]).view(-1)
            (y - fn(xs[2]).view(-1)).square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert len(runners) == 2 and all(r.cg_stats["replays"] for r in runners)
    held = [r.cg_stats["held_plain_calls"] for r in runners]
    if copy_out == "swap":
        assert held == [0, 0]
    else:
        assert all(held) and all(r.copying for r in runners), held


def _mlp(x, w):
    return torch.relu(x @ w) * 0.5


def test_through_the_compiled_function_on_the_triton_interpreter(monkeypatch):
    """The whole path (frame, graph, Triton kernels interpreted, the runner on the simulated
    device): nothing between the runner and the caller keeps an output (a loop that drops its
    outputs copies none), and outputs kept across calls keep their values."""
    _interpreted()
    runners = _sim_runners(monkeypatch)
    fast = pydynamo.optimize(_mlp, backend="codegen", mode="reduce-overhead",
                             options={"backend_kernels": "triton"})
    w = torch.randn(8, 8)
    for _ in range(4):
        x = torch.randn(4, 8)
        torch.testing.assert_close(fast(x, w), _mlp(x, w))
    (run,) = runners
    assert run.cg_stats["replays"] == 3 and run.cg_stats["output_copies"] == 0
    xs = [torch.randn(4, 8) for _ in range(3)]
    kept = [fast(x, w) for x in xs]
    for k, x in zip(kept, xs):
        torch.testing.assert_close(k, _mlp(x, w))
    # the caller holds the very tensor objects the runner made: set_ moves them, no plain call
    assert run.cg_stats["output_copies"] == 2 and run.cg_stats["held_plain_calls"] == 0


def _sim_runners(monkeypatch):
    """The runners the codegen backend makes from now on, each on the simulated device."""
    from codegen.gpu_wrapper import TritonBackend
    runners = []

    def finish(self, call, gm, g, options, stats, ns):     # (on the CPU: wrapped all the same)
        runners.append(cgr.maybe_wrap(call, gm, g, options, stats, ns.get("matches")))
        runners[-1].device = Replayer()            # (every graph of these tests gets a runner)
        return runners[-1]
    monkeypatch.setattr(TritonBackend, "finish", finish)
    return runners


def _training(monkeypatch):
    """(runners made, model, its eager copy, the model compiled for reduce-overhead): on the
    Triton interpreter, each runner on the simulated device."""
    _interpreted()
    runners = _sim_runners(monkeypatch)
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(6, 8), nn.Tanh(), nn.Linear(8, 3))
    ref = copy.deepcopy(m)
    fast = pydynamo.optimize(m, backend="codegen", mode="reduce-overhead",
                             options={"backend_kernels": "triton"})
    return runners, m, ref, fast


def _interpreted():
    import os
    if os.environ.get("TRITON_INTERPRET") != "1":
        pytest.skip("needs TRITON_INTERPRET=1 (set before triton is imported)")


def test_training_through_the_runner_on_the_triton_interpreter(monkeypatch):
    """A training forward and backward through the runner (simulated device, held outputs
    copied out): gradients kept as .grad across backward replays and two forwards before one
    backward (a siamese loss) equal eager's."""
    runners, m, ref, fast = _training(monkeypatch)
    for step in range(8):
        x1, x2 = torch.randn(4, 6), torch.randn(4, 6)
        for mod, fn in ((m, fast), (ref, ref)):
            mod.zero_grad(set_to_none=False)
            if step % 2:
                (fn(x1) - fn(x2)).square().mean().backward()
            else:
                fn(x1).square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    assert len(runners) == 2 and all(r.cg_stats["replays"] for r in runners)
    assert runners[1].outputs == "copy_held"            # the backward
    # the activations autograd saved and the forward's outputs are the runner's own tensor
    # objects: without swapping, set_ moves them (versions kept), nothing runs plainly
    assert [r.cg_stats["held_plain_calls"] for r in runners] == [0, 0]
    assert runners[0].cg_stats["output_copies"] > 0


# --- on a GPU ---------------------------------------------------------------------------------

@cuda
def test_cuda_held_outputs_raise_with_the_clone_hint_and_latest_values_are_right():
    fast = pydynamo.optimize(_mlp, backend="codegen", mode="reduce-overhead")
    w = torch.randn(64, 64, device="cuda")
    xs = [torch.randn(32, 64, device="cuda") for _ in range(6)]
    for x in xs[:3]:                    # compile, warm-up, capture
        fast(x, w)
    before = codegen.counters["cudagraph_outputs_invalidated"]
    old = fast(xs[3], w)
    view = old[1:, :8]
    kept = old.clone()
    new = fast(xs[4], w)
    torch.testing.assert_close(new, _mlp(xs[4], w))
    torch.testing.assert_close(kept, _mlp(xs[3], w))
    if cgr.Device.invalidate is None:          # a torch without the storage access error
        torch.testing.assert_close(old, _mlp(xs[3], w))
        torch.testing.assert_close(view, _mlp(xs[3], w)[1:, :8])
    else:
        for stale in (old, view):
            with pytest.raises(RuntimeError, match=r"pydynamo.*\.clone\(\).*USER_GUIDE"):
                stale.sum().item()
        assert codegen.counters["cudagraph_outputs_invalidated"] == before + 1
    ptr = new.data_ptr()
    del new
    assert fast(xs[5], w).data_ptr() == ptr      # the graph's memory, no copy


@cuda
def test_cuda_outputs_of_a_marked_step_stay_valid(monkeypatch):
    monkeypatch.setattr(steps, "step", 0)
    fast = pydynamo.optimize(_mlp, backend="codegen", mode="reduce-overhead")
    w = torch.randn(64, 64, device="cuda")
    xs = [torch.randn(32, 64, device="cuda") for _ in range(4)]
    for _ in range(3):
        pydynamo.cudagraph_mark_step_begin()
        torch.testing.assert_close(fast(xs[0], w) + fast(xs[1], w),
                                   _mlp(xs[0], w) + _mlp(xs[1], w))
    pydynamo.cudagraph_mark_step_begin()
    old = fast(xs[2], w)
    pydynamo.cudagraph_mark_step_begin()
    torch.testing.assert_close(fast(xs[3], w), _mlp(xs[3], w))
    if cgr.Device.invalidate is not None:       # an output of an earlier step: overwritten
        with pytest.raises(RuntimeError, match="pydynamo"):
            old.sum().item()


@cuda
def test_cuda_copy_held_and_outputs_passed_back_in_keep_their_values():
    keep = pydynamo.optimize(_mlp, backend="codegen", mode="reduce-overhead",
                             options={"cudagraph_outputs": "copy_held"})
    w = torch.randn(64, 64, device="cuda") / 8
    xs = [torch.randn(64, 64, device="cuda") for _ in range(6)]
    outs = [keep(x, w) for x in xs]
    for o, x in zip(outs, xs):
        torch.testing.assert_close(o, _mlp(x, w))
    pydynamo.reset()

    def layer(x, w):
        return torch.tanh(x @ w) + x
    chain = pydynamo.optimize(layer, backend="codegen", mode="reduce-overhead")
    x = torch.randn(64, 64, device="cuda")
    for _ in range(5):                  # y = f(x); z = f(y) + y: y passed back in, read after
        y = chain(x, w)
        z = chain(y, w) + y
        torch.testing.assert_close(z, layer(layer(x, w), w) + layer(x, w))
        x = z / 4


@cuda
def test_cuda_a_view_of_an_output_passed_back_in_keeps_its_values():
    """`y = f(x); v = y[:, :8]; z = f(y)`: y is kept (passed back in); without swapping its view
    cannot follow it, so that call runs without the graph: `v` keeps its values, never
    raises."""
    def layer(x, w):
        return torch.tanh(x @ w) + x
    chain = pydynamo.optimize(layer, backend="codegen", mode="reduce-overhead")
    w = torch.randn(64, 64, device="cuda") / 8
    x = torch.randn(64, 64, device="cuda")
    for _ in range(5):
        y = chain(x, w)
        v = y[:, :8]
        z = chain(y, w)
        want = layer(x, w)
        torch.testing.assert_close(v, want[:, :8])
        torch.testing.assert_close(z, layer(want, w))
        x = z / 4


@cuda
def test_cuda_training_under_reduce_overhead_never_reads_stale_values(monkeypatch):
    """Gradients kept as .grad across backward replays (zero_grad without set_to_none) equal
    eager's; two forwards before one backward (a siamese loss) give eager's gradients: the
    codegen backend compiles a training forward with cudagraph_outputs="copy_held", so the
    activations autograd holds are copied out before the next replay, never invalidated."""
    torch.manual_seed(0)
    m = nn.Sequential(nn.Linear(16, 32), nn.GELU(), nn.Linear(32, 8)).cuda()
    ref = copy.deepcopy(m)
    fast = pydynamo.optimize(m, backend="codegen", mode="reduce-overhead")
    for _ in range(5):
        x = torch.randn(8, 16, device="cuda")
        for mod, fn in ((m, fast), (ref, ref)):
            mod.zero_grad(set_to_none=False)
            fn(x).square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    for _ in range(3):
        x1, x2 = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
        m.zero_grad()
        ref.zero_grad()
        (fast(x1) - fast(x2)).square().mean().backward()
        (ref(x1) - ref(x2)).square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)
    monkeypatch.setattr(steps, "step", 0)
    for _ in range(3):                  # with marked steps: both forwards' outputs stay valid
        x1, x2 = torch.randn(8, 16, device="cuda"), torch.randn(8, 16, device="cuda")
        for mod, fn in ((m, fast), (ref, ref)):
            mod.zero_grad()
            pydynamo.cudagraph_mark_step_begin()
            (fn(x1) - fn(x2)).square().mean().backward()
        for p, q in zip(m.parameters(), ref.parameters()):
            torch.testing.assert_close(p.grad, q.grad)

"""The training runtime's contract (pydynamo/aot/): what eager does around a compiled backward.

Double backward raises a clear error (never a silently zero second derivative), retain_graph
works, a graph that makes a leaf runs with eager autograd, no_grad takes the inference path,
graph breaks chain one Function per graph, dynamic sizes record a joint per size, the partition
recomputes a cheap chain instead of saving it, and PYDYNAMO_LOGS=aot shows the three graphs with
the user's line on backward nodes.
"""
import copy
import logging
import warnings

import pytest
import torch

import pydynamo
from pydynamo import aot
from pydynamo.aot.partition import nbytes, partition
from pydynamo.aot.recorder import record

BACKENDS = ["aot_eager", "codegen"]


pytestmark = pytest.mark.usefixtures("fresh_aot")


def _mlp(x, w):
    return ((x @ w).tanh() * 3).sum(-1)


@pytest.mark.parametrize("backend", BACKENDS)
def test_grads_equal_eager_and_backward_is_compiled(backend):
    torch.manual_seed(0)
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    out = pydynamo.optimize(_mlp, backend=backend)(x, w)
    out.sum().backward()
    _mlp(x2, w2).sum().backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    assert aot.counters["joint_graphs"] == 1 and aot.counters["backward_compiled"] == 1
    assert aot.counters["eager_fallback"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_double_backward_is_a_clear_error(backend):
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    out = pydynamo.optimize(_mlp, backend=backend)(x, w)
    with pytest.raises(RuntimeError, match="create_graph=True"):
        torch.autograd.grad(out.sum(), x, create_graph=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_retain_graph_runs_the_backward_twice(backend):
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    out = pydynamo.optimize(_mlp, backend=backend)(x, w)
    out.sum().backward(retain_graph=True)
    once = x.grad.clone()
    out.sum().backward()
    torch.testing.assert_close(x.grad, 2 * once)
    assert aot.counters["backward_calls"] == 2 and aot.counters["backward_compiled"] == 1


def test_a_leaf_made_in_the_graph_runs_with_eager_autograd():
    def f(a):
        b = a.detach() * 2
        b.requires_grad_()
        return (b * a).sum(), b
    x = torch.randn(3, requires_grad=True)
    with pytest.warns(UserWarning, match="requires_grad_"):
        r, b = pydynamo.optimize(f, backend="aot_eager")(x)
    r.backward()
    assert b.is_leaf and b.grad is not None
    torch.testing.assert_close(b.grad, x.detach())
    torch.testing.assert_close(x.grad, 2 * x.detach())
    assert aot.counters["eager_fallback"] == 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_no_grad_takes_the_inference_path(backend):
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    with torch.no_grad():
        out = pydynamo.optimize(_mlp, backend=backend)(x, w)
    assert not out.requires_grad
    torch.testing.assert_close(out, _mlp(x, w).detach())
    assert aot.counters["joint_graphs"] == 0


@pytest.mark.parametrize("backend", BACKENDS)
def test_graph_breaks_chain_one_function_per_graph(backend):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 4))
    m2 = copy.deepcopy(m)

    def f(mod, x):
        y = mod(x)
        pydynamo.graph_break()
        return (y * y).sum(-1)
    out = pydynamo.optimize(f, backend=backend)(m, torch.ones(3, 8) * 0.5)
    out.sum().backward()
    f(m2, torch.ones(3, 8) * 0.5).sum().backward()
    for p, q in zip(m.parameters(), m2.parameters()):
        torch.testing.assert_close(p.grad, q.grad)
    assert aot.counters["joint_graphs"] == 2 and aot.counters["backward_compiled"] == 2


@pytest.mark.parametrize("backend", BACKENDS)
def test_dynamic_sizes_record_one_joint(backend):
    """A graph with symbolic sizes is recorded once over its size symbols and its backward
    compiled once (tests/aot/test_dynamic_joint.py has models and compile counts)."""
    torch.manual_seed(0)
    w = torch.randn(8, 4, requires_grad=True)
    f = pydynamo.optimize(lambda x, w: (x @ w).sigmoid().sum(0), backend=backend, dynamic=True)
    for n in (3, 5, 3, 7):
        x = torch.randn(n, 8)
        w.grad = None
        f(x, w).sum().backward()
        want = torch.autograd.grad((x @ w).sigmoid().sum(), w)[0]
        torch.testing.assert_close(w.grad, want)
    assert aot.counters["joint_graphs"] == 1
    assert aot.counters["joint_recompiles"] == 0 and aot.counters["backward_compiled"] == 1


def test_partition_recomputes_a_cheap_chain_instead_of_saving_it():
    """sin(gelu(y) * 3) with y = x @ w: the backward needs gelu(y) * 3 (for sin') and y (for
    gelu'); y is saved anyway, so the pointwise chain is recomputed from it."""
    def f(x, w):
        return ((torch.nn.functional.gelu(x @ w) * 3).sin(),)
    x, w = torch.randn(16, 32, requires_grad=True), torch.randn(32, 64, requires_grad=True)
    gm = torch.fx.symbolic_trace(f)
    joint = record(gm, [x, w])
    fw, bw, saved, positions, recompute = partition(joint.gm, len(joint.computed),
                                                    joint.num_tangents, joint.num_inputs)
    names = {str(n.target) for n in saved}
    assert "aten.mm.default" in names                        # the expensive result is saved
    assert not names & {"aten.gelu.default", "aten.mul.Tensor"}   # the cheap chain is not
    assert recompute
    # against saving every forward value the backward reads
    saved_all = {a for n in joint.gm.graph.nodes if n.op == "call_function"
                 and any(str(t.name).startswith("tangent") for t in _ancestors(n))
                 for a in n.all_input_nodes if a.op != "placeholder" and not any(
                     str(t.name).startswith("tangent") for t in _ancestors(a) | {a})}
    kept = sum(nbytes(n) for n in saved if n.op != "placeholder")
    assert kept < sum(nbytes(n) for n in saved_all)
    # and the split graphs still give eager's gradients: aot_eager bit for bit (the same aten
    # ops, recomputed); codegen's own gelu/sin round differently in the last bit, so it is held
    # to eager's own error against float64 (a 64-term matmul in the chain cancels)
    x64, w64 = x.detach().double().requires_grad_(), w.detach().double().requires_grad_()
    exact = torch.autograd.grad(f(x64, w64)[0].sum(), (x64, w64))
    eager = torch.autograd.grad(f(x, w)[0].sum(), (x, w))
    for backend in BACKENDS:
        pydynamo.reset()
        xg, wg = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
        pydynamo.optimize(f, backend=backend)(xg, wg)[0].sum().backward()
        for got, want, ref in zip((xg.grad, wg.grad), eager, exact):
            if backend == "aot_eager":
                assert torch.equal(got, want)
            else:
                assert (got.double() - ref).abs().max() <= 2 * (want.double() - ref).abs().max() + 1e-6


def _ancestors(node):
    seen, stack = set(), [node]
    while stack:
        n = stack.pop()
        if n not in seen:
            seen.add(n)
            stack.extend(n.all_input_nodes)
    return seen


def test_aot_log_prints_the_three_graphs_with_user_lines(caplog):
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 3, requires_grad=True)
    # earlier tests' joints may still be alive (gc order varies: CI on 3.12 read another
    # test's joint first): only this test's joints count. `earlier` holds them, so none is
    # freed during the call and its id taken by this test's joint
    earlier = _compiled_joints()
    earlier_ids = {id(c) for c in earlier}
    with caplog.at_level(logging.DEBUG, logger="pydynamo.aot"):
        out = pydynamo.optimize(_mlp, backend="aot_eager")(x, w)
    text = "\n".join(r.getMessage() for r in caplog.records)
    assert "joint graph" in text and "forward graph" in text and "backward graph" in text
    assert "tanh_backward" in text
    bw = out.grad_fn   # the Function's backward graph nodes carry the forward op's user line
    lines = [n.meta.get("stack_trace") or "" for c in _compiled_joints() if id(c) not in earlier_ids
             for n in c.bw_gm.graph.nodes
             if n.op == "call_function" and "tanh_backward" in str(n.target)]
    assert lines and "test_runtime.py" in lines[0] and "_mlp" in lines[0], lines
    assert bw is not None


def _compiled_joints():
    import gc
    out = []
    for o in gc.get_objects():
        try:
            if isinstance(o, aot.runtime.CompiledJoint):
                out.append(o)
        except ReferenceError:        # a dead weak proxy among the objects
            pass
    return out


def test_inputs_sharing_storage_with_a_written_input_run_eagerly():
    def f(a, b):
        a.mul_(2)
        return a + b
    base = torch.randn(6, requires_grad=True)
    g = pydynamo.optimize(f, backend="aot_eager")
    x, y = base * 1, torch.randn(6)
    out = g(x, y)                       # compiled with distinct inputs
    z = base * 1
    got = g(z, z)                       # the same tensor twice: the recorded graph assumed not
    z2 = base * 1
    want = f(z2, z2)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(z, z2)
    assert out.requires_grad


@pytest.mark.parametrize("backend", BACKENDS)
def test_write_through_a_view_of_an_input_that_starts_at_an_offset(backend):
    """Fuzz seed 13 (dynamic=True): `x0.diagonal().zero_()` on a bool input that is a slice
    (storage offset 4) in a graph whose module parameters require grad. The storage's flat value
    must be a new tensor: as_strided_scatter counts offsets in its argument's storage (and
    codegen must not fold that copy into the input)."""
    conv = torch.nn.Conv2d(3, 4, 3, padding=1)

    def f(x0, x5):
        x0.diagonal(0, -2, -1).zero_()
        return conv(x5)

    def make(n):
        torch.manual_seed(n)
        return (torch.rand(n, 2, 2) > 0.3)[1:], torch.randn(n, 3, 3, 3)[1:]
    g = pydynamo.optimize(f, backend=backend, dynamic=True)
    for n in (4, 5, 4):
        (got, x5), (want, _) = make(n), make(n)
        torch.testing.assert_close(g(got, x5), f(want, x5))
        assert torch.equal(got, want)
    assert aot.counters["joint_graphs"] >= 1      # the training path was taken


def test_a_view_of_a_written_input_sees_the_write_with_symbolic_sizes():
    """Fuzz seed 20089 (codegen, dynamic): after a break, `x0.mul_(2)` then a returned view of
    x0 (unsqueeze/expand/unbind/flatten) came back with the value from before the write under
    codegen's own write-backs over symbolic sizes. Graphs that write in place are recorded
    (functionalized) per size now."""
    def f(x0):
        x0.mul_(2)
        v3 = x0.unsqueeze(0).expand(5, *x0.shape)
        return x0, v3.unbind(1)[0].flatten(1)
    g = pydynamo.optimize(f, backend="codegen", dynamic=True)
    for shape in ((3, 4, 5), (2, 6, 7), (3, 4, 5)):
        torch.manual_seed(sum(shape))
        x = torch.randn(*shape)
        a, b = x.clone(), x.clone()
        got, want = g(a), f(b)
        for o, w in zip(got, want):
            torch.testing.assert_close(o, w)
        assert got[0] is a and got[1]._base is not None
        torch.testing.assert_close(a, b)
    assert aot.counters["functional_graphs"] >= 1


def test_saved_activations_are_freed_as_the_compiled_backward_goes():
    """codegen's backward takes the saved values as one list it empties and drops each at its
    last use (Options.boxed), and the Function drops its own references first: by the backward's
    last matmul no activation saved for the layers after it is alive (before: all of them until
    the backward returned, so a deep model's peak held every activation and every grad)."""
    import weakref
    from torch.utils._python_dispatch import TorchDispatchMode

    def f(x, w1, w2, w3):
        h1 = (x @ w1).tanh()
        h2 = (h1 @ w2).tanh()
        return (h2 @ w3).sum()
    args = [torch.randn(32, 64, requires_grad=True)] + \
        [torch.randn(64, 64, requires_grad=True) for _ in range(3)]
    compiled = pydynamo.optimize(f, backend="codegen")
    compiled(*args).backward()
    refs = []

    def pack(t):
        refs.append(weakref.ref(t))
        return t
    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = compiled(*args)
    alive = []

    class Watch(TorchDispatchMode):
        def __torch_dispatch__(self, func, types, a=(), kw=None):
            # (the C++ wrapper may write a product into a reused buffer: mm's out= overload)
            if func in (torch.ops.aten.mm.default, torch.ops.aten.mm.out):
                alive.append(sum(r() is not None for r in refs))
            return func(*a, **(kw or {}))
    for a in args:
        a.grad = None
    with Watch():
        loss.backward()
    assert len(alive) == 6 and alive[0] > alive[-1] == 0, alive
    want = torch.autograd.grad(f(*args), args)
    for a, g in zip(args, want):      # (codegen's tanh rounds apart from eager's in the last bit)
        torch.testing.assert_close(a.grad, g, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("backend", BACKENDS)
def test_retain_graph_keeps_saved_values_for_a_second_backward(backend):
    def f(x, w1, w2):
        return ((x @ w1).tanh() @ w2).sum()
    args = [torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True),
            torch.randn(16, 4, requires_grad=True)]
    loss = pydynamo.optimize(f, backend=backend)(*args)
    first = torch.autograd.grad(loss, args, retain_graph=True)
    second = torch.autograd.grad(loss, args)
    want = torch.autograd.grad(f(*args), args)
    for a, b, c in zip(first, second, want):
        torch.testing.assert_close(a, c)
        torch.testing.assert_close(b, c)
    with pytest.raises(RuntimeError, match="second time|freed"):
        torch.autograd.grad(loss, args)


@pytest.mark.parametrize("backend", BACKENDS)
def test_saved_tensor_hooks_around_a_compiled_call_see_only_real_tensors(backend):
    """Regression (found measuring saved bytes with a pack hook): a user's saved_tensors_hooks
    around a compiled training call were called on tracing's meta examples and the recorder's
    stand-ins: a hook reading data raised at every op (a graph break each, the graph then ran
    eagerly) and the hook's own frame was traced. They see the compiled Function's real saved
    tensors only, and an offloading hook (pack copies, unpack returns the copy) keeps the grads."""
    def f(x, w1, w2):
        return ((x @ w1).tanh() @ w2).sum()
    args = [torch.randn(8, 16, requires_grad=True), torch.randn(16, 16, requires_grad=True),
            torch.randn(16, 4, requires_grad=True)]
    seen = []

    def pack(t):
        seen.append((t.device.type, t.untyped_storage().data_ptr() != 0))
        return t.detach().clone()
    compiled = pydynamo.optimize(f, backend=backend)
    with warnings.catch_warnings():
        warnings.simplefilter("error")         # no graph break, no eager fallback
        with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
            loss = compiled(*args)
        grads = torch.autograd.grad(loss, args)
    assert seen and all(d == "cpu" and real for d, real in seen), seen
    assert aot.counters["joint_graphs"] == 1 and aot.counters["backward_compiled"] == 1
    for g, want in zip(grads, torch.autograd.grad(f(*args), args)):
        torch.testing.assert_close(g, want, rtol=1e-4, atol=1e-4)


def _with_cache(x, w):
    h = torch.tanh(x @ w)
    return h.sum(), h * 3 + 1, h          # a loss, a "cache" beside it, and an activation


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("reached", [(0,), (1,), (0, 1), (2,)])
def test_outputs_the_loss_does_not_reach_get_no_zeros_buffer(backend, reached):
    """A key/value cache or logits returned beside the loss get no gradient: the Function does
    not materialize an output-sized tensor of zeros for them (GPT-2 small's fp32 step held 144
    MiB of such zeros at its peak); a backward variant fills those tangents inside its graph.
    Grads equal eager's for every subset of outputs the loss reaches."""
    torch.manual_seed(0)
    x, w = torch.randn(4, 5, requires_grad=True), torch.randn(5, 6, requires_grad=True)
    x2, w2 = x.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    weights = [torch.randn(()), torch.randn(4, 6), torch.randn(4, 6)]
    run = pydynamo.optimize(_with_cache, backend=backend)

    def loss(outs):
        return sum((outs[k] * weights[k]).sum() for k in reached)
    loss(run(x, w)).backward()
    loss(_with_cache(x2, w2)).backward()
    torch.testing.assert_close(x.grad, x2.grad)
    torch.testing.assert_close(w.grad, w2.grad)
    absent = tuple(k for k in range(3) if k not in reached)
    # the variant for these absent tangents was compiled (the engine passed None, not zeros)
    assert aot.counters["backward_zero_tangents"] == (1 if absent else 0)


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_reshaped_output_is_a_view_whose_backward_reshapes(backend):
    """A returned view of a computed base (transformers' logits: a [batch * seq, vocab] product
    viewed as [batch, seq, vocab]) was rebuilt with as_strided, whose backward scatters the
    gradient into zeros of the base's size: a fill and a copy of the whole logits per step.
    As `view` it is eager's ViewBackward; values, `_base` sharing and gradients as eager's."""
    def f(h, w):
        logits = h @ w
        return logits.view(2, 3, 7), logits.t()
    torch.manual_seed(0)
    h, w = torch.randn(6, 4, requires_grad=True), torch.randn(4, 7, requires_grad=True)
    want = f(h, w)
    hc, wc = h.detach().clone().requires_grad_(), w.detach().clone().requires_grad_()
    got = pydynamo.optimize(f, backend=backend)(hc, wc)
    assert type(got[0].grad_fn).__name__ == type(want[0].grad_fn).__name__ == "ViewBackward0"
    assert got[0]._base is not None and got[0].untyped_storage().data_ptr() == \
        got[1].untyped_storage().data_ptr()
    (got[0].sin().sum() + got[1].cos().sum()).backward()
    gh, gw = torch.autograd.grad(want[0].sin().sum() + want[1].cos().sum(), (h, w))
    torch.testing.assert_close(hc.grad, gh)
    torch.testing.assert_close(wc.grad, gw)

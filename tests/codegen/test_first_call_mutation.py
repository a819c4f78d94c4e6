"""The backend never runs the user's tensors through anything but the compiled code.

Regression tests for issue 14 item 1: a graph without metadata was shape-propagated on the
user's real tensors, so every in-place op in it ran twice on the first call. Each test calls
the compiled function exactly as a user does: on the SAME tensors it was compiled for, first
call included, and compares the mutated inputs with eager's.
"""
import warnings

import pytest
import torch
import torch.fx

import codegen
import pydynamo


@pytest.fixture(autouse=True)
def _compile_afresh():
    """No test reuses a cache entry an earlier one compiled."""
    pydynamo.reset()
    torch.manual_seed(0)


def _calls(fn, make_args, n=3, **opts):
    """Eager and compiled on twin argument sets, n calls each on the SAME tensors: returns,
    then the arguments' values after every call, must match exactly."""
    ref_args = make_args()
    args = [a.clone() if isinstance(a, torch.Tensor) else a for a in ref_args]
    compiled = pydynamo.optimize(fn, **opts)
    for i in range(n):
        ref = fn(*ref_args)
        out = compiled(*args)
        torch.testing.assert_close(out, ref, rtol=0, atol=0, msg=lambda m: f"call {i}: {m}")
        for a, r in zip(args, ref_args):
            if isinstance(a, torch.Tensor):
                torch.testing.assert_close(a, r, rtol=0, atol=0,
                                           msg=lambda m: f"input after call {i}: {m}")


@pytest.mark.parametrize("dynamic", [None, True, False])
def test_inplace_add_on_input_applied_once_on_first_call(dynamic):
    def f(x):
        x.add_(1)
        return x
    _calls(f, lambda: (torch.randn(8),), dynamic=dynamic)


def test_inplace_chain_mul_add_applied_once_on_first_call():
    _calls(lambda x: x.mul_(2).add_(1), lambda: (torch.randn(5, 3),))


def test_sgd_step_moves_by_lr_once():
    def step(p, g, lr: float = 0.1):
        p.add_(g, alpha=-lr)
        return p
    _calls(step, lambda: (torch.randn(16), torch.randn(16)))


def test_buffer_counter_increments_once_per_call():
    class M(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.register_buffer("count", torch.zeros((), dtype=torch.int64))

        def forward(self, x):
            self.count += 1
            return x * self.count
    m_ref, m = M(), M()
    g = pydynamo.optimize(m)
    x = torch.randn(4)
    for _ in range(3):
        torch.testing.assert_close(g(x), m_ref(x), rtol=0, atol=0)
    assert int(m.count) == 3 and int(m_ref.count) == 3


def test_inplace_across_graph_break_applied_once_per_graph():
    def f(x):
        x.add_(1)
        pydynamo.graph_break()
        x.mul_(2)
        return x
    _calls(f, lambda: (torch.randn(6),))


def test_raise_after_mutation_leaves_input_as_eager_does():
    def f(x):
        x.add_(1)
        pydynamo.graph_break()
        raise ValueError("after the mutation")
    x_ref, x = torch.randn(4), None
    x = x_ref.clone()
    with pytest.raises(ValueError):
        f(x_ref)
    with pytest.raises(ValueError):
        pydynamo.optimize(f)(x)
    torch.testing.assert_close(x, x_ref, rtol=0, atol=0)


def test_bare_fx_graph_inplace_first_call():
    """A foreign graph (symbolic_trace: no metadata) handed straight to compile_fx."""
    def f(x, y):
        x.add_(y)
        return x * 2
    gm = torch.fx.symbolic_trace(f)
    x, y = torch.randn(3, 4), torch.randn(3, 4)
    x_ref = x.clone()
    compiled = codegen.compile_fx(gm, [x, y])
    out = compiled(x, y)
    ref = f(x_ref, y)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(x, x_ref, rtol=0, atol=0)


def test_bare_fx_graph_metadata_from_copies_keeps_rng_and_inputs():
    """Ops that cannot run on meta (data-dependent sizes: nonzero) take copies of the
    inputs; neither the inputs nor the random stream may change."""
    def f(x):
        x.mul_(3)
        return torch.nonzero(x > 0), torch.rand_like(x)
    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(10)
    x_ref = x.clone()
    torch.manual_seed(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = codegen.compile_fx(gm, [x])
    torch.testing.assert_close(x, x_ref, rtol=0, atol=0)     # compiling touched nothing
    torch.manual_seed(1)
    ref = f(x_ref)
    torch.manual_seed(1)
    out = compiled(x)
    torch.testing.assert_close(out, ref, rtol=0, atol=0)
    torch.testing.assert_close(x, x_ref, rtol=0, atol=0)


def test_executor_records_metadata_on_inplace_nodes():
    seen = []

    def backend(gm, example_inputs):
        seen.extend(n for n in gm.graph.nodes if n.op.startswith("call"))
        return gm
    pydynamo.optimize(lambda x: x.add_(1).mul_(2), backend=backend)(torch.randn(3))
    assert seen and all("val" in n.meta and "tensor_meta" in n.meta for n in seen), \
        [(n.name, list(n.meta)) for n in seen]

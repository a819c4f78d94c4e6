"""Symbolic ints as executor values (issue 6): sizes read from tensors, Python arithmetic on them,
comparisons recorded as guards, loops and factories over symbolic bounds, int()/bool().

Each function runs under dynamic=True over several sizes: outputs equal eager on random inputs,
one graph serves every size the guards admit (the graph reads sizes through int placeholders),
and the guards recorded are the readable relations the decisions made.
"""
import operator

import pytest
import torch

import pydynamo


def run_sizes(rec, fn, shapes, make=torch.randn, dynamic=True):
    """fn over inputs of each shape (a tuple of shapes per call): outputs compared with eager."""
    opt = pydynamo.optimize(fn, backend=rec, dynamic=dynamic)
    for call in shapes:
        args = [make(*s) if isinstance(s, tuple) else s for s in call]
        got, want = opt(*args), fn(*args)
        torch.testing.assert_close(got, want)
    return opt


def test_shape_size_numel_flow_into_the_graph(rec):
    def fn(x):
        return x * x.shape[0] + x.size(1) - x.numel() / x.size(-1)
    run_sizes(rec, fn, [((3, 4),), ((5, 4),), ((6, 7),)])
    assert rec.count == 1
    assert rec.int_inputs(0) == [3, 4]   # one placeholder per size symbol, hints as examples
    assert rec.shape_guards(0) == ["L['x'].stride()[0] == L['x'].size()[1]",
                                   "2 <= L['x'].size()[0]", "2 <= L['x'].size()[1]"]


@pytest.mark.parametrize("op", [operator.add, operator.sub, operator.mul, operator.floordiv,
                                operator.mod, operator.pow, min, max])
def test_arithmetic_on_sizes_is_symbolic(rec, op):
    def fn(x, y):
        v = op(x.shape[0], y.shape[0])
        return x.sum() * v, v
    run_sizes(rec, fn, [((5,), (3,)), ((7,), (2,)), ((4,), (6,)), ((9,), (4,))])
    assert rec.count == 1, [f.guards for f in rec.frames]
    # no decision was taken on the values: only the sizes' ranges are guarded
    assert rec.shape_guards(0) == ["2 <= L['x'].size()[0]", "2 <= L['y'].size()[0]"]


def test_a_size_returned_is_recomputed_from_the_inputs(rec):
    def fn(x):
        return x.shape[0] * 2 + 1, x.shape
    opt = pydynamo.optimize(fn, backend=rec, dynamic=True)
    for n in (3, 8, 11):
        assert opt(torch.randn(n, 2)) == (2 * n + 1, torch.Size([n, 2]))
    assert len(rec.frames) == 1


@pytest.mark.parametrize("rel, text", [
    (lambda n, m: n > m, "L['x'].size()[0] > L['y'].size()[0]"),
    (lambda n, m: n * 2 <= m + 3, "2*L['x'].size()[0] > 3 + L['y'].size()[0]"),
    (lambda n, m: n % 2 == 0, "(L['x'].size()[0] % 2) == 0"),
])
def test_comparisons_are_decided_on_hints_and_guarded(rec, rel, text):
    def fn(x, y):
        return x + 1 if rel(x.shape[0], y.shape[0]) else x - 1
    # 6 vs 3 decides the comparison one way; the next call keeps it, the last flips it
    run_sizes(rec, fn, [((6,), (3,)), ((8,), (4,)), ((3,), (9,))])
    assert len(rec.frames) == 2
    assert rec.shape_guards(0)[0] == text
    assert len(rec.recompiles) == 1 and text in str(rec.recompiles[0])


def test_range_over_a_symbolic_bound_specializes_it(rec):
    def fn(x):
        for i in range(x.shape[0] // 4):
            x = x + i
        return x
    run_sizes(rec, fn, [((8,),), ((9,),), ((11,),), ((12,),)])
    # the loop count is pinned (guarded) while the tensor's size stays symbolic: 2 graphs, as
    # torch.compile(dynamic=True) compiles on these sizes
    assert len(rec.frames) == 2
    assert rec.shape_guards(0) == ["(L['x'].size()[0]//4) == 2", "2 <= L['x'].size()[0]"]
    assert rec.int_inputs(0) == []


def test_views_and_factories_take_symbolic_sizes(rec):
    def fn(x, y):
        n, m = x.shape
        a = x.view(n * m).reshape(m, n).t()
        b = y.expand(n, -1) + x.new_zeros(n, m) + torch.zeros(n, m) + torch.full((n, m), 0.5)
        c = torch.arange(n)[:, None] * torch.ones(m)
        return a + b + c
    run_sizes(rec, fn, [((3, 4), (1, 4)), ((5, 4), (1, 4)), ((6, 9), (1, 9))])
    assert rec.count == 1
    g = rec.graphs[0].code
    for call in ("view(", "reshape(", "expand(", "new_zeros(", "torch.zeros(", "torch.full(", "torch.arange("):
        assert call in g, (call, g)


def test_slicing_with_symbolic_bounds(rec):
    def fn(x):
        n = x.shape[0]
        h = n // 2
        return x[1:n - 1] .sum() + x[:h] @ x[h:2 * h] + x[-h:].sum()
    run_sizes(rec, fn, [((6,),), ((8,),), ((11,),), ((30,),)])
    assert rec.count == 1


def test_int_and_bool_of_symbolic_values(rec):
    def fn(x):
        n = int(x.shape[0] * 3)       # stays symbolic (torch.compile's sym_int): no guard
        k = int(x.shape[0] / 2)       # truncation of n / 2: symbolic n // 2, no guard
        if bool(x.shape[0] - 2):      # a decision: taken on the hint, guarded
            return x * n + k
        return x
    run_sizes(rec, fn, [((4,),), ((5,),), ((6,),), ((2,),)])
    # torch.compile(dynamic=True) on the same sizes: 2 graphs
    assert len(rec.frames) == 2
    assert rec.shape_guards(0) == ["L['x'].size()[0] != 2", "2 <= L['x'].size()[0]"]
    assert rec.int_inputs(0) == [4]
    assert "floordiv" in rec.graphs[0].code


def test_bool_of_a_size_as_a_value_stays_symbolic(rec):
    def fn(x):
        return x + bool(x.shape[0] - 2)
    run_sizes(rec, fn, [((4,),), ((5,),), ((6,),), ((2,),)])
    assert len(rec.frames) == 1
    # the truth value is computed in the graph from the size placeholder; nothing was decided
    assert "!= 2" in rec.graphs[0].code, rec.graphs[0].code
    assert rec.shape_guards(0) == ["2 <= L['x'].size()[0]"]


def _torch_compile_count(fn, sizes, dynamic):
    """Graphs torch.compile (the reference) compiles for fn over inputs of these sizes."""
    import torch._dynamo
    torch._dynamo.reset()
    graphs = []

    def counting(gm, example_inputs):
        graphs.append(gm)
        return gm.forward
    opt = torch.compile(fn, backend=counting, dynamic=dynamic)
    for n in sizes:
        opt(torch.randn(n))
    torch._dynamo.reset()
    return len(graphs)


def _bool_added(x):
    return x + bool(x.shape[0] - 2)


def _bool_returned(x):
    b = bool(x.shape[0] - 2)
    return x * b, b


def _bool_in_arithmetic(x):       # a number is needed: decided on the hint and guarded
    return x * (bool(x.shape[0] - 3) + 1)


def _bool_as_fill_value(x):
    return torch.full((2,), bool(x.shape[0] - 2)) + x.sum()


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "automatic"])
@pytest.mark.parametrize("fn", [_bool_added, _bool_returned, _bool_in_arithmetic, _bool_as_fill_value])
@pytest.mark.parametrize("sizes", [(4, 5, 6, 2), (4, 5, 6, 3)], ids=["to2", "to3"])
def test_bool_of_a_size_compiles_as_often_as_torch_compile(rec, fn, dynamic, sizes):
    run_sizes(rec, fn, [((n,),) for n in sizes], dynamic=dynamic)
    assert rec.count == _torch_compile_count(fn, sizes, dynamic)


def test_branching_on_a_stored_bool_of_a_size_still_decides_and_guards(rec):
    def fn(x):
        b = bool(x.shape[0] - 2)      # symbolic value...
        y = x * b
        if b:                         # ...decided here, on the hint, with a guard
            return y + 1
        return y - 1
    run_sizes(rec, fn, [((4,),), ((5,),), ((2,),)])
    assert len(rec.frames) == 2       # torch.compile(dynamic=True): 2
    assert "L['x'].size()[0] != 2" in rec.shape_guards(0)


def test_bool_of_a_size_under_the_codegen_backend_is_never_wrong():
    """codegen has no per-call booleans in kernels: the graph with the truth value runs eagerly
    (one warning), and one compile still serves every size, the boolean flipping included."""
    import warnings
    pydynamo.reset()
    frames = []
    from pydynamo import convert_frame
    convert_frame.RECORDERS.append(frames.append)
    try:
        opt = pydynamo.optimize(_bool_added, backend="codegen", dynamic=True)
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for n in (4, 5, 2, 6, 2):
                x = torch.randn(n)
                got, want = opt(x), _bool_added(x)
                torch.testing.assert_close(got, want)
                assert got.dtype == want.dtype
    finally:
        convert_frame.RECORDERS.remove(frames.append)
        pydynamo.reset()
    assert len([f for f in frames if hasattr(f, "graphs")]) == 1
    assert any("symbolic truth value" in str(m.message) for m in w), [str(m.message) for m in w]


def test_symbolic_and_is_not_in_place(rec):
    """`a & b` (operator.and_, named like an in-place op) must produce a new value: a mask built
    by broadcasting index tensors over symbolic sizes (transformers' causal masks)."""
    def fn(x):
        b, q = x.shape
        bi = torch.arange(b)[:, None, None]
        qi = torch.arange(q)[None, :, None]
        ki = torch.arange(q)[None, None, :]
        m = (x[bi, qi] == x[bi, ki]) & (qi >= ki)
        return m.expand(b, q, q).float() + 1
    run_sizes(rec, fn, [((2, 16),), ((3, 17),), ((2, 5),)], make=lambda *s: torch.randint(0, 3, s).float())
    assert rec.count == 1


def test_named_tuple_results_keep_their_fields(rec):
    def fn(x):
        return x.cumsum(0).max(dim=1).values + x.min(0).indices.float().sum()
    run_sizes(rec, fn, [((3, 4),), ((5, 4),), ((5, 6),)])
    assert rec.count == 1


def test_chunk_and_split_of_a_symbolic_dim(rec):
    def fn(x):
        a, b = x.chunk(2, dim=-1)
        c, d = x.split([x.shape[0] // 2, x.shape[0] - x.shape[0] // 2], dim=0)
        return (a * b).sum() + c.sum() - d.sum()
    run_sizes(rec, fn, [((4, 6),), ((6, 8),), ((7, 12),)])
    assert rec.count == 1

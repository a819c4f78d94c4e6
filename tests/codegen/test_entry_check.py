"""A generated wrapper checks all its tensor inputs in one call (codegen/runtime.py entry_check:
the C++ tensor check's `entry`, or the same predicate as straight-line Python where it is not
built), and allocates through one bound allocator per dtype (`_empty_<dtype>`).

The two predicates agree on every case below; a call whose inputs differ from the compiled ones
runs eagerly (counted), one that needs autograd takes the eager grad path, and the answers
equal eager's."""
import pytest
import torch

import codegen
from codegen import runtime
from pydynamo import tensor_check

F32, I64 = torch.float32, torch.int64
ROWS = ((F32, "cpu", (4, 6), (6, 1)), (I64, "cpu", (None, None), (None, None)))

CASES = [   # (tensors, grad flag, expected)
    ((torch.randn(4, 6), torch.zeros(3, 5, dtype=I64)), 1, -1),
    ((torch.randn(4, 6), torch.zeros(7, 1, dtype=I64)), 0, -1),          # symbolic: any sizes
    ((torch.randn(6, 4).t(), torch.zeros(3, 5, dtype=I64)), 1, 0),        # strides
    ((torch.randn(4, 7)[:, :6], torch.zeros(3, 5, dtype=I64)), 1, 0),    # a row stride of 7
    ((torch.randn(4, 6, dtype=torch.float64), torch.zeros(3, 5, dtype=I64)), 1, 0),   # dtype
    ((torch.randn(4, 6), torch.zeros(3, dtype=I64)), 1, 1),               # rank
    ((torch.randn(4, 6), torch.zeros(3, 5, dtype=torch.int32)), 1, 1),
    ((torch.randn(4, 6), 3), 1, 1),                                       # not a tensor
    ((torch.randn(4, 6, requires_grad=True), torch.zeros(3, 5, dtype=I64)), 1, -2),
    ((torch.randn(4, 6, requires_grad=True), torch.zeros(3, 5, dtype=I64)), 0, -1),
    ((torch.randn(4, 6), torch.zeros(3, 5, dtype=I64)), 2, -2),          # parameters need grad
    ((torch.nn.Parameter(torch.randn(4, 6)), torch.zeros(3, 5, dtype=I64)), 0, -1),   # a subclass
]


def _predicates():
    out = [("python", runtime._python_entry, runtime._python_specs)]
    mod = tensor_check.module()
    if mod is not None:
        out.append(("c++",) + runtime.entry_check())
    return out


@pytest.mark.parametrize("case", range(len(CASES)))
def test_the_batched_entry_check_is_the_wrappers_predicate(case):
    tensors, grad, want = CASES[case]
    for name, entry, make in _predicates():
        assert entry(tensors, make(ROWS), grad) == want, name
        with torch.no_grad():      # grad mode off: never the autograd path
            assert entry(tensors, make(ROWS), grad) == (-1 if want == -2 else want), name


def test_the_cpp_entry_check_is_built_here():
    """CI's machines have a compiler: the fast predicate is the one wrappers take there."""
    assert tensor_check.module() is not None
    assert runtime.entry_check()[0] is tensor_check.module().entry


def _compiled(fn, *args):
    gm = torch.fx.symbolic_trace(fn)
    call = codegen.compile_fx(gm, list(args), strict=True)
    with open(call.wrapper_path) as f:
        return call, f.read()


def test_a_wrapper_checks_its_inputs_in_one_call_and_runs_other_layouts_eagerly():
    def f(x, y):
        return (x.sin() + y).relu() * 2, (x * y).sum(1)
    x, y = torch.randn(8, 16), torch.randn(8, 16)
    call, text = _compiled(f, x, y)
    assert "_i = _entry((arg0, arg1, ), _entry_specs, 1)" in text, text
    assert "_empty_float32(" in text and "_empty(" not in text
    for got, want in zip(call(x, y), f(x, y)):
        torch.testing.assert_close(got, want)
    before = runtime.counters["input_mismatch_calls"]
    xt = torch.randn(16, 8).t()                  # another layout: eager, counted
    with pytest.warns(UserWarning, match="running the graph eagerly"):
        out = call(xt, y)
    for got, want in zip(out, f(xt, y)):
        torch.testing.assert_close(got, want)
    assert runtime.counters["input_mismatch_calls"] == before + 1
    grads = runtime.counters["eager_grad_calls"]
    xg = x.clone().requires_grad_()
    out = call(xg, y)                            # autograd: eager, with a graph to differentiate
    out[0].sum().backward()
    ref = x.clone().requires_grad_()
    f(ref, y)[0].sum().backward()
    torch.testing.assert_close(xg.grad, ref.grad)
    assert runtime.counters["eager_grad_calls"] == grads + 1


def test_allocation_through_the_bound_allocator_is_eagers_empty_strided():
    alloc = runtime.allocator(torch.device("cpu"))(torch.bfloat16)
    t = alloc((3, 5), (1, 3))
    assert t.dtype is torch.bfloat16 and t.device.type == "cpu"
    assert t.shape == (3, 5) and t.stride() == (1, 3) and not t.requires_grad

"""Errors raised inside compiled kernels are eager's: the exception type and message class of
the op that failed (an out-of-range index: RuntimeError for gather, IndexError "index out of
range in self" for index_select/embedding; an integer division by zero: RuntimeError), and the
traceback ends at the user's line of that op. Kernels only flag a code; codegen/wrapper.py
kernel_error turns it into the exception from the fused FX nodes (KernelSite)."""
import importlib.util
import os
import traceback

import pytest
import torch
import torch.nn.functional as F

import pydynamo

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

KERNELS = ["cpp"] + (["triton"] if importlib.util.find_spec("triton") else [])


def _compiled(fn, kernels):
    pydynamo.reset()
    opts = {"backend_kernels": "triton"} if kernels == "triton" else None
    return pydynamo.optimize(backend="codegen", options=opts)(fn)


def _eager_error(fn, *args):
    with pytest.raises(Exception) as info:
        fn(*args)
    return info.value


def gather_fn(x, i):
    y = x * 2
    return torch.gather(y, 0, i) + 1                   # LINE: gather


def index_select_fn(x, i):
    return torch.index_select(x * 2, 0, i).sum()       # LINE: index_select


def embedding_fn(w, i):
    return F.embedding(i, w) * 2                       # LINE: embedding


def gather_then_index_select_fn(x, i, j):
    y = torch.gather(x, 1, i % x.shape[1])             # always in range
    return y.index_select(0, j)                        # LINE: gather_then_index_select


def floordiv_fn(a, b):
    return (a + 1) // b                                # LINE: floordiv


def _line(tag):
    with open(__file__) as f:
        for n, text in enumerate(f, 1):
            if text.rstrip().endswith(f"# LINE: {tag}"):
                return n
    raise AssertionError(tag)


CASES = [
    ("gather", gather_fn, lambda: (torch.randn(3, 4), torch.tensor([[0, 5, 1, 1]])),
     RuntimeError, "out of bounds for dimension 0 with size 3"),
    ("index_select", index_select_fn, lambda: (torch.randn(3, 4), torch.tensor([0, 5])),
     IndexError, "index out of range in self"),
    ("embedding", embedding_fn, lambda: (torch.randn(3, 4), torch.tensor([[0, 3]])),
     IndexError, "index out of range in self"),
    # fuzz seed 3688: a kernel fusing a gather (in range) and an index_select (out of range)
    # raised the gather's RuntimeError: the kernel's code names the family that failed
    ("gather_then_index_select", gather_then_index_select_fn,
     lambda: (torch.randn(5, 4), torch.randint(0, 9, (5, 3)), torch.tensor([0, 7, 1])),
     IndexError, "index out of range in self"),
    ("floordiv", floordiv_fn, lambda: (torch.arange(4), torch.tensor([1, 0, 2, 1])),
     RuntimeError, "ZeroDivisionError"),
]


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("tag,fn,make,exc,match", CASES, ids=[c[0] for c in CASES])
def test_kernel_error_has_eagers_type_and_message_class(tag, fn, make, exc, match, kernels):
    args = make()
    want = _eager_error(fn, *args)
    assert type(want) is exc and match in str(want)    # what eager raises, for reference
    with pytest.raises(exc, match=match):
        _compiled(fn, kernels)(*args)


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("tag,fn,make,exc,match", CASES, ids=[c[0] for c in CASES])
def test_kernel_error_traceback_ends_at_the_users_line(tag, fn, make, exc, match, kernels):
    with pytest.raises(exc) as info:
        _compiled(fn, kernels)(*make())
    last = traceback.extract_tb(info.value.__traceback__)[-1]
    assert (last.filename, last.lineno, last.name) == (__file__, _line(tag), fn.__name__)
    assert "compiled kernel" in "".join(traceback.format_exception(info.value))


@pytest.mark.parametrize("kernels", KERNELS)
@pytest.mark.parametrize("tag,fn", [("gather", gather_fn), ("index_select", index_select_fn),
                                    ("embedding", embedding_fn)])
def test_negative_index_to_gather_index_select_embedding_raises_like_eager(tag, fn, kernels):
    # these ops refuse negative indices (only Python-style indexing counts from the end); the
    # kernels wrapped -1 to the last row and returned a value where eager raises
    x = torch.randn(3, 4)
    i = {"gather": torch.tensor([[0, -1, 1, 1]]), "index_select": torch.tensor([0, -1]),
         "embedding": torch.tensor([[0, -1]])}[tag]
    want = _eager_error(fn, x, i)
    with pytest.raises(type(want)):
        _compiled(fn, kernels)(x, i)


@pytest.mark.parametrize("kernels", KERNELS)
def test_in_range_indices_still_compare_equal(kernels):
    x = torch.randn(3, 4)
    i = torch.tensor([[0, 2, 1, 1]])
    torch.testing.assert_close(_compiled(gather_fn, kernels)(x, i), gather_fn(x, i))
    j = torch.tensor([2, 0, 1])
    torch.testing.assert_close(_compiled(index_select_fn, kernels)(x, j), index_select_fn(x, j))


def test_python_style_tensor_indexing_out_of_range_raises_index_error():
    def f(x, i):
        return x[i] * 2
    x, i = torch.randn(3, 4), torch.tensor([0, 5])
    with pytest.raises(IndexError, match="out of bounds for dimension 0 with size 3"):
        _compiled(f, "cpp")(x, i)
    torch.testing.assert_close(_compiled(f, "cpp")(x, torch.tensor([0, -1])), f(x, torch.tensor([0, -1])))


def getitem_fn(x, i):
    y = x + 1
    return y[i] * 2                                    # LINE: getitem


@pytest.mark.parametrize("kernels", KERNELS)
def test_extern_error_traceback_has_the_users_line(kernels):
    # an op run eagerly inside the compiled graph (an extern: Python-style tensor indexing)
    # raises its own exception; the traceback shows the user's line of that op
    x, i = torch.randn(3, 4), torch.tensor([0, 5])
    with pytest.raises(IndexError, match="index 5 is out of bounds for dimension 0 with size 3") \
            as info:
        _compiled(getitem_fn, kernels)(x, i)
    frames = [(f.filename, f.lineno, f.name) for f in traceback.extract_tb(info.value.__traceback__)]
    assert (__file__, _line("getitem"), "getitem_fn") in frames

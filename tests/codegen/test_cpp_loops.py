"""The C++ kernels' loop forms (codegen/cpp.py) keep eager's answers and errors: several outer
loops under a parallel pragma are one flat loop whose body holds each row's values (hoisted
loads, libm calls, indirect indices checked once per row), a loop is `omp simd` unless its
own body flags an error, and a bool read as a number is a select (g++ 12 vectorizes no loop
holding static_cast<float>(bool)). Outputs against eager on random inputs, at one and two
OpenMP threads, sizes not divisible by the vector width, empty and size-1 dimensions."""
import re

import pytest
import torch
import torch.nn.functional as F

from tests.codegen.test_cpp_forms import _compile, _kernel_source as _source, _seed  # noqa: F401


@pytest.fixture(params=[1, 2], ids=["1thread", "2threads"])
def threads(request):
    """Our kernels run on the calling thread's OpenMP team size, which torch.set_num_threads
    sets (the same libgomp)."""
    before = torch.get_num_threads()
    torch.set_num_threads(request.param)
    yield request.param
    torch.set_num_threads(before)


def _loop_bodies(src, pragma):
    """(header line, body text) of every loop whose pragma line starts with `pragma`."""
    out = []
    for m in re.finditer(rf"^( *){re.escape(pragma)}[^\n]*\n *for \([^)]*\) \{{\n", src, re.M):
        end = src.index("\n" + m.group(1) + "}", m.end())
        out.append((m.group(0), src[m.end():end]))
    return out


def cross_entropy_grad(logits, target, g):
    lse = torch.logsumexp(logits, -1, keepdim=True)
    onehot = (target[..., None] == torch.arange(logits.shape[-1])).float()
    return (torch.exp(logits - lse) - onehot) * g


@pytest.mark.parametrize("shape", [(96, 1000), (4, 24, 1000), (3, 5, 17), (1, 7, 33), (2, 0, 9)])
def test_one_hot_as_float_is_a_select_and_matches_eager(shape, threads):
    """The cross-entropy backward's one-hot `(target == arange).float()` was printed as
    static_cast<float>(bool): g++ left the whole row loop scalar (462 us per call for 96 rows
    of 1000 against 102 with the select, one thread). Several outer dims (collapsed before)
    hoist the row's target and log() as one outer dim does."""
    logits = torch.randn(*shape)
    target = torch.randint(0, shape[-1], shape[:-1])
    g = torch.rand(())
    c = _compile(cross_entropy_grad, logits, target, g)
    torch.testing.assert_close(c(logits, target, g), cross_entropy_grad(logits, target, g))
    src = _source(c)
    assert "? float(1) : float(0)" in src, src
    assert "collapse(" not in src, src
    if 0 in shape:
        return
    bodies = [b for _, b in _loop_bodies(src, "#pragma omp simd")]
    assert bodies, src
    assert not any("std::log" in b or re.search(r"arg1\[", b) for b in bodies), src


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.int64, torch.int32])
def test_bool_to_number_conversions_match_eager(dtype, threads):
    x = torch.randn(3, 1037)
    x[0, :5] = torch.tensor([0.0, -0.0, float("nan"), float("inf"), -1e-30])

    def f(a):
        m = a > 0
        return m.to(dtype) * 3 + (~m).to(dtype), (a != a).to(dtype).sum(-1)
    c = _compile(f, x)
    for o, r in zip(c(x), f(x)):
        assert o.dtype == r.dtype
        torch.testing.assert_close(o, r, rtol=0, atol=0)


class EmbedNorm(torch.nn.Module):
    """BERT's embedding block: word + position (+ token type through a gather) and LayerNorm."""
    def __init__(self, vocab, d):
        super().__init__()
        self.word = torch.nn.Embedding(vocab, d)
        self.pos = torch.nn.Embedding(64, d)
        self.ttype = torch.nn.Embedding(2, d)
        self.ln = torch.nn.LayerNorm(d)

    def forward(self, ids, pos, types):
        tt = torch.gather(types, 1, pos)
        return self.ln(self.word(ids) + self.pos(pos) + self.ttype(tt))


def _embed_inputs(batch, seq, vocab):
    ids = torch.randint(0, vocab, (batch, seq))
    pos = torch.arange(seq).expand(batch, seq).contiguous()
    types = torch.randint(0, 2, (batch, 64))
    return ids, pos, types


@pytest.mark.parametrize("batch,seq,d", [(1, 33, 768), (3, 5, 17), (2, 64, 100), (1, 1, 5)])
def test_row_indices_checked_once_per_row_and_match_eager(batch, seq, d, threads):
    """The gathered rows' indices depend only on the row: wrapped and checked before the
    inner loops, which then vectorize (BERT's embedding + LayerNorm over (1, 128): 390 us per
    call before, 90 after; eager 170)."""
    m = EmbedNorm(50, d).eval()
    args = _embed_inputs(batch, seq, 50)
    with torch.no_grad():
        c = _compile(m, *args)
        torch.testing.assert_close(c(*args), m(*args))
    src = _source(c)
    simd = [b for head, b in _loop_bodies(src, "#pragma omp") if "simd" in head]
    assert simd, src
    assert not any("pd_err" in b for b in simd), src
    assert "(not omp simd" not in src, src


@pytest.mark.parametrize("bad", [50, -51, 10 ** 6])
def test_out_of_range_row_index_still_raises_eagers_error(bad, threads):
    m = EmbedNorm(50, 24).eval()
    ids, pos, types = _embed_inputs(2, 7, 50)
    with torch.no_grad():
        c = _compile(m, ids, pos, types)
        bad_ids = ids.clone()
        bad_ids[1, 3] = bad
        with pytest.raises(IndexError, match="index out of range"):
            m(bad_ids, pos, types)
        with pytest.raises(IndexError, match="index out of range"):
            c(bad_ids, pos, types)
        torch.testing.assert_close(c(ids, pos, types), m(ids, pos, types))   # and recovers


def test_a_loop_that_flags_errors_is_not_simd_and_its_neighbours_are():
    """An integer division by a tensor (pd_int_floordiv flags a zero divisor) keeps its own
    loop scalar; the row's other loops (the float reduction) stay `omp simd`."""
    def f(x, a, b):
        return torch.softmax(x, -1), torch.div(a, b, rounding_mode="floor")
    x = torch.randn(6, 301)
    a = torch.randint(-100, 100, (6, 301))
    b = torch.randint(1, 9, (6, 301)) * (torch.randint(0, 2, (6, 301)) * 2 - 1)
    c = _compile(f, x, a, b)
    for o, r in zip(c(x, a, b), f(x, a, b)):
        torch.testing.assert_close(o, r)
    src = _source(c)
    for head, body in _loop_bodies(src, "#pragma omp"):
        if "pd_err" in body and "for (" not in body:
            assert "simd" not in head, src
    assert re.search(r"#pragma omp simd reduction", src), src
    b0 = b.clone()
    b0[2, 7] = 0
    with pytest.raises(RuntimeError, match="ZeroDivisionError"):
        c(x, a, b0)


@pytest.mark.parametrize("shape", [(2, 3, 4, 1025), (5, 1, 1, 16), (1, 1, 7, 3), (3, 0, 2, 5)])
def test_flat_outer_loop_matches_eager_on_broadcast_rows(shape, threads):
    """Pointwise and reduction nests over several outer dims (one flat parallel loop now):
    a per-row broadcast value, a row reduction, sizes of 1 and 0 and odd widths."""
    x = torch.randn(*shape)
    row = torch.randn(*shape[:-1], 1)
    col = torch.randn(shape[-1])

    def f(x, row, col):
        y = torch.tanh(x * row.exp() + col) * row.log1p().abs()
        return y, y.amax(-1), (x * row).sum(-1), torch.softmax(x + col, -1)
    c = _compile(f, x, row, col)
    for o, r in zip(c(x, row, col), f(x, row, col)):
        torch.testing.assert_close(o, r, equal_nan=True)


def test_embedding_layer_norm_matches_eager_in_two_threads_with_functional_calls(threads):
    """F.embedding with padding_idx and a gathered row through index_select, fused with a
    LayerNorm over a 3-d output whose last dim is not a multiple of 16."""
    w = torch.randn(40, 37)
    ids = torch.randint(0, 40, (3, 11))
    sel = torch.randint(0, 40, (11,))

    def f(ids, sel, w):
        e = F.embedding(ids, w, padding_idx=0) + torch.index_select(w, 0, sel)
        return F.layer_norm(e, (37,))
    c = _compile(f, ids, sel, w)
    torch.testing.assert_close(c(ids, sel, w), f(ids, sel, w))


def test_a_load_is_not_hoisted_out_of_a_loop_that_may_not_run():
    """Gradient sweep (session 18), `tile` of a (0,) tensor in training: loop-invariant code
    motion declared `tmp0 = arg0[0]` before `for (x0 = 0; x0 < 0; ...)`, a read of element 0 of
    an input with no storage (a null data pointer for an empty leaf): the process died with
    SIGSEGV. A load now leaves only loops with a static trip count above 0."""
    import pydynamo

    def f(x):
        return torch.tile(x, ())
    for requires_grad in (False, True):
        pydynamo.reset()
        try:
            x = torch.randn(0, requires_grad=requires_grad)
            y = pydynamo.optimize(f, backend="codegen")(x)
            assert y.shape == (0,)
            if requires_grad:
                y.sum().backward()
                assert x.grad.shape == (0,)
        finally:
            pydynamo.reset()

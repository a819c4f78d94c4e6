"""Dynamic shapes on the C++ path: one compiled library serves every size.

Each case compiles once with symbolic sizes (the `dynamic=` option, or placeholder metadata
shaped like the executor's: sympy sizes/strides and int placeholders for symbols), then runs
at several sizes and checks eager's results, no eager fallback and no new C++ compile."""
import copy
import math
import os
import sys
import types
import warnings

import pytest
import sympy
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import codegen
from codegen import codecache
from pydynamo import config

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
import differential  # noqa: E402  (tests/differential.py: the shared compare)

SIZES = (5, 17, 64, 100)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def sym(name):
    return sympy.Symbol(name, integer=True, positive=True)


def compile_dynamic(fn, inputs, opts):
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    c = codegen.compile_fx(gm, list(inputs), strict=True, **opts)
    assert not c.stats.fallback, c.stats.fallback
    return c, gm


def serves_all_sizes(c, gm, make, sizes=SIZES, rtol=1e-4, atol=1e-5):
    """Run at every size: eager's values, no mismatch fallback, no new compile."""
    mism, compiles = codegen.counters["input_mismatch_calls"], codecache.stats["compiles"]
    for n in sizes:
        args = make(n)
        eager_args = copy.deepcopy(args)     # layout kept; eager runs first, on its own copy
        ref = gm(*eager_args)
        differential.assert_values_equal(c(*args), ref, rtol=rtol, atol=atol)   # integers exactly
        differential.assert_values_equal(args, eager_args, rtol=rtol, atol=atol, what="inputs after the call")
    assert codegen.counters["input_mismatch_calls"] == mism
    assert codecache.stats["compiles"] == compiles
    return open(c.wrapper_path).read()


def check(fn, make, dynamic, sizes=SIZES, **kw):
    c, gm = compile_dynamic(fn, make(sizes[0]), dict(dynamic=dynamic))
    return c, serves_all_sizes(c, gm, make, sizes, **kw)


def test_pointwise_chain_and_broadcasting():
    y = torch.randn(16)

    def f(x, z):
        a = torch.sin(x) * 2 + y - z
        return F.gelu(a) * torch.sigmoid(z), (a * z).abs()
    c, src = check(f, lambda n: (torch.randn(n, 16), torch.randn(n, 1)), {0: [0], 1: [0]})
    assert c.kernel_count == 1 and "s0 = arg0.shape[0]" in src
    assert "arg1.shape != (s0, 1)" in src   # duck shaping: one symbol, checked on both inputs


def test_reductions_over_symbolic_and_static_dims():
    w, b = torch.randn(24), torch.randn(24)

    def f(x):
        return (torch.softmax(x, -1), torch.softmax(x, 0), F.layer_norm(x, (24,), w, b),
                x.sum(0), x.amax(1), x.var(0), x.mean())
    c, _ = check(f, lambda n: (torch.randn(n, 24),), {0: [0]})
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_views_and_reshapes_with_symbolic_sizes():
    def f(x):
        n = x.size(0)
        a = x.view(n, 4, 4).permute(2, 0, 1) * 2
        b = x.reshape(-1) + 1
        c = x.t().contiguous().view(16, n) - 1
        return a.sum(1), b, c, x.view(n * 16).neg()
    c, _ = check(f, lambda n: (torch.randn(n, 16),), {0: [0]})
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_cat_along_symbolic_and_static_dims():
    def f(x, y):
        return (torch.cat([x, y * 2], 0).exp(), torch.cat([x, x.sin()], 1) + 1,
                torch.stack([x, x * 2], 1).sum(0))
    c, _ = check(f, lambda n: (torch.randn(n, 8), torch.randn(n + 3, 8)), {0: [0], 1: [0]})
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_slicing_with_symbolic_bounds():
    def f(x):
        n = x.size(0)
        return x[1:] * 2, x[:-2].abs(), x[:, 2:5] + 1, x[: n // 2].sum(0), x[1::3] - 1
    c, src = check(f, lambda n: (torch.randn(n, 8),), {0: [0]})
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_matmul_extern_inside_fused_code():
    w = torch.randn(16, 32)

    def f(x):
        h = torch.relu(x * 2 + 1)
        return torch.tanh(h @ w) + x.sum(1, keepdim=True), (h.t() @ h).softmax(-1)
    c, src = check(f, lambda n: (torch.randn(n, 16),), {0: [0]}, rtol=1e-3, atol=1e-4)
    assert c.stats.externs >= 2 and "_ensure(" in src


class TinyGPTBlock(nn.Module):
    """GPT-2's block: causal self-attention (mask sliced to the sequence length) and MLP."""

    def __init__(self, d=32, heads=4, max_len=128, mask_buffer=False):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.attn, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.fc, self.out = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)
        mask = torch.tril(torch.ones(max_len, max_len)).view(1, 1, max_len, max_len)
        if mask_buffer:      # as GPT-2 has it
            self.register_buffer("bias", mask)
        else:   # fx.symbolic_trace proxies parameters only, and the mask is sliced with T
            self.bias = nn.Parameter(mask, requires_grad=False)

    def forward(self, x):
        B, T, C = x.size()
        q, k, v = self.attn(self.ln1(x)).split(C, dim=2)
        q = q.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        k = k.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        v = v.view(B, T, self.heads, C // self.heads).transpose(1, 2)
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :T, :T] == 0, float("-inf"))
        y = F.softmax(att, dim=-1) @ v
        x = x + self.proj(y.transpose(1, 2).contiguous().view(B, T, C))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def test_tiny_gpt2_block():
    m = TinyGPTBlock().eval()
    with torch.no_grad():
        check(torch.fx.symbolic_trace(m), lambda n: (torch.randn(2, n, 32),), {0: [1]},
              rtol=1e-4, atol=1e-4)


def test_non_contiguous_inputs_with_symbolic_strides():
    def f(x, y):
        return (x * 2 + y).sum(1), x.exp() - 1
    # transposed (dense in another order) and a strided column view
    make = lambda n: (torch.randn(12, n).t(), torch.randn(n, 24)[:, ::2])  # noqa: E731
    c, src = check(f, make, {0: [0], 1: [0]})
    assert "stride()" in src


def test_both_dims_dynamic_transposed_input():
    def f(x):
        return torch.softmax(x, -1) + x.t().sum(1)
    check(f, lambda n: (torch.randn(n + 1, n).t(),), {0: [0, 1]})


def test_static_dim_change_or_broken_relation_runs_eagerly():
    gm = torch.fx.symbolic_trace(lambda x, y: x + y)
    c, _ = compile_dynamic(gm, [torch.randn(5, 8), torch.randn(5, 8)], dict(dynamic={0: [0], 1: [0]}))
    before = codegen.counters["input_mismatch_calls"]
    x, y = torch.randn(6, 9), torch.randn(6, 9)              # a static dim differs
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch.testing.assert_close(c(x, y), x + y)
        with pytest.raises(RuntimeError):                     # symbolic dims disagree: eager's error
            c(torch.randn(6, 8), torch.randn(7, 8))
    assert codegen.counters["input_mismatch_calls"] == before + 2


# ------------------------------------------------------------- graphs shaped like the executor's
def _meta(shape, stride, dtype=torch.float32):
    return types.SimpleNamespace(shape=tuple(shape), stride=tuple(stride), dtype=dtype,
                                 device=torch.device("cpu"))


def test_executor_style_graph_with_int_placeholders():
    """Tensor placeholders with sympy sizes, an int placeholder per symbol, size arithmetic
    as operator nodes, and pydynamo.symbols.FloorDiv in the metadata."""
    from pydynamo.symbols import FloorDiv

    def f(x, s0, w):
        h = x.view(s0 // 2, 2, 16) * 2
        return (h.sum(1) @ w).relu(), x[: s0 // 2 + 1].sum(0)
    gm = torch.fx.symbolic_trace(f)
    s0 = sym("s0")
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph[0].meta["val"] = _meta((s0, 16), (16, 1))
    ph[1].meta["val"] = s0
    ph[2].meta["val"] = _meta((16, 8), (8, 1))
    for n in gm.graph.nodes:       # the size nodes carry their sympy value, as the executor's do
        if n.op == "call_function" and n.target.__name__ == "floordiv":
            n.meta["val"] = FloorDiv(s0, 2)
        if n.op == "call_function" and n.target.__name__ == "add":
            n.meta["val"] = FloorDiv(s0, 2) + 1
    w = torch.randn(16, 8)
    make = lambda n: (torch.randn(2 * n, 16), 2 * n, w)  # noqa: E731
    c, _ = compile_dynamic(gm, make(5), {})
    src = serves_all_sizes(c, gm, make, rtol=1e-4, atol=1e-4)
    assert "s0 = arg1" in src and "arg0.shape != (s0, 16)" in src


def test_executor_style_symbolic_strides():
    s0, s1 = sym("s0"), sym("s1")

    def f(x):
        return x.exp() + x.sum(0)
    gm = torch.fx.symbolic_trace(f)
    next(iter(gm.graph.nodes)).meta["val"] = _meta((s0, 4), (s1, 2))
    make = lambda n: (torch.randn(n, n + 9)[:, 1:9:2],)  # noqa: E731
    c, _ = compile_dynamic(gm, make(5), {})
    src = serves_all_sizes(c, gm, make)
    assert "s1 = arg0.stride()[0]" in src


def test_data_dependent_extern_shape_runs_eagerly():
    """nonzero's result size depends on data: a different size re-runs the graph eagerly."""
    def f(x):
        return torch.nonzero(x > 0).float().sum(0) * 2
    x = torch.randn(6, 5)
    c, gm = compile_dynamic(f, [x], {})
    torch.testing.assert_close(c(x), gm(x))
    before = codegen.counters["input_mismatch_calls"]
    y = x.abs()          # every element non-zero: another output size
    torch.testing.assert_close(c(y), gm(y))
    assert codegen.counters["input_mismatch_calls"] == before + 1


def test_externs_with_symbolic_sizes():
    """bmm, conv, SDPA, cumsum and an advanced-indexing getitem with a symbolic slice run as
    extern calls whose output layouts are symbolic: no eager fallback at any size."""
    idx, conv_w = torch.tensor([0, 2, 1]), torch.randn(4, 3, 3)

    def f(x, q):
        n = x.size(0)
        return (x[idx, : n // 2] * 2, torch.bmm(q, q.transpose(1, 2)).softmax(-1) + 1,
                F.conv1d(q.transpose(1, 2), conv_w, padding=1).relu(),
                F.scaled_dot_product_attention(q, q, q, is_causal=True) - q, torch.cumsum(x, 0))
    c, src = check(f, lambda n: (torch.randn(n, n + 2), torch.randn(2, n, 3)),
                   {0: [0, 1], 1: [1]}, rtol=1e-4, atol=1e-4)
    assert c.stats.externs == 5 and "slice(None, (s0 // 2), None)" in src
    assert "_ensure(_r1, (2, s0, s0)" in src      # bmm's result layout in symbols


def test_one_library_serves_every_size(tmp_path, monkeypatch):
    """Compiled once with symbolic sizes: g++ runs once, then sizes 5, 7, 33 and 100 are served
    by the same library (no build, no disk or memory cache lookup, no fallback)."""
    monkeypatch.setattr(config, "cache_dir", str(tmp_path))

    def f(x, y):     # constants unique to this test: nothing else in the process builds it
        return torch.tanh(x * 1.0625 + y).sum(1) * 0.8125, (x - y.mean()).amax(0)
    before = dict(codecache.stats)
    c, gm = compile_dynamic(f, (torch.randn(5, 11), torch.randn(5, 1)), dict(dynamic={0: [0], 1: [0]}))
    assert codecache.stats["compiles"] == before["compiles"] + 1
    lookups = {k: codecache.stats[k] for k in ("compiles", "disk_hits", "memory_hits")}
    serves_all_sizes(c, gm, lambda n: (torch.randn(n, 11), torch.randn(n, 1)), sizes=(5, 7, 33, 100))
    assert {k: codecache.stats[k] for k in lookups} == lookups
    assert len(list(tmp_path.glob("cpp/*/*.so"))) == 1


def test_negative_symbolic_slice_start_and_true_division_of_a_size():
    """x[-(n // 2):] counts from the end as in Python; n / 2 is a Python float (a double
    computed in the kernel from the size argument)."""
    def f(x):
        n = x.size(0)
        return x[-(n // 2):] + 1, x * (n / 2), x[: n - 3].sum(0) / (n / 4)
    c, src = check(f, lambda n: (torch.randn(n, 3),), {0: [0]}, sizes=(6, 9, 17, 64))
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons


def test_executor_style_size_float_scalar():
    """An executor graph adding `x.shape[0] / 2` (meta["val"] = s0/2) to a tensor."""
    s0 = sym("s0")

    def f(x, n):
        return x + n / 2
    gm = torch.fx.symbolic_trace(f)
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph[0].meta["val"], ph[1].meta["val"] = _meta((s0,), (1,)), s0
    for n in gm.graph.nodes:
        if n.op == "call_function" and n.target.__name__ == "truediv":
            n.meta["val"] = s0 / 2
        if n.op == "call_function" and n.target.__name__ == "add":
            n.meta["val"] = _meta((s0,), (1,))
    make = lambda n: (torch.randn(n), n)  # noqa: E731
    c, _ = compile_dynamic(gm, make(8), {})
    serves_all_sizes(c, gm, make, sizes=(8, 11, 12, 10))


# ------------------------------------------------------------- end to end through pydynamo
def _through_pydynamo(fn, make, sizes, **tol):
    """Run `pydynamo.optimize(fn, backend="codegen")` (automatic dynamic) over `sizes`: eager's
    values, no warning; returns graphs compiled after each call and the mismatch count."""
    import pydynamo
    pydynamo.reset()
    g = pydynamo.optimize(fn, backend="codegen")
    start, mism = codegen.counters["graphs_compiled"], codegen.counters["input_mismatch_calls"]
    fallbacks, compiled = codegen.counters["eager_fallback_graphs"], []
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in sizes:
            args = make(n)
            torch.testing.assert_close(g(*args), fn(*args), **tol)
            compiled.append(codegen.counters["graphs_compiled"] - start)
    assert codegen.counters["eager_fallback_graphs"] == fallbacks
    return compiled, codegen.counters["input_mismatch_calls"] - mism


def test_automatic_dynamic_compiles_one_dynamic_graph():
    w = torch.randn(6)

    def f(x, y):
        n = x.shape[0]
        return torch.softmax(x * 2 + y, -1).sum(0) + x[1:].mean() * w, x.view(n * 6)[: n // 2]
    make = lambda n: (torch.randn(n, 6), torch.randn(6))  # noqa: E731
    compiled, mism = _through_pydynamo(f, make, (8, 9, 10, 33))
    assert compiled == [1, 2, 2, 2] and mism == 0    # static, then one dynamic graph
    import torch._dynamo as dynamo     # the reference: torch.compile's graph count per call
    dynamo.reset()
    graphs = []
    ref = torch.compile(f, backend=lambda gm, ex: graphs.append(gm) or gm.forward)
    counts = []
    for n in (8, 9, 10, 33):
        ref(*make(n))
        counts.append(len(graphs))
    assert counts == compiled


def test_tiny_gpt2_block_over_sequence_lengths():
    torch.manual_seed(0)
    m = TinyGPTBlock(mask_buffer=True).eval()
    with torch.no_grad():
        compiled, mism = _through_pydynamo(m, lambda n: (torch.randn(2, n, 32),), (16, 17, 32, 64),
                                           rtol=1e-4, atol=1e-4)
    assert compiled == [1, 2, 2, 2] and mism == 0


def test_broken_size_assumption_runs_eagerly_with_its_reason():
    """x[: n - 3] was compiled for n - 3 > 0 (the slice is not empty): n = 3 breaks it. The call
    runs eagerly, counted, and the warning names the relation."""
    def f(x):
        return x[: x.size(0) - 3] * 2
    c, gm = compile_dynamic(f, [torch.randn(8, 2)], dict(dynamic={0: [0]}))
    before = codegen.counters["size_assumption_calls"]
    x = torch.randn(3, 2)
    with pytest.warns(UserWarning, match=r"relation .*s0"):
        torch.testing.assert_close(c(x), gm(x))
    assert codegen.counters["size_assumption_calls"] == before + 1
    serves_all_sizes(c, gm, lambda n: (torch.randn(n, 2),), sizes=(4, 9, 50))


@pytest.mark.parametrize("dynamic", [{}, {0: [0, 1]}])
def test_flipped_view_passed_to_an_extern(dynamic):
    """x.flip(0) is a view with a negative stride: an extern gets it materialized (torch's
    as_strided refuses negative strides)."""
    def f(x):
        return torch.view_as_real(torch.complex(x, x.flip(0)) * 2) + 1
    c, gm = compile_dynamic(f, [torch.randn(4, 4)], dict(dynamic=dynamic))
    serves_all_sizes(c, gm, lambda n: (torch.randn(n, n),) if dynamic else (torch.randn(4, 4),))


@pytest.mark.parametrize("dynamic", [False, True])
def test_extern_results_with_none_and_half_dtypes_through_pydynamo(dynamic):
    """nn.MultiheadAttention's functional returns (out, None); an fp16 extern result is cast
    back by an extern (the C++ kernels have no half type). Both compiled, not run eagerly."""
    import pydynamo
    mha = nn.MultiheadAttention(8, 2, batch_first=True).eval()

    def f(x):
        y = mha(x, x, x, need_weights=False)[0]
        return y.to(dtype=torch.float16).float() * 2 + x
    pydynamo.reset()
    g = pydynamo.optimize(f, backend="codegen", dynamic=dynamic)
    fallbacks = codegen.counters["eager_fallback_graphs"]
    with torch.no_grad(), warnings.catch_warnings():
        warnings.simplefilter("error")
        for n in (5, 7) if dynamic else (5,):
            x = torch.randn(2, n, 8)
            torch.testing.assert_close(g(x), f(x), rtol=1e-3, atol=1e-3)
    assert codegen.counters["eager_fallback_graphs"] == fallbacks


def test_extern_sizes_tell_apart_symbols_with_equal_hints():
    """s0 and s1 are both 6 at compile time (no duck shaping, as under automatic dynamic); an
    extern's (s1, s0) result must not be guessed as (s0, s0) or (s1, s1)."""
    s0, s1 = sym("s0"), sym("s1")

    def f(x, y):
        return (torch.mm(x.t() * 2, y) + 1).cumsum(1)
    gm = torch.fx.symbolic_trace(f)
    ph = [n for n in gm.graph.nodes if n.op == "placeholder"]
    ph[0].meta["val"], ph[1].meta["val"] = _meta((s0, s1), (s1, 1)), _meta((s0, s0), (s0, 1))
    c, _ = compile_dynamic(gm, [torch.randn(6, 6), torch.randn(6, 6)], {})
    serves_all_sizes(c, gm, lambda n: (torch.randn(n, n + 3), torch.randn(n, n)),
                     sizes=(6, 7, 20), rtol=1e-4, atol=1e-4)


def test_transformers_gpt2_over_sequence_lengths():
    """GPT2Model from a config (2 layers) at 16, 17, 32, 64 through codegen: the static graph,
    then one dynamic graph serving 17, 32 and 64 with kernels taking the length as argument."""
    import transformers
    cfg = transformers.GPT2Config(n_layer=2, n_embd=64, n_head=4, vocab_size=1000, n_positions=128,
                                  bos_token_id=0, eos_token_id=0, use_cache=False)
    torch.manual_seed(0)
    m = transformers.GPT2Model(cfg).eval()

    def f(ids):
        return m(ids).last_hidden_state
    with torch.no_grad():
        compiled, mism = _through_pydynamo(f, lambda n: (torch.randint(0, 1000, (2, n)),),
                                           (16, 17, 32, 64), rtol=1e-4, atol=1e-4)
    assert compiled == [1, 2, 2, 2] and mism == 0


STRIDED = {
    "transposed": lambda n: (torch.randn(8, n).t(), torch.randn(n, 8)),
    "column_slice": lambda n: (torch.randn(n, 20)[:, 2:10], torch.randn(n, 8)),
    "row_step": lambda n: (torch.randn(2 * n, 8)[::2], torch.randn(n, 8)),
    "expanded": lambda n: (torch.randn(n, 1).expand(n, 8), torch.randn(n, 8)),
}


@pytest.mark.parametrize("layout", sorted(STRIDED))
def test_non_contiguous_inputs_through_pydynamo(layout):
    """The executor's symbolic strides (or the input's own) reach the kernels as arguments:
    one dynamic graph serves every size of a strided input without a copy or a fallback."""
    def f(x, y):
        return (x * 2 + y).sum(0), x.exp() - y
    compiled, mism = _through_pydynamo(f, STRIDED[layout], (5, 6, 9, 33))
    assert compiled == [1, 2, 2, 2] and mism == 0

"""Values derived from parameters and kept across calls (codegen/derived.py): a parameter's pad
for an aligned GEMM (codegen/gemm.py) and sibling products' concatenated weights
(codegen/gemm_group.py). Made once, remade exactly when a parameter changes (in-place writes,
`.data` swaps, another model's parameters), values and strides equal to eager's. The Triton
path on CPU tensors under the interpreter (on a GPU machine, on the GPU), the GPU's SM count
stated so the grouping rule holds at these small sizes."""
import os
import pickle
import sys

import re

import pytest

import torch
import torch.nn.functional as F

import codegen
import pydynamo
from codegen import codecache, derived, gemm, gemm_group, pipeline
from codegen.cudagraphs import CudaGraphRunner
from codegen.gpu_wrapper import TritonBackend
from codegen.options import Options

TRITON = {"backend_kernels": "triton"}
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
DEVICE_SMS = gemm_group.device_sms      # (the fixture below states a GPU's for the rest)


@pytest.fixture(autouse=True)
def _rules(monkeypatch):
    monkeypatch.setattr(gemm, "PAD_MIN_MACS", 1)
    monkeypatch.setattr(gemm_group, "device_sms", lambda device: 132)
    pydynamo.reset()
    yield
    pydynamo.reset()


@pytest.fixture
def computed(monkeypatch):
    """How many times a derivation computed its value (first time or remade)."""
    count = [0]
    compute = derived.Derivation._compute

    def counting(self, sources):
        count[0] += 1
        return compute(self, sources)
    monkeypatch.setattr(derived.Derivation, "_compute", counting)
    return count


@pytest.fixture
def wrappers(monkeypatch):
    sources = []
    write = codecache.write_wrapper

    def keep(src):
        sources.append(src)
        return write(src)
    monkeypatch.setattr(pipeline.codecache, "write_wrapper", keep)
    return sources


def _call_body(src):
    return src.split("def call", 1)[1].split("\ndef ", 1)[0]


def test_a_parameters_pad_is_made_once_and_remade_when_it_changes(computed, wrappers):
    torch.manual_seed(0)
    lin = torch.nn.Linear(12, 37, bias=False).to(DEVICE, torch.bfloat16)

    def f(x):
        return F.linear(x, lin.weight).float().softmax(-1)
    x = torch.randn(10, 12, dtype=torch.bfloat16, device=DEVICE)
    cf = pydynamo.optimize(f, options=TRITON)
    with torch.no_grad():
        for _ in range(3):
            torch.testing.assert_close(cf(x), f(x), rtol=2e-2, atol=2e-2)
        assert computed[0] == 1
        assert len(_externs(_call_body(wrappers[-1]), "derive")) == 1
        lin.weight.mul_(-2)                         # an in-place write: version moves
        torch.testing.assert_close(cf(x), f(x), rtol=2e-2, atol=2e-2)
        assert computed[0] == 2
        for i in range(4):     # new storages, version kept; the allocator may reuse addresses
            lin.weight.data = lin.weight.data * 0.5 + i
            torch.testing.assert_close(cf(x), f(x), rtol=2e-2, atol=2e-2)
        assert computed[0] == 6
        cf(x)
        assert computed[0] == 6


def test_an_activation_is_padded_per_call_not_kept(wrappers):
    torch.manual_seed(0)
    a, b = (torch.randn(10, 12, dtype=torch.bfloat16, device=DEVICE),
            torch.randn(12, 37, dtype=torch.bfloat16, device=DEVICE))
    cf = pydynamo.optimize(lambda a, b: (a @ b).float().softmax(-1), options=TRITON)
    torch.testing.assert_close(cf(a, b), (a @ b).float().softmax(-1), rtol=2e-2, atol=2e-2)
    body = _call_body(wrappers[-1])
    assert not _externs(body, "derive") and "(16, 40)" in body


class Attention(torch.nn.Module):
    """A Llama-shaped projection block: q, k (grouped-query: half the heads), v from one input,
    v's projection also returned on its own (a sibling read twice), then the output one."""

    def __init__(self, d=32, bias=False):
        super().__init__()
        self.q = torch.nn.Linear(d, d, bias=bias)
        self.k = torch.nn.Linear(d, d // 2, bias=bias)
        self.v = torch.nn.Linear(d, d, bias=bias)
        self.o = torch.nn.Linear(d, d, bias=bias)

    def forward(self, x):
        b, t, d = x.shape
        q = self.q(x).view(b, t, 4, 8).transpose(1, 2)
        k = self.k(x).view(b, t, 2, 8).transpose(1, 2).repeat_interleave(2, 1)
        v = self.v(x).view(b, t, 4, 8).transpose(1, 2)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.o(a.transpose(1, 2).reshape(b, t, d)), self.v(x)


def _externs(body, name):
    """The wrapper's calls of extern `name` (its comment: the name, then how it is called:
    "(out=)" into a reused buffer, "(2-D)" on 2-D views)."""
    return [ln for ln in body.splitlines()
            if "_externs[" in ln and re.search(rf"# {name}( \(.*\))?$", ln)]


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_sibling_linears_run_as_one_product(computed, wrappers, bias, dtype):
    torch.manual_seed(0)
    m = Attention(bias=bias).to(DEVICE, dtype)
    x = torch.randn(2, 8, 32, device=DEVICE, dtype=dtype)
    cf = pydynamo.optimize(m, options=TRITON)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    with torch.no_grad():
        for _ in range(2):
            for o, r in zip(cf(x), m(x)):
                torch.testing.assert_close(o, r, **tol)
                assert o.stride() == r.stride()
        body = _call_body(wrappers[-1])
        assert len(_externs(body, "linear")) == 2, body        # q/k/v (and v again), then o
        assert len(_externs(body, "derive")) == (2 if bias else 1)
        made = computed[0]
        m.k.weight.mul_(2)                          # one sibling's weight written
        if bias:
            m.v.bias.add_(1)
        for o, r in zip(cf(x), m(x)):
            torch.testing.assert_close(o, r, **tol)
        assert computed[0] == made + (2 if bias else 1)


def test_group_gemms_false_keeps_the_products_separate(wrappers):
    """options={"group_gemms": False}: no concatenated copy of the weights (its memory)."""
    m = Attention().to(DEVICE)
    x = torch.randn(2, 8, 32, device=DEVICE)
    with torch.no_grad():
        out = pydynamo.optimize(m, options={**TRITON, "group_gemms": False})(x)
        torch.testing.assert_close(out[0], m(x)[0])
    body = _call_body(wrappers[-1])
    assert not _externs(body, "derive") and len(_externs(body, "linear")) == 5, body


def test_siblings_that_fill_the_gpu_alone_stay_separate(wrappers, monkeypatch):
    # one SM, tiles of 8 x 8: each product's 16 x 32 result alone fills it
    monkeypatch.setattr(gemm_group, "device_sms", lambda device: 1)
    monkeypatch.setattr(gemm_group, "GROUP_TILE", 8)
    m = Attention().to(DEVICE)
    x = torch.randn(2, 8, 32, device=DEVICE)
    with torch.no_grad():
        out = pydynamo.optimize(m, options=TRITON)(x)
        torch.testing.assert_close(out[0], m(x)[0])
    body = _call_body(wrappers[-1])
    assert not _externs(body, "derive") and len(_externs(body, "linear")) == 5


def _writes_its_input_as_eager_does(f, x):
    """f (which writes x in place) compiled: its outputs and x afterwards equal eager's."""
    with torch.no_grad():
        x_eager = x.clone()
        want = f(x_eager)
        got = pydynamo.optimize(f, options=TRITON)(x)
    for o, r in zip(got, want):
        torch.testing.assert_close(o, r)
    torch.testing.assert_close(x, x_eager)


def test_siblings_in_an_aten_graph_group_and_a_functionalized_write_splits_them(wrappers):
    """A graph with a write goes through aten (linear as mm(view(x), t(w)), a view node per
    product): q and v read h and share one product; k reads h + 1 (the add_ made functional),
    so it is a product of its own."""
    torch.manual_seed(0)
    q, k, v = (torch.nn.Linear(16, 16, bias=False).to(DEVICE) for _ in range(3))

    def f(x):
        h = x * 2
        a = q(h)
        b = v(h)
        h.add_(1)
        return a, b, k(h)
    _writes_its_input_as_eager_does(f, torch.randn(2, 4, 16, device=DEVICE))
    body = _call_body(wrappers[-1])
    assert len(_externs(body, "derive")) == 1 and len(_externs(body, "linear")) == 1 and \
        len(_externs(body, "mm")) == 1, body


def test_siblings_with_biases_in_an_aten_graph_group(wrappers):
    """In an aten graph a linear with a bias is addmm(b, view(x), t(w)): such siblings group
    too, their weights and their biases each concatenated."""
    torch.manual_seed(0)
    m = Attention(bias=True).to(DEVICE)

    def f(x):
        x.add_(1)               # a write: the graph is functionalized (aten)
        return m(x)
    _writes_its_input_as_eager_does(f, torch.randn(2, 8, 32, device=DEVICE))
    body = _call_body(wrappers[-1])
    assert "addmm" in wrappers[-1] and len(_externs(body, "derive")) == 2, body


def test_an_in_place_write_between_siblings_ends_the_group():
    """A torch-level graph with the write itself (GraphLowering functionalizes it): the product
    after `x.mul_(2)` reads the new x, so it cannot join the products before it."""
    def f(x, w1, w2, w3):
        a = F.linear(x, w1)
        b = F.linear(x, w3)
        x.mul_(2)
        return a, b, F.linear(x, w2)
    gm = torch.fx.symbolic_trace(f)
    torch.manual_seed(0)
    ws = [torch.nn.Parameter(torch.randn(16, 16, device=DEVICE)) for _ in range(3)]
    x = torch.randn(4, 16, device=DEVICE)
    sources = []
    write = pipeline.codecache.write_wrapper
    pipeline.codecache.write_wrapper = lambda src: sources.append(src) or write(src)
    try:
        call = pipeline.compile_graph(gm, [x.clone()] + ws, TritonBackend(torch.device(DEVICE)),
                                      Options(strict=True))
    finally:
        pipeline.codecache.write_wrapper = write
    with torch.no_grad():
        want, x_want = f(x.clone(), *ws), x * 2
        got = call(x, *ws)
    for o, r in zip(got, want):
        torch.testing.assert_close(o, r)
    torch.testing.assert_close(x, x_want)
    body = _call_body(sources[-1])
    assert len(_externs(body, "derive")) == 1 and len(_externs(body, "linear")) == 2, body


def test_the_cpu_path_does_not_group(wrappers, monkeypatch):
    monkeypatch.setattr(gemm_group, "device_sms", DEVICE_SMS)     # the CPU has no SM count
    m = Attention()
    x = torch.randn(2, 8, 32)
    with torch.no_grad():
        torch.testing.assert_close(pydynamo.optimize(m)(x)[0], m(x)[0])
    assert not _externs(_call_body(wrappers[-1]), "derive")


def test_a_derivation_pickles_without_its_value():
    """The warm cache pickles a wrapper's extern arguments: the value and stamps stay behind."""
    d = derived.Derivation("cat", [1, 2], [6, 3])
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    torch.testing.assert_close(d(a, b), torch.cat([a, b]))
    back = pickle.loads(pickle.dumps(d))
    assert back.value is None and back.positions == (1, 2)
    back.refresh([None, a, b])
    torch.testing.assert_close(back.value.tensor, torch.cat([a, b]))


def test_graphs_over_the_same_parameters_share_one_value_and_never_read_anothers_bytes():
    """Two graphs' derivations over the same weights (a prefill and a decode graph) hold one
    tensor; when one is called with another model's weights it recomputes that tensor, and the
    other, called with its own weights again, sees the stamps differ and recomputes it back."""
    a, b = torch.randn(2, 3), torch.randn(4, 3)
    first, second = (derived.Derivation("cat", [0, 1], [6, 3]) for _ in range(2))
    assert first(a, b) is second(a, b)
    other = [torch.randn(2, 3), torch.randn(4, 3)]
    torch.testing.assert_close(first(*other), torch.cat(other))
    torch.testing.assert_close(second(a, b), torch.cat([a, b]))
    torch.testing.assert_close(first(*other), torch.cat(other))
    assert first.recomputed == 3 and second.recomputed == 2


def test_two_graphs_of_one_model_hold_one_concatenated_weight(monkeypatch, computed):
    """A second input shape compiles a second graph over the same weights: its derivation finds
    the first one's value (the memory is paid once); each writes it once, at its first call."""
    monkeypatch.setattr(derived, "_SHARED", __import__("weakref").WeakValueDictionary())
    m = Attention().to(DEVICE)
    cf = pydynamo.optimize(m, options=TRITON)
    with torch.no_grad():
        for b in (2, 3, 2, 3):
            x = torch.randn(b, 8, 32, device=DEVICE)
            torch.testing.assert_close(cf(x)[0], m(x)[0])
    assert len(derived._SHARED) == 1 and computed[0] == 2


def test_parameters_made_under_inference_mode_are_derived_at_every_call(computed):
    """An inference tensor has no version counter: an in-place write inside inference_mode
    cannot be seen, so its derivation is never known fresh (recomputed, never stale)."""
    with torch.inference_mode():
        m = Attention().to(DEVICE)
        x = torch.randn(2, 8, 32, device=DEVICE)
        cf = pydynamo.optimize(m, options=TRITON)
        torch.testing.assert_close(cf(x)[0], m(x)[0])
        m.q.weight.mul_(3)
        torch.testing.assert_close(cf(x)[0], m(x)[0])
    assert computed[0] >= 2


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="needs TRITON_INTERPRET=1 (Triton kernels on CPU tensors)")
def test_the_runner_refreshes_derived_values_before_each_replay():
    """A replay runs no host code: the derive extern is not called, the captured address is
    read as it is. The runner (here on a simulated device whose replays read derived values
    as they are, as a real replay does) refreshes them first, so an in-place write to a weight
    between replays is seen, as the warm cache's rebuilt runner does (derivations_of(consts))."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                                    "operating"))
    from test_cudagraph_outputs import Replayer

    class HostlessReplayer(Replayer):
        def capture(self, fn, args, pool):
            graph, outs = super().capture(fn, args, pool)

            class Graph:
                @staticmethod
                def replay():
                    call = derived.Derivation.__call__
                    derived.Derivation.__call__ = lambda self, *sources: self.value.tensor
                    try:
                        graph.replay()
                    finally:
                        derived.Derivation.__call__ = call
            return Graph, outs

    def f(x, wq, wk, wv):
        return F.linear(x, wq) * F.linear(x, wk) + F.linear(x, wv)
    gm = torch.fx.symbolic_trace(f)
    torch.manual_seed(0)
    ws = [torch.nn.Parameter(torch.randn(16, 16)) for _ in range(3)]
    call = codegen.compile_fx(gm, [torch.randn(4, 16)] + ws, backend_kernels="triton")
    found = derived.derivations_of(call.__globals__["_consts"])
    assert len(found) == 1
    runner = CudaGraphRunner(call, [], call.__globals__["matches"], outputs="copy",
                             derived=found)
    runner.device = HostlessReplayer()
    with torch.no_grad():
        for i in range(8):
            if i >= 5:
                ws[i % 3].mul_(-2)          # between replays
            x = torch.randn(4, 16)
            torch.testing.assert_close(runner(x, *ws), f(x, *ws))
    assert runner.cg_stats["captures"] == 1 and runner.cg_stats["replays"] >= 4


@pytest.mark.skipif(not torch.cuda.is_available(), reason="CUDA graphs")
def test_a_cuda_graph_replay_sees_a_parameter_written_since_capture():
    """mode="reduce-overhead": the replay runs no host code, so the runner refreshes the
    concatenated weight before it (in place: the captured graph reads its address)."""
    torch.manual_seed(0)
    m = Attention().cuda()
    x = torch.randn(2, 8, 32, device="cuda")
    cf = pydynamo.optimize(m, mode="reduce-overhead")
    with torch.no_grad():
        for i in range(6):
            if i >= 4:
                m.q.weight.mul_(1.5)
                m.v.weight.data = m.v.weight.data * -1
            for o, r in zip(cf(x), m(x)):
                torch.testing.assert_close(o, r)


class Siblings(torch.nn.Module):
    """Random sibling linears of one input, some read twice, mixed with other work."""

    def __init__(self, gen, k, widths, bias):
        super().__init__()
        self.lins = torch.nn.ModuleList(torch.nn.Linear(k, n, bias=bias) for n in widths)
        self.order = torch.randint(0, len(widths), (len(widths) + 2,), generator=gen).tolist()

    def forward(self, x):
        h = torch.tanh(x) * 2
        outs = [self.lins[i](h) for i in self.order]
        return [o.relu() if j % 2 else o for j, o in enumerate(outs)] + [h.sum(-1)]


@pytest.mark.parametrize("seed", range(12))
def test_random_sibling_groups_equal_eager_across_weight_writes(seed, computed):
    """A small differential sweep of the grouping and its derived weights: random widths
    (multiples of 8), input ranks, biases, dtypes, siblings read twice; between calls random
    weights are written in place or swapped through `.data`. Every output equals eager's."""
    gen = torch.Generator().manual_seed(seed)
    pick = lambda xs: xs[int(torch.randint(0, len(xs), (1,), generator=gen))]   # noqa: E731
    torch.manual_seed(seed)
    k = pick([8, 16, 24])
    widths = [pick([8, 16, 32]) for _ in range(pick([2, 3, 4]))]
    dtype = pick([torch.float32, torch.bfloat16])
    m = Siblings(gen, k, widths, bias=pick([False, True])).to(DEVICE, dtype)
    shape = pick([(6, k), (2, 3, k)])
    cf = pydynamo.optimize(m, options=TRITON)
    tol = {} if dtype == torch.float32 else {"rtol": 2e-2, "atol": 2e-2}
    with torch.no_grad():
        for step in range(4):
            x = torch.randn(shape, generator=gen).to(DEVICE, dtype)
            for o, r in zip(cf(x), m(x)):
                torch.testing.assert_close(o, r, **tol)
                assert o.stride() == r.stride()
            lin = pick(list(m.lins))
            if step % 2:
                lin.weight.data = torch.randn(lin.weight.shape, generator=gen).to(DEVICE, dtype)
            else:
                lin.weight.mul_(-1.5)
    # grouped wherever two distinct weights read h; remade after each write to a grouped one
    assert (computed[0] >= 1) == (len(set(m.order)) >= 2)

"""Training graphs with symbolic sizes: one joint graph over the graph's size symbols, one
backward compiled, reused for every size (issue 16: "SymInts in, SymInts saved").

A graph compiled with dynamic=True (or made dynamic by mark_dynamic, or by automatic dynamic
after a size change) is recorded once by pydynamo/aot/recorder.py over its size symbols; the
partition hands the backward the size symbols it needs as saved ints; the backward is compiled
at the first `.backward()` and serves every later size. Checked per model (an MLP, a transformer
block, a tiny GPT-2 from a transformers config) and backend (aot_eager, codegen; the MLP also
through codegen's Triton kernels under the interpreter): across 3 sequence lengths and 2 batch
sizes, losses and every gradient equal eager's; pydynamo.aot.counters shows one joint graph per
compiled graph, no re-recording and one backward compiled per graph; the number of graphs
compiled equals torch.compile's under the same `dynamic` setting (a counting backend). A size
decision a derivative formula takes is recorded and checked per new size: sizes that break it
record again (test_a_broken_size_decision_records_again).
"""
from __future__ import annotations

import copy
import functools

import pytest
import sympy
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import pydynamo
import pydynamo.aot
from codegen.pipeline import counters as codegen_counters
from pydynamo import convert_frame
from pydynamo.meta import TensorMeta
from pydynamo.symbols import size_symbol

# (batch, sequence) of the calls: 2 batch sizes x 3 sequence lengths
SIZES = [(2, 5), (2, 8), (2, 11), (3, 5), (3, 8), (3, 11)]
TOL = dict(rtol=1e-4, atol=1e-5)


class MLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2 = nn.Linear(16, 32), nn.Linear(32, 16)
        self.norm = nn.LayerNorm(16)

    def forward(self, x):
        return self.norm(x + self.fc2(F.gelu(self.fc1(x)))).pow(2).mean()


class Block(nn.Module):
    """A pre-norm transformer block with causal attention; the loss is a mean of squares."""

    def __init__(self, d=32, heads=4):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(d), nn.LayerNorm(d)
        self.qkv, self.proj = nn.Linear(d, 3 * d), nn.Linear(d, d)
        self.mlp = nn.Sequential(nn.Linear(d, 4 * d), nn.GELU(), nn.Linear(4 * d, d))

    def forward(self, x):
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) / (d // self.heads) ** 0.5
        mask = torch.ones(t, t, dtype=torch.bool, device=x.device).tril()
        att = att.masked_fill(~mask, float("-inf")).softmax(-1)
        y = (att @ v).transpose(1, 2).reshape(b, t, d)
        x = x + self.proj(y)
        x = x + self.mlp(self.ln2(x))
        return x.pow(2).mean()


def _gpt2():
    t = pytest.importorskip("transformers")
    cfg = t.GPT2Config(n_layer=2, n_embd=32, n_head=2, vocab_size=64, n_positions=32,
                       resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                       eos_token_id=0, use_cache=False)
    return t.GPT2LMHeadModel(cfg).train()


def _inputs(name, b, t, gen):
    if name == "gpt2":
        ids = torch.randint(0, 64, (b, t), generator=gen)
        return dict(input_ids=ids, labels=ids.clone())
    d = 16 if name == "mlp" else 32
    return dict(x=torch.randn(b, t, d, generator=gen, requires_grad=True))


MODELS = {"mlp": MLP, "block": Block, "gpt2": _gpt2}
# graphs per model: GPT-2's loss path takes one graph break (transformers' logger.warning_once),
# as under torch.compile
GRAPHS = {"mlp": 1, "block": 1, "gpt2": 2}


def _loss(out):
    return out if isinstance(out, torch.Tensor) else out.loss


def _step(fn, model, kwargs, mark=None):
    """(loss, gradients of the parameters and of the input tensors that require grad); `mark`
    is applied to each input tensor first (mark_dynamic)."""
    model.zero_grad(set_to_none=True)
    kwargs = {k: (v.detach().requires_grad_() if v.requires_grad else v) for k, v in kwargs.items()}
    for v in kwargs.values():
        if mark is not None:
            mark(v)
    loss = _loss(fn(**kwargs))
    loss.backward()
    grads = [p.grad for p in model.parameters()] + \
        [v.grad for v in kwargs.values() if v.requires_grad]
    return loss.detach(), grads


def _run(name, backend, dynamic, mark=None, options=None):
    """Trains through SIZES under pydynamo; returns (graphs compiled, aot counters, codegen
    counters), comparing every step with eager."""
    torch.manual_seed(0)
    model = MODELS[name]()
    ref = copy.deepcopy(model)
    gen = torch.Generator().manual_seed(1)
    pydynamo.reset()
    pydynamo.aot.counters.clear()
    cg_before = dict(codegen_counters)
    frames: list = []
    convert_frame.RECORDERS.append(frames.append)
    try:
        kw = {"options": options} if options else {}
        fn = pydynamo.optimize(model, backend=backend, dynamic=dynamic, **kw)
        for b, t in SIZES:
            kwargs = _inputs(name, b, t, gen)
            loss, grads = _step(fn, model, kwargs, mark)
            ref_loss, ref_grads = _step(ref, ref, kwargs)
            torch.testing.assert_close(loss, ref_loss, **TOL, msg=lambda m: f"loss at {b}x{t}: {m}")
            assert len(grads) == len(ref_grads)
            for i, (g, r) in enumerate(zip(grads, ref_grads)):
                torch.testing.assert_close(g, r, **TOL, msg=lambda m, i=i: f"grad {i} at {b}x{t}: {m}")
    finally:
        convert_frame.RECORDERS.remove(frames.append)
        pydynamo.reset()
    graphs = sum(len(f.graphs) for f in frames if isinstance(f, convert_frame.FrameResult))
    cg = {k: v - cg_before.get(k, 0) for k, v in codegen_counters.items() if v != cg_before.get(k, 0)}
    return graphs, dict(pydynamo.aot.counters), cg


def _torch_compile_graphs(name, dynamic, mark=None) -> int:
    """Graphs torch.compile compiles for the same calls (a counting backend)."""
    import torch._dynamo
    torch.manual_seed(0)
    model = MODELS[name]()
    gen = torch.Generator().manual_seed(1)
    n = [0]

    def counting(gm, example_inputs):
        n[0] += 1
        return gm.forward
    torch._dynamo.reset()
    try:
        fn = torch.compile(model, backend=counting, dynamic=dynamic)
        for b, t in SIZES:
            _step(fn, model, _inputs(name, b, t, gen), mark)
    finally:
        torch._dynamo.reset()
    return n[0]


@functools.lru_cache(maxsize=None)
def _torch_compile_graphs_once(name, dynamic) -> int:
    """_torch_compile_graphs without a mark, computed once per module: the aot_eager and the
    codegen test of a model compare against the same count (GPT-2's took seconds each time)."""
    return _torch_compile_graphs(name, dynamic)


def _check_one_joint(name, aot, cg, n_graphs):
    assert aot.get("eager_fallback", 0) == 0, aot
    assert aot.get("joint_concrete", 0) == 0, f"a dynamic graph was recorded at concrete sizes: {aot}"
    assert aot.get("joint_recompiles", 0) == 0, f"recorded again for new sizes: {aot}"
    assert aot.get("joint_graphs") == GRAPHS[name], aot
    # one backward per graph (GPT-2's first graph: the variant for logits the loss does not
    # reach, its only backward)
    assert aot.get("backward_compiled") == GRAPHS[name], aot
    assert aot.get("backward_calls") == len(SIZES) * GRAPHS[name], aot
    assert cg.get("eager_fallback_graphs", 0) == 0, f"codegen ran graphs eagerly: {cg}"
    assert cg.get("input_mismatch_calls", 0) == 0, f"a compiled graph refused a size: {cg}"


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
@pytest.mark.parametrize("name", ["mlp", "block", "gpt2"])
def test_dynamic_true_records_one_joint(name, backend):
    graphs, aot, cg = _run(name, backend, dynamic=True)
    print(f"\n{name} [{backend}, dynamic=True]: {graphs} graphs, aot {aot}, codegen {cg}")
    _check_one_joint(name, aot, cg, graphs)
    assert graphs == GRAPHS[name] == _torch_compile_graphs_once(name, True)


def test_dynamic_true_triton_kernels():
    """The MLP through codegen's Triton kernels (the interpreter without a GPU)."""
    graphs, aot, cg = _run("mlp", "codegen", dynamic=True, options={"backend_kernels": "triton"})
    _check_one_joint("mlp", aot, cg, graphs)
    assert cg.get("triton_graphs_compiled", 0) > 0, cg


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
@pytest.mark.parametrize("name", ["mlp", "block"])
def test_automatic_dynamic(name, backend):
    """dynamic=None: the first size compiles a static graph, the second (a new sequence
    length) one with a symbolic sequence length, the fourth (a new batch size) one with both
    symbolic, which serves the rest; each graph's joint recorded once, its backward compiled
    once; graph counts as torch.compile's."""
    graphs, aot, cg = _run(name, backend, dynamic=None)
    assert graphs == _torch_compile_graphs_once(name, None) == 3
    assert aot.get("joint_graphs") == 3 and aot.get("joint_recompiles", 0) == 0, aot
    assert aot.get("joint_concrete", 0) == 0 and aot.get("backward_compiled") == 3, aot
    assert cg.get("eager_fallback_graphs", 0) == 0 and cg.get("input_mismatch_calls", 0) == 0, cg


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
def test_mark_dynamic(backend):
    """mark_dynamic on the batch and sequence dims (pydynamo's; torch._dynamo's for
    torch.compile): one graph, one joint, one backward."""
    def marker(mark_dynamic):
        def mark(v):
            if isinstance(v, torch.Tensor) and v.dim() == 3:
                mark_dynamic(v, [0, 1])
        return mark
    import torch._dynamo
    graphs, aot, cg = _run("block", backend, dynamic=None, mark=marker(pydynamo.mark_dynamic))
    assert graphs == _torch_compile_graphs("block", None, mark=marker(torch._dynamo.mark_dynamic)) == 1
    _check_one_joint("block", aot, cg, graphs)


def test_backward_reads_saved_size_symbols():
    """The partition saves the size symbols (ints) the backward needs, never a size expression:
    the backward computes its sizes from them."""
    from pydynamo.aot.partition import partition
    from pydynamo.aot.recorder import record
    gm, examples = _symbolic_graph(lambda x: x.sum(), [(5, 4)])
    joint = record(gm, examples)
    assert joint.sizes is not None
    _, bw_gm, saved, _, _ = partition(joint.gm, len(joint.computed), joint.num_tangents,
                                      joint.num_inputs)
    ints = [s for s in saved if not hasattr(s.meta.get("val"), "shape")]
    assert ints and all(isinstance(s.meta["val"], sympy.Symbol) for s in ints), \
        [(s, s.meta.get("val")) for s in saved]


def _assert_loss_and_grad_as_eager(f, x, loss):
    """Backward through the compiled `loss`; it and x's gradient equal eager's f."""
    loss.backward()
    x2 = x.detach().requires_grad_()
    ref = f(x2)
    ref.backward()
    torch.testing.assert_close(loss, ref)
    torch.testing.assert_close(x.grad, x2.grad)


def _symbolic_graph(fn, shapes):
    """`fn` traced, its placeholders recorded with symbolic first dims (s0, s1, ...) as the
    executor records them; example inputs of `shapes`."""
    gm = torch.fx.symbolic_trace(fn)
    examples = [torch.randn(*s, requires_grad=True) for s in shapes]
    for i, (n, x) in enumerate(zip([n for n in gm.graph.nodes if n.op == "placeholder"], examples)):
        s = size_symbol(f"s{i}")
        n.meta["val"] = TensorMeta.from_tensor(x, shape=(s,) + tuple(x.shape[1:]), stride=x.stride())
    return gm, examples


def test_a_broken_size_decision_records_again():
    """`x[:3]` takes min(3, s0): the recording decides `3 <= s0` on its example (5 rows) and
    records that decision; a call with 2 rows breaks it and records again (never the first
    graph's 3-row slice), with eager's values and gradients; 4 rows reuses the first."""
    from pydynamo.aot.runtime import aot_compile

    def f(x):
        return (x[:3].sin() * 2).sum()
    gm, examples = _symbolic_graph(f, [(5, 4)])
    pydynamo.aot.counters.clear()
    run = aot_compile(gm, examples, lambda g, ex: g.forward, lambda g, ex: g.forward)
    assert run.compiled.joint.sizes is not None
    for rows, recompiles in ((5, 0), (4, 0), (2, 1), (6, 1)):
        x = torch.randn(rows, 4, requires_grad=True)
        (loss,) = run(x)
        _assert_loss_and_grad_as_eager(f, x, loss)
        assert pydynamo.aot.counters.get("joint_recompiles", 0) == recompiles, (rows, dict(pydynamo.aot.counters))


@pytest.mark.parametrize("backend", ["aot_eager", "codegen"])
def test_concatenated_sizes_add_up(backend):
    """torch.diff with prepend concatenates (torch.sym_sum of the sizes) then slices by the
    sum: a sum that counted its first term twice recorded a slice one row too long (found on
    transformers' GPT-2 mask code; the compiled forward raised, or would have misread)."""
    def f(x):
        return (torch.diff(x, dim=0, prepend=x[:1] * 2) ** 2).sum()
    g = pydynamo.optimize(f, backend=backend, dynamic=True)
    pydynamo.reset()
    pydynamo.aot.counters.clear()
    try:
        for n in (4, 6, 9):
            x = torch.randn(n, 3, requires_grad=True)
            _assert_loss_and_grad_as_eager(f, x, g(x))
    finally:
        pydynamo.reset()
    aot = pydynamo.aot.counters
    assert aot["joint_graphs"] == 1 and aot.get("joint_recompiles", 0) == 0, dict(aot)
    assert aot.get("error_replays", 0) == 0 and aot.get("joint_concrete", 0) == 0, dict(aot)

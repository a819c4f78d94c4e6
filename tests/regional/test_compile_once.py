"""Regional compilation, level C (issue 20; codegen/region_calls.py, option compile_regions).

Each repeated block a region template made becomes one call of a sub-graph compiled once through
the codegen pipeline. Every test compares against eager on random inputs (outputs, strides), and
reads codegen's counters to check what happened: the sub-graph compiled once for N instances
(`region_graphs_compiled`), every instance outlined and called (`region_instances_outlined`,
`region_calls`), or, for what level C cannot handle, the flat graph compiled instead. The
graphs and breaks pydynamo makes are the same with the switch on and off (level C lives inside
codegen: backends and the tracer see the same flat graph).
"""
import os
import sys

import pytest
import torch
import torch.nn as nn

import pydynamo
from codegen import region_calls
from codegen.runtime import counters
from pydynamo import convert_frame
from pydynamo.meta import TensorMeta

transformers = pytest.importorskip("transformers")

TRITON = pytest.param("triton", marks=pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1",
    reason="Triton kernels on CPU tensors run under TRITON_INTERPRET=1 only"))


def gpt2(layers=4):
    cfg = transformers.GPT2Config(n_layer=layers, n_embd=32, n_head=2, vocab_size=100,
                                  n_positions=64, use_cache=False, resid_pdrop=0.0,
                                  embd_pdrop=0.0, attn_pdrop=0.0)
    cfg._attn_implementation = "eager"
    return transformers.GPT2Model(cfg)


def bert(layers=4):
    cfg = transformers.BertConfig(num_hidden_layers=layers, hidden_size=32, num_attention_heads=2,
                                  intermediate_size=64, vocab_size=100, max_position_embeddings=64,
                                  hidden_dropout_prob=0.0, attention_probs_dropout_prob=0.0)
    cfg._attn_implementation = "eager"
    return transformers.BertModel(cfg)


def region_counts():
    return {k: v for k, v in counters.items() if k.startswith("region_")}


def compiled_run(model, args, options, calls=1, grad=False):
    """(outputs of each call, {graphs, breaks}, region counters) of `model` compiled fresh.
    `args`: a tuple, a dict (keywords), or a list of either (one per call)."""
    pydynamo.reset()
    counters.clear()
    region_calls.clear_cache()
    recs = []
    convert_frame.RECORDERS.append(recs.append)
    try:
        f = pydynamo.optimize(model, options=options)
        outs = []
        for i in range(calls):
            with torch.set_grad_enabled(grad):
                a = args[i] if isinstance(args, list) else args
                outs.append(f(**a) if isinstance(a, dict) else f(*a))
    finally:
        convert_frame.RECORDERS.remove(recs.append)
    frames = [r for r in recs if isinstance(r, convert_frame.FrameResult)]
    shape = {"graphs": sum(len(r.graphs) for r in frames),
             "breaks": sum(r.graph_break is not None for r in frames) + len(recs) - len(frames)}
    return outs, shape, region_counts()


def assert_same(out, ref):
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)
    assert out.stride() == ref.stride()


def transformer_inputs(kind):
    torch.manual_seed(1)
    ids = torch.randint(0, 100, (2, 8))
    if kind == "gpt2":
        return (ids,)
    mask = torch.ones(2, 8, dtype=torch.long)
    mask[1, 5:] = 0          # a padded row: the extended mask is an argument of every layer
    return (ids, mask)


@pytest.mark.parametrize("kernels", ["cpp", TRITON])
@pytest.mark.parametrize("kind", ["gpt2", "bert"])
def test_transformer_block_compiled_once(kind, kernels):
    torch.manual_seed(0)
    layers = 4
    m = (gpt2 if kind == "gpt2" else bert)(layers).eval()
    args = transformer_inputs(kind)
    with torch.no_grad():
        ref = m(*args)[0]
    with torch.no_grad():
        (off,), shape_off, _ = compiled_run(m, args, {"backend_kernels": kernels})
        (on,), shape_on, regions = compiled_run(m, args, {"backend_kernels": kernels,
                                                          "compile_regions": True})
    assert_same(off[0], ref)
    assert_same(on[0], ref)
    assert shape_on == shape_off
    # each template compiled once for its `layers` instances: one (the block) with this
    # transformers; where a library version's block is declined as a template (transformers
    # 5.17's BERT layer), its modules are the regions, each still compiled once
    compiled = regions.get("region_graphs_compiled")
    assert compiled >= 1 and regions.get("region_instances_outlined") == compiled * layers, regions
    assert regions.get("region_calls") == compiled * layers, regions
    assert not regions.get("region_graphs_flat"), regions


def test_second_call_hits_the_cache():
    """A second call (new random ids, same shape) runs the compiled code: nothing compiled again,
    and its outputs equal eager's."""
    torch.manual_seed(0)
    m = gpt2().eval()
    args = [(torch.randint(0, 100, (2, 8)),), (torch.randint(0, 100, (2, 8)),)]
    with torch.no_grad():
        outs, shape, _ = compiled_run(m, args, {"compile_regions": True}, calls=2)
        refs = [m(*a)[0] for a in args]
    assert counters["region_graphs_compiled"] == 1 and counters["graphs_compiled"] == 2
    for out, ref in zip(outs, refs):
        assert_same(out[0], ref)
    assert shape["graphs"] == 1


def test_training_with_the_switch_on():
    """With grad enabled the graph takes the training path (aot recorder -> forward/backward
    graphs without region marks): level C is inference-only, and training stays correct."""
    torch.manual_seed(0)
    m = gpt2(3).train()
    ref_m = gpt2(3).train()
    ref_m.load_state_dict(m.state_dict())
    ids = torch.randint(0, 100, (2, 8))
    (out,), _, regions = compiled_run(m, (ids,), {"compile_regions": True}, grad=True)
    out[0].square().mean().backward()
    ref = ref_m(ids)[0]
    ref.square().mean().backward()
    assert_same(out[0], ref)
    for (name, p), q in zip(m.named_parameters(), ref_m.parameters()):
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-4, atol=1e-5, msg=name)
    assert not regions.get("region_instances_outlined")


# --- plain module stacks: what is outlined and what stays flat ----------------------------------

class Block(nn.Module):
    def __init__(self, d=16, inplace=False, view_result=False):
        super().__init__()
        self.lin = nn.Linear(d, d)
        self.norm = nn.LayerNorm(d)
        self.inplace, self.view_result = inplace, view_result

    def forward(self, x, y):
        h = self.lin(self.norm(x))
        h = h.relu_() if self.inplace else torch.relu(h)
        out = x + h * y
        return out.view(-1) if self.view_result else out


class Stack(nn.Module):
    def __init__(self, n=4, **kw):
        super().__init__()
        self.blocks = nn.ModuleList(Block(**kw) for _ in range(n))

    def forward(self, x, y):
        # (a frame input has a source, an intermediate none, and a view is keyed apart from a
        # new tensor: a template's key differs, so the first block would be a template of its own)
        x = x.tanh()
        for b in self.blocks:
            x = b(x, y)
            if self.blocks[0].view_result:
                x = x.view(4, 16)
        return x * 2


def module_run(make, n_inputs, options):
    """`make()` compiled fresh with `options` on random (4, 16) inputs under no_grad; its
    outputs are checked against eager's; returns (graphs and breaks, region counters)."""
    torch.manual_seed(0)
    m = make().eval()
    args = tuple(torch.randn(4, 16) for _ in range(n_inputs))
    with torch.no_grad():
        ref = m(*args)
        (out,), shape, regions = compiled_run(m, args, options)
    for o, r in zip(*((out, ref) if isinstance(ref, tuple) else ((out,), (ref,)))):
        assert_same(o, r)
    return shape, regions


def stack_run(options, **kw):
    return module_run(lambda: Stack(**kw), 2, options)


def test_a_later_instance_reads_an_earlier_instances_result():
    """Regression: outlining instance k replaced its result nodes, and instance k+1's argument
    was still the erased node (the outlined graph failed to lint: the flat graph ran)."""
    _, regions = stack_run({"compile_regions": True, "strict": True})
    assert regions.get("region_instances_outlined") == 4 and regions["region_graphs_compiled"] == 1
    assert not regions.get("region_graphs_flat")


class AuxBlock(Block):
    def forward(self, x, y):
        h = torch.relu(self.lin(self.norm(x)))
        return x + h * y, h.sum(-1)


class AuxStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(AuxBlock() for _ in range(4))

    def forward(self, x, y):
        x, total = x.tanh(), 0
        for i, b in enumerate(self.blocks):
            x, aux = b(x, y)
            if i != 2:
                total = total + aux
        return x, total


def test_an_instance_unlike_the_first_stays_flat():
    """Block 2's second result is unused, so the graph's dead code elimination dropped its sum:
    its nodes are not the first instance's shape and it is lowered inline; the other three
    share one call."""
    _, regions = module_run(AuxStack, 2, {"compile_regions": True})
    assert regions.get("region_instances_outlined") == 3, regions
    assert regions.get("region_instances_flat") == 1, regions
    assert regions.get("region_graphs_compiled") == 1, regions


def test_a_block_writing_in_place_stays_flat():
    """relu_ inside the block: the graph writes in place, so the codegen backend has the aot
    recorder functionalize it first, and the recorded graph carries no region marks (outlining
    itself also refuses an instance that writes in place: an extern must be pure)."""
    _, regions = stack_run({"compile_regions": True}, inplace=True)
    assert not regions.get("region_instances_outlined"), regions


def test_a_block_returning_a_view_stays_flat():
    """The block returns a view of its own result: the extern's outputs are new tensors only.
    (Its Linear and LayerNorm calls are one node each: too small to be regions.)"""
    _, regions = stack_run({"compile_regions": True}, view_result=True)
    assert not regions.get("region_instances_outlined"), regions
    assert regions.get("region_instances_flat") == 3, regions    # blocks 1-3 (block 0: no view in)


def test_custom_backend_sees_the_flat_graph():
    """Level C is codegen's: a user backend gets the graph a trace makes, without region calls."""
    torch.manual_seed(0)
    m = Stack().eval()
    seen = []

    def backend(gm, example_inputs):
        seen.append([n.target for n in gm.graph.nodes if n.op == "call_function"])
        return gm.forward
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    pydynamo.reset()
    with torch.no_grad():
        out = pydynamo.optimize(m, backend=backend)(x, y)
        assert_same(out, m(x, y))
    assert seen and not any(type(t).__name__ == "RegionCall" for g in seen for t in g)


class Layers(nn.Module):
    """Four blocks as attributes (a ModuleList's iteration reads its identity: no template)."""

    def __init__(self):
        super().__init__()
        self.b0, self.b1, self.b2, self.b3 = (Block() for _ in range(4))

    def forward(self, x, y):
        return self.b3(self.b2(self.b1(self.b0(x, y), y), y), y)


class Wrapper(nn.Module):
    """The layers inside a module called once (a template with one instance around them)."""

    def __init__(self):
        super().__init__()
        self.layers = Layers()

    def forward(self, x, y):
        return self.layers(x.tanh(), y) + 1


def test_layers_inside_a_module_called_once():
    """The layers inside a module called once are the regions. (Level B declines the module
    around them today, as a replayed call inside a recording reads like a module identity read;
    were its template kept, its one-instance marks would stack above the layers'.)"""
    _, regions = module_run(Wrapper, 2, {"compile_regions": True})
    assert regions.get("region_instances_outlined") == 4, regions
    assert regions.get("region_graphs_compiled") == 1, regions


class Inner(nn.Module):
    def __init__(self, d=16):
        super().__init__()
        self.lin = nn.Linear(d, d)

    def forward(self, x):
        return torch.nn.functional.gelu(self.lin(x))


class ViewBlock(nn.Module):
    """Returns a view (not outlinable); its two Inner modules are."""

    def __init__(self):
        super().__init__()
        self.a, self.b = Inner(), Inner()

    def forward(self, x):
        return (x + self.b(self.a(x) * 2)).view(-1)


class ViewStack(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(ViewBlock() for _ in range(3))

    def forward(self, x):
        x = x.tanh().view(-1).view(4, 16)
        for b in self.blocks:
            x = b(x).view(4, 16)
        return x


def test_inner_modules_outlined_where_the_block_cannot_be():
    """Regression: a replayed block's copies took the block's mark only, dropping the marks of
    the modules inside it, so only the first block's Inner calls were instances. Marks stack
    now; the outermost template with two or more outlinable instances is the region.
    The blocks return views, so they stay flat; the Inner modules inside them (two per
    block) are the regions instead: two templates (`a` is called on a view, `b` on a new
    tensor: their keys differ) of one signature, so one sub-graph compiled once for all six
    (the second template finds it in the process-wide cache)."""
    _, regions = module_run(ViewStack, 1, {"compile_regions": True})
    assert regions.get("region_instances_outlined") == 6, regions
    assert regions.get("region_instances_flat") == 3, regions
    assert regions.get("region_graphs_compiled") == 1, regions
    assert regions.get("region_cache_hits") == 1, regions


def test_region_call_checks_its_argument_layouts():
    """An instance whose arguments reach the region in another layout than the sub-graph's
    metadata gets no compiled code (the lowering calls the sub-graph eagerly), and a RegionCall
    called directly runs its sub-graph eagerly."""
    g = torch.fx.Graph()
    a = g.placeholder("a")
    a.meta["val"] = TensorMeta((2, 3), (3, 1), torch.float32, torch.device("cpu"))
    g.output((g.call_function(torch.sin, (a,)),))
    compiled = []
    call = region_calls.RegionCall(0, torch.fx.GraphModule(torch.nn.Module(), g),
                                   lambda sub, examples: compiled.append(examples) or sub)
    counters.clear()
    assert call.compiled([((2, 3), (1, 2), torch.float32)], torch.device("cpu")) is None
    assert counters["region_layout_mismatches"] == 1 and not compiled
    assert call.compiled([((2, 3), (3, 1), torch.float32)], torch.device("cpu")) is not None
    assert call.compiled([((2, 3), (3, 1), torch.float32)], torch.device("cpu")) is not None
    assert len(compiled) == 1 and counters["region_graphs_compiled"] == 1
    x = torch.randn(3, 2).t()
    torch.testing.assert_close(call(x)[0], torch.sin(x))


class FlagStack(Stack):
    """Reads a Python flag outside the layers: changing it recompiles the whole graph."""

    def __init__(self):
        super().__init__()
        self.scale = 2.0

    def forward(self, x, y):
        return super().forward(x, y) * self.scale


def test_a_recompile_finds_its_regions_compiled():
    """The flag changes, the frame recompiles (its guard failed), and the new graph's layers are
    the same sub-graph: found in the process-wide cache, not compiled again."""
    torch.manual_seed(0)
    m = FlagStack().eval()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    pydynamo.reset()
    counters.clear()
    region_calls.clear_cache()
    f = pydynamo.optimize(m, options={"compile_regions": True})
    with torch.no_grad():
        assert_same(f(x, y), m(x, y))
        m.scale = 3.0
        assert_same(f(x, y), m(x, y))
    assert counters["region_graphs_compiled"] == 1 and counters["region_cache_hits"] == 1, \
        region_counts()
    assert counters["region_instances_outlined"] == 8


class Zero(nn.Module):
    def __init__(self, z):
        super().__init__()
        self.lin, self.z = nn.Linear(16, 16), z

    def forward(self, x):
        return torch.relu(self.lin(x)) * self.z


class Zeros(nn.Module):
    def __init__(self):
        super().__init__()
        self.blocks = nn.ModuleList(Zero(z) for z in (0.0, 0.0, -0.0, -0.0))

    def forward(self, x):
        x = x.tanh()
        return tuple(1 / b(x) for b in self.blocks)     # (+-inf: the zeros' signs)


def test_negative_zero_is_another_region():
    """Regression: -0.0 == 0.0, so the EQUALS_MATCH guard on `self.z` let the blocks with -0.0
    replay the template recorded with 0.0 (level B), and a frame compiled with 0.0 ran for -0.0
    (pydynamo/guards.py: a float zero's sign is checked too); level C's signature compares a
    float by its text for the same reason. The -0.0 blocks miss the template (one per key) and
    are traced inline; the 0.0 blocks share one sub-graph; signs as eager's."""
    _, regions = module_run(Zeros, 1, {"compile_regions": True})
    assert regions.get("region_instances_outlined") == 2, regions
    assert regions.get("region_graphs_compiled") == 1, regions


def test_negative_zero_attribute_recompiles():
    """Regression (pydynamo/guards.py): the frame compiled with z = 0.0 is not run for -0.0."""
    m = Zero(0.0)
    x = torch.randn(4, 16)
    pydynamo.reset()
    f = pydynamo.optimize(m, backend="eager")
    with torch.no_grad():
        torch.testing.assert_close(1 / f(x), 1 / m(x))
        m.z = -0.0
        torch.testing.assert_close(1 / f(x), 1 / m(x))


class ClassScale(nn.Module):
    scale = 2.0

    def forward(self, x):
        return x * self.scale


def test_instance_attribute_shadowing_a_class_attribute_recompiles():
    """Found by level C's tests (templates and codegen not involved): a read of `self.scale`
    that found the class attribute was guarded on the class's value only; an instance
    attribute set after compiling shadows it, and the old graph kept running (x * 2 for
    x * 3). The read now also guards that the instance's __dict__ has no such key
    (sources.InstanceDictHasSource)."""
    m = ClassScale()
    x = torch.randn(4)
    pydynamo.reset()
    f = pydynamo.optimize(m, backend="eager")
    torch.testing.assert_close(f(x), x * 2)
    m.scale = 3.0
    torch.testing.assert_close(f(x), x * 3)


def test_one_library_for_the_graph_and_its_regions():
    """C++: the region's kernels go into the library of the graph calling it (one g++ run), and
    the outer wrapper calls the region's compiled code (not the sub-graph run eagerly)."""
    torch.manual_seed(0)
    m = Stack().eval()
    x, y = torch.randn(4, 16), torch.randn(4, 16)
    pydynamo.reset()
    region_calls.clear_cache()
    recs = []
    convert_frame.RECORDERS.append(recs.append)
    try:
        with torch.no_grad():
            assert_same(pydynamo.optimize(m, options={"compile_regions": True})(x, y), m(x, y))
    finally:
        convert_frame.RECORDERS.remove(recs.append)
    outer = recs[0].graphs[0].backend_fn
    externs = outer.__globals__["_externs"]
    assert len(externs) == 4 and all(e.library_path == outer.library_path for e in externs)
    assert not any(isinstance(e, region_calls.Pending) for e in externs)


# --- real models: transformers' zoo (tests/zoo/zoo_runner.py builds them) -----------------------

# zoo models (2 layers) whose graphs take level C's less common paths; the zoo sweep
# (scripts/model_zoo.py --backend codegen --options '{"compile_regions": true}' --layers 2) found
# no model whose result differs from the flat graph's: these keep the paths it saw covered.
# model -> the region counters that must be non-zero (besides region_instances_outlined)
ZOO_PATHS = {
    "ConvNextModel": ("region_graphs_compiled",),           # several templates, convolutions
    "CvtModel": ("region_layout_mismatches",),      # instances whose arguments come in another
                                                    # layout: their sub-graph runs eagerly
    "SamVisionModel": ("region_layout_mismatches", "region_instances_flat"),
    "Qwen3VLTextModel": ("region_graphs_flat",),    # the outlined graph refused (an in-place
                                                    # setitem): the flat graph is compiled
}


@pytest.mark.parametrize("name", sorted(ZOO_PATHS))
def test_zoo_model_with_compile_regions(name):
    zoo = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "zoo")
    sys.path.insert(0, zoo)
    try:
        import zoo_runner
    finally:
        sys.path.remove(zoo)
    try:
        model, config = zoo_runner.build(name, layers=2)
    except Exception as e:      # another transformers version: no such model or config
        pytest.skip(f"{name} does not build here: {type(e).__name__}: {e}")
    inputs = zoo_runner.candidate_inputs(model, config)[0]
    with torch.no_grad():
        ref = model(**inputs)
    # (compiled_run calls under grad disabled: inference, as the zoo runs it)
    (off,), shape_off, _ = compiled_run(model, inputs, {})
    (on,), shape_on, regions = compiled_run(model, inputs, {"compile_regions": True})
    assert zoo_runner.same(off, ref) == "" and zoo_runner.same(on, ref) == ""
    assert shape_on == shape_off
    assert regions.get("region_instances_outlined"), regions
    for key in ZOO_PATHS[name]:
        assert regions.get(key), (key, regions)

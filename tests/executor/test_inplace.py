"""In-place semantics under both backends: every `inplace=` argument of torch.nn.functional and
torch.nn, trailing-underscore Tensor methods, setitem and out=, on inputs and intermediates.

Each case is compared with eager through the shared differential helper (tests/differential.py):
the compiled function is called on the user's own tensors, first call included, and outputs,
mutated inputs and aliasing are compared. The F / nn lists are enumerated from signatures, so a
new function or module with an `inplace` parameter is covered without editing this file.
Regression for issue 14 item 0: `F.relu(y, inplace=True)` & co returned the input unchanged
(the call node had no users and was dead-code eliminated; nothing said it writes `y`).
"""
import inspect
import os
import sys

import pytest
import torch
import torch.nn as nn
import torch.nn.functional as F

import pydynamo
from pydynamo.mutation import inplace_position, keyword_inplace, mutation_of

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import assert_same_as_eager, run_differential  # noqa: E402

BACKENDS = ["eager", "codegen"]


def _functional_with_inplace():
    out = []
    for name in sorted(dir(F)):
        fn = getattr(F, name)
        if name.startswith("_") or not callable(fn):
            continue
        try:
            params = inspect.signature(fn).parameters
        except (TypeError, ValueError):
            continue
        if "inplace" in params:
            out.append(name)
    return out


def _modules_with_inplace():
    out = []
    for name in sorted(dir(nn)):
        cls = getattr(nn, name)
        if not (isinstance(cls, type) and issubclass(cls, nn.Module)):
            continue
        try:
            params = inspect.signature(cls.__init__).parameters
        except (TypeError, ValueError):
            continue
        if "inplace" in params:
            out.append(name)
    return out


FUNCTIONAL = _functional_with_inplace()
MODULES = _modules_with_inplace()

# deterministic arguments before `inplace` (dropouts: not training, or p=0 while training)
_F_ARGS = {"threshold": (0.1, -2.0), "dropout": (0.5, False), "alpha_dropout": (0.5, False),
           "feature_alpha_dropout": (0.5, False), "dropout1d": (0.5, False), "dropout2d": (0.5, False),
           "dropout3d": (0.0, True), "rrelu": (0.1, 0.3, False), "hardtanh": (-0.5, 0.5),
           "leaky_relu": (0.2,), "elu": (0.7,), "celu": (0.7,)}
_SHAPE = {"dropout1d": (2, 3, 5), "dropout3d": (2, 3, 2, 4, 5)}
_M_ARGS = {"Threshold": (0.1, -2.0), "Hardtanh": (-0.5, 0.5)}


def _input(name):
    return torch.randn(*_SHAPE.get(name, (2, 3, 4, 5)))


def test_enumeration_finds_the_known_ones():
    assert {"relu", "relu6", "silu", "hardswish", "leaky_relu", "elu", "hardtanh", "celu", "selu",
            "rrelu", "dropout", "threshold", "mish", "hardsigmoid"} <= set(FUNCTIONAL)
    assert {"ReLU", "ReLU6", "SiLU", "Hardswish", "LeakyReLU", "ELU", "Dropout", "Threshold"} <= set(MODULES)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("spelling", ["keyword", "positional"])
@pytest.mark.parametrize("where", ["input", "intermediate"])
@pytest.mark.parametrize("name", FUNCTIONAL)
def test_functional_inplace_flag_writes_and_returns_its_input(name, where, spelling, backend):
    fn = getattr(F, name)
    extra = _F_ARGS.get(name, ())
    pos = inplace_position(fn)
    if spelling == "positional" and (pos is None or pos != len(extra) + 1):
        pytest.skip("the flag is not reachable positionally with these arguments")

    def call(t):
        if spelling == "keyword":
            return fn(t, *extra, inplace=True)
        return fn(t, *extra, True)

    if where == "input":
        def f(y):
            r = call(y)
            return r + 1, r is y, y * 2       # later reads of y see the written value
    else:
        def f(y):
            t = y * 2
            r = call(t)
            return r + 1, r is t, t - 1
    assert_same_as_eager(f, [lambda: (_input(name),)] * 2, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", MODULES)
def test_module_inplace_true(name, backend):
    cls = getattr(nn, name)
    args = _M_ARGS.get(name, ())
    m = cls(*args, inplace=True).eval()

    def f(y):
        a = m(y)                 # on the input
        t = y * 3
        b = m(t)                 # on an intermediate
        return a + 1, b + t, a is y, b is t

    assert_same_as_eager(f, [lambda: (_input(name.lower()),)] * 2, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_dropout_inplace_returns_the_written_input(backend):
    pydynamo.reset()

    def f(y):
        r = F.dropout(y, 0.5, True, True)
        return r, r is y

    x = torch.randn(64) + 5  # no zeros: the dropped elements are the zeros after the call
    orig = x.clone()
    r, same = pydynamo.optimize(f, backend=backend)(x)
    assert same and r is x
    kept = x != 0
    assert 0 < int(kept.sum()) < 64
    torch.testing.assert_close(x[kept], orig[kept] * 2)


class BasicBlock(nn.Module):
    def __init__(self, c=4):
        super().__init__()
        self.conv1 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn1 = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv2 = nn.Conv2d(c, c, 3, padding=1, bias=False)
        self.bn2 = nn.BatchNorm2d(c)

    def forward(self, x):
        identity = x
        out = self.relu(self.bn1(self.conv1(x)))
        out = self.bn2(self.conv2(out))
        out += identity
        return self.relu(out)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("training", [False, True])
def test_resnet_basic_block_with_inplace_relu(backend, training):
    torch.manual_seed(0)
    block = BasicBlock().train(training)
    for bn in (block.bn1, block.bn2):
        bn.running_mean.uniform_(-0.5, 0.5)
        bn.running_var.uniform_(0.5, 1.5)
    with torch.no_grad():
        assert_same_as_eager(block, [lambda: (torch.randn(2, 4, 6, 6),)] * 3, backend=backend)


@pytest.mark.parametrize("dynamic", [True, None])
@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_flag_with_symbolic_sizes(backend, dynamic):
    def f(y):
        t = y * 2
        F.relu(t, inplace=True)
        F.hardtanh(y, -0.5, 0.5, True)
        return t + y, y

    makers = [lambda n=n: (torch.randn(n, 3),) for n in (4, 5, 6, 7)]
    assert_same_as_eager(f, makers, backend=backend, dynamic=dynamic)


# --- trailing-underscore methods -----------------------------------------------------------------

_METHODS = {
    "add_": lambda t, o: t.add_(o, alpha=2),
    "sub_": lambda t, o: t.sub_(1.5),
    "mul_": lambda t, o: t.mul_(o),
    "div_": lambda t, o: t.div_(2),
    "clamp_": lambda t, o: t.clamp_(-0.3, 0.4),
    "clamp_min_": lambda t, o: t.clamp_min_(0.1),
    "sigmoid_": lambda t, o: t.sigmoid_(),
    "tanh_": lambda t, o: t.tanh_(),
    "relu_": lambda t, o: t.relu_(),
    "exp_": lambda t, o: t.exp_(),
    "abs_": lambda t, o: t.abs_(),
    "neg_": lambda t, o: t.neg_(),
    "fill_": lambda t, o: t.fill_(3.0),
    "zero_": lambda t, o: t.zero_(),
    "copy_": lambda t, o: t.copy_(o),
    "masked_fill_": lambda t, o: t.masked_fill_(o > 0, -1.0),
    "index_add_": lambda t, o: t.index_add_(0, torch.tensor([0, 2]), o[:2]),
    "index_fill_": lambda t, o: t.index_fill_(1, torch.tensor([1]), 7.0),
    "scatter_": lambda t, o: t.scatter_(1, torch.tensor([[0], [1], [2], [3]]), 5.0),
    "lerp_": lambda t, o: t.lerp_(o, 0.25),
    "addcmul_": lambda t, o: t.addcmul_(o, o, value=0.5),
    "pow_": lambda t, o: t.pow_(2),
    "t_": lambda t, o: t.t_(),
    "transpose_": lambda t, o: t.transpose_(0, 1),
    "unsqueeze_": lambda t, o: t.unsqueeze_(1),
    "squeeze_": lambda t, o: t.unsqueeze_(0).squeeze_(0),
    "iadd": lambda t, o: t.__iadd__(o),
    "setitem": lambda t, o: t.__setitem__(slice(1, 3), 0.5),
    "torch.relu_": lambda t, o: torch.relu_(t),
    "F.relu_": lambda t, o: F.relu_(t),
    "torch.Tensor.mul_": lambda t, o: torch.Tensor.mul_(t, 3),
    "out=": lambda t, o: torch.add(o, 1, out=t),
}


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("where", ["input", "intermediate"])
@pytest.mark.parametrize("name", sorted(_METHODS))
def test_trailing_underscore_methods(name, where, backend):
    op = _METHODS[name]
    if where == "input":
        def f(x, o):
            r = op(x, o)
            return r, x + 1, r is x
    else:
        def f(x, o):
            t = x * 2
            r = op(t, o)
            return r, t + 1, r is t, x
    assert_same_as_eager(f, [lambda: (torch.randn(4, 3), torch.randn(4, 3))] * 2, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("name", sorted(_METHODS))
def test_trailing_underscore_methods_with_symbolic_sizes(name, backend):
    """The symbolic path (meta.propagate): the result is the written variable with its new
    metadata (t_, unsqueeze_ change the sizes)."""
    op = _METHODS[name]

    def f(x, o):
        t = x * 2
        r = op(t, o)
        s = op(x, o)
        return r, t + 1, r is t, s is x, x

    makers = [lambda n=n: (torch.randn(n, 3), torch.randn(n, 3)) for n in (4, 5, 6)]
    assert_same_as_eager(f, makers, backend=backend, dynamic=True)


@pytest.mark.parametrize("backend", BACKENDS)
def test_resize_is_correct_or_breaks(backend):
    def f(x):
        t = x * 2
        t.resize_(3, 4)
        return t + 1

    assert_same_as_eager(f, [lambda: (torch.randn(4, 3),)] * 2, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_inplace_chain_and_view_of_input(backend):
    def f(x):
        x.mul_(2).add_(1)
        x[0].sub_(3)             # through a view
        return x.sum(0), x

    assert_same_as_eager(f, [lambda: (torch.randn(3, 4),)] * 3, backend=backend)


def test_unused_inplace_result_is_not_dead_code():
    pydynamo.reset()
    graphs = []

    def backend(gm, ex):
        graphs.append(gm)
        return gm.forward

    def f(y):
        F.silu(y, inplace=True)
        return y + 1

    x = torch.randn(5)
    ref = F.silu(x.clone()) + 1
    out = pydynamo.optimize(f, backend=backend)(x)
    torch.testing.assert_close(out, ref)
    assert [n.target for n in graphs[0].graph.nodes if n.op == "call_function"] == [F.silu, __import__("operator").add]


# --- the record itself -----------------------------------------------------------------------------

def test_mutation_record():
    import operator
    m = mutation_of("call_function", F.relu, ("x",), {"inplace": True})
    assert m.mutated == (0,) and m.returns == 0
    assert mutation_of("call_function", F.relu, ("x", True), {}).returns == 0
    assert mutation_of("call_function", F.relu, ("x",), {"inplace": False}) is None
    assert mutation_of("call_function", F.relu, ("x",), {}) is None
    assert mutation_of("call_function", F.dropout, ("x", 0.5, True, True), {}).mutated == (0,)
    assert mutation_of("call_method", "add_", ("x", 1), {}).returns == 0
    assert mutation_of("call_method", "t_", ("x",), {}).metadata
    assert mutation_of("call_function", operator.setitem, ("x", 0, 1), {}).returns is None
    assert mutation_of("call_function", operator.and_, ("x", "y"), {}) is None
    assert mutation_of("call_function", operator.iadd, ("x", "y"), {}).returns == 0
    assert mutation_of("call_function", torch.add, ("x", 1), {"out": "o"}).mutated == ("out",)
    assert mutation_of("call_function", torch._foreach_add_, (["a", "b"], 1), {}).returns is None
    assert mutation_of("call_function", F.batch_norm, ("x", "rm", "rv"), {"training": True}).mutated == (1, 2)
    assert mutation_of("call_function", F.batch_norm, ("x", "rm", "rv"), {}) is None
    assert mutation_of("call_module", "relu", ("x",), {}, module=nn.ReLU(inplace=True)).returns == 0
    assert mutation_of("call_module", "relu", ("x",), {}, module=nn.ReLU()) is None
    assert keyword_inplace(F.hardtanh, ("x", 0.0, 6.0, True), {}) == (("x", 0.0, 6.0), {"inplace": True})
    assert keyword_inplace(F.relu, ("x",), {}) == (("x",), {})


# --- small vision blocks built the way torchvision writes them (inplace activations) ----------

class InvertedResidual(nn.Module):       # MobileNetV2
    def __init__(self, c=8, e=2):
        super().__init__()
        h = c * e
        self.block = nn.Sequential(
            nn.Conv2d(c, h, 1, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, h, 3, padding=1, groups=h, bias=False), nn.BatchNorm2d(h), nn.ReLU6(inplace=True),
            nn.Conv2d(h, c, 1, bias=False), nn.BatchNorm2d(c))

    def forward(self, x):
        return x + self.block(x)


class SqueezeExcite(nn.Module):          # EfficientNet / MobileNetV3
    def __init__(self, c=8):
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)
        self.act = nn.SiLU(inplace=True)
        self.fc1, self.fc2 = nn.Conv2d(c, 4, 1), nn.Conv2d(4, c, 1)
        self.gate = nn.Hardsigmoid(inplace=True)
        self.hs = nn.Hardswish(inplace=True)

    def forward(self, x):
        y = self.act(self.conv(x))
        s = self.gate(self.fc2(F.relu(self.fc1(y.mean((2, 3), keepdim=True)), inplace=True)))
        return self.hs(y * s)


class DenseLayer(nn.Module):             # DenseNet: relu(inplace) on a batch-normed concat
    def __init__(self, c=8, g=4):
        super().__init__()
        self.norm = nn.BatchNorm2d(c)
        self.relu = nn.ReLU(inplace=True)
        self.conv = nn.Conv2d(c, g, 3, padding=1)
        self.drop = nn.Dropout(0.2, inplace=True)

    def forward(self, feats):
        x = torch.cat(feats, 1)
        out = self.drop(self.conv(self.relu(self.norm(x))))
        return torch.cat([x, out], 1)


class VGGStage(nn.Module):               # VGG / AlexNet: conv, relu(inplace), pool, dropout(inplace)
    def __init__(self):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 8, 3, padding=1), nn.ReLU(inplace=True),
                                      nn.MaxPool2d(2), nn.Conv2d(8, 8, 3, padding=1),
                                      nn.LeakyReLU(0.1, inplace=True))
        self.classifier = nn.Sequential(nn.Linear(8 * 4 * 4, 16), nn.ReLU(True), nn.Dropout(0.5),
                                        nn.Linear(16, 5))

    def forward(self, x):
        return self.classifier(torch.flatten(self.features(x), 1))


def _randomize_bn(model):
    for m in model.modules():
        if isinstance(m, nn.BatchNorm2d):
            m.running_mean.uniform_(-0.5, 0.5)
            m.running_var.uniform_(0.5, 1.5)
    return model


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("make,inputs", [
    (InvertedResidual, lambda: (torch.randn(2, 8, 6, 6),)),
    (SqueezeExcite, lambda: (torch.randn(2, 8, 6, 6),)),
    (DenseLayer, lambda: ([torch.randn(2, 4, 5, 5), torch.randn(2, 4, 5, 5)],)),
    (VGGStage, lambda: (torch.randn(2, 3, 8, 8),)),
], ids=["mobilenet_v2_block", "squeeze_excite", "densenet_layer", "vgg_stage"])
def test_vision_blocks_with_inplace_activations(make, inputs, backend):
    torch.manual_seed(0)
    model = _randomize_bn(make()).eval()
    with torch.no_grad():
        assert_same_as_eager(model, [inputs] * 3, backend=backend)


@pytest.mark.parametrize("backend", BACKENDS)
def test_training_backward_through_inplace_activations(backend):
    """Grad mode, parameters requiring grad: the in-place ReLU writes a non-leaf (allowed in
    eager); outputs, gradients and running statistics match eager."""
    import copy
    torch.manual_seed(0)
    model = InvertedResidual().train()
    ref_model = copy.deepcopy(model)
    x = torch.randn(2, 8, 6, 6)
    pydynamo.reset()
    out = pydynamo.optimize(model, backend=backend)(x)
    ref = ref_model(x)
    torch.testing.assert_close(out, ref)
    out.square().sum().backward()
    ref.square().sum().backward()
    for (name, p), q in zip(model.named_parameters(), ref_model.parameters()):
        # a compiled backward sums in another order: float32 rounding of the conv weights'
        # gradients (|g| ~ 100) is ~3e-5 from the float64 truth, in eager as compiled
        torch.testing.assert_close(p.grad, q.grad, rtol=1e-5, atol=1e-4, msg=name)
    for b, c in zip(model.buffers(), ref_model.buffers()):
        torch.testing.assert_close(b, c)


class _InplaceModuleOnIntermediate(nn.Module):
    def __init__(self):
        super().__init__()
        self.relu = nn.ReLU(inplace=True)

    def forward(self, x):
        t = x * 2
        r = self.relu(t)
        return r + t, t.sum()


def _positional_flag_on_intermediate(x):
    t = x * 2
    r = F.hardtanh(t, -0.5, 0.5, True)
    return r + t, t.sum()


@pytest.mark.parametrize("make", [_InplaceModuleOnIntermediate, lambda: _positional_flag_on_intermediate],
                         ids=["call_module_relu_inplace", "positional_inplace_flag"])
def test_codegen_fx_graph_with_inplace_call_module_or_positional_flag(make):
    """Graphs not made by the executor (torch.fx.symbolic_trace) keep `call_module` nodes and
    positional flags: codegen's mutation check reads pydynamo.mutation, so these run correctly
    (eagerly) where they used to give wrong values (the module's write was not seen)."""
    import warnings
    import codegen
    fn = make()
    gm = torch.fx.symbolic_trace(fn)
    x = torch.randn(16)
    ref = fn(x.clone())
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        compiled = codegen.compile_fx(gm, [x.clone()])
    arg = x.clone()
    out = compiled(arg)
    for a, b in zip(out, ref):
        torch.testing.assert_close(a, b)
    torch.testing.assert_close(arg, x)

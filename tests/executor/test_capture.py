"""End-to-end capture through pydynamo.optimize and the real frame hook: outputs equal eager on
random inputs, graph counts, cache hits, recompiles on guarded changes."""
import collections
import dataclasses
import warnings

import pytest
import torch
import torch.nn.functional as F

import pydynamo
from pydynamo import config


def _same(a, b):
    if isinstance(a, torch.Tensor):
        torch.testing.assert_close(a, b)
    elif isinstance(a, (list, tuple)):
        assert type(a) is type(b) and len(a) == len(b)
        for x, y in zip(a, b):
            _same(x, y)
    elif isinstance(a, dict):
        assert type(a) is type(b) and list(a) == list(b)
        for k in a:
            _same(a[k], b[k])
    else:
        assert a == b


def check(fn, *args, cnt, graphs=1, calls=3):
    opt = pydynamo.optimize(fn, backend=cnt)
    for _ in range(calls):
        _same(opt(*args), fn(*args))
    assert cnt.count == graphs, cnt.count
    return opt


def test_sin_plus_one_through_hook(cnt):
    opt = pydynamo.optimize(lambda x: torch.sin(x) + 1, backend=cnt)
    x = torch.randn(4)
    torch.testing.assert_close(opt(x), torch.sin(x) + 1)
    assert cnt.count == 1 and cnt.op_counts() == [2]


def test_cache_hit_does_not_rerun_body(cnt):
    import sys
    started = []

    def g(x):
        return torch.cos(x) * 2

    def prof(frame, event, arg):
        if event == "call" and frame.f_code is g.__code__:
            started.append(1)

    opt = pydynamo.optimize(g, backend=cnt)
    opt(torch.randn(3))
    sys.setprofile(prof)
    try:
        for _ in range(3):
            x = torch.randn(3)
            torch.testing.assert_close(opt(x), torch.cos(x) * 2)
    finally:
        sys.setprofile(None)
    assert cnt.count == 1
    assert started == []  # the original code object never started a frame on a hit


def test_arith_constants_and_methods(cnt):
    def f(x, y):
        a = x * 2 + y.sum(dim=0, keepdim=True) - 3
        b = a.relu().view(-1).softmax(0)
        n = x.shape[0] * x.dim() + len(y)
        return b * n, x.size(1), x.dtype, a.T.contiguous()
    check(f, torch.randn(3, 4), torch.randn(5, 4), cnt=cnt)


def test_recompile_on_dtype_shape_and_constant(cnt):
    def f(x, k):
        return x * k + 1
    opt = pydynamo.optimize(f, backend=cnt)
    for args, expected in [((torch.randn(3), 2), 1), ((torch.randn(3), 2), 1),
                           ((torch.randn(3, dtype=torch.float64), 2), 2),
                           ((torch.randn(5), 2), 3), ((torch.randn(3), 3), 4)]:
        torch.testing.assert_close(opt(*args), f(*args))
        assert cnt.count == expected


class Block(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(4, 4)
        self.layers = torch.nn.ModuleList([torch.nn.Linear(4, 4) for _ in range(2)])
        self.norm = torch.nn.LayerNorm(4)
        self.register_buffer("scale", torch.full((4,), 0.5))

    def forward(self, x):
        h = self.fc(x)
        for layer in self.layers:
            h = F.gelu(layer(h)) + h
        return self.norm(h) * self.scale


def test_module_params_as_inputs(cnt):
    m = Block()
    opt = pydynamo.optimize(m, backend=cnt)
    x = torch.randn(2, 4)
    torch.testing.assert_close(opt(x), m(x))
    torch.testing.assert_close(opt(x), m(x))
    assert cnt.count == 1
    n_params = len(list(m.parameters())) + len(list(m.buffers()))
    assert len(cnt.example_inputs[0]) == 1 + n_params
    # replacing a parameter with a differently shaped one must recompile, never be wrong
    with torch.no_grad():
        m.fc.weight = torch.nn.Parameter(torch.randn(4, 4, dtype=torch.float32).t())  # new strides
    torch.testing.assert_close(opt(x), m(x))
    assert cnt.count == 2


def test_module_forward_hook_and_training_flag(cnt):
    m = torch.nn.Sequential(torch.nn.Linear(3, 3), torch.nn.Dropout(0.5))
    m.eval()
    m[0].register_forward_hook(lambda mod, args, out: out * 10)
    opt = pydynamo.optimize(m, backend=cnt)
    x = torch.randn(2, 3)
    torch.testing.assert_close(opt(x), m(x))
    assert cnt.count == 1


def test_inlined_user_functions_closures_defaults(cnt):
    def helper(a, b=2, *rest, c, d=3, **kw):
        return a * b + sum(rest) + c * d + sum(kw.values())

    def f(x, y):
        k = 3
        inner = lambda z: z * k  # noqa: E731
        return helper(x, 2, y, c=y), helper(x, c=1, e=y), inner(x), [i * x for i in range(3)]
    check(f, torch.randn(3), torch.randn(3), cnt=cnt)


def test_containers_and_builtins(cnt):
    P = collections.namedtuple("P", "a b")

    def f(x, d, lst):
        p = P(x, x + 1)
        s = sorted([3, 1, 2], reverse=True)
        od = collections.OrderedDict(a=1)
        dd = collections.defaultdict(list)
        dd["k"].append(x)
        keys = {k: v * 2 for k, v in d.items()}
        total = sum(t.sum() for t in lst)
        z = list(zip(range(2), lst))
        return (p.a + p.b, s, max(s), min(3, 4), abs(-2), keys, total, len(z), isinstance(x, torch.Tensor),
                od, dict(dd), any([False, True]), all([]), f"{s[0]:02d}-{'x'}", (1, 2) + (3,))
    check(f, torch.randn(3), {"a": torch.randn(2)}, [torch.randn(2), torch.randn(2)], cnt=cnt)


def test_side_effects_replayed(cnt):
    class Obj:
        def __init__(self):
            self.count = 0

    state = {"seen": 0}

    def f(x, lst, obj):
        lst.append(x * 2)
        obj.count = obj.count + 1
        state["seen"] = state["seen"] + 1
        return x + len(lst)

    opt = pydynamo.optimize(f, backend=cnt)
    l1, l2, o1, o2 = [], [], Obj(), Obj()
    x = torch.randn(3)
    r = opt(x, l1, o1)
    e = f(x, l2, o2)
    torch.testing.assert_close(r, e)
    assert len(l1) == 1 and o1.count == 1
    torch.testing.assert_close(l1[0], l2[0])
    assert state["seen"] == 2


def test_global_write(cnt):
    def f(x):
        global _COUNTER
        _COUNTER = _COUNTER + 1
        return x + _COUNTER
    global _COUNTER
    _COUNTER = 0
    opt = pydynamo.optimize(f, backend=cnt)
    out = opt(torch.zeros(2) + 1)
    assert _COUNTER == 1
    torch.testing.assert_close(out, torch.full((2,), 2.0))


_COUNTER = 0


def test_inplace_on_inputs_eager_semantics(cnt):
    def f(x, v):
        x[0] = v
        x[1:3, 0] = 5.0
        x[:, 2] += 1
        y = x
        y += 1
        return x * 2, y is x

    a, b = torch.randn(4, 3), torch.randn(3)
    a2 = a.clone()
    opt = pydynamo.optimize(f, backend=cnt)
    r = opt(a, b)
    e = f(a2, b)
    _same(r, e)
    torch.testing.assert_close(a, a2)


def test_grad_mode_blocks(cnt):
    def f(x):
        with torch.no_grad():
            y = x * 2
        with torch.enable_grad():
            z = x * 3
        return y, z, torch.is_grad_enabled()
    x = torch.randn(3, requires_grad=True)
    opt = pydynamo.optimize(f, backend=cnt)
    y, z, g = opt(x)
    assert not y.requires_grad and z.requires_grad and g is True
    assert torch.is_grad_enabled()
    torch.testing.assert_close(y, x.detach() * 2)


def test_dataclass_and_user_objects(cnt):
    @dataclasses.dataclass
    class Cfg:
        scale: float
        bias: float = 1.0

        @property
        def total(self):
            return self.scale + self.bias

    def f(x, cfg):
        c2 = Cfg(scale=cfg.scale * 2)
        return x * cfg.total + c2.total, c2
    opt = pydynamo.optimize(f, backend=cnt)
    x, cfg = torch.randn(3), Cfg(2.0)
    r, c = opt(x, cfg)
    e, ce = f(x, cfg)
    torch.testing.assert_close(r, e)
    assert c == ce
    opt(x, Cfg(3.0))  # guarded attribute value changed
    assert cnt.count == 2


def test_fullgraph_raises_and_default_falls_back(cnt):
    def f(x):
        print("side effect")
        return x + 1
    with pytest.raises(pydynamo.exc.FullGraphError) as ei:
        pydynamo.optimize(f, backend=cnt, fullgraph=True)(torch.randn(2))
    assert "test_capture.py" in str(ei.value) and "print" in str(ei.value)
    pydynamo.reset()
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        x = torch.randn(2)
        torch.testing.assert_close(pydynamo.optimize(f, backend=cnt)(x), x + 1)
    msgs = [m for m in w if "pydynamo" in str(m.message)]
    assert len(msgs) == 1 and msgs[0].filename == __file__ and "print" in str(msgs[0].message)


def test_recompile_limit_keeps_serving(cnt):
    def f(x):
        return x * 2
    old = config.recompile_limit
    config.recompile_limit = 2
    try:
        opt = pydynamo.optimize(f, backend=cnt, dynamic=False)  # static shapes: one entry per size
        with warnings.catch_warnings(record=True) as w:
            warnings.simplefilter("always")
            for n in (1, 2, 3, 4, 1, 2):
                x = torch.randn(n)
                torch.testing.assert_close(opt(x), x * 2)
        assert cnt.count == 2
        assert sum("recompile limit" in str(m.message) for m in w) == 1
    finally:
        config.recompile_limit = old


def test_disabled_function_runs_eagerly(cnt):
    @pydynamo.disable
    def helper(x):
        return x + 1

    def f(x):
        return helper(x) * 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        x = torch.randn(3)
        torch.testing.assert_close(pydynamo.optimize(f, backend=cnt)(x), (x + 1) * 2)


def test_graph_node_metadata(cnt):
    def f(x):
        return (x @ x.t()).softmax(-1).to(torch.float64)
    pydynamo.optimize(f, backend=cnt)(torch.randn(3, 5))
    gm = cnt.graphs[0]
    for node in gm.graph.nodes:
        if node.op in ("placeholder", "call_function", "call_method"):
            tm = node.meta["tensor_meta"]
            assert tm.device == torch.device("cpu")
            assert tuple(node.meta["val"].shape) == tm.shape
    last = [n for n in gm.graph.nodes if n.op == "call_method"][-1]
    assert last.meta["tensor_meta"].dtype == torch.float64 and last.meta["tensor_meta"].shape == (3, 3)


def test_no_reference_leak(cnt):
    import gc
    import weakref

    def f(x):
        return x + 1
    opt = pydynamo.optimize(f, backend=cnt)
    x = torch.randn(3)
    opt(x)
    ref = weakref.ref(x)
    cnt.example_inputs.clear()
    del x
    gc.collect()
    assert ref() is None


def test_explain_and_backends():
    def f(x):
        return torch.relu(x) + x.sum()
    out = pydynamo.explain(f)(torch.randn(3))
    assert out.graph_count == 1 and out.ops_per_graph == [3] and out.graph_break_count == 0
    assert any("TENSOR_MATCH: L['x']" in g for g in out.guards)
    assert "eager" in pydynamo.list_backends() and "inductor" in pydynamo.list_backends()
    pydynamo.register_backend("mine_for_test", lambda gm, ex: gm.forward)
    assert "mine_for_test" in pydynamo.list_backends()


class _WithClassAttr:
    factor = 2.0

    def __init__(self):
        self.bias = 1.0


def test_class_attribute_rebinding_recompiles(cnt):
    def f(x, o):
        return x * o.factor + o.bias
    opt = pydynamo.optimize(f, backend=cnt)
    o, x = _WithClassAttr(), torch.randn(3)
    torch.testing.assert_close(opt(x, o), f(x, o))
    _WithClassAttr.factor = 5.0
    try:
        torch.testing.assert_close(opt(x, o), f(x, o))
    finally:
        _WithClassAttr.factor = 2.0
    assert cnt.count == 2


def test_dict_views_compare_like_views(cnt):
    def f(x, d):
        return x + 1, d.keys() == {"b", "a"}, list(d.items()) == [("a", 1), ("b", 2)], sorted(d.values())
    d = {"a": 1, "b": 2}
    x = torch.randn(2)
    r, e = pydynamo.optimize(f, backend=cnt)(x, d), f(x, d)
    torch.testing.assert_close(r[0], e[0])
    assert r[1:] == e[1:] == (True, True, [1, 2])


def _opaque_op(x):
    return x * 2 + 1


def test_allow_in_graph_makes_one_opaque_node(cnt):
    pydynamo.allow_in_graph(_opaque_op)

    def f(x):
        return _opaque_op(x).relu()
    x = torch.randn(3)
    torch.testing.assert_close(pydynamo.optimize(f, backend=cnt)(x), f(x))
    targets = [n.target for n in cnt.graphs[0].graph.nodes if n.op == "call_function"]
    assert _opaque_op in targets


def test_inference_mode_block_matches_eager(cnt):
    def f(x):
        with torch.inference_mode():
            y = x * 2 + 1
            inside = (y.is_inference(), torch.is_grad_enabled())
        return y.clone(), inside, torch.is_inference_mode_enabled()
    x = torch.randn(3, requires_grad=True)
    r, e = pydynamo.optimize(f, backend=cnt)(x), f(x)
    torch.testing.assert_close(r[0], e[0])
    assert r[1:] == e[1:] == ((True, False), False)
    assert r[0].is_inference() == e[0].is_inference()
    assert cnt.count == 1


def test_container_equality_like_python(cnt):
    def f(x, n):
        a, b = [x, n], [x, n]
        return x + 1, a == b, (1, [2]) == (1, [2]), {"k": x} == {"k": x}, [x] != [x], a == (x, n)
    x = torch.randn(2)
    r, e = pydynamo.optimize(f, backend=cnt)(x, 3), f(x, 3)
    assert r[1:] == e[1:] == (True, True, True, False, False)


@dataclasses.dataclass(frozen=True)
class _Frozen:
    a: float
    b: float = 2.0


def test_frozen_dataclass_built_in_frame(cnt):
    def f(x, cfg):
        c = _Frozen(cfg.a * 2)
        return x * c.a + c.b, c
    x = torch.randn(3)
    (r, c), (e, ce) = pydynamo.optimize(f, backend=cnt)(x, _Frozen(1.5)), f(x, _Frozen(1.5))
    torch.testing.assert_close(r, e)
    assert c == ce and cnt.count == 1

"""meta.propagate without symbolic sizes: the metadata of every case equals the eager output's
(shape, strides, dtype, device, requires_grad), plus the meta-run fallback's edges: device moves,
factories, modules, data-dependent ops, structseq outputs, FX node metadata."""
import operator

import pytest
import torch
import torch.fx
import torch.nn as nn

from pydynamo.meta import MetaUnsupported, TensorMeta, propagate, set_node_meta
from pydynamo.shapes import ShapeEnv, TextSource
from shapes_cases import CASES, r
from shapes_harness import _real, assert_meta_matches, call_eager


def to_meta_args(v):
    if isinstance(v, torch.Tensor):
        return TensorMeta.from_tensor(v)
    if isinstance(v, list):
        return [to_meta_args(x) for x in v]
    if isinstance(v, tuple):
        return tuple(to_meta_args(x) for x in v)
    if isinstance(v, dict):
        return {k: to_meta_args(x) for k, x in v.items()}
    return v


@pytest.mark.parametrize("name,target,build", CASES, ids=[c[0] for c in CASES])
def test_concrete_matches_eager(name, target, build):
    args, kwargs = build(n=5, m=7)
    args, kwargs = _real(args), _real(kwargs)
    out = propagate(target, to_meta_args(args), to_meta_args(kwargs))
    assert_meta_matches(out, call_eager(target, args, kwargs), what=name)


def test_from_tensor_record():
    t = torch.randn(4, 6, requires_grad=True)[1:, ::2]
    m = TensorMeta.from_tensor(t)
    assert m.shape == (3, 3) and m.stride == (6, 2) and m.storage_offset == 6
    assert m.requires_grad and not m.is_leaf and not m.is_symbolic and m.numel() == 9
    mt = m.to_meta_tensor()
    assert mt.device.type == "meta" and mt.stride() == (6, 2) and mt.storage_offset() == 6
    assert TensorMeta.from_tensor(nn.Parameter(torch.randn(2))).is_parameter
    assert TensorMeta.from_tensor(torch.randn(2, 3, 4, 5).to(memory_format=torch.channels_last)).memory_format \
        == torch.channels_last
    ex = m.example_tensor()
    assert ex.shape == (3, 3) and ex.abs().sum() > 0


def test_symbolic_record_concretizes_through_env():
    env = ShapeEnv()
    t = torch.randn(6, 4)
    shape, stride, off = env.create_tensor_sizes(t, TextSource("L['t']"), [0, 1])
    m = TensorMeta.from_tensor(t, shape=shape, stride=stride, storage_offset=off)
    assert m.is_symbolic and len(m.free_symbols()) == 2
    assert m.concrete(env.size_hint).shape == (6, 4)
    assert m.is_contiguous()
    assert str(m.numel()) == "s0*s1"


@pytest.mark.parametrize("target,args,kwargs,device", [
    ("to", (r(3, 4), "cuda"), {}, "cuda:0"),
    ("to", (r(3, 4),), {"device": "cuda", "dtype": torch.float16}, "cuda:0"),
    ("cuda", (r(3, 4),), {}, "cuda:0"),
    ("cpu", (r(3, 4),), {}, "cpu"),
    (torch.zeros, ((2, 3),), {"device": "cuda:1"}, "cuda:1"),
    (torch.ones, (2, 3), {}, "cpu"),
])
def test_device_moves_never_allocate(target, args, kwargs, device):
    # these run on meta tensors only: no CUDA is needed to know a .cuda() result's metadata
    out = propagate(target, to_meta_args(args), kwargs)
    if device.startswith("cuda") and torch.cuda.is_available():
        device = f"cuda:{torch.cuda.current_device()}" if device == "cuda:0" else device
    assert out.device == torch.device(device)
    if kwargs.get("dtype"):
        assert out.dtype == kwargs["dtype"]


def test_module_call_uses_meta_copy_without_copying_weights():
    mod = nn.Sequential(nn.Linear(8, 16), nn.ReLU(), nn.Linear(16, 4))
    x = r(5, 8)
    out = propagate(mod, (TensorMeta.from_tensor(x),))
    assert_meta_matches(out, mod(x))
    assert next(mod.parameters()).device.type == "cpu"  # the original is untouched


def test_module_call_symbolic_without_rule_specializes():
    mod = nn.Sequential(nn.Linear(8, 4))
    env = ShapeEnv()
    x = r(5, 8)
    shape, stride, off = env.create_tensor_sizes(x, TextSource("L['x']"), [0])
    out = propagate(mod, (TensorMeta.from_tensor(x, shape=shape, stride=stride),), env=env)
    assert out.shape == (5, 4)
    assert env.stats["specialized_ops"] == 1 and "L['x'].size()[0] == 5" in env.guard_texts()


@pytest.mark.parametrize("target,args", [
    ("item", (r(1),)),
    ("tolist", (r(3),)),
    (torch.nonzero, (r(3, 4),)),
    ("nonzero", (r(3, 4),)),
    (operator.getitem, (r(3, 4), r(3, 4) > 0)),
    (torch.unique, (r(5),)),
    ("type", (r(2),)),
])
def test_data_dependent_ops_are_unsupported(target, args):
    with pytest.raises(MetaUnsupported) as info:
        propagate(target, to_meta_args(args))
    assert info.value.reason_code in ("data_dependent", "meta_unsupported")


def test_errors_on_metadata_become_unsupported():
    # eager raises these too; as graph breaks, the user gets eager's own error from eager
    with pytest.raises(MetaUnsupported, match=r"torch\.add failed on metadata: RuntimeError: .*broadcast") as info:
        propagate(torch.add, (TensorMeta.from_tensor(r(3, 4)), TensorMeta.from_tensor(r(5))))
    assert info.value.reason_code == "meta_error" and isinstance(info.value.__cause__, RuntimeError)
    leaf = TensorMeta.from_tensor(r(3, requires_grad=True))
    with pytest.raises(MetaUnsupported, match="leaf"):
        propagate("add_", (leaf, 1.0))
    with pytest.raises(MetaUnsupported, match="TypeError"):
        propagate(torch.sin, ("not a tensor",))


def test_structseq_output_kept():
    out = propagate(torch.max, (TensorMeta.from_tensor(r(3, 4)), 1))
    assert type(out).__name__ == "max" and out.values.shape == (3,) and out.indices.dtype == torch.int64


def test_scalar_tensor_promotion():
    # a 0-dim tensor does not promote a higher-category dimensioned tensor's dtype
    a = TensorMeta.from_tensor(torch.randn(3, dtype=torch.float16))
    b = TensorMeta.from_tensor(torch.tensor(2.0, dtype=torch.float64))
    assert propagate(torch.add, (a, b)).dtype == torch.float16
    i = TensorMeta.from_tensor(torch.arange(3))
    assert propagate(operator.truediv, (i, 2)).dtype == torch.float32


def test_set_node_meta():
    g = torch.fx.Graph()
    x = g.placeholder("x")
    y = g.call_function(torch.sin, (x,))
    g.output(y)
    m = propagate(torch.sin, (TensorMeta.from_tensor(r(2, 3)),))
    set_node_meta(y, m)
    assert y.meta["val"] is m and y.meta["tensor_meta"] is m and y.meta["example_value"] is m
    s = g.placeholder("s0")
    set_node_meta(s, 3)
    assert s.meta["val"] == 3 and "tensor_meta" not in s.meta


def test_python_value_rules_return_symints():
    env = ShapeEnv()
    x = r(6, 4)
    shape, stride, _ = env.create_tensor_sizes(x, TextSource("L['x']"), [0, 1])
    m = TensorMeta.from_tensor(x, shape=shape, stride=stride)
    size = propagate("size", (m,), env=env)
    assert [s.hint for s in size] == [6, 4]
    assert propagate("size", (m, 1), env=env).hint == 4
    assert propagate("numel", (m,), env=env).hint == 24
    assert propagate("dim", (m,), env=env) == 2
    assert propagate("is_contiguous", (m,), env=env) is True
    assert env.guards == []


def test_memoized_meta_runs_respect_grad_mode_and_scalar_types():
    x = TensorMeta.from_tensor(r(3, 4, requires_grad=True))
    assert propagate(torch.mul, (x, 2)).requires_grad
    with torch.no_grad():
        assert not propagate(torch.mul, (x, 2)).requires_grad
    i = TensorMeta.from_tensor(torch.arange(3))
    assert propagate(torch.mul, (i, 2)).dtype == torch.int64
    assert propagate(torch.mul, (i, 2.0)).dtype == torch.float32
    assert propagate(torch.mul, (i, True)).dtype == torch.int64
    a = propagate(torch.split, (x, 2, 1))
    b = propagate(torch.split, (x, 2, 1))
    assert a == b and a is not b

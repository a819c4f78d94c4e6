"""Guard semantics end to end, without the executor: a tiny stand-in tracer runs each function on
symbolic tensors (TensorMeta + ShapeEnv through meta.propagate), keeps a cache of (static dims,
shape-guard check) entries, and counts compiles over a sequence of input sizes. The count must
equal torch.compile's on the same function and sizes (dynamic=True and automatic dynamic), and
the symbolic outputs, at each call's sizes, must equal eager's shapes."""
import contextlib
import operator

import pytest
import sympy
import torch
import torch.nn.functional as F
from torch.overrides import TorchFunctionMode

from pydynamo.meta import TensorMeta, propagate
from pydynamo.shapes import (AutomaticDynamic, ShapeEnv, SymInt, TextSource, dynamic_dims, mark_dynamic,
                             marked_dynamic_dims, sym_int)


class FakeT:
    """A traced tensor: metadata only; every method/operator goes through meta.propagate."""

    def __init__(self, meta: TensorMeta, env: ShapeEnv):
        self.meta, self.env = meta, env

    @property
    def shape(self):
        return propagate("size", (self.meta,), env=self.env)

    def size(self, dim=None):
        return propagate("size", (self.meta,) if dim is None else (self.meta, dim), env=self.env)

    def _call(self, target, args, kwargs=None):
        out = propagate(target, _unwrap(tuple(args)), _unwrap(kwargs or {}), env=self.env)
        return FakeT(out, self.env) if isinstance(out, TensorMeta) else out

    def __getattr__(self, name):
        return lambda *args, **kwargs: self._call(name, (self, *args), kwargs)

    def __getitem__(self, idx):
        return self._call(operator.getitem, (self, idx))


class _TraceMode(TorchFunctionMode):
    """Routes every torch.* / F.* call made while tracing (factories too) through
    meta.propagate; real tensors made along the way become FakeTs."""

    def __init__(self, env):
        super().__init__()
        self.env = env

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not any(isinstance(v, (FakeT, SymInt)) for v in _flat([args, kwargs])):
            return func(*args, **kwargs)  # nothing traced involved (incl. meta.py's own meta runs)
        out = propagate(func, _unwrap(tuple(args)), _unwrap(kwargs), env=self.env)
        return FakeT(out, self.env) if isinstance(out, TensorMeta) else out


def _unwrap(v):
    """Traced values to what meta.propagate takes; real tensors made by the function become
    (static) metadata."""
    if isinstance(v, FakeT):
        return v.meta
    if isinstance(v, torch.Tensor):
        return TensorMeta.from_tensor(v)
    if isinstance(v, (list, tuple)):
        return type(v)(_unwrap(x) for x in v)
    if isinstance(v, dict):
        return {k: _unwrap(x) for k, x in v.items()}
    return v


# Test functions reach torch factories through `T`: torch's argument parser reads a SymInt through
# __index__ (pinning it) before any torch-function mode sees the call, so while tracing `T` is a
# namespace whose factories go through meta.propagate, as the executor's calls do. (Patching torch
# itself would poison torch.compile's caches of torch functions.)
T = torch
_FACTORIES = ("arange", "ones", "zeros", "empty", "full", "randn", "rand")


class _SymbolicTorch:
    def __init__(self, env):
        self.env = env

    def __getattr__(self, name):
        fn = getattr(torch, name)
        if name not in _FACTORIES:
            return fn

        def factory(*args, **kwargs):
            if any(isinstance(v, SymInt) for v in _flat([args, kwargs])):
                return FakeT(propagate(fn, args, kwargs, env=self.env), self.env)
            return fn(*args, **kwargs)
        return factory


@contextlib.contextmanager
def _symbolic_factories(env):
    global T
    T = _SymbolicTorch(env)
    try:
        yield
    finally:
        T = torch


def _flat(v):
    if isinstance(v, (list, tuple)):
        for x in v:
            yield from _flat(x)
    elif isinstance(v, dict):
        for x in v.values():
            yield from _flat(x)
    else:
        yield v


def _binop(op, reflected=False):
    def method(self, other):
        return self._call(op, (other, self) if reflected else (self, other))
    return method


for _name, _op in (("add", operator.add), ("sub", operator.sub), ("mul", operator.mul),
                   ("truediv", operator.truediv), ("matmul", operator.matmul),
                   ("lt", operator.lt), ("le", operator.le), ("gt", operator.gt), ("ge", operator.ge)):
    setattr(FakeT, f"__{_name}__", _binop(_op))
    setattr(FakeT, f"__r{_name}__", _binop(_op, True))


def simulate(fn, calls, dynamic):
    """Number of compiles our guards cause for `calls` (lists of input shapes), checking each
    traced output's shape against eager at that call's sizes."""
    entries, auto, compiles = [], AutomaticDynamic(), 0
    for shapes in calls:
        tensors = [_make(s) for s in shapes]
        L = {f"x{i}": t for i, t in enumerate(tensors)}
        entry = next((e for e in entries if _static_match(e[0], tensors) and e[1](L)), None)
        if entry is None:
            compiles += 1
            env = ShapeEnv()
            fakes, static = [], []
            for name, t in L.items():
                if isinstance(t, int):
                    # int inputs: never 0/1-specialized, may be negative, no duck sharing
                    changed = auto.observe(f"L['{name}']", (t,))
                    if dynamic or (dynamic is None and changed):
                        fakes.append(env.create_symint(t, TextSource(f"L['{name}']"), positive=False))
                        static.append(None)
                    else:
                        fakes.append(t)
                        static.append(t)
                    continue
                changed = auto.observe(f"L['{name}']", tuple(t.shape))
                dims = dynamic_dims(t, dynamic=dynamic, changed_dims=changed)
                shape, stride, off = env.create_tensor_sizes(t, TextSource(f"L['{name}']"), dims,
                                                             marked_dims=marked_dynamic_dims(t))
                fakes.append(FakeT(TensorMeta.from_tensor(t, shape=shape, stride=stride), env))
                static.append(tuple(d if isinstance(d, int) else None for d in shape))
            with _TraceMode(env), _symbolic_factories(env):
                out = fn(*fakes)
            entry = (static, env.make_check_fn(), out.meta, env)
            entries.append(entry)
        _, _, out_meta, env = entry
        values = {sym: sympy.Integer(eval(src.name(), {"L": L})) for sym, src in env.var_to_source.items()}
        got = tuple(int(sympy.sympify(d).xreplace(values)) for d in out_meta.shape)
        assert got == tuple(fn(*tensors).shape), (shapes, out_meta)
    return compiles


def _make(spec):
    """An int input, a random float tensor of a shape, ("ids", shape): token ids < 10, or
    ("mark", shape, dim): a tensor with `dim` marked dynamic (for both torch and pydynamo)."""
    if isinstance(spec, int):
        return spec
    if spec and spec[0] == "ids":
        return torch.randint(0, 10, spec[1])
    if spec and spec[0] == "mark":
        t = torch.randn(*spec[1])
        torch._dynamo.mark_dynamic(t, spec[2])
        mark_dynamic(t, spec[2])
        return t
    return torch.randn(*spec)


def _static_match(static, tensors):
    return all((s is None or s == t) if isinstance(t, int) else
               len(s) == t.dim() and all(d is None or d == real for d, real in zip(s, t.shape))
               for s, t in zip(static, tensors))


def torch_compiles(fn, calls, dynamic):
    count = 0

    def backend(gm, example_inputs):
        nonlocal count
        count += 1
        return gm.forward

    torch._dynamo.reset()
    compiled = torch.compile(fn, backend=backend, dynamic=dynamic)
    for shapes in calls:
        compiled(*[_make(s) for s in shapes])
    torch._dynamo.reset()
    return count


def f_design(a):
    return (a if a.shape[0] * 2 < 16 else a + 1) * 2


def f_pointwise(x):
    return x * 2 + 1


def f_two_sums(x, y):
    return x.sum() + y.sum()


def f_mod(x):
    return (x * 2 if x.shape[0] % 2 == 0 else x) + 1


def f_dim_relation(x, y):
    return (x + 1 if x.shape[0] == y.shape[0] * 2 else x - 1).sum() + y.sum()


def f_product(x):
    return (x * 2 if x.shape[0] * x.shape[1] > 50 else x) + 1


def f_broadcast(x, y):
    return x + y


def f_view(x):
    return x.view(x.shape[0] // 2, -1) * 2


def f_reshape_flat(x):
    return x.reshape(-1) + x.sum()


def f_matmul(x, w):
    return (x @ w).relu()


def f_slice(x):
    return x[1:, : x.shape[1] - 1] * 2


def f_size_arith(x):
    n = x.shape[0]
    return x.new_zeros(n * 2 - 1, x.shape[1]) + 1


def f_loop(x):
    for i in range(x.shape[0] // 4):
        x = x + i
    return x * 2


def f_int_size(x):
    # builtin int() on a size stays symbolic in torch.compile; our executor maps it to sym_int
    return x * sym_int(x.shape[0] * 3)


def f_float_compare(x):
    return (x + 1 if x.shape[0] < 6.5 else x - 1) * 2


def f_float_arith(x):
    return (x * 2 if x.shape[0] / 4 > 2.5 else x) + x.shape[0] / 2


def f_scale_by_int(x, n):
    return x * n


def f_branch_on_int(x, n):
    return x * 2 if n > 2 else x - 1


def f_int_and_size(x, n):
    return x.view(-1, n) + n


def f_cat_stack(x, y):
    return torch.stack([torch.cat([x, y], 0), torch.cat([y, x], 0)], dim=1).sum(-1)


def f_conv(x, w):
    return F.relu(F.conv2d(x, w, padding=1)).mean((2, 3))


def f_attention(q, k):
    scores = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    return F.softmax(scores, dim=-1) @ k


def f_where_mask(x):
    n = x.shape[-1]
    mask = T.ones(n, n).tril() > 0
    return torch.where(mask, x, torch.zeros_like(x))


def f_arange_index(x):
    idx = T.arange(x.shape[0] - 1)
    return x[idx] + x[1:]


def f_expand_permute(x):
    return x.unsqueeze(0).expand(3, -1, -1).permute(1, 2, 0).reshape(x.shape[0], -1)


def f_reductions(x):
    return x.amax(dim=1, keepdim=True) - x.mean(dim=(0, 2)).unsqueeze(-1).unsqueeze(0) + x.var(1, keepdim=True)


def f_sym_slice(x):
    h = x.shape[1] // 2
    return x[:, :h] * x[:, h:2 * h]


def f_flatten_linear(x, w):
    return F.linear(x.flatten(1), w)


def f_pad_embed(ids, table):
    return F.pad(F.embedding(ids, table), (0, 0, 1, 1))


def f_softmax_sum(x):
    return x.softmax(-1).sum(0, keepdim=True) * x.shape[-1]


CASES = [
    ("design", f_design, [[(8,)], [(9,)], [(100,)], [(3,)], [(4,)], [(1,)], [(2,)]]),
    ("pointwise", f_pointwise, [[(4,)], [(5,)], [(6,)], [(1,)], [(7,)]]),
    ("pointwise_2d", f_pointwise, [[(4, 3)], [(4, 5)], [(6, 5)], [(6, 1)], [(2, 9)]]),
    ("two_sums_duck", f_two_sums, [[(3,), (3,)], [(4,), (5,)], [(6,), (6,)], [(7,), (2,)]]),
    ("mod", f_mod, [[(4,)], [(6,)], [(5,)], [(7,)], [(8,)]]),
    ("dim_relation", f_dim_relation, [[(8,), (4,)], [(10,), (5,)], [(10,), (4,)], [(6,), (3,)]]),
    ("product", f_product, [[(8, 8)], [(4, 20)], [(5, 5)], [(3, 3)], [(9, 9)]]),
    ("broadcast", f_broadcast, [[(4, 3), (3,)], [(5, 3), (3,)], [(5, 6), (6,)], [(5, 6), (1,)]]),
    ("broadcast_both", f_broadcast, [[(4, 1), (1, 5)], [(6, 1), (1, 7)], [(3, 1), (1, 3)]]),
    ("view", f_view, [[(8, 3)], [(10, 3)], [(12, 4)], [(6, 5)]]),
    ("reshape_flat", f_reshape_flat, [[(3, 4)], [(5, 4)], [(5, 7)]]),
    ("matmul", f_matmul, [[(3, 4), (4, 5)], [(6, 4), (4, 5)], [(6, 7), (7, 2)]]),
    ("slice", f_slice, [[(5, 6)], [(7, 6)], [(7, 9)], [(2, 2)]]),
    ("size_arith", f_size_arith, [[(3, 4)], [(5, 4)], [(8, 6)]]),
    ("loop", f_loop, [[(8,)], [(9,)], [(12,)], [(16,)], [(13,)]]),
    ("int_size", f_int_size, [[(3,)], [(4,)], [(5,)], [(4,)]]),
    ("float_compare", f_float_compare, [[(3,)], [(4,)], [(7,)], [(100,)], [(6,)]]),
    ("float_arith", f_float_arith, [[(8,)], [(11,)], [(12,)], [(10,)], [(3,)]]),
    ("int_input", f_scale_by_int, [[(3,), 3], [(3,), 4], [(3,), 1], [(3,), 0], [(3,), -2], [(4,), 5]]),
    ("int_branch", f_branch_on_int, [[(3,), 3], [(3,), 4], [(3,), 1], [(3,), 0], [(3,), 7]]),
    ("int_and_size", f_int_and_size, [[(6,), 3], [(8,), 4], [(12,), 3], [(10,), 5], [(9,), 3]]),
    ("cat_stack", f_cat_stack, [[(3, 4), (3, 4)], [(5, 4), (5, 4)], [(5, 6), (5, 6)], [(2, 2), (2, 2)]]),
    ("conv", f_conv, [[(2, 3, 8, 8), (4, 3, 3, 3)], [(2, 3, 10, 8), (4, 3, 3, 3)], [(1, 3, 12, 9), (4, 3, 3, 3)]]),
    ("attention", f_attention, [[(2, 5, 8), (2, 6, 8)], [(2, 7, 8), (2, 9, 8)], [(3, 7, 8), (3, 11, 8)]]),
    ("where_mask", f_where_mask, [[(4, 4)], [(6, 6)], [(3, 3)]]),
    ("arange_index", f_arange_index, [[(5, 3)], [(7, 3)], [(9, 4)]]),
    ("expand_permute", f_expand_permute, [[(4, 5)], [(6, 5)], [(6, 7)]]),
    ("reductions", f_reductions, [[(3, 4, 5)], [(3, 6, 5)], [(7, 6, 5)], [(7, 6, 9)]]),
    ("sym_slice", f_sym_slice, [[(3, 8)], [(3, 10)], [(5, 11)], [(5, 2)]]),
    ("flatten_linear", f_flatten_linear, [[(4, 2, 3), (5, 6)], [(7, 2, 3), (5, 6)], [(9, 2, 3), (5, 6)]]),
    ("pad_embed", f_pad_embed, [[("ids", (2, 5)), (10, 4)], [("ids", (2, 7)), (10, 4)],
                                [("ids", (3, 9)), (10, 4)]]),
    ("marked_design", f_design, [[("mark", (8,), 0)], [("mark", (9,), 0)], [("mark", (3,), 0)],
                                 [("mark", (5,), 0)]]),
    ("marked_broadcast", f_broadcast, [[("mark", (4, 3), 0), (3,)], [("mark", (6, 3), 0), (3,)],
                                       [("mark", (6, 5), 0), (5,)]]),
    ("softmax_sum", f_softmax_sum, [[(3, 4)], [(5, 4)], [(5, 8)]]),
]


@pytest.mark.parametrize("dynamic", [True, None], ids=["dynamic", "auto"])
@pytest.mark.parametrize("name,fn,calls", CASES, ids=[c[0] for c in CASES])
def test_compile_count_matches_torch(name, fn, calls, dynamic):
    ours = simulate(fn, calls, dynamic)
    theirs = torch_compiles(fn, calls, dynamic)
    assert ours == theirs, f"{name}: {ours} compiles, torch.compile {theirs}"

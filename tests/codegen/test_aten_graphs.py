"""Graphs of aten OpOverloads (what training records) through codegen: every overload of
codegen/aten.py's table, called from an FX graph, gives eager's values and lowers natively
(no extern node); float32 contiguous and non-contiguous, float64, integer and bool inputs where
the op takes them; a few through the Triton printer; and pydynamo.mutation's reading of
overload schemas (aten.add_, native_batch_norm in training, bernoulli_, out=).

Cases are grouped: one graph per group calls every overload of the group on shared inputs (one
compile per group), each result an output; a failure names the overload."""
import operator
import os
import sys

import pytest
import torch
import torch.fx

import codegen
from codegen.aten import ATEN, BINARY, UNARY
from pydynamo.mutation import mutation_of

aten = torch.ops.aten
BIG = sys.maxsize        # aten.slice's end for "to the end"


class Call:
    """An inner call in a case's arguments (a node of the graph, not an output)."""

    def __init__(self, spelling, args, kwargs):
        self.spelling, self.args, self.kwargs = spelling, args, kwargs


def op_of(spelling):
    packet, _, ov = spelling.partition(".")
    return getattr(getattr(aten, packet), ov)


def evaluate(v):
    """Eager values of a case's arguments (inner calls run)."""
    if isinstance(v, Call):
        return op_of(v.spelling)(*evaluate(v.args), **evaluate(v.kwargs))
    if isinstance(v, (list, tuple)):
        return type(v)(evaluate(x) for x in v)
    if isinstance(v, dict):
        return {k: evaluate(x) for k, x in v.items()}
    return v


def build_graph(cases, eager_meta=False):
    """(GraphModule, inputs, owners): one call node per case, tensors as placeholders (shared
    by identity), every tensor result (tuple items through operator.getitem) an output.
    eager_meta: each call node's meta["val"] is eager's result (as a recorder records it),
    else codegen propagates metadata on meta tensors."""
    g = torch.fx.Graph()
    tensors = {}

    def collect(v):
        if isinstance(v, Call):
            collect((v.args, v.kwargs))
        elif isinstance(v, torch.Tensor):
            tensors.setdefault(id(v), v)
        elif isinstance(v, (list, tuple)):
            for x in v:
                collect(x)
        elif isinstance(v, dict):
            for x in v.values():
                collect(x)
    for _, args, kwargs in cases:
        collect((args, kwargs))
    nodes = {k: g.placeholder(f"in{i}") for i, k in enumerate(tensors)}

    def lift(v):
        if isinstance(v, Call):
            return g.call_function(op_of(v.spelling), lift(tuple(v.args)), lift(v.kwargs))
        if isinstance(v, torch.Tensor):
            return nodes[id(v)]
        if isinstance(v, (list, tuple)):
            return type(v)(lift(x) for x in v)
        if isinstance(v, dict):
            return {k: lift(x) for k, x in v.items()}
        return v
    outs, owners, node_owner = [], [], {}
    for spelling, args, kwargs in cases:
        op = op_of(spelling)
        n = g.call_function(op, lift(tuple(args)), lift(kwargs))
        node_owner[n.name] = spelling
        res = op(*evaluate(args), **evaluate(kwargs))
        if eager_meta:
            n.meta["val"] = res
        if isinstance(res, (tuple, list)):
            for i, r in enumerate(res):
                if isinstance(r, torch.Tensor):
                    outs.append(g.call_function(operator.getitem, (n, i)))
                    owners.append(f"{spelling}[{i}]")
                    if eager_meta:
                        outs[-1].meta["val"] = r
        else:
            outs.append(n)
            owners.append(spelling)
    g.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), g), list(tensors.values()), owners, node_owner


def _factory_on(spelling, args, kwargs, device):
    """kwargs with device= for a factory that has no tensor argument to follow."""
    if any(a.name == "device" for a in op_of(spelling)._schema.arguments) and \
            not isinstance(args[0] if args else None, torch.Tensor):
        return dict(kwargs, device=device)
    return kwargs


def to_device(cases, device):
    """Cases with their tensors moved to `device` (shared ones stay shared), factories made
    there."""
    moved = {}

    def go(v):
        if isinstance(v, torch.Tensor):
            if id(v) not in moved:
                moved[id(v)] = v.to(device)
            return moved[id(v)]
        if isinstance(v, Call):
            args = go(v.args)
            return Call(v.spelling, args, _factory_on(v.spelling, args, go(v.kwargs), device))
        if isinstance(v, (list, tuple)):
            return type(v)(go(x) for x in v)
        if isinstance(v, dict):
            return {k: go(x) for k, x in v.items()}
        return v
    out = []
    for spelling, args, kwargs in cases:
        args = go(args)
        out.append((spelling, args, _factory_on(spelling, args, go(kwargs), device)))
    return out


def check_group(cases, rtol=1e-5, atol=1e-5, eager_meta=False, **options):
    gm, inputs, owners, node_owner = build_graph(cases, eager_meta)
    ref = gm(*inputs)
    c = codegen.compile_fx(gm, inputs, strict=True, **options)
    out = c(*inputs)
    assert not c.stats.fallback, c.stats.fallback
    externs = {node_owner.get(n, n): r for n, r in c.stats.extern_reasons.items()}
    assert not externs, f"not lowered natively: {externs}"
    wrong = []
    for who, a, b in zip(owners, out, ref):
        try:
            torch.testing.assert_close(a, b, rtol=rtol, atol=atol, equal_nan=True)
        except AssertionError as e:
            wrong.append(f"{who}: {str(e).splitlines()[0:3]}")
    assert not wrong, "\n".join(wrong)
    return c


class Inputs:
    """The tensors cases read: `a`, `b` (non-zero) of shape (4, 6), `row` (6,), `col` (4, 1),
    `pos` (positive), `mask` (bool); non-contiguous: transposed storage."""

    def __init__(self, dtype=torch.float32, contiguous=True):
        def t(*size, make):
            """make(*size) -> values; non-contiguous: made in the reversed order, permuted."""
            if contiguous or len(size) < 2:
                return make(*size)
            return make(*reversed(size)).permute(*reversed(range(len(size))))
        if dtype.is_floating_point:
            normal = lambda *s: torch.randn(*s, dtype=dtype)  # noqa: E731
            self.a, self.x3 = t(4, 6, make=normal), t(2, 3, 4, make=normal)
            self.b = t(4, 6, make=lambda *s: (torch.randn(*s, dtype=dtype).abs() + 0.5) *
                       torch.where(torch.rand(*s) > 0.5, 1.0, -1.0).to(dtype))
            self.pos = t(4, 6, make=lambda *s: torch.rand(*s, dtype=dtype) * 2 + 0.25)
            self.unit = t(4, 6, make=lambda *s: torch.rand(*s, dtype=dtype) * 0.8 + 0.1)
            self.row = torch.randn(6, dtype=dtype) + 3
        else:
            ints = lambda lo, hi: lambda *s: torch.randint(lo, hi, s, dtype=dtype)  # noqa: E731
            self.a, self.x3 = t(4, 6, make=ints(-9, 9)), t(2, 3, 4, make=ints(-9, 9))
            self.b = self.pos = t(4, 6, make=ints(1, 5))
            self.row = torch.randint(1, 4, (6,), dtype=dtype)
        self.col = self.a[:, :1]
        self.mask = t(4, 6, make=lambda *s: torch.randn(*s) > 0)


def pointwise_cases(x: Inputs):
    cases = [(f"{n}.default", (x.a,), {}) for n in UNARY
             if n not in ("bitwise_not", "logical_not")]
    for n, overloads in BINARY.items():
        if n.startswith("bitwise"):
            continue
        for ov in overloads:
            other = 0.75 if ov.startswith("Scalar") else x.b
            cases.append((f"{n}.{ov}", (x.a, other), {}))
    for n in ("add", "sub", "rsub"):
        cases += [(f"{n}.Tensor", (x.a, x.row), {"alpha": 2}),
                  (f"{n}.Scalar", (x.a, 1.5), {"alpha": 3})]
    cases += [
        ("div.Tensor_mode", (x.a, x.b), {"rounding_mode": "trunc"}),
        ("div.Scalar_mode", (x.a, 0.3), {"rounding_mode": "floor"}),
        ("pow.Tensor_Scalar", (x.pos, 3.0), {}),
        ("pow.Tensor_Tensor", (x.pos, x.b), {}),
        ("pow.Scalar", (2.0, x.a), {}),
        ("gelu.default", (x.a,), {"approximate": "tanh"}),
        ("leaky_relu.default", (x.a, 0.2), {}),
        ("hardtanh.default", (x.a, -0.5, 0.5), {}),
        ("threshold.default", (x.a, 0.1, 20.0), {}),
        ("softplus.default", (x.a, 2.0, 1.0), {}),
        ("round.default", (x.a,), {}),
        ("logit.default", (x.unit, 1e-6), {}),
        ("where.self", (x.mask, x.a, x.b), {}),
        ("where.ScalarSelf", (x.mask, 1.5, x.b), {}),
        ("where.ScalarOther", (x.mask, x.a, -2.0), {}),
        ("clamp.default", (x.a, -0.5, 0.5), {}),
        ("clamp.Tensor", (x.a, x.row - 3.5), {}),
        ("clamp_min.default", (x.a, 0.1), {}),
        ("clamp_max.default", (x.a, 0.1), {}),
        ("masked_fill.Scalar", (x.a, x.mask, 7.0), {}),
        ("masked_fill.Tensor", (x.a, x.mask, torch.tensor(-3.0, dtype=x.a.dtype)), {}),
        ("lerp.Scalar", (x.a, x.b, 0.3), {}),
        ("lerp.Tensor", (x.a, x.b, x.unit), {}),
        ("addcmul.default", (x.a, x.b, x.row), {"value": 0.5}),
        ("addcdiv.default", (x.a, x.row, x.b), {"value": 2.0}),
        ("addmm.default", (x.row, x.a, torch.randn(6, 6, dtype=x.a.dtype)),
         {"beta": 0.5, "alpha": 2.0}),
        ("mm.default", (x.a, torch.randn(6, 5, dtype=x.a.dtype)), {}),
    ]
    return cases


def backward_cases(x: Inputs):
    dt = x.a.dtype
    y_tanh, y_sig = torch.tanh(x.a), torch.sigmoid(x.a)
    y_sm, y_lsm = torch.softmax(x.a, 1), torch.log_softmax(x.a, 0)
    w, bias = torch.randn(6, dtype=dt), torch.randn(6, dtype=dt)
    _, mean, rstd = aten.native_layer_norm.default(x.a, [6], w, bias, 1e-5)
    _, mean2, rstd2 = aten.native_layer_norm.default(x.x3, [3, 4], None, None, 1e-5)
    return [
        ("threshold_backward.default", (x.b, x.a, 0), {}),
        ("gelu_backward.default", (x.b, x.a), {}),
        ("gelu_backward.default", (x.b, x.a), {"approximate": "tanh"}),
        ("tanh_backward.default", (x.b, y_tanh), {}),
        ("sigmoid_backward.default", (x.b, y_sig), {}),
        ("silu_backward.default", (x.b, x.a), {}),
        ("_softmax_backward_data.default", (x.b, y_sm, 1, dt), {}),
        ("_log_softmax_backward_data.default", (x.b, y_lsm, 0, dt), {}),
        ("native_dropout_backward.default", (x.b, x.mask, 1.25), {}),
        ("hardtanh_backward.default", (x.b, x.a * 4, 0.0, 6.0), {}),
        ("hardsigmoid_backward.default", (x.b, x.a * 4), {}),
        ("hardswish_backward.default", (x.b, x.a * 4), {}),
        ("leaky_relu_backward.default", (x.b, x.a, 0.2, False), {}),
        ("elu_backward.default", (x.b, 1.5, 1.0, 1.0, False, x.a), {}),
        ("elu_backward.default", (x.b, 1.0, 1.05, 1.0, True, torch.selu(x.a)), {}),
        ("softplus_backward.default", (x.b, x.a * 10, 2.0, 20.0), {}),
        ("elu.default", (x.a, 0.7), {}),
        ("native_layer_norm.default", (x.a, [6], w, bias, 1e-5), {}),
        ("native_layer_norm.default", (x.x3, [3, 4], None, None, 1e-5), {}),
        ("native_layer_norm_backward.default",
         (x.b, x.a, [6], mean, rstd, w, bias, [True, True, True]), {}),
        ("native_layer_norm_backward.default",
         (x.x3 * 2, x.x3, [3, 4], mean2, rstd2, None, None, [True, False, False]), {}),
        ("_softmax.default", (x.a, 1, False), {}),
        ("_log_softmax.default", (x.a, -1, False), {}),
    ] + nll_cases(x) + batch_norm_cases(x) + [
        (s, (x.a, x.b, r), {}) for s in ("mse_loss.default",) for r in (0, 1, 2)] + [
        ("mse_loss_backward.default", (g, x.a, x.b, r), {})
        for g, r in ((x.unit, 0), (torch.tensor(0.7, dtype=dt), 1),
                     (torch.tensor(-2.0, dtype=dt), 2))]


def batch_norm_cases(x: Inputs):
    dt = x.a.dtype
    x4 = x.x3.unsqueeze(-1).expand(2, 3, 4, 2) * 1.5     # (N, C, H, W), non-contiguous
    w, bias = torch.rand(3, dtype=dt) + 0.5, torch.randn(3, dtype=dt)
    rm, rv = torch.randn(3, dtype=dt), torch.rand(3, dtype=dt) + 0.5
    rm6, rv6 = torch.randn(6, dtype=dt), torch.rand(6, dtype=dt) + 0.5
    _, save_mean, save_invstd, _, _ = aten._native_batch_norm_legit_functional.default(
        x4, w, bias, rm, rv, True, 0.1, 1e-5)
    g4 = torch.randn(2, 3, 4, 2, dtype=dt)
    return [
        ("_native_batch_norm_legit_functional.default", (x4, w, bias, rm, rv, True, 0.1, 1e-5),
         {}),
        ("_native_batch_norm_legit_functional.default",
         (x.a, None, None, rm6, rv6, True, 0.3, 1e-3), {}),
        ("native_batch_norm_backward.default",
         (g4, x4, w, rm, rv, save_mean, save_invstd, True, 1e-5, [True, True, True]), {}),
        ("native_batch_norm_backward.default",
         (g4, x4, w, rm, rv, None, None, False, 1e-5, [True, True, True]), {}),
        ("native_batch_norm_backward.default",
         (x.b, x.a, None, rm6, rv6, *aten._native_batch_norm_legit_functional.default(
             x.a, None, None, rm6, rv6, True, 0.1, 1e-5)[1:3], True, 1e-5,
          [True, False, False]), {}),
    ]


def nll_cases(x: Inputs):
    """nll_loss_forward / backward: every reduction, weights, an ignored row, 1-d input."""
    logp, t = torch.log_softmax(x.a, 1), torch.tensor([0, 5, -100, 2])
    w = torch.rand(6, dtype=x.a.dtype) + 0.5
    cases = []
    for reduction in (0, 1, 2):
        for weight in (None, w):
            _, total = aten.nll_loss_forward.default(logp, t, weight, reduction, -100)
            g = x.b[:, 0] if reduction == 0 else torch.tensor(1.5, dtype=x.a.dtype)
            cases += [("nll_loss_forward.default", (logp, t, weight, reduction, -100), {}),
                      ("nll_loss_backward.default",
                       (g, logp, t, weight, reduction, -100, total), {})]
    t1 = torch.tensor(3)
    _, total = aten.nll_loss_forward.default(logp[1], t1, None, 1, -100)
    return cases + [("nll_loss_forward.default", (logp[1], t1, None, 1, -100), {}),
                    ("nll_loss_backward.default",
                     (torch.tensor(0.5, dtype=x.a.dtype), logp[1], t1, None, 1, -100, total),
                     {})]


def reduction_cases(x: Inputs):
    return [
        ("sum.default", (x.a,), {}),
        ("sum.dim_IntList", (x.a, [1]), {"keepdim": True}),
        ("sum.dim_IntList", (x.x3, [0, 2]), {"dtype": torch.float64}),
        ("sum.dim_IntList", (x.a, None), {}),
        ("mean.default", (x.a,), {}),
        ("mean.dim", (x.x3, [-1], True), {}),
        ("prod.default", (x.a,), {}),
        ("prod.dim_int", (x.a, 0), {}),
        ("amax.default", (x.a, [1]), {}),
        ("amin.default", (x.x3, [0], True), {}),
        ("amax.default", (x.a,), {}),
        ("max.dim", (x.a, 1), {}),
        ("min.dim", (x.a, 0, True), {}),
        ("max.default", (x.a,), {}),
        ("min.default", (x.a,), {}),
        ("argmax.default", (x.a, 1), {}),
        ("argmin.default", (x.a,), {}),
        ("any.default", (x.mask,), {}),
        ("all.default", (x.mask,), {}),
        ("any.dim", (x.mask, 1), {}),
        ("all.dim", (x.mask, 0, True), {}),
        ("any.dims", (x.mask, [0, 1]), {}),
        ("all.dims", (x.mask, [1]), {}),
        ("logsumexp.default", (x.a, [1]), {}),
        ("var.correction", (x.a, [1]), {"correction": 1}),
        ("var.correction", (x.x3, [0, 2]), {"correction": 0, "keepdim": True}),
        ("var_mean.correction", (x.a, [0]), {"correction": 1}),
        ("aminmax.default", (x.a,), {}),
        ("aminmax.default", (x.x3,), {"dim": 1, "keepdim": True}),
    ]


def view_cases(x: Inputs):
    idx = torch.tensor([2, 0, 3])
    table = torch.randn(10, 5, dtype=x.a.dtype)
    return [
        ("view.default", (x.a.contiguous(), [6, 4]), {}),
        ("_unsafe_view.default", (x.a.contiguous(), [2, 12]), {}),
        ("reshape.default", (x.a, [-1]), {}),
        ("expand.default", (x.col, [3, 4, 6]), {}),
        ("t.default", (x.a,), {}),
        ("permute.default", (x.x3, [2, 0, 1]), {}),
        ("transpose.int", (x.x3, 0, -1), {}),
        ("unsqueeze.default", (x.a, 1), {}),
        ("squeeze.default", (x.col,), {}),
        ("squeeze.dim", (x.col, -1), {}),
        ("squeeze.dims", (x.col, [0, 1]), {}),
        ("slice.Tensor", (x.a, 1, 1, 5, 2), {}),
        ("slice.Tensor", (x.a, 0, 1, BIG), {}),
        ("slice.Tensor", (x.a, -1, -3), {}),
        ("select.int", (x.x3, 1, -1), {}),
        ("narrow.default", (x.a, 1, 2, 3), {}),
        ("split.Tensor", (x.a, 4, 1), {}),
        ("split_with_sizes.default", (x.a, [1, 3], 0), {}),
        ("unbind.int", (x.a, 0), {}),
        ("diagonal.default", (x.a, 1), {}),
        ("cat.default", ([x.a, x.b], 1), {}),
        ("stack.default", ([x.a, x.b],), {}),
        ("flip.default", (x.a, [0, 1]), {}),
        ("roll.default", (x.a, [1], [1]), {}),
        ("roll.default", (x.a, [2]), {}),
        ("repeat.default", (x.row, [2, 2]), {}),
        ("tril.default", (x.a, 1), {}),
        ("triu.default", (x.a,), {}),
        ("constant_pad_nd.default", (x.a, [1, 2], 0.5), {}),
        ("index_select.default", (x.a, 1, idx), {}),
        ("gather.default", (x.a, 1, torch.randint(0, 6, (4, 3))), {}),
        ("embedding.default", (table, torch.tensor([[1, 9], [0, 4]])), {}),
        ("embedding.default", (table, torch.tensor([1, 9, 2]), 1, True), {}),
    ]


def factory_cases(x: Inputs):
    dt = x.a.dtype
    fill = lambda inner: ("fill.Scalar", (inner, 3.0), {})  # noqa: E731  (empty's values)
    return [
        ("full.default", ([3, 4], 2.5), {"dtype": dt}),
        ("zeros.default", ([2, 3],), {"dtype": dt}),
        ("ones.default", ([5],), {}),
        ("scalar_tensor.default", (3.5,), {}),
        ("scalar_tensor.default", (2,), {"dtype": torch.int64}),
        ("new_zeros.default", (x.a, [2, 3]), {}),
        ("new_ones.default", (x.a, [3]), {"dtype": torch.int32}),
        ("new_full.default", (x.a, [2, 2], 7.0), {}),
        ("zeros_like.default", (x.a,), {}),
        ("ones_like.default", (x.a,), {"dtype": torch.float64}),
        ("full_like.default", (x.a, -1.5), {}),
        ("arange.default", (7,), {}),
        ("arange.start", (2, 9), {"dtype": dt}),
        ("arange.start_step", (1, 20, 3), {}),
        ("fill.Scalar", (x.a, 2.0), {}),
        ("fill.Tensor", (x.a, torch.tensor(4.0, dtype=dt)), {}),
        ("zero.default", (x.a,), {}),
        ("clone.default", (x.a,), {}),
        ("clone.default", (x.a,), {"memory_format": torch.contiguous_format}),
        ("lift_fresh_copy.default", (x.a,), {}),
        ("detach.default", (x.a,), {}),
        ("alias.default", (x.a,), {}),
        ("_to_copy.default", (x.a,), {"dtype": torch.float64}),
        ("_to_copy.default", (x.a,), {"dtype": torch.int32}),
        ("_to_copy.default", (x.a,), {}),
        ("copy.default", (x.a, x.row), {}),
        ("copy.default", (x.a, x.mask), {}),
        fill(Call("empty.memory_format", ([2, 3],), {"dtype": dt})),
        fill(Call("empty_like.default", (x.a,), {})),
        fill(Call("new_empty.default", (x.a, [2]), {})),
    ]


def int_cases(x: Inputs):
    """Integer operands (bool for the logical ops)."""
    return [
        ("add.Tensor", (x.a, x.b), {"alpha": 2}), ("sub.Scalar", (x.a, 3), {}),
        ("mul.Tensor", (x.a, x.row), {}), ("div.Tensor", (x.a, x.b), {}),
        ("div.Tensor_mode", (x.a, x.b), {"rounding_mode": "floor"}),
        ("div.Tensor_mode", (x.a, x.b), {"rounding_mode": "trunc"}),
        ("remainder.Tensor", (x.a, x.b), {}), ("floor_divide.default", (x.a, x.b), {}),
        ("eq.Tensor", (x.a, x.b), {}), ("lt.Scalar", (x.a, 2), {}),
        ("maximum.default", (x.a, x.b), {}), ("minimum.default", (x.a, x.row), {}),
        ("bitwise_and.Tensor", (x.a, x.b), {}), ("bitwise_or.Scalar", (x.a, 6), {}),
        ("bitwise_xor.Tensor", (x.a, x.b), {}), ("bitwise_not.default", (x.a,), {}),
        ("bitwise_and.Scalar", (x.a, 5), {}), ("bitwise_or.Tensor", (x.a, x.row), {}),
        ("bitwise_xor.Scalar", (x.mask, True), {}),
        ("logical_not.default", (x.mask,), {}), ("bitwise_not.default", (x.mask,), {}),
        ("logical_and.default", (x.mask, x.a), {}), ("abs.default", (x.a,), {}),
        ("neg.default", (x.a,), {}), ("sign.default", (x.a,), {}),
        ("where.self", (x.mask, x.a, x.b), {}), ("clamp.default", (x.a, -2, 3), {}),
        ("sum.dim_IntList", (x.a, [1]), {}), ("amax.default", (x.a, [0]), {}),
        ("_to_copy.default", (x.a,), {"dtype": torch.float32}),
        ("exp.default", (x.a,), {}), ("pow.Tensor_Scalar", (x.pos.double(), 2), {}),
        ("masked_fill.Scalar", (x.a, x.mask, 5), {}),
    ]


GROUPS = [pointwise_cases, backward_cases, reduction_cases, view_cases, factory_cases]


@pytest.mark.parametrize("group", GROUPS, ids=lambda g: g.__name__)
@pytest.mark.parametrize("contiguous", [True, False], ids=["contiguous", "strided"])
def test_float32_group(group, contiguous):
    torch.manual_seed(0)
    check_group(group(Inputs(torch.float32, contiguous)), rtol=2e-5, atol=2e-5)


@pytest.mark.parametrize("group", [pointwise_cases, backward_cases, reduction_cases],
                         ids=lambda g: g.__name__)
def test_float64_group(group):
    torch.manual_seed(1)
    check_group(group(Inputs(torch.float64, False)), rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32])
def test_integer_operands(dtype):
    torch.manual_seed(2)
    check_group(int_cases(Inputs(dtype, dtype == torch.int64)))


def batch_norm_eval_cases(x: Inputs):
    dt = x.a.dtype
    x4 = x.x3.unsqueeze(-1).expand(2, 3, 4, 2) * 1.5
    w, bias = torch.rand(3, dtype=dt) + 0.5, torch.randn(3, dtype=dt)
    rm, rv = torch.randn(3, dtype=dt), torch.rand(3, dtype=dt) + 0.5
    return [
        ("native_batch_norm.default", (x4, w, bias, rm, rv, False, 0.1, 1e-5), {}),
        ("native_batch_norm.default", (x.a, None, None, x.row, x.row + 1, False, 0.1, 1e-3), {}),
        ("_native_batch_norm_legit_no_training.default", (x4, w, bias, rm, rv, 0.1, 1e-5), {}),
        ("_native_batch_norm_legit_functional.default", (x4, w, bias, rm, rv, False, 0.1, 1e-5),
         {}),
    ]


def test_batch_norm_in_evaluation():
    """Eager's CPU kernel saves empty statistics, the meta kernel says (C,): the recorded (CPU)
    metadata and codegen's own meta run both follow the CPU kernel (pydynamo.meta's
    device_results), so the ops lower natively either way (they used to run extern when the
    graph carried no metadata), values exact."""
    torch.manual_seed(6)
    cases = batch_norm_eval_cases(Inputs(torch.float32, contiguous=False))
    check_group(cases, eager_meta=True)
    gm, inputs, _, _ = build_graph(cases)
    c = codegen.compile_fx(gm, inputs, strict=True)
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons
    for got, want in zip(c(*inputs), gm(*inputs)):
        torch.testing.assert_close(got, want)
    m = mutation_of("call_function", aten.native_batch_norm.default, cases[0][1], {})
    assert m is None                                          # evaluation writes nothing


def test_every_table_row_is_tested():
    """Each overload codegen/aten.py lowers is called by some case above."""
    tested = set()
    cases = [c for g in GROUPS + [batch_norm_eval_cases] for c in g(Inputs(torch.float32))] + \
        int_cases(Inputs(torch.int64))
    for case in cases:
        tested |= _spellings(case)
    missing = sorted(str(op) for op in ATEN if _spelling(op) not in tested)
    assert not missing, missing


def _spelling(op):
    return f"{op._schema.name.split('::')[1]}.{op._overloadname}"


def _spellings(case):
    found = {case[0]}
    for v in list(case[1]) + list(case[2].values()):
        if isinstance(v, Call):
            found |= _spellings((v.spelling, v.args, v.kwargs))
    return found


def test_table_rows_bind_every_schema_argument():
    """No row drops an argument: its adapter's names are exactly the schema's."""
    for op, row in ATEN.items():
        assert row.uses == {a.name for a in op._schema.arguments}, op


def test_unknown_overloads_run_extern():
    """bmm and friends are not in the table: extern calls, with eager's values."""
    a, b = torch.randn(2, 4, 5), torch.randn(2, 5, 3)
    gm, inputs, owners, _ = build_graph([("bmm.default", (a, b), {}),
                                         ("relu.default", (a,), {})])
    c = codegen.compile_fx(gm, inputs, strict=True)
    assert c.stats.extern_nodes == 1 and c.stats.native_nodes == 1, c.stats
    for got, want in zip(c(*inputs), gm(*inputs)):
        torch.testing.assert_close(got, want)


def test_torch_level_spellings_unchanged():
    """The aten-only lowerings (registered as "aten.<op>") are invisible to torch-level graphs:
    x.copy_(y) and torch.native_layer_norm keep their torch-level handling."""
    from codegen.canonical import function_table
    names = set(function_table().values())
    assert not any(n.startswith("aten.") for n in names)


def test_backward_graph_of_mlp_lowers_natively():
    """The ops a Linear-LayerNorm-GELU-softmax backward records, in one graph: one fused
    pointwise/reduction program, the matrix products extern."""
    torch.manual_seed(3)
    x, w, b = torch.randn(8, 16), torch.randn(16), torch.randn(16)
    g = torch.randn(8, 16)
    out, mean, rstd = aten.native_layer_norm.default(x, [16], w, b, 1e-5)
    h = aten.gelu.default(out)
    sm = aten._softmax.default(h, -1, False)

    def f(x, w, b, g, mean, rstd, h, sm):
        g1 = aten._softmax_backward_data.default(g, sm, -1, torch.float32)
        g2 = aten.gelu_backward.default(g1, h)
        gi, gw, gb = aten.native_layer_norm_backward.default(
            g2, x, [16], mean, rstd, w, b, [True, True, True])
        return aten.mm.default(aten.t.default(gi), x), gw, aten.sum.dim_IntList(gb, [0], True)
    gm = torch.fx.symbolic_trace(f)
    inputs = [x, w, b, g, mean, rstd, out, sm]
    c = codegen.compile_fx(gm, inputs, strict=True)
    # everything lowered; the mm is its lowering's extern call (codegen/gemm.py)
    assert c.stats.extern_nodes == 0 and c.stats.externs == 1, c.stats
    for got, want in zip(c(*inputs), gm(*inputs)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


def test_copies_are_fresh_and_views_alias():
    """_to_copy, clone and copy return new tensors even where the value is the input's (no
    cast); view and alias share the input's storage, as eager's do."""
    def f(x):
        return (aten._to_copy.default(x), aten.clone.default(x),
                aten._to_copy.default(x, dtype=torch.float32), aten.copy.default(x, x),
                aten.view.default(x, [-1]), aten.alias.default(x))
    x = torch.randn(3, 4)
    c = codegen.compile_fx(torch.fx.symbolic_trace(f), [x], strict=True)
    assert c.stats.extern_nodes == 0, c.stats.extern_reasons
    shares = [o.data_ptr() == x.data_ptr() for o in c(x)]
    assert shares == [False, False, False, False, True, True]


@pytest.mark.skipif(os.environ.get("TRITON_INTERPRET") != "1",
                    reason="Triton kernels on CPU tensors run under TRITON_INTERPRET=1 only "
                           "(test_cuda_group covers CUDA)")
def test_triton_backend():
    torch.manual_seed(4)
    x = Inputs(torch.float32, contiguous=False)
    cases = [c for c in pointwise_cases(x) + backward_cases(x)
             if c[0].split(".")[0] in ("add", "mul", "where", "_to_copy", "gelu", "sigmoid",
                                       "threshold_backward", "gelu_backward", "tanh_backward",
                                       "_softmax_backward_data", "native_layer_norm",
                                       "native_layer_norm_backward", "_softmax")]
    cases += [("view.default", (x.a.contiguous(), [24]), {}),
              ("sum.dim_IntList", (x.a, [0]), {}),
              ("_to_copy.default", (x.a,), {"dtype": torch.float64})]
    before = codegen.counters["triton_path"]
    check_group(cases, rtol=1e-4, atol=1e-4, backend_kernels="triton")
    assert codegen.counters["triton_path"] > before


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("group", GROUPS + [int_cases], ids=lambda g: g.__name__)
def test_cuda_group(group):
    """The groups on CUDA tensors: Triton kernels (the training benchmark's path)."""
    torch.manual_seed(5)
    x = Inputs(torch.int64 if group is int_cases else torch.float32, contiguous=False)
    before = codegen.counters["triton_path"]
    check_group(to_device(group(x), "cuda"), rtol=1e-4, atol=1e-4)
    assert codegen.counters["triton_path"] > before


# ------------------------------------------------------------------ pydynamo.mutation


def test_mutation_reads_overload_schemas():
    m = mutation_of("call_function", aten.add_.Tensor, ("x", "y"), {})
    assert (m.mutated, m.returns, m.metadata) == ((0,), 0, False)
    m = mutation_of("call_function", aten.bernoulli_.float, ("x", 0.5), {})
    assert (m.mutated, m.returns) == ((0,), 0)
    m = mutation_of("call_function", aten.add.out, ("x", "y"), {"out": "o"})
    assert (m.mutated, m.returns, m.metadata) == (("out",), "out", True)
    bn = ("x", "w", "b", "rm", "rv")
    m = mutation_of("call_function", aten.native_batch_norm.default, bn + (True, 0.1, 1e-5), {})
    assert m.mutated == (3, 4) and m.returns is None
    assert mutation_of("call_function", aten.native_batch_norm.default,
                       bn + (False, 0.1, 1e-5), {}) is None
    m = mutation_of("call_function", aten._native_batch_norm_legit.default,
                    bn + (True, 0.1, 1e-5), {})
    assert m.mutated == (3, 4)
    assert mutation_of("call_function", aten.t_.default, ("x",), {}).metadata
    assert mutation_of("call_function", aten._foreach_add_.List, (["a"], ["b"]), {}).returns \
        is None
    assert mutation_of("call_function", aten.add.Tensor, ("x", "y"), {}) is None
    assert mutation_of("call_function", aten.native_layer_norm.default,
                       ("x", [4], None, None, 1e-5), {}) is None


def test_inplace_overload_in_graph_is_never_wrong():
    """An in-place aten overload in a graph handed to codegen (not functionalized): the
    mutation is seen, and the input written as eager writes it."""
    def f(x, y):
        aten.add_.Tensor(x, y)
        return aten.mul.Tensor(x, 2)
    gm = torch.fx.symbolic_trace(f)
    x, y = torch.randn(4), torch.randn(4)
    xe = x.clone()
    want = gm(xe, y)
    got = codegen.compile_fx(gm, [x, y])(x, y)
    torch.testing.assert_close(got, want)
    torch.testing.assert_close(x, xe)

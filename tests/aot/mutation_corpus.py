"""The mutation/aliasing corpus of issue 16: functions and nn.Modules whose in-place updates,
aliasing outputs and aliasing inputs every backend must replay exactly as eager does.

Each `Case` holds the program (`fn`, or a module factory when `module`) and `make(T)`, which
builds the call's arguments from an `Inputs` factory T. The harness (test_mutation_corpus.py)
calls `make` twice from the same seed, once for eager and once for the compiled run, so the two
argument sets have equal values AND the same aliasing structure (`f(a, a)`, `f(x, x.view(-1))`,
`f(x[0], x[1])` are spelled in `make`).

Grad mode: `T.rand` returns a NON-leaf tensor (`base * 1` of a leaf that requires grad) because a
leaf that requires grad cannot be mutated in place; `T.leaf` returns the leaf itself (for inputs
the program only reads). The leaves are collected in `T.bases` so the harness can compare their
`.grad` after a backward. In inference mode both return plain tensors.

Programs that autograd rejects in grad mode (`out=` ops on inputs that require grad, an in-place
op on a leaf that requires grad) stay in the grad-mode runs: eager raises, and the compiled call
must raise the same exception type. `triton=True`: in the subset also run by codegen's Triton
kernels (under TRITON_INTERPRET=1 on CPU).
"""
from __future__ import annotations

import collections
import dataclasses
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import pydynamo


class Inputs:
    """Argument factory for one side of one run (see the module docstring)."""

    def __init__(self, grad: bool):
        self.grad = grad
        self.bases: list[torch.Tensor] = []

    @staticmethod
    def _nonzero(*shape) -> torch.Tensor:
        t = torch.randn(shape)
        return t + torch.where(t >= 0, 0.25, -0.25)   # |t| >= 0.25: no zero, no sign ambiguity

    def rand(self, *shape) -> torch.Tensor:
        t = self._nonzero(*shape)
        if not self.grad:
            return t
        base = t.requires_grad_()
        self.bases.append(base)
        return base * 1

    def leaf(self, *shape) -> torch.Tensor:
        t = self._nonzero(*shape)
        if self.grad:
            t.requires_grad_()
            self.bases.append(t)
        return t

    @staticmethod
    def mask(*shape) -> torch.Tensor:
        return torch.rand(*shape) > 0.5

    @staticmethod
    def perm(n: int, k: int | None = None) -> torch.Tensor:
        """k distinct indices below n (distinct: index_put/scatter with duplicates is unordered)."""
        return torch.randperm(n)[: k or n]


@dataclasses.dataclass
class Case:
    name: str
    fn: Callable                 # the program, or (module=True) a factory of the nn.Module
    make: Callable               # make(T: Inputs) -> tuple of arguments
    module: bool = False
    triton: bool = False         # also run with codegen's Triton kernels
    make_later: Callable | None = None   # the arguments of the calls after the first (None: make)


CASES: list[Case] = []

# (backend, mode, "eager fallback" | "graph break") -> [(case name, warning)]: filled by the
# harness, printed by conftest at the end of the session
NOTED: dict = collections.defaultdict(list)


def case(make, name=None, module=False, triton=False, make_later=None):
    def deco(fn):
        CASES.append(Case(name or fn.__name__, fn, make, module, triton, make_later))
        return fn
    return deco


def two(T):
    return T.rand(3, 4), T.rand(3, 4)


def one(T):
    return (T.rand(3, 4),)


def x_and_leaf(T):
    return T.rand(3, 4), T.leaf(3, 4)


# ---- in-place ops on inputs --------------------------------------------------------------------

@case(x_and_leaf, triton=True)
def add_on_input_returns_it(x, y):
    x.add_(y)
    return x


@case(x_and_leaf, triton=True)
def iadd_on_input(x, y):
    x += y
    return x * 2


@case(one, triton=True)
def mul_chain_on_input(x):
    x.mul_(2).add_(1).div_(3)
    return x.sum()


@case(lambda T: (T.rand(3, 4), T.mask(3, 4)), triton=True)
def mask_setitem_scalar(x, m):
    x[m] = 0.5
    return x + 1


@case(lambda T: (T.rand(3, 4), T.mask(3, 4), T.leaf(3, 4)))
def mask_setitem_tensor(x, m, y):
    x[m] = y[m]
    return x.sum(1)


@case(lambda T: (T.rand(6, 4), T.perm(6, 3), T.leaf(3, 4)), triton=True)
def index_setitem_tensor(x, i, v):
    x[i] = v
    return x


@case(lambda T: (T.rand(6, 4), T.perm(6, 3)))
def index_setitem_scalar(x, i):
    x[i] = -1.0
    return x * x


@case(one, triton=True)
def column_iadd(x):
    x[:, 0] += 1
    return x.sum(0)


@case(x_and_leaf)
def copy_into_input_returns_none(x, y):
    x.copy_(y)


@case(x_and_leaf)
def zero_input(x, y):
    x.zero_()
    return y + 1


@case(one, triton=True)
def relu_inplace_function(x):
    torch.relu_(x)
    return x


@case(one)
def clamp_inplace(x):
    return x.clamp_(-0.5, 0.5)


@case(lambda T: (T.rand(5, 4), T.perm(5, 3), T.leaf(3, 4)))
def index_add_inplace(x, i, y):
    x.index_add_(0, i, y)
    return x.mean()


@case(lambda T: (T.rand(3, 4), torch.stack([T.perm(4) for _ in range(3)]), T.leaf(3, 4)))
def scatter_inplace(x, i, y):
    return x.scatter_(1, i, y)


@case(lambda T: (T.leaf(3, 4),))
def mutate_leaf_input(x):
    """Grad mode: eager raises (a leaf that requires grad used in an in-place op); so must the
    compiled call, with the same exception type."""
    x.mul_(2)
    return x + 1


@case(lambda T: (T.rand(3, 4), T.mask(3, 4)), triton=True)
def masked_fill_inplace(x, m):
    x.masked_fill_(m, 0.25)
    return x.exp()


@case(lambda T: (T.rand(3, 4), T.leaf(3, 4), T.rand(3, 4)))
def sgd_momentum_update(p, g, buf):
    buf.mul_(0.9).add_(g)
    p.add_(buf, alpha=-0.1)
    return p.norm()


@case(x_and_leaf)
def mutate_both_inputs(x, y):
    x.add_(y)
    y2 = y * 1
    return x, y2


@case(two)
def mutate_two_inputs(x, y):
    x.add_(1)
    y.mul_(x)


@case(lambda T: (T.rand(3, 4), T.leaf(4)))
def broadcast_inplace(x, b):
    x.add_(b)
    return x * b


@case(one)
def fill_with_0d_tensor(x):
    x.fill_(x[0, 0].detach() * 0 + 3)
    return x


@case(lambda T: (torch.randint(-5, 5, (3, 4)), T.rand(3, 4)))
def int_input_inplace(i, x):
    i.add_(2).mul_(3)
    x.add_(i)          # an int64 operand promoted into a float input
    return i.sum(), x


@case(lambda T: (T.rand(3, 4).to(torch.bfloat16), T.leaf(3, 4).to(torch.bfloat16)), triton=True)
def bfloat16_input_inplace(x, y):
    x.mul_(y).add_(1)
    return x.float().sum(0)


@case(lambda T: (T.rand(), T.leaf(3)))
def zero_dim_input_inplace(s, v):
    s.add_(v.sum())
    return v * s


@case(lambda T: (T.leaf(3, 4), T.leaf(3, 4)))
def no_grad_update_of_leaf(p, g):
    """An optimizer-like step on a leaf that requires grad, under no_grad inside the program."""
    with torch.no_grad():
        p.add_(g, alpha=-0.1)
    return (p * g).sum()


@case(lambda T: (T.rand(4, 3).t(), T.leaf(3, 4)), triton=True)
def noncontiguous_input_inplace(x, y):
    x.add_(y).mul_(2)
    return x.sum(1)


@case(lambda T: (T.rand(5, 4)[1:], T.leaf(4, 4)))
def offset_input_inplace(x, y):
    x.sub_(y)
    return x


# ---- in-place ops on views of inputs -----------------------------------------------------------

@case(one, triton=True)
def view_add_inplace(x):
    x.view(-1).add_(1)
    return x.sum()


@case(one, triton=True)
def t_mul_inplace(x):
    x.t().mul_(2)
    return x


@case(one)
def slice_fill(x):
    x[1:].fill_(3)
    return x + 0


@case(lambda T: (T.rand(4, 4),))
def diagonal_add_inplace(x):
    x.diagonal().add_(1)
    return x.trace()


@case(lambda T: (T.rand(3, 4), T.leaf(4)))
def select_copy_inplace(x, y):
    x[0].copy_(y)
    return x


@case(one)
def narrow_zero(x):
    x.narrow(1, 1, 2).zero_()
    return x.t()


@case(one)
def view_of_view_add(x):
    x.view(2, 6)[0].add_(1)
    return x


@case(one)
def transpose_setitem(x):
    x.transpose(0, 1)[0] = 1.5
    return x.sum()


@case(lambda T: (T.rand(2, 3, 4),))
def permute_unsqueeze_inplace(x):
    x.permute(2, 0, 1).unsqueeze(0).mul_(3)
    return x


# ---- chained in-place ops ----------------------------------------------------------------------

@case(one, triton=True)
def chain_on_view_returns_view(x):
    v = x[0]
    v.mul_(2).add_(1)
    return v


@case(one)
def self_aliasing_mul(x):
    x.add_(1)
    x.mul_(x)
    return x


@case(one)
def chain_then_read_old_view(x):
    v = x.view(-1)
    x.sub_(1).abs_()
    return v.sum(), v


# ---- buffers -----------------------------------------------------------------------------------

class Counter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))

    def forward(self, x):
        self.count += 1
        return x * self.count


class FloatCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros(()))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.count += 1
        return self.lin(x) / self.count


class EMA(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("ema", torch.zeros(4))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        y = self.lin(x)
        self.ema.copy_(self.ema * 0.9 + y.detach().mean(0) * 0.1)
        return y - self.ema


class BufferSetitem(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("stats", torch.zeros(3))

    def forward(self, x):
        self.stats[0] = x.detach().sum()
        self.stats[1:] += 1
        return x * 2


class BN1d(nn.Module):
    def __init__(self):
        super().__init__()
        # no bias before BatchNorm: its gradient is zero in exact arithmetic, round-off otherwise
        self.lin, self.bn = nn.Linear(4, 6, bias=False), nn.BatchNorm1d(6)

    def forward(self, x):
        return F.relu(self.bn(self.lin(x)))


class BN2d(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv, self.bn = nn.Conv2d(2, 3, 3, padding=1, bias=False), nn.BatchNorm2d(3)

    def forward(self, x):
        return self.bn(self.conv(x)).sum((2, 3))


class BN1dEval(BN1d):
    def __init__(self):
        super().__init__()
        self.eval()


class BNNoMomentum(nn.Module):
    """momentum=None: cumulative average, num_batches_tracked read in the update."""

    def __init__(self):
        super().__init__()
        self.bn = nn.BatchNorm1d(4, momentum=None)

    def forward(self, x):
        return self.bn(x)


class InplaceReluMLP(nn.Module):
    def __init__(self):
        super().__init__()
        self.seq = nn.Sequential(nn.Linear(4, 8), nn.ReLU(inplace=True), nn.Linear(8, 3))

    def forward(self, x):
        return self.seq(x)


class ParamInplaceUse(nn.Module):
    """In-place on an intermediate computed from a parameter, plus a buffer update."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("steps", torch.zeros(1))

    def forward(self, x):
        h = x @ self.w
        h.tanh_()
        self.steps.add_(1)
        return h


class ClampParamNoGrad(nn.Module):
    """Weight clipping inside forward: a parameter (a leaf that requires grad) written in place
    under torch.no_grad(), then used."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        with torch.no_grad():
            self.w.clamp_(-0.5, 0.5)
        return x @ self.w


class DataInplaceParam(nn.Module):
    """`.data` writes bypass autograd (and the parameter's version counter)."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))

    def forward(self, x):
        self.w.data.mul_(0.5)
        return x @ self.w


class ReturnsParamAndBufferViews(nn.Module):
    """Outputs that alias a parameter (a view of it, as tied weights are) and a buffer."""

    def __init__(self):
        super().__init__()
        self.w = nn.Parameter(torch.randn(4, 4))
        self.register_buffer("buf", torch.randn(4))

    def forward(self, x):
        return x @ self.w, self.w.t(), self.buf[1:], self.buf


class InputScaledInPlace(nn.Module):
    """The input (a non-leaf in grad mode) scaled in place by a parameter, then used."""

    def __init__(self):
        super().__init__()
        self.s = nn.Parameter(torch.randn(4))
        self.lin = nn.Linear(4, 3)

    def forward(self, x):
        x.mul_(self.s)
        return self.lin(x)


def x8x4(T):
    return (T.leaf(8, 4),)


for _m, _mk, _tr in [(Counter, x8x4, True), (FloatCounter, x8x4, False), (EMA, x8x4, False),
                     (BufferSetitem, x8x4, False), (BN1d, x8x4, True),
                     (BN2d, lambda T: (T.leaf(4, 2, 5, 5),), False), (BN1dEval, x8x4, False),
                     (BNNoMomentum, x8x4, False), (InplaceReluMLP, x8x4, True),
                     (ParamInplaceUse, x8x4, False), (ClampParamNoGrad, x8x4, False),
                     (DataInplaceParam, x8x4, False), (ReturnsParamAndBufferViews, x8x4, False),
                     (InputScaledInPlace, lambda T: (T.rand(8, 4),), True)]:
    case(_mk, name=_m.__name__, module=True, triton=_tr)(_m)


# ---- outputs that alias inputs -----------------------------------------------------------------

def _alias_cases():
    views = {
        "return_input": lambda x: x,
        "return_view": lambda x: x.view(-1),
        "return_select": lambda x: x[0],
        "return_t": lambda x: x.t(),
        "return_transpose": lambda x: x.transpose(0, 1),
        "return_unsqueeze": lambda x: x.unsqueeze(1),
        "return_expand": lambda x: x.unsqueeze(0).expand(2, 3, 4),
        "return_reshape_view": lambda x: x.reshape(2, 6),
        "return_detach": lambda x: x.detach(),
        "return_split": lambda x: x.split(2, dim=1),
        "return_unbind": lambda x: x.unbind(0),
        "return_input_and_view": lambda x: (x, x.view(-1)),
        "return_view_and_fresh": lambda x: (x[1:], x.sum()),
    }
    for name, fn in views.items():
        case(one, name=name, triton=name in ("return_view", "return_input_and_view"))(fn)


_alias_cases()


@case(one)
def view_of_another_output(x):
    y = x * 2
    return y, y.view(-1), y[0]


@case(one, triton=True)
def two_outputs_share_storage(x):
    y = x + 1
    return y[0], y[1]


@case(one)
def float_and_int_outputs(x):
    y = x * 2
    return y, y.argmax(-1), (y > 0).sum()


@case(one)
def view_of_input_view(x):
    v = x.view(4, 3)
    return v, v[1:]


# ---- two inputs aliasing one storage -----------------------------------------------------------

def same_tensor(T):
    a = T.rand(3, 4)
    return a, a


def tensor_and_view(T):
    x = T.rand(3, 4)
    return x, x.view(-1)


def rows_disjoint(T):
    x = T.rand(3, 4)
    return x[0], x[1]


def rows_overlap(T):
    x = T.rand(4, 4)
    return x[0:2], x[1:3]


def tensor_and_t(T):
    x = T.rand(4, 4)
    return x, x.t()


@case(same_tensor, triton=True)
def same_input_twice_add(x, y):
    x.add_(y)
    return x


@case(same_tensor)
def same_input_twice_read(x, y):
    return x + y, x * y


@case(same_tensor)
def same_input_twice_both_mutated(a, b):
    a.mul_(2)
    b.add_(1)
    return a


@case(tensor_and_view, triton=True)
def input_and_its_view(x, v):
    x.add_(1)
    return v * 2


@case(tensor_and_view)
def mutate_view_read_base(x, v):
    v.mul_(3)
    return x.sum(0)


@case(rows_disjoint)
def disjoint_rows(a, b):
    a.add_(b)
    return a, b


@case(rows_overlap)
def overlapping_slices(a, b):
    a.add_(1)
    return b.clone()


@case(rows_overlap)
def overlapping_slices_mul(a, b):
    b.mul_(a)
    return a + b


@case(tensor_and_t)
def input_and_transpose(x, t):
    t.mul_(2)
    return x + 0


# the aliasing of the inputs changes between calls: the first call's compiled code must not be
# reused for the second with a wrong answer (a guard and a correct path)

def distinct(T):
    return T.rand(3, 4), T.rand(3, 4)


def tensor_and_other_view(T):
    return T.rand(3, 4), T.rand(3, 4).view(-1)


@case(same_tensor, make_later=distinct, triton=True)
def aliased_then_distinct(x, y):
    x.add_(y)
    return x * 2


@case(distinct, make_later=same_tensor)
def distinct_then_aliased(x, y):
    x.mul_(y)
    return y + 1


@case(tensor_and_view, make_later=tensor_and_other_view)
def view_then_unrelated(x, v):
    x.add_(1)
    return v * 2


def halves(T):
    x = T.rand(4, 4)
    return x[0:2], x[2:4]


@case(halves, make_later=rows_overlap)
def disjoint_then_overlapping(a, b):
    a.add_(b)
    return a, b


# ---- in-place ops on intermediates -------------------------------------------------------------

@case(one, triton=True)
def intermediate_add_inplace(x):
    y = x * 2
    y.add_(1)
    return y


@case(one)
def intermediate_view_zero(x):
    y = x + 1
    y[0].zero_()
    return y


@case(one)
def intermediate_view_then_mutate_base(x):
    y = x + 1
    v = y.view(-1)
    y.mul_(2)
    return v


@case(one)
def intermediate_mask_setitem(x):
    y = x.clone()
    y[y > 0] = 0
    return y


@case(one)
def intermediate_transposed_inplace(x):
    y = x.clone()
    y.t().add_(1)
    return y.t()


@case(one)
def relu_inplace_functional(x):
    return F.relu(x * 3, inplace=True).sum(0)


@case(one)
def dropout_inplace_intermediate(x):
    return F.dropout(x * 2, p=0.3, training=True, inplace=True)


@case(x_and_leaf)
def intermediate_chain(x, y):
    z = x * 3
    z.mul_(2).sub_(y).neg_()     # ops that save neither operand: eager's backward is valid
    return z, z.t()


# ---- out= ops ----------------------------------------------------------------------------------

@case(lambda T: (T.leaf(3, 4), T.leaf(3, 4), T.rand(3, 4)), triton=True)
def add_out_into_input(x, y, z):
    torch.add(x, y, out=z)
    return z


@case(lambda T: (T.leaf(3, 5), T.leaf(5, 4), T.rand(3, 4)))
def mm_out_into_input(a, b, c):
    torch.mm(a, b, out=c)
    return c.sum()


@case(one)
def sin_out_self(x):
    torch.sin(x, out=x)
    return x


@case(x_and_leaf)
def out_into_intermediate(x, y):
    z = torch.empty(3, 4)
    torch.mul(x, y, out=z)
    return z + 1


# ---- mutation after a graph break --------------------------------------------------------------

@case(one)
def mutate_across_graph_break(x):
    x.add_(1)
    pydynamo.graph_break()
    x.mul_(2)
    return x


@case(x_and_leaf)
def mutate_after_print(x, y):
    z = x * 2
    print(end="")
    z.add_(y)
    x.sub_(z)
    return z


@case(one)
def view_mutated_after_break(x):
    v = x.view(-1)
    pydynamo.graph_break()
    v.add_(1)
    return v


class BreakCounter(nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("count", torch.zeros((), dtype=torch.int64))
        self.lin = nn.Linear(4, 4)

    def forward(self, x):
        self.count += 1
        pydynamo.graph_break()
        self.count += 1
        return self.lin(x)


case(x8x4, name="BreakCounter", module=True)(BreakCounter)

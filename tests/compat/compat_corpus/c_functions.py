"""Compat cases: functions and objects the executor must inline — user functions with defaults,
*args/**kwargs and keyword-only arguments, closures, lambdas and nested functions made in the
frame, methods (bound, class, static), user classes and instances (attribute reads/writes,
properties, inheritance, dunder methods), dataclasses and namedtuples."""
import collections
import dataclasses
import functools
from typing import NamedTuple

import torch

from compat_case import case, t


def helper_defaults(x, a=2, b=3):
    return x * a + b


def helper_varargs(*args, **kwargs):
    total = sum(args)
    for k in sorted(kwargs):
        total = total + kwargs[k]
    return total


def helper_kwonly(x, *, scale, shift=1.0):
    return x * scale + shift


def helper_recursive_depth(x, n):
    if n == 0:
        return x
    return helper_recursive_depth(x.sin(), n - 1)


def helper_returns_tuple(x):
    return x.max(), x.min(), x.shape[0]


def helper_nested_call(x):
    return helper_defaults(x, b=1) + helper_kwonly(x, scale=2)


@case(t(3))
def inline_defaults(x):
    return helper_defaults(x), helper_defaults(x, 4), helper_defaults(x, b=0), helper_defaults(x, b=1, a=0)


@case(t(3))
def inline_varargs_kwargs(x):
    return helper_varargs(x, x * 2, 3), helper_varargs(x, p=x, q=2), helper_varargs(*[x, 1], **{"z": x})


@case(t(3))
def inline_kwonly(x):
    return helper_kwonly(x, scale=3), helper_kwonly(x, shift=0.0, scale=0.5)


@case(t(3))
def inline_recursion(x):
    return helper_recursive_depth(x, 3)


@case(t(5))
def inline_multiple_returns(x):
    mx, mn, n = helper_returns_tuple(x)
    return (mx - mn) * n


@case(t(3))
def inline_nested_calls(x):
    return helper_nested_call(x) + helper_nested_call(x * 2)


@case(t(3), t(3))
def inline_argument_forms(x, y):
    def f(a, b=1, *rest, c, d=2, **extra):
        return a * b + sum(rest) + c * d + sum(extra.values())
    return f(x, 2, y, 3, c=y), f(x, c=1), f(a=x, c=2, d=y, e=5)


def make_scaler(k):
    def scale(x):
        return x * k
    return scale


SCALE3 = make_scaler(3)


@case(t(3))
def closure_from_global(x):
    return SCALE3(x) + 1


@case(t(3))
def closure_made_in_frame(x):
    k = 4
    offset = x.mean()

    def inner(y):
        return y * k + offset
    return inner(x), inner(x * 2)


@case(t(3))
def closure_mutating_cell(x):
    count = 0

    def bump(y):
        nonlocal count
        count += 1
        return y + count
    a = bump(x)
    b = bump(a)
    return b, count


@case(t(3))
def closure_factory_in_frame(x):
    def adder(n):
        return lambda y: y + n
    fs = [adder(i) for i in range(3)]
    return fs[0](x) + fs[2](x)


@case(t(3))
def lambdas(x):
    sq = lambda v: v * v  # noqa: E731
    comb = lambda a, b=2: a * b  # noqa: E731
    return sq(x) + comb(x) + comb(x, b=3)


@case(t(3))
def higher_order_functions(x):
    def apply_twice(f, v):
        return f(f(v))
    return apply_twice(torch.sin, x), apply_twice(lambda v: v + 1, x)


@case(t(3))
def functools_partial(x):
    p = functools.partial(helper_defaults, b=10)
    return p(x), p(x, 3)


def deco_double(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        return fn(*args, **kwargs) * 2
    return wrapper


@deco_double
def decorated(x):
    return x + 1


@case(t(3))
def decorated_function(x):
    return decorated(x) - x


class Affine:
    def __init__(self, w, b):
        self.w = w
        self.b = b

    def __call__(self, x):
        return x * self.w + self.b

    def apply(self, x, times=1):
        for _ in range(times):
            x = self(x)
        return x

    @property
    def total(self):
        return self.w + self.b

    @classmethod
    def unit(cls):
        return cls(1.0, 0.0)

    @staticmethod
    def clamp(x):
        return x.clamp(-1, 1)


AFF = Affine(2.0, 0.5)


@case(t(3))
def user_object_global_methods(x):
    return AFF(x), AFF.apply(x, times=2), AFF.total * x, Affine.clamp(x), AFF.clamp(x * 3)


@case(t(3))
def user_object_created_in_frame(x):
    a = Affine(3.0, x)
    u = Affine.unit()
    return a(x) + u(x), a.total


@case(t(3))
def bound_method_as_value(x):
    f = AFF.apply
    g = x.add
    return f(x), g(1), list(map(AFF, [x]))[0]


@case(t(3))
def user_object_attribute_write(x):
    a = Affine(1.0, 0.0)
    a.w = 4.0
    a.extra = x * 2
    a.b += 1
    return a(x) + a.extra, a.w


class Base:
    factor = 2

    def f(self, x):
        return x * self.factor


class Child(Base):
    factor = 3

    def f(self, x):
        return super().f(x) + 1


@case(t(3))
def inheritance_and_super(x):
    return Child().f(x), Base().f(x), isinstance(Child(), Base)


class Vec:
    def __init__(self, t):
        self.t = t

    def __add__(self, other):
        return Vec(self.t + other.t)

    def __mul__(self, k):
        return Vec(self.t * k)

    def __len__(self):
        return self.t.shape[0]

    def __getitem__(self, i):
        return self.t[i]


@case(t(4))
def dunder_methods(x):
    v = Vec(x) + Vec(x * 2)
    w = v * 3
    return w.t, len(w), w[1]


class Counter:
    def __init__(self):
        self._n = 0

    @property
    def n(self):
        return self._n

    @n.setter
    def n(self, v):
        self._n = v


@case(t(3))
def property_setter(x):
    c = Counter()
    c.n = 5
    c.n = c.n + 1
    return x * c.n


@dataclasses.dataclass
class Config:
    hidden: int = 4
    scale: float = 2.0
    names: tuple = ("a", "b")


CFG = Config()


@case(t(4))
def dataclass_global_read(x):
    return x * CFG.scale + CFG.hidden, len(CFG.names)


@case(t(4))
def dataclass_created_in_frame(x):
    c = Config(hidden=2, scale=x.sum())
    return x * c.scale, c.hidden, c


@dataclasses.dataclass
class Pair:
    left: torch.Tensor
    right: torch.Tensor


@case(t(3))
def dataclass_returned(x):
    p = Pair(x, x * 2)
    p.right = p.right + 1
    return p


@case(Pair(t(3), t(3)))
def dataclass_input(p):
    return p.left * p.right


@case(t(3))
def dataclass_replace_fields(x):
    c = dataclasses.replace(CFG, hidden=7)
    return x * c.hidden, [f.name for f in dataclasses.fields(c)]


class Point(NamedTuple):
    x: torch.Tensor
    y: torch.Tensor


PointC = collections.namedtuple("PointC", "a b")


@case(Point(t(3), t(3)), change=(Point(t(3, dtype=torch.float64), t(3)),))
def namedtuple_input(p):
    return p.x + p.y, p[0] * 2, len(p)


@case(t(3))
def namedtuple_returned(x):
    p = PointC(x, x.sum())
    a, b = p
    return Point(a * 2, b), p._fields


@case(t(3))
def namedtuple_asdict_replace(x):
    p = Point(x, x * 2)
    q = p._replace(y=x)
    return q.y + p.y, list(p._asdict())


class Registry:
    ops = {"double": lambda x: x * 2, "neg": torch.neg}


@case(t(3), "double", changes=((t(3), "neg"), (t(3), "double")))
def dispatch_through_dict(x, op):
    return Registry.ops[op](x)


@case(t(3))
def callable_objects_in_list(x):
    fs = [torch.sin, torch.cos, AFF, make_scaler(2)]
    return [f(x) for f in fs]


@case(t(3))
def generic_function_objects(x):
    return helper_defaults.__name__, x * helper_defaults.__defaults__[0]


class StaticHolder:
    @staticmethod
    def sm(x):
        return x + 10

    @classmethod
    def cm(cls, x):
        return x * cls.k

    k = 5


@case(t(3))
def static_and_class_methods(x):
    h = StaticHolder()
    return StaticHolder.sm(x), h.sm(x), StaticHolder.cm(x), h.cm(x)


@case(t(3), t(3), kwargs={"scale": 2.0})
def wrapper_with_kwargs_forwarding(x, y, **opts):
    return helper_kwonly(x + y, **opts, shift=0.0) if opts else x + y

"""Semantics cases: objects — instances with __call__, grad-mode objects used as decorators and
context managers, super() through deep hierarchies, properties and other descriptors,
dataclasses (fields, replace, frozen), enum, functools (partial, wraps,
lru_cache, reduce), inspect.signature of user functions, builtin classmethods."""
import collections.abc
import dataclasses
import enum
import functools
import inspect

import torch

from compat_case import case, t

# --- callable objects --------------------------------------------------------------------------


class Scale:
    def __init__(self, k):
        self.k = k

    def __call__(self, x):
        return x * self.k


SCALE3 = Scale(3)


@case(t(3))
def callable_global_object(x):
    return SCALE3(x) + 1


@case(t(3))
def callable_made_in_frame(x):
    return Scale(2)(x) - Scale(0.5)(x)


class Chain:
    def __init__(self, *fns):
        self.fns = fns

    def __call__(self, x):
        for f in self.fns:
            x = f(x)
        return x


@case(t(3))
def callable_chain(x):
    return Chain(Scale(2), torch.relu, Scale(-1))(x)


class Counted:
    def __init__(self):
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x + self.calls


@case(t(3))
def callable_with_state(x):
    c = Counted()
    return c(x), c(x), c.calls


@case(t(3))
def callable_passed_to_map(x):
    return list(map(Scale(4), [x, x + 1]))


# --- grad mode as decorators and contexts ------------------------------------------------------

@torch.no_grad()
def _ng_helper(x):
    return x * 2


@torch.enable_grad()
def _eg_helper(x):
    return x * 3


@torch.no_grad
def _ng_bare(x):
    return x - 1


@case(t(3, requires_grad=True))
def no_grad_decorator(x):
    y = _ng_helper(x)
    return y, y.requires_grad, (x * 2).requires_grad


@case(t(3, requires_grad=True))
def enable_grad_decorator_inside_no_grad(x):
    with torch.no_grad():
        y = _eg_helper(x)
    return y, y.requires_grad


@case(t(3, requires_grad=True))
def no_grad_bare_decorator(x):
    y = _ng_bare(x)
    return y, y.requires_grad


@case(t(3, requires_grad=True))
def set_grad_enabled_context(x):
    with torch.set_grad_enabled(False):
        a = x * 2
    return a.requires_grad, (x * 2).requires_grad, a


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(3, 3)

    @torch.no_grad()
    def stats(self, x):
        return self.lin(x).mean()


torch.manual_seed(1234)  # the same weights in every engine's process
NET = Net()


@case(t(2, 3, requires_grad=True))
def no_grad_decorated_method(x):
    m = NET.stats(x)
    return m, m.requires_grad


@case(t(3, requires_grad=True))
def no_grad_decorator_made_in_frame(x):
    f = torch.no_grad()(lambda v: v * 5)
    y = f(x)
    return y, y.requires_grad


# --- super() in deep hierarchies, properties, descriptors ------------------------------------

class A:
    def f(self, x):
        return x + 1


class B(A):
    def f(self, x):
        return super().f(x) * 2


class C(B):
    def f(self, x):
        return super().f(x) - 3


class D(C):
    def f(self, x):
        return super(C, self).f(x) + super().f(x)


@case(t(3))
def super_three_levels(x):
    return C().f(x)


@case(t(3))
def super_explicit_skip(x):
    return D().f(x)


class Left(A):
    def f(self, x):
        return super().f(x) * 10


class Right(A):
    def f(self, x):
        return super().f(x) + 100


class Diamond(Left, Right):
    def f(self, x):
        return super().f(x)


@case(t(3))
def super_diamond_mro(x):
    return Diamond().f(x)


class WithProps:
    def __init__(self, scale):
        self._scale = scale

    @property
    def scale(self):
        return self._scale * 2

    @scale.setter
    def scale(self, v):
        self._scale = v / 2

    @property
    def offset(self):
        return self._scale + 1


@case(t(3))
def property_get_set(x):
    o = WithProps(3)
    a = x * o.scale
    o.scale = 10
    return a, x * o.scale


@case(t(3))
def property_read_twice(x):
    o = WithProps(2)
    return x + o.offset + o.offset


class Positive:
    def __set_name__(self, owner, name):
        self.name = "_" + name

    def __get__(self, obj, objtype=None):
        return getattr(obj, self.name)

    def __set__(self, obj, value):
        setattr(obj, self.name, abs(value))


class Holder:
    k = Positive()

    def __init__(self, k):
        self.k = k


@case(t(3))
def data_descriptor(x):
    h = Holder(-4)
    return x * h.k


class StaticAndClass:
    base = 3

    @staticmethod
    def twice(v):
        return v * 2

    @classmethod
    def add_base(cls, v):
        return v + cls.base


@case(t(3))
def static_and_class_methods(x):
    return StaticAndClass.twice(x) + StaticAndClass().add_base(x)


# --- dataclasses -------------------------------------------------------------------------------

@dataclasses.dataclass
class LayerCfg:
    dim: int = 4
    act: str = "relu"
    drop: float = 0.0


@dataclasses.dataclass(frozen=True)
class Frozen:
    k: int
    name: str = "f"


@case(t(3))
def dataclass_replace(x):
    c = LayerCfg()
    c2 = dataclasses.replace(c, dim=8)
    return x * c2.dim + c.dim, c2.act


@case(t(3))
def dataclass_fields_names(x):
    names = [f.name for f in dataclasses.fields(LayerCfg)]
    return x * len(names), names


@case(t(3))
def dataclass_frozen_read(x):
    f = Frozen(3)
    return x * f.k, f.name, f == Frozen(3)


@case(t(3))
def dataclass_asdict_constants(x):
    d = dataclasses.asdict(LayerCfg(dim=2))
    return x * d["dim"], d


@case(t(3))
def dataclass_mutate(x):
    c = LayerCfg()
    c.dim += 1
    return x * c.dim, c


# --- enum ---------------------------------------------------------------------------------------

class Mode(enum.Enum):
    ADD = "add"
    MUL = "mul"


class Level(enum.IntEnum):
    LOW = 1
    HIGH = 3


MODE = Mode.ADD


@case(t(3))
def enum_global_compare(x):
    return x + 2 if MODE is Mode.ADD else x * 2


@case(t(3))
def enum_value_lookup(x):
    m = Mode("mul")
    return x * (3 if m == Mode.MUL else 1), m.name, m.value


@case(t(3))
def int_enum_arith(x):
    return x * Level.HIGH + Level.LOW, Level(3).name


@case(t(3))
def enum_iteration(x):
    return [x * len(m.value) for m in Mode]


# --- functools ---------------------------------------------------------------------------------

def _axpy(a, x, y):
    return a * x + y


@case(t(3))
def partial_call(x):
    f = functools.partial(_axpy, 2)
    return f(x, 1), f.args


@case(t(3))
def partial_kwargs(x):
    f = functools.partial(torch.sum, dim=0)
    return f(x.view(3, 1))


@case(t(3))
def reduce_tensors(x):
    return functools.reduce(lambda a, b: a * b, [x, x + 1, x + 2])


@case(t(3))
def reduce_initial(x):
    return functools.reduce(lambda a, b: a + b, [1, 2, 3], 10) * x


def _logged(fn):
    @functools.wraps(fn)
    def inner(*args, **kwargs):
        return fn(*args, **kwargs) + 1
    return inner


@_logged
def _wrapped_helper(x):
    return x * 2


@case(t(3))
def wraps_decorated(x):
    return _wrapped_helper(x), _wrapped_helper.__name__


@functools.lru_cache(maxsize=None)
def _table(n):
    return tuple(range(n))


@case(t(3))
def lru_cache_constant_helper(x):
    return x * len(_table(4))


# --- inspect.signature, builtin classmethods ---------------------------------------------------

def _fwd(x, mask=None, *, scale=1.0):
    return x


@case(t(3))
def signature_parameters(x):
    params = inspect.signature(_fwd).parameters
    return x * len(params), "mask" in params, list(params)


@case(t(3))
def signature_default(x):
    p = inspect.signature(_fwd).parameters["scale"]
    return x * p.default, p.kind == inspect.Parameter.KEYWORD_ONLY


@case(t(3))
def builtin_classmethods(x):
    return x * float.fromhex("0x1p-1") + int.from_bytes(b"\x02", "big"), bytes.fromhex("0a")


@case(t(3))
def builtin_methods_through_class(x):
    return x * int.bit_length(5) + float.is_integer(2.0), str.upper("ab")


# --- collections.abc.Mapping's get / __contains__ on a user mapping (a KeyError inside) ------

class Registry(collections.abc.MutableMapping):
    _shared = {"relu": 2}

    def __init__(self):
        self._local = {}

    def __getitem__(self, key):
        if key in self._local:
            return self._local[key]
        return self._shared[key]

    def __setitem__(self, key, value):
        self._local[key] = value

    def __delitem__(self, key):
        del self._local[key]

    def __iter__(self):
        return iter({**self._shared, **self._local})

    def __len__(self):
        return len({**self._shared, **self._local})


REGISTRY = Registry()


@case(t(3))
def mapping_get_missing_key(x):
    return x * REGISTRY.get("relu", 1) + REGISTRY.get("gelu", 5)


@case(t(3))
def mapping_contains(x):
    return x + ("relu" in REGISTRY) * 2 + ("tanh" in REGISTRY)


# --- nn.Module plain attribute writes, a zero-argument lru_cache with a filled cache ----------

class Pooler(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.mult = 1
        self.seq_len = None

    def forward(self, x):
        self.mult = 2
        self.seq_len = x.shape[0]
        y = x * self.mult
        self.mult = self.mult * 3
        return y + self.mult + self.seq_len, self.mult


@case(t(3))
def module_plain_attribute_writes(x):
    p = POOLER
    out = p(x)
    return out, p.seq_len


POOLER = Pooler()


@functools.lru_cache
def _backend_available():
    import math as _m  # an import: an effect the inliner will not take
    return _m.pi > 3


_backend_available()  # filled, as library code has called it by the time a model runs


@case(t(3))
def lru_cache_zero_args_filled(x):
    return x * 2 if _backend_available() else x


class SinusoidalPositions(torch.nn.Module):
    """A module whose forward is decorated with @torch.no_grad() (position tables do this)."""

    @torch.no_grad()
    def forward(self, x):
        return torch.sin(x * 3)


SINUS = SinusoidalPositions()


@case(t(3, requires_grad=True))
def no_grad_decorated_module_forward(x):
    p = SINUS(x)
    return p + x, p.requires_grad

"""The compat corpus's vocabulary: what a case is, how its inputs are made, how results compare.

A `Case` is a callable (a function, or an nn.Module built by `make`), an input spec that is turned
into fresh random inputs for each call, and optional "guard changes" (further calls with a new
constant, dtype or shape). Invariants the harness relies on:
  * inputs are a pure function of (case name, call index): every engine process sees identical
    inputs without sharing any state; tensors are random and never all-zero;
  * results are normalized into plain containers / tensors / primitives before torch.save, so
    records never pickle corpus classes and compare structurally across processes;
  * module weights are seeded from the case name before `make` runs.
"""
from __future__ import annotations

import contextlib
import dataclasses
import math
import zlib
from typing import Any, Callable, Optional

import torch

# Number of calls with fresh inputs and unchanged guards; call 0 compiles, 1..N-1 must hit.
N_CALLS = 4


@dataclasses.dataclass(frozen=True)
class T:
    """Spec of one random tensor input (never all-zero). `layout`: "contiguous"; "offset" (a view
    with a storage offset into a larger storage, as `qkv.split(...)` or a KV-cache slice gives);
    "transposed" (strides of the reversed dims); "channels_last" (4-D). The values do not depend
    on the layout (the same generator draws)."""
    shape: tuple
    dtype: torch.dtype = torch.float32
    requires_grad: bool = False
    layout: str = "contiguous"

    def make(self, g: torch.Generator) -> torch.Tensor:
        if self.dtype.is_floating_point or self.dtype.is_complex:
            x = torch.randn(self.shape, generator=g, dtype=self.dtype)
        elif self.dtype == torch.bool:
            x = torch.rand(self.shape, generator=g) > 0.5
            if x.numel():
                x.view(-1)[0] = True
        else:
            x = torch.randint(1, 10, self.shape, generator=g, dtype=self.dtype)
        return _relayout(x, self.layout).requires_grad_(self.requires_grad)


def _relayout(x: torch.Tensor, layout: str) -> torch.Tensor:
    if layout == "offset":
        out = torch.empty(x.numel() + 3, dtype=x.dtype)[3:].view(x.shape)
        return out.copy_(x)
    if layout == "transposed":
        rev = tuple(reversed(range(x.dim())))
        return x.permute(rev).contiguous().permute(rev)
    if layout == "channels_last":
        return x.contiguous(memory_format=torch.channels_last)
    assert layout == "contiguous", layout
    return x


def t(*shape, dtype=torch.float32, requires_grad=False, layout="contiguous") -> T:
    return T(tuple(shape), dtype, requires_grad, layout)


def materialize(spec: Any, g: torch.Generator) -> Any:
    """Turn an input spec into fresh values: T -> tensor, containers rebuilt (never shared)."""
    if isinstance(spec, T):
        return spec.make(g)
    if isinstance(spec, tuple) and hasattr(spec, "_fields"):
        return type(spec)(*(materialize(s, g) for s in spec))
    if isinstance(spec, (list, tuple)):
        return type(spec)(materialize(s, g) for s in spec)
    if dataclasses.is_dataclass(spec) and not isinstance(spec, type):
        return dataclasses.replace(spec, **{f.name: materialize(getattr(spec, f.name), g)
                                            for f in dataclasses.fields(spec) if f.init})
    if isinstance(spec, dict):
        return type(spec)((k, materialize(v, g)) for k, v in spec.items())
    if callable(spec) and getattr(spec, "__compat_factory__", False):
        return spec(g)
    return spec


def factory(fn: Callable[[torch.Generator], Any]) -> Callable:
    """Mark `fn(g)` as an input factory inside a spec (for inputs a spec cannot describe)."""
    fn.__compat_factory__ = True
    return fn


@dataclasses.dataclass(frozen=True)
class Inputs:
    args: tuple
    kwargs: dict
    # The call runs inside context() when set: global state (grad mode, default dtype) as a guard change.
    context: Optional[Callable[[], Any]] = None

    def make(self, g: torch.Generator):
        return materialize(self.args, g), materialize(self.kwargs, g)

    def enter(self):
        return self.context() if self.context is not None else contextlib.nullcontext()


@dataclasses.dataclass(frozen=True)
class Case:
    name: str
    make: Callable[[], Callable]           # builds the callable (module weights seeded first)
    inputs: Inputs
    changes: tuple = ()                    # Inputs for calls after the N_CALLS steady ones
    before: Optional[Callable[[], None]] = None   # resets global state before each call
    observe: Optional[Callable[[], Any]] = None   # side-effect state read after each call
    filename: str = ""
    lineno: int = 0


REGISTRY: dict[str, Case] = {}


def _register(c: Case) -> None:
    if c.name in REGISTRY:
        raise ValueError(f"duplicate compat case {c.name}")
    REGISTRY[c.name] = c


def _inputs(spec) -> Inputs:
    if isinstance(spec, Inputs):
        return spec
    if isinstance(spec, dict):
        return Inputs((), spec)
    return Inputs(tuple(spec), {})


def under(context: Callable[[], Any], *args, **kwargs) -> Inputs:
    """Spec whose call runs inside `context()`: under(torch.no_grad, t(3))."""
    return Inputs(args, kwargs, context)


class default_dtype:
    """Context manager: torch's default dtype set for the duration of a call."""

    def __init__(self, dtype: torch.dtype):
        self.dtype = dtype

    def __enter__(self):
        self.saved = torch.get_default_dtype()
        torch.set_default_dtype(self.dtype)

    def __exit__(self, *exc):
        torch.set_default_dtype(self.saved)


def kw(*args, **kwargs) -> Inputs:
    """Spec with keyword arguments: kw(t(3), n=2)."""
    return Inputs(args, kwargs)


def case(*args, kwargs=None, change=None, changes=(), before=None, observe=None):
    """Register a function as a case: @case(t(4), 3, change=(t(4, dtype=torch.float64), 3))."""
    chs = tuple(_inputs(c) for c in ((change,) if change is not None else ()) + tuple(changes))

    def deco(fn):
        mod = fn.__module__.rsplit(".", 1)[-1]
        _register(Case(f"{mod}.{fn.__name__}", lambda: fn, Inputs(args, kwargs or {}), chs,
                       before, observe, fn.__code__.co_filename, fn.__code__.co_firstlineno))
        return fn
    return deco


def module_case(*args, kwargs=None, change=None, changes=(), before=None, observe=None):
    """Register an nn.Module class (constructed with no arguments) as a case."""
    chs = tuple(_inputs(c) for c in ((change,) if change is not None else ()) + tuple(changes))

    def deco(cls):
        mod = cls.__module__.rsplit(".", 1)[-1]
        _register(Case(f"{mod}.{cls.__name__}", lambda: cls().eval(), Inputs(args, kwargs or {}),
                       chs, before, observe, cls.forward.__code__.co_filename,
                       cls.forward.__code__.co_firstlineno))
        return cls
    return deco


def seed_of(name: str, call: int) -> int:
    return (zlib.crc32(name.encode()) * 131 + call) % (2 ** 31)


# ---------------------------------------------------------------------------------------------
# Normalization (what gets saved) and comparison (what gets asserted)

def normalize(v: Any, depth: int = 0) -> Any:
    """Plain, picklable form of a result. Tagged tuples keep types that would otherwise merge."""
    if depth > 20:
        return ("deep", repr(type(v)))
    d = depth + 1
    if isinstance(v, torch.Tensor):
        return ("tensor", v.detach().clone(), v.requires_grad)
    if isinstance(v, torch.Size):
        return ("size", tuple(v))
    if isinstance(v, (torch.dtype, torch.device)):
        return ("torchobj", str(v))
    if v is None or isinstance(v, (bool, int, str, bytes, complex)) or v is Ellipsis:
        return v
    if isinstance(v, float):
        return ("float", v)
    if isinstance(v, tuple) and hasattr(v, "_fields"):
        return ("namedtuple", type(v).__name__, tuple(normalize(x, d) for x in v))
    if dataclasses.is_dataclass(v) and not isinstance(v, type):
        return ("dataclass", type(v).__name__,
                [(f.name, normalize(getattr(v, f.name), d)) for f in dataclasses.fields(v)])
    if isinstance(v, (list, tuple)):
        return (type(v).__name__, [normalize(x, d) for x in v])
    if isinstance(v, dict):
        return (type(v).__name__, [(normalize(k, d), normalize(x, d)) for k, x in v.items()])
    if isinstance(v, (set, frozenset)):
        return (type(v).__name__, sorted(repr(x) for x in v))
    if isinstance(v, (range, slice)):
        return (type(v).__name__, repr(v))
    if isinstance(v, torch.nn.Module):
        return ("module", type(v).__name__)
    if hasattr(v, "__dict__"):
        return ("object", type(v).__name__, normalize(dict(vars(v)), d))
    return ("repr", repr(v))


def mismatch(a: Any, b: Any, path: str = "out") -> Optional[str]:
    """None when normalized results `a` (engine) and `b` (eager) agree, else where and how not."""
    if isinstance(b, tuple) and b and b[0] == "tensor":
        if not (isinstance(a, tuple) and a and a[0] == "tensor"):
            return f"{path}: expected a tensor, got {_short(a)}"
        ta, tb = a[1], b[1]
        if ta.dtype != tb.dtype or ta.shape != tb.shape:
            return f"{path}: tensor {ta.dtype}{list(ta.shape)} vs eager {tb.dtype}{list(tb.shape)}"
        if a[2] != b[2]:
            return f"{path}: requires_grad={a[2]} vs eager {b[2]}"
        # integers and bools exactly: a relative tolerance would let 20001 equal 20000
        exact = not (ta.dtype.is_floating_point or ta.dtype.is_complex)
        try:
            torch.testing.assert_close(ta, tb, equal_nan=True, rtol=0 if exact else 1e-4,
                                       atol=0 if exact else 1e-5)
        except AssertionError as e:
            return f"{path}: values differ: {str(e).splitlines()[0:4]}"
        return None
    if isinstance(b, tuple) and b and b[0] == "float":
        if not (isinstance(a, tuple) and a and a[0] == "float"):
            return f"{path}: expected float {b[1]!r}, got {_short(a)}"
        if not (a[1] == b[1] or (math.isnan(a[1]) and math.isnan(b[1]))
                or math.isclose(a[1], b[1], rel_tol=1e-5, abs_tol=1e-6)):
            return f"{path}: {a[1]!r} vs eager {b[1]!r}"
        return None
    if isinstance(b, (list, tuple)):
        if type(a) is not type(b) or len(a) != len(b):
            return f"{path}: {_short(a)} vs eager {_short(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            m = mismatch(x, y, f"{path}[{i}]")
            if m:
                return m
        return None
    if type(a) is not type(b) or a != b:
        return f"{path}: {_short(a)} vs eager {_short(b)}"
    return None


def _short(v: Any) -> str:
    s = repr(v)
    return s if len(s) < 200 else s[:200] + "..."

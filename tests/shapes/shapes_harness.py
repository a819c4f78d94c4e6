"""Test harness for meta.py / shapes.py: run an op on symbolic metadata and check the result
against eager at the traced sizes *and* at other sizes (by substituting the new sizes into the
symbolic shape), after checking that the recorded guards accept those other sizes."""
from __future__ import annotations

import sympy
import torch

from pydynamo import meta
from pydynamo.meta import TensorMeta, propagate
from pydynamo.shapes import ShapeEnv, SymInt
from pydynamo.shapes import TextSource as Src


class Static:
    """Marks a tensor argument whose `dims` stay static (as with mark_static)."""

    def __init__(self, tensor, *dims):
        self.tensor = tensor
        self.dims = set(dims)


class Sym:
    """Marks an int argument of a case that should be traced as a symbolic int."""

    def __init__(self, value: int):
        self.value = value


def _real(v):
    if isinstance(v, Sym):
        return v.value
    if isinstance(v, Static):
        return v.tensor
    if isinstance(v, list):
        return [_real(x) for x in v]
    if isinstance(v, tuple):
        return tuple(_real(x) for x in v)
    if isinstance(v, dict):
        return {k: _real(x) for k, x in v.items()}
    if isinstance(v, slice):
        return slice(_real(v.start), _real(v.stop), _real(v.step))
    return v


class Symbolizer:
    """Converts real arguments into traced ones (TensorMeta with every dim dynamic, SymInts),
    naming each input L['aK'] so guards can be checked against a fresh set of inputs."""

    def __init__(self, env: ShapeEnv, dynamic: bool = True):
        self.env = env
        self.dynamic = dynamic
        self.count = 0
        self.L: dict = {}

    def convert(self, v, static=()):
        if isinstance(v, Static):
            return self.convert(v.tensor, v.dims)
        if isinstance(v, torch.Tensor):
            name = f"a{self.count}"
            self.count += 1
            self.L[name] = v
            dims = [d for d in range(v.dim()) if d not in static] if self.dynamic else ()
            shape, stride, off = self.env.create_tensor_sizes(v, Src(f"L['{name}']"), dims)
            return TensorMeta.from_tensor(v, shape=shape, stride=stride, storage_offset=off)
        if isinstance(v, Sym):
            name = f"a{self.count}"
            self.count += 1
            self.L[name] = v.value
            return self.env.create_symint(v.value, Src(f"L['{name}']"))
        if isinstance(v, list):
            return [self.convert(x) for x in v]
        if isinstance(v, tuple):
            return tuple(self.convert(x) for x in v)
        if isinstance(v, dict):
            return {k: self.convert(x) for k, x in v.items()}
        if isinstance(v, slice):
            return slice(self.convert(v.start), self.convert(v.stop), self.convert(v.step))
        return v


def collect_inputs(v, out=None) -> dict:
    """The same naming as Symbolizer, for a second set of real arguments."""
    out = {} if out is None else out
    if isinstance(v, Static):
        v = v.tensor
    if isinstance(v, torch.Tensor):
        out[f"a{len(out)}"] = v
    elif isinstance(v, Sym):
        out[f"a{len(out)}"] = v.value
    elif isinstance(v, (list, tuple)):
        for x in v:
            collect_inputs(x, out)
    elif isinstance(v, dict):
        for x in v.values():
            collect_inputs(x, out)
    elif isinstance(v, slice):
        collect_inputs((v.start, v.stop, v.step), out)
    return out


def call_eager(target, args, kwargs):
    args, kwargs = _real(args), _real(kwargs)
    if isinstance(target, str):
        attr = getattr(args[0], target)
        return attr(*args[1:], **kwargs) if callable(attr) else attr  # properties: T, mT
    return target(*args, **kwargs)


def symbol_values(env: ShapeEnv, L: dict) -> dict:
    return {sym: sympy.Integer(eval(src.name(), {"L": L})) for sym, src in env.var_to_source.items()}


def _at(d, values):
    if isinstance(d, int):
        return d
    return int(sympy.sympify(d).xreplace(values))


def assert_meta_matches(m, real, values=None, check_strides=True, what=""):
    """A TensorMeta (or structure of them / Python value) equals the eager result, with symbols
    substituted by `values` (None: the hints must already be concrete)."""
    values = values or {}
    if isinstance(real, torch.Tensor):
        assert isinstance(m, TensorMeta), f"{what}: expected TensorMeta, got {m!r}"
        shape = tuple(_at(d, values) for d in m.shape)
        assert shape == tuple(real.shape), f"{what}: shape {m.shape} -> {shape} vs eager {tuple(real.shape)}"
        assert m.dtype == real.dtype, f"{what}: dtype {m.dtype} vs {real.dtype}"
        assert m.device == real.device, f"{what}: device {m.device} vs {real.device}"
        assert m.requires_grad == real.requires_grad, f"{what}: requires_grad"
        if check_strides and real.numel() > 0:
            stride = tuple(_at(d, values) for d in m.stride)
            for i, (a, b, s) in enumerate(zip(stride, real.stride(), real.shape)):
                assert s == 1 or a == b, f"{what}: stride {m.stride} -> {stride} vs eager {real.stride()}"
        return
    if isinstance(real, (list, tuple)):
        assert isinstance(m, (list, tuple)) and len(m) == len(real), f"{what}: structure {m!r} vs {real!r}"
        for i, (a, b) in enumerate(zip(m, real)):
            assert_meta_matches(a, b, values, check_strides, f"{what}[{i}]")
        return
    if isinstance(m, SymInt):
        got = _at(m.expr, values)
    else:
        got = _at(m, values) if isinstance(m, sympy.Basic) else m
    assert got == real, f"{what}: value {m!r} -> {got!r} vs eager {real!r}"


def check_op(target, build, params: list, *, expect_rule: bool = True, check_strides: bool = True,
             dynamic: bool = True):
    """Trace `target(*build(**params[0]))` symbolically; compare with eager there and, through
    the symbolic result, at every other params set (whose inputs must pass the guards).
    Returns the ShapeEnv for further assertions."""
    meta.STRICT_RULES = True
    try:
        env = ShapeEnv()
        args, kwargs = build(**params[0])
        sym = Symbolizer(env, dynamic)
        targs, tkwargs = sym.convert(args), sym.convert(kwargs)
        out = propagate(target, targs, tkwargs, env)
        real = call_eager(target, args, kwargs)
        assert_meta_matches(out, real, symbol_values(env, sym.L), check_strides, "at hints")
        if expect_rule:
            assert env.stats["specialized_ops"] == 0, f"fell back to specialization: {env.stats}"
        check = env.make_check_fn()
        assert check(sym.L), "guards must hold on the inputs they were made from"
        for p in params[1:]:
            args2, kwargs2 = build(**p)
            L2 = collect_inputs([args2, kwargs2])
            if expect_rule:
                assert check(L2), f"guards {env.guard_texts()} reject {p}"
            elif not check(L2):
                continue
            real2 = call_eager(target, args2, kwargs2)
            assert_meta_matches(out, real2, symbol_values(env, L2), check_strides, f"at {p}")
        return env
    finally:
        meta.STRICT_RULES = False

"""OpInfo correctness harness shared by the CI subset and benchmarks/opinfo_sweep.py.

For one OpInfo and dtype, every sample input becomes one node of a single FX graph (one graph,
one shared library per op and dtype, so the sweep costs one g++ run per op), compiled with
codegen.compile_fx and compared with eager on fresh copies of the inputs. A sample whose eager
call raises is dropped first. Result per op: samples compared, wrong samples, whether every node
was lowered natively, and the extern reasons.
"""
from __future__ import annotations

import warnings
from dataclasses import dataclass, field
from typing import List

import torch
import torch.fx

import codegen

# random or uninitialized results cannot be compared value by value
NONDETERMINISTIC = ("rand", "normal", "bernoulli", "dropout", "multinomial", "uniform",
                    "exponential", "geometric", "cauchy", "log_normal", "poisson", "empty",
                    "randn", "randint", "randperm", "rrelu", "fractional_max_pool", "lowrank",
                    # dropout samples; the fused attention kernels' rng-state output is left
                    # uninitialized without dropout
                    "scaled_dot_product_attention", "multi_head_attention",
                    "_flash_attention_forward", "_efficient_attention_forward")


@dataclass
class OpResult:
    name: str
    dtype: torch.dtype
    samples: int = 0
    wrong: List[str] = field(default_factory=list)
    native: bool = False
    native_nodes: int = 0
    extern_nodes: int = 0
    extern_reasons: List[str] = field(default_factory=list)
    error: str = ""
    traced: bool = False
    partly_native: bool = False      # some samples lowered natively, others extern


def _clone(x):
    if isinstance(x, torch.Tensor):
        return x.clone()
    if isinstance(x, (list, tuple)):
        return type(x)(_clone(a) for a in x)
    if isinstance(x, dict):
        return {k: _clone(v) for k, v in x.items()}
    return x


def _sample_call(op, s):
    return (s.input,) + tuple(s.args), dict(s.kwargs)


def _target(op):
    """(fx op kind, target): prefer the torch function; fall back to the method variant."""
    from codegen.canonical import function_table
    if op.op in function_table():
        return "call_function", op.op
    mv = op.method_variant
    if mv is not None and getattr(mv, "__name__", None) and hasattr(torch.Tensor, mv.__name__):
        return "call_method", mv.__name__
    if getattr(op.op, "__name__", "<lambda>") == "<lambda>":
        # FX cannot print a reference to a lambda (or to a callable without a __name__, the
        # jiterator ops); call it through a named module-level shim
        return "call_function", _Shim(op.op, op.name)
    return "call_function", op.op


class _Shim:
    """A picklable-by-name stand-in so FX can print a call to an OpInfo lambda."""

    def __init__(self, fn, name):
        self.fn = fn
        self.__name__ = "opinfo_" + "".join(c if c.isalnum() else "_" for c in name)

    def __call__(self, *args, **kwargs):
        return self.fn(*args, **kwargs)


def build_graph(kind, target, calls):
    g = torch.fx.Graph()
    inputs, memo = [], {}

    def lift(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                inputs.append(x)
                memo[id(x)] = g.placeholder(f"in{len(inputs) - 1}")
            return memo[id(x)]
        if isinstance(x, (list, tuple)):
            return type(x)(lift(a) for a in x)
        if isinstance(x, dict):
            return {k: lift(v) for k, v in x.items()}
        return x
    lifted = [(lift(a), lift(k)) for a, k in calls]
    outs = []
    for a, k in lifted:
        if kind == "call_method":
            outs.append(g.call_method(target, a, k))
        else:
            outs.append(g.call_function(target, a, k))
    g.output(tuple(outs))
    return torch.fx.GraphModule(torch.nn.Module(), g), inputs


def trace_calls(fn, calls):
    """FX-trace `fn` over every sample (tensors become placeholders), as a user's code would be."""
    inputs, memo = [], {}

    def index(x):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = len(inputs)
                inputs.append(x)
            return _Slot(memo[id(x)])
        if isinstance(x, (list, tuple)):
            return type(x)(index(a) for a in x)
        if isinstance(x, dict):
            return {k: index(v) for k, v in x.items()}
        return x
    templates = [(index(a), index(k)) for a, k in calls]

    def fill(x, ts):
        if isinstance(x, _Slot):
            return ts[x.i]
        if isinstance(x, (list, tuple)):
            return type(x)(fill(a, ts) for a in x)
        if isinstance(x, dict):
            return {k: fill(v, ts) for k, v in x.items()}
        return x

    def body(*ts):
        return tuple(fn(*fill(a, ts), **fill(k, ts)) for a, k in templates)
    names = ", ".join(f"in{i}" for i in range(len(inputs)))
    ns = {"body": body}
    exec(f"def traced({names}):\n    return body({names})\n", ns)
    gm = torch.fx.symbolic_trace(ns["traced"])
    return gm, inputs


class _Slot:
    def __init__(self, i):
        self.i = i


def _equal(a, b, path="out"):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: tensor vs {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: {a.dtype}{tuple(a.shape)} vs eager {b.dtype}{tuple(b.shape)}"
        try:
            torch.testing.assert_close(a, b, rtol=1e-4, atol=1e-4, equal_nan=True)
        except AssertionError as e:
            return f"{path}: {str(e).splitlines()[0]} {str(e).splitlines()[-1] if len(str(e).splitlines()) > 1 else ''}"
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{path}: length {len(a)} vs {len(b)}"
        for i, (x, y) in enumerate(zip(a, b)):
            r = _equal(x, y, f"{path}[{i}]")
            if r:
                return r
        return None
    if a != b and not (a != a and b != b):
        return f"{path}: {a!r} vs {b!r}"
    return None


def run_op(op, dtype, max_samples=None) -> OpResult:
    res = OpResult(op.name, dtype)
    try:
        samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    except Exception as e:
        res.error = f"sample_inputs: {e}"
        return res
    kind, target = _target(op)
    calls = []
    for s in samples:
        args, kwargs = _sample_call(op, s)
        try:
            with torch.no_grad():
                if kind == "call_method":
                    getattr(_clone(args[0]), target)(*_clone(args[1:]), **_clone(kwargs))
                else:
                    target(*_clone(args), **_clone(kwargs))
        except Exception:
            continue
        calls.append((args, kwargs))
        if max_samples and len(calls) >= max_samples:
            break
    if not calls:
        res.error = "no sample runs eagerly"
        return res
    try:
        gm, inputs = trace_calls(op.op, calls)
        res.traced = True
    except Exception:
        gm, inputs = build_graph(kind, target, calls)
    res.samples = len(calls)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            try:
                compiled = codegen.compile_fx(gm, _clone(inputs))
            except Exception as e:   # compile_fx must never raise: count as wrong
                res.wrong.append(f"compile_fx raised {type(e).__name__}: {e}")
                return res
            st = compiled.stats
            res.native_nodes, res.extern_nodes = st.native_nodes, st.extern_nodes
            res.native = st.native_nodes > 0 and st.extern_nodes == 0 and not st.fallback
            res.partly_native = st.native_nodes > 0 and not st.fallback
            res.extern_reasons = sorted(set(st.extern_reasons.values()))[:5]
            if st.fallback:
                res.extern_reasons.append("graph fallback: " + st.fallback)
            eager_in, comp_in = _clone(inputs), _clone(inputs)
            try:
                ref = gm(*eager_in)
                ref2 = gm(*_clone(inputs))   # a sample whose eager result varies is random
            except Exception as e:
                res.error = f"eager graph raised {e}"
                return res
            try:
                out = compiled(*comp_in)
            except Exception as e:
                res.wrong.append(f"compiled call raised {type(e).__name__}: {e}")
                return res
    nondet = any(k in op.name for k in NONDETERMINISTIC)
    for i in range(len(calls)):
        if nondet or _equal(ref[i], ref2[i]):
            continue
        r = _equal(out[i], ref[i], f"sample{i}")
        if r:
            res.wrong.append(r)
    for i, (a, b) in enumerate(zip(comp_in, eager_in)):
        r = None if nondet else _equal(a, b, f"input{i} after call")
        if r:
            res.wrong.append(r)
    return res


def op_db():
    try:
        import expecttest  # noqa: F401
    except ImportError:
        # torch's test utilities only subclass expecttest.TestCase; the op database itself
        # does not need it, so a stand-in keeps the harness free of a test-only dependency.
        import sys
        import types
        import unittest
        stub = types.ModuleType("expecttest")
        stub.TestCase = unittest.TestCase
        sys.modules["expecttest"] = stub
    from torch.testing._internal.common_methods_invocations import op_db as db
    return db


def supported_dtypes(op):
    want = [torch.float32, torch.int64, torch.bool]
    try:
        have = op.supported_dtypes("cpu")
    except Exception:
        have = op.dtypes
    return [d for d in want if d in have]

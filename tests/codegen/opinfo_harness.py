"""OpInfo correctness harness shared by the CI subsets, benchmarks/opinfo_sweep.py and
scripts/grad_sweep.py.

Three entry points:
- run_variants(op, dtype): what a user sees. The op's function, in-place (op.inplace_variant)
  and out= variants (a preallocated out of the right shape, and an empty one eager resizes), on
  contiguous, noncontiguous (strided, offset 1), transposed and storage-offset copies of every
  sample, are called from an ordinary Python function compiled by
  pydynamo.optimize(backend="codegen") on the user's own tensors (the first call included, two
  calls), against the same function run eagerly on a deep copy (storage sharing, strides and
  offsets kept). Compared: results, every input afterwards (mutated inputs, out= targets), and
  which inputs each result aliases; stride differences are listed apart (not counted wrong).
  A case whose eager call raises (a dtype or broadcast an in-place variant refuses) is dropped.
  One compiled function per variant group holds all its cases (one g++ build), because codegen
  runs a graph with an out= call or an in-place op on an input eagerly as a whole.
- run_op(op, dtype): every sample as one node of a single FX graph through codegen.compile_fx
  directly (counts what lowers natively; the GPU sweep reuses it).
- run_grad(op, backend): training. Each float32 autograd sample (fresh leaf inputs), compiled
  by pydynamo.optimize(backend=...) in the same kind of user program as run_variants, called
  twice, each call followed by torch.autograd.grad with fixed random cotangents: outputs and
  input grads against eager under torch.testing's default tolerances (section at the end).
Integers and bools always compare exactly (a relative tolerance calls 20001 equal to 20000);
floats with rtol=atol=1e-4 (fp16/bf16: two units in the last place, `_tolerance`, or, in run_op,
as close to a float64 run as eager is: `_no_less_accurate`).
"""
from __future__ import annotations

import contextlib
import copy
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


def _tolerance(dtype) -> float:
    """1e-4, or for fp16/bf16 two units in the last place at 1: eager rounds a composite op's
    intermediates to the half type, a fused kernel keeps them in fp32 (codegen computes half
    types in fp32, as eager computes one op), so a result may differ in its last bit or two."""
    if dtype in (torch.float16, torch.bfloat16):
        return 2 * torch.finfo(dtype).eps
    return 1e-4


def _equal(a, b, path="out"):
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)):
            return f"{path}: tensor vs {type(b).__name__}"
        if a.shape != b.shape or a.dtype != b.dtype:
            return f"{path}: {a.dtype}{tuple(a.shape)} vs eager {b.dtype}{tuple(b.shape)}"
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            # integers and bools compare exactly: a relative tolerance calls 20001 equal to 20000
            if a.device != b.device or not torch.equal(a, b):
                bad = (a.cpu() != b.cpu()).nonzero()[:1].tolist()
                return f"{path}: integer/bool values differ (first at {bad})"
            return None
        tol = _tolerance(a.dtype)
        try:
            torch.testing.assert_close(a, b, rtol=tol, atol=tol, equal_nan=True)
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
    exact = None
    for i in range(len(calls)):
        if nondet or _equal(ref[i], ref2[i]):
            continue
        r = _equal(out[i], ref[i], f"sample{i}")
        if r and dtype in (torch.float16, torch.bfloat16):
            if exact is None:
                exact = _float64_run(gm, inputs)
            if exact is not None and _no_less_accurate(out[i], ref[i], exact[i]):
                r = None
        if r:
            res.wrong.append(r)
    for i, (a, b) in enumerate(zip(comp_in, eager_in)):
        r = None if nondet else _equal(a, b, f"input{i} after call")
        if r:
            res.wrong.append(r)
    return res


def _float64_run(gm, inputs):
    """The graph on float64 copies of the floating inputs (None if it does not run so)."""
    try:
        with torch.no_grad():
            return gm(*[x.double() if isinstance(x, torch.Tensor) and x.is_floating_point()
                        else _clone(x) for x in inputs])
    except Exception:
        return None


def _no_less_accurate(a, b, exact) -> bool:
    """fp16/bf16: eager rounds a composite op's intermediates to the half type, codegen keeps
    them in fp32, so the two can differ by more than an ulp where a value cancels. A result is
    not wrong when each element is as close to the float64 result as eager's is (within twice
    eager's error plus two units in the last place); dtypes, shapes and integers never get this
    allowance."""
    if isinstance(a, (list, tuple)):
        return isinstance(b, (list, tuple)) and isinstance(exact, (list, tuple)) and \
            len(a) == len(b) == len(exact) and all(map(_no_less_accurate, a, b, exact))
    if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and
            isinstance(exact, torch.Tensor)) or a.dtype != b.dtype or a.shape != b.shape or \
            not a.is_floating_point() or a.shape != exact.shape:
        return _equal(a, b) is None
    eps = torch.finfo(a.dtype).eps
    e = exact.double()
    ours, theirs = (a.double() - e).abs(), (b.double() - e).abs()
    same_nan = a.isnan() == b.isnan()
    ok = (ours <= 2 * theirs + 2 * eps * e.abs()) | (a.double() == b.double())
    return bool(same_nan.all()) and bool(ok[~a.isnan()].all())


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
    want = [torch.float32, torch.int64, torch.bool, torch.bfloat16, torch.float16]
    try:
        have = op.supported_dtypes("cpu")
    except Exception:
        have = op.dtypes
    return [d for d in want if d in have]


# --- variants through pydynamo: function, in-place, out=, on every input layout -----------------
#
# run_variants(op, dtype) is what a user sees: the op is called from an ordinary Python function
# compiled by pydynamo.optimize(backend="codegen"), on the user's own tensors (first call
# included, twice), and compared with the same function run eagerly on a deep copy of them (one
# copy for all cases, so storage sharing, strides and offsets are the user's). Every case (variant
# x layout x sample) is one call in that function with its own tensors, so one graph (one g++
# build) serves a whole op and dtype; a case whose eager call raises is dropped first. Integers
# and bools compare exactly, floats with rtol=atol=1e-4; results, every input afterwards
# (in-place and out= targets included) and which input each result aliases are compared.

LAYOUTS = ("contiguous", "noncontiguous", "transposed", "offset")
VARIANTS = ("function", "inplace", "out", "out_resize")
OFFSET = 3          # elements in front of an "offset" tensor in its storage


def _map_tensors(x, f):
    if isinstance(x, torch.Tensor):
        return f(x)
    if isinstance(x, (list, tuple)):
        return type(x)(_map_tensors(a, f) for a in x)
    if isinstance(x, dict):
        return {k: _map_tensors(v, f) for k, v in x.items()}
    return x


def _filler(dtype):
    # a value a kernel must never read: NaN (float), 12 (int), True (bool)
    return True if dtype is torch.bool else 12 if not dtype.is_floating_point else float("nan")


def at_offset(t, offset=OFFSET):
    """A copy of `t` (same shape, contiguous) that starts `offset` elements into its storage."""
    buf = torch.full((t.numel() + offset,), _filler(t.dtype), dtype=t.dtype)
    v = buf[offset:].view(t.shape)
    v.copy_(t)
    return v


def transposed_like(t):
    """A copy of `t` laid out column-major in its last two dims (the layout of x.mT of a
    contiguous tensor); `t` itself when it has fewer than two dims."""
    if t.dim() < 2:
        return t
    return t.detach().transpose(-1, -2).contiguous().transpose(-1, -2)


def _layout(sample, layout):
    from torch.testing._internal.opinfo.core import noncontiguous_like
    f = {"contiguous": lambda t: t, "noncontiguous": noncontiguous_like,
         "transposed": transposed_like, "offset": at_offset}[layout]
    with torch.no_grad():
        return (_map_tensors(sample.input, f), _map_tensors(tuple(sample.args), f),
                _map_tensors(dict(sample.kwargs), f))


def _out_like(r, how, layout):
    """An out= argument for eager result `r`: the right shape ("out"), or empty so that the op
    resizes it ("out_resize"); at an offset in a larger storage for the offset layout."""
    if isinstance(r, torch.Tensor):
        if how == "out_resize":
            return torch.empty(0, dtype=r.dtype)
        o = torch.full(r.shape, _filler(r.dtype), dtype=r.dtype)
        return at_offset(o) if layout == "offset" else o
    if isinstance(r, (tuple, list)) and r and all(isinstance(x, torch.Tensor) for x in r):
        return tuple(_out_like(x, how, layout) for x in r)
    return None


@dataclass
class Case:
    variant: str
    layout: str
    sample: int
    fn: object
    args: tuple
    kwargs: dict

    @property
    def label(self):
        return f"{self.variant}/{self.layout}/sample{self.sample}"


@dataclass
class VariantResult:
    name: str
    dtype: torch.dtype
    cases: int = 0                   # cases compared (eager ran them)
    by_variant: dict = field(default_factory=dict)   # variant -> cases compared
    eager_raises: int = 0            # cases dropped: eager raises (dtype, broadcast, ...)
    wrong: List[str] = field(default_factory=list)            # value differences
    exceptions: List[str] = field(default_factory=list)       # compiled raised, eager did not
    alias: List[str] = field(default_factory=list)            # aliasing differs from eager
    strides: List[str] = field(default_factory=list)          # layout differs (not counted wrong)
    eager_fallbacks: int = 0         # graphs codegen ran eagerly + frames pydynamo ran eagerly
    graph_breaks: int = 0
    native_nodes: int = 0
    graphs: int = 0
    fallback_reasons: List[str] = field(default_factory=list)
    error: str = ""

    @property
    def partly_native(self):
        return self.native_nodes > 0


def _cases(op, dtype, variants, layouts, max_samples):
    samples = list(op.sample_inputs("cpu", dtype, requires_grad=False))
    if max_samples:
        samples = samples[:max_samples]
    plan = []
    for v in variants:
        if v == "inplace" and op.inplace_variant is None:
            continue
        if v in ("out", "out_resize") and not op.supports_out:
            continue
        lays = layouts if v in ("function", "inplace") else \
            [la for la in layouts if la in ("contiguous", "offset")] if v == "out" else \
            [la for la in layouts if la == "contiguous"]
        for la in lays:
            for i, s in enumerate(samples):
                plan.append((v, la, i, s))
    cases, dropped = [], 0
    for v, la, i, s in plan:
        # each case owns its tensors: samples share tensors, and one case's in-place op
        # must not change another's input
        inp, args, kwargs = copy.deepcopy(_layout(s, la))
        fn = op.inplace_variant if v == "inplace" else op.op
        args = (inp,) + args
        if v in ("out", "out_resize"):
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    r = fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
            except Exception:
                dropped += 1
                continue
            out = _out_like(r, v, la)
            if out is None:
                continue
            kwargs = dict(kwargs, out=out)
        c = Case(v, la, i, fn, args, kwargs)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                fn(*copy.deepcopy(args), **copy.deepcopy(kwargs))
        except Exception:
            dropped += 1
            continue
        cases.append(c)
    return cases, dropped


def _program(cases, name):
    """A user function calling every case in turn: (fn, tensors, owner) where owner[j] is the
    case owning tensor j. Non-tensor arguments are globals of the function, as in user code."""
    tensors, memo, owner, ns, lines = [], {}, [], {}, []

    def expr(x, ci):
        if isinstance(x, torch.Tensor):
            if id(x) not in memo:
                memo[id(x)] = len(tensors)
                tensors.append(x)
                owner.append(ci)
            return f"t{memo[id(x)]}"
        if isinstance(x, list):
            return "[" + ", ".join(expr(a, ci) for a in x) + "]"
        if isinstance(x, tuple):
            return "(" + "".join(expr(a, ci) + ", " for a in x) + ")"
        if isinstance(x, (bool, int, str, type(None))) or \
                (isinstance(x, float) and x == x and abs(x) != float("inf")):
            return repr(x)
        k = f"K{len(ns)}"
        ns[k] = x
        return k
    for ci, c in enumerate(cases):
        f = f"F{len(ns)}"
        ns[f] = c.fn
        parts = [expr(a, ci) for a in c.args] + [f"{k}={expr(v, ci)}" for k, v in c.kwargs.items()]
        lines.append(f"    r{ci} = {f}({', '.join(parts)})")
    params = ", ".join(f"t{j}" for j in range(len(tensors)))
    rets = "".join(f"r{ci}, " for ci in range(len(cases)))
    src = f"def {name}({params}):\n" + "\n".join(lines) + f"\n    return ({rets})\n"
    ns["torch"] = torch
    filename = f"<opinfo {name}>"
    import linecache
    linecache.cache[filename] = (len(src), None, src.splitlines(True), filename)
    exec(compile(src, filename, "exec"), ns)
    return ns[name], tensors, owner


def _tensors_of(x):
    if isinstance(x, torch.Tensor):
        return [x]
    if isinstance(x, (list, tuple)):
        return [t for a in x for t in _tensors_of(a)]
    return []


def _storages(inputs):
    """storage address -> indices of the inputs on it (an empty tensor has no storage to share)"""
    by_ptr = {}
    for j, t in enumerate(inputs):
        if t.numel() and t.layout is torch.strided:
            by_ptr.setdefault(t.untyped_storage().data_ptr(), []).append(j)
    return by_ptr


def _aliases(result, by_ptr):
    """For each tensor in `result`: the indices of the inputs sharing its storage."""
    return [tuple(by_ptr.get(t.untyped_storage().data_ptr(), ()))
            if t.numel() and t.layout is torch.strided else () for t in _tensors_of(result)]


def _strides(x):
    return [t.stride() for t in _tensors_of(x)]


class _Recorder:
    """Counts what pydynamo did with the frames it saw (a pydynamo.convert_frame recorder) and
    what the backend named `inner` (default codegen) did with each graph (the backend below
    reports here)."""

    def __init__(self, inner="codegen"):
        self.graphs, self.breaks, self.frames_eager, self.native, self.fallback = 0, 0, 0, 0, 0
        self.reasons: List[str] = []
        self.inner = inner

    def __call__(self, r):
        from pydynamo.convert_frame import FrameResult
        from pydynamo.exc import GraphBreak
        if isinstance(r, FrameResult):
            self.breaks += r.graph_break is not None
        elif isinstance(r, GraphBreak):
            self.frames_eager += 1

    def backend(self, gm, example_inputs):
        """pydynamo's `inner` backend, unchanged, with each graph's CompileStats counted."""
        from pydynamo.backends import lookup_backend
        fn = lookup_backend(self.inner)(gm, example_inputs)
        st = getattr(fn, "stats", None)
        self.graphs += 1
        if st is not None:
            self.native += st.native_nodes
            self.fallback += bool(st.fallback)
            if st.fallback:
                self.reasons.append(st.fallback)
        elif self.inner == "codegen":   # codegen could not compile the graph: it runs eagerly
            self.fallback += 1
        return fn


def _calls(fn, tensors, calls, before=None):
    """Call fn(*tensors) up to `calls` times (`before(tensors)` ahead of each). Per call: its
    results as they were right after it (cloned: a later in-place call must not change what
    this one returned), which inputs they alias, their strides. Stops at the first exception:
    (records, exception or None)."""
    recs = []
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for _ in range(calls):
            if before is not None:
                before(tensors)
            try:
                out = fn(*tensors)
            except Exception as e:
                return recs, e
            by_ptr = _storages(tensors)
            recs.append((_clone(out), [_aliases(o, by_ptr) for o in out],
                         [_strides(o) for o in out]))
    return recs, None


def _compiled_run(fn, tensors, calls, before=None):
    """Compile `fn` with the codegen backend and call it on `tensors` themselves:
    (records as _calls gives them, exception or None, recorder)."""
    with _recording("codegen") as rec:
        recs, exc = _calls(rec.compiled(fn), tensors, calls, before)
    return recs, exc, rec


@contextlib.contextmanager
def _recording(backend):
    """A _Recorder of pydynamo's frames and of `backend`'s graphs for the block;
    rec.compiled(fn) is fn under pydynamo.optimize through it."""
    import pydynamo
    from pydynamo import convert_frame
    rec = _Recorder(backend)
    rec.compiled = lambda fn: pydynamo.optimize(backend=rec.backend)(fn)
    convert_frame.RECORDERS.append(rec)
    try:
        yield rec
    finally:
        convert_frame.RECORDERS.remove(rec)


# one program (one compiled frame) per group: codegen runs a graph holding an out= call or an
# in-place op on a graph input eagerly as a whole, which must not hide the function variant
GROUPS = {"function": ("function",), "inplace": ("inplace",), "out": ("out", "out_resize")}
CHUNK = 64


def run_variants(op, dtype, variants=VARIANTS, layouts=LAYOUTS, max_samples=None,
                 calls=2) -> VariantResult:
    """Every case of `op` in `dtype`, compiled as a user would and compared with eager."""
    res = VariantResult(op.name, dtype)
    try:
        cases, res.eager_raises = _cases(op, dtype, variants, layouts, max_samples)
    except Exception as e:
        res.error = f"sample_inputs: {type(e).__name__}: {e}"
        return res
    if not cases:
        res.error = "no case runs eagerly"
        return res
    base = "opinfo_" + "".join(c if c.isalnum() else "_" for c in op.name + "_" + op.variant_test_name)
    nondet = any(k in op.name for k in NONDETERMINISTIC)
    for group, members in GROUPS.items():
        part = [c for c in cases if c.variant in members]
        # at most CHUNK cases a program: logspace has 1201 samples (a wrapper of thousands
        # of lines takes minutes for Python to compile), and a frame with a graph break per case
        # takes superlinear time to translate (multi_head_attention_forward: findings F5)
        for i in range(0, len(part), CHUNK):
            _check_program(part[i:i + CHUNK], f"{base}_{group}{i // CHUNK}", calls, nondet, res)
    for c in cases:
        res.by_variant[c.variant] = res.by_variant.get(c.variant, 0) + 1
    return res


def _check_program(cases, name, calls, nondet, res):
    """Compile the cases' program and compare each call with eager. Call k's reference is one
    eager call on a copy of the user's tensors as they were before compiled call k (call 0:
    the pristine inputs), so a first-call double mutation shows and an ill-conditioned op
    (tan_ twice near a pole) does not amplify rounding differences from earlier calls."""
    import pydynamo
    fn, tensors, owner = _program(cases, name)
    pristine = copy.deepcopy(tensors)
    ref, exc = _calls(fn, copy.deepcopy(pristine), calls)
    if not ref:
        res.error = f"eager program raised {type(exc).__name__}: {exc}"
        return
    # an in-place op that changes metadata (squeeze_) may make a later call raise in eager:
    # compare the calls eager completes
    calls = len(ref)
    pydynamo.reset()
    before = []
    outs, exc, rec = _compiled_run(fn, tensors, calls, lambda ts: before.append(copy.deepcopy(ts)))
    res.graphs += rec.graphs
    res.graph_breaks += rec.breaks
    res.native_nodes += rec.native
    res.eager_fallbacks += rec.fallback + rec.frames_eager
    res.fallback_reasons += [r for r in rec.reasons if r not in res.fallback_reasons][:3]
    res.cases += len(cases)
    if exc is not None:
        # attribute: each case alone, on fresh copies of its tensors
        by_id = {id(t): p for t, p in zip(tensors, pristine)}
        found = _bisect_exceptions(cases, calls, by_id)
        res.exceptions += found or [f"{name}: {type(exc).__name__}: {str(exc)[:200]}"]
        return
    bad = set()
    for k in range(calls):
        eager_in, eager_in2 = copy.deepcopy(before[k]), copy.deepcopy(before[k])
        (want, want_alias, want_strides), = _calls(fn, eager_in, 1)[0]
        (want2, _, _), = _calls(fn, eager_in2, 1)[0]
        got, got_alias, got_strides = outs[k]
        after = before[k + 1] if k + 1 < calls else tensors
        for ci, c in enumerate(cases):
            if ci in bad or nondet or _equal(want[ci], want2[ci], "") is not None:
                continue      # random or uninitialized result: not comparable value by value
            r = _equal(got[ci], want[ci], f"{c.label} call{k} result")
            if r:
                res.wrong.append(r)
                bad.add(ci)
            elif got_alias[ci] != want_alias[ci]:
                res.alias.append(f"{c.label}: result aliases inputs {got_alias[ci]} vs eager "
                                 f"{want_alias[ci]}")
                bad.add(ci)
            elif k == 0 and got_strides[ci] != want_strides[ci]:
                res.strides.append(f"{c.label}: strides {got_strides[ci]} vs eager "
                                   f"{want_strides[ci]}")
        if nondet:
            continue
        for j, (a, b, b2) in enumerate(zip(after, eager_in, eager_in2)):
            ci = owner[j]
            if ci in bad or _equal(b, b2, "") is not None:
                continue
            r = _equal(a, b, f"{cases[ci].label} input t{j} after call{k}")
            if r:
                res.wrong.append(r)
                bad.add(ci)


def _bisect_exceptions(cases, calls, pristine_by_id):
    """The cases that raise when compiled alone (on fresh copies of their original tensors)."""
    import pydynamo
    found = []
    for ci, c in enumerate(cases):
        fn, tensors, _ = _program([c], f"opinfo_case{ci}")
        tensors = copy.deepcopy([pristine_by_id[id(t)] for t in tensors])
        pydynamo.reset()
        _, exc, _ = _compiled_run(fn, tensors, calls)
        if exc is not None:
            found.append(f"{c.label}: {type(exc).__name__}: {str(exc)[:200]}")
    return found


# --- gradients: forward outputs and input grads of a compiled call against eager ----------------
#
# run_grad(op, backend) is what a user training through pydynamo sees: each float32 sample of an
# op that supports autograd (OpInfo's own requires_grad samples, so OpInfo decides which inputs
# are differentiable), its tensors cloned into fresh leaves, is called from an ordinary Python
# function compiled by pydynamo.optimize(backend=...) (the _program above: one frame per chunk of
# samples, so one joint graph, one forward and one backward build). Its outputs, passed through
# the sample's output_process_fn_grad, are reduced with a fixed random cotangent per output by
# one torch.autograd.grad over every leaf; the same for eager, per sample. Compared with
# torch.testing.assert_close's default tolerances for the dtype (float32: rtol 1.3e-6, atol
# 1e-5), NaNs equal: outputs, which outputs require grad, and every input grad (None and zeros
# are the same gradient). Two compiled calls: the first compiles the backward, the second reuses
# it. A sample is dropped when its eager backward raises or no output requires grad; a sample
# whose eager run differs from a second eager run (random ops) is counted apart, not compared.
# A mismatch is rechecked alone (fresh pydynamo.reset(), one sample in the frame) before it is
# counted wrong, and carries the float64 eager errors so a reader can tell a rounding difference
# from a wrong formula (it is counted wrong either way).

GRAD_COUNTERS = ("joint_graphs", "backward_compiled", "backward_calls", "eager_fallback")


@dataclass
class GradResult:
    name: str
    variant: str
    backend: str
    samples: int = 0                 # samples compared
    ok: int = 0
    wrong: List[dict] = field(default_factory=list)           # one per wrong sample
    exceptions: List[str] = field(default_factory=list)       # compiled raised, eager did not
    eager_backward_raises: int = 0   # samples dropped: eager's backward raises
    no_grad_output: int = 0          # samples dropped: no output requires grad
    nondeterministic: int = 0        # eager differs from eager: not compared
    counters: dict = field(default_factory=dict)   # pydynamo.aot.counters, this op's increments
    graphs: int = 0                  # graphs the backend received
    graph_breaks: int = 0
    frames_eager: int = 0            # frames pydynamo ran eagerly (no graph at all)
    fallback_reasons: List[str] = field(default_factory=list)
    error: str = ""


def _aot_counters():
    try:
        from pydynamo.aot import counters
    except ImportError:         # before the training path exists every graph is eager autograd
        return {}
    return dict(counters)


def _fresh_leaves(tensors):
    """Detached copies (values and strides kept) that are leaves requiring grad where the
    originals did."""
    out = []
    for t in tensors:
        c = t.detach().clone()
        if t.requires_grad and (t.is_floating_point() or t.is_complex()):
            c.requires_grad_(True)
        out.append(c)
    return out


def _grad_case(op, i, s):
    """The sample as a Case over fresh leaf tensors (shared tensors stay shared), plus the
    sample's output_process_fn_grad."""
    memo = {}

    def leaf(t):
        if id(t) not in memo:
            memo[id(t)] = _fresh_leaves([t])[0]
        return memo[id(t)]
    inp = _map_tensors(s.input, leaf)
    args = _map_tensors(tuple(s.args), leaf)
    kwargs = _map_tensors(dict(s.kwargs), leaf)
    return Case("grad", "contiguous", i, op.op, (inp,) + args, kwargs), s.output_process_fn_grad


def _diff_outputs(out):
    # a leaf among the outputs (dropout with p=0 returns its input) still has a gradient
    return [t for t in _tensors_of(out) if t.requires_grad]


def _cotangent(t, seed):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(t.shape, generator=g, dtype=t.dtype)


def _backward(outs, leaves, seed):
    """grad of sum(<out_k, cotangent_k>) for every leaf that requires grad (None where unused)."""
    diff = _diff_outputs(outs)
    want = [t for t in leaves if t.requires_grad]
    if not diff or not want:
        return []
    cots = [_cotangent(t, seed * 1000 + k) for k, t in enumerate(diff)]
    return list(torch.autograd.grad(diff, want, cots, allow_unused=True))


def _widen(t):
    """float64 (complex128 for complex values: .double() would drop the imaginary part)"""
    return t.to(torch.complex128 if t.is_complex() else torch.float64)


def _close(a, b, path):
    """None when equal under torch.testing's default tolerances (integers exactly), else
    {what, max_abs, max_rel}. None and zeros are the same gradient."""
    if a is None and b is None:
        return None
    if a is None or b is None:
        t = b if a is None else a
        if isinstance(t, torch.Tensor) and not torch.count_nonzero(t.detach()):
            return None
        return dict(what=f"{path}: {'None' if a is None else 'tensor'} vs eager "
                         f"{'None' if b is None else 'tensor'}", max_abs=None, max_rel=None)
    if isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor):
        a, b = a.detach(), b.detach()
        if a.shape != b.shape or a.dtype != b.dtype:
            return dict(what=f"{path}: {a.dtype}{tuple(a.shape)} vs eager {b.dtype}{tuple(b.shape)}",
                        max_abs=None, max_rel=None)
        if not (a.dtype.is_floating_point or a.dtype.is_complex):
            if torch.equal(a, b):
                return None
            return dict(what=f"{path}: integer/bool values differ", max_abs=None, max_rel=None)
        try:
            torch.testing.assert_close(a, b, equal_nan=True)
            return None
        except AssertionError as e:
            d = (_widen(a) - _widen(b)).abs().nan_to_num(0.0)
            rel = d / _widen(b).abs().clamp_min(1e-30)
            return dict(what=f"{path}: {str(e).splitlines()[0]}",
                        max_abs=float(d.max()) if d.numel() else 0.0,
                        max_rel=float(rel.max()) if rel.numel() else 0.0)
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return dict(what=f"{path}: length {len(a)} vs {len(b)}", max_abs=None, max_rel=None)
        for k, (x, y) in enumerate(zip(a, b)):
            r = _close(x, y, f"{path}[{k}]")
            if r:
                return r
        return None
    if a != b and not (a != a and b != b):
        return dict(what=f"{path}: {a!r} vs {b!r}", max_abs=None, max_rel=None)
    return None


def _eager_grad(case, process, seed, tensors):
    """(outputs, which outputs require grad, grads) of one eager call on fresh leaves."""
    leaves = _fresh_leaves(tensors)
    fn, _, _ = _program([case], "eager_grad")
    out = process(fn(*leaves)[0])
    return _clone(out), [t.requires_grad for t in _tensors_of(out)], _backward(out, leaves, seed)


def _compare_grad(got, want, label):
    """First difference of (outputs, requires-grad flags, grads), or None."""
    (o, rg, g), (wo, wrg, wg) = got, want
    return _close(o, wo, f"{label} output") or \
        (dict(what=f"{label}: outputs requiring grad {rg} vs eager {wrg}", max_abs=None,
              max_rel=None) if rg != wrg else None) or _close(g, wg, f"{label} grad")


def _compiled_grad_run(fn, cases, processes, tensors, rec, calls):
    """Compile `fn` through recorder `rec` and call it `calls` times on fresh leaves, each call
    followed by one autograd.grad over every sample's outputs: per call, per sample (outputs,
    requires grad flags, grads of the sample's leaves); or the exception raised."""
    compiled = rec.compiled(fn)
    owner_of = {}
    for ci, c in enumerate(cases):
        for t in _tensors_of(list(c.args) + list(c.kwargs.values())):
            owner_of.setdefault(id(t), ci)
    runs = []
    for _ in range(calls):
        leaves = _fresh_leaves(tensors)
        outs = compiled(*leaves)
        outs = [p(o) for p, o in zip(processes, outs)]
        diff, cots, want = [], [], []
        for ci, o in enumerate(outs):
            for k, t in enumerate(_diff_outputs(o)):
                diff.append(t)
                cots.append(_cotangent(t, cases[ci].sample * 1000 + k))
        want = [t for t in leaves if t.requires_grad]
        grads = list(torch.autograd.grad(diff, want, cots, allow_unused=True)) if diff and want else []
        by_leaf = dict(zip([id(t) for t in want], grads))
        per = []
        for ci, o in enumerate(outs):
            mine = [leaves[j] for j, t in enumerate(tensors) if owner_of.get(id(t)) == ci]
            per.append((_clone(o), [t.requires_grad for t in _tensors_of(o)],
                        [by_leaf.get(id(t)) for t in mine if t.requires_grad]))
        runs.append(per)
    return runs


def _f64_errors(case, process, seed, tensors, got, want, part):
    """Max abs error of the compiled and of the eager float32 results against eager in float64,
    for the part ("output" or "grad") that differed. A rounding difference leaves the compiled
    result as close to float64 as eager's (rounding=True); a wrong formula does not."""
    k = 0 if part == "output" else 2
    flat = _tensors_of if k == 0 else list      # grads: one entry (maybe None) per leaf
    try:
        t64 = [_widen(t.detach()).requires_grad_(t.requires_grad)
               if t.is_floating_point() or t.is_complex() else t for t in tensors]
        ref = flat(_eager_grad(case, process, seed, t64)[k])
        err = []
        for res in (got[k], want[k]):
            m = 0.0
            for a, r in zip(flat(res), ref):
                if a is not None and r is not None and a.numel() and \
                        (a.is_floating_point() or a.is_complex()):
                    m = max(m, float((_widen(a.detach()) - r.detach()).abs().nan_to_num(0.0).max()))
            err.append(m)
        return dict(f64_err_compiled=err[0], f64_err_eager=err[1],
                    rounding=0 < err[0] <= 2 * err[1])
    except Exception as e:     # an op without a float64 kernel on CPU: no reference
        return dict(f64_note=f"no float64 reference: {type(e).__name__}", rounding=False)


def _sample_repr(case):
    def show(x):
        if isinstance(x, torch.Tensor):
            return f"T{tuple(x.shape)}{'' if x.is_contiguous() else ' strides=' + str(x.stride())}" \
                   f"{' rg' if x.requires_grad else ''}"
        if isinstance(x, (list, tuple)):
            return type(x)(show(a) for a in x)
        return x
    return f"args={show(case.args)} kwargs={ {k: show(v) for k, v in case.kwargs.items()} }"


def grad_cases(op, max_samples=None, only=None):
    """(cases, output processors, dropped counts) for op's float32 autograd samples (the first
    max_samples, or the indices in `only`): the samples eager differentiates, each checked twice
    in eager (nondeterministic ones flagged)."""
    samples = list(op.sample_inputs("cpu", torch.float32, requires_grad=True))
    if max_samples:
        samples = samples[:max_samples]
    kept, drop = [], dict(eager_backward_raises=0, no_grad_output=0, nondeterministic=0)
    for i, s in enumerate(samples):
        if only is not None and i not in only:
            continue
        case, process = _grad_case(op, i, s)
        fn, tensors, _ = _program([case], "eager_grad")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                want = _eager_grad(case, process, i, tensors)
                if not any(want[1]):
                    drop["no_grad_output"] += 1
                    continue
                want2 = _eager_grad(case, process, i, tensors)
        except Exception:
            drop["eager_backward_raises"] += 1
            continue
        nondet = _compare_grad(want2, want, "eager twice") is not None
        drop["nondeterministic"] += nondet
        kept.append((case, process, want, nondet))
    return kept, drop


def check_grad_sample(op, case, process, backend, calls=2):
    """One sample alone in a fresh pydynamo: the first difference from eager over `calls`
    compiled calls (a dict), the exception's text, or None."""
    import pydynamo
    fn, tensors, _ = _program([case], "grad_sample")
    want = _eager_grad(case, process, case.sample, tensors)
    pydynamo.reset()
    try:
        with warnings.catch_warnings(), _recording(backend) as rec:
            warnings.simplefilter("ignore")
            runs = _compiled_grad_run(fn, [case], [process], tensors, rec, calls)
    except Exception as e:
        return f"{type(e).__name__}: {str(e)[:300]}"
    for k, per in enumerate(runs):
        r = _compare_grad(per[0], want, f"call{k}")
        if r:
            part = "output" if " output" in r["what"] else "grad"
            f64 = _f64_errors(case, process, case.sample, tensors, per[0], want, part) \
                if r["max_abs"] is not None else dict(rounding=False)
            return dict(r, **f64)
    return None


def run_grad(op, backend="codegen", max_samples=None, calls=2, chunk=CHUNK,
             only=None) -> GradResult:
    """Every float32 autograd sample of `op` (or those numbered in `only`) compiled with
    `backend`: outputs and input grads against eager (see the section comment)."""
    import pydynamo
    res = GradResult(op.name, op.variant_test_name, backend)
    try:
        kept, drop = grad_cases(op, max_samples, only)
    except Exception as e:
        res.error = f"sample_inputs: {type(e).__name__}: {e}"
        return res
    res.eager_backward_raises, res.no_grad_output = drop["eager_backward_raises"], drop["no_grad_output"]
    res.nondeterministic = drop["nondeterministic"]
    if not kept:
        res.error = "no sample differentiates eagerly"
        return res
    base = "grad_" + "".join(c if c.isalnum() else "_" for c in op.name + "_" + op.variant_test_name)
    before = _aot_counters()
    for lo in range(0, len(kept), chunk):
        part = kept[lo:lo + chunk]
        cases = [c for c, _, _, _ in part]
        fn, tensors, _ = _program(cases, f"{base}{lo // chunk}")
        pydynamo.reset()
        with warnings.catch_warnings(record=True) as seen, _recording(backend) as rec:
            warnings.simplefilter("always")
            try:
                runs = _compiled_grad_run(fn, cases, [p for _, p, _, _ in part], tensors,
                                          rec, calls)
            except Exception as e:
                runs, exc = None, e
        res.graphs += rec.graphs
        res.graph_breaks += rec.breaks
        res.frames_eager += rec.frames_eager
        for w in seen:     # the training path's own warnings (why a graph took eager autograd)
            msg = str(w.message)
            if ("/pydynamo/aot/" in w.filename or "autograd" in msg) and \
                    msg[:300] not in res.fallback_reasons:
                res.fallback_reasons.append(msg[:300])
        if runs is None:
            # attribute: each sample alone
            found = [(c, check_grad_sample(op, c, p, backend, calls)) for c, p, _, _ in part]
            bad = [(c, r) for c, r in found if isinstance(r, str)]
            res.exceptions += [f"sample{c.sample}: {r}" for c, r in bad] or \
                [f"{base}{lo // chunk}: {type(exc).__name__}: {str(exc)[:300]}"]
            res.samples += len(part) - sum(nd for _, _, _, nd in part)
            res.ok += len(part) - sum(nd for _, _, _, nd in part) - len(bad)
            continue
        for ci, (case, process, want, nondet) in enumerate(part):
            if nondet:
                continue
            res.samples += 1
            diff = None
            for k, per in enumerate(runs):
                diff = _compare_grad(per[ci], want, f"call{k}")
                if diff:
                    break
            if diff is None:
                res.ok += 1
                continue
            # alone, in a fresh pydynamo: what a repro shows
            alone = check_grad_sample(op, case, process, backend, calls)
            if alone is None:
                diff = dict(diff, alone="matches when compiled alone")
            elif isinstance(alone, str):
                diff = dict(diff, alone=alone)
            else:
                diff = dict(alone, alone="reproduces alone")
            res.wrong.append(dict(diff, sample=case.sample, call=_sample_repr(case)))
    after = _aot_counters()
    res.counters = {k: after.get(k, 0) - before.get(k, 0) for k in GRAD_COUNTERS}
    return res

"""Guards: the assumptions a compiled entry was traced under, as data, compiled to one function.

`Guard(source, kind, expected, origin)` records one assumption; `origin` is the user's file:line
that made the translator look at the value. `compile_guards` turns a list into one Python
function `guard(L) -> bool` (L = the frame_locals dict the hook passes), ordered cheapest and most
discriminating first, with each source expression evaluated once and kept in a local. This
function runs on every call of a compiled frame: it is the hot path, so it is generated source
(no loops, no per-guard calls), and any exception while checking means "miss".
`failures(...)` re-checks guards one at a time to explain a miss (old value vs new).
"""
from __future__ import annotations

import dataclasses
import enum
import hashlib
import math
from typing import Any, Optional

import torch

from pydynamo import _C
from pydynamo import autocast as _autocast
from pydynamo import tensor_check
from pydynamo.records import record
from pydynamo.sources import Source


class GuardKind(str, enum.Enum):
    # value is the sort rank: cheaper / more discriminating kinds run first
    COMPILE_SETTINGS = "COMPILE_SETTINGS"   # the optimize() settings the entry was compiled under
    GLOBAL_STATE = "GLOBAL_STATE"
    ID_MATCH = "ID_MATCH"
    TYPE_MATCH = "TYPE_MATCH"
    EQUALS_MATCH = "EQUALS_MATCH"
    LEN = "LEN"
    DICT_KEYS = "DICT_KEYS"
    TENSOR_MATCH = "TENSOR_MATCH"
    ALIASING = "ALIASING"   # two sources hold the same object (one tracker stands for both)
    SHAPE_ENV = "SHAPE_ENV"


_RANK = {k: i for i, k in enumerate(GuardKind)}


@record
class TensorSpec:
    """What TENSOR_MATCH pins. A None entry in `shape`/`stride` means "any" (dynamic dims later).

    Dispatch keys, by the attributes that decide them instead of the DispatchKeySet itself
    (reading that costs about 3-4 plain attribute reads per tensor: benchmarks/bench_guards.py):
      * Python key (tensor subclasses): the exact class is pinned;
      * backend keys (CPU, CUDA, Meta, ...) and sparse/mkldnn/nested layouts: `device`, and
        `stride()`/`shape`, which raise on non-strided and nested tensors (a raise is a miss);
      * Autograd/ADInplaceOrView: `requires_grad` and `is_inference()` (inference tensors have
        neither key; torch.compile recompiles on them too);
      * Negative/Conjugate: `is_neg()` for floating and complex dtypes (public APIs make neg views
        only there: `.imag` of a conjugate), `is_conj()` for complex ones;
      * FuncTorch wrappers (vmap/grad): they only exist while a torch.func transform is active,
        which the GLOBAL_STATE guard pins (frames under a transform run eagerly).
    A kernel of the codegen backend reads raw memory, so these bits change what its result means."""
    cls: type
    dtype: torch.dtype
    device: torch.device
    shape: tuple
    stride: tuple
    requires_grad: bool
    is_conj: bool = False
    is_neg: bool = False
    is_inference: bool = False

    def with_dynamic(self, shape: tuple, stride: tuple) -> "TensorSpec":
        """The spec with symbolic entries (anything not an int) left open ("any")."""
        return dataclasses.replace(self, shape=tuple(d if isinstance(d, int) else None for d in shape),
                                   stride=tuple(d if isinstance(d, int) else None for d in stride))

    @staticmethod
    def of(t: torch.Tensor) -> "TensorSpec":
        return TensorSpec(type(t), t.dtype, t.device, tuple(t.shape), tuple(t.stride()),
                          t.requires_grad, t.is_conj(), t.is_neg(), t.is_inference())

    def key_checks(self, v: str) -> list[str]:
        """Conditions on `v` for the dispatch-key bits not implied by class, dtype and device."""
        # `_version` raises on an inference tensor (a raise is a miss) and costs half of a call to
        # is_inference(): the hot path's common case, a normal tensor, pays for the attribute only
        conds = [f"{v}.is_inference()" if self.is_inference else f"{v}._version >= 0"]
        if self.dtype.is_complex:
            conds.append(f"{v}.is_conj() is {self.is_conj}")
        if self.dtype.is_complex or self.dtype.is_floating_point:
            conds.append(f"{v}.is_neg() is {self.is_neg}")
        return conds


@record(eq=False)
class ShapeGuards:
    """What a SHAPE_ENV guard pins: every relation the ShapeEnv recorded, as one check function
    (`check(L, G)`, plain Python, each size read once) and as readable text with its user line."""
    check: Any                  # shapes.ShapeEnv.make_check_fn()
    texts: tuple                # ("2*L['a'].size()[0] >= 16", ...)
    origins: tuple              # user file:line per text ("" when none)
    env: Any                    # the ShapeEnv (explanations re-evaluate its guards)

    @staticmethod
    def of(env) -> "ShapeGuards":
        out = env.produce_guards()
        return ShapeGuards(env.make_check_fn(), tuple(g.text for g in out),
                           tuple(g.origin or "" for g in out), env)

    def __repr__(self) -> str:
        return "; ".join(self.texts)


@record
class Guard:
    source: Optional[Source]
    kind: GuardKind
    expected: Any
    origin: str = ""            # user file:line that introduced the guard

    def describe(self) -> str:
        where = f"  # {self.origin}" if self.origin else ""
        if self.kind is GuardKind.COMPILE_SETTINGS:
            return f"COMPILE_SETTINGS: {settings_of(self.expected)}{where}"
        if self.kind is GuardKind.SHAPE_ENV:
            return "SHAPE_ENV: " + ("; ".join(
                t + (f"  # {o}" if o else "") for t, o in zip(self.expected.texts, self.expected.origins))
                or "(no relations)")
        name = self.source.name() if self.source is not None else "<global state>"
        return f"{self.kind.value}: {name} {_short(self.expected)}{where}"


def _short(v: Any) -> str:
    if isinstance(v, ShapeGuards):
        return "[" + ", ".join(v.texts) + "]"
    if isinstance(v, TensorSpec):
        keys = "".join(f" {k}=True" for k in ("is_inference", "is_conj", "is_neg") if getattr(v, k))
        return (f"dtype={v.dtype} device={v.device} shape={list(v.shape)} "
                f"stride={list(v.stride)} requires_grad={v.requires_grad}{keys}")
    if isinstance(v, tuple) and len(v) == 2 and isinstance(v[0], int) and v[1].__class__ is str:
        return f"id=={v[1]}"
    try:
        text = repr(v)
    except Exception:   # a repr that raises (torch.classes' module __getattr__) names its type
        text = f"<{type(v).__qualname__} object>"
    return text if len(text) < 80 else text[:77] + "..."


# Global state a graph depends on: (name, getter). Getters are the cheapest spellings.
GLOBAL_STATE_CHECKS = (
    ("grad_enabled", torch._C.is_grad_enabled),
    ("default_dtype", torch.get_default_dtype),
    ("inference_mode", torch.is_inference_mode_enabled),
    ("deterministic", torch.are_deterministic_algorithms_enabled),
    # None when off; else per device (cpu, cuda): enabled and dtype, so an entry traced outside
    # a region is not reused inside one, nor one traced under bfloat16 under float16
    ("autocast", _autocast.guard_state),
    # functorch-wrapped tensors (vmap/grad) look like plain tensors of the per-example shape
    ("functorch", torch._C._are_functorch_transforms_active),
)


# Global state a graph depends on only when its trace read it (named by the translator).
OPTIONAL_STATE_CHECKS = (
    # the default autocast dtypes: a region entered without dtype= takes them at trace time
    ("autocast_dtypes", _autocast.default_dtypes),
)


def current_global_state(optional=None) -> dict:
    """Every check's value now; `optional`: the names of OPTIONAL_STATE_CHECKS to include
    (None: all of them, for explanations)."""
    out = {name: get() for name, get in GLOBAL_STATE_CHECKS}
    out.update({name: get() for name, get in OPTIONAL_STATE_CHECKS if optional is None or name in optional})
    return out


class _Emitter:
    """Builds the guard function's source: constants become closure variables c0, c1, ...;
    source expressions become locals v0, v1, ... computed once, bases before derived."""

    def __init__(self):
        self.consts: list = []
        self.lines: list[str] = []
        self.bound: dict[Source, str] = {}

    def const(self, value) -> str:
        self.consts.append(value)
        return f"c{len(self.consts) - 1}"

    def value(self, source: Source) -> str:
        if source in self.bound:
            return self.bound[source]
        base = source.base
        if base is not None:
            base_var = self.value(base)
            # render the last step around the already-bound base (a step may wrap its base:
            # dict.__getitem__(base, k)); names are marked so the base's text is unique
            mark = lambda n: f"\0{n}\0"  # noqa: E731
            expr = source.render(mark, mark, True).replace(base.render(mark, mark, True), base_var, 1)
        else:
            expr = source.guard_expr()
        var = f"v{len(self.bound)}"
        self.bound[source] = var
        self.lines.append(f"{var} = {expr}")
        return var

    def check(self, cond: str) -> None:
        self.lines.append(f"if not ({cond}): return False")


def settings_of(callback) -> str:
    """The optimize() settings a compile callback stands for, as text (its `settings`)."""
    if callback is False:
        return "run-only"
    return str(getattr(callback, "settings", callback))


def _emit_guard(em: _Emitter, g: Guard) -> None:
    k = g.kind
    if k is GuardKind.COMPILE_SETTINGS:
        # the thread's current callback: entries compiled under other optimize() settings
        # (backend, mode, options, fullgraph, dynamic) do not serve; run-only mode serves any
        em.check(f"{em.const(_C.get_eval_frame)}() in {em.const((g.expected, False))}")
        return
    if k is GuardKind.GLOBAL_STATE:
        for name, get in GLOBAL_STATE_CHECKS + OPTIONAL_STATE_CHECKS:
            if name in g.expected:
                em.check(f"{em.const(get)}() == {em.const(g.expected[name])}")
        return
    if k is GuardKind.SHAPE_ENV:
        em.check(f"{em.const(g.expected.check)}(L, G)")
        return
    v = em.value(g.source)
    if k is GuardKind.TYPE_MATCH:
        em.check(f"type({v}) is {em.const(g.expected)}")
    elif k is GuardKind.ID_MATCH:
        # the id is a closure constant, not a literal: the source text is then the same in every
        # process, so its compiled code can be reused (the warm cache stores it, `prebuilt`)
        em.check(f"id({v}) == {em.const(g.expected[0])}")
    elif k is GuardKind.EQUALS_MATCH:
        em.check(f"type({v}) is {em.const(type(g.expected))} and {v} == {em.const(g.expected)}")
        if type(g.expected) is float and g.expected == 0.0:
            # -0.0 == 0.0, yet `x * z` and `1 / z` differ in sign: the zero's sign is checked too
            em.check(f"{em.const(math.copysign)}(1.0, {v}) == {math.copysign(1.0, g.expected)}")
    elif k is GuardKind.LEN:
        em.check(f"len({v}) == {int(g.expected)}")
    elif k is GuardKind.DICT_KEYS:
        em.check(f"list({v}.keys()) == {em.const(list(g.expected))}")
    elif k is GuardKind.TENSOR_MATCH:
        s: TensorSpec = g.expected
        mod = tensor_check.module()
        if mod is not None:   # the same predicate in C++: ~35 ns against ~390 ns a tensor
            em.check(f"{em.const(mod.check)}({v}, {em.const(tensor_check.make_spec(mod, s))})")
            return
        conds = [f"type({v}) is {em.const(s.cls)}", f"{v}.dtype is {em.const(s.dtype)}"]
        if all(d is not None for d in s.shape):
            conds.append(f"{v}.shape == {em.const(s.shape)}")
        else:
            conds.append(f"{v}.dim() == {len(s.shape)}")
            conds += [f"{v}.size({i}) == {d}" for i, d in enumerate(s.shape) if d is not None]
        if all(d is not None for d in s.stride):
            conds.append(f"{v}.stride() == {em.const(s.stride)}")
        else:
            conds += [f"{v}.stride({i}) == {d}" for i, d in enumerate(s.stride) if d is not None]
        conds.append(f"{v}.requires_grad is {s.requires_grad}")
        # is_cpu reads a flag; comparing devices builds a torch.device per call
        conds.append(f"{v}.is_cpu" if s.device.type == "cpu" else f"{v}.device == {em.const(s.device)}")
        conds += s.key_checks(v)
        em.check(" and ".join(conds))
    elif k is GuardKind.ALIASING:
        other = em.value(g.expected)
        em.check(f"{v} is {other}")
    else:
        raise NotImplementedError(k)


def guard_rank(g: Guard) -> int:
    """Where `g` goes in a guard function: cheaper, more discriminating kinds first."""
    return _RANK[g.kind]


def sort_guards(guards: list[Guard]) -> list[Guard]:
    seen = set()
    out = []
    for g in sorted(guards, key=lambda g: _RANK[g.kind]):
        key = (g.source, g.kind, _hashable(g.expected))
        if key not in seen:
            seen.add(key)
            out.append(g)
    return out


def _hashable(v):
    try:
        hash(v)
        return v
    except TypeError:
        return repr(v)


def guard_text(guards: list[Guard]) -> tuple[str, list]:
    """The guard function's factory source for `guards` (already sorted) and the constants it
    takes. The text holds no per-process value (ids, objects: all constants), so equal guard
    lists of two processes give equal texts."""
    em = _Emitter()
    for g in guards:
        _emit_guard(em, g)
    body = "\n".join("        " + line for line in em.lines) or "        pass"
    names = ", ".join(f"c{i}" for i in range(len(em.consts)))
    text = (f"def ___make_guard(G, {names}):\n"
            f"    def guard(L):\n"
            f"      try:\n{body}\n"
            f"      except Exception:\n"
            f"        return False\n"
            f"      return True\n"
            f"    return guard\n")
    return text, em.consts


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


# factory source -> its compiled module code (explanations compile one guard at a time, often
# the same ones again; bounded so a long-running process does not grow without end)
_codes: dict = {}
_CODES_MAX = 4096


class _ConstsOnly(_Emitter):
    """An emission's constants without its text: no source is rendered (most of an emission's
    cost). The constants are the same list in the same order as the full emission's: which
    constants a guard takes never depends on the rendered text."""

    def value(self, source: Source) -> str:
        return "v"

    def const(self, value) -> str:
        self.consts.append(value)
        return "c"

    def check(self, cond: str) -> None:
        pass


def emission_shape(guards: list[Guard], n_consts: int) -> str:
    """What, besides the guards' own records, decides the text of their factory: their kinds in
    order, whether tensors are checked by the C++ predicate, and the number of constants."""
    # (`_value_`: the member's value, without the Enum property's lookup: 137 guards on a hit)
    return repr((tuple([g.kind._value_ for g in guards]), tensor_check.module() is not None,
                 n_consts))


def compile_guards(guards: list[Guard], frame_globals: dict, prebuilt: Optional[tuple] = None):
    """One check function for all guards. Attributes: `.guards` (sorted list), `.source_text`
    (None where the code came from `prebuilt` unrendered), `.module_code` (the factory source's
    compiled code: marshal it to reuse it elsewhere), `.shape` (emission_shape).

    `prebuilt`: (text key, code, shape) of a factory compiled earlier from guards bound from the
    same records (a warm-cache entry, sealed and verified there). Its code is used with these
    guards' constants without rendering their text when the shape is theirs: the records fix
    every source, literal and value, the shape what this process could emit otherwise (the C++
    tensor predicate missing here, a guard list deduplicated otherwise). Else the text is
    rendered and the code used only if it was compiled from exactly that text.

    With `prebuilt`, guards already in rank order are taken as they are, without sorting and
    removing duplicates (which hashes every source: most of a warm hit's guard binding): a
    warm entry's records are the guards of a compiled frame, which this function sorted and
    deduplicated, bound in that order. Where the binding process removed none, the shape is
    the prebuilt one and the order is what sorting gives; otherwise the shape differs and the
    guards are sorted as below (a duplicate left in would only be checked twice)."""
    if prebuilt is not None:
        ranks = [_RANK[g.kind] for g in guards]
        ordered = guards if ranks == sorted(ranks) else sort_guards(guards)
        em = _ConstsOnly()
        for g in ordered:
            _emit_guard(em, g)
        shape = emission_shape(ordered, len(em.consts))
        if shape == prebuilt[2]:
            return _make(prebuilt[1], frame_globals, em.consts, list(ordered), None, shape)
    guards = sort_guards(guards)
    text, consts = guard_text(guards)
    code = _codes.get(text)
    if code is None:
        if prebuilt is not None and prebuilt[0] == text_key(text):
            code = prebuilt[1]
        else:
            code = compile(text, "<pydynamo guard>", "exec")
        if len(_codes) >= _CODES_MAX:
            _codes.clear()
        _codes[text] = code
    return _make(code, frame_globals, consts, guards, text)


def _make(code, frame_globals: dict, consts: list, guards: list, text: Optional[str],
          shape: Optional[str] = None):
    scope: dict = {}
    exec(code, scope)
    fn = scope["___make_guard"](frame_globals, *consts)
    fn.guards = guards
    fn.source_text = text
    fn.module_code = code
    fn.shape = emission_shape(guards, len(consts)) if shape is None else shape
    return fn


def failures(guards: list[Guard], frame_locals: dict, frame_globals: dict) -> list[str]:
    """Each failing guard, described with the value it now sees (for recompile explanations)."""
    out = []
    for g in guards:
        if compile_guards([g], frame_globals)(frame_locals):
            continue
        try:
            if g.kind is GuardKind.COMPILE_SETTINGS:
                now = settings_of(_C.get_eval_frame())
            elif g.source is None:
                now = current_global_state()
            else:
                now = eval(g.source.guard_expr(), {"L": frame_locals, "G": frame_globals})
                if g.kind is GuardKind.TENSOR_MATCH and isinstance(now, torch.Tensor):
                    now = TensorSpec.of(now)
                elif g.kind is GuardKind.TYPE_MATCH:
                    now = type(now)
        except Exception as e:  # the value is gone altogether
            now = f"<{type(e).__name__}>"
        out.append(f"{g.describe()}; now {_short(now)}")
    return out

"""Recompile explanations: why none of a code object's compiled entries accepted a call.

On a cache miss for a code that already has entries, `explain_recompile` re-checks every guard of
every entry one at a time and records each failing one as a `GuardFailure` (an entry compiled
by another optimize() call with other settings fails "compile settings": backend, mode, options,
fullgraph, dynamic, expected vs now): the value it names in
the user's terms (L['x'].dtype, L['n']), what the entry expected, what the call brought, and the
user line whose code made the translator look at that value. A TENSOR_MATCH failure is narrowed to
the fields that differ (dtype, shape, ...). The records feed the `recompiles` log channel and
`explain()`; building one re-runs guards, so it only happens when someone is listening.
"""
from __future__ import annotations

import dataclasses
import types
from typing import Any

from pydynamo import _C, shapes
from pydynamo.bytecode import user_code_name
from pydynamo.guards import Guard, GuardKind, TensorSpec, compile_guards, current_global_state, settings_of

_SPEC_FIELDS = ("cls", "dtype", "device", "shape", "stride", "requires_grad", "is_conj", "is_neg",
                "is_inference")


@dataclasses.dataclass(frozen=True)
class GuardFailure:
    what: str          # the checked value in user terms: L['x'].dtype, L['n'], grad_enabled
    kind: str          # guard kind (TENSOR_MATCH, EQUALS_MATCH, ...)
    expected: Any
    actual: Any
    origin: str        # user file:line that created the guard

    def __str__(self) -> str:
        return f"{self.what}: expected {_text(self.expected)}, got {_text(self.actual)} " \
               f"({self.kind}, guard from {self.origin})"


@dataclasses.dataclass
class RecompileExplanation:
    function: str      # user function name
    location: str      # file:line of its definition
    entries: list      # per existing entry: list of GuardFailure (most recently used entry first)

    def __str__(self) -> str:
        lines = [f"recompiling {self.function} ({self.location}): "
                 f"{len(self.entries)} compiled entr{'y' if len(self.entries) == 1 else 'ies'} rejected the call"]
        for i, fails in enumerate(self.entries):
            lines.append(f"  entry {i + 1}:")
            lines += [f"    {f}" for f in fails] or ["    (no single guard fails: rejected as a whole)"]
        return "\n".join(lines)


def _text(v: Any) -> str:
    if isinstance(v, (list, tuple)) and not isinstance(v, str):
        return "[" + ", ".join(map(str, v)) + "]" if isinstance(v, list) else str(v)
    return str(v) if not isinstance(v, str) else repr(v)


def _now(g: Guard, frame_locals: dict, frame_globals: dict):
    if g.source is None:
        return current_global_state()
    return eval(g.source.guard_expr(), {"L": frame_locals, "G": frame_globals})


def guard_failures(guards: list, frame_locals: dict, frame_globals: dict) -> list[GuardFailure]:
    out = []
    for g in guards:
        if compile_guards([g], frame_globals)(frame_locals):
            continue
        if g.kind is GuardKind.SHAPE_ENV:
            out += shape_failures(g.expected.env, frame_locals, frame_globals)
            continue
        if g.kind is GuardKind.COMPILE_SETTINGS:  # compiled by another optimize() call
            out.append(GuardFailure("compile settings", g.kind.value, _Raw(settings_of(g.expected)),
                                    _Raw(settings_of(_C.get_eval_frame())), g.origin))
            continue
        name = g.source.name() if g.source is not None else ""
        try:
            now = _now(g, frame_locals, frame_globals)
        except Exception as e:  # the value is gone altogether (a missing attribute, key, ...)
            out.append(GuardFailure(name, g.kind.value, _plain(g.expected), f"<{type(e).__name__}>", g.origin))
            continue
        out += _narrow(g, name, now)
    return out


def shape_failures(env, frame_locals: dict, frame_globals: dict) -> list[GuardFailure]:
    """Each shape relation that fails for this call: its text, the sizes it reads now, and the
    user line whose code made the decision."""
    code_names = env.source_names(code=True)
    scope = {"L": frame_locals, "G": frame_globals}
    out = []
    for g in env.produce_guards():
        syms = g.expr.free_symbols if g.expr is not None else getattr(g.target, "free_symbols", set())
        sources = ([g.source] if g.expr is None else []) + [env.var_to_source[s] for s in
                                                             sorted(syms, key=shapes._sym_index)]
        try:
            ok = eval(shapes._guard_code(g, code_names), {"min": min, "max": max}, scope)
            now = ", ".join(f"{src.name()} = {eval(shapes._source_code(src), {}, scope)}" for src in sources)
        except Exception as e:  # another rank, a missing input: the relation cannot even be read
            ok, now = False, f"<{type(e).__name__}>"
        if not ok:
            out.append(GuardFailure(g.text, GuardKind.SHAPE_ENV.value, True, _Raw(f"False ({now})"),
                                    g.origin or "?"))
    return out


class _Raw:
    """Text shown as is (not repr'd) in an explanation."""

    def __init__(self, text: str):
        self.text = text

    def __str__(self) -> str:
        return self.text

    __repr__ = __str__

    def __eq__(self, other) -> bool:
        return str(other) == self.text

    def __hash__(self) -> int:
        return hash(self.text)


def _plain(expected):
    if isinstance(expected, tuple) and len(expected) == 2 and isinstance(expected[0], int) \
            and isinstance(expected[1], str):
        return expected[1]  # ID_MATCH: (id, description)
    return expected


def _narrow(g: Guard, name: str, now) -> list[GuardFailure]:
    """One failure per differing field for structured guards; the whole value otherwise."""
    if g.kind is GuardKind.TENSOR_MATCH and isinstance(g.expected, TensorSpec):
        import torch
        if not isinstance(now, torch.Tensor):
            return [GuardFailure(name, g.kind.value, "a tensor", type(now).__name__, g.origin)]
        spec = TensorSpec.of(now)
        out = []
        for field in _SPEC_FIELDS:
            want, got = getattr(g.expected, field), getattr(spec, field)
            if field in ("shape", "stride"):
                if all(w is None or w == h for w, h in zip(want, got)) and len(want) == len(got):
                    continue
                want, got = list(want), list(got)
            elif want == got:
                continue
            label = "type" if field == "cls" else field
            out.append(GuardFailure(f"{name}.{label}", g.kind.value, want, got, g.origin))
        return out or [GuardFailure(name, g.kind.value, "matching tensor", "a tensor it rejects", g.origin)]
    if g.kind is GuardKind.GLOBAL_STATE:
        return [GuardFailure(k, g.kind.value, v, now.get(k), g.origin)
                for k, v in g.expected.items() if now.get(k) != v]
    if g.kind is GuardKind.TYPE_MATCH:
        return [GuardFailure(f"type({name})", g.kind.value, g.expected.__name__, type(now).__name__, g.origin)]
    if g.kind is GuardKind.LEN:
        return [GuardFailure(f"len({name})", g.kind.value, g.expected, _len(now), g.origin)]
    if g.kind is GuardKind.ID_MATCH:
        return [GuardFailure(name, g.kind.value, f"the same object ({_plain(g.expected)})",
                             f"another object ({type(now).__name__})", g.origin)]
    return [GuardFailure(name, g.kind.value, _plain(g.expected), now, g.origin)]


def _len(v):
    try:
        return len(v)
    except TypeError:
        return f"<no len: {type(v).__name__}>"


def explain_recompile(code: types.CodeType, entries: list, frame_locals: dict,
                      frame_globals: dict) -> RecompileExplanation:
    """`entries`: the hook's [(guard, code), ...]; guards carry their Guard list as `.guards`."""
    per_entry = [guard_failures(getattr(guard, "guards", []), frame_locals, frame_globals)
                 for guard, _ in entries]
    return RecompileExplanation(user_code_name(code), f"{code.co_filename}:{code.co_firstlineno}",
                                per_entry)

"""Recompile explanations: why none of a code object's compiled entries accepted a call.

On a cache miss for a code that already has entries, `explain_recompile` re-checks every guard of
every entry one at a time and records each failing one as a `GuardFailure` (an entry compiled
by another optimize() call with other settings fails "compile settings": backend, mode, options,
fullgraph, dynamic, expected vs now): the value it names in
the user's terms (L['x'].dtype, L['n']), what the entry expected, what the call brought, and the
user line whose code made the translator look at that value. A TENSOR_MATCH failure is narrowed to
the fields that differ (dtype, shape, ...). The records feed the `recompiles` log channel and
`explain()`; building one re-runs guards, so it only happens when someone is listening.
`user_names(code, text)` spells the stack arguments of resume/break code (`L['___stack0']`) as
the user's expression that produced them (`(x * 2)`), from the original code's bytecode and
source positions; guards in logs and explain() and these failures use it.
"""
from __future__ import annotations

import ast
import dataclasses
import functools
import linecache
import re
import types
import weakref
from typing import Any

from pydynamo import _C, shapes
from pydynamo.bytecode import analysis, disassemble, origin_of, user_code_name
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
        return f"{self.what}: expected {value_text(self.expected)}, got {value_text(self.actual)} " \
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


_STACK_NAME = re.compile(r"L\['___stack(\d+)'\]")


def user_names(code: types.CodeType, text: str) -> str:
    """`text` (a guard, a failure) with the stack arguments of resume/break code (`L['___stack0']`)
    spelled as the user's expression that produced the value, where one is known."""
    if "___stack" not in text:
        return text
    exprs = stack_expressions(code)
    return _STACK_NAME.sub(lambda m: exprs.get(int(m.group(1)), m.group(0)), text)


_exprs_cache: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def stack_expressions(code: types.CodeType) -> dict:
    """{stack slot: the source text of the expression that pushed it} for resume/break code
    (empty for other code): the slot's producer is the last instruction before the resume
    point in the original code that pushed it and whose result nothing popped since; its
    source positions give the text (an expression across lines reads as one line)."""
    found = _exprs_cache.get(code)
    if found is not None:
        return found
    origin = origin_of(code)
    if origin is None:
        return {}
    try:
        found = _producers(code, *origin)
    except Exception:   # names only: a layout the scan does not follow keeps L['___stackN']
        return {}
    _exprs_cache.pop(code, None)   # an equal, dying key would drop the entry (see resume.py)
    _exprs_cache[code] = found
    return found


def _producers(code: types.CodeType, orig: types.CodeType, mapping: dict) -> dict:
    here = disassemble(code)
    jump = next((i for i in here if i.offset not in mapping and i.is_jump), None)
    if jump is None or jump.target is None or jump.target.offset not in mapping:
        return {}
    target = mapping[jump.target.offset]
    insts = disassemble(orig)
    depths = analysis.stack_depths(insts)
    k = next(n for n, i in enumerate(insts) if i.offset == target)
    out = {}
    for slot in range(depths[k] or 0):
        for j in range(k - 1, -1, -1):   # the closest instruction before k that wrote the slot
            if depths[j] is None or depths[j + 1] is None or insts[j].is_jump:
                break
            if _writes(insts[j], depths[j], depths[j + 1], slot):
                text = _source_of(orig, insts[j].positions) if _within(depths, j, k, slot) else ""
                if text:
                    out[slot] = text
                break
    return out


# instructions that only pop (or touch nothing): the new top of stack is not theirs
_NO_PUSH = ("POP_", "STORE_", "DELETE_", "JUMP", "NOP", "RESUME", "CACHE", "PRECALL", "KW_NAMES",
            "PUSH_NULL", "RETURN", "COPY_FREE_VARS", "MAKE_CELL", "EXTENDED_ARG")


def _writes(inst, before: int, after: int, slot: int) -> bool:
    if after <= slot:
        return False
    return slot >= before or (slot == after - 1 and not inst.opname.startswith(_NO_PUSH))


def _within(depths: list, j: int, k: int, slot: int) -> bool:
    """The value pushed into `slot` at instruction j is still there at k (never popped)."""
    return all(d is not None and d > slot for d in depths[j + 1:k + 1])


def _source_of(code: types.CodeType, pos) -> str:
    """The source text an instruction's positions (dis.Positions: lines and UTF-8 byte columns)
    cover, on one line: an expression across lines (a call whose arguments span lines, a
    parenthesised expression) is spelled as the parser reads it (ast.unparse: no comments, one
    line), a one-line one as written. CPython places a method call or attribute written on a
    later line than its object at the attribute (`x.sin()` / `.cos()` is located at `cos()`):
    such a location is widened to the whole expression the parser sees there."""
    if pos is None or pos.lineno is None or pos.end_lineno is None or pos.col_offset is None \
            or pos.end_col_offset is None:
        return ""
    lines = linecache.getlines(code.co_filename)
    if len(lines) < pos.end_lineno:
        return ""
    start, end = (pos.lineno, pos.col_offset), (pos.end_lineno, pos.end_col_offset)
    text = _segment(lines, start, end)
    whole = _attribute_at(code.co_filename, lines, start, end, text)
    if whole is not None:
        text = _segment(lines, (whole.lineno, whole.col_offset), end)
    try:
        tree = ast.parse(f"(\n{text}\n)", mode="eval").body
    except SyntaxError:   # not a whole expression
        tree = None
    if "\n" in text:
        if tree is None:
            return ""     # no name rather than a garbled one
        text = ast.unparse(tree)
    if not text:
        return ""
    # (x * 2).dtype, not x * 2.dtype; a call, attribute or item reads as is: f(a, b).dtype
    return text if isinstance(tree, _PRIMARY) or tree is None and " " not in text else f"({text})"


def _segment(lines: list, start: tuple, end: tuple) -> str:
    """The source between two (line, UTF-8 byte column) positions, stripped."""
    part = [lines[n - 1].encode() for n in range(start[0], end[0] + 1)]
    part[-1] = part[-1][:end[1]]
    part[0] = part[0][start[1]:]
    return b"".join(part).decode(errors="replace").strip()


def _attribute_at(filename: str, lines: list, start: tuple, end: tuple, text: str):
    """The attribute or method-call node that ends at `end` and whose attribute name starts
    at `start` (CPython's location of such an expression split over lines), if any."""
    tree = _parsed(filename, "".join(lines))
    if tree is None:
        return None
    for node in ast.walk(tree):
        if (getattr(node, "end_lineno", None), getattr(node, "end_col_offset", None)) != end or \
                (node.lineno, node.col_offset) >= start:
            continue
        attr = node.func if isinstance(node, ast.Call) else node
        if isinstance(attr, ast.Attribute) and text.startswith(attr.attr):
            return node
    return None


@functools.lru_cache(maxsize=16)
def _parsed(filename: str, source: str):
    try:
        return ast.parse(source, filename)
    except (SyntaxError, ValueError):
        return None


_PRIMARY = (ast.Name, ast.Attribute, ast.Call, ast.Subscript, ast.Constant)


def value_text(v: Any) -> str:
    """A guarded value as messages show it (strings quoted, lists bracketed)."""
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
            if g.expected.env is None:   # loaded by the warm cache: its relations as one text
                out.append(GuardFailure("; ".join(g.expected.texts), g.kind.value, True,
                                        _Raw("False"), g.origin))
                continue
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
    per_entry = [[dataclasses.replace(f, what=user_names(code, f.what))
                  for f in guard_failures(getattr(guard, "guards", []), frame_locals, frame_globals)]
                 for guard, _ in entries]
    return RecompileExplanation(user_code_name(code), f"{code.co_filename}:{code.co_firstlineno}",
                                per_entry)

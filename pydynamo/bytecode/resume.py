"""Resume (continuation) functions: continue a frame of `code` at an instruction.

`make_resume_function(code, offset, ...)` returns a `ResumeFunction` whose code object
``__resume_at_<offset>_<n>`` takes the live state at `offset` as arguments and runs the original
instructions from there with the original semantics:

* arguments (`params`): the stack slots that are not NULL, bottom first (named
  ``___stack<i>``), then the live plain locals (in co_varnames order).  NULL slots are
  re-pushed by the prologue.  Exception: code that may call zero-argument ``super()`` (it has a
  ``__class__`` free variable) takes its first argument (``self``) first, because super() reads
  the frame's first slot.  `ResumeFunction.arguments(stack, locals)` orders values for a call.
* cells: every cell and free variable of `code` becomes a *free* variable of the resume code
  (``closure`` order), so the caller passes the frame's cell objects themselves and writes
  through closures stay shared.  `emit_call` builds the function with MAKE_FUNCTION from
  LOAD_CLOSURE, so the caller needs no globals entry.
* with-blocks: a with-statement keeps its bound ``__exit__`` on the stack.  With
  ``reenter_with=False`` the caller passes that callable as an ordinary stack value (the context
  is still entered: e.g. the caller is the original frame cut in two).  With ``reenter_with=True``
  (the executor's case: the context manager was exited, or never really entered, before the
  call) the caller passes the *context manager object* in that slot and the prologue re-enters
  it (``BEFORE_WITH; POP_TOP``), so e.g. `torch.no_grad()` is active again in the resumed code;
  an exception while re-entering an inner block runs the exits of the outer ones (only the
  with-handlers: a try-block between two re-entered with-blocks does not see that exception).
  Re-entry suits re-entrant context managers (grad-mode and similar); a generator-based
  @contextmanager cannot be entered twice, and a user's __enter__ must run once: pass
  ``reenter_with`` as the set of slots to re-enter, the others receive the bound ``__exit__``
  (the context stays entered, its one __exit__ runs in the resumed code).
* try/except/finally and with regions: the copied instructions keep their exception-table
  entries and the stack is rebuilt to the same depth, so handlers active at `offset` still are.
* locals that may be unbound: pass `UNBOUND`; the prologue deletes them again.

Resume code for the same (code, offset, stack layout, locals) is built once and cached, so the
frame cache keys on it stay stable; `clear_cache()` drops the cache (call it from reset).
Generators and coroutines are refused (ValueError): the frame hook never transforms them.
"""
from __future__ import annotations

import itertools
import weakref
from dataclasses import dataclass
from types import CodeType, FunctionType
from typing import Iterable, Sequence

from pydynamo.bytecode import analysis, emit, opcodes
# (where resume code came from: a leaf of its own, so a warm start's hit path, which marks the
# resume code it loads, does not import this package; re-exported here for its users)
from pydynamo.code_origins import _origins, origin_of, set_origin, user_code_name, user_frame_name  # noqa: F401
from pydynamo.bytecode.analysis import MAYBE_NULL, NULL, WITH_EXIT
from pydynamo.bytecode.assemble import CodeLayout, make_code
from pydynamo.bytecode.instruction import (
    ExnTabEntry, Instruction, clone_instructions, disassemble,
)

# CO_GENERATOR, CO_COROUTINE, CO_ITERABLE_COROUTINE, CO_ASYNC_GENERATOR
_GENERATOR_FLAGS = 0x20 | 0x80 | 0x100 | 0x200


class _Unbound:
    __slots__ = ()

    def __repr__(self) -> str:
        return "pydynamo.bytecode.resume.UNBOUND"

    def __reduce__(self):
        return "UNBOUND"


UNBOUND = _Unbound()


@dataclass(frozen=True)
class ResumeFunction:
    code: CodeType
    name: str
    offset: int
    nstack: int
    stack_args: tuple[int, ...]      # stack slots passed as arguments, bottom first
    null_slots: tuple[int, ...]      # stack slots that hold NULL (not passed)
    reenter_slots: tuple[int, ...]   # slots where the caller passes a context manager to re-enter
    local_args: tuple[str, ...]      # live plain locals passed after the stack values
    closure: tuple[str, ...]         # cells of the original frame, in co_freevars order
    params: tuple[str, ...]          # call order: "___stack<i>" or a local's name

    def arguments(self, stack: Sequence, local_values: dict) -> list:
        """Positional arguments in `params` order from the stack values (all `nstack` slots,
        NULL slots as None) and a name -> value mapping of the live locals."""
        out = []
        for p in self.params:
            out.append(stack[int(p[len(_STACK):])] if p.startswith(_STACK) else local_values[p])
        return out

    def make_function(self, globals_: dict, cells: Sequence = ()) -> FunctionType:
        """A function object for direct calls (tests, tools); `cells` in `closure` order."""
        return FunctionType(self.code, globals_, self.name, None, tuple(cells) or None)

    def emit_call(self, unbound: Iterable[str] = (), maybe_unbound: Iterable[str] = (),
                  exit_contexts: bool = False) -> list[Instruction]:
        """Tail for a frame of the original code's layout whose stack holds exactly this
        layout (NULLs at `null_slots`, context managers at `reenter_slots`): pops the stack
        into temporaries, calls the resume function with them and the live locals, returns
        its result.  Locals named in `unbound` are passed as UNBOUND; those in
        `maybe_unbound` are checked at run time (``locals().get(name, UNBOUND)``).

        With `exit_contexts`, the reenter slots instead hold the bound ``__exit__`` of
        entered contexts: each is exited (innermost first, as ``__exit__(None, None, None)``)
        and its context manager (``__exit__.__self__``) is passed for re-entry.

        Temporaries are new locals named ``___resume_tmp<i>`` (make_code_like adds them)."""
        out: list[Instruction] = []
        for i in reversed(range(self.nstack)):
            out += emit.pop_null() if i in self.null_slots else emit.store_fast(_tmp(i))
            if exit_contexts and i in self.reenter_slots:
                out += emit.call_function(emit.load_const(_exit_context), [emit.load_fast(_tmp(i))])
                out += emit.store_fast(_tmp(i))
        out += emit.callable_(emit.make_function(self.code, self.closure))
        unbound, maybe = set(unbound), set(maybe_unbound)
        for name in self.params:
            if name.startswith(_STACK):
                out += emit.load_fast(_tmp(int(name[len(_STACK):])))
            elif name in unbound:
                out += emit.load_const(UNBOUND)
            elif name in maybe:
                out += emit.call_method(emit.callable_(emit.load_const(locals)) + emit.call(0),
                                        "get", [emit.load_const(name), emit.load_const(UNBOUND)])
            else:
                out += emit.load_fast(name)
        return out + emit.call(len(self.params)) + emit.return_value()


def _exit_context(exit_fn):
    exit_fn(None, None, None)
    return exit_fn.__self__


_STACK = "___stack"


def _tmp(i: int) -> str:
    return f"___resume_tmp{i}"


_cache: dict[int, tuple[weakref.ref, dict]] = {}
_counter = itertools.count()


def clear_cache() -> None:
    _cache.clear()


def _cached(code: CodeType) -> dict:
    entry = _cache.get(id(code))
    if entry is None or entry[0]() is not code:
        key = id(code)
        entry = (weakref.ref(code, lambda _r: _cache.pop(key, None)), {})
        _cache[key] = entry
    return entry[1]


def make_resume_function(code: CodeType, offset: int, *, nstack: int | None = None,
                         null_slots: Iterable[int] | None = None,
                         reenter_with: bool | Iterable[int] = True,
                         live_locals: Iterable[str] | None = None) -> ResumeFunction:
    """Continuation of `code` at the instruction starting at byte `offset` (as numbered by
    `disassemble(code)`).

    `nstack`: the stack depth there (checked against the analysis).  `null_slots`: which slots
    hold NULL; required only where the analysis cannot tell (a slot after a method load).
    `reenter_with`: True (every with-block's slot), False (none) or the slots to re-enter.
    `live_locals`: locals to pass (default: the liveness analysis; a given list must include
    every live one).  See the module docstring for the calling convention."""
    if code.co_flags & _GENERATOR_FLAGS or not code.co_flags & 0x01:  # 0x01: CO_OPTIMIZED
        raise ValueError(f"can only resume plain function code, not {code.co_qualname}")
    cache = _cached(code)
    if "analysis" not in cache:  # once per code object: the executor asks many times
        insts = disassemble(code)
        cache["analysis"] = (insts, analysis.stack_slots(insts), analysis.live_locals(insts),
                             analysis.maybe_unbound(insts, CodeLayout.of(code).argnames))
    insts, all_slots, all_live, all_unbound = cache["analysis"]
    k = next((n for n, i in enumerate(insts) if i.offset == offset), None)
    if k is None:
        raise ValueError(f"no instruction starts at offset {offset} in {code.co_qualname}")
    if k > 0 and insts[k - 1].opname in ("PRECALL", "KW_NAMES"):
        # inside a call sequence: 3.11 charges PRECALL with the arguments (the analysed depth
        # is not the real one) and KW_NAMES sets a register that a new frame would not have
        raise ValueError(f"cannot resume inside a call sequence (offset {offset})")
    if insts[k].opname == "END_FOR":  # 3.12: FOR_ITER jumps over it; never executed there
        raise ValueError(f"cannot resume at END_FOR (offset {offset}); resume after it")
    slots = all_slots[k]
    if slots is None:
        raise ValueError(f"offset {offset} of {code.co_qualname} is unreachable")
    if nstack is not None and nstack != len(slots):
        raise ValueError(f"stack depth at offset {offset} is {len(slots)}, caller says {nstack}")
    nulls = _null_slots(slots, null_slots, offset)
    reenter = _reenter_slots(slots, reenter_with)
    cells = resume_cells(code)
    live = all_live[k]
    if live_locals is None:
        names = live
    else:
        names = frozenset(live_locals)
        if not live <= names:
            raise ValueError(f"live locals missing at offset {offset}: {sorted(live - names)}")
    if _needs_self_first(code) and code.co_varnames[0] not in all_unbound[k]:
        names = names | {code.co_varnames[0]}
    local_args = tuple(n for n in dict.fromkeys(code.co_varnames) if n in names
                       and n not in cells)
    key = (offset, len(slots), nulls, reenter, local_args)
    if key not in cache:
        cache[key] = _build(code, insts, k, slots, nulls, reenter, local_args, cells,
                            all_unbound[k])
    return cache[key]


def _reenter_slots(slots: Sequence[str], which: bool | Iterable[int]) -> tuple[int, ...]:
    exits = [i for i, s in enumerate(slots) if s == WITH_EXIT]
    if isinstance(which, bool):
        return tuple(exits) if which else ()
    return tuple(i for i in exits if i in set(which))


def _null_slots(slots: Sequence[str], given: Iterable[int] | None, offset: int) -> tuple:
    known = {i for i, s in enumerate(slots) if s == NULL}
    if given is None:
        unsure = [i for i, s in enumerate(slots) if s == MAYBE_NULL]
        if unsure:
            raise ValueError(f"stack slots {unsure} at offset {offset} may hold NULL: "
                             "pass null_slots")
        return tuple(sorted(known))
    given = set(given)
    wrong = [i for i in given if i >= len(slots) or slots[i] not in (NULL, MAYBE_NULL)]
    if not known <= given or wrong:
        raise ValueError(f"null_slots {sorted(given)} disagree with the stack {list(slots)}")
    return tuple(sorted(given))


def _build(code: CodeType, insts: list[Instruction], k: int, slots: Sequence[str],
           nulls: tuple, reenter: tuple, local_args: tuple, cells: tuple,
           maybe_unbound: frozenset[str], splice=None, prefix: str = "__resume_at") -> ResumeFunction:
    body = clone_instructions(insts)
    target = body[k]
    if splice is not None:  # make_break_function: edit the copied body (tails after the break)
        body = splice(body)
    name = f"{prefix}_{insts[k].offset}_{next(_counter)}"
    stack_args = tuple(i for i in range(len(slots)) if i not in nulls)
    argnames = tuple(f"{_STACK}{i}" for i in stack_args) + local_args
    if _needs_self_first(code) and local_args and local_args[0] == code.co_varnames[0]:
        # zero-argument super() reads the first local slot of the frame
        argnames = (local_args[0],) + argnames[:len(stack_args)] + local_args[1:]

    pro: list[Instruction] = []
    if cells:
        pro.append(Instruction("COPY_FREE_VARS", len(cells)))
    pro.append(Instruction("RESUME", 0))
    for local in local_args:
        if local in maybe_unbound:
            pro += _delete_if_unbound(local)
    exits = _with_handlers(body, slots)
    for i in range(len(slots)):
        entry = _innermost_exit(exits, i)
        if i in nulls:
            seq = emit.push_null()
        elif i in reenter:
            seq = emit.load_fast(f"{_STACK}{i}") + [Instruction("BEFORE_WITH")] + emit.pop_top()
        else:
            seq = emit.load_fast(f"{_STACK}{i}")
        for inst in seq:
            inst.exn_tab_entry = entry
        pro += seq
    if prefix == "__break_at" and target.opname in _BOOL_JUMPS:
        # 3.13's conditional jumps take exact bools; the executor hands over the value its
        # TO_BOOL / COMPARE_OP(bool) left unconverted (the truth is decided at the jump, as on
        # 3.11/3.12), so the break code converts it here, raising where the original would
        to_bool = Instruction("TO_BOOL")
        to_bool.exn_tab_entry = target.exn_tab_entry
        pro.append(to_bool)
    pro += emit.jump(target)
    for inst in pro:
        inst.positions = target.positions
    # the original prologue (MAKE_CELL / COPY_FREE_VARS) would act on the new layout
    body = [i for i in body if i.opname not in ("MAKE_CELL", "COPY_FREE_VARS")]
    layout = CodeLayout(argnames, freevars=cells,
                        other_locals=tuple(n for n in code.co_varnames
                                           if n not in argnames and n not in cells))
    origins = [i.offset for i in body]
    # tracebacks and profilers show what the frame is: `forward (resumed at model.py:60)`
    shown = _shown_name(code, insts[k], "resumed at" if prefix == "__resume_at" else "graph break at")
    new = make_code(code, pro + body, layout, name=shown[0], qualname=shown[1],
                    flags=code.co_flags & ~0x04 & ~0x08)  # no *args/**kwargs
    _remember_origin(new, code, body, origins)
    return ResumeFunction(new, name, insts[k].offset, len(slots), stack_args, nulls, reenter,
                          local_args, cells, argnames)


def _shown_name(code: CodeType, inst: Instruction, what: str) -> tuple[str, str]:
    """(co_name, co_qualname) of generated code: the user's function and where it continues."""
    origin = origin_of(code)
    user = code if origin is None else origin[0]
    line = getattr(inst.positions, "lineno", None) if inst.positions is not None else None
    where = f"{user.co_filename.rsplit('/', 1)[-1]}:{line}" if line else f"offset {inst.offset}"
    return f"{user.co_name} ({what} {where})", f"{user.co_qualname} ({what} {where})"


def resume_cells(code: CodeType) -> tuple[str, ...]:
    """The original frame's cells as a resume function's free variables: sorted by name, the
    order CPython's compiler gives free variables, so the output code generated as source for
    a resume function reproduces its layout (executor/reconstruct.build_code checks it)."""
    return tuple(sorted(code.co_cellvars + code.co_freevars))


def _needs_self_first(code: CodeType) -> bool:
    """Zero-argument super() finds its object in the frame's first local slot."""
    nargs = code.co_argcount + code.co_kwonlyargcount + bool(code.co_flags & 0x04)
    return "__class__" in code.co_freevars and nargs > 0 \
        and code.co_varnames[0] not in code.co_cellvars


def make_break_function(code: CodeType, start: int, end: int, *, nstack: int,
                        null_slots: Iterable[int],
                        reenter_with: bool | Iterable[int] = True) -> ResumeFunction:
    """Code that runs the instructions `start`..`end` (byte offsets; `end` included) of `code`
    in CPython and then tail-calls the resume function at each successor of `end` (the next
    instruction, and the jump target of a conditional jump).  The calling convention is that of
    ``make_resume_function(code, start, ...)`` with the same ``reenter_with``; re-entered
    contexts still active after `end` are exited and re-entered by the called resume function,
    the others (bound ``__exit__`` passed through) stay entered.  Exception
    handlers covering `start`..`end` stay in place (an exception raised there is handled as in
    the original code).  The executor runs this at a graph break, with its code marked skip,
    so only the resume functions are traced again.  Built once per key, like resume code."""
    insts = disassemble(code)
    index = {i.offset: n for n, i in enumerate(insts)}
    if start not in index or end not in index or index[end] < index[start]:
        raise ValueError(f"bad break range {start}..{end} in {code.co_qualname}")
    kend = index[end]
    last = insts[kend]
    if last.opname in _RAISES:
        succ = []  # the exception goes to the handlers copied with the body, or out
    elif last.opname in _NO_BREAK or (last.is_jump and "IF" not in last.opname) \
            or kend + 1 >= len(insts):
        raise ValueError(f"cannot break on {last.opname}")
    else:
        succ = [insts[kend + 1].offset] + ([last.target.offset] if last.is_jump else [])
    nulls_before = set(null_slots)
    all_slots = analysis.stack_slots(insts)
    slots = all_slots[index[start]]
    if slots is None or len(slots) != nstack:
        raise ValueError(f"stack depth at offset {start} is not {nstack}")
    reenter = _reenter_slots(slots, reenter_with)
    # a method load that ends the range pushes NULL or not depending on the object at run time;
    # it runs as a plain attribute load beside a NULL instead, so the successor knows its stack
    method_null = _method_null_slot(last, len(all_slots[kend]))
    nulls_after = nulls_before | ({method_null} if method_null is not None else set())
    resumes = [_successor_resume(code, off, nulls_after, reenter) for off in succ]
    cache = _cached(code)
    key = ("break", start, end, nstack, tuple(sorted(nulls_before)), reenter)
    if key in cache:
        return cache[key]
    nulls = _null_slots(slots, nulls_before, start)
    cells = resume_cells(code)
    live = set(analysis.live_locals(insts)[index[start]])
    for r in resumes:
        live |= set(r.local_args)
    local_args = tuple(n for n in dict.fromkeys(code.co_varnames) if n in live and n not in cells)
    may = analysis.maybe_unbound(insts, CodeLayout.of(code).argnames)

    def splice(body: list[Instruction]) -> list[Instruction]:
        tails = []
        for off, r in zip(succ, resumes):
            unsure = set(r.local_args) & (may[index[off]] | may[index[start]])
            tail = r.emit_call(maybe_unbound=unsure, exit_contexts=True)
            for inst in tail:
                inst.positions = body[kend].positions
            tails.append(tail)
        if body[kend].is_jump:  # the taken branch resumes at the target
            body[kend].target = tails[1][0]
        head = body[:kend + 1]
        if method_null is not None:
            head = body[:kend] + _as_attr_load(body[kend])
        return head + [i for t in tails for i in t] + body[kend + 1:]

    cache[key] = _build(code, insts, index[start], slots, nulls, reenter, local_args, cells,
                        may[index[start]], splice=splice, prefix="__break_at")
    return cache[key]


def _is_method_load(inst: Instruction) -> bool:
    return inst.opname == "LOAD_METHOD" or (inst.opname == "LOAD_ATTR" and not opcodes.PY311
                                            and bool((inst.arg or 0) & 1))


def _method_null_slot(inst: Instruction, depth: int) -> int | None:
    """The stack slot that `_as_attr_load(inst)` fills with NULL (`depth`: the stack depth
    before `inst`), or None when `inst` is no method load."""
    if not _is_method_load(inst):
        return None
    return depth if opcodes.PY313 else depth - 1  # 3.13: [attr, NULL]; before: [NULL, attr]


def _as_attr_load(inst: Instruction) -> list[Instruction]:
    """A method load rewritten as a NULL and an attribute load (the same callable, known NULL).
    `inst` itself stays the first instruction: jumps (the prologue's) target it."""
    name = inst.argval
    if opcodes.PY313:
        seq = emit.load_attr(name) + emit.push_null()
    else:
        seq = emit.push_null() + emit.swap(2) + emit.load_attr(name)
    first, rest = seq[0], seq[1:]
    inst.opname, inst.arg, inst.argval = first.opname, first.arg, first.argval
    for i in rest:
        i.positions, i.exn_tab_entry = inst.positions, inst.exn_tab_entry
    return [inst] + rest


_RAISES = frozenset({"RAISE_VARARGS", "RERAISE"})
_BOOL_JUMPS = frozenset({"POP_JUMP_IF_TRUE", "POP_JUMP_IF_FALSE"}) if opcodes.PY313 else frozenset()
# no continuation after these (or one that a resume function cannot express)
_NO_BREAK = opcodes.TERMINATORS | {"FOR_ITER", "SEND", "YIELD_VALUE", "RETURN_GENERATOR"}


def _successor_resume(code: CodeType, offset: int, nulls_before: set,
                      reenter: tuple[int, ...]) -> ResumeFunction:
    # a continuation of resume code is a continuation of the original code: a loop that breaks
    # on every iteration reuses one resume function instead of growing a chain of new ones
    origin = _origins.get(code)
    if origin is not None and origin[0]() is not None and offset in origin[1]:
        code, offset = origin[0](), origin[1][offset]
    try:
        return make_resume_function(code, offset, reenter_with=reenter)
    except ValueError as e:
        if "may hold NULL" not in str(e):
            raise
    slots = analysis.stack_slots(disassemble(code))
    k = next(n for n, i in enumerate(disassemble(code)) if i.offset == offset)
    depth = len(slots[k])
    return make_resume_function(code, offset, reenter_with=reenter,
                                null_slots=[i for i in nulls_before if i < depth
                                            and slots[k][i] in (NULL, MAYBE_NULL)])


def _remember_origin(new: CodeType, code: CodeType, body: list, origins: list) -> None:
    """`body`: the instructions as assembled into `new` (their offsets are `new`'s now);
    `origins`: their offsets in `code` (None: made for the resume code)."""
    root = _origins.get(code)
    mapping = {i.offset: o for i, o in zip(body, origins) if o is not None}
    if root is not None and root[0]() is not None:  # resume code of resume code: map through
        mapping = {k: root[1][v] for k, v in mapping.items() if v in root[1]}
        code = root[0]()
    set_origin(new, code, mapping)


def _delete_if_unbound(local: str) -> list[Instruction]:
    skip = Instruction("NOP")
    return (emit.load_fast(local) + emit.load_const(UNBOUND) + emit.is_op()
            + emit.pop_jump_if(False, skip) + emit.delete_fast(local) + [skip])


def _with_handlers(body: Sequence[Instruction], slots: Sequence[str]) -> dict[int, ExnTabEntry]:
    """Exit slot -> an exception-table entry of that with-block (handler and depth)."""
    out: dict[int, ExnTabEntry] = {}
    for region in analysis.exception_regions(body):
        if region.kind == analysis.WITH and region.depth - 1 < len(slots):
            if slots[region.depth - 1] == WITH_EXIT:
                out.setdefault(region.depth - 1, region.start.exn_tab_entry)
    return out


def _innermost_exit(exits: dict[int, ExnTabEntry], slot: int) -> ExnTabEntry | None:
    below = [i for i in exits if i < slot]
    return exits[max(below)] if below else None

"""Graph breaks in the root frame: compile the graph so far, run the offending instruction in
CPython, continue in a resume function that the frame hook traces on its own.

How a break is taken (restart analysis): the first trace of a frame raises `Unsupported` at some
root instruction (directly, or from a function inlined by it, 1..n calls deep). `convert_frame`
then traces the frame again with a `BreakPoint` (offset, visit number): when the root reaches that
instruction for that time, `take_break` stops tracing *before* it, with a state that is exactly
the state before the instruction (nothing of the failed attempt leaks into the graph). It emits
the output code: call the graph, apply side effects, then call a *break function*
(`bytecode.resume.make_break_function`, marked skip so the hook never traces it) with the live
stack and locals; it runs the instruction(s) in CPython and tail-calls the resume function at
each successor. A break inside an inlined call becomes a break at the root's CALL: the callee
then runs as its own frame, which the hook traces (its graph up to its own break is kept), and
the caller's rest resumes after the call.

Contexts (with-blocks open at the break): the global-state contexts the executor models
(no_grad, enable_grad, set_grad_enabled, inference_mode) are exited by the graph and passed as
context-manager objects that the break function re-enters (their state lives in the graph, not
in a Python object). Every other context (a user's class, a @contextmanager generator, an
object from a library) was entered once, as in eager: its bound `__exit__` is passed through,
never entered again, and runs once, in the resumed code. Anything the output code cannot
rebuild is `Unsupported` here, and the frame then runs eagerly as a whole.
"""
from __future__ import annotations

import copy
import dataclasses
import dis
import types

import torch

from pydynamo import _C
from pydynamo import autocast as _autocast
from pydynamo import logs
from pydynamo.bytecode import UNBOUND, make_break_function, origin_of
from pydynamo.bytecode.tables import parse_exception_table
from pydynamo.exc import ReturnValue, Unsupported
from pydynamo.installed import run_break as _run_break
from pydynamo.executor.reconstruct import OutputCodegen, build_code, cells_of
from pydynamo.executor.variables.amp import AutocastVariable
from pydynamo.executor.variables.base import NULL, ListIteratorVariable, MethodProxyVariable, WithExitVariable
from pydynamo.executor.variables.constant import OpaqueVariable
from pydynamo.executor.variables.functions import (NestedUserFunctionVariable, UserFunctionVariable,
                                                   UserMethodVariable)
from pydynamo.executor.variables.misc import GradModeVariable, InferenceModeVariable
from pydynamo.executor.variables.tensor import TensorMethodVariable
from pydynamo.guards import GuardKind
from pydynamo.sources import AttrSource, RemainingSource, py_name

# a CALL needs the instructions that set up its keyword names (and 3.11's PRECALL) with it
_CALL_PREFIX = ("KW_NAMES", "PRECALL")


@dataclasses.dataclass(frozen=True)
class BreakPoint:
    offset: int   # root instruction to break at (before it runs)
    visit: int    # 1-based: which execution of that instruction (loops are unrolled)


# what a handler does before its first RERAISE that may end the exception there: an `except`
# clause's match, a `with`'s __exit__ (it may suppress), leaving the handler (return, a loop)
_MAY_CATCH = frozenset({"CHECK_EXC_MATCH", "CHECK_EG_MATCH", "WITH_EXCEPT_START", "POP_EXCEPT",
                        "RETURN_VALUE", "RETURN_CONST", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT",
                        "YIELD_VALUE"})


def may_catch(code: types.CodeType, offset: int) -> bool:
    """Whether an exception raised by the instruction at `offset` may be handled in `code`: a
    handler covers it and is not only a cleanup that re-raises (`finally`, a comprehension's
    variable restore). Only the handler's straight-line start is read: anything else counts as
    catching."""
    for start, end, target, _depth, _lasti in parse_exception_table(code.co_exceptiontable):
        if start <= offset < end:
            break
    else:
        return False
    for inst in dis.get_instructions(code):
        if inst.offset < target:
            continue
        if inst.opname == "RERAISE":
            return False
        if inst.opname in _MAY_CATCH:
            return True
    return True


def _grad_ctx(mode: bool):
    return torch.enable_grad() if mode else torch.no_grad()


def reconstruct(cg, var) -> str:
    """cg.reconstruct, plus values that only live on the stack at a break (iterators of unrolled
    loops, grad-mode contexts, bound methods before their call)."""
    if var.source is not None:
        return cg.reconstruct(var)
    if isinstance(var, ListIteratorVariable):
        items = list(var.it)
        var.it = iter(items)  # reading the rest must not consume the tracker
        return f"iter([{''.join(reconstruct(cg, i) + ', ' for i in items)}])"
    if isinstance(var, WithExitVariable):
        if reentered(var):
            return reconstruct(cg, var.ctx)
        return f"{reconstruct(cg, var.ctx)}.__exit__"
    if isinstance(var, GradModeVariable):
        return f"{cg.load_const(_grad_ctx)}({var.mode!r})"
    if isinstance(var, InferenceModeVariable):
        return f"{cg.load_const(torch.inference_mode)}({var.mode!r})"
    if isinstance(var, TensorMethodVariable):
        return f"{reconstruct(cg, var.tensor)}.{var.name}"
    if isinstance(var, MethodProxyVariable):
        return f"{reconstruct(cg, var.obj)}.{var.name}"
    if isinstance(var, UserMethodVariable):
        return f"{cg.load_const(types.MethodType)}({reconstruct(cg, var.fn)}, {reconstruct(cg, var.obj)})"
    if isinstance(var, UserFunctionVariable):
        return cg.load_const(var.fn)
    if isinstance(var, NestedUserFunctionVariable) and var.closure:
        return _closure_function(cg, var)
    return cg.reconstruct(var)


def _closure_function(cg, var) -> str:
    """A function made in the frame that closes over the frame's own cells: rebuilt around the
    same cell objects (the replacement code has the frame's cells under the same names)."""
    names = tuple(c.name for c in var.closure)
    frame_cells = set(cg.code.co_cellvars) | set(cg.code.co_freevars)
    if not all(n in frame_cells for n in names):
        raise Unsupported("closure_escape", "a function closing over cells of an inlined call")
    defaults = "(" + "".join(reconstruct(cg, d) + ", " for d in var.defaults) + ")"
    cells = f"{cg.load_const(cells_of)}(lambda: ({', '.join(names)},), {names!r})"
    fn = (f"{cg.load_const(types.FunctionType)}({cg.load_const(var.code)}, globals(), "
          f"{var.code.co_name!r}, {defaults} or None, {cells})")
    if var.kwdefaults:
        kw = ", ".join(f"{k!r}: {reconstruct(cg, v)}" for k, v in var.kwdefaults.items())
        fn = f"{cg.load_const(_with_kwdefaults)}({fn}, {{{kw}}})"
    return fn


def _with_kwdefaults(fn, kwdefaults: dict):
    fn.__kwdefaults__ = kwdefaults
    return fn


def break_start(tx, index: int) -> int:
    """Index of the first instruction that must run in CPython for a break at `index`."""
    start = index
    while start > 0 and tx.instructions[start - 1].opname in _CALL_PREFIX:
        start -= 1
    return start


def take_break(tx, inst) -> None:
    """Finish the root frame at `inst` (not yet run): sets tx.result, raises ReturnValue."""
    origin = origin_of(tx.code)
    if origin is not None and inst.offset not in origin[1]:  # would resume into itself forever
        raise Unsupported("unbreakable", "cannot break while re-entering a resumed frame's state")
    index = tx.index_of[inst.offset]
    start = tx.instructions[break_start(tx, index)].offset
    stack = list(tx.stack)
    nulls = [i for i, v in enumerate(stack) if v is NULL]
    reenter = [i for i, v in enumerate(stack) if isinstance(v, WithExitVariable) and reentered(v)]
    try:
        bf = make_break_function(tx.code, start, inst.offset, nstack=len(stack), null_slots=nulls,
                                 reenter_with=reenter)
    except ValueError as e:
        raise Unsupported("unbreakable", f"cannot resume after {inst.opname}: {e}") from None
    _C.set_code_state(bf.code, "skip")
    if logs.enabled("bytecode"):
        import dis
        logs.log("bytecode", "graph break in %s at %s:%d: runs in CPython, then resumes:\n%s",
                 tx.code.co_name, tx.code.co_filename, tx.lineno, dis.Bytecode(bf.code).dis())
    _leave_contexts(tx, [stack[i] for i in reenter])

    cg = OutputCodegen(tx.code, tx.f_globals)
    args = []
    for name in bf.params:  # "___stack<i>" or a live local, in the break function's order
        if name.startswith("___stack"):
            args.append(cg.temp(reconstruct(cg, stack[int(name[len("___stack"):])])))
        elif name in tx.lazy_pending:  # an argument never read: pass it through, unguarded
            args.append(py_name(name))
        else:
            v = tx.lazy_local(name)
            args.append(cg.load_const(UNBOUND) if v is None else cg.temp(reconstruct(cg, v)))
    cell_writes = []
    for name in tx.code.co_cellvars:
        cell = tx.cells.get(name)
        if cell is not None and cell.contents is not None and not getattr(cell, "external", False):
            cell_writes.append(f"{name} = {cg.temp(reconstruct(cg, cell.contents))}")
    tx.side_effects.codegen(cg)
    cg.lines += cell_writes
    graph = tx.output.compile(cg.graph_outputs)
    call = None
    if graph is not None:
        call = f"{graph}({', '.join(cg.load_source(i.source) for i in tx.output.inputs)})"
    closure = "()"
    if bf.closure:
        closure = f"{cg.load_const(cells_of)}(lambda: ({', '.join(bf.closure)},), {bf.closure!r})"
    ret = f"{cg.load_const(_run_break)}({cg.load_const(bf.code)}, globals(), {closure}, {', '.join(args)})"
    tx.result = build_code(tx.code, cg, call, ret)
    tx.break_function = bf
    raise ReturnValue()


def reentered(w) -> bool:
    """Is this with-block re-entered by the break function (a modelled global-state context),
    rather than passed through as its bound __exit__?"""
    return isinstance(w.ctx, (GradModeVariable, InferenceModeVariable, AutocastVariable))


def _leave_contexts(tx, contexts: list) -> None:
    """The graph exits the contexts the break function re-enters (innermost first); re-entering
    them must give back the grad mode the break happened under. A grad mode set by a bare
    torch.set_grad_enabled() call is left as the graph set it: the break function and the resumed
    frame (guarded on grad mode) run under it, as in eager."""
    at_break = tx.grad_enabled
    for w in reversed(contexts):
        w.ctx.call_method(tx, "__exit__", [], {})
    mode = tx.grad_enabled
    for w in contexts:  # what the break function's re-entry will set
        if isinstance(w.ctx, AutocastVariable):
            continue   # no grad-mode effect; its own state is re-entered as it was
        mode = w.ctx.mode if isinstance(w.ctx, GradModeVariable) else (mode and not w.ctx.mode)
    if mode != at_break:
        raise Unsupported("grad_mode_leak", "graph break after torch.set_grad_enabled() inside a with-block")
    if tx.root.inference_mode_ != torch.is_inference_mode_enabled():
        raise Unsupported("grad_mode_leak", "graph break with inference mode changed outside a with-block")
    if tx.root.autocast_ != _autocast.current():
        raise Unsupported("autocast_leak", "graph break inside a torch.autocast region entered without a with-block")


def _untraced_codes() -> dict:
    """Code that must run in CPython, never inlined: calling it is a graph break (reason, message).
    A @contextlib.contextmanager generator runs its body up to `yield` on __enter__ and the rest
    on __exit__; the executor runs generators to completion, so it would run both at once.
    torch.autocast objects are modelled as a whole (variables/amp.py); their methods' bodies
    (dispatcher state switches) are never inlined line by line."""
    import contextlib
    gen_cm = contextlib._GeneratorContextManager
    why = "a @contextlib.contextmanager context is not traced: it runs in Python, outside the graph"
    out = {contextlib.contextmanager(lambda: (yield)).__code__: ("context_generator", why)}
    for fn in (gen_cm.__enter__, gen_cm.__exit__):
        out[fn.__code__] = ("context_generator", why)
    amp = torch.amp.autocast_mode.autocast
    for fn in (amp.__init__, amp.__enter__, amp.__exit__):
        out[fn.__code__] = ("autocast_context", "the body of a torch.autocast method is not traced")
    return out


UNTRACED_CODES = _untraced_codes()


# --- values that arrive in resume functions ---------------------------------------------------

ITERATOR_TYPES = (type(iter([])), type(iter(())), type(iter(range(0))))


def wrap_iterator(builder, tx, value, source):
    """A loop's iterator passed to a resume function: its remaining items, guarded like a list."""
    if source is None:
        raise Unsupported("unknown_value", f"an iterator of type {type(value).__qualname__}")
    tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
    seq = builder.wrap(tx, list(copy.copy(value)), RemainingSource(source))
    return ListIteratorVariable(seq.items)


def is_c_exit(value) -> bool:
    """The bound __exit__ of a C context manager (a lock, a file) passed through a break."""
    return isinstance(value, types.BuiltinMethodType) and value.__name__ == "__exit__" \
        and not isinstance(value.__self__, types.ModuleType)


def wrap_c_exit(builder, tx, value, source):
    """Guarded by its object's identity: each `lock.__exit__` read makes a new bound method,
    so guarding the method's own identity would recompile on every call."""
    if source is not None:
        owner = value.__self__
        tx.add_guard(AttrSource(source, "__self__"), GuardKind.ID_MATCH, (id(owner), type(owner).__qualname__))
        tx.add_guard(AttrSource(source, "__name__"), GuardKind.EQUALS_MATCH, "__exit__")
    return OpaqueVariable(value, source)


def wrap_inference_ctx(builder, tx, value, source):
    """torch.inference_mode(mode) objects (a with-block re-entered by a resume function)."""
    if source is not None:
        tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
        tx.add_guard(AttrSource(source, "mode"), GuardKind.EQUALS_MATCH, value.mode)
    return InferenceModeVariable(bool(value.mode))


def wrap_grad_ctx(builder, tx, value, source):
    """torch.no_grad() / enable_grad() objects (a with-block re-entered by a resume function)."""
    if source is not None:
        tx.add_guard(source, GuardKind.TYPE_MATCH, type(value))
    return GradModeVariable(isinstance(value, torch.enable_grad), False, tx.grad_enabled)

"""InstructionTranslator: runs a frame's bytecode over VariableTrackers, recording an FX graph.

Handlers are registered with `@op(name, versions)`: the versions a handler serves are data
(`HANDLERS[name]` lists an opcode's handlers, one per disjoint version range, e.g. CALL's stack
changed in 3.13), and `UNSUPPORTED` lists opcodes we decline on purpose with the reason.
`coverage(sys.version_info)` lets a test check every opcode of the running interpreter is one or
the other. Stack conventions: a call site is [NULL | callable, callable | self, *args] on 3.11
and 3.12, [callable, NULL | self, *args] on 3.13; `NULL` is variables/base.py's sentinel. 3.13's
conditional jumps take exact bools, converted by TO_BOOL or COMPARE_OP's bool flag: before a
POP_JUMP_IF_TRUE/FALSE those leave the value as it is and the jump decides its truth, as on
3.11/3.12 (same graphs and breaks; a break at the jump converts with TO_BOOL in its break code).

The root translator owns the OutputGraph, side effects, guards and the builder; an
InliningTranslator runs a called user function on the same state and returns its value.
Anything untraceable raises `Unsupported`; `graph_break_handler` attaches the user's location and,
in the root frame, where to cut, and `convert_frame` then takes a graph break there
(executor/breaks.py: graph so far, the instruction in CPython, a resume function), or raises under
fullgraph=True.
"""
from __future__ import annotations

import dataclasses
import dis
import operator
import sys
import types
from typing import Callable, Optional

import torch

from pydynamo import autocast as _autocast

from pydynamo.bytecode import user_code_name
from pydynamo.exc import GraphBreak, ReturnValue, Unsupported
from pydynamo import config
from pydynamo.executor import breaks as _breaks
from pydynamo.executor import regions as _regions
from pydynamo.executor.builder import VariableBuilder
from pydynamo.executor.output_graph import OutputGraph
from pydynamo.executor.reconstruct import OutputCodegen, build_code
from pydynamo.executor.side_effects import SideEffects
from pydynamo.executor.variables import builtins as B
from pydynamo.executor.variables.base import (NULL, ListIteratorVariable, VariableTracker, WithExitVariable,
                                              raises_here)
from pydynamo.executor.variables.constant import ConstantVariable, ObjectVariable
from pydynamo.executor.variables.containers import (BaseListVariable, ConstDictVariable, ListVariable,
                                                    SetVariable, SliceVariable, TupleVariable)
from pydynamo.executor.variables.functions import (BaseUserFunctionVariable, CellVariable,
                                                   NestedUserFunctionVariable, UserFunctionVariable)
from pydynamo.executor.variables.strict import strict_stack
from pydynamo.executor.variables.tensor import TensorVariable
from pydynamo.executor.variables.user_objects import SuperVariable
from pydynamo.guards import Guard, GuardKind
from pydynamo.hints import hint_for, opcode_message, user_message
from pydynamo.shapes import ShapeEnv
from pydynamo.skipfiles import is_library_file
from pydynamo.sources import AttrSource, GlobalSource, LocalSource, ModuleSource, Source

PY = sys.version_info[:2]
V311, V312, V313 = (3, 11), (3, 12), (3, 13)
ALL = (V311, V312, V313)       # every supported version (pydynamo.versions.SUPPORTED_PYTHONS)
MAX_INLINE_DEPTH = 40


@dataclasses.dataclass(frozen=True)
class Handler:
    fn: Callable
    versions: tuple


HANDLERS: dict[str, list[Handler]] = {}   # opname -> handlers for disjoint version ranges
UNSUPPORTED: dict[str, str] = {}
_ACTIVE: dict[str, Callable] = {}         # opname -> this interpreter's handler


def op(name: str, versions=ALL):
    def deco(fn):
        h = Handler(fn, tuple(versions))
        others = HANDLERS.setdefault(name, [])
        assert not any(set(o.versions) & set(h.versions) for o in others), f"two {name} handlers"
        others.append(h)
        if PY in h.versions:
            _ACTIVE[name] = fn
        return fn
    return deco


def unsupported(reason: str, *names: str) -> None:
    for n in names:
        UNSUPPORTED[n] = reason


def coverage(version=None) -> tuple[list, list]:
    """(opcodes of this interpreter with neither handler nor explicit unsupported, handled ones)"""
    version = tuple((version or sys.version_info)[:2])
    missing, handled = [], []
    for name in dis.opmap:
        if any(version in h.versions for h in HANDLERS.get(name, ())):
            handled.append(name)
        elif name not in UNSUPPORTED:
            missing.append(name)
    return missing, handled


_BINARY_OPS = [operator.add, operator.and_, operator.floordiv, operator.lshift, operator.matmul, operator.mul,
               operator.mod, operator.or_, operator.pow, operator.rshift, operator.sub, operator.truediv,
               operator.xor, operator.iadd, operator.iand, operator.ifloordiv, operator.ilshift,
               operator.imatmul, operator.imul, operator.imod, operator.ior, operator.ipow, operator.irshift,
               operator.isub, operator.itruediv, operator.ixor]
_COMPARE = {"<": operator.lt, "<=": operator.le, "==": operator.eq, "!=": operator.ne, ">": operator.gt,
            ">=": operator.ge}


def graph_break_handler(run):
    """The one place where an untraceable construct becomes a graph-break record: attaches the
    user's location (file:line:col), inline stack and hint to the Unsupported, and in the root
    frame where to cut it: the root instruction that was running (a CALL when the failure is
    inside an inlined function) at this visit. convert_frame then traces the frame again and
    executor/breaks.py cuts it there: graph so far, the instruction in CPython, resume function."""
    def wrapper(tx, *args):
        try:
            return run(tx, *args)
        except Unsupported as e:
            if e.graph_break is None:
                pos = tx.current.positions if tx.current is not None else None
                col = pos.col_offset if pos is not None and pos.col_offset is not None else None
                e.message = user_message(e.message)
                e.graph_break = GraphBreak(e.reason_code, e.message, tx.code.co_filename, tx.lineno,
                                           None if col is None else col + 1, tx.user_stack(),
                                           hint_for(e.reason_code, e.hint))
                e.strict = strict_stack(tx)[-1]   # error_on_graph_break where it happens
            if getattr(e, "raises", False) and tx.current is not None:
                # an exception eager raises too: a break at the instruction lets CPython raise it
                # into a handler of the traced code; with none, the frame runs eagerly as a whole
                # (it may take another path there: `if not is_compiling()`)
                if _breaks.may_catch(tx.code, tx.current.offset):
                    e.raises = False
                elif tx.parent is None:
                    e.message = e.graph_break.message = user_message(
                        f"{e.message} (raised while tracing, not caught in the traced code)")
            if tx.parent is None and getattr(e, "breakpoint", None) is None and tx.current is not None:
                e.breakpoint = _breaks.BreakPoint(tx.current.offset, tx.visits.get(tx.current.offset, 1))
            raise
        except RecursionError:
            raise Unsupported("recursion", "Python recursion limit reached while tracing") from None
    return wrapper


class InstructionTranslatorBase:
    def __init__(self, code: types.CodeType, f_globals: dict, parent: Optional["InstructionTranslatorBase"]):
        self.code = code
        self.f_globals = f_globals
        self.parent = parent
        self.instructions = list(dis.get_instructions(code))
        self.index_of = {inst.offset: i for i, inst in enumerate(self.instructions)}
        self.stack: list = []
        self.locals: dict[str, VariableTracker] = {}
        self.cells: dict[str, CellVariable] = {}
        self.ip = 0
        self.current: Optional[dis.Instruction] = None
        self.kw_names: tuple = ()
        self.lineno = code.co_firstlineno

    # --- shared state (the root owns it) -------------------------------------------------
    @property
    def root(self) -> "InstructionTranslator":
        tx = self
        while tx.parent is not None:
            tx = tx.parent
        return tx

    @property
    def output(self) -> OutputGraph:
        return self.root.output_graph

    @property
    def side_effects(self) -> SideEffects:
        return self.root.side_effects_

    @property
    def grad_enabled(self) -> bool:
        return self.root.grad_enabled_

    @grad_enabled.setter
    def grad_enabled(self, v: bool) -> None:
        self.root.grad_enabled_ = v

    def depth(self) -> int:
        return 0 if self.parent is None else 1 + self.parent.depth()

    # --- helpers used by trackers ---------------------------------------------------------
    def location(self) -> str:
        return f"{self.code.co_filename}:{self.lineno}"

    def user_stack(self) -> tuple:
        frames = []
        tx = self
        while tx is not None:
            frames.append((tx.code.co_filename, tx.lineno, user_code_name(tx.code)))
            tx = tx.parent
        return tuple(reversed(frames))

    def user_location(self) -> str:
        """file:line of the innermost frame on the inline stack that is user code (not torch or
        the stdlib): where a guard "came from" in the user's terms."""
        tx = self
        while tx.parent is not None and is_library_file(tx.code.co_filename):
            tx = tx.parent
        return tx.location()

    def add_guard(self, source: Source, kind: GuardKind, expected) -> None:
        self.root.guards.append(Guard(source, kind, expected, self.user_location()))

    def wrap(self, value, source) -> VariableTracker:
        return self.root.builder.wrap(self, value, source)

    def wrap_constant_result(self, value) -> VariableTracker:
        return self.root.builder.wrap(self, value, None)

    def unpack(self, v: VariableTracker) -> list:
        if isinstance(v, ListIteratorVariable):
            return v.unpack_var_sequence(self)
        if not v.has_unpack_var_sequence(self):
            it = v.get_iter(self)
            return it.unpack_var_sequence(self)
        return v.unpack_var_sequence(self)

    def tuple(self, items) -> TupleVariable:
        return TupleVariable(list(items))

    def list(self, items) -> ListVariable:
        return ListVariable(list(items))

    def getattr(self, obj: VariableTracker, name: str) -> VariableTracker:
        return obj.var_getattr(self, name)

    def getitem(self, obj: VariableTracker, key: VariableTracker) -> VariableTracker:
        if isinstance(obj, TensorVariable):
            return self.output.call(self, "call_function", operator.getitem, [obj, key], {})
        if isinstance(obj, (BaseListVariable, ConstDictVariable)):
            return obj.getitem(self, key)
        if isinstance(obj, ConstantVariable) and key.is_python_constant():
            try:
                value = obj.value[key.as_python_constant()]
            except Exception as e:   # None[...], "ab"[5]: eager raises here too
                raise raises_here("constant_raises", f"{type(e).__name__}: {e}") from None
            return self.wrap_constant_result(value)
        return obj.call_method(self, "__getitem__", [key], {})

    def equal(self, a, b) -> bool:
        return B.compare(self, operator.eq, a, b).truthy(self)

    def contains(self, items, item) -> VariableTracker:
        for i in items:
            if B.compare(self, operator.eq, i, item).truthy(self):
                return ConstantVariable(True)
        return ConstantVariable(False)

    def contains_op(self, container, item) -> VariableTracker:
        if isinstance(container, TensorVariable):
            raise Unsupported("tensor_branch", "`in` on a tensor (data-dependent)")
        if isinstance(container, (ConstDictVariable, SetVariable)) or \
                (isinstance(container, ConstantVariable) and item.is_python_constant()):
            if isinstance(container, ConstantVariable):
                return ConstantVariable(item.as_python_constant() in container.value)
            return container.call_method(self, "__contains__", [item], {})
        if isinstance(container, BaseListVariable):
            return self.contains(container.items, item)
        return container.call_method(self, "__contains__", [item], {})

    def str_of_traced(self, fmt: str, name: str, args, kwargs):
        raise Unsupported("format_traced", f"str.{name} with a traced (non-constant) argument")

    def call(self, fn: VariableTracker, args: list, kwargs: dict) -> VariableTracker:
        if isinstance(fn, B.BuiltinVariable) and fn.fn is super and not args:
            return self.zero_arg_super()
        return fn.call_function(self, args, kwargs)

    def zero_arg_super(self):
        cell = self.cells.get("__class__")
        if cell is None or not self.code.co_varnames:
            raise Unsupported("super", "zero-argument super() outside a method")
        first = self.code.co_varnames[0]
        obj = self.cell_get(self.cells[first]) if first in self.cells else _load_local(self, first)
        return SuperVariable(self.cell_get(cell).as_python_constant(), obj)

    def inline_user_function(self, fn: BaseUserFunctionVariable, args, kwargs) -> VariableTracker:
        code = fn.get_code()
        if code.co_flags & (0x80 | 0x100 | 0x200):  # coroutine, iterable coroutine, async generator
            raise Unsupported("generator", f"calling coroutine function {code.co_name}")
        if self.depth() >= MAX_INLINE_DEPTH:
            raise Unsupported("recursion", "inlining depth limit reached (recursive function?)")
        if code in _breaks.UNTRACED_CODES:
            raise Unsupported(*_breaks.UNTRACED_CODES[code])
        local_vars, cells = fn.bind(self, args, kwargs)
        sub = InliningTranslator(code, fn.get_globals(), self, local_vars, cells)
        if code.co_flags & 0x20:
            sub.yields = []  # a generator runs to completion; its values are handed out in order
        return sub.run_inline()

    def inline_method(self, obj: VariableTracker, func, args, kwargs) -> VariableTracker:
        if not isinstance(func, types.FunctionType):
            raise Unsupported("module_call", f"{type(obj).__name__}.{getattr(func, '__name__', func)} "
                              "is not a Python function")
        return UserFunctionVariable(func).call_function(self, [obj, *args], kwargs)

    def forget_argument(self, name: str) -> None:
        """The frame's own value for `name` is overwritten (root: stop lazy wrapping)."""

    def cell_get(self, cell: CellVariable) -> VariableTracker:
        if cell.contents is None and getattr(cell, "lazy", None) is not None:
            value, source = cell.lazy
            cell.contents = self.wrap(value, source)
            cell.lazy = None
        if cell.contents is None:
            raise Unsupported("unbound_cell", f"free variable {cell.name!r} referenced before assignment")
        return cell.contents

    # --- the interpreter loop -------------------------------------------------------------
    def push(self, v):
        self.stack.append(v)

    def pop(self):
        return self.stack.pop()

    def popn(self, n: int) -> list:
        if n == 0:
            return []
        items = self.stack[-n:]
        del self.stack[-n:]
        return items

    def jump(self, inst) -> None:
        self.ip = self.index_of[inst.argval]

    def step(self) -> None:
        inst = self.instructions[self.ip]
        self.current = inst
        self.ip += 1
        if inst.positions is not None and inst.positions.lineno is not None:
            self.lineno = inst.positions.lineno
        fn = _ACTIVE.get(inst.opname)
        if fn is None:
            reason = UNSUPPORTED.get(inst.opname, "no handler")
            raise Unsupported("unsupported_opcode", opcode_message(inst.opname, reason))
        fn(self, inst)

    @graph_break_handler
    def run_loop(self) -> None:
        try:
            while True:
                self.step()
        except ReturnValue:
            return


class InliningTranslator(InstructionTranslatorBase):
    def __init__(self, code, f_globals, parent, local_vars: dict, cells: dict):
        super().__init__(code, f_globals, parent)
        self.locals = dict(local_vars)
        self.cells = dict(cells)
        self.return_value: Optional[VariableTracker] = None
        self.yields: Optional[list] = None

    def run_inline(self) -> VariableTracker:
        root = self.root
        prev, root.active_tx = root.active_tx, self
        try:
            self.run_loop()
        finally:
            root.active_tx = prev
        if self.yields is not None:
            return ListIteratorVariable(self.yields, types.GeneratorType)
        return self.return_value

    def do_return(self, value) -> None:
        self.return_value = value
        raise ReturnValue()

    def global_source(self, name: str) -> Optional[Source]:
        root = self.root
        if self.f_globals is root.f_globals:
            return GlobalSource(name)
        modname = self.f_globals.get("__name__")
        if modname and (modname == "torch" or modname.startswith("torch.")):
            return None  # library globals (F, math helpers) are not guarded, like library attributes
        if modname and sys.modules.get(modname) is not None and vars(sys.modules[modname]) is self.f_globals:
            return AttrSource(ModuleSource(modname), name)
        return None


class InstructionTranslator(InstructionTranslatorBase):
    """The root: owns the graph, guards, side effects; finishes the frame at RETURN_VALUE."""

    def __init__(self, code, frame_locals: dict, f_globals: dict, f_builtins: dict, backend,
                 breakpoint=None, dynamic=None, auto=None):
        super().__init__(code, f_globals, None)
        self.dynamic = dynamic                  # optimize(dynamic=): None (automatic), True, False
        self.auto = auto                        # shapes.AutomaticDynamic of this code, or None
        self.active_tx: InstructionTranslatorBase = self   # innermost translator (inlining)
        self.shape_env = ShapeEnv(origin_fn=lambda: self.active_tx.user_location())
        self.breakpoint = breakpoint            # executor.breaks.BreakPoint: stop before it
        self.visits: dict[int, int] = {}        # offset -> times reached (unrolled loops)
        self.initial_grad_enabled = torch.is_grad_enabled()
        self.break_function = None
        self.frame_locals = frame_locals
        self.f_builtins = f_builtins
        self.output_graph = OutputGraph(f_globals, backend)
        self.output_graph.shape_env = self.shape_env
        self.side_effects_ = SideEffects()
        self.guards: list[Guard] = []
        self.builder = VariableBuilder(self)
        self.regions = _regions.Regions() if config.region_templates else None   # repeated modules
        self.grad_enabled_ = torch.is_grad_enabled()
        self.inference_mode_ = torch.is_inference_mode_enabled()
        self.autocast_ = _autocast.current()    # the trace's autocast state (torch.autocast regions)
        self.state_read: set = set()            # guards.OPTIONAL_STATE_CHECKS the trace relied on
        self.global_overrides: dict[str, VariableTracker] = {}
        self.result: Optional[tuple] = None  # (new_code, source_text)
        self.asked_compiling = False         # a COMPILING_QUERY was answered (torch_fns)
        self.lazy_pending = set(frame_locals) - set(code.co_freevars)
        for name in code.co_freevars:
            cell = CellVariable(None, name)
            cell.lazy = (frame_locals[name], LocalSource(name)) if name in frame_locals else None
            cell.external = True
            self.cells[name] = cell

    def global_source(self, name: str) -> Source:
        return GlobalSource(name)

    def lazy_local(self, name: str) -> Optional[VariableTracker]:
        if name in self.lazy_pending:
            self.lazy_pending.discard(name)
            self.locals[name] = self.wrap(self.frame_locals[name], LocalSource(name))
        return self.locals.get(name)

    def forget_argument(self, name: str) -> None:
        self.lazy_pending.discard(name)

    def run(self) -> None:
        self.run_loop()

    def step(self) -> None:
        inst = self.instructions[self.ip]
        n = self.visits[inst.offset] = self.visits.get(inst.offset, 0) + 1
        bp = self.breakpoint
        if bp is not None and bp.offset == inst.offset and bp.visit == n:
            self.current = inst
            if inst.positions is not None and inst.positions.lineno is not None:
                self.lineno = inst.positions.lineno
            _breaks.take_break(self, inst)
        super().step()

    def do_return(self, value: VariableTracker) -> None:
        if self.grad_enabled != torch.is_grad_enabled() or self.inference_mode_ != torch.is_inference_mode_enabled():
            raise Unsupported("grad_mode_leak", "the frame returns with a different grad/inference mode")
        if self.autocast_ != _autocast.current():
            raise Unsupported("autocast_leak", "the frame returns inside a torch.autocast region it entered")
        cg = OutputCodegen(self.code, self.f_globals, self.cells)
        ret = cg.reconstruct(value)
        ret = cg.temp(ret) if cg.lines or not self.side_effects.is_empty() else ret
        self.side_effects.codegen(cg)
        name = self.output.compile(cg.graph_outputs)
        call = None
        if name is not None:
            args = ", ".join(cg.load_source(i.source) for i in self.output.inputs)
            call = f"{name}({args})"
        self.result = build_code(self.code, cg, call, ret)
        raise ReturnValue()


# =============================================================================================
# Opcode handlers. Each states the Python versions it serves.
# =============================================================================================

unsupported("not produced for function bodies we trace", "CACHE", "LOAD_NAME", "STORE_NAME",
            "DELETE_NAME", "IMPORT_STAR", "SETUP_ANNOTATIONS", "LOAD_BUILD_CLASS", "PRINT_EXPR", "LOAD_LOCALS",
            "LOAD_CLASSDEREF", "LOAD_FROM_DICT_OR_GLOBALS", "INTERPRETER_EXIT", "RESERVED")
unsupported("yield from / coroutines are not traced", "SEND", "END_SEND",
            "GET_AWAITABLE", "GET_AITER", "GET_ANEXT", "END_ASYNC_FOR", "BEFORE_ASYNC_WITH", "ASYNC_GEN_WRAP",
            "GET_YIELD_FROM_ITER", "CLEANUP_THROW")
unsupported("exception handling paths run only when something raises", "PUSH_EXC_INFO", "POP_EXCEPT",
            "CHECK_EXC_MATCH", "CHECK_EG_MATCH", "RERAISE", "WITH_EXCEPT_START", "PREP_RERAISE_STAR",
            "RAISE_VARARGS", "LOAD_ASSERTION_ERROR")
unsupported("pattern matching is not traced yet", "MATCH_CLASS", "MATCH_KEYS", "MATCH_MAPPING",
            "MATCH_SEQUENCE", "GET_LEN")
unsupported("pseudo-instructions never appear in real bytecode", "SETUP_FINALLY", "SETUP_CLEANUP",
            "SETUP_WITH", "POP_BLOCK", "JUMP", "JUMP_NO_INTERRUPT", "LOAD_METHOD" if PY >= V312 else "_",
            "LOAD_SUPER_METHOD", "LOAD_ZERO_SUPER_METHOD", "LOAD_ZERO_SUPER_ATTR", "STORE_FAST_MAYBE_NULL",
            "LOAD_CLOSURE" if PY >= V313 else "_")  # 3.13: LOAD_FAST of the cell's slot
unsupported("never in co_code: the interpreter writes it over a specialized instruction or into its own "
            "__init__ shim, and co_code (what dis reads) shows the original instruction",
            "ENTER_EXECUTOR", "EXIT_INIT_CHECK")
unsupported("sys.monitoring instrumentation is never traced",
            *[n for n in dis.opmap if n.startswith("INSTRUMENTED_")])
unsupported("deleting globals / cells is not traced", "DELETE_GLOBAL", "DELETE_DEREF")
unsupported("type parameter syntax is not traced", "CALL_INTRINSIC_2")


@op("NOP")
@op("EXTENDED_ARG")  # dis already folded it into the next instruction's arg
@op("RESUME")
@op("COPY_FREE_VARS")
@op("PRECALL", (V311,))
def NOP(tx, inst):
    """No effect on the symbolic state. Versions: as registered above (PRECALL is 3.11 only)."""




@op("POP_TOP")
def POP_TOP(tx, inst):
    tx.pop()


@op("PUSH_NULL")
def PUSH_NULL(tx, inst):
    tx.push(NULL)


@op("COPY")
def COPY(tx, inst):
    tx.push(tx.stack[-inst.arg])


@op("SWAP")
def SWAP(tx, inst):
    tx.stack[-1], tx.stack[-inst.arg] = tx.stack[-inst.arg], tx.stack[-1]


@op("LOAD_CONST")
def LOAD_CONST(tx, inst):
    tx.push(_const(tx, inst.argval))


def _const(tx, value):
    if isinstance(value, types.CodeType):
        return ObjectVariable(value)
    if type(value) is tuple:
        return TupleVariable([_const(tx, v) for v in value])
    if type(value) is frozenset:
        return SetVariable([ConstantVariable(v) for v in value], frozenset)
    return tx.wrap_constant_result(value)


@op("RETURN_VALUE")
def RETURN_VALUE(tx, inst):
    tx.do_return(tx.pop())


@op("RETURN_CONST", (V312, V313))
def RETURN_CONST(tx, inst):
    tx.do_return(_const(tx, inst.argval))


# --- locals, cells, globals -------------------------------------------------------------------

def _load_local(tx, name):
    if isinstance(tx, InstructionTranslator):
        v = tx.lazy_local(name)
    else:
        v = tx.locals.get(name)
    if v is None:
        raise Unsupported("unbound_local", f"local variable {name!r} referenced before assignment")
    return v


def _load_fast(tx, name):
    """LOAD_FAST's value; on 3.13 LOAD_FAST of a cell's slot is the cell (LOAD_CLOSURE is gone)."""
    if PY >= V313 and name in tx.cells:
        return tx.cells[name]
    return _load_local(tx, name)


@op("LOAD_FAST")
@op("LOAD_FAST_CHECK", (V312, V313))
def LOAD_FAST(tx, inst):
    tx.push(_load_fast(tx, inst.argval))


@op("LOAD_FAST_LOAD_FAST", (V313,))
def LOAD_FAST_LOAD_FAST(tx, inst):
    for name in inst.argval:
        tx.push(_load_fast(tx, name))


@op("STORE_FAST_LOAD_FAST", (V313,))
def STORE_FAST_LOAD_FAST(tx, inst):
    store, load = inst.argval
    _store_fast(tx, store, tx.pop())
    tx.push(_load_fast(tx, load))


@op("STORE_FAST_STORE_FAST", (V313,))
def STORE_FAST_STORE_FAST(tx, inst):
    for name in inst.argval:  # TOS goes to the first name
        _store_fast(tx, name, tx.pop())


@op("LOAD_FAST_AND_CLEAR", (V312, V313))
def LOAD_FAST_AND_CLEAR(tx, inst):
    if isinstance(tx, InstructionTranslator):
        tx.lazy_local(inst.argval)
    tx.push(tx.locals.pop(inst.argval, NULL))


@op("STORE_FAST")
def STORE_FAST(tx, inst):
    _store_fast(tx, inst.argval, tx.pop())


def _store_fast(tx, name, v):
    tx.forget_argument(name)
    if v is NULL:
        tx.locals.pop(name, None)
    else:
        tx.locals[name] = v


@op("DELETE_FAST")
def DELETE_FAST(tx, inst):
    tx.forget_argument(inst.argval)
    tx.locals.pop(inst.argval, None)


@op("MAKE_CELL")
def MAKE_CELL(tx, inst):
    name = inst.argval
    init = None
    if isinstance(tx, InstructionTranslator):
        init = tx.lazy_local(name)
    elif name in tx.locals:
        init = tx.locals[name]
    tx.cells[name] = CellVariable(init, name)
    tx.locals.pop(name, None)


@op("LOAD_CLOSURE", (V311, V312))
def LOAD_CLOSURE(tx, inst):
    tx.push(tx.cells[inst.argval])


@op("LOAD_DEREF")
def LOAD_DEREF(tx, inst):
    tx.push(tx.cell_get(tx.cells[inst.argval]))


@op("LOAD_FROM_DICT_OR_DEREF", (V312, V313))
def LOAD_FROM_DICT_OR_DEREF(tx, inst):
    tx.pop()
    tx.push(tx.cell_get(tx.cells[inst.argval]))


@op("STORE_DEREF")
def STORE_DEREF(tx, inst):
    name = inst.argval
    value = tx.pop()
    cell = tx.cells[name]
    if cell.external:
        if not isinstance(tx, InstructionTranslator):
            raise Unsupported("closure_store", f"nonlocal store to {name!r} of a function made outside the frame")
        tx.side_effects.store_deref(name, value)
    cell.contents = value
    cell.lazy = None


def _push_callable(tx, value, with_null: bool) -> None:
    """A callable for CALL, with the NULL that says "no self": below it up to 3.12, above it
    on 3.13."""
    if with_null and PY < V313:
        tx.push(NULL)
    tx.push(value)
    if with_null and PY >= V313:
        tx.push(NULL)


@op("LOAD_GLOBAL")
def LOAD_GLOBAL(tx, inst):
    _push_callable(tx, _load_global(tx, inst.argval), bool(inst.arg & 1))


def _load_global(tx, name):
    root = tx.root
    if tx.f_globals is root.f_globals and name in root.global_overrides:
        return root.global_overrides[name]
    if name in tx.f_globals:
        return tx.wrap(tx.f_globals[name], tx.global_source(name))
    bltins = tx.f_globals.get("__builtins__", root.f_builtins)
    bltins = bltins if isinstance(bltins, dict) else vars(bltins)
    if name in bltins:
        return tx.wrap(bltins[name], None)
    raise Unsupported("name_error", f"name {name!r} is not defined")


@op("STORE_GLOBAL")
def STORE_GLOBAL(tx, inst):
    if tx.f_globals is not tx.root.f_globals:
        raise Unsupported("global_store", "global store from a function of another module")
    value = tx.pop()
    tx.root.global_overrides[inst.argval] = value
    tx.side_effects.store_global(inst.argval, value)


# --- attributes and items -----------------------------------------------------------------------

@op("LOAD_ATTR")
def LOAD_ATTR(tx, inst):
    obj = tx.pop()
    _push_callable(tx, tx.getattr(obj, inst.argval), PY >= V312 and bool(inst.arg & 1))


@op("LOAD_METHOD", (V311,))
def LOAD_METHOD(tx, inst):
    obj = tx.pop()
    tx.push(NULL)
    tx.push(tx.getattr(obj, inst.argval))


@op("LOAD_SUPER_ATTR", (V312, V313))
def LOAD_SUPER_ATTR(tx, inst):
    obj, cls, _super = tx.pop(), tx.pop(), tx.pop()
    attr = SuperVariable(cls.as_python_constant(), obj).var_getattr(tx, inst.argval)
    _push_callable(tx, attr, bool(inst.arg & 1))


@op("STORE_ATTR")
def STORE_ATTR(tx, inst):
    obj = tx.pop()
    value = tx.pop()
    obj.setattr(tx, inst.argval, value)


@op("DELETE_ATTR")
def DELETE_ATTR(tx, inst):
    tx.pop().delattr(tx, inst.argval)


@op("BINARY_SUBSCR")
def BINARY_SUBSCR(tx, inst):
    key = tx.pop()
    obj = tx.pop()
    tx.push(tx.getitem(obj, key))


@op("STORE_SUBSCR")
def STORE_SUBSCR(tx, inst):
    key, obj, value = tx.pop(), tx.pop(), tx.pop()
    B.call_builtin(tx, operator.setitem, [obj, key, value], {})


@op("DELETE_SUBSCR")
def DELETE_SUBSCR(tx, inst):
    key, obj = tx.pop(), tx.pop()
    if isinstance(obj, TensorVariable):
        raise Unsupported("tensor_delitem", "del on a tensor item")
    obj.call_method(tx, "__delitem__", [key], {})


@op("BINARY_SLICE", (V312, V313))
def BINARY_SLICE(tx, inst):
    stop, start, obj = tx.pop(), tx.pop(), tx.pop()
    tx.push(tx.getitem(obj, SliceVariable([start, stop, ConstantVariable(None)])))


@op("STORE_SLICE", (V312, V313))
def STORE_SLICE(tx, inst):
    stop, start, obj, value = tx.pop(), tx.pop(), tx.pop(), tx.pop()
    B.call_builtin(tx, operator.setitem, [obj, SliceVariable([start, stop, ConstantVariable(None)]), value], {})


@op("BUILD_SLICE")
def BUILD_SLICE(tx, inst):
    items = tx.popn(inst.arg)
    if len(items) == 2:
        items.append(ConstantVariable(None))
    tx.push(SliceVariable(items))


# --- operators ------------------------------------------------------------------------------------

@op("BINARY_OP")
def BINARY_OP(tx, inst):
    b, a = tx.pop(), tx.pop()
    tx.push(B.binary_op(tx, _BINARY_OPS[inst.arg], a, b))


@op("COMPARE_OP")
def COMPARE_OP(tx, inst):
    b, a = tx.pop(), tx.pop()
    res = B.compare(tx, _COMPARE[inst.argval], a, b)
    if PY >= V313 and inst.arg & 16 and not _truth_at_jump(tx):  # 3.13: coerced to bool
        res = ConstantVariable(res.truthy(tx))
    tx.push(res)


@op("TO_BOOL", (V313,))
def TO_BOOL(tx, inst):
    """bool(TOS) (3.13). Before a conditional jump the value stays as it is: the jump decides
    its truth, as on 3.11/3.12, so a tensor's breaks the graph at the jump with the tensor
    computed in the graph (bytecode.resume converts it in the break code)."""
    if not _truth_at_jump(tx):
        tx.push(ConstantVariable(tx.pop().truthy(tx)))


def _truth_at_jump(tx) -> bool:
    """Is the next instruction a POP_JUMP_IF_TRUE/FALSE (that decides the truth itself)?"""
    k = tx.ip
    while k < len(tx.instructions) and tx.instructions[k].opname == "EXTENDED_ARG":
        k += 1
    return k < len(tx.instructions) and tx.instructions[k].opname in ("POP_JUMP_IF_TRUE",
                                                                        "POP_JUMP_IF_FALSE")


@op("IS_OP")
def IS_OP(tx, inst):
    b, a = tx.pop(), tx.pop()
    tx.push(B.compare(tx, operator.is_not if inst.arg else operator.is_, a, b))


@op("CONTAINS_OP")
def CONTAINS_OP(tx, inst):
    container, item = tx.pop(), tx.pop()
    res = tx.contains_op(container, item)
    if inst.arg:
        res = ConstantVariable(not res.truthy(tx))
    tx.push(res)


def _unary(fn):
    def h(tx, inst):
        tx.push(B.call_builtin(tx, fn, [tx.pop()], {}))
    return h


for _name, _fn, _vers in (("UNARY_NEGATIVE", operator.neg, ALL), ("UNARY_POSITIVE", operator.pos, (V311,)),
                          ("UNARY_INVERT", operator.invert, ALL), ("UNARY_NOT", operator.not_, ALL)):
    op(_name, _vers)(_unary(_fn))


@op("CALL_INTRINSIC_1", (V312, V313))
def CALL_INTRINSIC_1(tx, inst):
    # 5: INTRINSIC_UNARY_POSITIVE, 6: INTRINSIC_LIST_TO_TUPLE
    if inst.arg == 5:
        tx.push(B.call_builtin(tx, operator.pos, [tx.pop()], {}))
    elif inst.arg == 6:
        tx.push(TupleVariable(tx.pop().items))
    elif inst.arg == 3:
        raise Unsupported("generator", "StopIteration inside a generator")
    else:
        raise Unsupported("intrinsic", f"CALL_INTRINSIC_1 {inst.argrepr}")


# --- building containers --------------------------------------------------------------------------

@op("BUILD_TUPLE")
def BUILD_TUPLE(tx, inst):
    tx.push(TupleVariable(tx.popn(inst.arg)))


@op("BUILD_LIST")
def BUILD_LIST(tx, inst):
    tx.push(ListVariable(tx.popn(inst.arg)))


@op("BUILD_SET")
def BUILD_SET(tx, inst):
    tx.push(SetVariable(tx.popn(inst.arg)))


@op("BUILD_MAP")
def BUILD_MAP(tx, inst):
    flat = tx.popn(2 * inst.arg)
    d = ConstDictVariable({})
    for k, v in zip(flat[::2], flat[1::2]):
        d.items[d._key(k)] = v
    tx.push(d)


@op("BUILD_CONST_KEY_MAP")
def BUILD_CONST_KEY_MAP(tx, inst):
    keys = tx.pop().as_python_constant()
    values = tx.popn(inst.arg)
    tx.push(ConstDictVariable(dict(zip(keys, values))))


@op("LIST_APPEND")
def LIST_APPEND(tx, inst):
    v = tx.pop()
    target = tx.stack[-inst.arg]
    if target.source is not None:  # a resume function's argument: the mutation is replayed
        target.call_method(tx, "append", [v], {})
    else:
        target.items.append(v)


@op("SET_ADD")
def SET_ADD(tx, inst):
    v = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "add", [v], {})


@op("MAP_ADD")
def MAP_ADD(tx, inst):
    v, k = tx.pop(), tx.pop()
    d = tx.stack[-inst.arg]
    if d.source is not None:  # a resume function's argument: the mutation is replayed
        d.call_method(tx, "__setitem__", [k, v], {})
    else:
        d.items[d._key(k)] = v


@op("LIST_EXTEND")
def LIST_EXTEND(tx, inst):
    v = tx.pop()
    target = tx.stack[-inst.arg]
    if target.source is not None:
        target.call_method(tx, "extend", [v], {})
    else:
        target.items.extend(tx.unpack(v))


@op("SET_UPDATE")
def SET_UPDATE(tx, inst):
    v = tx.pop()
    tx.stack[-inst.arg].call_method(tx, "update", [v], {})


@op("DICT_UPDATE")
@op("DICT_MERGE")
def DICT_UPDATE(tx, inst):
    v = tx.pop()
    d = tx.stack[-inst.arg]
    if isinstance(v, ConstDictVariable):
        items = v.items
    elif hasattr(v, "mapping_items"):   # a mapping tracker (dict subclass, ModelOutput): its protocol
        items = v.mapping_items(tx)
    else:
        raise Unsupported("dict_merge", f"** of {v}")
    if inst.opname == "DICT_MERGE" and set(items) & set(d.items):
        raise Unsupported("bad_call", "got multiple values for a keyword argument")
    d.items.update(items)




@op("LIST_TO_TUPLE", (V311,))
def LIST_TO_TUPLE(tx, inst):
    tx.push(TupleVariable(tx.pop().items))


@op("UNPACK_SEQUENCE")
def UNPACK_SEQUENCE(tx, inst):
    items = tx.unpack(tx.pop())
    if len(items) != inst.arg:
        raise Unsupported("unpack", f"cannot unpack {len(items)} values into {inst.arg}")
    for v in reversed(items):
        tx.push(v)


@op("UNPACK_EX")
def UNPACK_EX(tx, inst):
    items = tx.unpack(tx.pop())
    before, after = inst.arg & 0xFF, inst.arg >> 8
    if len(items) < before + after:
        raise Unsupported("unpack", "not enough values to unpack")
    mid = ListVariable(items[before:len(items) - after])
    for v in reversed(items[:before] + [mid] + items[len(items) - after:]):
        tx.push(v)


def _formatted(tx, value, conv: int, spec) -> VariableTracker:
    """f-string piece: conversion (0 none, 1 str, 2 repr, 3 ascii), then format(value, spec)."""
    if isinstance(value, TensorVariable):
        raise Unsupported("format_tensor", "formatting a tensor into a string reads its data")
    v = value.as_python_constant()
    v = {0: lambda x: x, 1: str, 2: repr, 3: ascii}[conv](v)
    return ConstantVariable(format(v, spec))


@op("FORMAT_VALUE", (V311, V312))
def FORMAT_VALUE(tx, inst):
    spec = tx.pop().as_python_constant() if inst.arg & 0x04 else ""
    tx.push(_formatted(tx, tx.pop(), inst.arg & 0x03, spec))


@op("CONVERT_VALUE", (V313,))
def CONVERT_VALUE(tx, inst):
    tx.push(_formatted(tx, tx.pop(), inst.arg, ""))


@op("FORMAT_SIMPLE", (V313,))
def FORMAT_SIMPLE(tx, inst):
    tx.push(_formatted(tx, tx.pop(), 0, ""))


@op("FORMAT_WITH_SPEC", (V313,))
def FORMAT_WITH_SPEC(tx, inst):
    spec = tx.pop().as_python_constant()
    tx.push(_formatted(tx, tx.pop(), 0, spec))


@op("BUILD_STRING")
def BUILD_STRING(tx, inst):
    parts = tx.popn(inst.arg)
    tx.push(ConstantVariable("".join(p.as_python_constant() for p in parts)))


# --- calls and functions --------------------------------------------------------------------------

@op("KW_NAMES", (V311, V312))
def KW_NAMES(tx, inst):
    tx.kw_names = tuple(tx.code.co_consts[inst.arg])


def _call(tx, nargs: int, kw_names: tuple) -> None:
    args = tx.popn(nargs)
    second, first = tx.pop(), tx.pop()
    if PY >= V313:  # [callable, NULL | self, *args]
        fn, args = (first, args) if second is NULL else (first, [second, *args])
    elif first is NULL:  # [NULL | callable, callable | self, *args]
        fn = second
    else:
        fn, args = first, [second, *args]
    kwargs = {}
    if kw_names:
        n = len(kw_names)
        kwargs = dict(zip(kw_names, args[-n:]))
        args = args[:-n]
    tx.push(tx.call(fn, args, kwargs))


@op("CALL")
def CALL(tx, inst):
    kw_names, tx.kw_names = tx.kw_names, ()
    _call(tx, inst.arg, kw_names)


@op("CALL_KW", (V313,))
def CALL_KW(tx, inst):
    _call(tx, inst.arg, tuple(tx.pop().as_python_constant()))


@op("CALL_FUNCTION_EX")
def CALL_FUNCTION_EX(tx, inst):
    kwargs = tx.pop() if inst.arg & 1 else ConstDictVariable({})
    args = tx.pop()
    fn = tx.pop()
    null = tx.pop()
    if PY >= V313:  # [callable, NULL, args(, kwargs)]: the slot above the callable is unused
        fn = null
    elif null is not NULL:  # method form: [callable, self] below the args
        fn, args = null, TupleVariable([fn, *tx.unpack(args)])
    if not isinstance(kwargs, ConstDictVariable):
        raise Unsupported("call_ex", f"** of {kwargs}")
    tx.push(tx.call(fn, tx.unpack(args), {str(k): v for k, v in kwargs.items.items()}))


@op("MAKE_FUNCTION", (V311, V312))
def MAKE_FUNCTION(tx, inst):
    code = tx.pop().as_python_constant()
    fn = NestedUserFunctionVariable(code, code.co_qualname, tx.f_globals, (), {}, ())
    for flag in (0x08, 0x04, 0x02, 0x01):  # popped in this order: closure on top
        if inst.arg & flag:
            _set_function_attribute(fn, flag, tx.pop())
    tx.push(fn)


@op("MAKE_FUNCTION", (V313,))
def MAKE_FUNCTION_313(tx, inst):
    """3.13: a bare function; SET_FUNCTION_ATTRIBUTE adds closure, defaults, ... one by one."""
    code = tx.pop().as_python_constant()
    tx.push(NestedUserFunctionVariable(code, code.co_qualname, tx.f_globals, (), {}, ()))


@op("SET_FUNCTION_ATTRIBUTE", (V313,))
def SET_FUNCTION_ATTRIBUTE(tx, inst):
    fn = tx.pop()
    _set_function_attribute(fn, inst.arg, tx.pop())
    tx.push(fn)


def _set_function_attribute(fn, flag: int, value) -> None:
    if flag == 0x08:
        fn.closure = tuple(value.items)
    elif flag == 0x02:
        fn.kwdefaults = dict(value.items)
    elif flag == 0x01:
        fn.defaults = tuple(value.items)
    # 0x04 annotations (and 3.13's 0x10 none): not needed to run the function


@op("IMPORT_NAME")
def IMPORT_NAME(tx, inst):
    fromlist, level = tx.pop(), tx.pop()
    name = inst.argval
    if level.as_python_constant() != 0 or name not in sys.modules:
        raise Unsupported("import", f"import of {name!r} inside the compiled region")
    mod = sys.modules[name]
    if not fromlist.as_python_constant():
        mod = sys.modules[name.partition(".")[0]]
    tx.push(ObjectVariable(mod))


@op("IMPORT_FROM")
def IMPORT_FROM(tx, inst):
    mod = tx.stack[-1]
    tx.push(tx.getattr(mod, inst.argval))


# --- control flow ---------------------------------------------------------------------------------

@op("JUMP_FORWARD")
@op("JUMP_BACKWARD")
@op("JUMP_BACKWARD_NO_INTERRUPT")
def JUMP_FORWARD(tx, inst):
    tx.jump(inst)




def _is_none(v) -> bool:
    return isinstance(v, ConstantVariable) and v.value is None


def _pop_jump(pred):
    def h(tx, inst):
        if pred(tx, tx.pop()):
            tx.jump(inst)
    return h


_JUMPS = {
    "IF_TRUE": lambda tx, v: v.truthy(tx),
    "IF_FALSE": lambda tx, v: not v.truthy(tx),
    "IF_NONE": lambda tx, v: _is_none(v),
    "IF_NOT_NONE": lambda tx, v: not _is_none(v),
}
for _cond, _pred in _JUMPS.items():
    op(f"POP_JUMP_{_cond}", (V312, V313))(_pop_jump(_pred))
    op(f"POP_JUMP_FORWARD_{_cond}", (V311,))(_pop_jump(_pred))
    op(f"POP_JUMP_BACKWARD_{_cond}", (V311,))(_pop_jump(_pred))


@op("JUMP_IF_FALSE_OR_POP", (V311,))
def JUMP_IF_FALSE_OR_POP(tx, inst):
    if not tx.stack[-1].truthy(tx):
        tx.jump(inst)
    else:
        tx.pop()


@op("JUMP_IF_TRUE_OR_POP", (V311,))
def JUMP_IF_TRUE_OR_POP(tx, inst):
    if tx.stack[-1].truthy(tx):
        tx.jump(inst)
    else:
        tx.pop()


@op("GET_ITER")
def GET_ITER(tx, inst):
    v = tx.pop()
    if isinstance(v, ListIteratorVariable):
        tx.push(v)
    elif isinstance(v, ConstDictVariable):
        tx.push(ListIteratorVariable(v.unpack_var_sequence(tx)))
    elif v.has_unpack_var_sequence(tx):
        tx.push(ListIteratorVariable(v.unpack_var_sequence(tx)))
    else:
        tx.push(v.call_method(tx, "__iter__", [], {}))


@op("FOR_ITER")
def FOR_ITER(tx, inst):
    it = tx.stack[-1]
    if not hasattr(it, "next_variable"):   # an iterator the frame was given (a comprehension's .0)
        raise Unsupported("unknown_value", f"iterating {it}, which pydynamo cannot trace")
    try:
        tx.push(it.next_variable(tx))
    except StopIteration:
        tx.pop()
        tx.jump(inst)
        if PY >= V312 and tx.instructions[tx.ip].opname == "END_FOR":
            # 3.12 pops the iterator itself and skips END_FOR; 3.13 also the POP_TOP after it
            tx.ip += 1 if PY == V312 else 2


@op("END_FOR", (V312,))
def END_FOR(tx, inst):
    tx.popn(2)


@op("END_FOR", (V313,))
def END_FOR_313(tx, inst):
    tx.pop()  # 3.13: the value only; a POP_TOP follows for the iterator


@op("RETURN_GENERATOR")
def RETURN_GENERATOR(tx, inst):
    """Start of a generator body (every version): the value 'sent' on first resume is None."""
    if getattr(tx, "yields", None) is None:
        raise Unsupported("generator", "generator frame")
    tx.push(ConstantVariable(None))


@op("YIELD_VALUE")
def YIELD_VALUE(tx, inst):
    """Generators are run to completion when called (every version): collect the value, resume with None."""
    if getattr(tx, "yields", None) is None:
        raise Unsupported("generator", "yield outside an inlined generator")
    tx.yields.append(tx.pop())
    tx.push(ConstantVariable(None))


@op("BEFORE_WITH")
def BEFORE_WITH(tx, inst):
    ctx = tx.pop()
    enter = ctx.call_method(tx, "__enter__", [], {})
    tx.push(WithExitVariable(ctx))
    tx.push(enter)


# module-level sanity: every handler name exists in some supported interpreter's opcode set
assert all(isinstance(h, Handler) for hs in HANDLERS.values() for h in hs)

"""Emit helpers: short instruction sequences for common actions, per Python version.

Every helper returns a *new list* of fresh `Instruction`s, so results can be concatenated
freely.  Version differences live here, one helper per topic, and nowhere else above this
package:

* loads of globals/methods that also push NULL (LOAD_GLOBAL low bit on every version;
  3.11 LOAD_METHOD vs 3.12+ LOAD_ATTR method bit);
* calls: 3.11 ``[KW_NAMES] PRECALL n CALL n``, 3.12 ``[KW_NAMES] CALL n``, 3.13 ``CALL n`` or
  ``LOAD_CONST names; CALL_KW n``.  3.11/3.12 expect the stack ``NULL, callable, *positional,
  *keyword values`` (or ``method, self, ...``); 3.13 ``callable, NULL, ...`` (or ``method,
  self, ...``).  `callable_` pushes a callable with its NULL in the right place;
* MAKE_FUNCTION: 3.11/3.12 flags in its arg, 3.13 one SET_FUNCTION_ATTRIBUTE per attribute;
* returns: 3.12+ ``RETURN_CONST``, 3.11 ``LOAD_CONST; RETURN_VALUE``;
* the frame prologue (COPY_FREE_VARS, MAKE_CELL, RESUME).

Stack comments use ``[... , a, b]`` with the top of stack on the right.
"""
from __future__ import annotations

import dis
from types import CodeType
from typing import Any, Iterable, Sequence

from pydynamo.bytecode import opcodes as ops
from pydynamo.bytecode.instruction import Instruction

Seq = list[Instruction]

_NB_OPS = {symbol: i for i, (_, symbol) in enumerate(dis._nb_ops)}  # "+" -> 0, "+=" -> 13 ...


# -- frame prologue / epilogue -----------------------------------------------------------------

def prologue(code: CodeType) -> Seq:
    """COPY_FREE_VARS / MAKE_CELL / RESUME as CPython starts a frame of `code`'s layout.

    Generators' RETURN_GENERATOR is not emitted: the frame hook never transforms them."""
    out: Seq = []
    if code.co_freevars:
        out.append(Instruction("COPY_FREE_VARS", len(code.co_freevars)))
    out += [Instruction("MAKE_CELL", argval=name) for name in code.co_cellvars]
    out.append(Instruction("RESUME", 0))
    return out


def return_value() -> Seq:
    return [Instruction("RETURN_VALUE")]


def return_const(value: Any) -> Seq:
    if "RETURN_CONST" in ops.OPMAP:
        return [Instruction("RETURN_CONST", argval=value)]
    return [Instruction("LOAD_CONST", argval=value), Instruction("RETURN_VALUE")]


# -- loads and stores --------------------------------------------------------------------------

def load_const(value: Any) -> Seq:
    return [Instruction("LOAD_CONST", argval=value)]


def load_fast(name: str, checked: bool = False) -> Seq:
    """Push a plain local.  3.12's LOAD_FAST assumes the local is bound (an unbound one pushes
    NULL and may crash later): pass checked=True unless it is known to be bound, to raise
    UnboundLocalError instead (LOAD_FAST_CHECK; 3.11's LOAD_FAST always checks)."""
    return [Instruction("LOAD_FAST_CHECK" if checked and not ops.PY311 else "LOAD_FAST",
                        argval=name)]


def store_fast(name: str) -> Seq:
    return [Instruction("STORE_FAST", argval=name)]


def delete_fast(name: str) -> Seq:
    return [Instruction("DELETE_FAST", argval=name)]


def load_deref(name: str) -> Seq:
    """Contents of a cell or free variable."""
    return [Instruction("LOAD_DEREF", argval=name)]


def store_deref(name: str) -> Seq:
    return [Instruction("STORE_DEREF", argval=name)]


def load_closure(name: str) -> Seq:
    """The cell object itself (for building a closure tuple; 3.13's LOAD_CLOSURE is a pseudo-op
    for LOAD_FAST of the cell's slot)."""
    return [Instruction("LOAD_FAST" if ops.PY313 else "LOAD_CLOSURE", argval=name)]


def load_local(code: CodeType, name: str) -> Seq:
    """Value of local `name` of `code`, whether a plain local or a cell/free variable."""
    if name in code.co_cellvars or name in code.co_freevars:
        return load_deref(name)
    return load_fast(name)


def store_local(code: CodeType, name: str) -> Seq:
    if name in code.co_cellvars or name in code.co_freevars:
        return store_deref(name)
    return store_fast(name)


def load_global(name: str, push_null: bool = False) -> Seq:
    """[...] -> [..., NULL, value] when push_null (3.13: [..., value, NULL]; ready for `call`),
    else [..., value]."""
    return [Instruction("LOAD_GLOBAL", int(push_null), argval=name)]


def store_global(name: str) -> Seq:
    return [Instruction("STORE_GLOBAL", argval=name)]


def push_null() -> Seq:
    return [Instruction("PUSH_NULL")]


def load_attr(name: str) -> Seq:
    """[..., obj] -> [..., obj.name]"""
    return [Instruction("LOAD_ATTR", 0, argval=name)]


def load_method(name: str) -> Seq:
    """[..., obj] -> [..., meth, obj] or [..., NULL, obj.name] (3.13: [..., obj.name, NULL]):
    ready for `call`."""
    if ops.PY311:
        return [Instruction("LOAD_METHOD", argval=name)]
    return [Instruction("LOAD_ATTR", 1, argval=name)]


def store_attr(name: str) -> Seq:
    """[..., value, obj] -> [...]  (obj.name = value)"""
    return [Instruction("STORE_ATTR", argval=name)]


def load_attrs(dotted: Iterable[str]) -> Seq:
    """[..., obj] -> [..., obj.a.b.c] for dotted = ("a", "b", "c")."""
    return [i for name in dotted for i in load_attr(name)]


def binary_subscr() -> Seq:
    """[..., container, key] -> [..., container[key]]"""
    return [Instruction("BINARY_SUBSCR")]


def store_subscr() -> Seq:
    """[..., value, container, key] -> [...]  (container[key] = value)"""
    return [Instruction("STORE_SUBSCR")]


def subscr_const(key: Any) -> Seq:
    """[..., container] -> [..., container[key]]"""
    return load_const(key) + binary_subscr()


# -- calls -------------------------------------------------------------------------------------

def callable_(fn: Seq) -> Seq:
    """[...] -> a callable ready for `call`: `fn` pushes the callable; NULL goes below it
    (3.11/3.12) or above it (3.13)."""
    return list(fn) + push_null() if ops.PY313 else push_null() + list(fn)


def call(nargs: int, kw_names: Sequence[str] = ()) -> Seq:
    """[..., NULL|meth, callable|self, *args] -> [..., result] (3.13: [..., callable|meth,
    NULL|self, *args]).

    `nargs` counts all arguments on the stack; the last len(kw_names) are keyword values."""
    kw = list(kw_names)
    if len(kw) > nargs:
        raise ValueError("more keyword names than arguments")
    if ops.PY313:
        if kw:
            return load_const(tuple(kw)) + [Instruction("CALL_KW", nargs)]
        return [Instruction("CALL", nargs)]
    out: Seq = [Instruction("KW_NAMES", argval=tuple(kw))] if kw else []
    if ops.PY311:
        out.append(Instruction("PRECALL", nargs))
    out.append(Instruction("CALL", nargs))
    return out


def call_function(fn: Seq, args: Sequence[Seq] = (), kwargs: dict[str, Seq] | None = None,
                  *, fn_pushes_null: bool = False) -> Seq:
    """Complete sequence `fn(*args, **kwargs)`: [...] -> [..., result].

    `fn`, each arg and each kwarg value are sequences that push one value (`fn` may push
    NULL + value itself, e.g. `load_global(name, push_null=True)`; then say fn_pushes_null)."""
    kwargs = kwargs or {}
    out = list(fn) if fn_pushes_null else callable_(fn)
    for a in args:
        out += a
    for v in kwargs.values():
        out += v
    return out + call(len(args) + len(kwargs), tuple(kwargs))


def call_method(obj: Seq, name: str, args: Sequence[Seq] = ()) -> Seq:
    """`obj.name(*args)`: [...] -> [..., result]."""
    out = list(obj) + load_method(name)
    for a in args:
        out += a
    return out + call(len(args))


def call_function_ex(has_kwargs: bool) -> Seq:
    """[..., NULL, callable, args_tuple(, kwargs_dict)] -> [..., result] (3.13: callable
    below NULL, as `callable_` pushes them)."""
    return [Instruction("CALL_FUNCTION_EX", int(has_kwargs))]


def make_function(code: CodeType, closure: Sequence[str] = ()) -> Seq:
    """[...] -> [..., function]; `closure` names the cells (LOAD_CLOSURE) in code.co_freevars
    order.  Name and qualname come from the code object on both versions."""
    if list(closure) and len(closure) != len(code.co_freevars):
        raise ValueError(f"closure needs {len(code.co_freevars)} cells, got {len(closure)}")
    out: Seq = []
    flags = 0
    if code.co_freevars:
        out += [i for name in closure for i in load_closure(name)]
        out += build_tuple(len(closure))
        flags |= 0x08
    if ops.PY313:
        attrs = [Instruction("SET_FUNCTION_ATTRIBUTE", 0x08)] if flags else []
        return out + load_const(code) + [Instruction("MAKE_FUNCTION")] + attrs
    return out + load_const(code) + [Instruction("MAKE_FUNCTION", flags)]


# -- operators ---------------------------------------------------------------------------------

def binary_op(symbol: str) -> Seq:
    """[..., a, b] -> [..., a <symbol> b]; symbol as written in Python ("+", "//", "+=" ...)."""
    return [Instruction("BINARY_OP", _NB_OPS[symbol])]


def compare_op(symbol: str) -> Seq:
    """[..., a, b] -> [..., a <symbol> b] for one of dis.cmp_op."""
    return [Instruction("COMPARE_OP", argval=symbol)]


def is_op(negate: bool = False) -> Seq:
    return [Instruction("IS_OP", int(negate))]


def contains_op(negate: bool = False) -> Seq:
    return [Instruction("CONTAINS_OP", int(negate))]


# -- containers --------------------------------------------------------------------------------

def build_tuple(n: int) -> Seq:
    return [Instruction("BUILD_TUPLE", n)]


def build_list(n: int) -> Seq:
    return [Instruction("BUILD_LIST", n)]


def build_map(n: int) -> Seq:
    """[..., k1, v1, ..., kn, vn] -> [..., {k1: v1, ...}]"""
    return [Instruction("BUILD_MAP", n)]


def build_const_key_map(keys: Sequence[Any]) -> Seq:
    """[..., v1, ..., vn] -> [..., dict(zip(keys, values))]"""
    return load_const(tuple(keys)) + [Instruction("BUILD_CONST_KEY_MAP", len(keys))]


def unpack_sequence(n: int) -> Seq:
    """[..., seq] -> [..., seq[n-1], ..., seq[0]] (seq[0] on top)."""
    return [Instruction("UNPACK_SEQUENCE", n)]


def unpack_ex(before: int, after: int) -> Seq:
    """[..., seq] -> [..., seq[-1], ..., rest_list, ..., seq[0]] for `a, *rest, b = seq`
    (`before` names before the star, `after` after it; seq[0] on top)."""
    return [Instruction("UNPACK_EX", before | (after << 8))]


def dict_update() -> Seq:
    """[..., d, mapping] -> [..., d] after d.update(mapping) (`{**m}` semantics)."""
    return [Instruction("DICT_UPDATE", 1)]


def list_extend() -> Seq:
    """[..., lst, iterable] -> [..., lst] after lst.extend(iterable)."""
    return [Instruction("LIST_EXTEND", 1)]


def list_to_tuple() -> Seq:
    return [Instruction("CALL_INTRINSIC_1", _intrinsic("INTRINSIC_LIST_TO_TUPLE"))] \
        if not ops.PY311 else [Instruction("LIST_TO_TUPLE")]


def _intrinsic(name: str) -> int:
    import opcode
    return opcode._intrinsic_1_descs.index(name)


# -- stack shuffles ----------------------------------------------------------------------------

def pop_top() -> Seq:
    return [Instruction("POP_TOP")]


def pop_null() -> Seq:
    """[..., NULL] -> [...]: POP_TOP cannot pop NULL, so call a no-op through it (3.13 calls
    the slot below NULL: the no-op goes there)."""
    if ops.PY313:
        return load_const(_noop) + swap(2) + call(0) + pop_top()
    return load_const(_noop) + call(0) + pop_top()


def _noop() -> None:
    return None


def copy(i: int = 1) -> Seq:
    """Push a copy of the i-th item from the top (1 = TOS)."""
    return [Instruction("COPY", i)]


def swap(i: int) -> Seq:
    """Swap TOS with the i-th item from the top."""
    return [Instruction("SWAP", i)]


def rot_n(n: int) -> Seq:
    """Move TOS down to position n, lifting the n-1 items above it: [a, b, c] -> [c, a, b]."""
    return [Instruction("SWAP", i) for i in range(n, 1, -1)]


# -- control flow ------------------------------------------------------------------------------

def jump(target: Instruction) -> Seq:
    """Unconditional jump; the assembler picks forward/backward."""
    return [Instruction("JUMP", target=target)]


def pop_jump_if(truth: bool, target: Instruction) -> Seq:
    """[..., cond] -> [...]; jump when bool(cond) is `truth` (forward only on 3.12+; 3.13's
    conditional jumps take an exact bool, so TO_BOOL converts first)."""
    jump_ = Instruction("POP_JUMP_IF_TRUE" if truth else "POP_JUMP_IF_FALSE", target=target)
    return [Instruction("TO_BOOL"), jump_] if ops.PY313 else [jump_]

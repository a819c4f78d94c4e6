"""Facts about the running interpreter's opcodes, gathered in one place.

Everything here is read from `dis`/`opcode` of the running CPython (3.11, 3.12 or 3.13); no
opcode number or stack effect is hard-coded.  The few version differences that cannot be read from
those modules (which opcodes keep flag bits below their name index, which jump opcodes come in
forward/backward pairs) are tables keyed by *name*, with one entry per version.

Vocabulary used by the rest of pydynamo.bytecode:

* *real* opcode: one that can appear in ``co_code`` (< 256; 3.12 pseudo-ops are excluded).
* *virtual* name: a direction-free jump name accepted by ``Instruction(...)``
  (``"JUMP"``, ``"POP_JUMP_IF_FALSE"``, … on 3.11); the assembler picks the forward or backward
  real opcode once it knows where the target lies.
* ``arg_kind(opname)``: how an instruction's ``argval`` maps to its ``arg`` -- one of
  ``"const"``, ``"name"``, ``"local"`` (index into localsplus), ``"free"`` (index into
  localsplus too, since 3.11), ``"local_pair"`` (3.13's LOAD_FAST_LOAD_FAST, STORE_FAST_LOAD_FAST,
  STORE_FAST_STORE_FAST: two 4-bit localsplus indices, first name in the high nibble; ``argval``
  is the pair of names), ``"jump"``, ``"compare"``, ``"int"`` or ``None`` (no argument).
"""
from __future__ import annotations

import dis
import opcode
import sys

from pydynamo.versions import unsupported_python

PY311 = sys.version_info[:2] == (3, 11)
PY312 = sys.version_info[:2] == (3, 12)
PY313 = sys.version_info[:2] == (3, 13)
if unsupported_python():  # fail closed; eval_frame never gets here on such a Python (eager + warning)
    raise ImportError(unsupported_python())

OPMAP: dict[str, int] = {name: op for name, op in opcode.opmap.items() if op < 256}
OPNAME: dict[int, str] = {op: name for name, op in OPMAP.items()}
HAVE_ARGUMENT: int = opcode.HAVE_ARGUMENT
EXTENDED_ARG: int = opcode.EXTENDED_ARG
CACHE: int = OPMAP["CACHE"]
# 3.12+ list the opcodes that take an argument (3.13's WITH_EXCEPT_START sits at HAVE_ARGUMENT
# and takes none); 3.11 has only the threshold.
_HASARG = frozenset(OPNAME[op] for op in getattr(opcode, "hasarg", range(HAVE_ARGUMENT, 256))
                    if op in OPNAME)

# 3.11/3.12: a list indexed by opcode; 3.13: a dict by name
_entries = opcode._inline_cache_entries
_CACHE_ENTRIES: dict[str, int] = {
    name: n for name, n in (_entries.items() if isinstance(_entries, dict)
                            else ((OPNAME.get(op), n) for op, n in enumerate(_entries)))
    if n and name in OPMAP
}


def _names(ops) -> frozenset[str]:
    return frozenset(OPNAME[op] for op in ops if op in OPNAME)


HASJREL = _names(opcode.hasjrel)
HASJABS = _names(opcode.hasjabs)  # empty on 3.11/3.12; kept so a future version fails loudly
JUMPS = HASJREL | HASJABS
HASCONST = _names(opcode.hasconst)
HASNAME = _names(opcode.hasname)
HASLOCAL = _names(opcode.haslocal)
HASFREE = _names(opcode.hasfree)
HASCOMPARE = _names(opcode.hascompare)
BACKWARD_JUMPS = frozenset(n for n in JUMPS if "BACKWARD" in n)

# Opcodes whose arg packs flag bits below the name/compare index: {opname: number of low bits}.
# 3.13's COMPARE_OP adds bit 4: coerce the result to bool (only before a conditional jump).
FLAG_BITS: dict[str, int] = (
    {"LOAD_GLOBAL": 1}
    if PY311
    else {"LOAD_GLOBAL": 1, "LOAD_ATTR": 1, "LOAD_SUPER_ATTR": 2, "COMPARE_OP": 4 if PY312 else 5}
)
# 3.13 superinstructions over two fast locals (compiler output only when both indices < 16).
LOCAL_PAIRS = frozenset(n for n in ("LOAD_FAST_LOAD_FAST", "STORE_FAST_LOAD_FAST",
                                    "STORE_FAST_STORE_FAST") if n in OPMAP)



def _compare_args() -> dict[str, int]:
    """COMPARE_OP arg per operator as this interpreter's compiler writes it (3.12 adds a
    result mask in the low bits that specialized forms rely on)."""
    out = {}
    for op in dis.cmp_op:
        code = compile(f"a {op} b", "<cmp>", "eval")
        out[op] = next(i.arg for i in dis.get_instructions(code) if i.opname == "COMPARE_OP")
    return out


COMPARE_ARGS = _compare_args()

# Unconditional transfers: the next instruction is not a successor.
UNCONDITIONAL_JUMPS = frozenset(
    n for n in ("JUMP_FORWARD", "JUMP_BACKWARD", "JUMP_BACKWARD_NO_INTERRUPT") if n in OPMAP
)
TERMINATORS = frozenset(
    n for n in ("RETURN_VALUE", "RETURN_CONST", "RAISE_VARARGS", "RERAISE") if n in OPMAP
) | UNCONDITIONAL_JUMPS


def _direction_pairs() -> dict[str, tuple[str, str]]:
    """virtual name -> (forward opname, backward opname)."""
    pairs: dict[str, tuple[str, str]] = {"JUMP": ("JUMP_FORWARD", "JUMP_BACKWARD")}
    for name in OPMAP:
        if "FORWARD_IF" in name:  # 3.11 conditional jumps come in pairs
            back = name.replace("FORWARD", "BACKWARD")
            pairs[name.replace("FORWARD_", "")] = (name, back)
            pairs[name] = pairs[back] = (name, back)
        elif name.startswith("POP_JUMP_IF"):  # 3.12: one direction-free opcode
            pairs[name] = (name, name)
    pairs["JUMP_FORWARD"] = pairs["JUMP_BACKWARD"] = pairs["JUMP"]
    return pairs


DIRECTION_PAIRS = _direction_pairs()
VIRTUAL_JUMPS = frozenset(n for n in DIRECTION_PAIRS if n not in OPMAP)


def cache_entries(opname: str) -> int:
    """Number of inline CACHE code units that follow `opname`."""
    return _CACHE_ENTRIES.get(opname, 0)


def _arg_kind(opname: str) -> str | None:
    if opname in JUMPS or opname in VIRTUAL_JUMPS:
        return "jump"
    if opname not in _HASARG:
        return None
    if opname in LOCAL_PAIRS:
        return "local_pair"
    for kind, table in (("const", HASCONST), ("name", HASNAME), ("local", HASLOCAL),
                        ("free", HASFREE), ("compare", HASCOMPARE)):
        if opname in table:
            return kind
    return "int"


_ARG_KINDS = {name: _arg_kind(name) for name in (*OPMAP, *VIRTUAL_JUMPS)}


def arg_kind(opname: str) -> str | None:
    return _ARG_KINDS[opname]


def has_arg(opname: str) -> bool:
    return _ARG_KINDS[opname] is not None


def is_backward(opname: str) -> bool:
    return opname in BACKWARD_JUMPS


def directed(opname: str, backward: bool) -> str:
    """The real opcode name for a jump in the given direction.

    Raises ValueError when the interpreter has no such opcode (e.g. a backward
    POP_JUMP_IF_* on 3.12 or a backward FOR_ITER): emit a forward jump over a JUMP instead.
    """
    fwd, back = DIRECTION_PAIRS.get(opname, (opname, opname))
    name = back if backward else fwd
    if is_backward(name) != backward:
        raise ValueError(f"{opname} cannot jump {'backward' if backward else 'forward'} "
                         f"on Python {sys.version_info[0]}.{sys.version_info[1]}")
    return name


# dis reports 0 for RETURN_GENERATOR, but the frame resumes with the sent value (None) pushed,
# which the following POP_TOP removes; CPython inserts this prologue after its own depth pass.
_EFFECT_OVERRIDES = {"RETURN_GENERATOR": 1}


def stack_effect(opname: str, arg: int | None, *, jump: bool | None = None) -> int:
    """Net stack effect from the interpreter (`jump=None`: the maximum of both branches)."""
    if opname in _EFFECT_OVERRIDES:
        return _EFFECT_OVERRIDES[opname]
    return dis.stack_effect(OPMAP[opname], arg if opname in _HASARG else None, jump=jump)

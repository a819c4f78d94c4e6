"""pydynamo.bytecode: read, edit and write CPython 3.11/3.12/3.13 code objects.

No layer above this one writes raw opcodes, offsets or table bytes.  Modules (each docstring is
the reference for its part):

* `instruction` -- `Instruction`, `ExnTabEntry`, `disassemble(code)`, `clone_instructions`.
* `assemble`    -- `make_code_like(template, insts)` (same frame layout as the template, new
                   locals allowed), `make_code(template, insts, CodeLayout)`, `CodeLayout`.
* `emit`        -- per-version instruction sequences: loads/stores, attributes, subscripts, calls
                   (positional and keyword), build/unpack, rot/swap, return, prologue.
* `analysis`    -- stack depth before each instruction, jump targets, liveness of locals,
                   with/try regions from the exception table.
* `resume`      -- `make_resume_function(code, offset, ...)`: continuation code objects, cached.
* `opcodes`     -- interpreter facts (read from `dis`/`opcode`), version tables by name.
* `tables`      -- exception-table and location-table byte encodings.

Typical use (the executor): ``insts = disassemble(code)``; build a new list from
``emit.prologue(code)`` plus ``emit.*`` sequences; ``make_code_like(code, new_insts)``.
"""
from pydynamo.bytecode.opcodes import PY311, PY312, PY313
from pydynamo.bytecode.instruction import (
    ExnTabEntry, Instruction, clone_instructions, disassemble, localsplus_names,
)
from pydynamo.bytecode.assemble import CodeLayout, make_code, make_code_like
from pydynamo.bytecode import analysis, emit
from pydynamo.bytecode.resume import (UNBOUND, ResumeFunction, make_break_function,
                                      make_resume_function, origin_of, set_origin, user_code_name,
                                      user_frame_name)

__all__ = [
    "PY311", "PY312", "PY313", "ExnTabEntry", "Instruction", "clone_instructions", "disassemble",
    "localsplus_names", "CodeLayout", "make_code", "make_code_like", "analysis", "emit",
    "UNBOUND", "ResumeFunction", "make_resume_function", "make_break_function", "origin_of", "set_origin",
    "user_code_name", "user_frame_name",
]

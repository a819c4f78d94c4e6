"""The CPython versions pydynamo supports: the one list every layer reads (a leaf module).

The frame hook (csrc/frame_compat.h), the bytecode toolkit (pydynamo.bytecode.opcodes), the
executor's opcode registry and the eager fallback on any other Python (eval_frame) all key on
`SUPPORTED_PYTHONS`; a new version is added here once its bytecode tables, handlers and frame
facts are in place (docs/PYTHON313.md says what that took for 3.13).
"""
from __future__ import annotations

import sys

SUPPORTED_PYTHONS: tuple[tuple[int, int], ...] = ((3, 11), (3, 12), (3, 13))


def unsupported_python(version=None) -> str | None:
    """Why this interpreter is not supported (a one-line message), or None when it is."""
    v = tuple((version or sys.version_info)[:2])
    if v in SUPPORTED_PYTHONS:
        return None
    names = ", ".join("%d.%d" % p for p in SUPPORTED_PYTHONS)
    return (f"pydynamo supports CPython {names}, not {v[0]}.{v[1]}: compiled functions run "
            "eagerly (uncompiled) on this Python")

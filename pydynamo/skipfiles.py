"""skipfiles: which code the frame hook never traces, and which files are not the user's.

A leaf (stdlib and torch's install path only): `convert_frame` asks `skip_reason(code)` on every
cache miss, the translator asks `is_library_file(filename)` to name a guard's origin in the
user's terms. Library code is the real stdlib, torch and pydynamo itself (and the `__new__` that
collections.namedtuple generates), except the embedded demo model (user code that lives inside the package) and torch.nn modules' `forward`s, which are
traced like user code.
"""
from __future__ import annotations

import os
import types
from typing import Optional

import torch


def _dirs() -> tuple:
    # the real stdlib (in a venv, sysconfig's "platstdlib" is the venv's lib dir: site-packages!)
    paths = {os.path.dirname(os.__file__), os.path.dirname(os.path.dirname(types.__file__))}
    paths = {p for p in paths if not p.rstrip(os.sep).endswith("lib")}
    paths.add(os.path.dirname(os.__file__))
    paths.add(os.path.dirname(torch.__file__))
    paths.add(os.path.dirname(os.path.abspath(__file__)))
    return tuple(os.path.realpath(p) + os.sep for p in paths)


_SKIP_DIRS = _dirs()
_NN_DIR = os.path.realpath(os.path.join(os.path.dirname(torch.__file__), "nn", "modules")) + os.sep
# The embedded demo model lives inside the package but is user code: it must be traced.
_USER_DIRS = (os.path.realpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "demo")) + os.sep,)

# filename -> its real path when library code, else None: os.path.realpath stats every
# component of the path (40-90 us a file, on the first call of every new process: the hook asks
# about torch.nn's Module.__call__ frames too); a process's code files do not move under it
_LIBRARY_PATHS: dict = {}


def _library_path(filename: str) -> Optional[str]:
    """The real path of `filename` when it is library code, else None."""
    try:
        return _LIBRARY_PATHS[filename]
    except KeyError:
        pass
    real = os.path.realpath(filename) if os.path.isabs(filename) else filename
    out = real if real.startswith(_SKIP_DIRS) and not real.startswith(_USER_DIRS) else None
    if os.path.isabs(filename):
        _LIBRARY_PATHS[filename] = out
    return out


def is_library_file(filename: str) -> bool:
    return filename.startswith("<frozen ") or _library_path(filename) is not None


def skip_reason(code: types.CodeType) -> Optional[str]:
    if code.co_flags & (0x20 | 0x80 | 0x100 | 0x200):
        return "generator or coroutine"
    if code.co_name == "<module>":
        return "module body"
    fname = code.co_filename
    if fname.startswith(("<pydynamo", "<frozen ")):
        return "pydynamo generated code or frozen stdlib"
    if fname == "<string>" and "_tuple_new" in code.co_names:
        # collections.namedtuple's __new__ (typing.NamedTuple's too): eval'd in globals whose
        # __builtins__ is empty, where output code cannot run (it names builtins); it only
        # builds the tuple
        return "namedtuple __new__"
    real = _library_path(fname)
    if real is not None:
        if code.co_name == "forward" and real.startswith(_NN_DIR):
            return None
        return "library code"
    return None

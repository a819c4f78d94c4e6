"""TENSOR_MATCH in C++: the hot guard path's tensor check, built at install time against torch.

A cache hit checks every tensor the frame reads (inputs and each parameter). Done in Python
that is about 390 ns a tensor (shape, stride(), is_neg(), _version, dtype, ... each a getter
call that allocates): 7.8 µs of guard for 20 tensors (benchmarks/bench_guards.py). A small
CPython extension (tensor_check.cpp, compiled against torch's headers, which torch ships)
checks one tensor against a prebuilt spec in ~35 ns (0.7 µs for the same 20 tensors).

Invariants:
  * `check(t, spec)` is the same predicate as the Python conditions guards.py emits for a
    TensorSpec (exact class, dtype, device, sizes/strides with None = any, requires_grad,
    inference, conj for complex, neg for floating/complex); any C++ exception is a miss.
  * Nothing is compiled on a user's first call after a normal install: the install builds
    pydynamo._tensor_check (CMakeLists.txt runs tensor_check_build.py with the target
    environment's torch) and `module()` imports it when pydynamo._tensor_check_info names the
    running torch build and this source. Only otherwise (torch upgraded or swapped after the
    install, an install without torch at build time, `prefer_installed` False) is it built on
    first use, once per (source, torch, Python, compiler), into the cache dir through
    codegen.codecache.load_extension, the kernel libraries' helper: written atomically,
    verified (key and content hash) before it is imported, rebuilt with one warning when
    damaged; a warm process compiles nothing. `origin()` says which one serves.
  * Optional: no compiler, no headers, a failed build or config.c_tensor_guards False
    ($PYDYNAMO_C_TENSOR_GUARDS=0) give `module() is None`, and guards.py emits the Python
    conditions instead (logged once).
"""
from __future__ import annotations

import contextlib
import importlib
import importlib.machinery
import importlib.util
import logging
import os
import sys
import threading

from codegen import codecache
from pydynamo import config
from pydynamo import tensor_check_build as build

log = logging.getLogger("pydynamo.guards")

SOURCE = build.source()

# False: ignore the installed build and use the cache dir's (the tests of the build on demand)
prefer_installed: bool = True

_lock = threading.Lock()
_state: dict = {}            # "mod": the loaded module or None once decided; "origin"


def _command(src: str, out: str) -> list:
    return build.command(codecache.CXX, src, out)


def _key() -> str:
    """Every input of the build: the source, torch (version, build, headers and libraries: the
    paths in the command), Python's ABI (version, EXT_SUFFIX), the compiler and its version."""
    import torch
    return codecache.key_of(SOURCE, torch.__version__, str(torch.version.git_version),
                            sys.version, build.EXT_SUFFIX,
                            " ".join(_command("SRC", "OUT")), codecache.compiler_version())


def _installed():
    """The install-time build, or None with why not (not installed, or made for another torch
    build or source: importing that could fail or, with another C++ ABI, misbehave)."""
    try:
        info = importlib.import_module("pydynamo._tensor_check_info")
    except ImportError:
        return None, "no install-time build"
    want = (build.torch_build(), build.source_hash(SOURCE))
    if (info.TORCH, info.SOURCE_SHA256) != want:
        return None, f"the install-time build is for {info.TORCH}, not {want[0]}"
    try:
        return importlib.import_module("pydynamo._tensor_check"), ""
    except ImportError as e:
        return None, f"the install-time build does not import ({e})"


def _load():
    """The extension from the cache through codecache.load_extension (the kernels' helper):
    verified before it is imported, a damaged or foreign file rebuilt with one warning."""
    import torch
    suffix = build.EXT_SUFFIX
    key = _key()

    def load(path):
        loader = importlib.machinery.ExtensionFileLoader("pydynamo._tensor_check", path)
        spec = importlib.util.spec_from_file_location("pydynamo._tensor_check", path, loader=loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod
    mod, _ = codecache.load_extension(
        os.path.join("guards", f"pd_tensor_check_{key[:32]}{suffix}"), key, SOURCE, _command,
        load, "C++ tensor guard extension", f"torch {torch.__version__}, Python "
        f"{sys.version.split()[0]}, {codecache.compiler_version()}")
    return mod


def origin() -> str:
    """Where module() came from: "installed", "cache" (built on demand), or "none"."""
    module()
    return _state["origin"]


def module():
    """The compiled extension, or None (disabled, or it could not be built: logged once)."""
    if "mod" in _state:
        return _state["mod"]
    with _lock:
        if "mod" not in _state:
            mod, origin = None, "none"
            if config.c_tensor_guards and prefer_installed:
                mod, why = _installed()
                origin = "installed"
                if mod is None:
                    log.info("pydynamo: C++ tensor guard check built on first use: %s", why)
            if config.c_tensor_guards and mod is None:
                try:
                    mod, origin = _load(), "cache"
                except Exception as e:      # no compiler/headers: the Python checks serve
                    log.warning("pydynamo: C++ tensor guard check unavailable, guards check "
                                "tensors in Python (slower cache hits): %s",
                                str(e).strip().splitlines()[-1] if str(e).strip() else e)
                    origin = "none"
            _state["mod"], _state["origin"] = mod, origin
    return _state["mod"]


@contextlib.contextmanager
def disabled():
    """Guards compiled inside emit the Python conditions (benchmarks and tests compare both)."""
    module()
    saved = _state["mod"]
    _state["mod"] = None
    try:
        yield
    finally:
        _state["mod"] = saved


def make_spec(mod, s):
    """A capsule for guards.TensorSpec `s` (sizes/strides entries None = any)."""
    conj = int(s.is_conj) if s.dtype.is_complex else -1
    neg = int(s.is_neg) if (s.dtype.is_complex or s.dtype.is_floating_point) else -1
    return mod.make_spec(s.cls, s.dtype, str(s.device), tuple(s.shape), tuple(s.stride),
                         bool(s.requires_grad), bool(s.is_inference), conj, neg)

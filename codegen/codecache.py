"""Content-addressed disk cache for generated sources and shared libraries.

Key = sha256(source, compiler command, compiler version). A library is built into a temporary
name and renamed into place, so concurrent processes never load a half-written file; a warm
process (same key on disk) runs no compiler at all, and each library is loaded once per process.
Directory: $PYDYNAMO_CACHE_DIR (default ~/.cache/pydynamo), subfolders cpp/ and wrappers/.
"""
from __future__ import annotations

import ctypes
import functools
import hashlib
import logging
import os
import subprocess
import sys
import tempfile
import threading
import time
from typing import Dict

log = logging.getLogger("pydynamo.codegen")

CXX = os.environ.get("CXX", "g++")
# -fno-trapping-math: values and NaN/inf semantics stay IEEE (no fast-math); it only lets g++
# if-convert float selects, which AVX2 and older targets need to vectorize pd_expf, max, where
CXXFLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fwrapv",
            "-fno-math-errno", "-fno-trapping-math", "-w"]


def cxxflags() -> list:
    """CXXFLAGS plus the preferred vector width, read per build (PYDYNAMO_CPP_VECTOR_WIDTH:
    512 by default, 256, or "native" for g++'s own choice) so one process can compare them.
    Why 512: g++ tunes Intel's AVX-512 server cores (Skylake-SP to Emerald Rapids) to prefer
    256-bit vectors, so -march=native there vectorized every loop 8 floats wide (and called
    libmvec's 8-wide variants) while torch.compile's explicit AVX-512 code runs 16 wide; on
    AMD Zen 4 native already picks 512. Targets without AVX-512 ignore the flag."""
    import platform
    width = os.environ.get("PYDYNAMO_CPP_VECTOR_WIDTH", "512")
    if width == "native" or platform.machine() not in ("x86_64", "AMD64"):
        return list(CXXFLAGS)
    if width not in ("128", "256", "512"):
        raise ValueError(f"PYDYNAMO_CPP_VECTOR_WIDTH={width!r}: expected 128, 256, 512 or native")
    return CXXFLAGS + [f"-mprefer-vector-width={width}"]

_loaded: Dict[str, ctypes.CDLL] = {}
_lock = threading.Lock()
stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0}


def cache_dir() -> str:
    d = os.environ.get("PYDYNAMO_CACHE_DIR")
    if not d:
        try:
            import sys
            cfg = sys.modules.get("pydynamo.config")
            d = getattr(cfg, "cache_dir", None)
        except Exception:
            d = None
    return d or os.path.expanduser("~/.cache/pydynamo")


@functools.lru_cache(None)
def compiler_version() -> str:
    try:
        return subprocess.run([CXX, "--version"], capture_output=True, text=True,
                              check=True).stdout.splitlines()[0]
    except Exception as e:  # no compiler: builds will fail loudly with the reason below
        return f"unknown ({e})"


def source_key(source: str) -> str:
    h = hashlib.sha256()
    for part in (source, " ".join([CXX] + cxxflags()), compiler_version()):
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def _atomic_write(path: str, text: str):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(tmp, path)


@functools.lru_cache(None)
def vector_math_available() -> bool:
    """glibc's libmvec on x86-64 Linux (probed once: a tiny program must link against it)."""
    import platform
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    marker = os.path.join(cache_dir(), "cpp", "libmvec-" + hashlib.sha256(
        compiler_version().encode()).hexdigest()[:16])
    if os.path.exists(marker):          # probed by an earlier process: no compiler run
        with open(marker) as f:
            return f.read().strip() == "1"
    ok = _probe_vector_math()
    _atomic_write(marker, "1" if ok else "0")
    return ok


def _probe_vector_math() -> bool:
    """No test compile (half a second of a cold start): the compiler must find libmvec.so to
    link with, and glibc must be 2.35 or newer, the first with the SIMD erf/tanh/expm1/...
    that the declarations in codegen/cpp.py promise (older ones would fail at load time)."""
    try:
        major, minor = (int(v) for v in os.confstr("CS_GNU_LIBC_VERSION").split()[1].split(".")[:2])
        path = subprocess.run([CXX, "-print-file-name=libmvec.so"], capture_output=True,
                              text=True, timeout=60).stdout.strip()
    except Exception:
        return False
    return (major, minor) >= (2, 35) and os.path.isabs(path) and os.path.exists(path)


def load_library(source: str) -> (ctypes.CDLL, str):
    """Compile (or find) the shared library for this C++ source; returns (lib, path)."""
    key = source_key(source)
    with _lock:
        if key in _loaded:
            stats["memory_hits"] += 1
            return _loaded[key], _so_path(key)
        so = _so_path(key)
        if os.path.exists(so):
            stats["disk_hits"] += 1
        else:
            _build(source, key, so)
        lib = ctypes.CDLL(so)
        _loaded[key] = lib
        return lib, so


def _so_path(key):
    return os.path.join(cache_dir(), "cpp", key[:2], key + ".so")


def _build(source, key, so):
    src = so[:-3] + ".cpp"
    _atomic_write(src, source)
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(so), suffix=".so.tmp")
    os.close(fd)
    cmd = [CXX] + cxxflags() + [src, "-o", tmp] + (["-lmvec"] if "omp declare simd" in source else [])
    t0 = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    dt = time.perf_counter() - t0
    if proc.returncode != 0:
        os.unlink(tmp)
        raise RuntimeError(f"C++ compile failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
    os.replace(tmp, so)
    stats["compiles"] += 1
    stats["compile_seconds"] += dt
    log.debug("compiled %s in %.2fs", so, dt)


def write_wrapper(source: str) -> str:
    key = hashlib.sha256(source.encode()).hexdigest()
    path = os.path.join(cache_dir(), "wrappers", key[:2], key + ".py")
    if not os.path.exists(path):
        _atomic_write(path, source)
    return path

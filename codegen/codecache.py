"""Content-addressed disk cache for generated code: every artifact is verified before it is used.

Artifacts under cache_dir() (pydynamo.config.cache_dir: $PYDYNAMO_CACHE_DIR, default
~/.cache/pydynamo); the two C/C++ ones are built by one helper, `load_extension`:
  cpp/<k2>/<key>.so      kernel libraries (ctypes), key = source_key(source, flags); .cpp beside
  guards/...             the tensor-check CPython extension (pydynamo/tensor_check.py)
  cpp/libmvec-<...>      the libmvec probe's answer (a sealed 1-byte payload)
  wrappers/, triton/     generated Python, named by the sha256 of its own text

Invariants:
  * Nothing unverified is loaded. A binary artifact ends with a trailer recording the key it was
    built for, the toolchain, and the sha256 and size of the bytes before it (the ELF loader
    ignores bytes past the last section). `load_binary` dlopens/imports a file only when its
    trailer names the key being asked for and the bytes hash to the recorded value, so a
    truncated, overwritten, zero-length or garbage library, or another key's library copied over
    this name, is never mapped (those crashed every later process with SIGBUS/SIGILL/SIGSEGV).
    Generated Python is named by its own sha256 and used only when the file's text equals the
    source. Verification reads each artifact once per process (at load, never per call).
  * Damage is repaired: an artifact that fails verification, or fails to load, is rebuilt with
    one CacheWarning and replaced; the next process finds a verified file and says nothing.
    A missing artifact is simply built (a cold cache is not damage).
  * Writes are atomic and durable: a temp file in the same directory, fsync, rename, fsync of the
    directory. Processes racing on one key each build their own temp file; the last rename wins
    and every reader sees either no file or a complete sealed one.
  * A cache dir that cannot be written (read-only, no permission) still serves its verified
    entries; what must be built goes to a per-process temp dir, with one CacheWarning.
  * A key covers every input of its artifact: kernel libraries hash the source, the compiler
    command and version, the CPU's instruction-set flags (-march=native code from another CPU
    could SIGILL) and the C library version (libmvec); they include no Python or torch headers
    and are loaded by ctypes, so neither version is an input. The guard extension's key is
    tensor_check's (source, torch version and build, Python ABI, compiler and command).
  * Each library is loaded once per process (`_loaded`); deleting the file afterwards does not
    affect the process (the mapping stays), and the next process rebuilds it.
"""
from __future__ import annotations

import atexit
import ctypes
import errno
import functools
import hashlib
import json
import logging
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import threading
import time
import warnings
from typing import Callable, Dict, List, Optional, Tuple, TypeVar

from codegen.options import VECTOR_WIDTHS
from pydynamo import config, phases

log = logging.getLogger("pydynamo.codegen")

CXX = config.cxx           # ($CXX, else g++: kernels and the guard extension)
# -fno-trapping-math: values and NaN/inf semantics stay IEEE (no fast-math); it only lets g++
# if-convert float selects, which AVX2 and older targets need to vectorize pd_expf, max, where
CXXFLAGS = ["-O3", "-march=native", "-fopenmp", "-shared", "-fPIC", "-std=c++17", "-fwrapv",
            "-fno-math-errno", "-fno-trapping-math", "-w"]

# Bumped when the on-disk format changes: old entries are then never looked up (not "damaged").
FORMAT = "2"


class CacheWarning(UserWarning):
    """A cached artifact failed verification or the cache dir is unwritable (repaired/bypassed)."""


def cxxflags(vector_width: str = "512") -> list:
    """CXXFLAGS plus the preferred vector width (codegen option `vector_width`: 512 by default,
    256, 128, or "native" for g++'s own choice). Why 512: g++ tunes Intel's AVX-512 server cores
    (Skylake-SP to Emerald Rapids) to prefer 256-bit vectors, so -march=native there vectorized
    every loop 8 floats wide (and called libmvec's 8-wide variants) while torch.compile's
    explicit AVX-512 code runs 16 wide; on AMD Zen 4 native already picks 512. Targets without
    AVX-512 ignore the flag."""
    import platform
    if vector_width not in VECTOR_WIDTHS:
        raise ValueError(f"vector_width={vector_width!r}: expected one of {VECTOR_WIDTHS}")
    if vector_width == "native" or platform.machine() not in ("x86_64", "AMD64"):
        return list(CXXFLAGS)
    return CXXFLAGS + [f"-mprefer-vector-width={vector_width}"]

_loaded: Dict[str, ctypes.CDLL] = {}
_lock = threading.RLock()      # reentrant: a build may probe libmvec, which publishes too
stats = {"compiles": 0, "disk_hits": 0, "memory_hits": 0, "compile_seconds": 0.0, "repairs": 0}


def cache_dir() -> str:
    """pydynamo.config.cache_dir ($PYDYNAMO_CACHE_DIR), read at each use: a test or program that
    sets it sends later artifacts there."""
    return config.cache_dir


@functools.lru_cache(None)
def compiler_version() -> str:
    """The compiler's first `--version` line. Asking starts a process (milliseconds, and on a
    warm start's path: every kernel library's key holds it), so the answer is kept in the cache
    dir, keyed by the compiler binary's resolved path, size, mtime and inode: a compiler
    upgraded or replaced in place is asked again."""
    try:
        exe = os.path.realpath(shutil.which(CXX) or CXX)
        st = os.stat(exe)
    except OSError:
        return _ask_compiler_version()
    key = key_of("compiler version", exe, str(st.st_size), str(st.st_mtime_ns), str(st.st_ino))
    try:
        return load_value(os.path.join("toolchain", key + ".txt"), key,
                          lambda: _run_compiler_version().encode(), "compiler version").decode()
    except Exception:       # (an unknown answer is not kept: asked again, it says why)
        return _ask_compiler_version()


def _run_compiler_version() -> str:
    return subprocess.run([CXX, "--version"], capture_output=True, text=True,
                          check=True).stdout.splitlines()[0]


def _ask_compiler_version() -> str:
    try:
        return _run_compiler_version()
    except Exception as e:  # no compiler: builds will fail loudly with the reason below
        return f"unknown ({e})"


@functools.lru_cache(None)
def target_id() -> str:
    """What -march=native and -lmvec depend on besides the compiler: the CPU's instruction-set
    flags and the C library version (a cache dir shared by machines must not hand one CPU's
    AVX-512 library to another)."""
    import platform
    cpu = platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith(("flags", "Features")):
                    cpu += ":" + hashlib.sha256(line.split(":", 1)[1].strip().encode()).hexdigest()[:16]
                    break
    except OSError:
        cpu += ":" + platform.processor()
    try:
        libc = os.confstr("CS_GNU_LIBC_VERSION") or ""
    except (ValueError, OSError):
        libc = ""
    return f"{cpu} {libc}"


def toolchain(flags=None) -> str:
    return " ".join([CXX] + (cxxflags() if flags is None else flags)) + " | " + \
        compiler_version() + " | " + target_id()


def key_of(*parts: str) -> str:
    """The cache key of an artifact built from `parts` (each one input of the build)."""
    h = hashlib.sha256()
    for part in (FORMAT,) + parts:
        h.update(part.encode())
        h.update(b"\0")
    return h.hexdigest()


def source_key(source: str, flags=None) -> str:
    """A kernel library's key: its source and the toolchain (compiler, `flags`, target)."""
    return key_of(source, toolchain(flags))


# ------------------------------------------------------------------ sealed files

_MAGIC = b"PDCACHE2"
_TAIL = struct.Struct("<Q8s")          # length of the JSON trailer, magic


def _seal(payload_len: int, sha: str, key: str, what: str, info: str) -> bytes:
    meta = json.dumps({"key": key, "sha256": sha, "size": payload_len, "what": what,
                       "built_with": info, "format": FORMAT}).encode()
    return b"\n" + meta + _TAIL.pack(len(meta), _MAGIC)


def _unseal(blob: bytes, key: str) -> Tuple[Optional[bytes], str]:
    """(payload, "") for a sealed blob built for `key`, else (None, why not)."""
    if len(blob) < _TAIL.size:
        return None, f"{len(blob)} bytes, no trailer"
    n, magic = _TAIL.unpack_from(blob, len(blob) - _TAIL.size)
    if magic != _MAGIC or n > len(blob) - _TAIL.size:
        return None, "no trailer (truncated or overwritten)"
    try:
        meta = json.loads(blob[len(blob) - _TAIL.size - n: len(blob) - _TAIL.size])
        size, sha, built_for = int(meta["size"]), meta["sha256"], meta["key"]
    except (ValueError, KeyError, TypeError):
        return None, "unreadable trailer"
    if built_for != key:
        return None, f"built for key {str(built_for)[:16]}..., not this one"
    if size != len(blob) - _TAIL.size - n - 1:
        return None, f"size {len(blob) - _TAIL.size - n - 1} bytes, recorded {size}"
    payload = blob[:size]
    if hashlib.sha256(payload).hexdigest() != sha:
        return None, "content hash mismatch"
    return payload, ""


def _read(path: str) -> Tuple[Optional[bytes], str]:
    """(bytes, "") or (None, "") where there is no file, or (None, why it cannot be read)."""
    try:
        with open(path, "rb") as f:
            return f.read(), ""
    except (FileNotFoundError, NotADirectoryError):
        return None, ""
    except OSError as e:
        return None, f"unreadable: {e.strerror}"


# ------------------------------------------------------------------ where to write

_fallback: Dict[str, str] = {}          # unwritable cache root -> this process's temp root
# the cache dir (or a folder in it) cannot take a new file: read-only, no permission, full, a file
# where a folder should be, a folder where the file should be
_UNWRITABLE = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOSPC, errno.EDQUOT, errno.ENOTDIR,
               errno.EEXIST, errno.EISDIR)


def _candidates(rel: str):
    """Paths to look for `rel` in: the cache dir, then this process's fallback for it."""
    root = cache_dir()
    yield os.path.join(root, rel)
    if root in _fallback:
        yield os.path.join(_fallback[root], rel)


def _fallback_root(root: str, err: OSError) -> str:
    if root not in _fallback:
        tmp = tempfile.mkdtemp(prefix="pydynamo-cache-")
        atexit.register(shutil.rmtree, tmp, True)
        _fallback[root] = tmp
        warnings.warn(f"pydynamo cache: cannot write to {root} ({err.strerror}); compiled code "
                      f"goes to {tmp} for this process", CacheWarning, stacklevel=4)
    return _fallback[root]


def _fsync_dir(d: str):
    try:
        fd = os.open(d, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def publish(rel: str, produce: Callable[[str], None]) -> str:
    """Atomically create <cache dir>/rel: `produce(tmp)` writes the complete file at `tmp` (in the
    same directory), which is fsynced and renamed into place. Falls back to a per-process temp
    dir when the cache dir cannot be written. Returns the final path."""
    root = cache_dir()
    while True:
        base = _fallback.get(root, root)
        path = os.path.join(base, rel)
        d = os.path.dirname(path)
        tmp = None
        try:
            os.makedirs(d, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=d, prefix=os.path.basename(path) + ".", suffix=".tmp")
            os.close(fd)
            produce(tmp)
            fd = os.open(tmp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
            os.replace(tmp, path)
        except BaseException as e:
            if tmp is not None:
                try:
                    os.unlink(tmp)
                except OSError:
                    pass
            if isinstance(e, OSError) and e.errno in _UNWRITABLE and base == root:
                _fallback_root(root, e)
                continue
            raise
        _fsync_dir(d)
        return path


def _warn_damaged(what: str, path: str, reason: str):
    stats["repairs"] += 1
    warnings.warn(f"pydynamo cache: {what} {path} is damaged ({reason}); rebuilding it",
                  CacheWarning, stacklevel=5)


# ------------------------------------------------------------------ verified artifacts

T = TypeVar("T")


def load_binary(rel: str, key: str, build: Callable[[str], None], load: Callable[[str], T],
                what: str, info: str = "") -> Tuple[T, str]:
    """Load the artifact at <cache dir>/rel built for `key`: verified first (trailer names `key`,
    bytes match its sha256), else (missing, damaged, or failing to load) `build(tmp)` writes it
    afresh, it is sealed (`info`: the toolchain, for readers) and published, and loaded.
    Returns (load(path), path)."""
    found = _find_sealed(rel, key, lambda path, payload: (load(path), path), what)
    if found is not None:
        stats["disk_hits"] += 1
        return found
    path = _publish_sealed(rel, key, build, what, info)
    return load(path), path


def load_value(rel: str, key: str, compute: Callable[[], bytes], what: str) -> bytes:
    """A small sealed value (a probe's answer): verified like a binary, recomputed if not."""
    found = _find_sealed(rel, key, lambda path, payload: payload, what)
    if found is not None:
        return found
    value = compute()

    def produce(tmp):
        with open(tmp, "wb") as f:
            f.write(value)
    _publish_sealed(rel, key, produce, what, "")
    return value


def _find_sealed(rel: str, key: str, use: Callable[[str, bytes], T], what: str) -> Optional[T]:
    """use(path, payload) for the first place of `rel` whose file verifies for `key` and loads
    (OSError/ImportError: it does not); None if there is none, after one warning if a file was
    there but damaged."""
    damaged = None
    for path in _candidates(rel):
        blob, reason = _read(path)
        if blob is None and not reason:        # no file there
            continue
        payload, reason = _unseal(blob, key) if blob is not None else (None, reason)
        if payload is not None:
            try:
                return use(path, payload)
            except (OSError, ImportError) as e:   # verified bytes that will not load here
                reason = f"fails to load: {e}"
        damaged = damaged or (path, reason)
    if damaged:
        _warn_damaged(what, *damaged)
    return None


def _publish_sealed(rel: str, key: str, produce: Callable[[str], None], what: str,
                    info: str) -> str:
    """publish() what `produce(tmp)` writes, with the trailer for `key` appended."""
    def sealed(tmp):
        produce(tmp)
        with open(tmp, "rb") as f:
            data = f.read()
        with open(tmp, "ab") as f:
            f.write(_seal(len(data), hashlib.sha256(data).hexdigest(), key, what, info))
    return publish(rel, sealed)


def store_text(rel: str, text: str, what: str) -> str:
    """The path of a file under the cache holding exactly `text` (content-addressed names):
    an existing file is used only if its text is `text`; otherwise it is (re)written."""
    data = text.encode()
    for path in _candidates(rel):
        blob, reason = _read(path)
        if blob == data:
            return path
        if blob is not None or reason:
            _warn_damaged(what, path, reason or "its text differs from its content hash")
            break

    def produce(tmp):
        with open(tmp, "wb") as f:
            f.write(data)
    return publish(rel, produce)


# ------------------------------------------------------------------ users

@functools.lru_cache(None)
def vector_math_available() -> bool:
    """glibc's libmvec on x86-64 Linux (probed once: a tiny program must link against it)."""
    import platform
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        return False
    key = hashlib.sha256((FORMAT + compiler_version() + target_id()).encode()).hexdigest()
    value = load_value(os.path.join("cpp", "libmvec-" + key[:16]), key,
                       lambda: b"1" if _probe_vector_math() else b"0", "libmvec probe marker")
    return value == b"1"


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


def load_library(source: str, vector_width: str = "512") -> (ctypes.CDLL, str):
    """Compile (or find, verified) the shared library for this C++ source; returns (lib, path)."""
    flags = cxxflags(vector_width)
    tools = toolchain(flags)
    key = key_of(source, tools)         # (source_key's)
    with _lock:
        if key in _loaded:
            stats["memory_hits"] += 1
            return _loaded[key]
        libs = ["-lmvec"] if "omp declare simd" in source else []
        lib, so = load_extension(os.path.join("cpp", key[:2], key + ".so"), key, source,
                                 lambda src, out: [CXX] + flags + [src, "-o", out] + libs,
                                 ctypes.CDLL, "kernel library", tools, counted=True)
        _loaded[key] = lib, so
        return lib, so


def load_extension(rel: str, key: str, source: str, command: Callable[[str, str], List[str]],
                   load: Callable[[str], T], what: str, info: str, counted: bool = False
                   ) -> Tuple[T, str]:
    """The one way a C/C++ artifact is built and cached (kernel libraries; the guard extension,
    pydynamo/tensor_check.py): load_binary's verified file at <cache dir>/rel for `key`, else
    `command(src, out)` compiles `source` (kept beside it as <key>.cpp, for reading) into it.
    `counted`: the build counts in stats["compiles"] (the kernel libraries' figure)."""
    def build(out: str):
        src = os.path.join(os.path.dirname(out), key + ".cpp")
        fd, tmp = tempfile.mkstemp(dir=os.path.dirname(out), suffix=".cpp.tmp")
        with os.fdopen(fd, "w") as f:               # (every writer renames the same text in)
            f.write(source)
        os.replace(tmp, src)
        cmd = command(src, out)
        t0 = time.perf_counter()
        with phases.phase("compile"):
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
        dt = time.perf_counter() - t0
        if proc.returncode != 0:
            raise RuntimeError(f"C++ compile failed ({' '.join(cmd)}):\n{proc.stderr[-4000:]}")
        if counted:
            stats["compiles"] += 1
            stats["compile_seconds"] += dt
        log.debug("built %s %s in %.2fs", what, out, dt)
    return load_binary(rel, key, build, load, what, info)


def write_wrapper(source: str) -> str:
    key = hashlib.sha256(source.encode()).hexdigest()
    return store_text(os.path.join("wrappers", key[:2], key + ".py"), source, "generated wrapper")

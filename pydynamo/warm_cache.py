"""The warm-start cache: compiled frames persisted on disk, so a new process skips tracing and
compiling a frame an earlier process compiled (on when `config.warm_start`, $PYDYNAMO_WARM_START=1).

On a miss of the in-memory cache, convert_frame's callback asks `lookup` before translating; after
a translation it calls `store`. An entry is everything the hook needs to run the frame: the
replacement code object (marshal), its guards (re-bound in this process, below), the names the
code reads from the frame's globals (`__pydynamo_*`: compiled graphs and constants) and, for each
compiled graph, what rebuilds it without lowering: the FX graph (pickled: the eager backend runs
it, and codegen's eager escapes), and for codegen's C++ or Triton wrapper its source, its kernels'
source (the C++ library is codegen's own verified disk cache, so loading it compiles nothing; a
Triton module is made again from its source, which on CUDA Triton's own disk cache compiles as a
hit), its footer's spec (codegen/standalone.py; a Triton wrapper's bindings from its
`launch_spec`) and its constants' values; codegen/run_wrapper.py rebuilds the namespace from
those, the one way a wrapper is rebuilt outside the pipeline. Behind CUDA-graph replay the spec
also holds the runner's settings (`cudagraphs`): a load wraps a new runner, which captures
again. A vmap node's target is stored by value (`VmapTarget`, below).

Key, under <cache dir>/frames/<k2>/<key>/<entry>.pkl: the code object's content (marshal: bytecode,
constants, names, filename, qualname, first line), the optimize() settings (backend by its
registered name, mode, options, fullgraph, dynamic) and `versions()` (pydynamo's own files, torch
version and commit, Python, the CPU's instruction-set flags and C library). `entry` is the hash of
the guards' text, so processes that compile the same entry write the same file.

Re-binding guards (the unsafe part of a warm start; nothing of the old process is trusted):
  * ID_MATCH pins an object's identity, which no process shares. At store time the guarded
    object, read again through the guard's source, must be nameable: None/True/False/Ellipsis, a
    module (by its name in sys.modules), or an object pickle writes by reference (functions,
    classes, builtins, dtypes: module + qualified name, verified to name the same object). At
    load the name is resolved in the new process and the guard re-made with that object's id, so
    the source is re-evaluated against the object the name denotes now. A Python function also
    records a hash of its code: a function of that name with other code (edited, monkeypatched)
    makes the entry stale. An nn.Module instance becomes a TYPE_MATCH on its class: a module's
    identity only stood for "this module", and everything the trace read from it (parameters,
    buffers, submodules, attributes, hooks) is guarded through its own source
    (executor/variables/nn_module.py). Anything else (a plain object guarded by identity)
    makes the frame uncacheable, said in one log line.
  * Classes (TYPE_MATCH, tensor classes) and functions are found by name; the code they carry is
    not: the source files of the frame and of every guarded class (its MRO) and function outside
    torch, pydynamo and the standard library (those are covered by the versions) are hashed at
    store time and checked at load, so an edited model file makes its entries stale.
  * EQUALS_MATCH values must be plain data (numbers, strings, bytes, None, dtypes, devices,
    tuples/lists/frozensets of these); TENSOR_MATCH only CPU and CUDA tensors (the spec keeps
    the device index: devices compare exactly); a backend other than "eager",
    "codegen"/"inductor" (C++ or Triton wrappers, or their eager fallback), or a custom
    callable: not cached.
  * SHAPE_ENV (dynamic shapes) is stored as its check function's source (plain Python reading
    sizes through sources, shapes.ShapeEnv.make_check_fn) and its texts; loaded without a
    ShapeEnv, so a recompile explanation names its relations as text (recompiles.py).
  * COMPILE_SETTINGS is re-made for the callback asking (the key already holds the settings).
  * The guard function itself is not compiled again: its source holds no per-process value, so
    the entry carries its code, text key and emission shape (`_guard_code`, computed at store
    from the guards bound as a load binds them); guards.compile_guards' `prebuilt` says when the
    code serves the guards bound here. The records are stored in the order of the guards they
    bind to, so a load binds them sorted and takes that code without sorting them again
    (hashing every source: a third of a hit's binding).

Graph breaks: the output code of a frame cut at a break calls its break function (generated
code, a `__pydynamo_const_*` global), stored by marshal like the output code; the resume
functions it makes are constants of it. Each resume function is a frame of its own with its own
entry, keyed by its code's content, so the entry a new process finds for it is the one traced
from the same code. What bytecode.resume and the hook know of such code is re-made at load:
the break function's "skip" mark (it runs in CPython, never traced) and each resume code's
origin (the user function and offsets it continues: its name in messages, and where a trace of
it in this process may break). A resume frame whose origin this process does not know (its
caller was neither loaded nor traced here) is not loaded.

Training graphs (pydynamo/aot: `_dispatching` over a CompiledJoint; also an inference graph the
recorder functionalized): the record holds the compiled forward and every backward the storing
process compiled (each an eager graph or a C++ wrapper record as above, boxed): the full one and
the variants for absent tangents (an input written in place whose new value the loss does not
reach: its tangent is None), the backward graph (unpickled only for a backward the entry lacks,
which a loaded joint runs eagerly: the full one where only variants were compiled, or another
variant) and what the runtime's epilogue reads of the joint (writes, aliases, views);
`CompiledJoint.loaded` rebuilds it without recording, partitioning or compiling. The backward is
compiled at the first `.backward()`, so such a frame's entry is written then (a hook of the
joint), once every joint of the frame has a backward compiled, and again when one compiles
another; a process that never runs it stores nothing. A joint recorded with symbolic sizes
is stored with its size spec and its views' expressions (recorder.attach_sizes makes their
functions again); sizes its relations refuse run with eager autograd (`_EagerJoint`). Not
stored: a graph with symbolic sizes whose joint was recorded at concrete ones (its dispatcher
records one per size signature, and a load has no recorder). A training hit imports pydynamo.aot (its recorder
imports sympy), not the executor or codegen's lowering.

The hit path (what a new process imports to run a loaded frame) is guards, this module,
pydynamo/installed.py (the output code's run-time half) and codegen/runtime.py (a wrapper's);
tracing, training, recompile explanations and codegen's lowering are stages bound lazily
(pydynamo/stages.py), so a hit never imports them (sympy alone is about 0.3 s);
tests/cache/test_warm_start.py checks it in a fresh interpreter. This module is the reading
half (keys, the folder, lookup and the rebuild); writing an entry (`store`) and moving a cache
(`save_artifacts` / `load_artifacts`) are pydynamo/warm_store.py, a stage of convert_frame: a
process that only loads entries never imports it (tests/cache/test_warm_hit_cost.py). With
the warm cache on, optimize() imports the hit path when it wraps and calls `prepare()` (the
guard extension, the version key, the toolchain: eval_frame._prepare_warm_start), so a
script's first call finds them done, as torch.compile imports its stack when it wraps.

Safety: entries are sealed like codecache's binaries (trailer: key, sha256, size) and verified
before they are unpickled; a damaged or foreign entry is ignored with one CacheWarning and
replaced by the next store; an entry that verifies but no longer loads or binds here (a name
gone, a file edited) is stale: skipped, logged, replaced. Writes are codecache.publish's (temp
file, fsync, rename: racing writers each publish a complete file). Entries are pickles, so the
frames folder must be private: it is created 0700 and a folder another user owns or others may
write is not read (one warning). A read-only cache dir still serves; stores go to codecache's
per-process fallback dir. `save_artifacts()` / `load_artifacts(data)` (warm_store.py, exported as
pydynamo.save_artifacts / load_artifacts) move the frames and the compiled code they use to
another machine of the same kind (same versions, else unused).
"""
from __future__ import annotations

import collections
import dataclasses
import hashlib
import importlib
import itertools
import logging
import marshal
import os
import pickle
import stat
import sys
import types
import warnings
from typing import Optional

import torch

from codegen import codecache, run_wrapper, runtime
from codegen.derived import derivations_of
from pydynamo import _C
from pydynamo.eval_frame import disable, on_reset
from pydynamo.code_origins import origin_of, set_origin
from pydynamo import installed, tensor_check
from pydynamo.guards import Guard, GuardKind, ShapeGuards, compile_guards
from pydynamo.stages import lazy

aot_runtime = lazy("pydynamo.aot.runtime")  # the training stage: only a training entry loads it
cudagraphs = lazy("codegen.cudagraphs")  # CUDA-graph replay: only its entries load it
aot_recorder = lazy("pydynamo.aot.recorder")  # (a joint with symbolic sizes)

log = logging.getLogger("pydynamo.warm_cache")

FORMAT = "5"

# hits: frames loaded instead of traced; stores: entries written; uncacheable: translations
# not stored (logged with why); stale: verified entries that no longer bind; damaged: entries
# failing verification (one CacheWarning each)
stats: collections.Counter = collections.Counter()

_HERE = os.path.dirname(os.path.abspath(__file__))
_PLAIN = (int, float, complex, str, bytes, bool, type(None), torch.dtype, torch.device)


class Uncacheable(Exception):
    """Why a translated frame cannot be stored (one log line)."""


class Stale(Exception):
    """Why a verified entry does not bind in this process (skipped, then replaced)."""


# ------------------------------------------------------------------ keys

_versions: list = []


def versions() -> str:
    """What every entry depends on besides its frame: pydynamo's and codegen's files (name, size,
    mtime: an edit of the compiler invalidates), torch, Python, the CPU and C library."""
    if not _versions:
        h = hashlib.sha256()
        for top in (_HERE, os.path.join(os.path.dirname(_HERE), "codegen")):
            for d, dirs, files in sorted(os.walk(top)):
                dirs.sort()
                for f in sorted(files):
                    if f.endswith((".py", ".cpp", ".so")):
                        st = os.stat(os.path.join(d, f))
                        h.update(f"{d}/{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        _versions.append(" | ".join([FORMAT, h.hexdigest(), torch.__version__,
                                     str(torch.version.git_version), sys.version,
                                     codecache.target_id()]))
    return _versions[0]


def prepare() -> None:
    """What every lookup of this process needs, done once, when optimize() wraps a function
    with the warm cache on (eval_frame.optimize; importing this module is the other half of
    that setup, as torch.compile imports its stack when it wraps): the C++ guard extension
    loaded (a TENSOR_MATCH guard's check; 0.5 ms), the version key (pydynamo's files stat'ed),
    and the kernel cache's toolchain (the compiler's version, the CPU's flags: part of every
    kernel library's key). Nothing of a frame or an entry is read here: the first call still
    finds, verifies, binds and rebuilds its entry."""
    tensor_check.module()
    versions()
    codecache.toolchain()


def _settings_key(callback) -> str:
    s = getattr(callback, "settings", None)
    if s is None or not isinstance(s.backend, str):
        raise Uncacheable("a custom backend callable (only registered backend names are cached)")
    if s.backend not in ("eager", "codegen", "inductor"):
        raise Uncacheable(f"backend {s.backend!r} (cached: eager, codegen)")
    return repr((s.backend, s.fullgraph, s.dynamic, s.mode, _plain(s.options, "options")))


def frame_key(code: types.CodeType, callback) -> str:
    return codecache.key_of("frame", _code_hash(code),
                            code.co_filename, code.co_qualname, str(code.co_firstlineno),
                            _settings_key(callback), versions())


def _plain(v, what):
    if isinstance(v, _PLAIN):
        return v
    if isinstance(v, (tuple, list, frozenset)):
        return type(v)(_plain(x, what) for x in v)
    if isinstance(v, dict):
        return {_plain(k, what): _plain(x, what) for k, x in v.items()}
    raise Uncacheable(f"{what} holds a {type(v).__qualname__}, not plain data")


# ------------------------------------------------------------------ the folder

def _frames_dir(create: bool) -> Optional[str]:
    """<cache dir>/frames if it is ours and private (created 0700), else None (one warning)."""
    d = os.path.join(codecache.cache_dir(), "frames")
    if create:
        try:
            os.makedirs(d, mode=0o700, exist_ok=True)
        except OSError:
            pass        # read-only: stores go to codecache's fallback
    try:
        st = os.stat(d)
    except OSError:
        return None
    if st.st_uid != os.getuid() or st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        if d not in _distrusted:
            _distrusted.add(d)
            warnings.warn(f"pydynamo warm cache: {d} is not private to this user (owner "
                          f"{st.st_uid}, mode {stat.filemode(st.st_mode)}); not reading it",
                          codecache.CacheWarning, stacklevel=4)
        return None
    return d


_distrusted: set = set()


def _entry_rel(key: str, entry: str) -> str:
    return os.path.join("frames", key[:2], key, entry + ".pkl")


def _entry_names(key: str) -> list:
    """Entry files for `key` in the cache dir and this process's fallback dir, newest first."""
    names = {}
    for root in [codecache.cache_dir()] + ([codecache._fallback[codecache.cache_dir()]]
                                           if codecache.cache_dir() in codecache._fallback else []):
        d = os.path.join(root, "frames", key[:2], key)
        if root == codecache.cache_dir() and _frames_dir(False) is None:
            continue
        try:
            for n in os.listdir(d):
                if n.endswith(".pkl"):
                    names.setdefault(n[:-4], os.stat(os.path.join(d, n)).st_mtime)
        except OSError:
            continue
    return sorted(names, key=names.get, reverse=True)


# ------------------------------------------------------------------ content hashes

def _code_hash(code) -> Optional[str]:
    """A content hash of a code object, the same in every process (marshal's bytes are not:
    they depend on reference counts)."""
    if not isinstance(code, types.CodeType):
        return None
    h = hashlib.sha256()
    _hash_code(h, code)
    return h.hexdigest()


def _hash_code(h, code) -> None:
    for part in (code.co_code, code.co_linetable, code.co_exceptiontable):
        h.update(len(part).to_bytes(8, "little") + part)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars,
                   code.co_filename, code.co_qualname, code.co_firstlineno, code.co_flags,
                   code.co_argcount, code.co_posonlyargcount, code.co_kwonlyargcount,
                   code.co_stacksize)).encode())
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            _hash_code(h, c)
        else:
            h.update(f"{type(c).__qualname__}:{c!r}\0".encode())


def _module_globals(fn) -> bool:
    mod = sys.modules.get(fn.__module__ or "")
    return mod is not None and fn.__globals__ is mod.__dict__


# ------------------------------------------------------------------ loading

_seen: dict = {}        # key -> entries this process already handed to the hook or stored


@on_reset
def _on_reset() -> None:
    _seen.clear()       # (reset() dropped the entries handed to the hook: they may load again)


def lookup(code, frame_locals: dict, frame_globals: dict, callback):
    """(guard, new_code) of a stored entry whose guards pass on this frame, or None."""
    try:
        key = frame_key(code, callback)
    except Uncacheable:
        return None
    seen = _seen.setdefault(key, set())
    for entry in _entry_names(key):
        if entry in seen:
            continue
        payload = _read_entry(key, entry)
        if payload is None:
            seen.add(entry)
            continue
        try:
            guard = _bind_guards(payload, frame_locals, frame_globals, callback)
        except _NoMatch:
            continue
        except Stale as e:
            stats["stale"] += 1
            seen.add(entry)
            log.info("pydynamo warm cache: stale entry for %s skipped: %s", code.co_qualname, e)
            continue
        if not guard(frame_locals):
            continue                # another input's entry: may serve a later call
        try:
            new_code = _install(payload, code, frame_globals)
        except Exception as e:      # a graph that no longer rebuilds here
            stats["stale"] += 1
            seen.add(entry)
            log.info("pydynamo warm cache: entry for %s does not load: %s: %s", code.co_qualname,
                     type(e).__name__, e)
            continue
        seen.add(entry)
        stats["hits"] += 1
        guard.callback = callback
        return guard, new_code
    stats["misses"] += 1
    return None


def _read_entry(key: str, entry: str) -> Optional[dict]:
    def use(path, data):
        payload = pickle.loads(data)
        if not isinstance(payload, dict) or payload.get("format") != FORMAT:
            raise ImportError("not an entry of this format")
        return payload
    try:
        return codecache._find_sealed(_entry_rel(key, entry), key + entry, use,
                                      "warm-start frame entry")
    except Exception as e:          # verified bytes that do not unpickle here: stale
        stats["stale"] += 1
        log.info("pydynamo warm cache: entry %s does not unpickle: %s: %s", entry,
                 type(e).__name__, e)
        return None


class _NoMatch(Exception):
    """An entry whose guards cannot be bound on this frame (another function at a source): it
    does not serve this call, and may serve another."""


def _bind_guards(payload: dict, frame_locals: dict, frame_globals: dict, callback):
    for path, sha in payload["files"].items():
        try:
            with open(path, "rb") as f:
                now = hashlib.sha256(f.read()).hexdigest()
        except OSError:
            now = None
        if now != sha:
            raise Stale(f"{path} changed")
    prebuilt = payload.get("guard_code")
    memo: dict = {}     # (a name is resolved once per binding: 148 parameters, one class)
    return compile_guards([_guard(p, callback, frame_locals, frame_globals, memo)
                           for p in payload["guards"]], frame_globals,
                          prebuilt and (prebuilt[0], marshal.loads(prebuilt[1]), prebuilt[2]))


def _guard(p: tuple, callback, frame_locals: dict, frame_globals: dict,
           memo: Optional[dict] = None) -> Guard:
    tag = p[0]
    if tag == "settings":
        return Guard(None, GuardKind.COMPILE_SETTINGS, callback)
    if tag == "plain":
        return Guard(p[1], p[2], p[3], p[4])
    if tag == "shape":      # (no ShapeEnv here: a recompile explanation names the texts)
        scope: dict = {"min": min, "max": max}
        exec(compile(p[1], "<shape guards>", "exec"), scope)
        check = scope["__shape_guard"]
        check.__source__ = p[1]
        return Guard(None, GuardKind.SHAPE_ENV, ShapeGuards(check, p[2], p[3], None), p[4])
    if tag == "type":
        return Guard(p[1], GuardKind.TYPE_MATCH, _resolve_named(p[2], memo), p[3])
    if tag == "tensor":     # the spec's class as resolved and checked by name (the spec
        # unpickled it by reference too, so it is that object: kept as is, else replaced)
        cls, spec = _resolve_named(p[2], memo), p[3]
        return Guard(p[1], GuardKind.TENSOR_MATCH,
                     spec if spec.cls is cls else dataclasses.replace(spec, cls=cls), p[4])
    if tag == "id":
        ref = p[2]
        if ref[0] == "instance":
            return Guard(p[1], GuardKind.TYPE_MATCH, _resolve_named(ref[1], memo), p[4])
        if ref[0] == "code":
            return Guard(p[1], GuardKind.ID_MATCH, (id(_by_code(p[1], ref, frame_locals,
                                                                frame_globals)), p[3]), p[4])
        return Guard(p[1], GuardKind.ID_MATCH, (id(_resolve(ref, memo)), p[3]), p[4])
    raise Stale(f"unknown guard record {tag!r}")


def _by_code(source, ref, frame_locals, frame_globals):
    """The function (or code object: `module` None) at `source` in this frame, if it is the
    recorded one by content."""
    _, module, qualname, code_hash, module_globals = ref
    try:
        fn = eval(source.guard_expr(), {"L": frame_locals, "G": frame_globals})
    except Exception:
        raise _NoMatch(f"{source.name()} cannot be read")
    if module is None:
        same = isinstance(fn, types.CodeType) and _code_hash(fn) == code_hash
    else:
        same = type(fn) is types.FunctionType and (fn.__module__, fn.__qualname__) == \
            (module, qualname) and _code_hash(fn.__code__) == code_hash and \
            _module_globals(fn) == module_globals
    if not same:
        raise _NoMatch(f"{source.name()} is another function")
    return fn


def _resolve(ref, memo: Optional[dict] = None):
    if ref[0] == "const":
        return ref[1]
    if ref[0] == "marshal":
        return marshal.loads(ref[1])
    if ref[0] == "module":      # (a loaded module from sys.modules: import_module's locks not taken)
        return sys.modules.get(ref[1]) or importlib.import_module(ref[1])
    return _resolve_named(ref[1], memo)


def _resolve_named(named, memo: Optional[dict] = None):
    """The object a ("named") record denotes now, checked; `memo`: the records one binding
    resolved already (the same record twice in one binding is the same object)."""
    if memo is not None:
        obj = memo.get(named, memo)
        if obj is not memo:
            return obj
    obj = _resolve_named_now(named)
    if memo is not None:
        memo[named] = obj
    return obj


def _resolve_named_now(named):
    data, module, qualname, code_hash = named
    try:
        obj = pickle.loads(data)
    except Exception as e:
        raise Stale(f"{module}.{qualname} is gone ({type(e).__name__}: {e})")
    if (getattr(obj, "__module__", None), getattr(obj, "__qualname__", None)) != (module, qualname):
        raise Stale(f"{module}.{qualname} now names {getattr(obj, '__qualname__', obj)!r}")
    if code_hash is not None and _code_hash(getattr(obj, "__code__", None)) != code_hash:
        raise Stale(f"{module}.{qualname} has other code now")
    return obj


def _install(payload: dict, code, frame_globals: dict) -> types.CodeType:
    """Rebuild the entry's globals under fresh names (this process's counters: a later compile
    never reuses them) and return the replacement code reading those names."""
    mine = origin_of(code)
    roots = {"frame": code, "frame_origin": mine[0] if mine is not None else None}
    if any(whose != "skip" and roots[whose] is None for _, _, whose, _ in payload["origins"]):
        raise Stale("a resume frame whose origin this process does not know")
    rename, values = {}, {}
    for name, (tag, what) in payload["names"].items():
        if tag == "graph":
            new = f"__pydynamo_compiled_fn_{next(installed.graph_ids)}"
            values[new] = _rebuild_graph(what)
        else:
            new = f"__pydynamo_const_{next(installed.const_ids)}"
            values[new] = _resolve(what)
        rename[name] = new
    new_code = _renamed(marshal.loads(payload["new_code"]), rename)
    filename = new_code.co_filename
    if payload["source_lines"] and filename.startswith("<pydynamo transformed"):
        filename = filename[:-1] + f" warm {next(_loads)}>"
        new_code = _with_filename(new_code, filename)
        installed.register_source(filename, payload["source_lines"])
    by_name = {None: new_code, **{rename[n]: values[rename[n]] for n in payload["names"]
                                  if payload["names"][n][1][0] == "marshal"}}
    for name, path, whose, mapping in payload["origins"]:
        c = by_name[rename.get(name, name)]
        for i in path:
            c = c.co_consts[i]
        if whose == "skip":
            _C.set_code_state(c, "skip")
        else:
            set_origin(c, roots[whose], mapping)
    for name, value in values.items():
        installed.install(frame_globals, name, value)
    return new_code


_loads = itertools.count()


def _renamed(code, rename: dict):
    consts = tuple(_renamed(c, rename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_names=tuple(rename.get(n, n) for n in code.co_names), co_consts=consts)


def _with_filename(code, filename: str):
    consts = tuple(_with_filename(c, filename) if isinstance(c, types.CodeType) else c
                   for c in code.co_consts)
    return code.replace(co_filename=filename, co_consts=consts)


def _rebuild_graph(rec: tuple):
    if rec[0] == "joint":
        return _rebuild_joint(rec)
    if rec[0] == "eager":
        gm = pickle.loads(rec[1])
        return installed.wrap_compiled(gm, gm.forward)
    gm = _LazyGraph(rec[1])
    return installed.wrap_compiled(gm, _rebuild_compiled(rec[:-1], gm), rec[-1])


def _gpu_model(device: str):
    """The GPU a CUDA wrapper was compiled for (name, compute capability): the lowering chose
    layouts, padding and launch configurations for it, so an entry stored for another model is
    stale (warm_store records it, `_rebuild_compiled` compares it); None on CPU."""
    if not device.startswith("cuda"):
        return None
    return torch.cuda.get_device_name(device), torch.cuda.get_device_capability(device)


def _rebuild_compiled(rec: tuple, gm, boxed: bool = False):
    """The callable a ("eager", gm) / ("cpp", gm, <wrapper record>) record stands for, for graph
    `gm` (a _LazyGraph: the wrapper's eager escapes run it); `boxed`: taking one list."""
    if rec[0] == "eager":
        return (lambda args: gm(*args)) if boxed else gm
    _, _, wsrc, ksrc, spec, values, code = rec
    if spec["device"] == "cpu" and spec["backend"] == "triton" and \
            os.environ.get("TRITON_INTERPRET", "0") != "1":
        raise Stale("Triton kernels on CPU tensors, and this process does not interpret them")
    if spec.get("gpu") and spec["gpu"] != _gpu_model(spec["device"]):
        raise Stale(f"compiled for a {spec['gpu'][0]}, and {spec['device']} is another GPU")
    consts, constants = pickle.loads(values)
    ns = run_wrapper.namespace(spec, runtime.fallbacks(gm), constants, ksrc, consts)
    for i, target in spec.get("vmaps", {}).items():     # externs stored by value (VmapTarget)
        ns["_externs"][i] = target
    path = codecache.write_wrapper(wsrc)
    code = marshal.loads(code)
    exec(code if code.co_filename == path else compile(wsrc, path, "exec"), ns)
    call = ns["call"]
    call.wrapper_path, call.library_path = path, None
    replay = spec.get("cudagraphs")
    if replay:          # mode "reduce-overhead": a new runner around the wrapper (captures anew)
        call = cudagraphs.CudaGraphRunner(call, replay["mutated"],
                                          ns.get("matches") if replay["matches"] else None,
                                          copy_back=replay["copy_back"], outputs=replay["outputs"],
                                          derived=derivations_of(consts))
        return (lambda args: call(*args)) if boxed else call
    return ns["call_boxed"] if boxed else call


def _rebuild_joint(rec: tuple):
    _, gm_data, epilogue, fw_rec, bw_rec, bw_gm, grad_positions, num_saved, autocast, \
        variants = rec
    gm = _LazyGraph(gm_data)
    fields = pickle.loads(epilogue)
    fields["computed"] = [None] * fields["computed"]     # (only their number is read)
    sizes = fields.pop("sizes", None)
    joint = aot_runtime.Joint(gm=None, **fields)
    if sizes is not None:   # symbolic sizes: its relations and the aliases' geometry made again
        aot_recorder.attach_sizes(joint, sizes)
    bw = bw_graph = bw_compiler = None
    if bw_gm is not None:
        bw_graph, bw_compiler = _backward_graph(*bw_gm), _eager_variant
        # the full backward where the storing process compiled it, else its graph run eagerly
        # (that process's losses left a tangent absent: an input written in place)
        bw = _rebuild_compiled(bw_rec, _LazyGraph(bw_rec[1]), boxed=True) if bw_rec is not None \
            else (lambda args: c.backward_graph()(*args))
    fw = _rebuild_compiled(fw_rec, _LazyGraph(fw_rec[1]))
    c = aot_runtime.CompiledJoint.loaded(joint, fw, bw, bw_graph,
                                         grad_positions, num_saved, bw_compiler, "loaded")
    for absent, v in variants.items():
        c.bw_variants[absent] = _rebuild_compiled(v, _LazyGraph(v[1]), boxed=True)
    return installed.wrap_compiled(gm, aot_runtime._dispatching(
        gm, c, _EagerJoint(gm).rebuild, dynamic=sizes is not None), autocast)


class _EagerJoint:
    """A loaded joint with symbolic sizes, at sizes its relations do not admit (the frame's
    guards do): no recorder runs on a hit, so the graph runs with eager autograd (a cold
    process records a joint for them; logged once per size signature)."""

    def __init__(self, gm):
        self.gm, self.joint = gm, types.SimpleNamespace(sizes=None, mutated=[])

    def rebuild(self, args) -> "_EagerJoint":
        log.info("pydynamo warm cache: a loaded training graph runs with eager autograd at sizes "
                 "its recording does not admit")
        return self

    def __call__(self, *args):
        return self.gm.forward(*args)


def _eager_variant(gm, example_args):
    """A loaded joint's backward variant for absent tangents (rare: an output the loss does not
    reach, first seen after the load): its graph, run eagerly."""
    return gm.forward


def _backward_graph(data: bytes, placeholders: list):
    """A loaded joint's backward graph, unpickled only for a variant (runtime.backward_graph):
    pickle drops node.meta, so the placeholders' records that runtime._zero_tangents reads
    (TensorMeta; with symbolic sizes also the size symbols' own) are put back."""
    def load():
        gm = pickle.loads(data)
        for p, val in zip([n for n in gm.graph.nodes if n.op == "placeholder"], placeholders):
            if val is not None:
                p.meta["val"] = val
        return gm
    return load


class VmapTarget(torch.nn.Module):
    """torch.vmap over a sub-graph: the stored form of a graph's vmap node target (the
    tracer's per-trace object, which no other process can name; warm_store._portable_gm makes
    it a submodule the node calls, and a wrapper's extern), pickled by value with its
    sub-graph. A module, so the graph's own unpickling (which traces its code again, modules
    kept as calls) does not run it. Runs as the tracer's does: the frame hook off inside
    (torch's vmap frames and the sub-graph's are not user code)."""

    def __init__(self, gm, in_dims: tuple, out_dims: tuple, randomness: str):
        super().__init__()
        self.gm, self.in_dims, self.out_dims, self.randomness = gm, in_dims, out_dims, randomness

    def forward(self, *args):
        with disable():
            return torch.vmap(self.gm, in_dims=self.in_dims, out_dims=self.out_dims,
                              randomness=self.randomness)(*args)


_C.set_code_state(VmapTarget.forward.__code__, "skip")


class _LazyGraph:
    """The FX graph of a C++ wrapper, unpickled (about 0.1 s for a transformer: pickle traces its
    code again) only when one of the wrapper's eager escapes first runs it."""

    def __init__(self, data: bytes):
        self.data, self.gm = data, None

    def __call__(self, *args):
        if self.gm is None:
            self.gm = pickle.loads(self.data)
        return self.gm(*args)

    def forward(self, *args):   # (the joint runtime's eager replays call gm.forward)
        return self(*args)

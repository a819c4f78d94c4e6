"""The warm-start cache: compiled frames persisted on disk, so a new process skips tracing and
compiling a frame an earlier process compiled (on when `config.warm_start`, $PYDYNAMO_WARM_START=1).

On a miss of the in-memory cache, convert_frame's callback asks `lookup` before translating; after
a translation it calls `store`. An entry is everything the hook needs to run the frame: the
replacement code object (marshal), its guards (re-bound in this process, below), the names the
code reads from the frame's globals (`__pydynamo_*`: compiled graphs and constants) and, for each
compiled graph, what rebuilds it without lowering: the FX graph (pickled: the eager backend runs
it, and codegen's eager escapes), and for codegen's C++ wrapper its source, its kernels' source
(the kernel library itself is codegen's own verified disk cache, so loading it compiles nothing),
its footer's spec (codegen/standalone.py) and its constants' values; codegen/run_wrapper.py
rebuilds the namespace from those, the one way a wrapper is rebuilt outside the pipeline.

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
    tuples/lists/frozensets of these); TENSOR_MATCH only CPU tensors; a backend other than
    "eager", "codegen"/"inductor" (the C++ wrapper, or its eager fallback), or a custom callable:
    not cached.
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
recorder functionalized): the record holds the compiled forward and backward (each an eager
graph or a C++ wrapper record as above; the backward boxed), the backward graph (unpickled only
for a variant with absent tangents, which a loaded joint runs eagerly) and what the runtime's
epilogue reads of the joint (writes, aliases, views); `CompiledJoint.loaded` rebuilds it without
recording, partitioning or compiling. The backward is compiled at the first `.backward()`, so
such a frame's entry is written then (a hook of the joint), once every joint of the frame has
its backward; a process that never runs it stores nothing. Not stored: a joint with symbolic
sizes, or whose only backward is a variant. A training hit imports pydynamo.aot (its recorder
imports sympy), not the executor or codegen's lowering.

The hit path (what a new process imports to run a loaded frame) is guards, this module,
executor/installed.py (the output code's run-time half) and codegen/runtime.py (a wrapper's);
tracing, training, recompile explanations and codegen's lowering are stages bound lazily
(pydynamo/stages.py), so a hit never imports them (sympy alone is about 0.3 s);
tests/cache/test_warm_start.py checks it in a fresh interpreter.

Safety: entries are sealed like codecache's binaries (trailer: key, sha256, size) and verified
before they are unpickled; a damaged or foreign entry is ignored with one CacheWarning and
replaced by the next store; an entry that verifies but no longer loads or binds here (a name
gone, a file edited) is stale: skipped, logged, replaced. Writes are codecache.publish's (temp
file, fsync, rename: racing writers each publish a complete file). Entries are pickles, so the
frames folder must be private: it is created 0700 and a folder another user owns or others may
write is not read (one warning). A read-only cache dir still serves; stores go to codecache's
per-process fallback dir. `save_artifacts()` / `load_artifacts(data)` move the frames and the
compiled code they use to another machine of the same kind (same versions, else unused).
"""
from __future__ import annotations

import collections
import hashlib
import io
import itertools
import linecache
import logging
import marshal
import os
import pickle
import stat
import sys
import types
import warnings
import zipfile
from typing import Optional

import torch

from codegen import codecache, run_wrapper, runtime
from pydynamo import _C
from pydynamo import autocast as _autocast
from pydynamo import config
from pydynamo.eval_frame import on_reset
from pydynamo.code_origins import origin_of, set_origin
from pydynamo.executor import installed
from pydynamo.guards import (Guard, GuardKind, ShapeGuards, TensorSpec, compile_guards, guard_rank,
                             text_key)
from pydynamo.stages import lazy

aot_runtime = lazy("pydynamo.aot.runtime")  # the training stage: only a training entry loads it

log = logging.getLogger("pydynamo.warm_cache")

FORMAT = "4"

# hits: frames loaded instead of traced; stores: entries written; uncacheable: translations
# not stored (logged with why); stale: verified entries that no longer bind; damaged: entries
# failing verification (one CacheWarning each)
stats: collections.Counter = collections.Counter()

# source files covered by versions() (their hash is not recorded per entry): the standard
# library, torch, pydynamo's and codegen's packages
_HERE = os.path.dirname(os.path.abspath(__file__))
_STDLIB = os.path.realpath(os.path.dirname(os.__file__)) + os.sep   # (sysconfig's "stdlib";
# reading that imports the build's configuration data, a millisecond of a warm start)
_ROOTS = tuple(os.path.realpath(p) + os.sep for p in (
    os.path.dirname(torch.__file__), _HERE, os.path.join(os.path.dirname(_HERE), "codegen")))
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


# ------------------------------------------------------------------ storing

def store(code, result, frame_locals: dict, frame_globals: dict, callback) -> bool:
    """Write the entry for a translation (convert_frame.FrameResult); False with one log line
    when it cannot be cached."""
    try:
        key = frame_key(code, callback)
        payload = _serialize(code, result, frame_locals, frame_globals)
        payload["guard_code"] = _guard_code(payload, callback, frame_locals, frame_globals)
        pending = [what for tag, what in payload["names"].values()
                   if tag == "graph" and isinstance(what, _PendingJoint)]
        if pending:
            _store_when_backward_compiled(code, key, payload, pending)
            return False
        blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
    except Uncacheable as e:
        stats["uncacheable"] += 1
        log.info("pydynamo warm cache: %s (%s:%d) not cached: %s", code.co_qualname,
                 code.co_filename, code.co_firstlineno, e)
        return False
    except Exception as e:          # pickling something unexpected: not cached, not an error
        stats["uncacheable"] += 1
        log.info("pydynamo warm cache: %s not cached: %s: %s", code.co_qualname,
                 type(e).__name__, e)
        return False
    return _publish(key, payload, blob)


def _publish(key: str, payload: dict, blob: bytes) -> bool:
    entry = hashlib.sha256("\n".join(payload["guard_texts"]).encode()).hexdigest()[:32]
    _frames_dir(True)

    def produce(tmp):
        with open(tmp, "wb") as f:
            f.write(blob)
    try:
        codecache._publish_sealed(_entry_rel(key, entry), key + entry, produce,
                                  "warm-start frame entry", versions())
    except OSError as e:
        log.info("pydynamo warm cache: could not write an entry: %s", e)
        return False
    stats["stores"] += 1
    _seen.setdefault(key, set()).add(entry)     # (this process has it in memory already)
    return True


class _PendingJoint:
    """A training graph whose backward is not compiled yet (at the first `.backward()`): its
    frame's entry is written then (`_store_when_backward_compiled`), whole."""

    def __init__(self, cg, compiled):
        self.cg, self.compiled = cg, compiled


def _store_when_backward_compiled(code, key: str, payload: dict, pending: list) -> None:
    """Publish `payload` once every pending joint's backward is compiled (a hook the joint calls
    inside the first backward; a failure there is logged, never raised into autograd)."""
    def hook(_compiled):
        if any(p.compiled.bw is None for p in pending):
            return
        try:
            for name, (tag, what) in list(payload["names"].items()):
                if tag == "graph" and isinstance(what, _PendingJoint):
                    payload["names"][name] = ("graph", _portable_joint(what.cg, what.compiled))
            blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            stats["uncacheable"] += 1
            log.info("pydynamo warm cache: %s not cached after its backward: %s: %s",
                     code.co_qualname, type(e).__name__, e)
            return
        _publish(key, payload, blob)
    for p in pending:
        p.compiled.on_backward.append(hook)


def _serialize(code, result, frame_locals, frame_globals) -> dict:
    files = {}
    _add_file(files, code.co_filename)
    guards = [_portable_guard(g, frame_locals, frame_globals, files) for g in result.guards]
    graphs = {g.name: g for g in result.graphs}
    names = {}
    for name in _global_names(result.new_code):
        if not name.startswith("__pydynamo_"):
            continue
        if name in graphs:
            names[name] = ("graph", _portable_graph(graphs[name]))
        elif name in frame_globals:      # a value the output code uses (identity unused)
            value = frame_globals[name]
            if isinstance(value, types.CodeType):   # a graph break's break function (generated)
                names[name] = ("value", ("marshal", marshal.dumps(value)))
                continue
            try:
                names[name] = ("value", ("const", _plain(value, name)))
            except Uncacheable:
                names[name] = ("value", _ref(value, name, files))
        else:
            raise Uncacheable(f"the output code reads {name}, which is not in the frame's globals")
    new_code = result.new_code
    source = linecache.cache.get(new_code.co_filename)
    origins = _code_marks(code, [(None, new_code)] + [
        (name, frame_globals[name]) for name, (tag, what) in names.items()
        if tag == "value" and what[0] == "marshal"])
    return {"format": FORMAT, "new_code": marshal.dumps(new_code), "guards": guards,
            "guard_texts": [g.describe() for g in result.guards], "names": names,
            "files": files, "source_lines": source[2] if source else None, "origins": origins}


def _guard_code(payload: dict, callback, frame_locals, frame_globals) -> tuple:
    """(text key, marshaled code, emission shape) of the guard function a load of `payload`
    builds: its guards bound here as a load binds them (ids and objects are constants of the
    function, so its text is the same in the loading process: guards.compile_guards' `prebuilt`
    says when it may take the code without rendering the text), compiled once now instead of in
    every process that loads the entry."""
    memo: dict = {}
    bound = [_guard(p, callback, frame_locals, frame_globals, memo) for p in payload["guards"]]
    # the records in the order of the guards they bind to (an nn.Module's identity binds as a
    # TYPE_MATCH on its class): a load binds them sorted, and compile_guards takes its prebuilt
    # code for them without sorting again
    order = sorted(range(len(bound)), key=lambda i: guard_rank(bound[i]))
    payload["guards"] = [payload["guards"][i] for i in order]
    fn = compile_guards([bound[i] for i in order], frame_globals)
    return text_key(fn.source_text), marshal.dumps(fn.module_code), fn.shape


def _code_marks(code, roots: list) -> list:
    """(root name, path of co_consts indices, whose, mapping) for every resume or break code
    object among `roots` (the output code: None, and the break functions' code by name) that
    bytecode.resume knows the origin of or the hook skips (a break function runs in CPython:
    `whose` "skip"). They are marked again at load, so a resumed frame traced again there still
    knows which user function and offsets it continues (its names in messages, and where it may
    break: never inside its own prologue). `whose`: "frame" when the origin is this frame's
    code, "frame_origin" when it is the origin of this frame (a resume frame's own)."""
    out = []
    mine = origin_of(code)

    def walk(name, path, c):
        if _C.get_code_state(c) == "skip":
            out.append((name, path, "skip", None))
        o = origin_of(c)
        if o is not None:
            if o[0] is code:
                out.append((name, path, "frame", o[1]))
            elif mine is not None and o[0] is mine[0]:
                out.append((name, path, "frame_origin", o[1]))
            else:
                raise Uncacheable(f"resume code {c.co_name} continues another function")
        for i, k in enumerate(c.co_consts):
            if isinstance(k, types.CodeType):
                walk(name, path + (i,), k)
    for name, c in roots:
        walk(name, (), c)
    return out


def _global_names(code) -> set:
    out = set(code.co_names)
    for c in code.co_consts:
        if isinstance(c, types.CodeType):
            out |= _global_names(c)
    return out


def _add_file(files: dict, path: Optional[str]) -> None:
    """Record the sha256 of a source file that is not covered by versions()."""
    if not path or path in files:
        return
    real = os.path.realpath(path)
    if real.startswith(_ROOTS) or (real.startswith(_STDLIB) and "site-packages" not in real):
        return          # (an install without a venv keeps its packages under the stdlib's folder)
    try:
        with open(path, "rb") as f:
            files[path] = hashlib.sha256(f.read()).hexdigest()
    except OSError:
        raise Uncacheable(f"source file {path} cannot be read (code not from a file)")


def _add_class(files: dict, cls) -> None:
    for c in getattr(cls, "__mro__", (cls,)):
        mod = sys.modules.get(getattr(c, "__module__", None) or "")
        if mod is not None and getattr(mod, "__file__", None):
            _add_file(files, mod.__file__)


def _ref(obj, where: str, files: dict):
    """A portable stand-in for `obj` (see the module docstring), or Uncacheable."""
    if obj is None or obj is True or obj is False or obj is Ellipsis:
        return ("const", obj)
    if isinstance(obj, float):
        return ("const", obj)
    if isinstance(obj, types.ModuleType):
        if sys.modules.get(obj.__name__) is not obj:
            raise Uncacheable(f"{where}: module {obj.__name__} is not sys.modules' own")
        _add_file(files, getattr(obj, "__file__", None))
        return ("module", obj.__name__)
    if isinstance(obj, torch.nn.Module):
        _add_class(files, type(obj))
        return ("instance", _named(type(obj), where, files))
    if isinstance(obj, types.CodeType):     # (read as fn.__code__): found again by content
        _add_file(files, obj.co_filename)
        return ("code", None, obj.co_qualname, _code_hash(obj), None)
    try:
        return ("named", _named(obj, where, files))
    except Uncacheable:
        if type(obj) is not types.FunctionType:
            raise
    # a function with no name that finds it (a closure, a decorator's wrapped function): found
    # again through the guard's source in the new frame, and accepted only with the same code,
    # the same module globals, and (through the guards on them) the same defaults and cells
    _add_file(files, obj.__code__.co_filename)
    return ("code", obj.__module__, obj.__qualname__, _code_hash(obj.__code__),
            _module_globals(obj))


def _module_globals(fn) -> bool:
    mod = sys.modules.get(fn.__module__ or "")
    return mod is not None and fn.__globals__ is mod.__dict__


def _named(obj, where: str, files: dict):
    """(pickled reference, module, qualname, code hash) for an object pickle writes by name."""
    try:
        data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
        same = pickle.loads(data) is obj
    except Exception:
        same = False
    if not same:
        raise Uncacheable(f"{where} holds a {type(obj).__qualname__} with no stable identity "
                          "across processes")
    code = getattr(obj, "__code__", None)
    if isinstance(obj, type):
        _add_class(files, obj)
    elif isinstance(code, types.CodeType):
        _add_file(files, code.co_filename)
    return (data, getattr(obj, "__module__", None), getattr(obj, "__qualname__", None),
            _code_hash(code))


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


def _portable_guard(g: Guard, frame_locals, frame_globals, files) -> tuple:
    k = g.kind
    where = f"a guard on {g.source.name() if g.source is not None else k.value}"
    if k is GuardKind.COMPILE_SETTINGS:
        return ("settings",)
    if k is GuardKind.SHAPE_ENV:     # its check function's source is plain Python (shapes.py)
        sg: ShapeGuards = g.expected
        return ("shape", sg.check.__source__, sg.texts, sg.origins, g.origin)
    if k is GuardKind.ID_MATCH:
        obj = eval(g.source.guard_expr(), {"L": frame_locals, "G": frame_globals})
        if id(obj) != g.expected[0]:
            raise Uncacheable(f"{where}: the object changed during tracing")
        return ("id", g.source, _ref(obj, where, files), g.expected[1], g.origin)
    if k is GuardKind.TYPE_MATCH:
        return ("type", g.source, _named(g.expected, where, files), g.origin)
    if k is GuardKind.TENSOR_MATCH:
        s: TensorSpec = g.expected
        if s.device.type != "cpu":
            raise Uncacheable(f"{where}: a {s.device.type} tensor (only CPU entries are cached)")
        return ("tensor", g.source, _named(s.cls, where, files), s, g.origin)
    if k is GuardKind.GLOBAL_STATE:
        return ("plain", g.source, k, _plain(g.expected, where), g.origin)
    if k in (GuardKind.EQUALS_MATCH, GuardKind.LEN, GuardKind.DICT_KEYS):
        return ("plain", g.source, k, _plain(g.expected, where), g.origin)
    if k is GuardKind.ALIASING:
        return ("plain", g.source, k, g.expected, g.origin)
    raise Uncacheable(f"{where}: guard kind {k.value}")


def _portable_graph(cg):
    fn = cg.backend_fn
    compiled = getattr(fn, "compiled", None)
    if compiled is not None and type(compiled).__name__ == "CompiledJoint":
        if compiled.function is not None and compiled.bw is None:
            return _PendingJoint(cg, compiled)
        return _portable_joint(cg, compiled)
    gm = pickle.dumps(cg.gm, protocol=pickle.HIGHEST_PROTOCOL)
    if getattr(fn, "__self__", None) is cg.gm or getattr(fn, "wrapper_path", "x") is None:
        return ("eager", gm)     # gm.forward, or codegen's eager fallback: runs the graph
    if getattr(fn, "wrapper_path", None) is None or getattr(fn, "kernel_path", None) is not None \
            or type(fn) is not types.FunctionType or hasattr(fn, "boxed_entry"):
        raise Uncacheable(f"graph {cg.name}: a compiled {type(fn).__qualname__} (cached: the "
                          "eager backend and codegen's C++ wrappers)")
    autocast = any(n.target is _autocast.enter_autocast for n in cg.gm.graph.nodes)
    return ("cpp", gm) + _wrapper_record(cg.name, fn) + (autocast,)


def _portable_joint(cg, compiled) -> tuple:
    """A training graph (pydynamo/aot/runtime.py's CompiledJoint, behind `_dispatching`), or an
    inference graph the recorder functionalized: what rebuilds it without recording,
    partitioning or compiling: its compiled forward and backward (each as `_portable_compiled`),
    the backward graph (for a variant with absent tangents, run eagerly after a load) and what
    the runtime's epilogue reads of the joint."""
    joint = compiled.joint
    if getattr(joint, "sizes", None) is not None or aot_runtime.is_dynamic(cg.gm):
        raise Uncacheable(f"graph {cg.name}: a training graph with dynamic sizes")
    if any(kind == "alias" and getattr(what, "at", None) is not None
           for kind, what in joint.user_outputs):
        raise Uncacheable(f"graph {cg.name}: an output view with symbolic geometry")
    epilogue = {"num_inputs": joint.num_inputs, "computed": len(joint.computed),
                "differentiable": list(joint.differentiable), "mutated": list(joint.mutated),
                "user_outputs": list(joint.user_outputs), "grad_inputs": list(joint.grad_inputs),
                "num_tangents": joint.num_tangents, "view_bases": dict(joint.view_bases)}
    fw = _portable_compiled(cg.name, compiled.fw_gm, compiled.fw)
    bw = bw_gm = None
    if compiled.function is not None:
        bw = _portable_compiled(cg.name, compiled.bw_gm, compiled.bw_compiled)
        placeholders = [(tuple(v.shape), v.dtype, v.device) if hasattr(v, "dtype") else None
                        for v in (p.meta.get("val") for p in compiled.bw_gm.graph.nodes
                                  if p.op == "placeholder")]
        bw_gm = (pickle.dumps(compiled.bw_gm, protocol=pickle.HIGHEST_PROTOCOL), placeholders)
    autocast = any(n.target is _autocast.enter_autocast for n in cg.gm.graph.nodes)
    return ("joint", pickle.dumps(cg.gm, protocol=pickle.HIGHEST_PROTOCOL),
            pickle.dumps(epilogue, protocol=pickle.HIGHEST_PROTOCOL), fw, bw, bw_gm,
            list(compiled.grad_positions), compiled.num_saved, autocast)


def _portable_compiled(name: str, gm, fn) -> tuple:
    """One compiled half of a joint: ("eager", gm) where it runs its graph (the aot_eager
    backend, codegen's eager fallback), else ("cpp", gm, <the wrapper's record>)."""
    data = pickle.dumps(gm, protocol=pickle.HIGHEST_PROTOCOL)
    if getattr(fn, "__self__", None) is gm or getattr(fn, "wrapper_path", "x") is None:
        return ("eager", data)
    if type(fn) is not types.FunctionType or getattr(fn, "wrapper_path", None) is None \
            or getattr(fn, "kernel_path", None) is not None:
        raise Uncacheable(f"graph {name}: a compiled {type(fn).__qualname__} in its joint")
    return ("cpp", data) + _wrapper_record(name, fn)


def _wrapper_record(name: str, fn) -> tuple:
    """What codegen/run_wrapper.namespace needs to rebuild a C++ wrapper's namespace, read from
    the live one (`fn.__globals__`, pipeline.build's): its spec, kernels' source, extern
    arguments and constants."""
    import ctypes
    from codegen import standalone
    from codegen.options import VECTOR_WIDTHS, Options
    ns = fn.__globals__
    with open(fn.wrapper_path) as f:
        wsrc = f.read()
    if ns.get("_scalar_fns"):
        raise Uncacheable(f"graph {name}: a runtime float's Python function")
    externs = [standalone.qualified_name(t) for t in ns["_externs"]]
    if None in externs:
        raise Uncacheable(f"graph {name}: extern {ns['_externs'][externs.index(None)]!r} has no "
                          "importable name")
    kind_of = {v: k for k, v in runtime.CTYPES_BY_KIND.items()}
    bindings = {}
    for k, v in ns.items():
        if isinstance(v, ctypes._CFuncPtr):
            kinds = {f"a{i}": kind_of[t] for i, t in enumerate(v.argtypes)}
            bindings[k] = {"args": list(kinds), "kinds": kinds}
    ksrc, width = None, "512"
    if bindings:
        lpath = fn.library_path
        with open(lpath[:-3] + ".cpp") as f:
            ksrc = f.read()
        widths = [w for w in VECTOR_WIDTHS if codecache.source_key(ksrc, codecache.cxxflags(w))
                  == os.path.basename(lpath)[:-3]]
        if not widths:
            raise Uncacheable(f"graph {name}: its kernels' source is not its library's")
        width = widths[0]
    constants = {k: v for k, v in ns.items() if isinstance(v, torch.Tensor)}
    spec = {"backend": "cpp", "device": "cpu", "kernels_path": "<entry>" if ksrc else None,
            "vector_width": width, "fast_launch": Options().triton_fast_launch,
            "bindings": bindings, "externs": externs, "consts": [],
            "constants": dict.fromkeys(constants)}
    # the wrapper's code compiled now (marshal), so a load does not compile it again (about as
    # long as the rest of a hit's rebuild); used where the wrapper file is at the same path then
    code = marshal.dumps(compile(wsrc, fn.wrapper_path, "exec"))
    return (wsrc, ksrc, spec, pickle.dumps((list(ns["_consts"]), constants),
                                           protocol=pickle.HIGHEST_PROTOCOL), code)


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
    if tag == "tensor":
        import dataclasses
        return Guard(p[1], GuardKind.TENSOR_MATCH,
                     dataclasses.replace(p[3], cls=_resolve_named(p[2], memo)), p[4])
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
    if ref[0] == "module":
        import importlib
        return importlib.import_module(ref[1])
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


def _rebuild_compiled(rec: tuple, gm, boxed: bool = False):
    """The callable a ("eager", gm) / ("cpp", gm, <wrapper record>) record stands for, for graph
    `gm` (a _LazyGraph: the wrapper's eager escapes run it); `boxed`: taking one list."""
    if rec[0] == "eager":
        return (lambda args: gm(*args)) if boxed else gm
    _, _, wsrc, ksrc, spec, values, code = rec
    consts, constants = pickle.loads(values)
    ns = run_wrapper.namespace(spec, runtime.fallbacks(gm), constants, ksrc, consts)
    path = codecache.write_wrapper(wsrc)
    code = marshal.loads(code)
    exec(code if code.co_filename == path else compile(wsrc, path, "exec"), ns)
    call = ns["call"]
    call.wrapper_path, call.library_path = path, None
    return ns["call_boxed"] if boxed else call


def _rebuild_joint(rec: tuple):
    _, gm_data, epilogue, fw_rec, bw_rec, bw_gm, grad_positions, num_saved, autocast = rec
    gm = _LazyGraph(gm_data)
    fields = pickle.loads(epilogue)
    fields["computed"] = [None] * fields["computed"]     # (only their number is read)
    joint = aot_runtime.Joint(gm=None, **fields)
    bw = bw_graph = bw_compiler = None
    if bw_rec is not None:
        bw = _rebuild_compiled(bw_rec, _LazyGraph(bw_rec[1]), boxed=True)
        bw_graph, bw_compiler = _backward_graph(*bw_gm), _eager_variant
    fw = _rebuild_compiled(fw_rec, _LazyGraph(fw_rec[1]))
    c = aot_runtime.CompiledJoint.loaded(joint, fw, bw, bw_graph,
                                         grad_positions, num_saved, bw_compiler, "loaded")
    return installed.wrap_compiled(gm, aot_runtime._dispatching(gm, c, None, dynamic=False),
                                   autocast)


def _eager_variant(gm, example_args):
    """A loaded joint's backward variant for absent tangents (rare: an output the loss does not
    reach, first seen after the load): its graph, run eagerly."""
    return gm.forward


def _backward_graph(data: bytes, placeholders: list):
    """A loaded joint's backward graph, unpickled only for a variant (runtime.backward_graph):
    pickle drops node.meta, so the placeholders' (shape, dtype, device) that
    runtime._zero_tangents reads are put back."""
    def load():
        gm = pickle.loads(data)
        for p, spec in zip([n for n in gm.graph.nodes if n.op == "placeholder"], placeholders):
            if spec is not None:
                p.meta["val"] = types.SimpleNamespace(shape=spec[0], dtype=spec[1], device=spec[2])
        return gm
    return load


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


# ------------------------------------------------------------------ moving a warm cache

_CARRIED = ("frames", "cpp", "wrappers")


def save_artifacts() -> bytes:
    """The warm cache (frame entries, kernel libraries and their sources, wrappers) as one zip,
    for `load_artifacts` on another machine of the same kind (entries keyed for other versions
    or CPUs are simply never looked up there; every file is verified again when used)."""
    root = codecache.cache_dir()
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as z:
        for top in _CARRIED:
            if top == "frames" and _frames_dir(False) is None:
                continue
            for d, _, files in os.walk(os.path.join(root, top)):
                for f in sorted(files):
                    if f.endswith(".tmp"):
                        continue
                    path = os.path.join(d, f)
                    z.write(path, os.path.relpath(path, root))
    return buf.getvalue()


def load_artifacts(data: bytes) -> int:
    """Write what save_artifacts() returned into this cache dir (atomically, file by file);
    returns how many files. Only the folders it carries, no path outside them; the entries are
    pickles, so `data` must come from a source as trusted as this user's own files."""
    n = 0
    _frames_dir(True)
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        for info in z.infolist():
            rel = os.path.normpath(info.filename)
            parts = rel.split(os.sep)
            if info.is_dir() or rel.startswith(("/", "..")) or parts[0] not in _CARRIED \
                    or ".." in parts:
                continue
            blob = z.read(info)

            def produce(tmp, blob=blob):
                with open(tmp, "wb") as f:
                    f.write(blob)
            codecache.publish(rel, produce)
            n += 1
    return n

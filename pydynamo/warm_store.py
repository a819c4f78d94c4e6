"""The warm-start cache's writing half: an entry stored for a translated frame, and a cache moved
to another machine (pydynamo.save_artifacts / load_artifacts). The format, the key, what an entry
holds and every safety rule are pydynamo/warm_cache.py's (its docstring), which reads entries; this
module only writes what that one reads.

It is a stage of convert_frame (pydynamo/stages.py): a process whose frames all load from the cache
never imports it, nor what serializing needs (the portable names of guarded objects, the
wrappers' records), so a warm hit's imports stay the reading half's.

Invariants: an entry is published whole (codecache's sealed publish: temp file, fsync, rename);
what cannot be made portable raises warm_cache.Uncacheable (the frame is not stored, one log
line), never an error to the user; the guard function compiled here is the one a load binds
(`_guard_code` binds the records with warm_cache's own `_guard`).
"""
from __future__ import annotations

import ctypes
import dataclasses
import hashlib
import io
import linecache
import marshal
import os
import pickle
import sys
import types
import zipfile
from typing import Optional

import sympy
import torch

from codegen import codecache, runtime, standalone
from codegen.options import VECTOR_WIDTHS, Options
from pydynamo import _C
from pydynamo import autocast as _autocast
from pydynamo.code_origins import origin_of
from pydynamo.meta import TensorMeta
from pydynamo.guards import Guard, GuardKind, ShapeGuards, TensorSpec, compile_guards, guard_rank, text_key
from pydynamo.stages import lazy
from pydynamo.warm_cache import (FORMAT, Uncacheable, VmapTarget, _code_hash, _entry_rel, _frames_dir,
                                 _gpu_model, _guard, _module_globals, _plain, _seen, frame_key,
                                 log, stats, versions)

aot_runtime = lazy("pydynamo.aot.runtime")  # the training stage: a training entry's record

# source files covered by versions() (their hash is not recorded per entry): the standard
# library, torch, pydynamo's and codegen's packages
_HERE = os.path.dirname(os.path.abspath(__file__))
_STDLIB = os.path.realpath(os.path.dirname(os.__file__)) + os.sep   # (sysconfig's "stdlib";
# reading that imports the build's configuration data, a millisecond)
_ROOTS = tuple(os.path.realpath(p) + os.sep for p in (
    os.path.dirname(torch.__file__), _HERE, os.path.join(os.path.dirname(_HERE), "codegen")))


# ------------------------------------------------------------------ storing

def store(code, result, frame_locals: dict, frame_globals: dict, callback) -> bool:
    """Write the entry for a translation (convert_frame.FrameResult); False with one log line
    when it cannot be cached."""
    try:
        key = frame_key(code, callback)
        payload = _serialize(code, result, frame_locals, frame_globals)
        payload["guard_code"] = _guard_code(payload, callback, frame_locals, frame_globals)
        pending = {name: what for name, (tag, what) in payload["names"].items()
                   if tag == "graph" and isinstance(what, _PendingJoint)}
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
    """A training graph with no backward compiled yet (at the first `.backward()`: the full
    backward, or a variant for absent tangents, e.g. an input written in place whose new value
    the loss does not reach): its frame's entry is written then (`_store_when_backward_compiled`),
    whole."""

    def __init__(self, cg, compiled):
        self.cg, self.compiled = cg, compiled


def _store_when_backward_compiled(code, key: str, payload: dict, pending: dict) -> None:
    """Publish `payload` once every pending joint has a backward compiled (a hook the joint
    calls inside the backward; a failure there is logged, never raised into autograd); again
    when one compiles another (the full backward, a variant), so the entry holds what this
    process compiled."""
    def hook(_compiled):
        if any(not p.compiled.bw_compiled for p in pending.values()):
            return
        try:
            for name, p in pending.items():
                payload["names"][name] = ("graph", _portable_joint(p.cg, p.compiled))
            blob = pickle.dumps(payload, protocol=pickle.HIGHEST_PROTOCOL)
        except Exception as e:
            stats["uncacheable"] += 1
            log.info("pydynamo warm cache: %s not cached after its backward: %s: %s",
                     code.co_qualname, type(e).__name__, e)
            return
        _publish(key, payload, blob)
    for p in pending.values():
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
        if s.device.type not in ("cpu", "cuda"):   # (the spec pins the device, index included)
            raise Uncacheable(f"{where}: a {s.device.type} tensor (cached: CPU and CUDA)")
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
        if compiled.function is not None and not compiled.bw_compiled:
            return _PendingJoint(cg, compiled)
        return _portable_joint(cg, compiled)
    gm = pickle.dumps(_portable_gm(cg.gm), protocol=pickle.HIGHEST_PROTOCOL)
    if getattr(fn, "__self__", None) is cg.gm or getattr(fn, "wrapper_path", "x") is None:
        return ("eager", gm)     # gm.forward, or codegen's eager fallback: runs the graph
    if hasattr(fn, "boxed_entry"):
        raise Uncacheable(f"graph {cg.name}: a boxed wrapper outside a joint")
    autocast = any(n.target is _autocast.enter_autocast for n in cg.gm.graph.nodes)
    return _wrapper_record(cg.name, fn, gm) + (autocast,)


def _portable_joint(cg, compiled) -> tuple:
    """A training graph (pydynamo/aot/runtime.py's CompiledJoint, behind `_dispatching`), or an
    inference graph the recorder functionalized: what rebuilds it without recording,
    partitioning or compiling: its compiled forward and backward (each as `_portable_compiled`),
    the backward graph (for a variant with absent tangents, run eagerly after a load) and what
    the runtime's epilogue reads of the joint."""
    joint = compiled.joint
    sizes = joint.sizes
    if sizes is None and aot_runtime.is_dynamic(cg.gm):
        # (its dispatcher records a joint per new signature: a load has no recorder to call)
        raise Uncacheable(f"graph {cg.name}: a graph with symbolic sizes recorded at concrete "
                          "ones")
    # symbolic sizes: the spec and the aliases' geometry without their generated functions
    # (recorder.attach_sizes makes them again at load from the spec's source and expressions)
    user_outputs = [(kind, dataclasses.replace(what, at=None) if kind == "alias" else what)
                    for kind, what in joint.user_outputs]
    epilogue = {"num_inputs": joint.num_inputs, "computed": len(joint.computed),
                "differentiable": list(joint.differentiable), "mutated": list(joint.mutated),
                "user_outputs": user_outputs, "grad_inputs": list(joint.grad_inputs),
                "num_tangents": joint.num_tangents, "view_bases": dict(joint.view_bases),
                "sizes": sizes and dataclasses.replace(sizes, admits=None)}
    fw = _portable_compiled(cg.name, compiled.fw_gm, compiled.fw)
    bw = bw_gm = None
    variants = {}
    if compiled.function is not None:
        # the backward compiled for each set of absent tangents this process met (the full one:
        # `()`); one not among them runs its graph eagerly after a load
        variants = {absent: _portable_compiled(cg.name, gm, fn)
                    for absent, (gm, fn) in compiled.bw_compiled.items()}
        bw = variants.pop((), None)
        # what a variant's zeros read of the placeholders (runtime._zero_tangents): their
        # records (symbolic sizes: sympy expressions, and the size symbols' own placeholders)
        placeholders = [v if isinstance(v, (TensorMeta, sympy.Symbol)) else None
                        for v in (p.meta.get("val") for p in compiled.bw_gm.graph.nodes
                                  if p.op == "placeholder")]
        bw_gm = (pickle.dumps(_portable_gm(compiled.bw_gm), protocol=pickle.HIGHEST_PROTOCOL),
                 placeholders)
    autocast = any(n.target is _autocast.enter_autocast for n in cg.gm.graph.nodes)
    return ("joint", pickle.dumps(_portable_gm(cg.gm), protocol=pickle.HIGHEST_PROTOCOL),
            pickle.dumps(epilogue, protocol=pickle.HIGHEST_PROTOCOL), fw, bw, bw_gm,
            list(compiled.grad_positions), compiled.num_saved, autocast, variants)


def _portable_compiled(name: str, gm, fn) -> tuple:
    """One compiled half of a joint: ("eager", gm) where it runs its graph (the aot_eager
    backend, codegen's eager fallback), else ("cpp" | "triton", gm, <the wrapper's record>)."""
    data = pickle.dumps(_portable_gm(gm), protocol=pickle.HIGHEST_PROTOCOL)
    if getattr(fn, "__self__", None) is gm or getattr(fn, "wrapper_path", "x") is None:
        return ("eager", data)
    return _wrapper_record(name, fn, data)


def _wrapper_record(name: str, fn, gm: bytes) -> tuple:
    """(kind, gm, wrapper source, kernels' source, spec, extern arguments and constants, the
    wrapper's code) of a codegen wrapper, kind "cpp" or "triton": what
    codegen/run_wrapper.namespace needs to rebuild its namespace, read from the live one
    (`fn.__globals__`, pipeline.build's). A wrapper behind CUDA-graph replay (mode
    "reduce-overhead") is recorded as the wrapper, and the replay's settings go in the spec
    (`cudagraphs`): a load wraps the rebuilt wrapper in a new runner, which captures again."""
    replay = None
    if (type(fn).__module__, type(fn).__qualname__) == ("codegen.cudagraphs", "CudaGraphRunner"):
        replay = {"mutated": list(fn.mutated), "copy_back": list(fn.copy_back),
                  "outputs": fn.outputs, "matches": fn.matches is not None}
        fn = fn.fn
    if type(fn) is not types.FunctionType or getattr(fn, "wrapper_path", None) is None:
        raise Uncacheable(f"graph {name}: a compiled {type(fn).__qualname__} (cached: the eager "
                          "backend, codegen's C++ and Triton wrappers)")
    triton = hasattr(fn, "kernel_source")      # (pipeline.build: the Triton backend's callable)
    ns = fn.__globals__
    with open(fn.wrapper_path) as f:
        wsrc = f.read()
    if ns.get("_scalar_fns"):
        raise Uncacheable(f"graph {name}: a runtime float's Python function")
    # a vmap target is stored by value (resolved as a placeholder name, then replaced at load)
    vmaps = {i: _portable_vmap(t) for i, t in enumerate(ns["_externs"]) if _is_vmap(t)}
    externs = ["builtins.object" if i in vmaps else standalone.qualified_name(t)
               for i, t in enumerate(ns["_externs"])]
    if None in externs:
        raise Uncacheable(f"graph {name}: extern {ns['_externs'][externs.index(None)]!r} has no "
                          "importable name")
    if triton:
        ksrc, bindings, width, fast, device = _triton_parts(name, fn)
    else:
        ksrc, bindings, width = _cpp_parts(name, fn)
        fast, device = Options().triton_fast_launch, "cpu"
    constants = {k: v for k, v in ns.items() if isinstance(v, torch.Tensor)}
    spec = {"backend": "triton" if triton else "cpp", "device": device, "gpu": _gpu_model(device),
            "kernels_path": "<entry>" if ksrc else None, "vector_width": width,
            "fast_launch": fast, "bindings": bindings, "externs": externs, "consts": [],
            "constants": dict.fromkeys(constants), "cudagraphs": replay, "vmaps": vmaps}
    # the wrapper's code compiled now (marshal), so a load does not compile it again (about as
    # long as the rest of a hit's rebuild); used where the wrapper file is at the same path then
    code = marshal.dumps(compile(wsrc, fn.wrapper_path, "exec"))
    return (spec["backend"], gm, wsrc, ksrc, spec, pickle.dumps(
        (list(ns["_consts"]), constants), protocol=pickle.HIGHEST_PROTOCOL), code)


def _is_vmap(target) -> bool:
    """The tracer's vmap target (pydynamo/executor/higher_order.py's VmapCall: named by type,
    so storing an entry does not import the tracing stage for it)."""
    return (type(target).__module__, type(target).__qualname__) == \
        ("pydynamo.executor.higher_order", "VmapCall")


def _portable_vmap(target) -> VmapTarget:
    return VmapTarget(_portable_gm(target.gm), target.in_dims, target.out_dims,
                      target.randomness)


def _portable_gm(gm):
    """`gm` as pickle can write it: itself, or, where a node calls torch.vmap over a traced
    sub-graph (a target no other process can name: pickle writes a graph's targets by name), a
    copy whose such node calls a VmapTarget submodule instead (nested sub-graphs alike)."""
    if not any(n.op == "call_function" and _is_vmap(n.target) for n in gm.graph.nodes):
        return gm
    graph = torch.fx.Graph()
    graph.output(graph.graph_copy(gm.graph, {}))
    out = torch.fx.GraphModule(gm, graph)
    out.meta.update(gm.meta)
    for k, n in enumerate([n for n in graph.nodes if n.op == "call_function" and
                           _is_vmap(n.target)]):
        name = f"_pydynamo_vmap_{k}"
        out.add_submodule(name, _portable_vmap(n.target))
        n.op, n.target = "call_module", name
    out.recompile()
    return out


def _cpp_parts(name: str, fn) -> tuple:
    """(kernels' source, bindings, vector width) of a C++ wrapper: each kernel's ctypes
    argument kinds, the library's source checked to be the one its name hashes."""
    kind_of = {v: k for k, v in runtime.CTYPES_BY_KIND.items()}
    bindings = {}
    for k, v in fn.__globals__.items():
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
    return ksrc, bindings, width


def _triton_parts(name: str, fn) -> tuple:
    """(kernels' source, bindings, vector width, fast launch, device) of a Triton wrapper: how
    each kernel is bound (block size, warps, launch argument kinds) is what pipeline.build kept
    (`launch_spec`); the kernels' module is its own source (loaded from it again: on CUDA,
    Triton's on-disk cache makes its compile a hit)."""
    launch_spec = getattr(fn, "launch_spec", None)
    if not isinstance(launch_spec, dict):
        raise Uncacheable(f"graph {name}: a Triton wrapper without its kernels' bindings")
    ksrc = fn.kernel_source if fn.kernel_path else None
    if (ksrc is None) != (not launch_spec["bindings"]):
        raise Uncacheable(f"graph {name}: its kernels' source and bindings disagree")
    return (ksrc, launch_spec["bindings"], launch_spec["vector_width"],
            launch_spec["fast_launch"], str(fn.__globals__["_device"]))


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

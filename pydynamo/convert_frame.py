"""convert_frame: the callback the C hook calls on a cache miss (contract: INTERNALS.md §1).

Decides whether to trace (skip rules: skipfiles.py), enforces the recompile budget, runs the
translator and returns (guard, new_code). Policy:
  * skip: generators/coroutines, module bodies, stdlib, torch internals (except nn module
    `forward`s), pydynamo itself, functions marked `pydynamo.disable` -> SKIP_CODE. A torch.nn
    forward called from code pydynamo gave up on (a frame run eagerly, a break's call) runs as
    is (None), as under torch.compile; a frame with no graph that asked is_compiling() runs as
    is for good (SKIP_CODE): called from eager code it answers as eager.
  * stance (stance.py): under "eager_on_recompile" a miss runs the frame as is (None: asked
    again next time, so the stance can change back); under "fail_on_recompile" it raises
    RecompileError naming each failing guard of this settings' entries.
  * budget: once a code object has `recompile_limit` entries of one settings (optimize's
    argument, else `config.recompile_limit` read at each miss), existing
    entries keep serving and new inputs run eagerly (RUN_ONLY; None while callbacks of other
    settings live, and a callback made later un-marks such codes, so another optimize() of the
    code still compiles it) — one warning naming the last failing guard; nothing good is discarded.
  * a failure inside translation runs that frame eagerly (SKIP_CODE) with one warning naming the
    user's file:line and the reason; under fullgraph=True, or where pydynamo.error_on_graph_break
    is on at the failing instruction (Unsupported.strict), it raises FullGraphError instead.
    Backend errors are raised (BackendCompilerFailed): they are not the user's code's fault.
  * settings: make_callback gives one callback per distinct optimize() settings (backend, mode,
    options, fullgraph, dynamic); each entry it compiles is guarded on being called under that
    callback (COMPILE_SETTINGS), so another optimize() of the same code compiles its own entries
    and the recompile budget counts each settings' entries apart.
`translate(code, frame_locals, globals)` is the pure core, usable without the hook.
"""
from __future__ import annotations

import collections
import os
import sys
import types
import warnings
import weakref
from typing import Any, Callable, Optional

import torch

from pydynamo import _C
from pydynamo import autocast as _autocast
from pydynamo import config, logs, phases
from pydynamo import stance as _stance
from pydynamo.backends import CODEGEN, codegen_options, lookup_backend
from pydynamo.code_origins import user_frame_name
from pydynamo.eval_frame import on_reset
from pydynamo.exc import (BackendCompilerFailed, FullGraphError, GraphBreak, GraphBreakWarning,
                          RecompileError, RecompileLimitWarning, Unsupported)
from pydynamo import installed
from pydynamo.guards import compile_guards, current_global_state, Guard, GuardKind, ShapeGuards
from pydynamo.records import record
from pydynamo.skipfiles import skip_reason
from pydynamo.stages import lazy
from pydynamo.versions import unsupported_python
from pydynamo import warm_cache

# the stages a warm-start hit never enters (pydynamo/stages.py): tracing, training's recorder,
# recompile explanations and the compile report (sympy through the shape symbols)
translator = lazy("pydynamo.executor.translator")
resume = lazy("pydynamo.bytecode.resume")     # the bytecode package: tracing's, not a hit's
recorder = lazy("pydynamo.aot.recorder")
recompiles = lazy("pydynamo.recompiles")
shapes = lazy("pydynamo.shapes")
report = lazy("pydynamo.report")
hints = lazy("pydynamo.hints")     # a failed translation's messages (its patterns: 0.6 ms to import)
warm_store = lazy("pydynamo.warm_store")   # writing a warm-start entry (a hit only reads one)
# DDP's bucket splits and the ranks' agreement on guards: a compile's, or a hit's where
# config.distributed_guard_check is on (see _checked)
distributed = lazy("pydynamo.distributed")


@record(frozen=False)
class FrameResult:
    """Everything one successful translation produced (explain() and logs read it)."""
    code: types.CodeType
    new_code: types.CodeType
    guard: Callable
    guards: list
    graphs: list            # CompiledGraph records
    output_source: str
    compile_time_s: float   # the sum of `times`
    graph_break: Optional[GraphBreak] = None  # the frame was cut here (its rest is a resume function)
    shape_env: Any = None   # shapes.ShapeEnv when the frame had symbolic sizes (guards, stats)
    times: Optional[phases.Clock] = None   # compile time by phase, files written
    asked_compiling: bool = False   # the trace answered torch.compiler.is_compiling() & co.

    def guard_texts(self) -> list:
        """The guards as a user reads them (a resume function's stack arguments as expressions)."""
        return [recompiles.user_names(self.code, g.describe()) for g in self.guards]


# Reasons that must never be cut into a graph break (the frame runs eagerly as a whole).
UNBREAKABLE = frozenset({"python_version", "grad_mode_leak", "layout", "odd_name", "name_clash"})

# Observers of translations (explain() installs one); each gets a FrameResult, a GraphBreak (a
# frame that runs eagerly as a whole) or a RecompileExplanation (before a recompile). The compile
# report (config.report_dir) gets the same, and unlike these leaves the warnings on.
RECORDERS: list[Callable[[Any], None]] = []


def _observed() -> bool:
    return bool(RECORDERS) or config.report_dir is not None


def _observe(code: types.CodeType, item) -> None:
    for rec in RECORDERS:
        rec(item)
    if config.report_dir is not None:
        report.record(item, code)


# Dynamic-shape counters over all translations (tests read them): "specialized_ops" (calls
# without a symbolic shape rule that pinned the sizes they touched), "specializations",
# "symbolic_frames".
COUNTERS: collections.Counter = collections.Counter()

# Automatic dynamic: per code object, the input sizes seen by its translations.
_AUTO: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()


def automatic_dynamic(code: types.CodeType):
    auto = _AUTO.get(code)
    if auto is None:
        auto = _AUTO[code] = shapes.AutomaticDynamic()
    return auto


def translate(code: types.CodeType, frame_locals: dict, frame_globals: dict, builtins: Optional[dict] = None,
              backend: Any = "eager", allow_breaks: bool = False, dynamic: Optional[bool] = None,
              auto: Any = None, callback: Any = None) -> FrameResult:
    """Trace `code` over `frame_locals` and return the replacement code and its guard.
    Raises Unsupported when the frame cannot be captured in one graph, unless `allow_breaks`:
    then the frame is traced again up to the failing root instruction and cut there (a graph
    break, executor/breaks.py); Unsupported only if even that is impossible.
    `dynamic` is optimize's policy (None: automatic dynamic through `auto`, the code's
    shapes.AutomaticDynamic; True: every dim symbolic; False: none).
    `callback`: the compile callback (make_callback) the entry is for; its guard then also
    requires that callback to be the thread's current one (a COMPILE_SETTINGS guard)."""
    with phases.compiling() as clock:
        result = _translate(code, frame_locals, frame_globals, builtins, backend, allow_breaks,
                            dynamic, auto, callback)
    result.times, result.compile_time_s = clock, clock.total()
    _log_result(result)
    return result


def _translate(code, frame_locals, frame_globals, builtins, backend, allow_breaks, dynamic, auto,
               callback) -> FrameResult:
    if unsupported_python():
        raise Unsupported("python_version", unsupported_python())
    if not _autocast.modelled():
        # autocast on a device whose state the executor does not model (xpu, mps, ...)
        raise Unsupported("autocast", "called with autocast enabled on a device other than cpu/cuda")
    if torch._C._are_functorch_transforms_active():
        # inputs are functorch wrappers (no storage of their own): run eagerly, as torch.compile does
        raise Unsupported("functorch", "called inside a torch.func transform (vmap, grad, ...)")
    bltins = builtins if builtins is not None else frame_globals.get("__builtins__", {})
    backend_fn = lookup_backend(backend)
    tx = translator.InstructionTranslator(code, frame_locals, frame_globals, bltins, backend_fn, dynamic=dynamic, auto=auto)
    strict = _stance.error_on_graph_break_now()
    tx.strict_breaks = [strict]   # error_on_graph_break's value while tracing (variables/strict.py)
    reason = None
    try:
        with recorder.user_hooks_hidden():   # tracing's meta examples are not theirs
            tx.run()
    except Unsupported as e:
        bp = getattr(e, "breakpoint", None)
        if getattr(e, "strict", None) is None:
            e.strict = strict
        # an exception eager raises too, that the traced code does not catch (executor's
        # graph_break_handler): the frame runs eagerly, where it may take another path
        if not allow_breaks or bp is None or e.reason_code in UNBREAKABLE or e.strict or \
                getattr(e, "raises", False):
            raise
        reason = e.graph_break
        tx = translator.InstructionTranslator(code, frame_locals, frame_globals, bltins, backend_fn, breakpoint=bp,
                                   dynamic=dynamic, auto=auto)
        try:
            with recorder.user_hooks_hidden():   # tracing's meta examples are not theirs
                tx.run()
        except Unsupported as e2:  # cannot cut here: the whole frame runs eagerly, say why
            e.message = hints.user_message(f"{e.message} (and no graph break possible there: {e2.message})")
            if e.graph_break is not None:
                e.graph_break.message = e.message
            raise e from None
        if tx.result is None:
            raise
    new_code, text = tx.result
    guards = list(tx.guards) + [Guard(None, GuardKind.GLOBAL_STATE, current_global_state(tx.state_read),
                                      f"{code.co_filename}:{code.co_firstlineno}")]
    if callback is not None:
        guards.append(Guard(None, GuardKind.COMPILE_SETTINGS, callback))
    env = tx.shape_env if tx.shape_env.var_to_hint else None
    if env is not None:
        guards.append(Guard(None, GuardKind.SHAPE_ENV, ShapeGuards.of(env),
                            f"{code.co_filename}:{code.co_firstlineno}"))
        COUNTERS["symbolic_frames"] += 1
        COUNTERS["specialized_ops"] += env.stats["specialized_ops"]
        COUNTERS["specializations"] += env.stats["specializations"]
    guard = compile_guards(guards, frame_globals)
    return FrameResult(code, new_code, guard, guard.guards, tx.output.compiled, text, 0.0, reason, env,
                       asked_compiling=tx.asked_compiling)


def _log_result(r: FrameResult) -> None:
    if logs.enabled("perf"):
        logs.log("perf", "compiled %s (%s:%d) in %.1f ms: %d graph(s), %d op(s), %d guard(s); %s",
                 user_frame_name(r.code), r.code.co_filename, r.code.co_firstlineno,
                 r.compile_time_s * 1e3, len(r.graphs), sum(g.op_count for g in r.graphs),
                 len(r.guards), r.times.split_text())
    if logs.enabled("graph_code"):
        for g in r.graphs:
            logs.log("graph_code", "%s %s\n%s", r.code.co_name, g.name, g.gm.code)
    if logs.enabled("guards"):
        logs.log("guards", "%s:\n  %s", r.code.co_name, "\n  ".join(r.guard_texts()))
    if logs.enabled("output_code"):
        logs.log("output_code", "%s", r.output_source)
    if logs.enabled("bytecode"):
        import dis
        logs.log("bytecode", "%s (%s:%d) replaced by:\n%s", r.code.co_name, r.code.co_filename,
                 r.code.co_firstlineno, dis.Bytecode(r.new_code).dis())


def _report_break(code: types.CodeType, gb: GraphBreak) -> None:
    """A graph break was taken: log it (graph_breaks channel) and warn (see warn_break)."""
    logs.log("graph_breaks", "graph break in %s: %s", user_frame_name(code), gb)
    warn_break(gb, f"graph break: {gb.message} [{gb.reason_code}]" + (f" (hint: {gb.hint})" if gb.hint else ""))


# --- the callback ---------------------------------------------------------------------------------

_warned: set = set()
TRANSIENT_REASONS = {"autocast", "functorch"}


@on_reset
def _on_reset() -> None:
    _warned.clear()
    if "pydynamo.bytecode.resume" in sys.modules:  # (not imported: no resume code cached)
        resume.clear_cache()
    _AUTO.clear()
    installed.clear()   # compiled graphs and constants the output code read from user globals


def warn_break(gb: GraphBreak, text: str) -> None:
    """Warn that code runs in Python: once per (reason, user file, line), attributed to that
    line (warnings.warn_explicit: the user's filters apply, the source line shown is theirs).
    No warning for a break the user asked for (hints.NO_WARNING) nor while an observer records
    the breaks (explain() counts them instead)."""
    if gb.reason_code in hints.NO_WARNING or RECORDERS:
        return
    _warn_once((gb.reason_code, gb.filename, gb.lineno), f"pydynamo: {text}", GraphBreakWarning,
               gb.filename, gb.lineno)


def _warn_once(key, text: str, category: type, filename: Optional[str], lineno: Optional[int]) -> None:
    if key in _warned:
        return
    _warned.add(key)
    filename = filename or "<unknown>"
    warnings.warn_explicit(text, category, filename, lineno or 0, module=_module_name(filename))


def _module_name(filename: str) -> str:
    """The module a file was imported as (what `warnings.filterwarnings(module=...)` matches)."""
    for name, mod in list(sys.modules.items()):
        if getattr(mod, "__file__", None) == filename:
            return name
    base = filename.rsplit("/", 1)[-1]
    return base[:-3] if base.endswith(".py") else base


@record
class CompileSettings:
    """What one optimize() call asked for; part of every cache entry's key (a COMPILE_SETTINGS
    guard on the callback that stands for it)."""
    backend: Any
    fullgraph: bool
    dynamic: Optional[bool]
    mode: Optional[str]
    options: Any
    recompile_limit: Optional[int] = None   # None: config.recompile_limit, read at each miss

    def __str__(self) -> str:
        name = self.backend if isinstance(self.backend, str) else \
            getattr(self.backend, "__qualname__", None) or type(self.backend).__qualname__
        limit = "" if self.recompile_limit is None else f" recompile_limit={self.recompile_limit}"
        return (f"backend={name} mode={self.mode} options={self.options} fullgraph={self.fullgraph} "
                f"dynamic={self.dynamic}{limit}")


# One callback per distinct settings (equal settings share cache entries): a weak map, so a
# callback (and the backend it holds) lives only as long as a wrapper or a cache entry uses it.
_CALLBACKS: "weakref.WeakValueDictionary" = weakref.WeakValueDictionary()
_LIVE_CALLBACKS: "weakref.WeakSet" = weakref.WeakSet()   # every callback, hashable settings or not
# Codes a callback marked run-only at its recompile limit: the mark would keep every other
# settings' callback from being called for them, so a callback made later un-marks them.
_LIMITED: "weakref.WeakSet" = weakref.WeakSet()


def _frozen(value) -> Any:
    """A hashable stand-in for an options value (dicts and lists by content); TypeError if none."""
    if isinstance(value, dict):
        return tuple(sorted((k, _frozen(v)) for k, v in value.items()))
    if isinstance(value, (list, tuple)):
        return (type(value).__name__,) + tuple(_frozen(v) for v in value)
    hash(value)
    return value


def make_callback(backend="codegen", fullgraph=False, dynamic=None, mode=None, options=None,
                  recompile_limit=None):
    """The compile callback for these optimize() settings: the same object for equal settings
    (same backend object, mode, options by content, fullgraph, dynamic, recompile_limit)."""
    backend_fn = lookup_backend(backend)
    fullgraph = bool(fullgraph)
    try:
        key = (backend_fn, fullgraph, dynamic, mode, _frozen(options), recompile_limit)
        hash(key)
    except TypeError:   # unhashable options: a callback of its own
        key = None
    cached = _CALLBACKS.get(key) if key is not None else None
    if cached is not None:
        return cached
    callback = _make_callback(backend, backend_fn, fullgraph, dynamic, mode, options, recompile_limit)
    if key is not None:
        _CALLBACKS[key] = callback
    _LIVE_CALLBACKS.add(callback)
    for code in list(_LIMITED):
        _C.set_code_state(code, "default")
    _LIMITED.clear()
    return callback


def _make_callback(backend, backend_fn, fullgraph, dynamic, mode, options, recompile_limit):
    settings = CompileSettings(backend if isinstance(backend, str) else backend_fn, fullgraph, dynamic,
                               mode, options, recompile_limit)
    if backend in CODEGEN:
        # mode= means what it means for torch.compile: "reduce-overhead" turns on CUDA-graph
        # replay, "max-autotune" the kernel autotuner; both are codegen options.
        options = codegen_options(options or {}, mode)
    if options:
        inner = backend_fn
        backend_fn = lambda gm, ex: inner(gm, ex, **options)  # noqa: E731

    def traced_backend(gm, example_inputs):
        # a graph traced inside a DDP forward reaches the backend split at DDP's gradient buckets
        return distributed.ddp_aware(backend_fn)(gm, example_inputs)

    def callback(code, frame_locals, frame_globals, builtins, entries):
        if skip_reason(code) is not None:
            return _C.SKIP_CODE
        if _nn_forward_called_from_python(code, sys._getframe(1)):
            return None   # run as is; asked again at the next call (another caller may be traced)
        # entries compiled under other settings (another optimize() of the same code) do not
        # count against this one's budget, nor are they this one's to explain
        own = [e for e in entries if getattr(e[0], "callback", None) is callback]
        # every rank agrees on this miss (opt-in, pydynamo/distributed.py), or all raise
        if own and config.distributed_guard_check:
            distributed.check_miss(code, own, lambda: _failures_text(
                recompiles.explain_recompile(code, own, frame_locals, frame_globals)))
        stance = _stance.current()
        if stance != "default":   # (force_eager never gets here: eval_frame turns the hook off)
            if stance == "fail_on_recompile":
                raise RecompileError(_recompile_message(code, own, frame_locals, frame_globals))
            return None   # eager_on_recompile: run as is, ask again next time
        limit = config.recompile_limit if recompile_limit is None else recompile_limit
        if len(own) >= limit:
            if ("limit", code) not in _warned:
                why = recompiles.explain_recompile(code, own, frame_locals, frame_globals) if own else None
                _warn_once(("limit", code), f"pydynamo: {user_frame_name(code)} hit the recompile limit "
                           f"({limit}, {_LIMIT_SETTING if recompile_limit is None else 'optimize(recompile_limit=...)'}"
                           "); existing compiled entries keep serving, new inputs run eagerly"
                           + (f"; last reason:\n{_failures_text(why)}" if why else ""),
                           RecompileLimitWarning, code.co_filename, code.co_firstlineno)
            if len(_LIVE_CALLBACKS) > 1:
                return None  # other settings may still compile this code: no run-only mark
            _LIMITED.add(code)
            return _C.RUN_ONLY
        if entries and (_observed() or logs.enabled("recompiles")):
            why = recompiles.explain_recompile(code, entries, frame_locals, frame_globals)
            logs.log("recompiles", "%s", why)
            _observe(code, why)
        if config.warm_start and not RECORDERS:   # (explain() counts what tracing finds)
            with phases.compiling() as clock, phases.phase("loading"):
                hit = warm_cache.lookup(code, frame_locals, frame_globals, callback)
            if hit is not None:   # an entry an earlier process compiled: no tracing
                if _observed():
                    _observe(code, report.WarmLoad(hit[0], clock))
                return _checked(hit[0], code), hit[1]   # (as a traced entry's guard is)
        try:
            result = translate(code, frame_locals, frame_globals, builtins, traced_backend,
                               allow_breaks=not fullgraph, dynamic=dynamic,
                               auto=automatic_dynamic(code) if dynamic is None else None,
                               callback=callback)
        except (BackendCompilerFailed, shapes.ConstraintViolation):
            raise  # not the traced code's limits: the user asked for something we cannot honour
        except Unsupported as e:
            gb = e.graph_break or GraphBreak(e.reason_code, e.message, code.co_filename, code.co_firstlineno)
            _observe(code, gb)
            if fullgraph:  # the translator's traceback only when asked for (PYDYNAMO_VERBOSE=1)
                raise FullGraphError(gb) from (e if config.verbose else None)
            if getattr(e, "strict", False):
                raise FullGraphError(gb, "error_on_graph_break(True) is on") from (e if config.verbose else None)
            logs.log("graph_breaks", "%s", gb)
            warn_break(gb, f"{gb.message} [{gb.reason_code}]; running {user_frame_name(code)} in Python"
                       + (f" (hint: {gb.hint})" if gb.hint else ""))
            # a reason tied to the calling state (not the code) asks again next time
            return None if gb.reason_code in TRANSIENT_REASONS else _C.SKIP_CODE
        except Exception as e:  # a bug in pydynamo: never a wrong answer, run eagerly
            gb = GraphBreak("internal_error", f"{type(e).__name__}: {e}", code.co_filename, code.co_firstlineno)
            _observe(code, gb)
            if fullgraph or config.verbose:
                raise
            warn_break(gb, f"internal error while tracing {user_frame_name(code)} ({gb.message}); "
                       "running it in Python (a pydynamo bug: PYDYNAMO_VERBOSE=1 shows its traceback)")
            return _C.SKIP_CODE
        if not result.graphs and result.graph_break is None and result.asked_compiling:
            # nothing to compile but an "am I compiled?" answer: run it as is, so a helper
            # called from eagerly run code (`is_torchdynamo_compiling()`) answers as eager does
            return _C.SKIP_CODE
        if config.warm_start:
            warm_store.store(code, result, frame_locals, frame_globals, callback)
        if result.graph_break is not None:
            _report_break(code, result.graph_break)
        result.guard.callback = callback
        _observe(code, result)
        return _checked(result.guard, code), result.new_code

    callback.backend = backend_fn
    callback.settings = settings
    return callback


def _checked(guard, code):
    """The guard an entry is returned to the hook with: wrapped for the ranks' agreement
    (distributed.checked_guard) where config.distributed_guard_check is on, else itself, without
    importing pydynamo/distributed.py (a single process's warm hit never needs it)."""
    return distributed.checked_guard(guard, code) if config.distributed_guard_check else guard


_LIMIT_SETTING = "pydynamo.config.recompile_limit"
_NN_DIR = os.path.realpath(os.path.dirname(torch.nn.modules.__file__)) + os.sep
_MODULE_CALL = os.path.join("torch", "nn", "modules", "module.py")


def _nn_forward_called_from_python(code: types.CodeType, caller) -> bool:
    """A torch.nn module's forward (Embedding, Dropout, Sequential) called by code that runs in
    CPython because pydynamo gave it up (a frame run eagerly as a whole, a graph break's call):
    torch.compile traces torch.nn only inlined into a traced frame, or as the module it was
    given, so such a call runs as is there and here (no one-op graphs, the same graph count)."""
    if code.co_name != "forward" or not os.path.realpath(code.co_filename).startswith(_NN_DIR):
        return False
    while caller is not None and caller.f_code.co_filename.endswith(_MODULE_CALL):
        caller = caller.f_back   # Module.__call__'s own frames
    if caller is None:
        return False
    # (library code is marked skip too: optimize()'s own wrapper calling the module it was given)
    return caller.f_code.co_filename.startswith("<pydynamo") or \
        (_C.get_code_state(caller.f_code) == "skip" and skip_reason(caller.f_code) is None)


def _failures_text(why) -> str:
    """Each failing guard of a RecompileExplanation, one `- entry N: failure` line each."""
    lines = [f"    - entry {i + 1}: {f}" for i, fails in enumerate(why.entries) for f in fails]
    return "\n".join(lines) or "    - (no single guard fails: rejected as a whole)"


def _recompile_message(code: types.CodeType, entries: list, frame_locals: dict, frame_globals: dict) -> str:
    """torch.compile's fail_on_recompile text, with pydynamo's guard failures (recompiles.py)."""
    text = (f"Detected recompile when pydynamo stance is 'fail_on_recompile'. filename: "
            f"{code.co_filename!r}, function name: {user_frame_name(code)!r}, line number: "
            f"{code.co_firstlineno}")
    if entries:
        why = recompiles.explain_recompile(code, entries, frame_locals, frame_globals)
        text += "\n    triggered by the following guard failure(s):\n" + _failures_text(why)
    else:
        text += " (never compiled: compile it under the \"default\" stance first)"
    return text

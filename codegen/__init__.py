"""codegen: compile a torch.fx graph to fused C++/OpenMP kernels behind a Python wrapper.

    compile_fx(gm, example_inputs, **options) -> callable(*inputs) -> outputs like gm(*inputs)

Pipeline: GraphLowering (canonicalize, lower to loop IR, extern fallback per node) ->
schedule (dead code, fusion, register-only buffers) -> C++ source for all kernels of the graph
(one shared library, content-addressed on disk) -> generated Python wrapper. The returned
callable carries `.kernel_count`, `.stats`, `.wrapper_path`, `.library_path`.

Never a wrong answer: a graph the lowering cannot represent exactly runs eagerly (one warning
naming the node, its source line and the reason); calls whose inputs need autograd, or differ
from the compile-time inputs, run the original graph eagerly (counted in `counters`).
Options: fuse=True (False: one kernel per buffer, for tests and debugging); dynamic={input
index: [dims]} (those sizes become symbols, kernels take them as arguments); strict=False (True:
internal errors raise instead of falling back to eager, for tests).
"""
from __future__ import annotations

import collections
import ctypes
import logging
import os
import sys
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, List

import torch

log = logging.getLogger("pydynamo.codegen")
output_code_log = logging.getLogger("pydynamo.output_code")

counters: collections.Counter = collections.Counter()


@dataclass
class CompileStats:
    kernels: int = 0
    externs: int = 0
    native_nodes: int = 0
    extern_nodes: int = 0
    extern_reasons: Dict[str, str] = field(default_factory=dict)
    fallback: str = ""


def _logs_enabled(channel: str) -> bool:
    cfg = sys.modules.get("pydynamo.config")
    logs = getattr(cfg, "logs", None) or os.environ.get("PYDYNAMO_LOGS", "")
    return channel in [c.strip() for c in logs.split(",")]


def _emit_output_code(text: str):
    if not output_code_log.handlers:
        h = logging.StreamHandler(sys.stderr)
        output_code_log.addHandler(h)
        output_code_log.setLevel(logging.INFO)
    output_code_log.info("%s", text)


def _eager(gm, reason: str, stats: CompileStats):
    stats.fallback = reason
    warnings.warn(f"pydynamo codegen: running this graph eagerly: {reason}", stacklevel=3)
    counters["eager_fallback_graphs"] += 1

    def run_eager(*args):
        return gm(*args)
    run_eager.kernel_count = 0
    run_eager.stats = stats
    run_eager.wrapper_path = None
    run_eager.library_path = None
    return run_eager


def compile_fx(gm: torch.fx.GraphModule, example_inputs: List[Any], **options):
    from codegen.graph import GraphLowering
    from codegen.gpu_wrapper import compile_fx_triton, wants_triton
    if wants_triton(example_inputs, options, gm):   # CUDA inputs, or backend_kernels="triton"
        return compile_fx_triton(gm, example_inputs, **options)
    stats = CompileStats()
    def lower(specialize_floats):
        g = GraphLowering(gm, example_inputs, options.get("dynamic"), specialize_floats)
        g.cpp_kernels = True     # decompositions may pick C++-specific forms
        return g.run()
    return lower_and_build(gm, stats, options, lower,
                           lambda g: _compile_lowered(gm, g, stats, options), "codegen")


def lower_and_build(gm, stats, options, lower, build, what):
    """Run `lower(specialize_floats)` then `build(lowered)`. Float inputs are kernel arguments;
    where one cannot be (codegen/scalars.py), the graph is lowered and built again with floats
    as checked constants. A declared fallback, or any internal error, runs the graph eagerly
    with one warning: a compiler bug must not become the user's crash or wrong answer
    (options["strict"] re-raises, for tests)."""
    from codegen.scalars import SpecializeFloats
    try:
        return _lower_and_build(gm, stats, options, lambda: lower(False), build, what)
    except SpecializeFloats as e:
        counters["float_specialized_graphs"] += 1
        log.info("codegen: float inputs are compile-time constants in this graph: %s", e)
    try:
        return _lower_and_build(gm, stats, options, lambda: lower(True), build, what)
    except SpecializeFloats as e:       # (no float symbol exists then: a compiler bug)
        if options.get("strict"):
            raise
        return _eager(gm, f"internal error: {e}", stats)


def _lower_and_build(gm, stats, options, lower, build, what):
    from codegen.graph import EagerFallback
    from codegen.scalars import SpecializeFloats
    try:
        g = lower()
    except SpecializeFloats:
        raise
    except EagerFallback as e:
        return _eager(gm, str(e), stats)
    except Exception as e:
        if options.get("strict"):
            raise
        log.debug("%s lowering failed", what, exc_info=True)
        return _eager(gm, f"internal lowering error: {type(e).__name__}: {e}", stats)
    try:
        return build(g)
    except SpecializeFloats:
        raise
    except Exception as e:
        if options.get("strict"):
            raise
        log.debug("%s failed", what, exc_info=True)
        return _eager(gm, f"internal {what} error: {type(e).__name__}: {e}", stats)


def _compile_lowered(gm, g, stats, options):
    from codegen import codecache
    from codegen.cpp import generate_source
    from codegen.ir import ExternCall
    from codegen.scheduler import FusedKernel, mark_row_local, schedule
    from codegen.wrapper import (ShapeMismatch, WrapperPrinter, ensure_layout, extern_error,
                                 kernel_error)

    steps = schedule(g.buffers, g.outputs, list(g.mutations.values()),
                     fuse=options.get("fuse", True))
    mark_row_local(steps, g.outputs, list(g.mutations.values()))
    kernels = [s for s in steps if isinstance(s, FusedKernel)]
    stats.kernels = len(kernels)
    stats.externs = sum(1 for s in steps if isinstance(s, ExternCall))
    stats.native_nodes, stats.extern_nodes = g.stats.native, g.stats.extern
    stats.extern_reasons = dict(g.stats.extern_reasons)

    lib = so = None
    arg_names: Dict[str, List[str]] = {}
    if kernels:
        src, arg_names = generate_source(kernels, g.buffers_by_name,
                                         vector_math=codecache.vector_math_available())
        lib, so = codecache.load_library(src)
    may_err = {k.name: any(n.reads(len(k.outer)).may_raise for n in k.nodes) for k in kernels}
    wp = WrapperPrinter(g, steps, arg_names, may_err)
    title = f"{type(gm).__name__} ({so or 'no kernels'})"
    wsrc = wp.generate(title)
    path = codecache.write_wrapper(wsrc)
    if _logs_enabled("output_code"):
        _emit_output_code(f"wrapper {path}\n{wsrc}")

    ns: Dict[str, Any] = {"torch": torch, "_consts": wp.consts, "_externs": wp.externs,
                          "_empty": torch.empty_strided, "_ensure": ensure_layout,
                          "_grad_enabled": torch.is_grad_enabled, "_kernel_error": kernel_error,
                          "_extern_error": extern_error,
                          "_ShapeMismatch": ShapeMismatch, "_scalar_fns": g.scalars.callables}
    for b in g.constants:           # module parameters / traced constants, held by reference
        ns[b.name] = b.tensor
    for k in kernels:
        fn = getattr(lib, k.name)
        names = arg_names[k.name]
        fn.argtypes = [_CTYPES_BY_KIND[wp.arg_kind(a)] for a in names]
        fn.restype = ctypes.c_int
        ns[k.name] = fn

    eager_grad, mismatch = _fallbacks(gm, counters)
    ns["_eager_grad"], ns["_mismatch"] = eager_grad, mismatch
    exec(compile(wsrc, path, "exec"), ns)
    call = ns["call"]
    call.kernel_count = stats.kernels
    call.stats = stats
    call.wrapper_path = path
    call.library_path = so
    call._lib = lib       # keep the library alive as long as the callable
    counters["graphs_compiled"] += 1
    counters["kernels"] += stats.kernels
    return call


_CTYPES_BY_KIND = {"ptr": ctypes.c_void_p, "size": ctypes.c_int64, "scalar": ctypes.c_double}

__all__ = ["compile_fx", "counters", "CompileStats"]


def _fallbacks(gm, counters):
    """The two eager escapes every generated wrapper (CPU and GPU) calls from its entry check."""
    warned = []      # once per reason: "grad", None (inputs differ) or a size relation

    def eager_grad(*args):
        counters["eager_grad_calls"] += 1
        if "grad" not in warned:
            warned.append("grad")
            log.info("codegen: inputs require grad under grad mode; running %s eagerly",
                     type(gm).__name__)
        return gm(*args)

    def mismatch(*args, why=None, error=False):
        if error:    # a kernel or extern raised: eager's partial in-place updates, its error
            counters["error_replays"] += 1
            return gm(*args)
        counters["input_mismatch_calls"] += 1
        if why is not None:      # a size relation the kernels were compiled under
            counters["size_assumption_calls"] += 1
        if why not in warned:
            warned.append(why)
            what = ("sizes break the relation the kernels were compiled under: " + why) if why \
                else "inputs differ from the compiled ones (shape/stride/dtype/device/aliasing)"
            warnings.warn(f"pydynamo codegen: {what}; running the graph eagerly", stacklevel=3)
        return gm(*args)
    return eager_grad, mismatch

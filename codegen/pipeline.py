"""The one codegen pipeline, and the `Backend` object that says what differs between targets.

    compile_graph(gm, example_inputs, backend, options) -> callable(*inputs) -> gm(*inputs)

For every backend: lower (GraphLowering, handed the backend) -> schedule -> the backend prints
all kernels into one source and loads it (codegen/codecache.py) -> its wrapper printer writes
`call` -> exec'd in a namespace with the kernels, externs, constants and eager escapes -> the
backend finishes the callable. `Backend` itself is the C++/OpenMP target; `TritonBackend`
(codegen/gpu_wrapper.py) the Triton one. With options.compile_regions, repeated regions are
first outlined and their sub-graphs compiled once through this same pipeline, called from the
outer wrapper as externs (codegen/region_calls.py; `_compile_regions`; C++: one library for
both); anything that fails there compiles the flat graph.

Never a wrong answer: a graph the lowering cannot represent exactly, or any internal error, runs
eagerly with one warning (options.strict re-raises, for tests); calls whose inputs need
autograd, or differ from the compile-time inputs, run the original graph eagerly (counted in
`counters`). The callable carries `.kernel_count`, `.stats`, `.wrapper_path`, `.library_path`
(the Triton one also `.kernel_path`, `.kernel_source`, `.launch_spec`).
"""
from __future__ import annotations

import dataclasses
import logging
import warnings
from dataclasses import dataclass, field
from typing import Any, Dict, FrozenSet, List, Optional, Tuple

import torch

from codegen import codecache, standalone
from codegen.causal_mask import causal_attention
from codegen.cpp import generate_source as cpp_source
from codegen.fallback import EagerFallback
from codegen.graph import GraphLowering
from codegen.ir import ExternCall
from codegen.options import Options
from codegen.region_calls import Pending, SharedLibrary, outline
from codegen.reinplace import accumulate_embedding_grads, copied_back, reinplace
from codegen.runtime import CppRuntime, base_namespace, counters, fallbacks as _fallbacks
from codegen.scalars import SpecializeFloats
from codegen.scheduler import FusedKernel, mark_row_local, schedule
from codegen.wrapper import WrapperPrinter
from pydynamo import logs, phases

log = logging.getLogger("pydynamo.codegen")

# dtypes the kernel printers take (fp16/bf16 are computed in fp32: codegen/kernel_printer.py)
KERNEL_DTYPES = frozenset({torch.float32, torch.float64, torch.int64, torch.int32, torch.int16,
                           torch.int8, torch.uint8, torch.bool, torch.float16, torch.bfloat16})


@dataclass
class CompileStats:
    kernels: int = 0
    externs: int = 0
    native_nodes: int = 0
    extern_nodes: int = 0
    extern_reasons: Dict[str, str] = field(default_factory=dict)
    fallback: str = ""


class Backend(CppRuntime):
    """A kernel target. What lowering may use is class attributes (GraphLowering holds the
    backend; lowerings read `current.graph.backend`); the steps that differ are methods:
    print_kernels(kernels, buffers, options) -> (source, {kernel name: what the wrapper printer
    needs}), load(source, options) -> (module or library, path), wrapper(g, steps, infos) -> a
    WrapperPrinter, namespace(g) -> the wrapper's target-dependent names, bind(module, kernel,
    info, wp, options) -> what the wrapper calls as the kernel, finish(call, ...) -> the
    callable. This base class is the C++/OpenMP target (codegen/cpp.py, one shared library
    called through ctypes); TritonBackend (codegen/gpu_wrapper.py) overrides it."""
    name = "cpp"
    lowering = GraphLowering
    dtypes: FrozenSet[torch.dtype] = KERNEL_DTYPES  # tensors of other dtypes stay extern
    devices: Tuple[str, ...] = ("cpu",)         # device types whose tensors lower natively
    device: Optional[torch.device] = None       # factories naming another index stay extern
    # decomposition choices: a row-local scratch for values a kernel's inner loops read in their
    # own row (softmax's exp realized once, one reciprocal per row; scheduler.mark_row_local)
    row_scratch = True
    # extern choices: a matmul's bias in the extern's epilogue, SDPA's bool mask made a float
    # mask once per graph (codegen/decompositions.py); on CPU the bias costs addmm one pass over
    # its output where a separate kernel would read and write it again (GPT-2's QKV split)
    extern_epilogues = True
    # a linear's / addmm's row bias stays in the extern (addmm, beta 1) also where only kernels
    # read the product, for products of at least this many elements (None: only where the
    # product is written anyway, GraphLowering.bias_in_extern). On CPU the product without its
    # bias is a beta-0 GEMM, which ran slower in the model than addmm's copy of the bias rows
    # into the result and beta-1 GEMM: BERT-base at two threads, its attention output and FFN
    # down projections (256x768 @ 768x768, 256x3072 @ 3072x768) took 2.03 / 7.6-7.9 ms as mm
    # against 1.85 / 7.3-7.5 ms as torch.compile's addmm, 0.5 ms per layer; with the bias
    # kept, 1.80-1.93 / 7.3-7.5 ms. A tiny product pays addmm's extra copy dispatch instead
    # (8x16x16: 3.2 against 2.3 us), so below the bound the bias joins the consumer kernel
    gemm_bias_min_numel: Optional[int] = 1 << 13
    # a relu/GELU after a product joins the extern (torch's `_addmm_activation`) on CPU for
    # results of at least this many elements (None: never). Torch's fused call there is addmm
    # then an in-place relu/GELU: one more dispatch, which costs more than our kernel's pass over
    # a small result (relu MLP, thread time: 8x16 outputs 1.03x slower fused, 64x512 0.99x,
    # 256x2048 0.91x). CUDA's is cuBLASLt's epilogue, without a bound (codegen/gemm.py)
    gemm_act_min_numel: Optional[int] = 1 << 13
    # matrix products written with `out=` into a dead buffer of their exact layout, as
    # torch.compile's externs do (codegen/wrapper.py, WrapperPrinter.out_reuse), and the
    # buffers products read and write made 2-D; on a GPU the host's time per product is what
    # it saves (an H200's host: linear of a 3-D input 22.0 us, mm into a preallocated `out=`
    # 16.0, an allocation 3.8; benchmarks/gpu/extern_host_probe.py)
    gemm_out_reuse = True
    # 16-bit GEMM operands padded to aligned sizes (codegen/gemm.py: cuBLAS's rule, GPU only)
    pad_gemm_operands = False
    # a column-wise sum of many rows as two reductions (codegen/lowering.py, SPLIT_CHUNK)
    split_reductions = False
    # a cheap pointwise value with several readers that reads one buffer (GELU's tanh, read by
    # the GELU output a weight gradient's matmul takes and by the tanh backward after that
    # matmul) is recomputed by each reader's kernel instead of written and read back: on a GPU
    # its reads are the same and its write is saved (codegen/graph.py, RECOMPUTE_COST); a CPU
    # core pays the transcendental functions twice instead
    recompute_shared = False
    source_attributes = False       # the callable also carries .kernel_path, .kernel_source

    def refuse(self, gm) -> Optional[str]:
        """Why this graph must run eagerly before lowering (None: lower it)."""
        return None

    def print_kernels(self, kernels, buffers, options):
        return cpp_source(kernels, buffers, codecache.vector_math_available(), options)

    def wrapper(self, g, steps, arg_names) -> WrapperPrinter:
        kernels = [s for s in steps if isinstance(s, FusedKernel)]
        may_err = {k.name: any(n.reads(len(k.outer)).may_raise for n in k.nodes) for k in kernels}
        wp = WrapperPrinter(g, steps, arg_names, may_err)
        wp.out_reuse = self.gemm_out_reuse
        return wp

    def wrapper_source(self, wp: WrapperPrinter, g, title: str) -> str:
        return wp.generate(title)

    def binding_spec(self, kernel, arg_names, wp) -> dict:
        """What `bind` reads of the wrapper printer, as literals (codegen/standalone.py)."""
        return {"args": list(arg_names), "kinds": {a: wp.arg_kind(a) for a in arg_names}}

    def source_path(self, kpath: Optional[str]) -> Optional[str]:
        """The kernels' source file beside what `load` returned (the library's .cpp)."""
        return kpath[:-3] + ".cpp" if kpath else None

    def finish(self, call, gm, g, options: Options, stats: CompileStats, ns):
        return call


CPP = Backend()


def compile_graph(gm: torch.fx.GraphModule, example_inputs: List[Any], backend: Backend,
                  options: Options, defer_to: Optional[SharedLibrary] = None):
    """Lower, then build. Float inputs are kernel arguments; where one cannot be
    (codegen/scalars.py), the graph is lowered and built again with floats as checked constants.
    A declared fallback, or any internal error, runs the graph eagerly with one warning: a
    compiler bug must not become the user's crash or wrong answer (options.strict re-raises)."""
    stats = CompileStats()
    refused = backend.refuse(gm)
    if refused:
        return _eager(gm, refused, stats)
    # before lowering; an eager fallback runs the rewritten graph
    counters["embedding_grads_accumulated"] += accumulate_embedding_grads(gm)
    counters["causal_masks_dropped"] += causal_attention(gm)
    if options.written_back:
        written = gm.meta["written_inputs"] = reinplace(gm, options.written_back)
        counters["reinplaced_inputs"] += len(written)
        gm.meta["copied_back"] = copied_back(gm, options.written_back, written)
    if options.compile_regions:
        regional = _compile_regions(gm, example_inputs, backend, stats, options)
        if regional is not None:
            return regional
    for specialize_floats in (False, True):
        step = "lowering"
        try:
            with phases.phase("graph passes"):
                g = backend.lowering(gm, example_inputs, options.dynamic, specialize_floats,
                                     backend, measure_gemms=options.autotune,
                                     group_gemms=options.group_gemms).run()
            step = f"{backend.name} codegen"
            return build(gm, g, backend, stats, options, example_inputs, defer_to=defer_to)
        except EagerFallback as e:
            return _eager(gm, str(e), stats)
        except SpecializeFloats as e:
            if not specialize_floats:
                counters["float_specialized_graphs"] += 1
                log.info("codegen: float inputs are compile-time constants in this graph: %s", e)
                continue
            if options.strict:          # (no float symbol exists then: a compiler bug)
                raise
            return _eager(gm, f"internal error: {e}", stats)
        except Exception as e:
            if options.strict:
                raise
            log.debug("%s failed", step, exc_info=True)
            return _eager(gm, f"internal {step} error: {type(e).__name__}: {e}", stats)


def _compile_regions(gm, example_inputs, backend: Backend, stats: CompileStats, options: Options):
    """The graph with each repeated region one call of its sub-graph, compiled once through this
    pipeline (codegen/region_calls.py), or None: nothing to outline, or anything this cannot
    handle (an eager fallback, a float made constant, an internal error), which compiles the
    flat graph instead. The wrapper's eager escapes run the flat graph `gm`."""
    # a region's sub-graph: a plain compile (positional arguments, no CUDA-graph runner of its
    # own inside the outer graph's, no write-backs, no regions inside)
    sub_options = dataclasses.replace(options, compile_regions=False, boxed=False, cudagraphs=False,
                                      written_back=())
    # C++: the sub-graphs' kernels go into this graph's library (one g++ run: its fixed cost,
    # headers and all, was most of a second library's build)
    shared = SharedLibrary() if backend.name == "cpp" else None
    try:
        with phases.phase("graph passes"):
            outlined = outline(gm, lambda sub, examples: compile_graph(sub, examples, backend,
                                                                       sub_options, shared),
                               (type(backend), backend.name, str(backend.device), sub_options))
            if outlined is None:
                return None
            g = backend.lowering(outlined, example_inputs, options.dynamic, False, backend,
                                 measure_gemms=options.autotune,
                                 group_gemms=options.group_gemms).run()
        return build(gm, g, backend, stats, options, example_inputs, takes=shared)
    except Exception as e:
        if shared is not None:
            shared.abort()
        if options.strict and not isinstance(e, (EagerFallback, SpecializeFloats)):
            raise
        counters["region_graphs_flat"] += 1
        log.info("codegen: regions not compiled separately (%s: %s); compiling the flat graph",
                 type(e).__name__, e)
        return None


def build(gm, g, backend: Backend, stats: CompileStats, options: Options, example_inputs=(),
          defer_to: Optional[SharedLibrary] = None, takes: Optional[SharedLibrary] = None):
    """A lowered graph -> the compiled callable (schedule, kernels, wrapper, namespace).
    `defer_to` (a region's sub-graph, C++): its kernels, renamed apart, wait for the library of
    the graph calling it, and the callable is a region_calls.Pending finished when that loads;
    `takes` (that graph): its library holds the deferred kernels too, and its extern calls
    call their finished callables."""
    mutations = list(g.mutations.values())
    with phases.phase("graph passes"):
        steps = schedule(g.buffers, g.outputs, mutations, fuse=options.fuse)
        if backend.row_scratch:
            mark_row_local(steps, g.outputs, mutations)
    kernels = [s for s in steps if isinstance(s, FusedKernel)]
    if defer_to is not None and kernels:
        prefix = defer_to.prefix()
        for k in kernels:
            k.name = prefix + k.name
    stats.kernels = len(kernels)
    stats.externs = sum(1 for s in steps if isinstance(s, ExternCall))
    stats.native_nodes, stats.extern_nodes = g.stats.native, g.stats.extern
    stats.extern_reasons = dict(g.stats.extern_reasons)

    with phases.phase("codegen"):
        src, infos = backend.print_kernels(kernels, g.buffers_by_name, options)
    if defer_to is not None and kernels:
        return defer_to.defer(src, lambda module, kpath: _link(
            gm, g, backend, stats, options, example_inputs, steps, kernels, src, infos, module,
            kpath), gm)
    if takes is not None and takes.pending:
        with phases.phase("codegen"):
            src = takes.source(src, backend.print_kernels([], {}, options)[0])
    module = kpath = None
    if kernels or takes is not None and takes.pending:
        with phases.phase("loading"):       # (a build inside counts as "compile")
            module, kpath = backend.load(src, options)
        phases.generated("kernels", backend.source_path(kpath))
        if backend.source_path(kpath) != kpath:
            phases.generated("library", kpath)
    if takes is not None:
        takes.done(module, kpath)
        for s in steps:             # (the wrapper calls the finished callables themselves)
            if isinstance(s, ExternCall) and isinstance(s.target, Pending) and s.target.fn:
                s.target = s.target.fn
    return _link(gm, g, backend, stats, options, example_inputs, steps, kernels, src, infos,
                 module, kpath)


def _link(gm, g, backend: Backend, stats: CompileStats, options: Options, example_inputs, steps,
          kernels, src, infos, module, kpath):
    """The rest of `build` once the kernels' library is loaded: wrapper, namespace, callable."""
    with phases.phase("codegen"):
        wp = backend.wrapper(g, steps, infos)
        wp.boxed = options.boxed
        wsrc = backend.wrapper_source(wp, g, f"{type(gm).__name__} ({backend.name}: "
                                             f"{kpath or 'no kernels'})")
        bindings = {k.name: backend.binding_spec(k, infos[k.name], wp) for k in kernels}
        wsrc += standalone.footer(backend, options, backend.source_path(kpath), bindings, wp, g,
                                  example_inputs)
    with phases.phase("loading"):
        path = codecache.write_wrapper(wsrc)
    phases.generated("wrapper", path)
    logs.log("output_code", "%s kernels %s\n%s\nwrapper %s\n%s", backend.name, kpath,
             src if kernels else "", path, wsrc)

    ns = base_namespace(wp.consts, wp.externs, g.scalars.callables, backend.namespace(g),
                        *_fallbacks(gm))
    for b in g.constants:           # module parameters / traced constants, held by reference
        ns[b.name] = b.tensor
    for k in kernels:
        ns[k.name] = backend.bind(module, k, infos[k.name], wp, options)
    with phases.phase("loading"):
        exec(compile(wsrc, path, "exec"), ns)
        call = backend.finish(ns["call"], gm, g, options, stats, ns)
    if options.boxed and call is ns["call"]:       # (a CUDA-graph runner copies its inputs)
        call.boxed_entry = ns["call_boxed"]
    call.kernel_count = stats.kernels
    call.stats = stats
    # where it came from, on the callable and on the wrapper function a CUDA-graph runner holds
    # (the warm cache records that function and reads them there)
    for c in {id(call): call, id(ns["call"]): ns["call"]}.values():
        c.wrapper_path = path
        c.library_path = kpath
        if backend.source_attributes:
            c.kernel_path, c.kernel_source = kpath, src
            # how each kernel is bound, as literals (the footer's, which a wrapper whose extern
            # arguments have no text lacks): the warm cache's record of a Triton wrapper
            c.launch_spec = {"bindings": bindings, "vector_width": options.vector_width,
                             "fast_launch": options.triton_fast_launch}
    call._lib = module      # keep the library alive as long as the callable
    counters["graphs_compiled"] += 1
    counters[f"{backend.name}_graphs_compiled"] += 1
    counters["kernels"] += stats.kernels
    return call


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

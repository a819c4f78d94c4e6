"""The options of one codegen compile, as one object: `compile_fx(gm, inputs, **options)` and
pydynamo's "codegen" backend (`optimize(..., mode=..., options={...})`) build it from keywords.

Invariants: every choice a compile depends on is a field here (beyond these, codegen reads only
the process-wide cache dir and log channels, pydynamo/config.py); a value outside a field's
choices raises ValueError before anything is lowered; an unknown name is ignored with one
warning per process (torch.compile call sites' inductor options still compile). The kernel
variants let a benchmark compile and time both forms in one process
(benchmarks/pointwise_probe.py, benchmarks/gpu/host_profile.py); the defaults won there.
"""
from __future__ import annotations

import warnings
from dataclasses import fields
from typing import Dict, List, Optional

from pydynamo.records import record

VECTOR_WIDTHS = ("128", "256", "512", "native")
# what a CUDA-graph replay hands out (codegen/cudagraphs.py): "static": the graph's memory, an
# output still held at the next replay raising when read (copied out instead where that error
# is unavailable, or when the caller passes it back in); "copy_held": the graph's memory, held
# outputs copied out before the next replay; "copy": a copy of every output at every call
CUDAGRAPH_OUTPUTS = ("static", "copy_held", "copy")
_warned: set = set()        # unknown option names already warned about (once per process)


# declared through pydynamo/records.py, not dataclass(frozen=True): the same frozen dataclass to
# every use (fields, replace, equality, hash, repr: tests/cache/test_records.py compares them),
# without the ~1 ms of generated methods `import codegen` (a warm hit's path) would compile
@record
class Options:
    fuse: bool = True                 # False: one kernel per buffer (tests, debugging)
    # {input index: [dims]} whose sizes are symbols (kernels take them as arguments)
    dynamic: Optional[Dict[int, List[int]]] = None
    strict: bool = False              # internal errors raise instead of running eagerly (tests)
    backend_kernels: Optional[str] = None   # "cpp" | "triton"; None: Triton when on CUDA
    mode: Optional[str] = None        # "max-autotune" (Triton autotuner), "reduce-overhead"
    max_autotune: bool = False
    cudagraphs: Optional[bool] = None  # CUDA-graph replay; None: on for mode="reduce-overhead"
    cudagraph_outputs: str = "static"  # one of CUDAGRAPH_OUTPUTS
    # kernel variants (C++): tanh inlined (pd_tanhf) or "libm" (libmvec's tanhf); an OpenMP
    # schedule clause for parallel pointwise loops ("" = the runtime's static default, else e.g.
    # "static,65536", "guided"); g++'s preferred vector width (512: see codecache.cxxflags)
    cpp_tanh: str = "inline"
    omp_schedule: str = ""
    vector_width: str = "512"
    # Triton: launch kernels directly after their first call (codegen/triton_launch.py);
    # False keeps Triton's own launch path
    triton_fast_launch: bool = True
    # the callable also takes its arguments as one list it empties (`call.boxed_entry(args)`),
    # dropping each tensor input at its last use: the training runtime hands a backward graph
    # its saved activations this way, so they are freed as the backward goes
    boxed: bool = False
    # ((output index, input position), ...): outputs the caller copies into those inputs after
    # the call (pydynamo/aot's write-backs of a functionalized graph); a scatter of such an
    # input into such an output is written into the input instead (codegen/reinplace.py)
    written_back: tuple = ()
    # regional compilation (issue 20, level C; codegen/region_calls.py): each repeated region the
    # tracer's templates made (a transformer layer) compiled once and called per instance,
    # instead of lowered inline per instance; off by default, as fusion across a region's
    # boundary is lost (its results are written to memory by the region's call)
    compile_regions: bool = False
    # sibling linears of one input as one product over their weights concatenated (GPU graphs:
    # codegen/gemm_group.py); the concatenated copy costs GPU memory the size of those weights,
    # so a model that needs that memory can turn it off
    group_gemms: bool = True

    def __post_init__(self):
        if self.backend_kernels not in (None, "cpp", "triton"):
            raise ValueError(f"backend_kernels={self.backend_kernels!r}: expected cpp or triton")
        if self.cpp_tanh not in ("inline", "libm"):
            raise ValueError(f"cpp_tanh={self.cpp_tanh!r}: expected inline or libm")
        if not all(c.isalnum() or c in ",_" for c in self.omp_schedule):
            raise ValueError(f"omp_schedule={self.omp_schedule!r}")
        if self.cudagraph_outputs not in CUDAGRAPH_OUTPUTS:
            raise ValueError(f"cudagraph_outputs={self.cudagraph_outputs!r}: expected one of "
                             f"{CUDAGRAPH_OUTPUTS}")
        if self.vector_width not in VECTOR_WIDTHS:
            raise ValueError(f"vector_width={self.vector_width!r}: expected one of {VECTOR_WIDTHS}")

    @classmethod
    def of(cls, options) -> "Options":
        """An Options from itself, or from a dict of keywords (or None)."""
        if isinstance(options, cls):
            return options
        options = dict(options or {})
        known = {f.name for f in fields(cls)}
        unknown = sorted(set(options) - known - _warned)
        if unknown:
            _warned.update(unknown)
            warnings.warn(f"pydynamo codegen: ignoring unknown option(s) {unknown}; known: "
                          f"{sorted(known)}", stacklevel=3)
        return cls(**{k: v for k, v in options.items() if k in known})

    @property
    def autotune(self) -> bool:
        return self.mode == "max-autotune" or self.max_autotune

    @property
    def use_cudagraphs(self) -> bool:
        return self.cudagraphs if self.cudagraphs is not None else self.mode == "reduce-overhead"

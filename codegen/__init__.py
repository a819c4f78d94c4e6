"""codegen: compile a torch.fx graph to fused C++/OpenMP or Triton kernels behind a Python wrapper.

    compile_fx(gm, example_inputs, **options) -> callable(*inputs) -> outputs like gm(*inputs)

`options` are the fields of codegen/options.py `Options` (fuse, dynamic, strict, mode,
backend_kernels, cudagraphs, and the kernel variants benchmarks compare); pydynamo's "codegen"
backend (pydynamo/backends.py) passes the user's `optimize(..., mode=, options=)` here.
`compile_fx` picks the backend (C++ for CPU graphs, Triton for CUDA ones or
backend_kernels="triton": codegen/gpu_wrapper.py choose_backend) and hands the graph to the one
pipeline, codegen/pipeline.py compile_graph (lower -> schedule -> kernels -> wrapper; its
docstring states the never-a-wrong-answer contract and what the callable carries).

This package module stays light: the pipeline (sympy, the lowerings) is imported on the first
compile, so `import codegen.codecache` (pydynamo's guard extension) does not load it.
"""
from __future__ import annotations

from typing import Any, List

from codegen.options import Options

__all__ = ["compile_fx", "counters", "CompileStats", "Options"]


def compile_fx(gm, example_inputs: List[Any], **options):
    from codegen.gpu_wrapper import choose_backend     # (deferred: the whole pipeline)
    from codegen.host_scalars import compile_split
    from codegen.pipeline import compile_graph
    opts = Options.of(options)
    backend = choose_backend(gm, example_inputs, opts)
    # CPU 0-d tensors in a device graph: computed on the host, uploaded (codegen/host_scalars.py)
    split = compile_split(gm, example_inputs, backend, opts)
    return split if split is not None else compile_graph(gm, example_inputs, backend, opts)


def __getattr__(name):
    # `codegen.counters`, `codegen.CompileStats`: the pipeline's, loaded on first use
    if name in ("counters", "CompileStats"):
        from codegen import pipeline
        return getattr(pipeline, name)
    raise AttributeError(f"module 'codegen' has no attribute {name!r}")

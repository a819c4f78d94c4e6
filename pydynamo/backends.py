"""Backend registry: name -> `backend(gm, example_inputs) -> callable` (the torch.compile contract).

Built in: "eager" (run the GraphModule as is), "aot_eager" (training graphs: the joint
forward/backward graph recorded, partitioned and run with eager aten ops, pydynamo/aot/; for
debugging the training path), "codegen" (ours, imported lazily; "inductor" is an alias so
torch.compile call sites port unchanged; a graph that needs autograd takes the training path with
codegen compiling its forward and backward graphs; an inference graph that writes tensors in
place is functionalized by the same recorder and codegen compiles the functional graph). The "codegen" backend hands
`optimize(..., mode=..., options={...})` to `codegen.compile_fx` as the fields of one
codegen.Options (codegen/options.py: fusion, dynamic dims, CUDA graphs, autotuning, kernel
variants); codegen reads nothing else of pydynamo's but the process-wide cache dir and log
channels (pydynamo/config.py). If codegen cannot be imported, or fails on a graph, the graph
runs eagerly (warned), so nothing breaks. Any callable is accepted as a backend as is.
"""
from __future__ import annotations

import warnings
from typing import Callable, Union

import torch

from pydynamo import aot
from pydynamo import autocast as _autocast
from pydynamo.mutation import node_mutation

_REGISTRY: dict[str, Callable] = {}


def register_backend(name: str, fn: Callable | None = None):
    """`register_backend("mine", fn)` or `@register_backend("mine")`."""
    def deco(f):
        _REGISTRY[name] = f
        return f
    return deco(fn) if fn is not None else deco


def list_backends() -> list[str]:
    return sorted(_REGISTRY)


def lookup_backend(backend: Union[str, Callable]) -> Callable:
    if callable(backend):
        return backend
    try:
        return _REGISTRY[backend]
    except KeyError:
        raise ValueError(f"unknown backend {backend!r}; known: {list_backends()}") from None


@register_backend("eager")
def eager(gm, example_inputs):
    return gm.forward


def _run_eagerly(gm, example_inputs):
    return gm.forward


@register_backend("aot_eager")
def aot_eager(gm, example_inputs):
    if not aot.needs_autograd(example_inputs):
        return gm.forward
    return aot.aot_compile(gm, example_inputs, _run_eagerly, _run_eagerly)


_codegen_warned = False


@register_backend("codegen")
def codegen_backend(gm, example_inputs, **options):
    global _codegen_warned
    try:
        import codegen
        compile_fx = codegen.compile_fx
    except (ImportError, AttributeError) as e:
        if not _codegen_warned:
            _codegen_warned = True
            warnings.warn(f"pydynamo: codegen backend unavailable ({e}); running graphs eagerly")
        return gm.forward

    def compile_one(g, inputs):
        try:
            return compile_fx(g, inputs, **options)     # options: codegen.Options fields
        except Exception as e:  # codegen is young: a graph it cannot compile still runs (eagerly)
            warnings.warn(f"pydynamo: codegen could not compile a graph ({type(e).__name__}: {e}); "
                          "running it eagerly")
            return g.forward
    if aot.needs_autograd(example_inputs):
        return aot.aot_compile(gm, example_inputs, compile_one, compile_one)
    if _writes_in_place(gm) or _autocast_regions(gm):
        # in-place writes are functionalized once, by the recorder, for every backend path, and
        # autocast's casts become ops of the recorded graph; a graph it refuses compiles as is
        # (codegen then runs what it cannot prove eagerly). A graph with symbolic sizes is
        # recorded per size: codegen's own write-backs over symbolic views returned a view of a
        # written input computed before the write (fuzz seed 20089)
        compiled = aot.functional_compile(gm, example_inputs, compile_one)
        if compiled is not None:
            return compiled
    return compile_one(gm, example_inputs)


def _autocast_regions(gm) -> bool:
    """The graph enters torch.autocast regions, or is compiled (and, by its guards, always
    called) under one."""
    return torch._C._is_any_autocast_enabled() or any(
        n.op == "call_function" and n.target in _autocast.GRAPH_NODES for n in gm.graph.nodes)


def _writes_in_place(gm) -> bool:
    return any(node_mutation(n, gm) is not None for n in gm.graph.nodes
               if n.op in ("call_function", "call_method", "call_module"))


register_backend("inductor", codegen_backend)

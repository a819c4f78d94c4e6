"""Backend registry: name -> `backend(gm, example_inputs) -> callable` (the torch.compile contract).

Built in: "eager" (run the GraphModule as is), "aot_eager" (training graphs: the joint
forward/backward graph recorded, partitioned and run with eager aten ops, pydynamo/aot/; for
debugging the training path), "codegen" (ours, imported lazily; "inductor" is an alias so
torch.compile call sites port unchanged; a graph that needs autograd takes the training path with
codegen compiling its forward and backward graphs; an inference graph that writes tensors in
place is functionalized by the same recorder and codegen compiles the functional graph),
"cudagraphs" (CUDA-graph replay of the graph's eager ops, pydynamo/cudagraphs.py). The "codegen" backend hands
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

from pydynamo import autocast as _autocast
from pydynamo.exc import InvalidArgument, InvalidBackend, PydynamoWarning
from pydynamo.stages import lazy

# stages (pydynamo/stages.py): off a warm hit's path, which runs code compiled earlier and asks
# nothing of a backend but optimize()'s settings check
aot = lazy("pydynamo.aot")     # the training stage
_cudagraphs = lazy("pydynamo.cudagraphs")      # the "cudagraphs" backend
mutation = lazy("pydynamo.mutation")   # in-place writes of a graph's nodes (what functionalizes)

_REGISTRY: dict[str, Callable] = {}


def register_backend(name: str, fn: Callable | None = None):
    """Register a backend under `name` for `pydynamo.optimize(backend=name)`:
    `register_backend("mine", fn)` or `@register_backend("mine")` above `def fn(gm, example_inputs)`.

    A backend receives each captured torch.fx.GraphModule and its example inputs (tensors and
    Python numbers, in placeholder order) and returns a callable with the graph's signature,
    e.g. `gm.forward` to run it as is. Options given to optimize() reach it as keywords."""
    def deco(f):
        _REGISTRY[name] = f
        return f
    return deco(fn) if fn is not None else deco


def list_backends() -> list[str]:
    """The names `pydynamo.optimize(backend=...)` accepts: "codegen" (the default) and its alias
    "inductor", "eager", "aot_eager", "cudagraphs", and every name given to register_backend."""
    return sorted(_REGISTRY)


def lookup_backend(backend: Union[str, Callable]) -> Callable:
    if callable(backend):
        return backend
    try:
        return _REGISTRY[backend]
    except (KeyError, TypeError):
        raise InvalidBackend(backend, list_backends()) from None


# torch.compile's modes; "default" is no mode. The codegen backend honours them (codegen.Options);
# other backends ignore them (warned at the optimize() call, as torch.compile warns at the first).
MODES = ("default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs")
CODEGEN = ("codegen", "inductor")   # "inductor": the same backend, so torch.compile call sites port


def check_settings(backend, mode, options, fullgraph, dynamic) -> None:
    """Validate optimize()'s arguments at the call, raising what torch.compile raises for the same
    mistake (InvalidBackend, RuntimeError for mode/options) with the valid values; a setting the
    backend ignores warns. Options of the codegen backend are checked against codegen.Options'
    fields and values; a callable backend receives its options as keywords, unchecked."""
    lookup_backend(backend)
    if not isinstance(fullgraph, (bool, int)) or fullgraph not in (0, 1):
        raise InvalidArgument(f"fullgraph must be True or False, got {fullgraph!r}")
    if not (dynamic is None or isinstance(dynamic, bool)):   # torch.compile: AssertionError
        raise InvalidArgument(f"dynamic must be None, True or False, got {dynamic!r}")
    if mode is not None and mode not in MODES:
        raise RuntimeError(f"Unrecognized mode={mode}, should be one of: {', '.join(MODES)}")
    if options is not None and not isinstance(options, dict):
        raise InvalidArgument(f"options must be a dict, got {type(options).__name__}")
    if backend in CODEGEN:
        _check_codegen_options(dict(options or {}), mode)
    elif isinstance(backend, str) and (mode not in (None, "default") or options):
        ignored = ", ".join(f"{k}={v!r}" for k, v in (("mode", mode), ("options", options)) if v)
        warnings.warn(f"pydynamo: backend {backend!r} ignores {ignored} (mode and options are the "
                      "codegen backend's)", PydynamoWarning, stacklevel=3)


def _check_codegen_options(options: dict, mode) -> None:
    try:
        from codegen.options import Options
    except ImportError:   # no codegen: its backend runs graphs eagerly (warned when it does)
        return
    # the record's field names (pydynamo/records.py), not dataclasses.fields: that would run
    # Options' deferred dataclass declaration on every optimize(), a warm hit's included
    known = sorted(Options._record_fields)
    for name in options:
        if name not in known:
            raise RuntimeError(f"Unexpected optimization option {name}, known options are {known}")
    try:
        Options(**codegen_options(options, mode))
    except (TypeError, ValueError) as e:
        raise ValueError(f"options: {e}") from None


def codegen_options(options: dict, mode) -> dict:
    """The codegen.Options keywords for optimize()'s `options` and `mode`."""
    if mode in (None, "default"):
        return dict(options)
    if mode == "max-autotune-no-cudagraphs":
        return dict({"cudagraphs": False}, **options, mode="max-autotune")
    return dict(options, mode=mode)


@register_backend("eager")
def eager(gm, example_inputs):
    return gm.forward


def _run_eagerly(gm, example_inputs):
    return gm.forward


_subclass_warned: set = set()


def _dispatch_subclass(example_inputs) -> bool:
    """An input is a tensor subclass with its own __torch_dispatch__ (a wrapper such as
    functional collectives' AsyncCollectiveTensor or DTensor: no storage of its own to read,
    ops mean what its dispatch says): the graph runs with eager ops, warned once per class.
    (Kernels read such an input's data pointer: a segfault.)"""
    base = torch.Tensor.__torch_dispatch__
    found = {type(x).__name__ for x in example_inputs if isinstance(x, torch.Tensor) and
             getattr(type(x), "__torch_dispatch__", base) is not base}
    for name in found - _subclass_warned:
        _subclass_warned.add(name)
        warnings.warn(f"pydynamo: a graph with an input of type {name} (a tensor subclass with "
                      "__torch_dispatch__) runs with eager ops", PydynamoWarning, stacklevel=3)
    return bool(found)


@register_backend("aot_eager")
def aot_eager(gm, example_inputs):
    if not aot.needs_autograd(example_inputs) or _dispatch_subclass(example_inputs):
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
    if _dispatch_subclass(example_inputs):
        return gm.forward

    def compile_one(g, inputs, **extra):
        try:
            return compile_fx(g, inputs, **options, **extra)    # codegen.Options fields
        except Exception as e:  # codegen is young: a graph it cannot compile still runs (eagerly)
            warnings.warn(f"pydynamo: codegen could not compile a graph ({type(e).__name__}: {e}); "
                          "running it eagerly")
            return g.forward
    if aot.needs_autograd(example_inputs):
        # the backward takes its saved activations as one list it frees as it goes; under CUDA
        # graphs a training forward's outputs the caller still holds at its next replay (the
        # activations autograd saved for a backward not run yet: two forwards, then one
        # backward) are copied out, never invalidated (codegen/cudagraphs.py)
        held = {} if "cudagraph_outputs" in options else {"cudagraph_outputs": "copy_held"}
        return aot.aot_compile(gm, example_inputs,
                               lambda g, inputs, **extra: compile_one(g, inputs, **held, **extra),
                               lambda g, inputs: compile_one(g, inputs, boxed=True),
                               split_statistics=True)
    if _writes_in_place(gm) or _autocast_regions(gm):
        # in-place writes are functionalized once, by the recorder, for every backend path, and
        # autocast's casts become ops of the recorded graph; a graph it refuses compiles as is
        # (codegen then runs what it cannot prove eagerly). A graph with symbolic sizes goes
        # this way too, recorded once over its symbols: codegen's own write-backs over symbolic
        # views returned a view of a written input computed before the write (fuzz seed 20089)
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
    return any(mutation.node_mutation(n, gm) is not None for n in gm.graph.nodes
               if n.op in ("call_function", "call_method", "call_module"))


register_backend("inductor", codegen_backend)


@register_backend("cudagraphs")
def cudagraphs(gm, example_inputs):
    """CUDA-graph replay of the eager ops (pydynamo/cudagraphs.py, imported at the first graph)."""
    return _cudagraphs.cudagraphs(gm, example_inputs)

"""Generated wrappers runnable on their own: `python <wrapper file>` times the graph on random
inputs of the recorded layouts, as Inductor's output files do.

`footer(...)` is appended to a wrapper's source by pipeline.build: a `__main__` block holding a
literal spec (the kernels' source file and how each kernel is bound, the extern targets by
qualified name, the non-literal extern arguments as evaluable text, the layouts of the graph's
inputs and of the constants it holds) and a call to `run`. `run` rebuilds the namespace the
pipeline executes the wrapper in, through the same backend `load` and `bind`, with random tensors
for inputs and constants (parameters are not in the file: timing does not need their values),
then calls the wrapper and prints the median time per call (codegen/run_wrapper.py). A wrapper whose namespace cannot be
written down (an extern that is not a named function or op, an argument without an evaluable
text, a runtime float's Python function) gets a footer that says so instead. Under exec by the
pipeline the block is inert: that namespace has no `__name__`.
"""
from __future__ import annotations

import importlib
import sys
from typing import Any, Dict, Optional

import torch

# modules a fresh process imports the same way (codegen's own: reinplace.py's scatter externs)
_IMPORTABLE = {"torch", "operator", "math", "builtins", "_operator", "codegen"}
_EVAL_NAMES = {"torch": torch, "device": torch.device, "inf": float("inf"),
               "nan": float("nan")}


def footer(backend, options, kernels_path: Optional[str], bindings: Dict[str, Any], wp, g,
           example_inputs) -> str:
    """The `__main__` block of a wrapper (see the module docstring)."""
    try:
        spec = _spec(backend, options, kernels_path, bindings, wp, g, example_inputs)
    except Exception as e:     # a convenience: never the reason a compile fails
        spec = f"{type(e).__name__}: {e}"
    head = "\n\nif globals().get('__name__') == '__main__':  # python <this file>: timed on random inputs\n"
    if isinstance(spec, str):
        return head + f"    print({('not runnable on its own: ' + spec)!r})\n"
    return head + f"    from codegen.run_wrapper import run\n    run(__file__, {spec!r})\n"


def _spec(backend, options, kernels_path, bindings, wp, g, example_inputs):
    if getattr(g.scalars, "callables", None):
        return "a runtime float's Python function"
    externs = [qualified_name(t) for t in wp.externs]
    consts = [_text(c) for c in wp.consts]
    if None in externs:
        return f"extern {wp.externs[externs.index(None)]!r} has no importable name"
    if None in consts:
        return f"extern argument {type(wp.consts[consts.index(None)]).__name__} has no " \
               "evaluable text"
    inputs = []
    for x in example_inputs:
        if isinstance(x, torch.Tensor):
            inputs.append(("tensor",) + _layout(x))
        elif isinstance(x, (bool, int, float)):
            inputs.append(("value", x))
        else:
            return f"input of type {type(x).__name__}"
    return {"backend": backend.name, "device": str(getattr(backend, "device", None) or "cpu"),
            "kernels_path": kernels_path, "vector_width": options.vector_width,
            "fast_launch": options.triton_fast_launch, "bindings": bindings,
            "externs": externs, "consts": consts, "inputs": inputs,
            "constants": {b.name: _layout(b.tensor) for b in g.constants}}


def _layout(t: torch.Tensor):
    return (tuple(t.shape), tuple(t.stride()), str(t.dtype), str(t.device))


def qualified_name(target) -> Optional[str]:
    """'torch.ops.aten.mm.default', 'torch.nn.functional.linear', 'Tensor.view': a name `resolve`
    turns back into the target, or None."""
    if isinstance(target, torch._ops.OpOverload):
        return f"torch.ops.{target.namespace}.{target._opname}.{target._overloadname}"
    if type(target).__name__ == "_MethodCaller":
        return f"Tensor.{target.name}"
    module = getattr(target, "__module__", None)
    # torch's builtins have a class in their qualname (_VariableFunctionsClass.mm): the plain
    # name is the one torch exports
    names = (getattr(target, "__qualname__", None), getattr(target, "__name__", None))
    for mod in ("torch", "torch.nn.functional", module):
        for qual in names:
            # only names a fresh process imports the same way (_IMPORTABLE)
            if mod and qual and "<" not in qual and mod.split(".")[0] in _IMPORTABLE:
                try:
                    if resolve(f"{mod}.{qual}") is target:
                        return f"{mod}.{qual}"
                except Exception:
                    continue
    return None


def resolve(name: str):
    """The object `qualified_name` named: the longest importable module prefix, then attributes.
    A module already loaded is read from sys.modules first (a warm hit resolves its wrappers'
    externs here: importing 'torch._addmm_activation' searched torch's folder for a submodule
    before falling back to 'torch'); where the attributes do not lead on from there (a submodule
    not loaded yet), the prefixes are imported as before."""
    if name.startswith("Tensor."):
        from codegen.graph import _MethodCaller
        return _MethodCaller(name[len("Tensor."):])
    parts = name.split(".")
    for i in range(len(parts), 0, -1):
        obj = sys.modules.get(".".join(parts[:i]))
        if obj is not None:
            try:
                for p in parts[i:]:
                    obj = getattr(obj, p)
                return obj
            except AttributeError:
                break
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for p in parts[i:]:
            obj = getattr(obj, p)
        return obj
    raise ImportError(name)


def _text(c) -> Optional[str]:
    try:
        text = repr(c)
        back = eval(text, dict(_EVAL_NAMES))
        return text if back == c and type(back) is type(c) else None
    except Exception:
        return None


def _random(shape, stride, dtype: str, device: str) -> torch.Tensor:
    dt = getattr(torch, dtype.split(".")[-1])
    t = torch.empty_strided(shape, stride, dtype=dt, device=device)
    if dt.is_floating_point or dt.is_complex:
        return t.normal_()
    if dt == torch.bool:
        return t.random_(0, 2)
    return t.random_(0, 8)       # small non-negative ints: valid as indices of most dims

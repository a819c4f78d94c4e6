"""pydynamo: compile PyTorch programs written in ordinary Python (a torch.compile).

    compiled = pydynamo.optimize(model_or_fn)            # backend="codegen": fused C++/Triton kernels
    print(pydynamo.explain(fn)(*args))                    # graphs, graph breaks with reasons, guards

optimize (torch.compile), explain, disable, reset, set_stance, error_on_graph_break, graph_break, allow_in_graph, mark_dynamic,
mark_static, list_backends, register_backend, write_report (the compile report),
cudagraph_mark_step_begin (mode="reduce-overhead"'s outputs, docs/USER_GUIDE.md); `config`
(process-wide settings), `exc` (errors and warnings). help(pydynamo.optimize) lists every
argument; docs/USER_GUIDE.md is the guide, PYDYNAMO_LOGS=all shows everything it does and
PYDYNAMO_REPORT=dir writes it down as a page.

Re-exports only; see DESIGN.md for the map. They are resolved on first use (module
`__getattr__`), so importing the package, or any module of it, runs nothing else: a leaf such as
pydynamo.mutation or pydynamo.sources stays a leaf, and `import pydynamo` stays torch-free.
"""
import importlib

# eager: the function shares its module's name, and a later `import pydynamo.explain` would set
# the package attribute to the module if the function were not bound here first (explain.py
# imports only pydynamo.exc)
from pydynamo.explain import explain

# name -> (module, attribute); attribute None: the module itself
_EXPORTS = {
    "config": ("pydynamo.config", None),
    "exc": ("pydynamo.exc", None),          # errors and warnings (GraphBreakWarning, ...)
    "aot": ("pydynamo.aot", None),          # training: counters, aot_compile
    "optimize": ("pydynamo.eval_frame", "optimize"),
    "disable": ("pydynamo.eval_frame", "disable"),
    "reset": ("pydynamo.eval_frame", "reset"),
    "set_stance": ("pydynamo.stance", "set_stance"),
    "error_on_graph_break": ("pydynamo.stance", "error_on_graph_break"),
    "list_backends": ("pydynamo.backends", "list_backends"),
    "register_backend": ("pydynamo.backends", "register_backend"),
    "graph_break": ("pydynamo.hints", "graph_break"),
    "allow_in_graph": ("pydynamo.executor.variables.torch_fns", "allow_in_graph"),
    "mark_dynamic": ("pydynamo.shapes", "mark_dynamic"),
    "mark_static": ("pydynamo.shapes", "mark_static"),
    "save_artifacts": ("pydynamo.warm_store", "save_artifacts"),   # the warm-start cache, moved
    "load_artifacts": ("pydynamo.warm_store", "load_artifacts"),
    "write_report": ("pydynamo.report", "write_report"),   # the compile report (PYDYNAMO_REPORT)
    "cudagraph_mark_step_begin": ("codegen.cudagraph_steps", "mark_step_begin"),   # a leaf
}

__all__ = ["explain", *_EXPORTS]


def __getattr__(name):
    entry = _EXPORTS.get(name)
    if entry is None:
        raise AttributeError(f"module 'pydynamo' has no attribute {name!r}")
    module = importlib.import_module(entry[0])
    value = module if entry[1] is None else getattr(module, entry[1])
    globals()[name] = value
    return value


def __dir__():
    return sorted(set(globals()) | set(_EXPORTS))

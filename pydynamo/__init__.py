"""pydynamo: compile PyTorch programs written in ordinary Python.

Re-exports only; see DESIGN.md for the map.
"""
from pydynamo import config
from pydynamo.eval_frame import optimize, disable, reset
from pydynamo.backends import list_backends, register_backend
from pydynamo.explain import explain
from pydynamo.hints import graph_break

__all__ = ["config", "optimize", "disable", "reset", "explain", "graph_break", "list_backends",
           "register_backend", "allow_in_graph", "mark_dynamic", "mark_static"]


def __getattr__(name):
    # re-exports that need torch are resolved on first use, so `import pydynamo` stays light
    if name == "allow_in_graph":
        from pydynamo.executor.variables.torch_fns import allow_in_graph
        return allow_in_graph
    if name in ("mark_dynamic", "mark_static"):
        from pydynamo import shapes  # sympy: loaded on first use
        return getattr(shapes, name)
    raise AttributeError(f"module 'pydynamo' has no attribute {name!r}")

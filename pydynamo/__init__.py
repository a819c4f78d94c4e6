"""pydynamo: compile PyTorch programs written in ordinary Python.

Re-exports only; see DESIGN.md for the map.
"""
from pydynamo import config
from pydynamo.eval_frame import optimize, disable, reset
from pydynamo.backends import list_backends, register_backend
from pydynamo.explain import explain
from pydynamo.hints import graph_break

__all__ = ["config", "optimize", "disable", "reset", "explain", "graph_break", "list_backends", "register_backend"]

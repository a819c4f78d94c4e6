"""pydynamo: compile PyTorch programs written in ordinary Python.

Re-exports only; see DESIGN.md for the map.
"""
from pydynamo import config
from pydynamo.eval_frame import optimize, disable, reset
from pydynamo.backends import list_backends, register_backend
from pydynamo.explain import explain

__all__ = ["config", "optimize", "disable", "reset", "explain", "list_backends", "register_backend"]

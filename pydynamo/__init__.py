"""pydynamo: compile PyTorch programs written in ordinary Python.

Re-exports only; see DESIGN.md for the map.
"""
from pydynamo import config
from pydynamo.eval_frame import optimize, disable, reset

__all__ = ["config", "optimize", "disable", "reset"]

"""How lowering a graph gives up: one node, or the whole graph.

A lowering that cannot express an op exactly raises one of `_LOWERING_ERRORS` (ir.NotLowered, or
the error an argument it does not handle provokes); GraphLowering (codegen/graph.py) then runs
that node as an extern call of the eager op, so the graph still compiles. Where no node-by-node
answer is exact (a mutation that cannot be functionalized, an output whose aliasing cannot be
reproduced, an autocast region), `EagerFallback` is raised and codegen/pipeline.py runs the whole
graph eagerly, with one warning. Invariant: never a wrong answer, so any doubt raises one of the
two.
"""
from __future__ import annotations

from codegen.ir import NotLowered


class EagerFallback(Exception):
    """The whole graph must run eagerly (reason in the message)."""


# what a lowering raises for an op it cannot express (a symbolic count, an unsupported
# argument): the op then runs as an extern
_LOWERING_ERRORS = (NotLowered, TypeError, ValueError, IndexError, KeyError, NotImplementedError,
                    AttributeError, ZeroDivisionError, RuntimeError)

"""Training: graphs whose inputs require grad, compiled forward and backward.

Read order: recorder.py (the joint forward/backward graph of aten ops, functionalized) ->
partition.py (forward and backward graphs; what is saved, what is recomputed) -> runtime.py
(one autograd.Function per graph, the epilogue that replays eager's writes and aliases).
The backends ("aot_eager", "codegen") call `aot_compile` with their compilers for the two
graphs; the executor and custom backends never see the joint graph.
"""
from pydynamo.aot.recorder import Joint, Unsupported, record
from pydynamo.aot.runtime import aot_compile, counters, functional_compile, needs_autograd

__all__ = ["Joint", "Unsupported", "aot_compile", "counters", "functional_compile", "needs_autograd",
           "record"]

"""pydynamo.explain(fn)(*args, **kwargs): run once under a fresh cache and report what was captured.

Returns ExplainOutput: the FX graphs, graph_count, ops_per_graph, guards (as text, with the user
file:line that created each), compile_times, graph_break_count and break_reasons (GraphBreak
records: reason code, file:line:col, user stack through inlined calls, hint), recompile_reasons
(RecompileExplanation: every failing guard of every entry, expected vs actual, user line) and
the call's output. graph_break_count is torch.compile's explain() number, graph_count - 1 (a
split of the work into n graphs is n - 1 breaks; a break with no graph on one side, e.g. a print
on the first line, splits nothing), never below 0 (torch reports -1 when nothing compiled); the
breaks themselves, one per frame cut, are in break_reasons. Caches are reset before the run so every frame is traced again (explain is a
debugging tool, not a hot path).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Callable

from pydynamo import records
from pydynamo.exc import GraphBreak


@records.record(frozen=False)   # a plain dataclass without generated methods (import cost)
class ExplainOutput:
    graphs: list
    graph_count: int
    ops_per_graph: list
    guards: list
    compile_times: list
    break_reasons: list
    graph_break_count: int
    out: Any = None
    recompile_reasons: list = dataclasses.field(default_factory=list)  # RecompileExplanation

    def __str__(self) -> str:
        lines = [f"Graph count: {self.graph_count}", f"Graph break count: {self.graph_break_count}",
                 f"Ops per graph: {self.ops_per_graph}"]
        if self.break_reasons:
            lines.append("Break reasons:")
            lines += [f"  {b}" for b in self.break_reasons]
        if self.recompile_reasons:
            lines.append("Recompiles:")
            lines += ["  " + line for r in self.recompile_reasons for line in str(r).splitlines()]
        lines.append("Guards:")
        lines += [f"  {g}" for g in self.guards]
        return "\n".join(lines)


def explain(fn: Callable, backend="eager", dynamic=None) -> Callable[..., ExplainOutput]:
    """`pydynamo.explain(fn)(*args, **kwargs)`: run `fn` once, compiled with `backend`, under a
    fresh cache and return an ExplainOutput (print it): graph_count, graph_break_count,
    ops_per_graph, break_reasons (each with the user's file:line:col, reason code, message and
    hint), guards, recompile_reasons, compile_times, the graphs and the call's output `out`.

    Breaks are reported here instead of warned about. `dynamic` is optimize's (True: shapes
    symbolic from this one call, guards as relations). Caches are reset before and after the run.
    """
    def run(*args, **kwargs) -> ExplainOutput:
        # imported here: the package imports this module eagerly, and `import pydynamo` stays
        # torch-free (convert_frame and recompiles need torch)
        from pydynamo import convert_frame
        from pydynamo.eval_frame import optimize, reset
        from pydynamo.recompiles import RecompileExplanation
        results, breaks, recompiles = [], [], []

        def record(item):
            if isinstance(item, GraphBreak):  # the frame ran eagerly as a whole
                breaks.append(item)
                return
            if isinstance(item, RecompileExplanation):
                recompiles.append(item)
                return
            results.append(item)
            if item.graph_break is not None:  # the frame was cut and resumes in another frame
                breaks.append(item.graph_break)

        reset()
        convert_frame.RECORDERS.append(record)
        try:
            out = optimize(fn, backend=backend, dynamic=dynamic)(*args, **kwargs)
        finally:
            convert_frame.RECORDERS.remove(record)
            reset()
        graphs = [g for r in results for g in r.graphs]
        return ExplainOutput(
            graphs=[g.gm for g in graphs], graph_count=len(graphs), ops_per_graph=[g.op_count for g in graphs],
            guards=[text for r in results for text in r.guard_texts()],
            compile_times=[r.compile_time_s for r in results], break_reasons=breaks,
            graph_break_count=max(len(graphs) - 1, 0), out=out, recompile_reasons=recompiles)
    return run

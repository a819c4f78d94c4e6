"""Run the graph-break corpus under ONE engine in this process (tests/compat's runner, reused).

    python tests/breaks/breaks_runner.py --engine {eager,torch,pydynamo} --out DIR [--cases a,b]

Everything is tests/compat/compat_runner.py's, with the corpus swapped for breaks_corpus and two
more fields per case record: `explain` ((graph_count, graph_break_count, number of break
reasons) from the engine's explain() on the first call's inputs), `reasons` (pydynamo: those
break reasons as plain dicts) and `eager_frames` (pydynamo: frames that ran eagerly as a
whole because no graph break was possible there). Under torch.compile, `pydynamo.graph_break` is pointed at
`torch._dynamo.graph_break` so an explicit break means the same to both engines.
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "compat"))
sys.path.insert(0, HERE)

import compat_case as cc  # noqa: E402
import compat_runner as cr  # noqa: E402
import breaks_corpus  # noqa: E402  (registers the cases)

cr.compat_corpus = breaks_corpus  # the frame counter walks these modules' code


def _torch_explain(fn, args, kwargs):
    import torch._dynamo
    e = torch._dynamo.explain(fn)(*args, **kwargs)
    return e.graph_count, e.graph_break_count, len(e.break_reasons)


def _pydynamo_explain(fn, args, kwargs):
    import pydynamo
    e = pydynamo.explain(fn, backend="eager")(*args, **kwargs)
    _REASONS[:] = [dict(code=b.reason_code, message=b.message, filename=b.filename, lineno=b.lineno,
                        col=b.col, user_stack=[tuple(f) for f in b.user_stack], hint=b.hint, text=str(b))
                   for b in e.break_reasons]
    return e.graph_count, e.graph_break_count, len(e.break_reasons)


_EXPLAIN = {"torch": _torch_explain, "pydynamo": _pydynamo_explain}
_EAGER_FRAMES = [0]
_REASONS: list = []


def _install(engine: str):
    """Wrap run_case: record explain()'s counts on the first call's inputs, and (pydynamo) how
    many frames ran eagerly as a whole because no graph break was possible."""
    if engine == "torch":
        import torch._dynamo
        import pydynamo
        pydynamo.graph_break = torch._dynamo.graph_break
    elif engine == "pydynamo":
        from pydynamo import convert_frame
        from pydynamo.exc import GraphBreak

        def record(item):
            if isinstance(item, GraphBreak):
                _EAGER_FRAMES[0] += 1
        convert_frame.RECORDERS.append(record)
    run_case = cr.run_case

    def counted(c, reset, wrap, counter):
        _EAGER_FRAMES[0] = 0
        rec = run_case(c, reset, wrap, counter)
        rec["eager_frames"] = _EAGER_FRAMES[0]
        rec["explain"] = None
        _REASONS.clear()
        if engine in _EXPLAIN:
            import torch
            reset()
            torch.manual_seed(cc.seed_of(c.name, 999))
            args, kwargs = c.inputs.make(torch.Generator().manual_seed(cc.seed_of(c.name, 0)))
            if c.before is not None:
                c.before()
            try:
                rec["explain"] = _EXPLAIN[engine](c.make(), args, kwargs)
            except Exception as e:
                rec["explain"] = f"{type(e).__name__}: {e}"
            reset()
        rec["reasons"] = list(_REASONS)
        return rec
    cr.run_case = counted


if __name__ == "__main__":
    engine = sys.argv[sys.argv.index("--engine") + 1]
    _install(engine)
    sys.exit(cr.main())

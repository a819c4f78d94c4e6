"""Run the dynamic-shape corpus under ONE engine in this process (tests/compat's runner, reused).

    python tests/compat_dynamic/dyn_runner.py --engine {eager,torch,pydynamo} --out DIR [--cases a,b]

Everything is tests/compat/compat_runner.py's (records, frame counting, timeouts), with three
changes: the corpus is dyn_corpus; compat_case.N_CALLS = 1, so a case's calls are its size
sequence, each run once, in order; and each case is compiled with the mode its name carries
(`@auto`: dynamic=None, `@dynamic`: dynamic=True, `@codegen`: dynamic=None with pydynamo's codegen
backend behind the counting one, `@codegen_dynamic`: the same with dynamic=True). Under pydynamo
each record also gets `guards`: the text of every guard of every frame compiled during the case
(what test_design.py reads).
"""
from __future__ import annotations

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.dirname(HERE), "compat"))
sys.path.insert(0, HERE)

import compat_case as cc  # noqa: E402
import compat_runner as cr  # noqa: E402
import dyn_case as dc  # noqa: E402
import dyn_corpus  # noqa: E402  (registers the cases)

cr.compat_corpus = dyn_corpus  # the frame counter walks these modules' code
for _name in [n for n in cc.REGISTRY if "@" not in n]:
    del cc.REGISTRY[_name]     # compat_runner's import registered the compat corpus too
cc.N_CALLS = 1                 # the size sequence is the whole run
_MODE = [dc.MODES["auto"]]     # the mode of the case being run (set per case below)
_GUARDS: list = []


def _torch_engine():
    import torch
    import torch._dynamo
    dc.MARK[0] = torch._dynamo.mark_dynamic
    return torch._dynamo.reset, (lambda fn, backend: torch.compile(fn, backend=backend, dynamic=_MODE[0].dynamic))


def _pydynamo_engine():
    try:
        import pydynamo
    except ImportError:
        sys.path.insert(0, cr.REPO)
        import pydynamo
    from pydynamo import convert_frame
    dc.MARK[0] = getattr(pydynamo, "mark_dynamic", None)

    def record(item):
        for g in getattr(item, "guards", None) or ():
            _GUARDS.append(g.describe() if hasattr(g, "describe") else str(g))
            _GUARDS.extend(_texts(getattr(g, "expected", None)))
    convert_frame.RECORDERS.append(record)

    def wrap(fn, counting):
        backend = cr.codegen_behind(counting) if _MODE[0].backend == "codegen" else counting
        return pydynamo.optimize(fn, backend=backend, dynamic=_MODE[0].dynamic)
    return pydynamo.reset, wrap


def _texts(v) -> list:
    """Untruncated text of a guard's expected value (shape guards: their relations)."""
    if v is None:
        return []
    if isinstance(v, (list, tuple)):
        return [x for item in v for x in _texts(item)]
    text = getattr(v, "text", None)
    return [text] if isinstance(text, str) else [str(v)]


cr.ENGINES.update(torch=_torch_engine, pydynamo=_pydynamo_engine)


def _install():
    run_case = cr.run_case

    def with_mode(c, reset, wrap, counter):
        _MODE[0] = dc.mode_of(c.name)
        _GUARDS.clear()
        rec = run_case(c, reset, wrap, counter)
        rec["guards"] = list(_GUARDS)
        return rec
    cr.run_case = with_mode


if __name__ == "__main__":
    _install()
    sys.exit(cr.main())

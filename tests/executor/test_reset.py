"""reset() drops every reference pydynamo owns (issue 14 item 5).

Regression: compiled graphs, their GraphModules and constants stayed reachable from the user
module's globals (`__pydynamo_compiled_fn_N`) until the module died: about 93 objects and 19 KB
accumulated per compile across reset cycles.
"""
import gc
import math
import weakref

import pytest
import torch

import pydynamo
from pydynamo import convert_frame
from pydynamo import installed


class Marker:
    pass


def simple(x):
    return torch.relu(x) * 2 + 1


def with_break(x):
    y = torch.cos(x) + 1
    pydynamo.graph_break()
    return y * 2, Marker, math.inf      # a class and a non-finite float: globals constants


def _compile_once(fn, backend, x):
    seen = []
    convert_frame.RECORDERS.append(seen.append)
    try:
        pydynamo.optimize(fn, backend=backend)(x)   # (graph_break() asked for: no warning)
    finally:
        convert_frame.RECORDERS.remove(seen.append)
    results = [r for r in seen if isinstance(r, convert_frame.FrameResult)]
    assert results
    refs = []
    for r in results:
        refs += [weakref.ref(r.guard), weakref.ref(r.new_code)]
        for g in r.graphs:
            refs.append(weakref.ref(g.gm))
            try:
                refs.append(weakref.ref(g.compiled_fn))
            except TypeError:   # a bound method: its GraphModule is referenced above
                pass
    return refs


@pytest.mark.parametrize("backend", ["eager", "codegen"])
@pytest.mark.parametrize("fn", [simple, with_break], ids=["simple", "graph_break"])
def test_reset_frees_graphs_guards_and_code(fn, backend):
    pydynamo.reset()
    refs = _compile_once(fn, backend, torch.randn(8))
    assert any(k.startswith("__pydynamo") for k in fn.__globals__)
    pydynamo.reset()
    gc.collect()
    assert [r() for r in refs if r() is not None] == []
    assert not [k for k in fn.__globals__ if k.startswith("__pydynamo")]


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_reset_cycles_do_not_accumulate_objects(backend):
    x = torch.randn(8)

    def cycle():
        pydynamo.optimize(with_break, backend=backend)(x)
        pydynamo.optimize(simple, backend=backend)(x)
        pydynamo.reset()
        gc.collect()

    for _ in range(3):   # first-use caches (torch, codegen) fill here
        cycle()
    before = len(gc.get_objects())
    n = 15
    for _ in range(n):
        cycle()
    grown = len(gc.get_objects()) - before
    assert grown < n, f"{grown / n:.1f} objects per reset cycle"


def test_installed_names_die_with_their_namespace():
    """The registry never keeps a dead module namespace alive."""
    pydynamo.reset()
    ns = {}
    exec("import torch\ndef g(x):\n    return torch.tanh(x) + 1\n", ns)
    g = ns["g"]
    pydynamo.optimize(g, backend="eager")(torch.randn(3))
    assert any(k.startswith("__pydynamo_compiled_fn") for k in ns)
    probe = Marker()
    ns["probe"] = probe
    ref = weakref.ref(probe)
    del ns, g, probe
    pydynamo.reset()   # the entries went with the reset; the namespace is now garbage
    gc.collect()
    assert ref() is None
    assert len(installed._LIVE) == 0

"""`is` between objects from outside the frame (found while tracing torch.utils.checkpoint, whose
first call imports triton: importlib's `sys.modules.get(name, _NEEDS_LOADING) is _NEEDS_LOADING`
answered False, so import_module returned its sentinel and triton's backend discovery raised).
Each compares with eager over calls that change which objects are passed."""
from __future__ import annotations

import importlib
import sys
import warnings

import torch

import pydynamo

_SENTINEL = object()


def _opt(fn):
    return pydynamo.optimize(fn, backend="eager")


def test_default_of_dict_get_is_the_sentinel():
    """Two reads of an object pydynamo cannot trace are one tracker (one object)."""
    def f(x, name, d):
        m = d.get(name, _SENTINEL)
        return x + 1, m is _SENTINEL

    x = torch.ones(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for d in ({}, {"a": 1}, {}):
            assert _opt(f)(x, "a", d)[1] == f(x, "a", d)[1]


def test_distinct_objects_then_the_same_object_recompiles():
    """`a is b` answered False is guarded (the identities are pinned): a later call passing one
    object for both must not reuse it."""
    class C:
        pass

    def f(x, a, b):
        return x + 1, a is b

    opt = _opt(f)
    c1, c2 = C(), C()
    o1, o2 = object(), object()
    x = torch.ones(1)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for a, b in ((c1, c2), (c1, c1), (o1, o2), (o1, o1), (c2, c1)):
            assert opt(x, a, b)[1] == f(x, a, b)[1]


def test_import_module_of_a_fresh_module(tmp_path):
    pkg = tmp_path / "pd_identity_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "mod.py").write_text("class A:\n    pass\n")
    sys.path.insert(0, str(tmp_path))
    try:
        def f(x):
            m = importlib.import_module("pd_identity_pkg.mod")
            return x + 1, m

        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            _, m = _opt(f)(torch.ones(1))
        assert m is sys.modules["pd_identity_pkg.mod"] and m.A.__name__ == "A"
    finally:
        sys.path.remove(str(tmp_path))
        for name in ("pd_identity_pkg.mod", "pd_identity_pkg"):
            sys.modules.pop(name, None)

"""Instances of dict / OrderedDict subclasses (transformers' ModelOutput pattern): made in the
frame or passed in, with Python __setitem__/__setattr__ overrides that call super() into the C
dict and object. Items live in a dict view of the instance, attributes in its tracker; the
output code rebuilds new instances without re-running __init__ and replays mutations through
the C dict's own methods. torch.compile captures each case in one graph."""
import os
import sys

import pytest
import torch

import pydynamo

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "compat"))
# the same classes as the compat cases: Record (items mirrored as attributes), ModelOut (a
# ModelOutput look-alike whose update() raises, like transformers')
from compat_corpus.c_python import ModelOut as Output, Record  # noqa: E402


class Plain(dict):
    pass


def make_record(x):
    r = Record()
    r["a"] = x + 1
    r.b = x * 2      # only an attribute: "b" is not an item
    r.a = r.a * 3    # both (the override keeps them equal)
    return r, len(r), "a" in r, list(r.keys()), [k for k in r], dict(r)["a"]


def make_output(x):
    out = Output(logits=x.sin(), hidden=x.cos())
    first = out[0] if False else out.to_tuple()[0]
    return out, first + out.hidden, out["logits"], len(out)


def plain_subclass(x):
    d = Plain(a=x)
    d["b"] = x + 1
    return d, sum(d.values())


def mutate_passed_in(x, out):
    out["loss"] = x * 5
    out.hidden = out.hidden + 1  # an attribute write through the dataclass's plain __setattr__
    return out.logits + out["loss"]


def _check_same(got, ref):
    assert type(got) is type(ref)
    assert list(got.keys()) == list(ref.keys())
    for k in ref:
        torch.testing.assert_close(got[k], ref[k])
    for k, v in vars(ref).items():
        torch.testing.assert_close(getattr(got, k), v)


@pytest.mark.parametrize("fn", [make_record, make_output, plain_subclass])
def test_made_in_frame_and_returned(fn, cnt):
    opt = pydynamo.optimize(fn, backend=cnt)
    for _ in range(3):
        x = torch.randn(3)
        got, ref = opt(x), fn(x)
        _check_same(got[0], ref[0])
        for g, r in zip(got[1:], ref[1:]):
            if isinstance(r, torch.Tensor) or isinstance(g, torch.Tensor):
                torch.testing.assert_close(g, r)
            else:
                assert g == r
    assert cnt.count == 1


def test_passed_in_and_mutated(cnt):
    opt = pydynamo.optimize(mutate_passed_in, backend=cnt)
    for _ in range(3):
        x, l, h = torch.randn(3), torch.randn(3), torch.randn(3)
        a, b = Output(logits=l, hidden=h), Output(logits=l, hidden=h)
        torch.testing.assert_close(opt(x, a), mutate_passed_in(x, b))
        _check_same(a, b)  # the item and the attribute written, in eager's order
        assert list(a.keys()) == ["logits", "hidden", "loss"]
    assert cnt.count == 1

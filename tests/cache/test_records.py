"""pydynamo/records.py: a class declared with @record is, to everything outside it, the dataclass it
declares (the warm-start hit path declares its value classes so: no generated code at import),
checked against dataclasses itself on the same declarations."""
import copy
import dataclasses
import pickle

import pytest

from pydynamo.records import record
from pydynamo.sources import AttrSource, DefaultsSource, GlobalSource, LocalSource


@record
class Point:
    x: int
    y: int = 2
    tags: list = dataclasses.field(default_factory=list)


@dataclasses.dataclass(frozen=True)
class DcPoint:
    x: int
    y: int = 2
    tags: list = dataclasses.field(default_factory=list)


@record
class Checked:
    n: int

    def __post_init__(self):
        if self.n < 0:
            raise ValueError("negative")
        object.__setattr__(self, "n", self.n * 10)


@record(frozen=False)
class Mutable:
    a: int


@record(eq=False)
class ById:
    a: int


@pytest.mark.parametrize("args, kwargs", [((1,), {}), ((1, 5), {}), ((), {"x": 3, "y": 4}),
                                          ((7,), {"tags": [1]})])
def test_init_repr_fields_and_replace_match_dataclasses(args, kwargs):
    r, d = Point(*args, **kwargs), DcPoint(*args, **kwargs)
    assert repr(r) == repr(d).replace("DcPoint", "Point")
    assert [f.name for f in dataclasses.fields(r)] == [f.name for f in dataclasses.fields(d)]
    assert dataclasses.is_dataclass(r) and dataclasses.astuple(r) == dataclasses.astuple(d)
    assert dataclasses.replace(r, y=9) == Point(r.x, 9, r.tags)


@pytest.mark.parametrize("bad", [lambda c: c(), lambda c: c(1, 2, [], 4), lambda c: c(1, x=1),
                                 lambda c: c(1, z=3)])
def test_bad_arguments_raise_type_error_as_dataclasses_does(bad):
    with pytest.raises(TypeError):
        bad(DcPoint)
    with pytest.raises(TypeError):
        bad(Point)


def test_default_factory_makes_one_value_per_instance_and_post_init_runs():
    assert Point(1).tags is not Point(1).tags
    assert Checked(2).n == 20
    with pytest.raises(ValueError):
        Checked(-1)


def test_frozen_equal_hash_and_pickle():
    a = AttrSource(LocalSource("x"), "w")
    with pytest.raises(dataclasses.FrozenInstanceError):
        a.attr = "v"
    with pytest.raises(dataclasses.FrozenInstanceError):
        del a.attr
    assert a == AttrSource(LocalSource("x"), "w") and hash(a) == hash(AttrSource(LocalSource("x"), "w"))
    assert a != AttrSource(LocalSource("y"), "w") and a != AttrSource(LocalSource("x"), "v")
    assert LocalSource("x") != GlobalSource("x")            # other class, same field value
    assert len({LocalSource("x"), GlobalSource("x"), LocalSource("x")}) == 2
    d = DefaultsSource(LocalSource("f"), 0)
    assert d.kw is False and DefaultsSource(LocalSource("f"), 0, kw=True) != d
    for b in (pickle.loads(pickle.dumps(a)), copy.copy(a), copy.deepcopy(a)):
        assert b == a and hash(b) == hash(a) and b is not a


def test_unfrozen_and_identity_variants():
    m = Mutable(1)
    m.a = 2
    assert m == Mutable(2)
    with pytest.raises(TypeError):
        hash(m)
    assert ById(1) != ById(1) and len({ById(1), ById(1)}) == 2


def test_a_frozen_dataclass_may_subclass_a_record_base():
    """shapes.TensorPropertySource: a frozen dataclass over sources.Source (not a record)."""
    from pydynamo.shapes import TensorPropertySource
    t = TensorPropertySource(LocalSource("x"), "size", 0)
    assert t == TensorPropertySource(LocalSource("x"), "size", 0) and t.name() == "L['x'].size()[0]"

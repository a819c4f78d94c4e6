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


# The project's classes declared through @record on the warm-start hit path (issue 20), each
# against a dataclass built from its own declaration (same fields, defaults, methods) with the
# decorator it had before: every value these classes derive -- repr, astuple/asdict, equality,
# hash, fields, replace, pickle, __post_init__'s checks -- must be what the dataclass gave. (None
# of them is hashed into a persistent key: codegen keys its caches by source text and
# vector_width, warm_cache by the user's options dict; a key derived from one would be its repr
# or astuple, compared here.)
_GENERATED = {"__init__", "__repr__", "__eq__", "__hash__", "__setattr__", "__delattr__",
              "__dict__", "__weakref__", "__doc__", "__match_args__", "__annotations__"}


def _dataclass_twin(cls, frozen):
    own = {k: v for k, v in vars(cls).items() if k not in _GENERATED
           and not k.startswith(("_record_", "__dataclass_")) and k not in cls._record_fields}
    specs = [(f.name, f.type, dataclasses.field(default=f.default, default_factory=f.default_factory))
             for f in dataclasses.fields(cls)]
    return dataclasses.make_dataclass(cls.__name__, specs, namespace=own, frozen=frozen)


def _project_cases():
    from codegen.options import Options
    from pydynamo.exc import GraphBreak
    from pydynamo.explain import ExplainOutput
    from pydynamo.mutation import Mutation
    return [
        (Options, True, [((), {}), ((False,), {"mode": "reduce-overhead"}),
                         ((), {"dynamic": {0: [1]}, "written_back": ((0, 1),), "omp_schedule": "guided"}),
                         ((), {"backend_kernels": "cpp", "vector_width": "native", "boxed": True})]),
        (Mutation, True, [(((0,), 0), {}), ((("out",), "out", True), {}), (((1, 2), None), {})]),
        (GraphBreak, False, [(("print", "a print"), {}),
                             (("tensor_branch", "m", "f.py", 3, 4, (("f.py", 3, "g"),), "h"), {})]),
        (ExplainOutput, False, [(([], 0, [], [], [], [], 0), {}),
                                (([1], 1, [2], ["g"], [0.5], [], 0), {"out": 7, "recompile_reasons": [3]})]),
    ]


@pytest.mark.parametrize("cls, frozen, cases", _project_cases(), ids=lambda c: getattr(c, "__name__", ""))
def test_the_projects_records_derive_what_their_dataclass_did(cls, frozen, cases):
    twin = _dataclass_twin(cls, frozen)
    assert "__dataclass_fields__" in vars(cls) and "_record_fields" in vars(cls)   # (a record)
    assert [(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(cls)] == \
        [(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(twin)]
    for args, kwargs in cases:
        r, d = cls(*args, **kwargs), twin(*args, **kwargs)
        assert repr(r) == repr(d) and str(r) == str(d)
        assert dataclasses.astuple(r) == dataclasses.astuple(d)
        assert dataclasses.asdict(r) == dataclasses.asdict(d)
        assert r == cls(*args, **kwargs) and (r != d) and not (r == d)   # (other class)
        try:
            want = hash(d)
        except TypeError:
            with pytest.raises(TypeError):
                hash(r)
        else:
            assert hash(r) == want
        name = dataclasses.fields(cls)[-1].name
        r2 = dataclasses.replace(r, **{name: getattr(r, name)})
        assert r2 == r and repr(r2) == repr(dataclasses.replace(d, **{name: getattr(d, name)}))
        assert pickle.loads(pickle.dumps(r)) == r and copy.deepcopy(r) == r
        if frozen:
            with pytest.raises(dataclasses.FrozenInstanceError):
                setattr(r, name, None)
        else:
            setattr(r, name, None)
            setattr(d, name, None)
            assert repr(r) == repr(d)


@pytest.mark.parametrize("bad", [{"backend_kernels": "cuda"}, {"cpp_tanh": "fast"}, {"omp_schedule": "a;b"},
                                 {"cudagraph_outputs": "never"}, {"vector_width": "1024"}, {"nope": 1}])
def test_options_checks_its_values_as_the_dataclass_did(bad):
    from codegen.options import Options
    twin = _dataclass_twin(Options, True)
    errors = []
    for c in (Options, twin):
        with pytest.raises((ValueError, TypeError)) as e:
            c(**bad)
        errors.append((e.type, str(e.value).replace("Options.__init__()", "Options()")))
    assert errors[0][0] is errors[1][0]
    if errors[0][0] is ValueError:
        assert errors[0][1] == errors[1][1]
    assert twin.of({"mode": "max-autotune"}).autotune and Options.of({"mode": "max-autotune"}).autotune


# A record's dataclass declaration is deferred to its first introspection (records._Declared:
# dataclasses' processing was most of a record's import cost on the warm hit path); until then
# and after, it must be what declaring it eagerly gave: fields, defaults, class attributes,
# __match_args__, inheritance, and dataclasses' own refusals at the declaration.
def _declarations(deco):
    @deco
    class Base:
        a: int
        b: int = 3
        c: list = dataclasses.field(default_factory=list)
        d: int = dataclasses.field(default=4)

    @deco
    class Child(Base):
        e: str = "e"
        b: int              # declared again without a default: keeps the base's (as dataclasses)

    class Plain(Child):     # not decorated: inherits Child's fields
        pass
    return Base, Child, Plain


def _described(cls):
    return ([(f.name, f.type, f.default, f.default_factory) for f in dataclasses.fields(cls)],
            {n: getattr(cls, n, "<absent>") for n in "abcde"}, getattr(cls, "__match_args__", None))


def test_a_lazily_declared_record_is_the_dataclass_it_declares():
    from pydynamo import records
    recs, twins = _declarations(record), _declarations(dataclasses.dataclass(frozen=True))
    assert all(isinstance(vars(c)["__dataclass_fields__"], records._Declared) for c in recs[:2])
    # class attributes and match args before the declaration runs, then everything after it
    assert [({n: getattr(c, n, "<absent>") for n in "abcde"}, c.__match_args__) for c in recs] == \
        [({n: getattr(c, n, "<absent>") for n in "abcde"}, c.__match_args__) for c in twins]
    assert [_described(c) for c in recs] == [_described(c) for c in twins]
    assert all(type(vars(c)["__dataclass_fields__"]) is dict for c in recs[:2])
    assert recs[1](1).b == twins[1](1).b == 3 and recs[2](1, 5, [], 6, "x").d == 6
    assert repr(recs[0].__dataclass_params__) == repr(dataclasses.dataclass(
        init=False, repr=False, eq=False)(type("X", (), {"__annotations__": {}})).__dataclass_params__)
    Child = recs[1]
    r = Child(1)
    match r:
        case Child(a, b, c, d, e):
            assert (a, b, c, d, e) == (1, 3, [], 4, "e")
        case _:
            raise AssertionError("no positional match")
    if hasattr(copy, "replace"):        # Python 3.13
        assert copy.replace(r, e="f") == recs[1](1, e="f")


def test_a_dataclass_may_subclass_a_lazily_declared_record():
    @record
    class Rec:
        a: int
        b: int = 2

    @dataclasses.dataclass
    class Sub(Rec):
        c: int = 5
    assert [f.name for f in dataclasses.fields(Sub)] == ["a", "b", "c"]
    assert [f.name for f in dataclasses.fields(Rec)] == ["a", "b"] and Rec(1).b == 2


@pytest.mark.parametrize("body, error", [
    ("x: list = []", ValueError),                       # a mutable default
    ("x = dataclasses.field(default=1)", TypeError),    # a field without a type
    ("x: dataclasses.InitVar[int] = 1", TypeError),     # (records refuse InitVar)
])
def test_declarations_dataclasses_refuses_are_refused_at_once(body, error):
    ns = {"dataclasses": dataclasses, "record": record}
    with pytest.raises(error):
        exec(f"@record\nclass Bad:\n    {body}\n", ns)


def test_class_variables_are_not_fields():
    from typing import ClassVar

    @record
    class WithClassVar:
        a: int
        k: ClassVar[int] = 7
    assert [f.name for f in dataclasses.fields(WithClassVar)] == ["a"] and WithClassVar(1).k == 7
    assert WithClassVar._record_fields == ("a",)

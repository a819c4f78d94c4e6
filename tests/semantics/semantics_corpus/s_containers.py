"""Semantics cases: containers as library code uses them — live dict views (keys / values /
items see later writes), dict.fromkeys and its OrderedDict / defaultdict forms, defaultdict,
OrderedDict, collections.namedtuple (with defaults) and typing.NamedTuple, itertools (chain,
chain.from_iterable, product, zip_longest, accumulate, islice)."""
import collections
import itertools
import typing

import torch

from compat_case import case, t

# --- live dict views --------------------------------------------------------------------------


@case(t(3))
def keys_view_after_insert(x):
    d = {"a": 1}
    k = d.keys()
    d["b"] = 2
    return x * len(k), list(k), "b" in k


@case(t(3))
def values_view_after_update(x):
    d = {"a": x}
    v = d.values()
    d["a"] = x * 2
    d["b"] = x * 3
    return sum(v), len(v)


@case(t(3))
def items_view_after_delete(x):
    d = {"a": x, "b": x + 1}
    it = d.items()
    del d["a"]
    return [k for k, _ in it], [v * 2 for _, v in it]


@case(t(3))
def keys_view_after_pop_and_clear(x):
    d = {"a": 1, "b": 2}
    k = d.keys()
    d.pop("a")
    n1 = len(k)
    d.clear()
    return x + n1, len(k)


@case(t(3))
def view_returned(x):
    d = {"a": x * 2}
    k, v, it = d.keys(), d.values(), d.items()
    d["b"] = x + 1
    return k, v, it


@case(t(3))
def keys_view_set_ops(x):
    d = {"a": 1, "b": 2}
    k = d.keys()
    d["c"] = 3
    return x * len(k & {"a", "c"}), sorted(k | {"z"}), k == {"a", "b", "c"}


@case(t(3))
def view_of_update_method(x):
    d = {"a": 1}
    k = d.keys()
    d.update(b=2, c=3)
    return x + len(k), tuple(k)


@case(t(3))
def view_setdefault(x):
    d = {}
    v = d.values()
    d.setdefault("a", x)
    d.setdefault("a", x * 5)
    return list(v)[0] * 2, len(v)


@case(t(3))
def view_in_loop_condition(x):
    d = {"n0": x}
    k = d.keys()
    i = 0
    while len(k) < 3:
        i += 1
        d[f"n{i}"] = x * i
    return sum(d.values()), list(k)


@case(t(3))
def ordered_dict_view_move_to_end(x):
    d = collections.OrderedDict(a=1, b=2)
    k = d.keys()
    d.move_to_end("a")
    return x + d["a"], list(k)


@case(t(3))
def items_view_len_and_bool(x):
    d = {}
    it = d.items()
    empty = bool(it)
    d["k"] = x
    return x * (2 if it else 3), empty, len(it)


@case(t(3))
def view_mapping_attr(x):
    d = {"a": x}
    v = d.values()
    d["a"] = x + 10
    return next(iter(v))


# --- fromkeys, defaultdict, OrderedDict -------------------------------------------------------

@case(t(3))
def dict_fromkeys(x):
    d = dict.fromkeys(["a", "b"], 1)
    d["a"] += 1
    return x * d["a"] + d["b"], list(d)


@case(t(3))
def dict_fromkeys_default_none(x):
    d = dict.fromkeys("ab")
    return x + len(d), d


@case(t(3))
def dict_fromkeys_shared_value(x):
    d = dict.fromkeys(["a", "b"], [])
    d["a"].append(1)
    return x + len(d["b"]), d["a"] is d["b"]


@case(t(3))
def defaultdict_fromkeys(x):
    e = collections.defaultdict.fromkeys(["c"], 2)
    return x * e["c"], type(e).__name__, e.default_factory


@case(t(3))
def ordered_dict_fromkeys(x):
    o = collections.OrderedDict.fromkeys(["z", "a"], 0)
    o["a"] += 1
    return x + o["a"], list(o)


@case(t(3))
def defaultdict_list(x):
    d = collections.defaultdict(list)
    for i in range(3):
        d[i % 2].append(x * i)
    return [sum(v) for v in d.values()], sorted(d)


@case(t(3))
def defaultdict_int_counts(x):
    d = collections.defaultdict(int)
    for w in "abca":
        d[w] += 1
    return x * d["a"], dict(d)


@case(t(3))
def defaultdict_returned(x):
    d = collections.defaultdict(lambda: 7)
    d["a"] = x
    return d["a"] * d["b"], d


@case(t(3))
def ordered_dict_popitem(x):
    o = collections.OrderedDict()
    o["a"] = x
    o["b"] = x * 2
    k, v = o.popitem(last=False)
    return v + o["b"], k, list(o)


# --- namedtuple / typing.NamedTuple -----------------------------------------------------------

Point = collections.namedtuple("Point", ["x", "y"], defaults=[5])
Full = collections.namedtuple("Full", "a b c", defaults=(1, 2))


class Pair(typing.NamedTuple):
    left: torch.Tensor
    scale: int = 4
    tag: str = "p"


@case(t(3))
def namedtuple_defaults(x):
    p = Point(x)
    return p.x + p.y, p


@case(t(3))
def namedtuple_all_defaults(x):
    f = Full(x)
    g = Full(x, c=7)
    return f.a * f.b + f.c, g.c, g._replace(b=9).b


@case(t(3))
def typing_namedtuple_defaults(x):
    p = Pair(x)
    return p.left * p.scale, p.tag, p


@case(t(3))
def typing_namedtuple_kwargs(x):
    p = Pair(left=x, tag="q")
    a, b, c = p
    return a + b, c, p._asdict()["tag"]


@case(t(3))
def namedtuple_fields_and_index(x):
    p = Point(x, 2)
    return p[0] * p[1], Point._fields, len(p)


@case(t(3))
def namedtuple_make(x):
    p = Point._make([x, 3])
    return p.x * p.y


# --- itertools ---------------------------------------------------------------------------------

@case(t(3))
def chain_from_iterable(x):
    return sum(itertools.chain.from_iterable([[x, x], [x * 2]]))


@case(t(3))
def chain_from_iterable_generator_of_lists(x):
    parts = [[x], [x + 1, x + 2]]
    return list(itertools.chain.from_iterable(p for p in parts))


@case(t(3))
def chain_two(x):
    return [y * 2 for y in itertools.chain([x], (x + 1,))]


@case(t(3))
def product_grid(x):
    return [x * i + j for i, j in itertools.product(range(2), range(2))]


@case(t(3))
def zip_longest_fill(x):
    return [a * b for a, b in itertools.zip_longest([x, x], [2], fillvalue=1)]


@case(t(3))
def accumulate_tensors(x):
    return list(itertools.accumulate([x, x * 2, x * 3]))


@case(t(3))
def accumulate_func(x):
    return list(itertools.accumulate([1, 2, 3], lambda a, b: a * b)), x + 1


@case(t(3))
def islice_of_list(x):
    return [y + 1 for y in itertools.islice([x, x * 2, x * 3], 1, None)]


@case(t(3))
def starmap_pairs(x):
    return list(itertools.starmap(lambda a, b: a * b, [(x, 2), (x, 3)]))


class Fields(collections.OrderedDict):
    """A dict subclass as library outputs are (ModelOutput is an OrderedDict subclass)."""


def _combine(a, b, scale=1):
    return a * scale + b


@case(t(3))
def double_star_of_dict_subclass(x):
    f = Fields(a=x, b=x + 1)
    return _combine(**f, scale=2)

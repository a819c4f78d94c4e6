"""Semantics cases, continued: more of the same families in other shapes — itertools beyond
the basics, views inside comprehensions, dataclass defaults and __post_init__, callable objects
as keys and reducers, finfo in masks of several dtypes, getattr defaults, string formatting of
config values, copies used as scratch space, grad-mode objects reused."""
import collections
import copy
import dataclasses
import enum
import functools
import itertools
import math
import operator

import torch

from compat_case import case, t


@case(t(3))
def pairwise_diffs(x):
    xs = [x, x * 2, x * 4]
    return [b - a for a, b in itertools.pairwise(xs)]


@case(t(3))
def combinations_sum(x):
    return sum(a * b for a, b in itertools.combinations([x, x + 1, x + 2], 2))


@case(t(3))
def permutations_count(x):
    return x * len(list(itertools.permutations(range(3), 2)))


@case(t(3))
def count_and_zip(x):
    return [x * i for i, _ in zip(itertools.count(1), range(3))]


@case(t(3))
def repeat_times(x):
    return sum(itertools.repeat(x, 3))


@case(t(3))
def compress_select(x):
    return list(itertools.compress([x, x * 2, x * 3], [1, 0, 1]))


@case(t(3))
def takewhile_dropwhile(x):
    a = list(itertools.takewhile(lambda n: n < 3, [1, 2, 5, 1]))
    b = list(itertools.dropwhile(lambda n: n < 3, [1, 2, 5, 1]))
    return x * sum(a) + sum(b)


@case(t(3))
def filterfalse_odd(x):
    return x * sum(itertools.filterfalse(lambda n: n % 2, range(6)))


@case(t(3))
def chain_from_iterable_of_dict_values(x):
    d = {"a": [x], "b": [x * 2, x * 3]}
    return list(itertools.chain.from_iterable(d.values()))


@case(t(3))
def keys_in_comprehension_after_write(x):
    d = {"a": x}
    k = d.keys()
    d["b"] = x + 1
    return {n: d[n] * 2 for n in k}


@case(t(3))
def items_sorted(x):
    d = {"b": x, "a": x * 2}
    it = d.items()
    d["c"] = x * 3
    return [v for _, v in sorted(it, key=operator.itemgetter(0))]


@case(t(3))
def values_max_len(x):
    d = {"a": [1], "b": [1, 2]}
    v = d.values()
    d["c"] = [1, 2, 3]
    return x * max(len(i) for i in v)


@dataclasses.dataclass
class Opt:
    lr: float = 0.1
    steps: int = 2
    tags: list = dataclasses.field(default_factory=list)

    def __post_init__(self):
        self.total = self.lr * self.steps


@case(t(3))
def dataclass_post_init(x):
    o = Opt(steps=4)
    return x * o.total, o.tags


@case(t(3))
def dataclass_default_factory(x):
    a, b = Opt(), Opt()
    a.tags.append(1)
    return x * len(a.tags) + len(b.tags)


@case(t(3))
def dataclass_is_dataclass(x):
    return x * dataclasses.is_dataclass(Opt()), dataclasses.is_dataclass(3)


class Flag(enum.Flag):
    A = 1
    B = 2


@case(t(3))
def enum_flag_or(x):
    f = Flag.A | Flag.B
    return x * (2 if Flag.B in f else 1)


class Doubler:
    def __call__(self, a, b):
        return a + b * 2


@case(t(3))
def callable_object_as_reducer(x):
    return functools.reduce(Doubler(), [x, x, x])


class ByLen:
    def __call__(self, s):
        return len(s)


@case(t(3))
def callable_object_as_sort_key(x):
    words = sorted(["ccc", "a", "bb"], key=ByLen())
    return x * len(words[0]), words


@case(t(4))
def finfo_mask_float16(x):
    m = torch.full((4,), torch.finfo(torch.float16).min)
    return torch.where(x > 0, x, m), torch.finfo(torch.float16).min


@case(t(4, dtype=torch.float64))
def finfo_eps_of_double(x):
    return (x + torch.finfo(x.dtype).eps).sum()


@case(t(4))
def finfo_min_in_softmax_mask(x):
    mask = torch.tensor([True, False, True, True])
    scores = x.masked_fill(~mask, torch.finfo(x.dtype).min)
    return scores.softmax(-1)


class Cfg:
    hidden = 4


@case(t(3))
def getattr_default_on_object(x):
    c = Cfg()
    return x * getattr(c, "missing", 3) + getattr(c, "hidden", 0), hasattr(c, "nope")


@case(t(3))
def str_format_of_config_values(x):
    s = "{hidden}-{act}".format(hidden=4, act="gelu")
    return x * len(s), s, f"{math.pi:.3f}"


@case(t(3))
def copy_list_as_scratch(x):
    base = [x, x * 2]
    work = copy.copy(base)
    work.reverse()
    return work[0] - base[0], len(base)


@case(t(3))
def deepcopy_dict_of_lists_then_mutate(x):
    plan = {"a": [1, 2], "b": [3]}
    p2 = copy.deepcopy(plan)
    p2["a"].append(10)
    return x * len(plan["a"]) + len(p2["a"]), plan


@case(t(3))
def deepcopy_keeps_shared_structure(x):
    inner = [1]
    outer = [inner, inner]
    o2 = copy.deepcopy(outer)
    return x + len(o2), o2[0] is o2[1], o2[0] is inner


@case(t(3))
def copy_ordered_dict(x):
    o = collections.OrderedDict(a=1, b=2)
    o2 = copy.copy(o)
    o2.move_to_end("a")
    return x * o2["a"], list(o), list(o2)


@case(t(3))
def copy_defaultdict(x):
    d = collections.defaultdict(int, a=2)
    d2 = copy.copy(d)
    d2["b"] += 1
    return x * d2["a"] + d2["b"], len(d), type(d2).__name__


_NO_GRAD = torch.no_grad()


@case(t(3, requires_grad=True))
def no_grad_object_reused(x):
    with _NO_GRAD:
        a = x * 2
    with _NO_GRAD:
        b = x * 3
    return a + b, (a + b).requires_grad


@case(t(3))
def dict_fromkeys_of_range(x):
    d = dict.fromkeys(range(3), 0)
    for i in d:
        d[i] = i * 2
    return x * sum(d.values()), d


P2 = collections.namedtuple("P2", "a b")


@case(t(3))
def namedtuple_replace_and_asdict(x):
    p = P2(x, 2)._replace(b=5)
    return p.a * p.b, p._asdict()["b"]


@case(t(3))
def reduce_operator_mul(x):
    return x * functools.reduce(operator.mul, [1, 2, 3, 4])


@case(t(3))
def islice_count_step(x):
    return [x * i for i in itertools.islice(itertools.count(0, 2), 3)]


@case(t(3))
def product_repeat(x):
    return x * len(list(itertools.product([0, 1], repeat=3)))


@case(t(3))
def zip_longest_three(x):
    return [a + b + c for a, b, c in itertools.zip_longest([x], [x, x], [1, 2], fillvalue=0)]


@case(t(3))
def fromkeys_then_update_views(x):
    d = dict.fromkeys(["a"], x)
    v = d.values()
    d.update(b=x * 2)
    return sum(v)


@case(t(3))
def defaultdict_fromkeys_missing_key_default(x):
    d = collections.defaultdict.fromkeys(["a"], 1)
    return x * d.get("zz", 4) + d["a"]


@case(t(2, 4))
def repeat_interleave_int_rotary(x):
    half = x[..., : x.shape[-1] // 2]
    return half.repeat_interleave(2, dim=-1) * x


@case(t(3))
def repeat_interleave_int_function(x):
    return torch.repeat_interleave(x, 2) + 1


import semantics_ops  # noqa: E402,F401  (registers pydynamo_semantics::scale_rows)


@case(t(3, 2))
def custom_op_with_python_kernel(x):
    return torch.ops.pydynamo_semantics.scale_rows(x, torch.tensor([1.0, 2.0, 3.0])) + 1

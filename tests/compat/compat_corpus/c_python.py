"""Compat cases: Python values around tensors — constants, containers, iterators, builtins,
operator and math, f-strings / str.format, comprehensions, loops (unrolled), branches on Python
values, slices and ranges. Each does real tensor work so every engine compiles a graph."""
import collections
import dataclasses
import functools
import itertools
import math
import operator

import torch

from compat_case import case, t

F64 = torch.float64


@case(t(3))
def constants(x):
    a, b, c, d = None, True, 3, 2.5
    z = complex(1, 2)
    s, by = "abc", b"xy"
    return x * c + d, a is None, b and c > 2, z.real + z.imag, s + "d", by + b"z", ... is Ellipsis


@case(t(3), 4, change=(t(3), 5))
def int_constant_arg(x, n):
    return x * n + n // 2


@case(t(3), 0.5, change=(t(3), 0.5))
def float_constant_arg(x, f):
    return x * 2 + 1


@case(t(3), "mul", changes=((t(3), "add"), (t(3), "mul")))
def str_constant_arg(x, mode):
    if mode == "mul":
        return x * 3
    return x + 3


@case(t(3), True, changes=((t(3), False), (t(3), True)))
def bool_constant_arg(x, flag):
    return x.relu() if flag else x.sigmoid()


@case(t(3), None, change=(t(3), t(3)))
def optional_tensor_arg(x, bias):
    if bias is None:
        return x * 2
    return x * 2 + bias


@case(t(4))
def tuple_ops(x):
    tup = (x, x * 2, 3)
    a, b, n = tup
    nums = (4, 3, 3)
    return tup[1:], a + b * n, len(tup), tup + (x,), nums.index(3), nums.count(3), nums < (5,)


@case(t(4))
def list_ops(x):
    lst = [1, 2, x]
    lst.append(x * 2)
    lst.extend([3, 4])
    lst.insert(0, 7)
    lst.pop()
    lst.remove(1)
    lst[2] = x + 10
    lst.reverse()
    return lst, lst[::2], len(lst), lst[-1] == 7


@case(t(4))
def list_sort_and_slices(x):
    nums = [5, 3, 9, 1]
    nums.sort()
    del nums[0]
    nums[1:2] = [7, 7]
    return x * sum(nums), sorted(nums, reverse=True), nums.copy() * 2


@case(t(3))
def dict_ops(x):
    d = {"a": x, "b": 2}
    d["c"] = x * 3
    d.update({"e": 5})
    v = d.get("z", 1) + d.pop("b")
    d.setdefault("f", 0)
    return d, v, list(d.keys()), [k for k, _ in d.items()], "c" in d, len(d)


@case(t(3))
def dict_iteration(x):
    d = {"w": 2.0, "u": 3.0}
    total = x
    for k, v in d.items():
        total = total + v * len(k)
    return total, tuple(d.values()), dict(zip(["p", "q"], [x, x + 1]))


@case(t(3))
def ordered_and_default_dict(x):
    od = collections.OrderedDict()
    od["b"] = x
    od["a"] = x * 2
    od.move_to_end("b")
    dd = collections.defaultdict(list)
    dd["k"].append(x)
    dd["k"].append(1)
    return list(od.values()), dd["k"][0] * 3, len(dd["missing"]), type(od) is collections.OrderedDict


@case(t(3))
def set_ops(x):
    s = {1, 2, 3}
    s.add(4)
    s.discard(1)
    f = frozenset([2, 3])
    return x * len(s), 2 in s, len(s | {9}), len(s & f), f.issubset(s), sorted(s - f)


P = collections.namedtuple("P", ["a", "b"])


@case(t(4))
def namedtuple_local(x):
    p = P(x, x * 2)
    return p.a + p.b, p[1], p._replace(a=x - 1).a


@case(t(6))
def slice_and_range(x):
    sl = slice(1, 5, 2)
    r = range(1, 10, 3)
    return x[sl], len(r), r[1], list(r), x[r[0]:r[1]], sl.start + sl.stop


@case(t(3))
def iter_next(x):
    it = iter([x, x * 2, x * 3])
    a = next(it)
    b = next(it)
    rest = list(it)
    return a + b, rest, next(iter([]), 7)


@case(t(3))
def enumerate_zip(x):
    out = x
    for i, (a, b) in enumerate(zip([1, 2, 3], [4, 5, 6]), start=1):
        out = out + i * a - b
    return out, list(zip("ab", [1, 2]))


@case(t(3))
def map_filter_reversed(x):
    vals = list(map(lambda v: v * 2, [1, 2, 3]))
    odd = list(filter(lambda v: v % 2, range(7)))
    return x * sum(vals) + sum(odd), list(reversed(vals)), [x * v for v in reversed(odd)][0]


@case(t(3))
def itertools_basics(x):
    pairs = list(itertools.product([1, 2], [3, 4]))
    ch = list(itertools.chain([1], [2, 3]))
    acc = list(itertools.accumulate([1, 2, 3]))
    comb = list(itertools.combinations(range(4), 2))
    return x * len(pairs) + sum(ch) + acc[-1], len(comb), list(itertools.islice(itertools.count(5), 3))


@case(t(3))
def zip_tensors(x):
    parts = [x, x * 2, x * 3]
    weights = [0.5, 0.25, 0.125]
    return sum(p * w for p, w in zip(parts, weights))


@case(t(3), t(3))
def builtins_numeric(x, y):
    n = [3, -1, 7]
    return (x * abs(-2) + min(n) + max(n), sum(n), round(2.567, 2), divmod(17, 5), pow(2, 5),
            max(x.shape[0], 2), min(1.5, 2), abs(y))


@case(t(3))
def builtins_bool_logic(x):
    vals = [1, 0, 2]
    return x * int(any(vals)) + int(all(vals)), bool([]), not vals, any(v > 1 for v in vals)


@case(t(3), 7)
def builtins_conversions(x, n):
    return x * float(n) + int("3") + int(2.7), str(n), bool(n), float("1.5"), tuple([1, 2]), list((3,))


@case(t(3))
def builtins_isinstance_type(x):
    items = [1, 2.0, "s", x, (1,), None]
    kinds = [type(v).__name__ for v in items]
    ok = isinstance(x, torch.Tensor) and isinstance(3, (int, float)) and issubclass(bool, int)
    return x * 2 if ok else x, kinds, type(x) is torch.Tensor, callable(len)


class Box:
    scale = 3


@case(t(3))
def builtins_getattr_hasattr(x):
    b = Box()
    setattr(b, "shift", 2)
    return x * getattr(b, "scale") + getattr(b, "shift", 0), hasattr(b, "nope"), getattr(b, "nope", 9)


@case(t(4))
def builtins_sorted_minmax_key(x):
    words = ["ccc", "a", "bb"]
    return (x * len(sorted(words, key=len)[0]), sorted(words), max(words, key=len),
            min([(2, "b"), (1, "z")]), sorted([3, 1, 2], reverse=True))


@case(t(3))
def builtins_len_shapes(x):
    return x * len(x) + len(x.shape) + len([1, 2]) + len({"a": 1}) + len("abc")


@case(t(3), t(3))
def operator_module(x, y):
    return (operator.add(x, y), operator.mul(x, 2), operator.neg(y), operator.getitem([1, 5], 1),
            operator.truediv(x, 2), operator.itemgetter(0)([x, y]), operator.attrgetter("shape")(x))


@case(t(3))
def math_module(x):
    c = math.sqrt(16) + math.floor(2.7) + math.ceil(0.2) + math.log(math.e) + math.pi
    return x * c, math.isclose(1.0, 1.0), math.gcd(12, 18), math.inf > 10, math.exp(0), math.prod([2, 3])


@case(t(3))
def int_float_arith(x):
    a, b = 7, 2
    return x * (a // b) + (a % b) + a / b - a ** b + (a << 1) + (a >> 1) + (a & b) + (a | b) + (a ^ b) + (~a)


@case(t(3))
def augmented_assign(x):
    y = x
    y += 1
    y *= 2
    n = 3
    n -= 1
    n **= 2
    s = "a"
    s += "b"
    return y / n, s


@case(t(3))
def chained_compare_ternary(x):
    n = 5
    ok = 1 < n <= 5
    v = "big" if n > 3 else "small"
    return x * (2 if ok else 3), v, 0 < n < 3


@case(t(3), 2)
def fstrings(x, n):
    name = f"layer_{n}"
    s = f"{n:03d}|{1.5:.2f}|{name!r}|{'x' * 2}"
    return x * len(s), s, "{}-{:>4}".format(n, "ab"), "%d items" % n, name.upper()


@case(t(3))
def str_methods(x):
    s = "Hello, World"
    parts = s.lower().split(", ")
    return (x * len(parts), "-".join(parts), s.startswith("He"), s.replace("l", "L"), s.find("W"),
            s.strip("Hd"), "ab" * 2, s[1:4], "ld" in s)


@case(t(3))
def str_dict_keys(x):
    names = ["fc1", "fc2"]
    d = {f"{n}.weight": i for i, n in enumerate(names)}
    return x * d["fc2.weight"], sorted(d)


@case(t(3))
def list_comprehension(x):
    return [x * i for i in range(3)], sum([i * i for i in range(4)])


@case(t(3))
def comprehension_with_filter(x):
    return torch.stack([x + i for i in range(6) if i % 2 == 0])


@case(t(3))
def dict_and_set_comprehension(x):
    d = {i: x * i for i in range(3)}
    s = {i % 2 for i in range(5)}
    return d[2] + d[1], sorted(s)


@case(t(3))
def nested_comprehension(x):
    grid = [[i * j for j in range(3)] for i in range(2)]
    return x * sum(sum(r) for r in grid), grid


@case(t(3))
def generator_expression_sum(x):
    return sum(x * i for i in range(4)), max(i * i for i in range(3)), tuple(i for i in "ab")


@case(t(3))
def comprehension_captures_local(x):
    scale = 3
    ys = [x * scale + k for k in (1, 2)]
    return ys[0] * ys[1]


@case(t(3))
def for_loop_unrolled(x):
    for i in range(4):
        x = x * 0.5 + i
    return x


@case(t(3))
def while_loop_python_counter(x):
    i = 0
    while i < 3:
        x = x.sin() + i
        i += 1
    return x, i


@case(t(3))
def loop_break_continue(x):
    acc = x
    for i in range(10):
        if i == 1:
            continue
        if i > 4:
            break
        acc = acc + i
    else:
        acc = acc * 100
    return acc


@case(t(3))
def nested_loops(x):
    out = x
    for i in range(2):
        for j in range(3):
            out = out + i * j
    return out


@case(t(3))
def loop_over_tensor_list(x):
    ts = [x, x + 1, x + 2]
    acc = torch.zeros_like(x)
    for tt in ts:
        acc += tt
    return acc


@case(t(4, 3))
def loop_over_tensor_rows(x):
    outs = []
    for row in x:
        outs.append(row.sum())
    return torch.stack(outs)


@case(t(3), 3, changes=((t(3), -1), (t(3), 3), (t(3), 0)))
def branch_on_int(x, n):
    if n > 0:
        return x * n
    elif n == 0:
        return x + 100  # distinct from every other branch, so a missing guard shows in the output
    return x - n


@case(t(2, 3), change=(t(4, 3),))
def branch_on_shape(x):
    if x.shape[0] > 3:
        return x.sum(0)
    return x.mean(0)


@case(t(3), change=(t(3, dtype=F64),))
def branch_on_dtype(x):
    if x.dtype == torch.float64:
        return x * 2
    return x + 2


@case(t(3), [1, 2], changes=((t(3), [1, 2, 3]), (t(3), [4, 2])))
def branch_on_list_len(x, lst):
    if len(lst) == 2:
        return x * lst[0]
    return x * lst[-1]


@case(t(3), {"scale": 2.0}, changes=((t(3), {"scale": 3.0}), (t(3), {"scale": 2.0, "shift": 0.5})))
def dict_arg(x, cfg):
    return x * cfg["scale"] + cfg.get("shift", 1.0)


@case((t(3), t(3)), [t(3), 2], change=((t(3), t(3)), [t(3), 2]))
def container_args(pair, lst):
    a, b = pair
    return a * b + lst[0] * lst[1]


@case(t(3), kwargs={"scale": 3, "shift": 1})
def keyword_call_args(x, scale=1, shift=0):
    return x * scale + shift


@case(t(3))
def unpacking(x):
    a, *rest = [x, 1, 2, 3]
    (b, c), d = (x * 2, 3), 4
    first, *_, last = range(5)
    return a + b * c + d + sum(rest) + first + last


@case(t(3))
def star_call(x):
    args = (x, 2)
    kwargs = {"alpha": 3}
    return torch.add(*args, **kwargs), max(*[1, 5, 3])


@case(t(3))
def walrus_and_conditional_expr(x):
    if (n := len(x.shape) + 2) > 2:
        x = x * n
    return x, n


@case(t(3))
def is_and_in_operators(x):
    lst = [1, 2]
    return x * (1 if x is not None else 2), 2 in lst, "a" not in "bc", None is None


@case(t(3))
def itertools_more(x):
    pw = list(itertools.pairwise([1, 2, 4]))
    kept = list(itertools.compress([x, x * 2, x * 3], [1, 0, 1]))
    tw = list(itertools.takewhile(lambda v: v < 3, [1, 2, 5, 1]))
    dw = list(itertools.dropwhile(lambda v: v < 3, [1, 2, 5, 1]))
    ff = list(itertools.filterfalse(None, [0, 1, 0, 2]))
    return sum(kept) + len(pw), pw, tw, dw, ff


@case(t(3), t(3))
def functools_reduce_partial(x, y):
    total = functools.reduce(operator.add, [x, y, x * y])
    prod = functools.reduce(lambda a, b: a * b, [2, 3], 1)
    scaled = functools.partial(torch.add, alpha=prod)
    return scaled(total, y), prod


@case(t(3), 4)
def bytes_and_format(x, n):
    tag = b"ab" + bytes(2)
    label = "{}-{:03d}-{:.2f}".format("n", n, 1.5) + f"{n:>4}|{len(tag)!r}"
    return x * len(label), label, tag


class Record(collections.OrderedDict):
    """Items are attributes too (the __setitem__ override writes both, through super())."""

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        super().__setattr__(k, v)

    def __setattr__(self, k, v):
        if k in self.keys():
            super().__setitem__(k, v)
        super().__setattr__(k, v)


@case(t(3))
def ordered_dict_subclass_with_super(x):
    r = Record()
    r["a"] = x + 1
    r.b = x * 2
    r.a = r.a * 3
    return r, r.b, list(r.keys()), len(r)


@dataclasses.dataclass
class ModelOut(collections.OrderedDict):
    """transformers' ModelOutput pattern: dataclass fields; fields that are not None are items."""
    logits: torch.Tensor = None
    hidden: torch.Tensor = None
    loss: torch.Tensor = None

    def __post_init__(self):
        for f in dataclasses.fields(self):
            v = getattr(self, f.name)
            if v is not None:
                self[f.name] = v

    def __setitem__(self, k, v):
        super().__setitem__(k, v)
        super().__setattr__(k, v)

    def update(self, *args, **kwargs):
        raise RuntimeError("ModelOutput forbids update()")

    def to_tuple(self):
        return tuple(self[k] for k in self.keys())


@case(t(3, 4))
def model_output_dataclass(x):
    out = ModelOut(logits=x @ x.t(), hidden=x.relu())
    first, *rest = out.to_tuple()
    return out, dict(out), first.sum() + len(rest), "loss" in out

"""Semantics cases: graph breaks at awkward places — at a method load (its NULL is decided at
run time), inside call arguments, inside no_grad blocks, after loads of values live only on the
stack. Both engines break at the same call (print), so graph counts match torch.compile's."""
import collections

import torch

from compat_case import case, t

P = collections.namedtuple("P", "a b", defaults=[1])


class Box:
    def __init__(self, v):
        self.v = v

    def get(self):
        return self.v


@case(t(3))
def break_in_call_argument(x):
    y = x + 1
    return torch.mul(y, len(str(print("arg")))) + x


@case(t(3))
def break_between_method_load_and_call(x):
    b = Box(2)
    return x * b.get() + len(str(print("m")))


@case(t(3))
def break_with_stack_values(x):
    a = x * 2
    return a + (x - 1) * (print("s") or 3)


@case(t(3, requires_grad=True))
def break_inside_no_grad(x):
    with torch.no_grad():
        y = x * 2
        print("in no_grad")
        z = y + 1
    return z, z.requires_grad, x * 3


@case(t(3))
def break_then_dict_view(x):
    d = {"a": x}
    k = d.keys()
    print("view")
    d["b"] = x * 2
    return list(k), sum(d.values())


@case(t(3))
def break_then_namedtuple(x):
    p = P(x)
    print("nt")
    return p.a + p.b


@case(t(3))
def two_breaks_keep_locals(x):
    a = x + 1
    print("one")
    b = a * 2
    print("two")
    return a + b


@case(t(3))
def break_inside_comprehension_arg(x):
    return sum([x * i for i in range(2)]) + (print("c") or 0)


@case(t(3))
def break_then_finfo(x):
    fi = torch.finfo(x.dtype)
    print("f")
    return x.clamp(min=fi.min) + fi.eps


@case(t(3))
def break_then_copy(x):
    import copy
    d = copy.copy({"k": x})
    print("copy")
    return d["k"] * 2

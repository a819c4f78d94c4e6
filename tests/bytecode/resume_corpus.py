"""Functions to split at every statement: loops, with/try blocks, closures, comprehensions.

Each entry of CASES is (function, list of argument tuples).  Side effects go to LOG."""
from __future__ import annotations

import sys

LOG: list = []


class Rec:
    """Context manager recording enter/exit; suppresses exceptions when asked."""

    def __init__(self, tag, suppress=False):
        self.tag, self.suppress = tag, suppress

    def __enter__(self):
        LOG.append(("enter", self.tag))
        return self

    def __exit__(self, et, ev, tb):
        LOG.append(("exit", self.tag, et.__name__ if et else None))
        return self.suppress


def branches(a, b=3):
    x = a * 2
    if x > b:
        y = x - b
    elif x == b:
        y = 0
    else:
        y = b - x
    LOG.append(y)
    return x + y


def loops(n):
    total = 0
    for i in range(n):
        if i % 3 == 0:
            continue
        for j in range(i):
            total += j
            if total > 40:
                break
        else:
            LOG.append(("inner-else", i))
    k = 0
    while k < n:
        k += 2
    else:
        LOG.append("while-else")
    return total, k


def try_blocks(a):
    out = []
    for d in (2, 1, 0, -1):
        try:
            out.append(a // d)
        except ZeroDivisionError as e:
            out.append(type(e).__name__)
            LOG.append(str(e))
        else:
            out.append("else")
        finally:
            LOG.append(("finally", d))
    try:
        try:
            if a > 5:
                raise KeyError(a)
            out.append("no-raise")
        finally:
            LOG.append("inner-finally")
    except KeyError:
        out.append("caught")
    return out


def with_blocks(a):
    acc = 0
    with Rec("outer") as r:
        acc += 1
        for i in range(a):
            with Rec(i):
                acc += i
                if i == 2:
                    LOG.append("two")
        with Rec("supp", suppress=True):
            acc += 100
            raise ValueError("swallowed")
        acc += 1000
    LOG.append(r.tag)
    return acc


def raising(a):
    LOG.append("start")
    if a > 2:
        LOG.append("big")
        raise ValueError(f"too big: {a}")
    with Rec("r"):
        LOG.append("in")
        b = 10 // (a - 1)
    return b


def closures(a):
    count = 0

    def bump(k):
        nonlocal count
        count += k
        return count
    bump(a)
    LOG.append(count)
    bump(2)
    total = bump(0) + a
    return total, count


def comprehensions(n):
    sq = [i * i for i in range(n)]
    ev = {i: v for i, v in enumerate(sq) if v % 2 == 0}
    s = sum(x for x in sq if x > 2)
    LOG.append(len(ev))
    pairs = [(i, j) for i in range(n) for j in range(i)]
    return sq, ev, s, len(pairs)


def calls(a, *rest, scale=2, **kw):
    def g(x, y=1, *, z=0):
        return x * y + z
    r = g(a,
          scale,
          z=len(rest))
    LOG.append(sorted(kw))
    r2 = "-".join(
        str(v) for v in rest)
    return r, r2, max(a,
                      scale)


def unbound_locals(a):
    if a > 1:
        y = a
    LOG.append("before")
    z = a + 1
    del z
    return y


def early_returns(a):
    for i in range(5):
        try:
            if i == a:
                return ("found", i)
        finally:
            LOG.append(("f", i))
    with Rec("ret"):
        if a < 0:
            return "negative"
    return "none"


def matching(v):
    match v:
        case [x, y]:
            r = x + y
        case {"k": k}:
            r = k
        case int(n) if n > 3:
            r = n * 10
        case _:
            r = None
    LOG.append(r)
    return r


def reraise(a):
    try:
        try:
            LOG.append(1 / a)
        except ZeroDivisionError:
            LOG.append("handling")
            raise
    except ZeroDivisionError as e:
        LOG.append(("outer", str(e)))
    try:
        raise KeyError(a)
    except KeyError:
        LOG.append(sys.exc_info()[0].__name__)
        LOG.append(repr(sys.exc_info()[1]))
    LOG.append(sys.exc_info())
    return "done"


def late_closure(a):
    x = a
    fns = []
    for i in range(3):
        x += i
        fns.append(lambda k=i: x * 10 + k)
    x = -1
    return [f() for f in fns]


class Base:
    def val(self, k):
        LOG.append(("base", k))
        return k * 2


class Child(Base):
    def val(self, k):
        t = k + 1
        LOG.append("child")
        r = super().val(t)
        return r + 1


CASES = [
    (branches, [(1,), (2, 4), (5,)]),
    (loops, [(0,), (7,)]),
    (try_blocks, [(3,), (9,)]),
    (with_blocks, [(0,), (4,)]),
    (raising, [(1,), (2,), (3,)]),
    (closures, [(1,), (5,)]),
    (comprehensions, [(0,), (6,)]),
    (calls, [(1,), (3, 4, 5), (2, 7, 8)]),
    (unbound_locals, [(0,), (4,)]),
    (early_returns, [(2,), (-1,), (9,)]),
    (matching, [([1, 2],), ({"k": 5},), (7,), ("x",)]),
    (reraise, [(0,), (2,)]),
    (late_closure, [(1,)]),
    (Child.val, [(Child(), 1), (Child(), 5)]),  # zero-argument super() reads the frame
]

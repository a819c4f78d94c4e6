"""Hypothesis strategy for small random functions: branches, for/while loops with
break/continue, try/except/else/finally, with-blocks (suppressing or not), comprehensions,
raises, early returns and maybe-unbound locals.  Only ints flow; side effects go to LOG."""
from __future__ import annotations

import textwrap

from hypothesis import strategies as st

EXPRS = [
    "a + b", "b * 2 - c", "t + 1", "(a - b) // (c - 2)", "sum([x * a for x in range(b % 4)])",
    "len({x: c for x in range(a % 3)})", "max(a, t)", "-c", "a % 7", "t * (b + 1)",
    "sum(x for x in range(c % 3))",
]
TARGETS = ["t", "a", "b", "c", "u"]


def _block(draw, depth: int, ctr: list) -> list[str]:
    n = draw(st.integers(1, 2))
    out: list[str] = []
    for _ in range(n):
        out += _stmt(draw, depth, ctr)
    return out


def _indent(lines: list[str]) -> list[str]:
    return ["    " + line for line in lines]


def _stmt(draw, depth: int, ctr: list) -> list[str]:
    simple = ["assign", "assign", "log", "log", "raise", "log_u"]
    compound = ["if", "for", "while", "try_except", "try_finally", "with", "return"]
    kind = draw(st.sampled_from(simple + (compound if depth < 2 else [])))
    e = lambda: draw(st.sampled_from(EXPRS))  # noqa: E731
    k = draw(st.integers(-3, 8))
    ctr[0] += 1
    tag = ctr[0]
    if kind == "assign":
        return [f"{draw(st.sampled_from(TARGETS))} = {e()}"]
    if kind == "log":
        return [f"LOG.append({e()})"]
    if kind == "log_u":
        return ["LOG.append(u)"]
    if kind == "raise":
        return [f"if a > {k}:", f"    raise ValueError({e()})"]
    if kind == "return":
        return [f"if t > {k}:", f"    return {e()}"]
    body = _block(draw, depth + 1, ctr)
    if kind == "if":
        other = _block(draw, depth + 1, ctr)
        return [f"if {e()} > {k}:", *_indent(body), "else:", *_indent(other)]
    if kind in ("for", "while"):
        ctl = draw(st.sampled_from(["", "break", "continue"]))
        extra = [f"if t % 3 == {tag % 3}:", f"    {ctl}"] if ctl else []
        if kind == "for":
            return [f"for i{tag} in range({abs(k) % 4}):", *_indent(extra + body)]
        return [f"w{tag} = 0", f"while w{tag} < {abs(k) % 4}:", f"    w{tag} += 1",
                *_indent(extra + body)]
    if kind == "try_except":
        handler = _block(draw, depth + 1, ctr)
        exc = draw(st.sampled_from(["ZeroDivisionError", "(ValueError, ZeroDivisionError)",
                                    "Exception"]))
        lines = ["try:", *_indent(body), f"except {exc} as e{tag}:",
                 f"    LOG.append(type(e{tag}).__name__)", *_indent(handler)]
        if draw(st.booleans()):
            lines += ["else:", *_indent(_block(draw, depth + 1, ctr))]
        return lines
    if kind == "try_finally":
        fin = _block(draw, depth + 1, ctr)
        return ["try:", *_indent(body), "finally:", *_indent(fin)]
    suppress = draw(st.booleans())
    return [f"with Rec({tag}, {suppress}):", *_indent(body)]


@st.composite
def programs(draw) -> str:
    ctr = [0]
    body = ["t = 0", *_block(draw, 0, ctr), *_block(draw, 0, ctr), "return (a, b, c, t)"]
    return "def f(a, b, c):\n" + textwrap.indent("\n".join(body), "    ") + "\n"


ARGS = [(1, 2, 3), (4, 4, 2), (9, 0, 5), (-2, 7, 2)]


def build(source: str, namespace: dict):
    exec(compile(source, "<generated>", "exec"), namespace)
    return namespace["f"]

"""Names of generated code in logs, and stack arguments of resume code read as the user's
expression (issue 21), also where the expression spans lines: a parenthesised expression
across lines, a call whose arguments span lines, a method chain across lines. The name comes
from the producing instruction's source positions (dis.Positions: lines and columns, Python
3.11+); one spread over lines is spelled on one line as the parser reads it. Guards in
explain() and in the `guards` log, and recompile reasons, use it; before, only a one-line
expression got a name and the others read L['___stack0']."""
import logging

import pytest
import torch

import pydynamo
from pydynamo import convert_frame


def item_in_expression(x, w):
    return x * 2 + torch.sigmoid(w).sum().item()


def parenthesised_across_lines(x, w):
    return (x *
            2) + torch.sigmoid(w).sum().item()


def call_across_lines(x, w):
    return torch.add(
        x,
        w,  # a comment the name leaves out
    ) + torch.sigmoid(
        w
    ).sum().item()


def method_chain_across_lines(x, w):
    return (
        x.sin()
         .cos()
    ) * w.sum().item()


CASES = [(item_in_expression, "(x * 2)"), (parenthesised_across_lines, "(x * 2)"), (call_across_lines, "torch.add(x, w)"),
         (method_chain_across_lines, "x.sin().cos()")]


@pytest.mark.parametrize("fn, expr", CASES)
def test_guards_name_a_multiline_expression(fn, expr):
    ex = pydynamo.explain(fn)(torch.ones(3), torch.ones(3))
    text = "\n".join(ex.guards)
    assert "___stack" not in text and f"TENSOR_MATCH: {expr} dtype=torch.float32" in text, text
    assert "EQUALS_MATCH: w.sum().item()" in text or "torch.sigmoid(w).sum().item()" in text, text


@pytest.mark.parametrize("fn, expr", CASES)
def test_recompile_reason_names_a_multiline_expression(fn, expr, capsys):
    c = pydynamo.optimize(fn, backend="eager")
    c(torch.ones(3), torch.ones(3))
    recorded = []
    convert_frame.RECORDERS.append(recorded.append)
    try:
        c(torch.ones(3, dtype=torch.float64), torch.ones(3))
    finally:
        convert_frame.RECORDERS.remove(recorded.append)
    why = "\n".join(str(r) for r in recorded if type(r).__name__ == "RecompileExplanation")
    assert f"{expr}.dtype: expected torch.float32, got torch.float64" in why and "___stack" not in why, why


def _guards_log(fn, *args) -> str:
    log = logging.getLogger("pydynamo.guards")
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    log.addHandler(handler)
    old = log.level
    log.setLevel(logging.DEBUG)
    try:
        pydynamo.optimize(fn, backend="eager")(*args)
    finally:
        log.removeHandler(handler)
        log.setLevel(old)
    return "\n".join(r.getMessage() for r in records)


def prints(x):
    y = x + 1
    print("in prints")
    return y * 2


def test_logs_name_resume_code_as_the_users_function(capsys):
    text = _guards_log(prints, torch.ones(3))
    assert "prints (resumed at" in text and "__resume_at" not in text, text


def test_guards_log_names_a_multiline_expression(capsys):
    text = _guards_log(call_across_lines, torch.ones(3), torch.ones(3))
    assert "torch.add(x, w) dtype" in text and "___stack" not in text, text


def test_one_line_expressions_keep_their_spelling():
    """A one-line expression reads as written (x*2 stays x*2; only a multi-line one is
    re-spelled by the parser); a call or attribute chain needs no parentheses."""
    def spelled(x, w):
        return x*2 + w.sum().item()

    ex = pydynamo.explain(spelled)(torch.ones(3), torch.ones(3))
    text = "\n".join(ex.guards)
    assert "TENSOR_MATCH: (x*2) dtype" in text and "EQUALS_MATCH: w.sum().item() 3.0" in text, text


@pydynamo.disable
def _refuses(y):
    raise ValueError("refused")


def sin_then_refuse(x, y):
    return x.sin() + _refuses(y)


@pytest.mark.xfail(strict=True, reason="resume/break code takes its stack values as parameters "
                   "___stack0, ... (bytecode/resume.py _build); a debugger's `args` and pytest's "
                   "argument listing show them (documented in docs/USER_GUIDE.md's differences)")
def test_break_code_parameters_read_as_the_users_expressions():
    """The break code of sin_then_refuse (the call of the disabled _refuses runs in CPython)
    holds x.sin(), _refuses and y on its stack; the frame the error passes through lists them
    as its arguments. Guards and recompile reasons already spell them as the user's expression
    (recompiles.user_names); the frame's own parameter names do not."""
    f = pydynamo.optimize(sin_then_refuse, backend="eager")
    with pytest.raises(ValueError) as info:
        f(torch.ones(2), torch.ones(2))
    tb, params = info.value.__traceback__, []
    while tb is not None:
        code = tb.tb_frame.f_code
        if code.co_name.startswith("sin_then_refuse"):
            params += code.co_varnames[:code.co_argcount]
        tb = tb.tb_next
    assert params and not any(p.startswith("___stack") for p in params), params

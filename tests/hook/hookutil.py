"""Helpers shared by the frame-hook tests."""
import os

from pydynamo import _C, eval_frame

HERE = os.path.dirname(os.path.abspath(__file__))


def is_test_code(code):
    """Codes of these test files; everything else a callback sees (contextlib, threading,
    pytest) is left alone."""
    return os.path.dirname(os.path.abspath(code.co_filename)) == HERE


def hooked(callback):
    """Context manager setting this thread's callback; eval_frame's own scope object, whose
    __enter__/__exit__ codes are marked skip, so a callback never sees them."""
    return eval_frame._optimize_with_callback(None, callback)


def only_tests(cb):
    """Wrap a callback so it only sees codes of these test files (others run as they are)."""
    def filtered(code, *rest):
        return cb(code, *rest) if is_test_code(code) else None
    return filtered


def with_const(fn, old, new):
    """`fn`'s code with the constant `old` replaced by `new`: a replacement whose effect shows."""
    consts = tuple(new if (type(c) is type(old) and c == old) else c for c in fn.__code__.co_consts)
    assert consts != fn.__code__.co_consts, "constant not found"
    return fn.__code__.replace(co_consts=consts)


class Recorder:
    """A compile-mode callback: for codes in `table` returns (guard, replacement), else None.
    Records every call for a test-file code as (code name, inputs dict, number of entries passed)."""

    def __init__(self, table=None, guard=None):
        self.table = dict(table or {})
        self.guard = guard or (lambda L: True)
        self.calls = []

    def __call__(self, code, inputs, globals_, builtins_, entries):
        if not is_test_code(code):
            return None
        self.calls.append((code.co_name, dict(inputs), len(entries)))
        if code in self.table:
            return (self.guard, self.table[code])
        return None

    def inputs(self, name):
        """Inputs of the first recorded call of the code named `name`."""
        return next(c[1] for c in self.calls if c[0] == name)

    def names(self):
        return [c[0] for c in self.calls]

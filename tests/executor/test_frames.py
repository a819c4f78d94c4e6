"""Frame shapes the replacement code must reproduce: *args/**kwargs/keyword-only, closures over
tensors, nonlocal counters (replayed into the real cell), generators (skipped), identity of
returned inputs and of an object returned twice."""
import warnings

import torch

import pydynamo


def test_varargs_kwonly_and_identity(cnt):
    def f1(x, *args, k=2, **kw):
        lst = [x * k]
        return lst, lst, args, kw, len(args)
    x = torch.randn(3)
    r = pydynamo.optimize(f1, backend=cnt)(x, 1, 2, k=3, z=4)
    assert r[0] is r[1]
    torch.testing.assert_close(r[0][0], x * 3)
    assert r[2:] == ((1, 2), {"z": 4}, 2)


def test_closure_over_tensor_and_nonlocal_counter(cnt):
    def make():
        s = torch.randn(3)

        def inner(x):
            return x * s + 5
        return inner, s
    inner, s = make()
    oi = pydynamo.optimize(inner, backend=cnt)
    x = torch.randn(3)
    for _ in range(2):
        torch.testing.assert_close(oi(x), x * s + 5)

    def counter():
        c = 0

        def bump(x):
            nonlocal c
            c += 1
            return x + c
        return bump
    ob = pydynamo.optimize(counter(), backend=cnt)
    for i in range(1, 4):
        torch.testing.assert_close(ob(x), x + i)


def test_generator_runs_eagerly_without_warning(cnt):
    def gen(x):
        yield x + 1
    x = torch.randn(3)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        torch.testing.assert_close(next(pydynamo.optimize(gen, backend=cnt)(x)), x + 1)
    assert cnt.count == 0


def test_returned_inputs_keep_identity(cnt):
    def f(x, y):
        y.mul_(2)
        return x, y
    a, b = torch.randn(2), torch.randn(2)
    b2 = b.clone()
    ra, rb = pydynamo.optimize(f, backend=cnt)(a, b)
    assert ra is a and rb is b
    torch.testing.assert_close(b, b2 * 2)


def test_break_inside_star_call_of_a_method(cnt):
    """A graph break at `obj.method(*args, **kwargs)` (CALL_FUNCTION_EX over a NULL slot) runs
    the call in CPython; its result then replaces the NULL slot. The continuation used to treat
    that slot as still NULL and called the result (transformers' logger.warning_once)."""
    class Log:
        def __init__(self):
            self.seen = []

        def warning(self, *a, **k):
            try:
                return {}[a[0]]  # raises inside the traced call: a graph break here
            except KeyError:
                self.seen.append((a, k))
                return torch.ones(1)  # a non-None result: calling it would fail differently

    def warn(log, *args, **kwargs):
        log.warning(*args, **kwargs)
        return log.warning(*args)

    def f(x, log):
        y = x + 1
        r = warn(log, "msg", 3, level=2)
        return y * 2 + r

    log, ref_log = Log(), Log()
    x = torch.randn(4)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = pydynamo.optimize(f, backend=cnt)(x, log)
    torch.testing.assert_close(out, f(x, ref_log))
    assert log.seen == ref_log.seen == [(("msg", 3), {"level": 2}), (("msg", 3), {})]
    assert cnt.count >= 1

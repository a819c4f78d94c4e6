"""Every opcode of the running interpreter has a handler for this version or an explicit
"unsupported" with a reason; every handler states the versions it serves."""
import dis
import sys

from pydynamo.executor import translator as T


def test_every_opcode_handled_or_explicitly_unsupported():
    missing, handled = T.coverage(sys.version_info)
    assert missing == [], f"opcodes with neither handler nor explicit 'unsupported': {missing}"
    assert len(handled) > 60


def test_handlers_state_their_versions():
    from pydynamo.versions import SUPPORTED_PYTHONS
    for name, hs in T.HANDLERS.items():
        seen = set()
        for h in hs:
            assert h.versions, name
            assert set(h.versions) <= set(SUPPORTED_PYTHONS), (name, h.versions)
            assert not seen & set(h.versions), f"{name}: two handlers for one version"
            seen |= set(h.versions)
            # each handler is a real opcode of at least one version it claims (no typos)
            if tuple(sys.version_info[:2]) in h.versions:
                assert name in dis.opmap, name


def test_every_supported_version_is_covered_by_the_registry():
    # no handler list names a version pydynamo does not support, and the running one has
    # exactly one handler per handled opcode
    version = tuple(sys.version_info[:2])
    for name, hs in T.HANDLERS.items():
        mine = [h for h in hs if version in h.versions]
        assert len(mine) <= 1, name
        if mine:
            assert T._ACTIVE[name] is mine[0].fn


def test_unsupported_have_reasons():
    for name, reason in T.UNSUPPORTED.items():
        assert reason and isinstance(reason, str), name


# --- opcodes whose form differs by version, traced on the running one -------------------------

import warnings  # noqa: E402

import torch  # noqa: E402

import pydynamo  # noqa: E402


def _run_both(cnt, fn, *argsets):
    opt = pydynamo.optimize(fn, backend=cnt)
    for args in argsets:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            got = opt(*args)
        torch.testing.assert_close(got, fn(*args))


def test_branch_on_tensor_truth_breaks_and_takes_the_right_side(cnt):
    # 3.13: POP_JUMP_IF_* takes only exact bools (TO_BOOL / COMPARE_OP(bool) convert first); the
    # executor decides the truth at the jump as on 3.11/3.12, and the break code converts the
    # handed-over tensor with TO_BOOL (without it a tensor reads as true: wrong on negative input)
    def by_truth(x):
        y = x * 2
        if (y > 0).all():
            return y + 1
        return y - 1

    def by_compare(x):
        y = x * 2
        if y.sum() > 0:
            return y + 1
        return y - 1

    def by_not(x):
        y = x + 1
        if not (y > 0).any():
            return y * 3
        return y * 5

    from pydynamo import convert_frame
    seen = []
    convert_frame.RECORDERS.append(seen.append)
    try:
        for fn in (by_truth, by_compare, by_not):
            pydynamo.reset()
            cnt.graphs.clear()
            seen.clear()
            _run_both(cnt, fn, (torch.ones(3),), (-torch.ones(3),))
            # the graph before the branch (once: the break is the same), then each side's graph
            assert cnt.count == 3, (fn.__name__, cnt.count)
            # each side resumes in its own function, as on 3.11/3.12: no translated code is
            # translated again for the other side (no recompile)
            codes = [r.code for r in seen if isinstance(r, convert_frame.FrameResult)]
            assert len(codes) == len(set(codes)) == 3, (fn.__name__, [c.co_name for c in codes])
    finally:
        convert_frame.RECORDERS.remove(seen.append)


def test_calls_closures_fstrings_and_swaps(cnt):
    class Box:
        def scale(self, t, *, k=1):
            return t * k

    def f(x, *args, **kw):
        a, b = x, x + 1
        a, b = b, a                                   # 3.13: LOAD_FAST_LOAD_FAST, STORE_FAST_STORE_FAST
        box = Box()
        r1 = box.scale(a, k=3)                        # CALL_KW on a method
        r2 = box.scale(*args, **kw)                   # CALL_FUNCTION_EX on a method
        n = 2

        def inner(t, m=n, *, z=1) -> int:             # SET_FUNCTION_ATTRIBUTE x4 on 3.13
            return t * m + z + n
        s = f"{n!r:>4}{n}"                           # CONVERT_VALUE, FORMAT_WITH_SPEC, FORMAT_SIMPLE
        return r1 + r2 + inner(b) + len(s) + sum(i for i in range(n))

    x = torch.randn(3)
    _run_both(cnt, f, (x, x), (x, x))
    assert cnt.count == 1

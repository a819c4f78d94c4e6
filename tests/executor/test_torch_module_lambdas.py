"""Regression (issue 14, OpInfo finding F1): a Python lambda or local helper whose `__module__` is
a torch module was put into the graph as a call_function target that FX spells as
`module.<name>`, which does not exist, so the graph's forward raised AttributeError under every
backend. Such functions are traced through as user functions now."""
import pytest
import torch

import pydynamo


def _torch_module_lambda():
    ns = {}
    exec(compile("where = lambda self, condition, other, **kw: torch.where(condition, self, other, **kw)",
                 __file__, "exec"), {"torch": torch}, ns)
    fn = ns["where"]
    fn.__module__ = "torch.testing._internal.common_methods_invocations"   # as OpInfo's lambdas
    return fn


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_lambda_from_a_torch_module_is_traced_through(backend):
    where = _torch_module_lambda()

    def g(x, c, y):
        return where(x, c, y) * 2

    torch.manual_seed(0)
    x, y = torch.randn(5), torch.randn(5)
    pydynamo.reset()
    got = pydynamo.optimize(g, backend=backend)(x, x > 0, y)
    torch.testing.assert_close(got, torch.where(x > 0, x, y) * 2)


@pytest.mark.parametrize("backend", ["eager", "codegen"])
def test_vf_builtin_named_like_a_python_wrapper_is_not_put_in_the_graph(backend):
    """OpInfo finding F4: `torch._VF.tensordot` calls itself `torch.tensordot`, which is
    torch.functional's Python wrapper with another signature; as a graph target FX printed that
    name and the graph raised TypeError. The call is a graph break now, with eager's result."""
    from torch import _VF

    def f(a, b, out):
        return _VF.tensordot(a, b, [1, 2], [0, 1], out=out) + 1

    torch.manual_seed(0)
    a, b = torch.randn(2, 3, 4), torch.randn(3, 4, 5)
    out_c, out_e = torch.empty(2, 5), torch.empty(2, 5)
    pydynamo.reset()
    got = pydynamo.optimize(f, backend=backend)(a, b, out_c)
    torch.testing.assert_close(got, f(a, b, out_e))
    torch.testing.assert_close(out_c, out_e)

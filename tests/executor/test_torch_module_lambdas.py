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

"""optimize(mode=...) reaches the codegen backend as its `mode` option, as torch.compile's does."""
import torch

import codegen
import pydynamo


def test_mode_reaches_codegen(monkeypatch):
    seen = []
    real = codegen.compile_fx

    def spy(gm, example_inputs, **options):
        seen.append(options.get("mode"))
        return real(gm, example_inputs, **options)

    monkeypatch.setattr(codegen, "compile_fx", spy)
    pydynamo.reset()

    def f(x):
        return torch.sin(x) * 2 + 1

    x = torch.randn(16)
    out = pydynamo.optimize(f, mode="reduce-overhead")(x)
    torch.testing.assert_close(out, f(x))
    assert seen == ["reduce-overhead"]
    pydynamo.reset()

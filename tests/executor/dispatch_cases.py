"""Pairs of tensors that differ only in dispatch keys (same class, dtype, device, shape, strides),
shared by test_guards.py and the torch.compile reference it runs in a subprocess:

    python tests/executor/dispatch_cases.py   # prints {case: graphs after call 2} under torch.compile
"""
import json

import torch


def _inference():
    with torch.inference_mode():
        return torch.randn(4)


def _neg_real():
    # a real tensor with the Negative key through public API: the imaginary part of a conjugate
    return torch.randn(4, dtype=torch.complex64).conj().imag


def _imag_real():
    return torch.randn(4, dtype=torch.complex64).imag  # same strides and offset, no Negative key


def _complex():
    return torch.randn(4, dtype=torch.complex64)


# name: (first input, second input)
CASES = {
    "normal_then_inference": (lambda: torch.randn(4), _inference),
    "inference_then_normal": (_inference, lambda: torch.randn(4)),
    "imag_then_neg_imag": (_imag_real, _neg_real),
    "neg_imag_then_imag": (_neg_real, _imag_real),
    "complex_then_conj": (_complex, lambda: _complex().conj()),
    "complex_then_neg": (_complex, lambda: torch._neg_view(_complex())),
    "normal_then_normal": (lambda: torch.randn(4), lambda: torch.randn(4)),
}


def fn(x):
    return x * 2 + 1


def run(compile_fn, reset) -> dict:
    """{case: (graphs after call 1, graphs after call 2, outputs equal eager)}"""
    out = {}
    for name, (first, second) in CASES.items():
        reset()
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        compiled = compile_fn(fn, backend)
        compiled(first())
        n1 = len(graphs)
        y = second()
        got = compiled(y)
        ok = torch.equal(got.resolve_conj().resolve_neg(), fn(y).resolve_conj().resolve_neg())
        out[name] = (n1, len(graphs), ok)
    return out


if __name__ == "__main__":
    import torch._dynamo
    print(json.dumps(run(lambda f, b: torch.compile(f, backend=b), torch._dynamo.reset)))

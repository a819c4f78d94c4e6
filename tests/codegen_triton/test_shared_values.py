"""What a value not yet computed costs when several consumers read it (codegen/graph.py):
  * a broadcast an extern takes (an attention bias expanded over the heads) is computed at its
    own size and handed over as eager's stride-0 view, not written out per head;
  * on the Triton path a cheap pointwise value with several readers, over one buffer (GELU's
    tanh), is recomputed in each reader's kernel instead of written and read back.
Values as eager's on random inputs; the wrapper's allocations say what was written."""
import re

import pytest
import torch
import torch.nn.functional as F

import codegen

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


def _compiled(fn, *args, kernels="triton"):
    gm = torch.fx.symbolic_trace(fn)
    call = codegen.compile_fx(gm, list(args), strict=True, backend_kernels=kernels)
    with open(call.wrapper_path) as f:
        return call, f.read()


def _value(out):
    return out[0] if isinstance(out, (tuple, list)) else out


def _allocations(wrapper, shape):
    return len(re.findall(r"_empty_\w+\(" + re.escape(f"{shape}"), wrapper))


@pytest.mark.parametrize("kernels", ["triton", "cpp"] if DEVICE == "cpu" else ["triton"])
def test_an_expanded_bias_reaches_the_extern_as_a_broadcast_view(kernels):
    torch.manual_seed(0)
    b, h, s, d = 2, 4, 16, 8
    q, k, v = (torch.randn(b, h, s, d, device=DEVICE) for _ in range(3))
    keep = torch.rand(b, 1, s, s, device=DEVICE) > 0.3
    keep[..., 0] = True

    def f(q, k, v, keep):
        bias = torch.where(keep, 0.0, -1e4) * 0.5
        return F.scaled_dot_product_attention(q, k, v, attn_mask=bias.expand(b, h, s, s))
    call, wrapper = _compiled(f, q, k, v, keep, kernels=kernels)
    torch.testing.assert_close(_value(call(q, k, v, keep)), f(q, k, v, keep), rtol=1e-5, atol=1e-5)
    assert _allocations(wrapper, (b, 1, s, s)) == 1, wrapper
    assert _allocations(wrapper, (b, h, s, s)) == 0, wrapper


def test_a_cheap_shared_value_is_recomputed_not_stored():
    torch.manual_seed(1)
    x, w = torch.randn(64, 32, device=DEVICE), torch.randn(32, 16, device=DEVICE)

    def f(x, w):
        t = torch.tanh(x * 0.79 + 0.04 * x * x * x)
        y = (0.5 * x * (t + 1)) @ w                 # GELU(tanh)'s output into a matmul
        return y.sum(1, keepdim=True) * (1 - t * t)  # and tanh read again after it
    call, wrapper = _compiled(f, x, w)
    torch.testing.assert_close(_value(call(x, w)), f(x, w), rtol=1e-5, atol=1e-5)
    # the matmul's operand only, the result written into its buffer once the matmul has read
    # it (the wrapper's pool, gemm_out_reuse): tanh is computed twice, never stored
    assert _allocations(wrapper, (64, 32)) == 1, wrapper
    assert len(re.findall(r"buf\d+ = buf\d+  # reuse", wrapper)) == 1, wrapper
    if DEVICE == "cpu":
        _, cpp = _compiled(f, x, w, kernels="cpp")
        # the C++ path stores it once: the operand and tanh allocated, the result written into
        # the operand's buffer once the matmul has read it (the wrapper's pool, gemm_out_reuse)
        assert _allocations(cpp, (64, 32)) == 2, cpp
        assert len(re.findall(r"buf\d+ = buf\d+  # reuse", cpp)) == 1, cpp


def test_a_broadcast_shared_value_is_stored_once():
    """A table read by larger readers (a rotary cos read by every head) is not recomputed per
    element it is spread over: one kernel computes it."""
    torch.manual_seed(2)
    x, p, w = (torch.randn(4, 16, 8, device=DEVICE), torch.randn(16, 8, device=DEVICE),
               torch.randn(8, 8, device=DEVICE))

    def f(x, p, w):
        c = torch.cos(p * 0.5) * 2
        return x * c, c @ w
    call, _ = _compiled(f, x, p, w)
    for a, b in zip(call(x, p, w), f(x, p, w)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    assert call.kernel_source.count("tl.cos(") == 1, call.kernel_source

"""The kernels a transformer block gets on the Triton path (CPU: TRITON_INTERPRET=1; GPU: real
kernels): LayerNorm as one kernel even when a view separates its statistics from the normalize,
matmul biases in the extern when the product is materialized anyway, attention fed by strided
views (no q/k/v or output copies), a boolean attention mask turned into a float mask once per
graph, eager's cheap special cases of pow, and torch.tensor factories without an extern call.
Each checks the kernel/extern structure and the values against eager on random inputs."""
import re

import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import codegen
from differential import assert_values_equal  # tests/differential.py: exact ints, dtype tolerances

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def compiled(fn, *args, **opts):
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    opts.setdefault("backend_kernels", "triton")
    return codegen.compile_fx(gm, list(args), strict=True, **opts), gm


def wrapper(c):
    with open(c.wrapper_path) as f:
        return f.read()


def extern_names(c):
    return re.findall(r"_externs\[\d+\]\(.*\)  # (\w+)", wrapper(c))


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


class ResidualNormMatmul(nn.Module):
    """GPT-2's pattern: residual add, LayerNorm over (batch, seq, hidden), then a flat view
    (tokens, hidden) into a matmul."""

    def __init__(self, h):
        super().__init__()
        self.ln = nn.LayerNorm(h)
        self.w = nn.Parameter(torch.randn(h, 3 * h) / h ** 0.5)

    def forward(self, x, y):
        h = x + y
        return torch.mm(self.ln(h).view(-1, h.shape[-1]), self.w), h


@pytest.mark.parametrize("backend", ["triton", "cpp"])
@pytest.mark.parametrize("hidden", [64, 300])
def test_layer_norm_through_a_view_is_one_kernel(backend, hidden):
    if backend == "cpp" and DEV == "cuda":
        pytest.skip("the C++ backend runs CPU tensors")
    m = ResidualNormMatmul(hidden).to(DEV)
    x, y = torch.randn(2, 16, hidden, device=DEV), torch.randn(2, 16, hidden, device=DEV)
    with torch.no_grad():
        c, _ = compiled(m, x, y, backend_kernels=backend)
        assert_values_equal(c(x, y), m(x, y), rtol=1e-4, atol=1e-4)
    assert c.kernel_count == 1            # statistics, normalize and the residual sum together
    assert extern_names(c) == ["mm"]


def test_layer_norm_view_split_is_still_correct():
    """A normalize whose view splits the statistics' rows cannot share their loop: two
    kernels, still exact."""
    class Split(nn.Module):
        def __init__(self):
            super().__init__()
            self.ln = nn.LayerNorm(32)

        def forward(self, x):
            return self.ln(x).view(2, 3, 32) * 2
    m = Split().to(DEV)
    x = torch.randn(6, 32, device=DEV)
    with torch.no_grad():
        c, _ = compiled(m, x)
        assert_values_equal(c(x), m(x), rtol=1e-5, atol=1e-5)


class Conv1D(nn.Module):
    """transformers' Conv1D: addmm(bias, x, w)."""

    def __init__(self, i, o):
        super().__init__()
        self.weight = nn.Parameter(torch.randn(i, o) / i ** 0.5)
        self.bias = nn.Parameter(torch.randn(o))

    def forward(self, x):
        out = torch.addmm(self.bias, x.view(-1, x.shape[-1]), self.weight)
        return out.view(x.shape[:-1] + (self.weight.shape[-1],))


class Attention(nn.Module):
    def __init__(self, h=64, heads=4):
        super().__init__()
        self.heads, self.h = heads, h
        self.c_attn, self.c_proj = Conv1D(h, 3 * h), Conv1D(h, h)

    def forward(self, x, mask=None):
        b, s, _ = x.shape
        q, k, v = self.c_attn(x).split(self.h, dim=2)
        q, k, v = (t.view(b, s, self.heads, -1).transpose(1, 2) for t in (q, k, v))
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, is_causal=mask is None)
        return self.c_proj(o.transpose(1, 2).contiguous().view(b, s, self.h))


class MLP(nn.Module):
    def __init__(self, h=64):
        super().__init__()
        self.c_fc, self.c_proj = Conv1D(h, 4 * h), Conv1D(4 * h, h)

    def forward(self, x):
        a = self.c_fc(x)
        return self.c_proj(0.5 * a * (1.0 + torch.tanh(0.79788456 * (a + 0.044715 * torch.pow(a, 3.0)))))


class Causal(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attention()

    def forward(self, x):
        return x + self.attn(x)


def test_attention_takes_strided_views_and_bias_goes_to_cublas():
    m = Causal().to(DEV)
    x = torch.randn(2, 16, 64, device=DEV)
    with torch.no_grad():
        c, _ = compiled(m, x)
        assert_values_equal(c(x), m(x), rtol=1e-4, atol=1e-4)
    # q, k, v are views of c_attn's biased product (bias added by the extern addmm); the
    # attention output's transpose back to (tokens, hidden) is a view into c_proj's matmul;
    # c_proj's bias fuses with the residual add, the one kernel
    assert extern_names(c) == ["addmm", "scaled_dot_product_attention", "mm"]
    assert c.kernel_count == 1
    assert re.search(r"_externs\[1\]\(torch\.as_strided\(", wrapper(c))


def test_mlp_bias_and_gelu_fuse_into_one_kernel():
    m = MLP().to(DEV)
    x = torch.randn(2, 16, 64, device=DEV) * 2
    with torch.no_grad():
        c, _ = compiled(m, x)
        assert_values_equal(c(x), m(x), rtol=1e-4, atol=1e-4)
    # every consumer of c_fc is a kernel: mm, then bias + GELU in one kernel (no
    # libdevice.pow); c_proj's product is the graph's output: its bias goes to the extern
    assert extern_names(c) == ["mm", "addmm"]
    assert c.kernel_count == 1 and "libdevice.pow" not in c.kernel_source


def test_bool_attention_mask_becomes_one_float_mask_for_all_layers():
    class Layers(nn.Module):
        def __init__(self):
            super().__init__()
            self.layers = nn.ModuleList([Attention() for _ in range(3)])

        def forward(self, x, keep):
            mask = keep[:, None, None, :] & torch.ones(16, 16, dtype=torch.bool, device=DEV).tril()
            for layer in self.layers:
                x = x + layer(x, mask)
            return x
    m = Layers().to(DEV)
    x = torch.randn(2, 16, 64, device=DEV)
    keep = torch.rand(2, 16, device=DEV) > 0.3
    keep[:, 0] = True                      # every query attends to at least one key
    with torch.no_grad():
        c, _ = compiled(m, x, keep)
        assert_values_equal(c(x, keep), m(x, keep), rtol=1e-4, atol=1e-4)
    src = c.kernel_source
    assert src.count('float("-inf")') == 1      # one conversion kernel, shared by 3 layers
    masks = re.findall(r"attn_mask=(\w+)", wrapper(c))
    assert len(masks) == 3 and len(set(masks)) == 1


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_pow_by_small_constants_matches_eager(dtype):
    x = torch.randn(1000, device=DEV, dtype=dtype) * 3
    x[:4] = torch.tensor([0.0, -0.0, 1.0, -2.0])

    def f(x):
        a = x.abs() + 0.1
        return (x ** 2, x ** 3, torch.pow(a, 0.5), a ** -0.5, x ** -1, x ** -2, x ** 2.5,
                torch.pow(x, 4))
    c, gm = compiled(f, x)
    tol = dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=2e-2, atol=2e-2)
    assert_values_equal(c(x), gm(x), **tol)
    assert c.kernel_source.count("libdevice.pow") == 2      # 2.5 and 4 only


def test_tensor_factories_need_no_extern():
    def f(x):
        empty = torch.tensor([], dtype=torch.float32, device=DEV)
        return torch.cat([empty.view(0, 8), x]) * torch.tensor(2.5, device=DEV), empty
    x = torch.randn(3, 8, device=DEV)
    c, gm = compiled(f, x)
    out, ref = c(x), gm(x)
    assert_values_equal(out, ref)
    assert out[1].shape == (0,) and out[1].dtype == x.dtype and out[1].device == x.device
    assert extern_names(c) == [] and c.stats.extern_nodes == 0


def test_pointwise_kernel_writes_in_place_into_a_dying_matmul_result():
    w = torch.randn(64, 256, device=DEV)

    class M(nn.Module):
        def forward(self, x, y):
            a = torch.mm(x, w)
            h = torch.mm(torch.tanh(a) * 2, w.t())        # elementwise on a: in place
            b = torch.mm(x, w)
            t = b.t().contiguous() + 1                     # transposed read of b: not in place
            return h, t, y * 3                             # y is the caller's: never written
    m = M()
    x, y = torch.randn(32, 64, device=DEV), torch.randn(32, 64, device=DEV)
    y0 = y.clone()
    c, _ = compiled(m, x, y)
    for _ in range(2):
        assert_values_equal(c(x, y), m(x, y), rtol=1e-4, atol=1e-4)
    assert_values_equal(y, y0, rtol=0, atol=0)
    places = re.findall(r"(\w+) = (\w+)  # in place", wrapper(c))
    assert len(places) == 1, wrapper(c)


def test_attention_output_layout_is_the_devices_own():
    """Meta tensors say SDPA returns a contiguous tensor; the device's kernel may not (CUDA's
    memory-efficient attention, CPU's flash attention with strided q). The compiled layout is
    the real one, so the result is used as it is: no copy to a guessed layout."""
    m = Causal().to(DEV)
    x = torch.randn(2, 16, 64, device=DEV)
    with torch.no_grad():
        c, _ = compiled(m, x)
        assert_values_equal(c(x), m(x), rtol=1e-4, atol=1e-4)
        q, k, v = m.attn.c_attn(x).split(64, dim=2)
        q, k, v = (t.view(2, 16, 4, -1).transpose(1, 2) for t in (q, k, v))
        real = F.scaled_dot_product_attention(q, k.contiguous(), v.contiguous(), is_causal=True)
    compiled_stride = re.search(r"_ensure\(_r1, \([^)]*\), \(([^)]*)\)", wrapper(c)).group(1)
    assert tuple(int(s) for s in compiled_stride.split(",")) == real.stride()


def test_attention_mask_of_odd_length_reaches_the_kernel_in_aligned_rows():
    """A float mask handed to fused attention has rows aligned to 16 elements (codegen/
    decompositions.py aligned_bias): the mask of a key length of 23 (a static-cache decode step) is written
    into 32-wide rows and passed as a view of them; values equal eager's."""
    def f(q, k, v, keep):
        mask = keep[:, None, None, :] & torch.ones(5, 23, dtype=torch.bool, device=DEV).tril(18)
        return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    q = torch.randn(2, 4, 5, 8, device=DEV)
    k, v = torch.randn(2, 4, 23, 8, device=DEV), torch.randn(2, 4, 23, 8, device=DEV)
    keep = torch.rand(2, 23, device=DEV) > 0.3
    keep[:, 0] = True
    c, gm = compiled(f, q, k, v, keep)
    assert_values_equal(c(q, k, v, keep), f(q, k, v, keep), rtol=1e-4, atol=1e-4)
    (size, stride), = re.findall(r"attn_mask=torch\.as_strided\(\w+, \(([\d, ]+)\), \(([\d, ]+)\)",
                                 wrapper(c))
    assert size == "2, 1, 5, 23"
    assert all(int(s) % 16 == 0 for s in stride.split(", ")[:-1]), stride

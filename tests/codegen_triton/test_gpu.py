"""GPU-only checks of the Triton path and CUDA-graph replay (skipped without CUDA; they run on
the H100 through the device tool: benchmarks/gpu/run_all.sh).

OpInfo subset in float32 and bfloat16, half-precision reductions with fp32 accumulation,
externs through cuBLAS, CUDA-graph replay, stale outputs never read (raising or copied out;
tests/operating/test_cudagraph_outputs.py has the rest), input address changes, parameters
read in place, in-place input mutation and an uncapturable graph launching plainly.
"""
import pytest
import torch
import torch.fx
import torch.nn as nn
import torch.nn.functional as F

import codegen
from differential import assert_values_equal  # tests/differential.py: exact ints, dtype tolerances

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(),
                                reason="needs a CUDA GPU (device tool: benchmarks/gpu/run_all.sh)")

OPS = ["add", "div", "exp", "log1p", "sigmoid", "tanh", "erf", "rsqrt", "clamp", "where",
       "maximum", "pow", "sum", "amax", "argmax", "var", "prod", "softmax", "logsumexp",
       "nn.functional.gelu", "nn.functional.layer_norm", "cat", "index_select", "masked_fill",
       "atan2", "remainder", "floor_divide", "lgamma", "round"]


def compiled(fn, *args, **opts):
    gm = fn if isinstance(fn, torch.fx.GraphModule) else torch.fx.symbolic_trace(fn)
    return codegen.compile_fx(gm, list(args), strict=True, **opts), gm


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("name", OPS)
def test_opinfo_gpu(name, dtype):
    from tests.codegen_triton import gpu_opinfo
    torch.manual_seed(0)
    r = gpu_opinfo.run(name, dtype, max_samples=4)
    if r.samples == 0:
        pytest.skip(f"no {dtype} sample of {name} runs eagerly on CUDA: {r.error}")
    assert not r.wrong, r.wrong[:3]


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16])
@pytest.mark.parametrize("shape", [(64, 100), (8, 5000), (3, 20000)])    # persistent and looped
def test_norms_match_eager(dtype, shape):
    x = torch.randn(*shape, device="cuda", dtype=dtype)
    w = torch.randn(shape[-1], device="cuda", dtype=dtype)
    b = torch.randn(shape[-1], device="cuda", dtype=dtype)

    def f(x, w, b):
        return torch.softmax(x, -1), F.layer_norm(x, (shape[-1],), w, b), x.float().var(-1)
    c, gm = compiled(f, x, w, b)
    tol = 1e-4 if dtype == torch.float32 else 2e-2
    assert_values_equal(c(x, w, b), gm(x, w, b), rtol=tol, atol=tol)
    assert c.kernel_count <= 4


def test_extern_matmul_and_fused_epilogue():
    x, w, b = (torch.randn(64, 128, device="cuda"), torch.randn(256, 128, device="cuda"),
               torch.randn(256, device="cuda"))
    c, gm = compiled(lambda x, w, b: F.gelu(F.linear(x, w, b)) * 2, x, w, b)
    assert_values_equal(c(x, w, b), gm(x, w, b), rtol=1e-3, atol=1e-3)
    assert c.stats.externs == 1 and c.kernel_count == 1


def _tiny(x, y):
    a = torch.sin(x) * y + 1
    return torch.softmax(a, -1) + a.mean(0), a.relu()


def test_cudagraph_replay_matches_eager():
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    c, gm = compiled(_tiny, x, y, cudagraphs=True)
    for _ in range(4):
        x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
        assert_values_equal(c(x, y), gm(x, y))
    # fresh tensors each call: the warm-up call's addresses differ, so one capture copies
    # both arguments into static buffers and serves every later call
    assert c.cg_stats["captures"] == 1 and c.cg_stats["replays"] == 3


def test_stale_output_is_never_read():
    """An output held across a later replay raises when read (the default, as torch.compile's
    reduce-overhead) or keeps its values (cudagraph_outputs="copy_held"); never stale values."""
    x = torch.randn(64, 64, device="cuda")
    for outputs in ("static", "copy_held"):
        c, gm = compiled(lambda x: x * 2 + 1, x, cudagraphs=True, cudagraph_outputs=outputs)
        c(x)
        first = c(x)
        keep = first.clone()
        x.mul_(3)                   # same address, new contents: the next call replays
        assert_values_equal(c(x), gm(x))
        assert c.cg_stats["replays"] == 2
        if outputs == "static" and codegen.cudagraphs.Device.invalidate is not None:
            with pytest.raises(RuntimeError, match="clone"):
                first.sum().item()
        else:
            assert_values_equal(first, keep)


def test_same_address_new_contents_and_address_change():
    x = torch.randn(32, 32, device="cuda")
    c, gm = compiled(lambda x: x.exp() - 1, x, cudagraphs=True)
    for _ in range(2):
        c(x)
    x.mul_(3)                                    # same address, new contents
    assert_values_equal(c(x), gm(x))
    assert c.cg_stats["input_copies"] == 0       # read in place, never copied
    z = torch.randn(32, 32, device="cuda")       # another address: runs plainly once
    assert_values_equal(c(z), gm(z))
    assert c.cg_stats["captures"] == 1 and c.cg_stats["plain_calls"] == 2
    x2 = torch.randn(32, 32, device="cuda")      # moved again: a capture that copies it
    assert_values_equal(c(x2), gm(x2))
    assert c.cg_stats["captures"] == 2
    assert_values_equal(c(x), gm(x))     # back at the first address: no copy
    assert c.cg_stats["input_copies"] == 0
    x3 = torch.randn(32, 32, device="cuda")
    assert_values_equal(c(x3), gm(x3))   # the copied capture
    assert c.cg_stats["input_copies"] == 1 and c.cg_stats["captures"] == 2


def test_parameters_in_place_and_input_mutation():
    m = nn.Linear(16, 16).cuda()
    c, gm = compiled(torch.fx.symbolic_trace(m), torch.randn(4, 16, device="cuda"),
                     cudagraphs=True)
    x = torch.randn(4, 16, device="cuda")
    with torch.no_grad():
        for _ in range(3):
            c(x)
        m.weight.mul_(0.5)                       # parameter updated in place: seen by replay
        assert_values_equal(c(x), m(x))

    def f(a, b):
        a.add_(b)
        return a * 2
    a, b = torch.randn(8, device="cuda"), torch.randn(8, device="cuda")
    c2, gm2 = compiled(f, a.clone(), b, cudagraphs=True)
    for _ in range(3):
        a1, a2 = a.clone(), a.clone()
        assert_values_equal(c2(a1, b), gm2(a2, b))
        assert_values_equal(a1, a2)       # the caller's tensor was written back


def test_uncapturable_graph_launches_plainly():
    x = torch.randn(100, device="cuda")
    c, gm = compiled(lambda x: torch.nonzero(x > 0).sum() + x.sum(), x, cudagraphs=True)
    before = codegen.counters["cudagraph_plain_launch"]
    for _ in range(3):
        assert_values_equal(c(x), gm(x))
    assert codegen.counters["cudagraph_plain_launch"] == before + 1


def test_index_out_of_range_never_reads_stray_memory():
    w = torch.randn(10, 4, device="cuda")
    idx = torch.tensor([1, 3, 9], device="cuda")
    c, gm = compiled(lambda i, w: F.embedding(i, w) * 2, idx, w)
    assert_values_equal(c(idx, w), gm(idx, w))


def test_max_autotune_matches_eager():
    x = torch.randn(300, 5000, device="cuda")
    c, gm = compiled(lambda x: (torch.softmax(x, -1), torch.sigmoid(x) * 3), x, mode="max-autotune")
    assert_values_equal(c(x), gm(x), rtol=1e-4, atol=1e-4)
    assert "triton.autotune" in c.kernel_source


def test_max_autotune_kernels_that_write_what_they_read_run_once():
    """Regression (session 20): the autotuner launches a kernel once per config before the real
    launch, and a kernel writing memory it reads applied its update once per launch: sin of a
    product computed in the product's buffer (in place), an input's write-back (x.mul_(2)
    scaled x five times), relu(x @ w.t() + r) in bf16 2046 off. Now what a kernel writes is
    restored after each autotuning run."""
    x = torch.randn(64, 5000, device="cuda")
    w = torch.randn(5000, 5000, device="cuda") / 70

    def f(x, w):
        return torch.sin(x @ w.t()) * 2 + 1

    c, gm = compiled(f, x, w, mode="max-autotune")
    assert "restore_value" in c.kernel_source and "triton.autotune" in c.kernel_source
    assert_values_equal(c(x, w), gm(x, w), rtol=1e-4, atol=1e-4)

    def g(x):
        x.mul_(2)
        return x.sin()

    y, want = torch.randn(8, 4096, device="cuda"), None
    want_x = y * 2
    c, gm = compiled(g, y.clone(), mode="max-autotune")
    got = c(y)
    assert_values_equal(y, want_x)
    assert_values_equal(got, want_x.sin(), rtol=1e-5, atol=1e-5)


def test_dynamic_dim_on_gpu():
    def f(x, y):
        return torch.softmax(x * 2, -1) + x.sum(-1, keepdim=True) + y, (x.t() * 3).amax(0)
    y = torch.randn(16, device="cuda")
    c, gm = compiled(f, torch.randn(5, 16, device="cuda"), y, dynamic={0: [0]})
    before = codegen.counters["input_mismatch_calls"]
    plain = codegen.counters["cudagraph_plain_launch"]
    cg, _ = compiled(f, torch.randn(5, 16, device="cuda"), y, dynamic={0: [0]}, cudagraphs=True)
    # size symbols: a capture per concrete size (bucket), not plain launches
    assert codegen.counters["cudagraph_plain_launch"] == plain and cg.matches is None
    for n in (5, 9, 3000):
        x = torch.randn(n, 16, device="cuda")
        assert_values_equal(c(x, y), gm(x, y))
        for _ in range(3):
            assert_values_equal(cg(x, y), gm(x, y))
    assert codegen.counters["input_mismatch_calls"] == before
    assert len(cg.entries) == 3 and cg.cg_stats["captures"] == 3


def test_int64_indexing_past_2_31_elements():
    n = 2 ** 31 + 1000
    x = torch.ones(n, dtype=torch.int8, device="cuda")
    x[-7:] = 5
    c, gm = compiled(lambda x: x * 3 + 1, x)
    out = c(x)
    assert "to(tl.int64)" in c.kernel_source
    assert out[-7:].tolist() == [16] * 7 and out[:3].tolist() == [4] * 3
    del out, x
    torch.cuda.empty_cache()


def _launchers(c):
    from codegen.triton_launch import TritonLauncher
    found = [TritonLauncher.of(v) for v in c.__globals__.values()]
    return [lt for lt in found if lt is not None]


def test_direct_launch_reuses_the_compiled_kernel_only_where_triton_would():
    from codegen.triton_launch import fast_launch_available
    x, b = torch.randn(4100, device="cuda"), torch.randn(4096, device="cuda")

    def f(a, b):
        return torch.sin(a) * 2 + b
    c, gm = compiled(f, x[:4096], b)
    ls = _launchers(c)
    assert len(ls) == 1 and ls[0].fast == fast_launch_available(ls[0].fn)
    for a in (x[:4096], x[:4096], x[4:], x[1:4097], x[1:4097], x[:4096]):
        assert_values_equal(c(a, b), gm(a, b))    # x[1:]: misaligned, another kernel
    if ls[0].fast:
        assert len(ls[0].compiled) == 2


def test_cudagraph_runner_picks_its_capture_with_the_entry_checks():
    x, y = torch.randn(64, 64, device="cuda"), torch.randn(64, 64, device="cuda")
    c, gm = compiled(_tiny, x, y, cudagraphs=True)
    assert c.matches is not None               # no size symbols: one valid shape set
    for _ in range(3):
        assert_values_equal(c(x, y), gm(x, y))
    xd, yd = x.double(), y.double()            # fails the entry checks: runs eagerly
    assert_values_equal(c(xd, yd), gm(xd, yd))
    assert list(c.entries) == ["static"] and c.cg_stats["replays"] >= 1


def test_decode_mask_of_odd_length_is_captured():
    """A static-cache decode step (the cache written in place, a mask over 23 keys) in float32
    under reduce-overhead: its graph is recorded at the dispatcher, where the memory-efficient
    attention's bias must have rows aligned to 16 elements. Codegen wrote the mask dense (rows
    of 23) and the CUDA-graph capture failed ("attn_bias is not correctly aligned"): every decode
    step launched plainly (session 17, Llama fp32 batch 8). codegen/decompositions.py aligned_bias."""
    import pydynamo

    def step(cache, pos, k, q, keep):
        cache.index_copy_(2, pos, k)
        mask = keep[:, None, None, :]
        return F.scaled_dot_product_attention(q, cache, cache, attn_mask=mask)

    def args(seed):
        g = torch.Generator(device="cuda").manual_seed(seed)
        keep = torch.rand(8, 23, device="cuda", generator=g) > 0.3
        keep[:, 0] = True
        return (torch.randn(8, 4, 23, 16, device="cuda", generator=g),
                torch.tensor([seed % 23], device="cuda"),
                torch.randn(8, 4, 1, 16, device="cuda", generator=g),
                torch.randn(8, 4, 1, 16, device="cuda", generator=g), keep)
    pydynamo.reset()
    f = pydynamo.optimize(step, backend="codegen", mode="reduce-overhead")
    captures = codegen.counters["cudagraph_captures"]
    plain = codegen.counters["cudagraph_plain_launch"]
    for seed in range(5):
        a, b = args(seed), args(seed)
        out = f(*a).clone()
        assert_values_equal(out, step(*b), rtol=1e-4, atol=1e-4)
        assert_values_equal(a[0], b[0])          # the cache written as eager writes it
    assert codegen.counters["cudagraph_plain_launch"] == plain
    assert codegen.counters["cudagraph_captures"] > captures
    pydynamo.reset()


@pytest.mark.parametrize("mode", [None, "reduce-overhead"])
def test_transposed_output_is_a_tensor_of_its_own_on_cuda(mode):
    """An output whose eager strides are dense in another order is computed contiguously in that
    order and handed out as a tensor of its own over the buffer's storage (ir.OwnTensorRef), not
    as a view: in training an in-place write through a view of it works as in eager (autograd
    refused it on a view a custom Function returned), in inference `_base` is None; under
    reduce-overhead the CUDA-graph runner hands out such outputs from its pool and every replay's
    values are eager's."""
    import pydynamo

    def f(x, w):
        return x * w
    pydynamo.reset()
    g = pydynamo.optimize(f, backend="codegen", mode=mode)
    try:
        for seed in range(4):
            outs = []
            for fn in (g, f):
                torch.manual_seed(seed)
                x = torch.randn(40, 50, device="cuda").t().clone()    # strides (1, 50)
                w = torch.randn(50, 40, device="cuda", requires_grad=True)
                z = fn(x, w)
                assert z._base is None and z.stride() == (1, 50)
                z[1:].mul_(1.5)
                z.sin().sum().backward()
                with torch.no_grad():
                    y = fn(x, w.detach())
                assert y._base is None and y.stride() == (1, 50)
                outs.append((z.detach().clone(), w.grad, y.clone()))
            for a, b in zip(*outs):
                assert_values_equal(a, b, rtol=1e-5, atol=1e-5)
    finally:
        pydynamo.reset()

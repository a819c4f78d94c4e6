"""codegen/gemm.py's padding of unaligned 16-bit GEMMs on GPU graphs (here the Triton path on CPU
tensors through the interpreter, with the size threshold lowered so small products pad): the
padded operands are our kernels' zero-padded copies, the product is the padded one sliced back,
and values, gradients and output strides equal eager's; float32 and the C++ path never pad."""
import re
import types

import pytest

import torch
import torch.nn.functional as F

import pydynamo
from codegen import codecache, gemm, gemm_rows, gemm_timing, pipeline

TRITON = {"backend_kernels": "triton"}
# the Triton path on CPU tensors runs under the interpreter; on a GPU machine, on the GPU
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"


@pytest.fixture(autouse=True)
def _small_threshold(monkeypatch):
    monkeypatch.setattr(gemm, "PAD_MIN_MACS", 1)
    pydynamo.reset()
    yield
    pydynamo.reset()


def _wrapper_text(fn, *args, options=TRITON):
    """fn compiled through pydynamo (outputs in eager's layout), with its wrapper's source."""
    sources = []
    write = codecache.write_wrapper

    def keep(src):
        sources.append(src)
        return write(src)
    pipeline.codecache.write_wrapper = keep
    try:
        pydynamo.reset()
        out = pydynamo.optimize(fn, options=options)(*args)
    finally:
        pipeline.codecache.write_wrapper = write
    return out, "\n".join(sources)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_unaligned_products_pad_and_match_eager(dtype):
    torch.manual_seed(0)
    a, b = (torch.randn(10, 12, dtype=dtype, device=DEVICE),
            torch.randn(12, 37, dtype=dtype, device=DEVICE))
    w, bias = (torch.randn(37, 12, dtype=dtype, device=DEVICE),
               torch.randn(37, dtype=dtype, device=DEVICE))
    cases = [
        (lambda a, b: torch.mm(a, b), (a, b)),                              # N unaligned
        (lambda a, b: torch.mm(b.t(), a.t()), (a, b)),                      # M unaligned, transposed
        (lambda x, w, bias: F.linear(x, w, bias), (a.view(2, 5, 12), w, bias)),
        (lambda g, b: torch.mm(g, b.t()), (torch.randn(10, 37, dtype=dtype, device=DEVICE),
                                           b)),                             # K unaligned
    ]
    for fn, args in cases:
        out, text = _wrapper_text(fn, *args)
        want = fn(*args)
        assert "torch.mm" in text or "mm" in text
        assert "(16, 40)" in text or "(40, 16)" in text or "(16, 16)" in text, text
        assert out.shape == want.shape and out.stride() == want.stride()
        torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)


def test_aligned_and_float32_products_do_not_pad():
    def rand(*shape, dtype=torch.bfloat16, device=DEVICE):
        return torch.randn(*shape, dtype=dtype, device=device)
    _, text = _wrapper_text(lambda a, b: torch.mm(a, b), rand(10, 12, dtype=torch.float32),
                            rand(12, 37, dtype=torch.float32))
    assert "(16, 40)" not in text
    _, text = _wrapper_text(lambda a, b: torch.mm(a, b), rand(16, 16), rand(16, 40))
    # no pad copies: the call function launches no kernel, the extern only (the text after it,
    # the runnable footer, names 'kernels_path')
    call = text.split("def call", 1)[1].split("\ndef ", 1)[0]
    assert not re.search(r"\bkernel\d", call), call
    a, b = rand(10, 12, device="cpu"), rand(12, 37, device="cpu")
    _, text = _wrapper_text(lambda a, b: torch.mm(a, b), a, b, options={"backend_kernels": "cpp"})
    assert "(16, 40)" not in text


def test_language_model_head_training_under_autocast_pads_and_matches_eager():
    """The shape of GPT-2's LM head and loss, small: logits over an odd vocabulary under bf16
    autocast, cross entropy, backward: the forward and both backward products pad."""
    def f(h, w, t):
        logits = F.linear(h, w)
        return F.cross_entropy(logits.float().view(-1, logits.shape[-1]), t), logits
    torch.manual_seed(0)
    h = torch.randn(2, 5, 12, device=DEVICE, requires_grad=True)
    w = torch.randn(37, 12, device=DEVICE, requires_grad=True)
    t = torch.randint(0, 37, (10,), device=DEVICE)

    def run(fn):
        h.grad = w.grad = None
        with torch.autocast(DEVICE, torch.bfloat16):
            loss, logits = fn(h, w, t)
        loss.backward()
        return loss, logits, h.grad.clone(), w.grad.clone()
    got = run(pydynamo.optimize(f, options=TRITON))
    want = run(f)
    for a, b in zip(got, want):
        assert a.stride() == b.stride()
        torch.testing.assert_close(a.float(), b.float(), rtol=2e-2, atol=2e-2)


def test_transposed_operands_pad_in_storage_order_and_share_one_copy():
    """g @ w and g.t() @ h both pad g's columns: one pad copy of g, the second product takes its
    transposed view; a transposed weight pads its rows and is handed over transposed."""
    def f(g, w, h, v):
        return torch.mm(g, w), torch.mm(g.t(), h), torch.mm(h, v.t())

    def rand(*shape):
        return torch.randn(*shape, dtype=torch.bfloat16, device=DEVICE)
    args = (rand(10, 37), rand(37, 12), rand(10, 12), rand(37, 12))
    out, text = _wrapper_text(f, *args)
    assert text.count("_empty_bfloat16((16, 40), (40, 1)") == 1, text   # g padded once
    assert "(40, 16), (1, 40)" in text                         # g.t(): its transposed view
    assert "_empty_bfloat16((40, 16), (16, 1)" in text                  # v padded along its rows
    for got, want in zip(out, f(*args)):
        torch.testing.assert_close(got, want, rtol=1e-2, atol=1e-2)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("rows", [16, 30])
def test_an_output_product_with_unaligned_rows_is_written_directly(monkeypatch, dtype, rows):
    """codegen/gemm_rows.py: a bias-free linear whose N breaks alignment and whose result is a
    graph output is one rows-aligned Triton matmul writing eager's contiguous layout: no pad
    copy of the weight, no copy of a padded result; values and strides equal eager's (here on
    CPU tensors through the interpreter: the device rule is opened for the test, and its row
    tile is the interpreter-sized 16 rows: 30 rows, not a multiple of 8, fill two to within 1/8)."""
    monkeypatch.setattr(gemm, "_measured_device", lambda device: True)
    monkeypatch.setattr(gemm, "DIRECT_ROWS_TILE", 16)
    monkeypatch.setattr(gemm, "DIRECT_ROWS_MIN_N", 16)
    torch.manual_seed(0)
    h = torch.randn(2, rows // 2, 16, dtype=dtype, device=DEVICE)
    w = torch.randn(37, 16, dtype=dtype, device=DEVICE)
    bias = torch.randn(37, dtype=dtype, device=DEVICE)
    for fn, args in ((lambda h, w: F.linear(h, w), (h, w)),
                     (lambda h, w, bias: F.linear(h, w, bias), (h, w, bias))):   # its epilogue
        out, text = _wrapper_text(fn, *args)
        assert "mm_rows_aligned_out" in text, text
        assert "(40, 16)" not in text and ", 40)" not in text, text       # nothing padded
        call = text.split("def call", 1)[1].split("\ndef ", 1)[0]
        assert not re.search(r"\bkernel\d", call), call                   # no kernel at all
        want = fn(*args)
        assert out.shape == want.shape and out.stride() == want.stride()
        torch.testing.assert_close(out, want, rtol=1e-2, atol=1e-2)


def test_the_direct_product_is_taken_only_where_its_rule_holds(monkeypatch):
    """Not taken: the product feeds a kernel only (its padded view is read, nothing is copied),
    a scaling follows it, a row-major right operand (its own leading dimension is unaligned), or
    the cost rule (M*K/(M+K) at or above DIRECT_ROWS_MAX) says the padded product is faster,
    or the rows leave more than 1/8 of the kernel's row tile empty (a decode step's few rows)."""
    monkeypatch.setattr(gemm, "_measured_device", lambda device: True)
    monkeypatch.setattr(gemm, "DIRECT_ROWS_TILE", 16)
    monkeypatch.setattr(gemm, "DIRECT_ROWS_MIN_N", 16)

    def rand(*shape):
        return torch.randn(*shape, dtype=torch.float16, device=DEVICE)
    h, w, bias = rand(16, 16), rand(37, 16), rand(37)
    cases = [(lambda h, w: F.linear(h, w).softmax(-1), (h, w)),
             (lambda h, w: F.linear(h, w) * 0.5, (h, w)),
             (lambda h, v: torch.mm(h, v), (h, rand(16, 37)))]
    for fn, args in cases:
        out, text = _wrapper_text(fn, *args)
        assert "mm_rows_aligned_out" not in text, text
        torch.testing.assert_close(out, fn(*args), rtol=1e-2, atol=1e-2)
    _, text = _wrapper_text(lambda h, w: F.linear(h, w), h, w)
    assert "mm_rows_aligned_out" in text
    for few in (rand(1, 16), rand(10, 16)):                  # 16-row tiles for 1 and 10 rows
        out, text = _wrapper_text(lambda h, w: F.linear(h, w), few, w)
        assert "mm_rows_aligned_out" not in text, text
        torch.testing.assert_close(out, F.linear(few, w), rtol=1e-2, atol=1e-2)
    monkeypatch.setattr(gemm, "DIRECT_ROWS_MAX", 8)       # 16*16/32 = 8: not below
    _, text = _wrapper_text(lambda h, w: F.linear(h, w), h, w)
    assert "mm_rows_aligned_out" not in text, text


def test_the_rows_kernel_serves_each_dtype_with_its_own_compile():
    """Its launcher's fast path keys calls without dtypes (generated kernels pin theirs): a bf16
    compile served fp16 tensors on the GPU until each dtype got a launcher of its own."""

    torch.manual_seed(0)
    for dtype in (torch.bfloat16, torch.float16, torch.bfloat16):
        a = torch.randn(24, 32, dtype=dtype, device=DEVICE)
        w = torch.randn(37, 32, dtype=dtype, device=DEVICE)
        out = gemm_rows.mm_rows_aligned_out(a, w.t())
        assert out.dtype == dtype and out.is_contiguous()
        torch.testing.assert_close(out, a @ w.t(), rtol=1e-2, atol=1e-2)


def test_the_direct_rule_on_real_model_sizes(monkeypatch):
    """The rule at sizes no test can allocate: GPT-2's LM head at batch 8 x seq 256 takes the
    kernel; a decode step's rows, a product whose K makes cuBLAS's padded GEMM the faster
    (M*K/(M+K) >= 1300), and logits of 2**31 elements or more (batch 64 x seq 1024: the
    kernel's offsets are 32-bit) do not; the kernel itself refuses the last."""
    monkeypatch.setattr(gemm, "_measured_device", lambda device: True)
    g = types.SimpleNamespace(device=None, current_node=None, is_output=lambda node: True)

    def direct(m, k, n):
        return gemm._rows_possible(g, m, k, n) and gemm._rows_by_rule(g, m, k, n)
    assert direct(2048, 768, 50257) and direct(2048, 768, 8193)
    assert not direct(2048, 768, 4097)          # measured 1.04x the padded way's time
    assert not direct(8, 768, 50257)
    assert not direct(8192, 8192, 50257)
    assert not direct(65536, 768, 50257)
    with pytest.raises(ValueError, match="64-bit offsets"):
        gemm_rows.mm_rows_aligned_out(torch.empty(65536, 768, dtype=torch.bfloat16, device="meta"),
                                      torch.empty(768, 50257, dtype=torch.bfloat16, device="meta"))


@pytest.mark.parametrize("way", ["plain", "padded", "rows"])
def test_max_autotune_runs_the_way_it_measured_fastest(monkeypatch, way):
    """mode="max-autotune": the product runs as codegen/gemm_timing.py measured fastest, whatever
    the rules would say (the timer is replaced here: CPU tensors cannot be timed with CUDA
    events); the default mode keeps the rules (the padded product, as the device is not one
    the direct kernel was measured on)."""
    asked = []

    def fastest(candidates, *args):
        asked.append(list(candidates))
        return way
    monkeypatch.setattr(gemm_timing, "can_measure", lambda device: True)
    monkeypatch.setattr(gemm_timing, "fastest", fastest)
    torch.manual_seed(0)
    h = torch.randn(16, 16, dtype=torch.float16, device=DEVICE)
    w = torch.randn(37, 16, dtype=torch.float16, device=DEVICE)
    out, text = _wrapper_text(lambda h, w: F.linear(h, w), h, w,
                              options={**TRITON, "mode": "max-autotune"})
    assert asked == [["plain", "padded", "rows"]]
    assert ("mm_rows_aligned_out" in text) == (way == "rows"), text
    assert ("(16, 40)" in text or "(40, 16)" in text) == (way == "padded"), text
    torch.testing.assert_close(out, F.linear(h, w), rtol=1e-2, atol=1e-2)
    asked.clear()
    _, text = _wrapper_text(lambda h, w: F.linear(h, w), h, w)
    assert asked == [] and "mm_rows_aligned_out" not in text and "(40, 16)" in text, text


@pytest.mark.skipif(not torch.cuda.is_available(), reason="times CUDA kernels")
def test_max_autotune_times_the_ways_on_the_gpu():
    """On a GPU the three ways of an LM-head-shaped product are each timed (a positive figure
    per way, logged with the choice) and the compiled result equals eager's."""
    torch.manual_seed(0)
    h = torch.randn(2048, 768, device=DEVICE).div(768 ** 0.5).bfloat16()    # products ~1
    w = torch.randn(1001, 768, dtype=torch.bfloat16, device=DEVICE)
    out, _ = _wrapper_text(lambda h, w: F.linear(h, w), h, w,
                           options={**TRITON, "mode": "max-autotune"})
    torch.testing.assert_close(out, F.linear(h, w), rtol=2e-2, atol=2e-2)
    (choice, us), = [v for k, v in gemm_timing.measured().items() if k[1:4] == (2048, 768, 1001)]
    assert set(us) == {"plain", "padded", "rows"} and all(t > 0 for t in us.values())
    assert choice in us

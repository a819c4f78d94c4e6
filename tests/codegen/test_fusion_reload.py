"""The scheduler's reload rule (codegen/scheduler.py): a fused kernel reads a buffer it writes
only at the element the same lane/iteration wrote, and then from the stored value, never from
memory. Found on an H100: GPT-2's MLP (addmm over a view, NewGELU) stored `0.5 * a` and
`1 + tanh(..)` and loaded them back in the same Triton kernel through the view chain's index
`512*(x//512) + x%64 + 64*((x//64)%8)` (== x, not simplified to it): lanes are not ordered
between a store and another layout's load, so the load read stale memory (10% off forward,
grads 30-170% off). Checked here on CPU: C++ kernels and Triton kernels under TRITON_INTERPRET=1
(set by tests/codegen_triton/conftest.py there; here before Triton is imported)."""
import math
import os
import re
import sys

import pytest
import torch
import torch.fx

if not torch.cuda.is_available():       # before any kernel module imports Triton
    os.environ["TRITON_INTERPRET"] = "1"

import codegen  # noqa: E402
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from differential import assert_close_or_no_less_accurate  # noqa: E402
from codegen import scheduler  # noqa: E402
from codegen.sizevars import simplify_index  # noqa: E402
from pydynamo.symbols import FloorDiv, ModIdx, index_symbol, size_symbol  # noqa: E402

D, B, T = 16, 2, 8
DEV = "cuda" if torch.cuda.is_available() else "cpu"      # of the Triton tests
X = index_symbol("xindex")


# ------------------------------------------------------------------ simplification
def test_nested_floor_division_has_one_base():
    s0 = size_symbol("s0")
    assert ModIdx(FloorDiv(X, 512), 1, 64) == ModIdx(X, 512, 64)
    assert ModIdx(FloorDiv(X, s0), 2, 4) == ModIdx(X, 2 * s0, 4)
    assert FloorDiv(FloorDiv(X, s0), 4) == FloorDiv(X, 4 * s0)


@pytest.mark.parametrize("nested", [False, True])
def test_view_chain_index_is_the_flat_index(nested):
    """[128, 512] -> [2, 64, 512] over the flat loop variable (numel 65536): the H100 index."""
    mid = ModIdx(FloorDiv(X, 512), 1, 64) if nested else ModIdx(X, 512, 64)
    e = 32768 * FloorDiv(X, 32768) + ModIdx(X, 1, 512) + 512 * mid
    assert simplify_index(e, {X: 65536}) == X
    # the range decides where the top term is missing: x % 32768 is x only below 32768
    e = ModIdx(X, 1, 512) + 512 * mid
    assert simplify_index(e, {X: 32768}) == X
    assert simplify_index(e, {X: 65536}) == ModIdx(X, 1, 32768)


def test_symbolic_view_chain_recombines():
    s0, s1 = size_symbol("s0"), size_symbol("s1")
    e = s0 * s1 * FloorDiv(X, s0 * s1) + s0 * ModIdx(FloorDiv(X, s0), 1, s1) + ModIdx(X, 1, s0)
    assert simplify_index(e, {X: 4 * s0 * s1}) == X


# ------------------------------------------------------------------ the MLP pattern
def new_gelu_mlp(x, w1, b1):
    """GPT-2's first MLP half as the training forward keeps it: the view chain, and the two
    GELU factors saved for backward (graph outputs) next to their product."""
    a = torch.addmm(b1, x.view(-1, D), w1).view(B, T, 4 * D)
    m = a * 0.5
    t = 1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (a + 0.044715 * torch.pow(a, 3.0)))
    return (m * t).view(-1, 4 * D), m, t


def mlp_args():
    torch.manual_seed(0)
    return [torch.randn(B, T, D), torch.randn(D, 4 * D) * 0.3, torch.randn(4 * D)]


def kernel_bodies(src, backend):
    """{kernel name: body text} of a generated source."""
    head = r"def (kernel\w+)\(" if backend == "triton" else r'extern "C" int (kernel\w+)\('
    parts = re.split(head, src)
    return dict(zip(parts[1::2], parts[2::2]))


def accesses(body, backend):
    """[(kind, buffer, index text)] in program order."""
    if backend == "triton":
        pat = r"tl\.(load|store)\((\w+) \+ \((.*?)\), (?:\w+|tmp\d+)"
        return [(k, b, i) for k, b, i in re.findall(pat, body)]
    out = []
    for m in re.finditer(r"(\w+)\[([^\]]*)\](\s*=(?!=))?", body):
        if m.group(1).startswith(("tmp", "acc")):
            continue
        out.append(("store" if m.group(3) else "load", m.group(1), m.group(2)))
    return out


def reload_violations(src, backend):
    """Loads of a buffer the same kernel stored earlier at another index text."""
    bad = []
    for name, body in kernel_bodies(src, backend).items():
        stored = {}
        for kind, buf, index in accesses(body, backend):
            if kind == "store":
                stored.setdefault(buf, set()).add(index)
            elif buf in stored and (backend == "triton" or index not in stored[buf]):
                bad.append((name, buf, index))
    return bad


def kernel_source(c, backend):
    if backend == "triton":
        return c.kernel_source
    with open(c.library_path[:-len(".so")] + ".cpp") as f:
        return f.read()


# what the Triton printer made of new_gelu_mlp before the reload rule (abridged)
RACY = """
@triton.jit
def kernel0(in_ptr0, in_ptr1, in_ptr2, in_ptr3, in_ptr4, XBLOCK: tl.constexpr):
    tmp4 = (tmp2 * tmp3)
    tl.store(in_ptr2 + (xindex), tmp4, xmask)
    tmp14 = (tmp5 + tmp13)
    tl.store(in_ptr3 + (xindex), tmp14, xmask)
    tmp15 = tl.load(in_ptr2 + (((512 * (xindex // 512)) + (xindex % 64) + (64 * ((xindex // 64) % 8)))), xmask, other=0)
    tmp16 = tl.load(in_ptr3 + (((512 * (xindex // 512)) + (xindex % 64) + (64 * ((xindex // 64) % 8)))), xmask, other=0)
    tmp17 = (tmp15 * tmp16)
    tl.store(in_ptr4 + (xindex), tmp17, xmask)
"""


def test_the_check_sees_the_racy_kernel():
    assert [b for _, b, _ in reload_violations(RACY, "triton")] == ["in_ptr2", "in_ptr3"]
    cpp = "extern \"C\" int kernel0(float* buf1) {\n    buf1[x0] = tmp4;\n" \
          "    float tmp5 = buf1[x0];\n    float tmp6 = buf1[(x0 + 1)];\n}"
    assert reload_violations(cpp, "cpp") == [("kernel0", "buf1", "(x0 + 1)")]


@pytest.mark.parametrize("backend", ["cpp", "triton"])
def test_mlp_kernels_never_reload_what_they_store(backend):
    if backend == "cpp" and torch.cuda.is_available():
        pytest.skip("CPU inputs only")
    args = [a.to(DEV if backend == "triton" else "cpu") for a in mlp_args()]
    gm = torch.fx.symbolic_trace(new_gelu_mlp)
    c = codegen.compile_fx(gm, args, strict=True, backend_kernels=backend)
    src = kernel_source(c, backend)
    assert reload_violations(src, backend) == []
    assert c.kernel_count == 1          # the view chain's index folds: the product stays fused
    for got, want in zip(c(*args), new_gelu_mlp(*args)):
        torch.testing.assert_close(got, want)


def test_triton_refuses_an_unforwarded_reload(monkeypatch):
    """If the scheduler ever fused a read of another lane's element, the Triton printer refuses
    the kernel (the graph runs eagerly) rather than print a racy load."""
    from codegen.triton import TritonUnsupported

    def f(x):
        y = x * 2.0
        return y, y.flip(0) + 1.0

    monkeypatch.setattr(scheduler, "same_element", lambda *a: True)
    gm = torch.fx.symbolic_trace(f)
    x = torch.randn(64, device=DEV)
    with pytest.raises(TritonUnsupported, match="read back"):
        codegen.compile_fx(gm, [x], strict=True, backend_kernels="triton")
    with pytest.warns(UserWarning, match="eagerly"):
        c = codegen.compile_fx(gm, [x], backend_kernels="triton")
    for got, want in zip(c(x), f(x)):
        torch.testing.assert_close(got, want)


def test_mlp_training_under_bf16_autocast_matches_eager():
    """The repro's whole MLP through the training path (CPU bfloat16 autocast): forward and
    grads as eager's."""
    import pydynamo

    def mlp(x, w1, b1, w2, b2):
        h = new_gelu_mlp(x, w1, b1)[0]
        return torch.addmm(b2, h, w2).view(B, T, D)
    torch.manual_seed(0)
    args = [torch.randn(B, T, D), torch.randn(D, 4 * D) * 0.3, torch.randn(4 * D),
            torch.randn(4 * D, D) * 0.3, torch.randn(D)]
    ref_args = [a.clone().requires_grad_() for a in args]
    got_args = [a.clone().requires_grad_() for a in args]
    ex_args = [a.double().requires_grad_() for a in args]
    for ac in (False, True):
        with torch.autocast("cpu", torch.bfloat16, enabled=ac):
            ref = mlp(*ref_args)
            pydynamo.reset()
            out = pydynamo.optimize(mlp, backend="codegen")(*got_args)
        exact = mlp(*ex_args)   # autocast leaves float64 alone: the exact values
        g = torch.randn_like(ref)
        gr = torch.autograd.grad(ref, ref_args, g)
        go = torch.autograd.grad(out, got_args, g)
        ge = torch.autograd.grad(exact, ex_args, g.double())
        if not ac:
            torch.testing.assert_close(out, ref)
            for a, b in zip(go, gr):
                torch.testing.assert_close(a, b)
            continue
        # the GELU chain in fp32 rounds once where eager rounds each op to bf16: as close to
        # the float64 values as eager is (tests/differential.py)
        assert_close_or_no_less_accurate(out, ref, exact, rtol=2e-2, atol=2e-2)
        for a, b, e in zip(go, gr, ge):
            assert_close_or_no_less_accurate(a, b, e, rtol=2e-2, atol=2e-2)

"""Host cost of the calls a generated GPU wrapper makes, one line each (µs per call, host loop
over tiny tensors so the GPU never holds the host back):

    python benchmarks/gpu/launch_cost.py [--n 2000]

Lines: Triton's generic `kernel[grid](...)` launch, the same kernel through pydynamo's launcher
(codegen/triton_launch.py), torch's own launch of an add, `empty_strided`, `addmm`,
scaled_dot_product_attention, and the wrapper's per-input entry check.
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402


@triton.jit
def add7(in0, in1, in2, in3, in4, in5, out0, XBLOCK: tl.constexpr):
    x = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    m = x < 64
    v = tl.load(in0 + x, m) + tl.load(in1 + x, m) + tl.load(in2 + x, m)
    v = v + tl.load(in3 + x, m) + tl.load(in4 + x, m) + tl.load(in5 + x, m)
    tl.store(out0 + x, v, m)


def per_call_us(fn, n):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    host = (time.perf_counter() - t0) / n * 1e6
    torch.cuda.synchronize()
    return host


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=2000)
    a = ap.parse_args()
    from codegen.triton_launch import TritonLauncher, current_stream
    dev = torch.device("cuda")
    xs = [torch.randn(64, device=dev) for _ in range(7)]
    lines = []

    def line(name, fn):
        us = per_call_us(fn, a.n)
        lines.append((name, us))
        print(f"{name:<58} {us:8.2f} us", flush=True)

    line("triton generic kernel[grid](7 args, XBLOCK=, num_warps=)",
         lambda: add7[(1,)](*xs, XBLOCK=64, num_warps=1))
    launch = TritonLauncher(add7, 64, 1, "ttttttt")
    line("pydynamo TritonLauncher (7 args)", lambda: launch(current_stream(), (1, 1, 1), *xs))
    if launch.compiled:     # the same compiled kernel, by the paths launches took before
        call, head, form = next(iter(launch.compiled.values()))
        ck = add7[(1,)](*xs, XBLOCK=64, num_warps=1)     # returns the compiled kernel
        ptrs = [x.data_ptr() for x in xs]
        line("  Triton's run (CudaLauncher.__call__) given tensors (session 12)",
             lambda: ck.run(1, 1, 1, current_stream(), ck.function, ck.packed_metadata, None,
                            None, None, *xs, 64))
        line("  Triton's run given data pointers",
             lambda: ck.run(1, 1, 1, current_stream(), ck.function, ck.packed_metadata, None,
                            None, None, *ptrs, 64))
        if form == "tuple":
            line("  its C launch given data pointers (the direct launch's call)",
                 lambda: call(1, 1, 1, current_stream(), *head, (*ptrs, 64)))
        else:
            line(f"  its {'C launch' if form == 'flat' else 'run'} given data pointers "
                 "(the direct launch's call)",
                 lambda: call(1, 1, 1, current_stream(), *head, *ptrs, 64))
    ref = xs[0] + xs[1] + xs[2] + xs[3] + xs[4] + xs[5]
    launch(current_stream(), (1, 1, 1), *xs)
    torch.cuda.synchronize()
    assert torch.allclose(xs[6], ref), "TritonLauncher computed a different result"
    line("stream lookup (current_stream())", current_stream)
    line("torch.add(x, y, out=z)", lambda: torch.add(xs[0], xs[1], out=xs[2]))
    line("torch.empty_strided((8,256,768))",
         lambda: torch.empty_strided((8, 256, 768), (196608, 768, 1), device=dev))
    for dt in (torch.float32, torch.bfloat16):
        b, m1, m2 = (torch.randn(64, device=dev, dtype=dt), torch.randn(16, 64, device=dev, dtype=dt),
                     torch.randn(64, 64, device=dev, dtype=dt))
        line(f"torch.addmm {dt}", lambda: torch.addmm(b, m1, m2))
        q = torch.randn(1, 2, 16, 64, device=dev, dtype=dt)
        line(f"F.scaled_dot_product_attention causal {dt}",
             lambda: torch.nn.functional.scaled_dot_product_attention(q, q, q, is_causal=True))
        choice = torch._fused_sdp_choice(q, q, q, None, 0.0, True)
        line(f"  backend choice alone (chose {choice})",
             lambda: torch._fused_sdp_choice(q, q, q, None, 0.0, True))
        aten = torch.ops.aten
        direct = {1: lambda: aten._scaled_dot_product_flash_attention(q, q, q, 0.0, True),
                  2: lambda: aten._scaled_dot_product_efficient_attention(q, q, q, None, False,
                                                                         0.0, True),
                  3: lambda: aten._scaled_dot_product_cudnn_attention(q, q, q, None, False, 0.0,
                                                                     True, False)}
        for c, fn in direct.items():
            try:
                line(f"  backend {c} op called directly", fn)
            except RuntimeError as e:
                print(f"  backend {c}: {str(e).splitlines()[0][:100]}")
    t, d = xs[0], dev
    line("entry check of one input (device, dtype, shape, stride)",
         lambda: t.device != d or t.dtype is not torch.float32 or t.shape != (64,) or t.stride() != (1,))
    line("torch.as_strided view", lambda: torch.as_strided(t, (8, 8), (8, 1), 0))
    out = os.environ.get("OUT")
    if out:
        with open(os.path.join(out, "launch_cost.txt"), "w") as f:
            for name, us in lines:
                f.write(f"{name}\t{us:.3f}\n")


if __name__ == "__main__":
    main()

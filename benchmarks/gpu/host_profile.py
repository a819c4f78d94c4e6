"""Where the host's time goes when pydynamo launches GPT-2 small (bf16, batch 8, seq 256):
cProfile of N forwards after warm-up, for each variant: "generic" (every kernel through
Triton's own `kernel[grid](...)`, codegen option triton_fast_launch=False), "plain" (pydynamo's
direct launch) and "cudagraphs" (replay).

    python benchmarks/gpu/host_profile.py [--dtype bfloat16] [--n 20] [--top 25]
        [--variants generic,plain,cudagraphs]
"""
import argparse
import cProfile
import io
import os
import pstats
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--n", type=int, default=20)
    ap.add_argument("--top", type=int, default=25)
    ap.add_argument("--variants", default="generic,plain,cudagraphs")
    a = ap.parse_args()
    from transformers import GPT2Config, GPT2Model
    import pydynamo
    cfg = GPT2Config(n_layer=12)
    torch.manual_seed(0)
    model = GPT2Model(cfg).cuda().eval().to(getattr(torch, a.dtype))
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    variants = {"generic": {"triton_fast_launch": False}, "plain": {},
                "cudagraphs": {"cudagraphs": True}}
    for name in a.variants.split(","):
        opts = variants[name]
        pydynamo.reset()
        m = pydynamo.optimize(model, backend="codegen", options=opts)
        with torch.no_grad():
            for _ in range(5):
                m(input_ids=ids)
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(a.n):
                m(input_ids=ids)
            host = (time.perf_counter() - t0) / a.n * 1e3
            torch.cuda.synchronize()
            wall = (time.perf_counter() - t0) / a.n * 1e3
            pr = cProfile.Profile()
            pr.enable()
            for _ in range(a.n):
                m(input_ids=ids)
            pr.disable()
            torch.cuda.synchronize()
        print(f"== {name}: host {host:.3f} ms/forward to enqueue (n={a.n}), wall {wall:.3f} ms",
              flush=True)
        for key in ("tottime", "cumulative"):
            s = io.StringIO()
            pstats.Stats(pr, stream=s).sort_stats(key).print_stats(a.top)
            print(f"-- by {key} (totals for {a.n} forwards)")
            print("\n".join(s.getvalue().splitlines()[4:]), flush=True)


if __name__ == "__main__":
    main()

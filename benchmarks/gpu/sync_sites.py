"""What blocks the host in back-to-back GPT-2 small training steps (bf16 autocast, AdamW):
torch.profiler over whole steps without inner syncs, the CUDA runtime calls by host time
(a cudaMalloc/cudaFree, cudaStreamSynchronize or blocking copy shows as a call of
milliseconds), for one engine.

    python benchmarks/gpu/sync_sites.py pd|tc|eager [--steps 4]
"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

import pydynamo


def warm_step(engine):
    """One bf16-autocast training step (forward, loss, backward, AdamW) of GPT-2 small under
    `engine` (pd, tc or eager), run three times so compiling is done."""
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(resid_pdrop=0, embd_pdrop=0, attn_pdrop=0)
    torch.manual_seed(0)
    m = GPT2LMHeadModel(cfg).cuda().train()
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    c = {"pd": lambda: pydynamo.optimize(m, backend="codegen"), "tc": lambda: torch.compile(m),
         "eager": lambda: m}[engine]()
    opt = torch.optim.AdamW(m.parameters(), lr=1e-4)

    def step():
        with torch.autocast("cuda", torch.bfloat16):
            loss = c(input_ids=ids, labels=ids).loss
        loss.backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
    for _ in range(3):
        step()
    torch.cuda.synchronize()
    return step


def main():
    engine, step = sys.argv[1], warm_step(sys.argv[1])
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(4):
            step()
        torch.cuda.synchronize()
    rows = [e for e in prof.key_averages() if e.key.startswith("cuda") or "Memcpy" in e.key
            or "Synchronize" in e.key or "Malloc" in e.key or "Free" in e.key]
    rows.sort(key=lambda e: -e.cpu_time_total)
    print(f"== {engine}: CUDA runtime calls over 4 steps, by host time")
    for e in rows[:15]:
        print(f"{e.key:48} calls {e.count:6d}  host total {e.cpu_time_total / 1e3:9.2f} ms  "
              f"max {e.cpu_time_total / max(e.count, 1) / 1e3:7.3f} ms avg")


if __name__ == "__main__" and "--cprofile" not in sys.argv:
    main()


def cprofile_whole_steps():
    """`python benchmarks/gpu/sync_sites.py pd --cprofile`: cProfile of 10 whole steps (no inner
    syncs), by own time: the call that absorbs a blocked host shows a large own time."""
    import cProfile
    import pstats
    engine, step = sys.argv[1], warm_step(sys.argv[1])
    import time
    t0 = time.perf_counter()
    p = cProfile.Profile()
    p.enable()
    for _ in range(10):
        step()
    torch.cuda.synchronize()
    p.disable()
    print(f"== {engine}: 10 whole steps {(time.perf_counter() - t0) * 100:.2f} ms/step (profiled)")
    pstats.Stats(p).sort_stats("tottime").print_stats(25)


if __name__ == "__main__" and "--cprofile" in sys.argv:
    cprofile_whole_steps()

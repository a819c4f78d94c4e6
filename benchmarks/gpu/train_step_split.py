"""A GPT-2 small training step split into its parts, per engine (eager, pydynamo codegen,
torch.compile), each part timed with a sync on both sides: forward+loss+backward, the eager
AdamW step, zero_grad; then whole steps without inner syncs (what bench_training.py times), with
a sync after one part only, and the GPU kernel time per step back to back and with syncs.
Finds where a whole-step gap between engines comes from.

    python benchmarks/gpu/train_step_split.py [--dtype bf16-autocast|fp32] [--steps 10]
"""
import argparse
import contextlib
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))

import torch  # noqa: E402


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dtype", default="bf16-autocast", choices=["bf16-autocast", "fp32"])
    ap.add_argument("--steps", type=int, default=10)
    a = ap.parse_args()
    import pydynamo
    from transformers import GPT2Config, GPT2LMHeadModel
    cfg = GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
    ids = torch.randint(0, cfg.vocab_size, (8, 256), device="cuda")
    autocast = a.dtype == "bf16-autocast"
    print(f"{torch.cuda.get_device_name()}, {a.dtype}: median ms over {a.steps} steps")
    print(f"{'engine':14} {'fwd+bwd':>8} {'adamw':>8} {'zero':>8} {'sum':>8} {'whole step':>10}")
    for engine in ("eager", "pydynamo", "torch.compile"):
        torch.manual_seed(0)
        model = GPT2LMHeadModel(cfg).cuda().train()
        fn = {"eager": lambda m: m, "pydynamo": lambda m: pydynamo.optimize(m, backend="codegen"),
              "torch.compile": torch.compile}[engine](model)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)

        def fwd_bwd():
            ctx = torch.autocast("cuda", torch.bfloat16) if autocast else contextlib.nullcontext()
            with ctx:
                loss = fn(input_ids=ids, labels=ids).loss
            loss.backward()

        def timed(f):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            f()
            torch.cuda.synchronize()
            return (time.perf_counter() - t0) * 1e3
        for _ in range(3):
            fwd_bwd(); opt.step(); opt.zero_grad(set_to_none=True)
        parts = [[], [], []]
        for _ in range(a.steps):
            for i, f in enumerate((fwd_bwd, opt.step, lambda: opt.zero_grad(set_to_none=True))):
                parts[i].append(timed(f))
        def whole(sync_after=()):
            """ms per step of back-to-back steps, synchronizing only after the named parts."""
            def steps():
                for _ in range(a.steps):
                    fwd_bwd()
                    if "fwd_bwd" in sync_after:
                        torch.cuda.synchronize()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if "step" in sync_after:
                        torch.cuda.synchronize()
            return statistics.median(timed(steps) / a.steps for _ in range(3))

        def gpu_ms(sync_inside):
            """Sum of the GPU kernels' durations per step (torch.profiler), steps run with or
            without syncs between the parts: does the GPU do more work back to back?"""
            from torch.profiler import ProfilerActivity, profile
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(3):
                    fwd_bwd()
                    if sync_inside:
                        torch.cuda.synchronize()
                    opt.step()
                    opt.zero_grad(set_to_none=True)
                    if sync_inside:
                        torch.cuda.synchronize()
                torch.cuda.synchronize()
            from torch.autograd import DeviceType
            total = sum(e.device_time_total for e in prof.key_averages()
                        if e.device_type == DeviceType.CUDA)
            return total / 3 / 1e3
        med = [statistics.median(p) for p in parts]
        print(f"{engine:14} {med[0]:8.2f} {med[1]:8.2f} {med[2]:8.2f} {sum(med):8.2f} "
              f"{whole():10.2f} | sync after fwd_bwd {whole(('fwd_bwd',)):7.2f}, after step "
              f"{whole(('step',)):7.2f}, both {whole(('fwd_bwd', 'step')):7.2f} | GPU kernels "
              f"back to back {gpu_ms(False):6.2f}, with syncs {gpu_ms(True):6.2f}", flush=True)
        del fn, model, opt
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()

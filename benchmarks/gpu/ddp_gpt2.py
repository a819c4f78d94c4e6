"""Issue 22 on 2 GPUs (NCCL): GPT-2 small training under DDP and FSDP2, step time of eager,
pydynamo (codegen) and torch.compile in one run, and the overlap evidence.

    python benchmarks/gpu/ddp_gpt2.py [--world 2] [--steps 20] [--batch 8] [--seq 256]
        [--dtypes fp32,bf16] [--wrappers ddp,fsdp2]
        [--modes eager,pydynamo,torch.compile,pydynamo-nosplit] [--trace-dir DIR] [--cpu]

GPT-2 small (transformers GPT2Config defaults, random weights, dropout off), per rank a batch of
`batch` x `seq`, SGD; bf16: torch.autocast(cuda, bfloat16) around the forward (DDP) or
MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32) (FSDP2). Each (wrapper, dtype, mode)
builds the model from seed 0, runs 5 warm-up steps (compiles), then `steps` timed steps
(cuda-synchronized, median ms on rank 0, the max over ranks of each step), and peak memory.

Overlap: for eager and pydynamo under DDP (and with pydynamo.config.optimize_ddp off, for
contrast) a torch.profiler trace of 3 steps, each backward bracketed on the GPU stream by two
marker kernels (`torch.cuda._sleep`, kernel `spin_kernel`), so the backward's GPU window is known:
- "NCCL": the GPU time of NCCL kernels, and "beside compute": how much of it runs while a compute
  kernel runs on the other stream (interval intersection);
- "hidden": the NCCL time inside the backward window that ends before the backward's last compute
  kernel ends: communication done while the backward still computes; "exposed": the NCCL time
  after it, which the step waits for. One backward Function per graph (optimize_ddp off) starts
  every all-reduce after the last gradient, so nearly all of it is exposed; DDP's per-bucket
  hooks (eager, or the bucket split) start them during the backward.
With --bucket-view DDP is built with gradient_as_bucket_view=True, so no copy of the all-reduced
buckets back into .grad runs after the last all-reduce and the window's last compute kernel is
the backward's. Traces (chrome JSON) go to --trace-dir.
`--analyze TRACE...` prints those figures and, per backward window, where the all-reduces start.
Leave NVLink multicast off (NCCL_NVLS_ENABLE=0, set here).
"""
from __future__ import annotations

import argparse
import os
import socket
import statistics
import sys
import time

os.environ.setdefault("NCCL_NVLS_ENABLE", "0")


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _model(torch, args):
    import transformers as t
    small = dict(n_layer=2, n_embd=64, n_head=2, vocab_size=512, n_positions=64) if args.cpu else {}
    cfg = t.GPT2Config(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, use_cache=False, **small)
    torch.manual_seed(0)
    return t.GPT2LMHeadModel(cfg)


def _wrap(torch, model, wrapper, dtype, dev, bucket_view=False):
    model = model.to(dev)
    if wrapper == "ddp":
        from torch.nn.parallel import DistributedDataParallel as DDP
        return DDP(model, device_ids=[dev.index] if dev.type == "cuda" else None,
                   gradient_as_bucket_view=bucket_view)
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if dtype == "bf16" else MixedPrecisionPolicy()
    for block in model.transformer.h:
        fully_shard(block, mp_policy=policy)
    fully_shard(model, mp_policy=policy)
    return model


def _compiled(torch, net, mode):
    if mode == "eager":
        return net
    if mode == "pydynamo" or mode == "pydynamo-nosplit":
        import pydynamo
        return pydynamo.optimize(net, backend="codegen")
    return torch.compile(net)


def _merged(intervals):
    merged = []
    for s, e in sorted(intervals):
        if merged and s <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], e)
        else:
            merged.append([s, e])
    return merged


def _intersection(intervals, merged):
    over = 0
    for s, e in intervals:
        for cs, ce in merged:
            if ce <= s:
                continue
            if cs >= e:
                break
            over += min(e, ce) - max(s, cs)
    return over


def _overlap(kernels, timeline=None):
    """NCCL kernel ms, of it ms beside a compute kernel, ms hidden in the backward (ending before
    the backward's last compute kernel), ms exposed after it, and the backward windows' ms: sums
    over the profiled steps. `kernels`: (start µs, end µs, name) of every GPU kernel; windows lie
    between consecutive pairs of `spin_kernel` markers. With a `timeline` list, one line per
    window is appended: where in it the all-reduces start and the last compute kernel ends."""
    kernels = sorted(kernels)
    is_nccl = lambda n: "nccl" in n.lower()
    marks = [k for k in kernels if "spin_kernel" in k[2]]
    nccl = [(s, e) for s, e, n in kernels if is_nccl(n)]
    comp = [(s, e) for s, e, n in kernels if not is_nccl(n) and "spin_kernel" not in n]
    total = sum(e - s for s, e in nccl)
    beside = _intersection(nccl, _merged(comp))
    hidden = exposed = window = 0
    for m0, m1 in zip(marks[0::2], marks[1::2]):
        lo, hi = m0[1], m1[0]
        window += hi - lo
        inside = [(s, e) for s, e in comp if lo <= s < hi]
        last = max((e for s, e in inside), default=lo)
        starts = []
        for s, e in nccl:
            if lo <= s < hi:
                hidden += max(0, min(e, last) - s)
                exposed += max(0, e - max(s, last))
                starts.append(s)
        if timeline is not None:
            timeline.append(
                f"backward window {(hi - lo) / 1e3:.2f} ms, compute kernels {len(inside)} busy "
                f"{sum(e - s for s, e in inside) / 1e3:.2f} ms, last one ends at {(last - lo) / 1e3:.2f} "
                f"ms; {len(starts)} all-reduces start at ms "
                + " ".join(f"{(s - lo) / 1e3:.1f}" for s in starts)
                + f" ({sum(s < last for s in starts)} before the last compute kernel)")
    return [x / 1e3 for x in (total, beside, hidden, exposed, window)]


def _profiled_kernels(prof):
    # a set: prof.events() can list one kernel more than once (as its own event and under the
    # op that launched it); the chrome trace (--analyze) lists each once
    return list({(e.time_range.start, e.time_range.end, e.name) for e in prof.events()
                 if e.device_type.name == "CUDA"})


def _analyze(path):
    """Print the overlap figures and per-window timeline of a chrome trace this script wrote."""
    import json
    with open(path) as f:
        events = json.load(f)["traceEvents"]
    kernels = [(e["ts"], e["ts"] + e["dur"], e["name"]) for e in events if e.get("cat") == "kernel"]
    timeline = []
    total, beside, hidden, exposed, window = _overlap(kernels, timeline)
    print(f"{path}: NCCL {total:.2f} ms: beside compute {beside:.2f}, hidden in the backward "
          f"{hidden:.2f}, exposed after it {exposed:.2f} (backward windows {window:.2f} ms)")
    for line in timeline:
        print("  " + line)


def _worker(rank, world, port, args, results):
    import torch
    import torch.distributed as dist
    if args.cpu:
        dev, sync = torch.device("cpu"), (lambda: None)
        torch.set_num_threads(1)
    else:
        dev, sync = torch.device("cuda", rank), torch.cuda.synchronize
        torch.cuda.set_device(rank)
    dist.init_process_group("gloo" if args.cpu else "nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                            world_size=world)
    out = []
    for wrapper in args.wrappers.split(","):
        for dtype in args.dtypes.split(","):
            for mode in args.modes.split(","):
                import pydynamo
                pydynamo.reset()
                pydynamo.config.optimize_ddp = mode != "pydynamo-nosplit"
                torch._dynamo.reset()
                net = _wrap(torch, _model(torch, args), wrapper, dtype, dev, args.bucket_view)
                step_fn = _compiled(torch, net, mode)
                opt = torch.optim.SGD(net.parameters(), lr=1e-3)
                gen = torch.Generator(device=dev).manual_seed(100 + rank)
                vocab = net.module.config.vocab_size if wrapper == "ddp" else net.config.vocab_size
                ids = torch.randint(0, vocab, (args.batch, args.seq), device=dev, generator=gen)
                autocast = dtype == "bf16" and wrapper == "ddp"

                def step(mark=False):
                    opt.zero_grad(set_to_none=True)
                    with torch.autocast(dev.type, torch.bfloat16, enabled=autocast):
                        loss = step_fn(input_ids=ids, labels=ids).loss
                    if mark:
                        torch.cuda._sleep(1000)       # marks the backward's start on the stream
                    loss.backward()
                    if mark:
                        torch.cuda._sleep(1000)       # ... and its end
                    opt.step()
                    return loss
                try:
                    for _ in range(5):
                        loss = step()
                    sync()
                    if not args.cpu:
                        torch.cuda.reset_peak_memory_stats()
                    times = []
                    for _ in range(args.steps):
                        dist.barrier()
                        sync()
                        t = time.perf_counter()
                        loss = step()
                        sync()
                        times.append((time.perf_counter() - t) * 1e3)
                    worst = torch.tensor(times, device=dev)
                    dist.all_reduce(worst, op=dist.ReduceOp.MAX)
                    row = dict(wrapper=wrapper, dtype=dtype, mode=mode,
                               ms=statistics.median(worst.tolist()),
                               peak_mib=0 if args.cpu else torch.cuda.max_memory_allocated() / 2**20,
                               loss=float(loss))
                    if (mode.startswith("pydynamo") and wrapper == "ddp" or mode == "eager") \
                            and not args.cpu:
                        from torch.profiler import ProfilerActivity, profile
                        with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
                            for _ in range(3):
                                step(mark=True)
                            sync()
                        (row["nccl_ms"], row["nccl_overlapped_ms"], row["nccl_hidden_ms"],
                         row["nccl_exposed_ms"], row["backward_ms"]) = _overlap(_profiled_kernels(prof))
                        if args.trace_dir and rank == 0:
                            os.makedirs(args.trace_dir, exist_ok=True)
                            prof.export_chrome_trace(os.path.join(
                                args.trace_dir, f"{wrapper}_{dtype}_{mode}.json"))
                except Exception as e:     # one failing configuration does not stop the table
                    row = dict(wrapper=wrapper, dtype=dtype, mode=mode,
                               error=f"{type(e).__name__}: {str(e)[:300]}")
                out.append(row)
                del net, step_fn, opt
                if not args.cpu:
                    torch.cuda.empty_cache()
    if rank == 0:
        results.put(out)
    dist.barrier()
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--world", type=int, default=2)
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--seq", type=int, default=256)
    ap.add_argument("--dtypes", default="fp32,bf16")
    ap.add_argument("--wrappers", default="ddp,fsdp2")
    ap.add_argument("--modes", default="eager,pydynamo,torch.compile,pydynamo-nosplit")
    ap.add_argument("--trace-dir", default=os.environ.get("OUT"))
    ap.add_argument("--bucket-view", action="store_true",
                    help="DDP(gradient_as_bucket_view=True): no copy back after the all-reduce")
    ap.add_argument("--analyze", nargs="+", metavar="TRACE",
                    help="print the overlap figures and timeline of traces written by a run")
    ap.add_argument("--cpu", action="store_true", help="smoke test: gloo, CPU, a 2-layer GPT-2")
    args = ap.parse_args()
    if args.analyze:
        for path in args.analyze:
            _analyze(path)
        return
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    results = ctx.Queue()
    port = _free_port()
    procs = [ctx.Process(target=_worker, args=(r, args.world, port, args, results))
             for r in range(args.world)]
    for p in procs:
        p.start()
    rows = results.get(timeout=3000)
    for p in procs:
        p.join()
    import torch
    device = "CPU (gloo, 2-layer GPT-2)" if args.cpu else torch.cuda.get_device_name(0)
    print(f"GPT-2 small, {args.world} x {device}, batch {args.batch} x "
          f"seq {args.seq} per rank, median of {args.steps} steps (max over ranks)")
    base = {(r["wrapper"], r["dtype"]): r.get("ms") for r in rows if r["mode"] == "eager"}
    for r in rows:
        if "error" in r:
            print(f"{r['wrapper']:6} {r['dtype']:5} {r['mode']:17} ERROR {r['error']}")
            continue
        ratio = base.get((r["wrapper"], r["dtype"]))
        text = f"{r['wrapper']:6} {r['dtype']:5} {r['mode']:17} {r['ms']:8.2f} ms"
        text += f"  ({ratio / r['ms']:.2f}x eager)" if ratio else ""
        text += f"  peak {r['peak_mib']:.0f} MiB  loss {r['loss']:.4f}"
        if "nccl_ms" in r:
            text += (f"\n{'':31}NCCL over 3 steps {r['nccl_ms']:.2f} ms: beside compute "
                     f"{r['nccl_overlapped_ms']:.2f}, hidden in the backward {r['nccl_hidden_ms']:.2f}, "
                     f"exposed after it {r['nccl_exposed_ms']:.2f} (backward windows "
                     f"{r['backward_ms']:.2f} ms)")
        print(text)
    sys.stdout.flush()


if __name__ == "__main__":
    main()

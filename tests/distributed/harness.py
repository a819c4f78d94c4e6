"""Running a function on N gloo ranks over loopback, bounded in time.

`run_ranks(fn, world=2, timeout=...)` starts `world` processes from a forkserver that imported
torch, transformers and pydynamo once (so a test pays the fork, not the imports), each calling
`fn(rank, world, *args)` inside an initialized gloo process group (TCP store on 127.0.0.1, a
free port), and returns the per-rank results in rank order. A rank that raises fails the call
with its traceback; ranks still running at `timeout` (a deadlocked collective) are killed and
the call raises `RankTimeout` instead of hanging CI. `fn` must be importable by name (a module
level function of a module on sys.path).
"""
from __future__ import annotations

import io
import multiprocessing as mp
import os
import queue
import socket
import sys
import time
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
_CTX = None


class RankTimeout(AssertionError):
    pass


def _context():
    global _CTX
    if _CTX is None:
        _CTX = mp.get_context("forkserver")
        _CTX.set_forkserver_preload(["torch", "torch.distributed", "transformers",
                                     "transformers.models.gpt2.modeling_gpt2", "pydynamo",
                                     "pydynamo.convert_frame", "pydynamo.eval_frame",
                                     "pydynamo.distributed", "codegen", "codegen.pipeline",
                                     "workloads"])
    return _CTX


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(fn, rank, world, port, args, results, env):
    os.environ.update(env)
    try:
        import torch
        import torch.distributed as dist
        torch.set_num_threads(1)          # 2 ranks on a shared 2-core machine
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank,
                                world_size=world)
        try:
            out = fn(rank, world, *args)
        finally:
            dist.destroy_process_group()
        buf = io.BytesIO()           # bytes, not shared-memory tensors: the rank exits next
        torch.save(out, buf)
        results.put((rank, "ok", buf.getvalue()))
    except BaseException:
        results.put((rank, "error", traceback.format_exc()))


def run_ranks(fn, *args, world: int = 2, timeout: float = 60.0, env: dict | None = None):
    ctx = _context()
    if HERE not in sys.path:
        sys.path.insert(0, HERE)
    results = ctx.Queue()
    port = free_port()
    env = dict(env or {}, GLOO_SOCKET_IFNAME="lo", PYTHONPATH=os.pathsep.join(
        [HERE] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]))
    procs = [ctx.Process(target=_worker, args=(fn, r, world, port, args, results, env))
             for r in range(world)]
    for p in procs:
        p.start()
    out, errors = {}, {}
    deadline = time.monotonic() + timeout
    try:
        while len(out) + len(errors) < world:
            left = deadline - time.monotonic()
            try:
                rank, status, value = results.get(timeout=max(left, 0.01))
            except queue.Empty:
                missing = sorted(set(range(world)) - set(out) - set(errors))
                raise RankTimeout(f"ranks {missing} did not finish in {timeout:.0f}s (a deadlocked "
                                  f"collective?); finished: {sorted(out)}; errors: {errors}") from None
            if status == "ok":
                import torch
                out[rank] = torch.load(io.BytesIO(value), weights_only=False)
            else:
                errors[rank] = value
            if errors:
                break          # the other ranks may be blocked in a collective with this one
    finally:
        for p in procs:
            p.join(timeout=0.5 if errors or len(out) < world else 10)
            if p.is_alive():
                p.kill()
                p.join()
    if errors:
        rank = min(errors)
        raise AssertionError(f"rank {rank} raised:\n{errors[rank]}")
    return [out[r] for r in range(world)]

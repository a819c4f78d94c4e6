"""What the ranks run (module level, so the forkserver's children find them by name).

`train(rank, world, model, backend, ...)`: one model built from seed 0 on every rank, wrapped in
DistributedDataParallel (eager DDP when backend is None, else pydynamo.optimize of the DDP module),
STEPS steps of SGD on a per-rank batch; returns the losses, the final parameters, the graph
counts and, per step, the trace of DDP's bucket all-reduce launches: (bucket index, number of
compiled backward pieces run so far in this step) from a DDP communication hook.
"""
from __future__ import annotations

import os
import warnings

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

os.environ.setdefault("HF_HUB_OFFLINE", "1")
STEPS = 5


class MLP(nn.Module):
    def __init__(self, width=32, depth=4):
        super().__init__()
        self.layers = nn.ModuleList(nn.Linear(width if i else 16, width) for i in range(depth))
        self.head = nn.Linear(width, 5)

    def forward(self, x, y):
        for layer in self.layers:
            x = torch.relu(layer(x))
        return F.cross_entropy(self.head(x), y)


def mlp():
    return MLP()


class MLPUnused(MLP):
    """An MLP with a layer its forward never uses (find_unused_parameters=True in DDP)."""

    def __init__(self):
        super().__init__()
        self.unused = nn.Linear(32, 32)


class MLPBN(nn.Module):
    """BatchNorm1d in train mode (running statistics written in place by a piece; DDP
    broadcasts the buffers from rank 0 before each forward) and Dropout (the RNG stream)."""

    def __init__(self):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(16, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2),
                                 nn.Linear(32, 32), nn.ReLU(), nn.Linear(32, 5))

    def forward(self, x, y):
        return F.cross_entropy(self.net(x), y)


class MLPAutocast(MLP):
    """An autocast region inside the traced forward: compiled whole under DDP (warned)."""

    def forward(self, x, y):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            for layer in self.layers:
                x = torch.relu(layer(x))
            x = self.head(x)
        return F.cross_entropy(x.float(), y)


def mlp_batch_sizes(gen, step, rank):
    """A batch size per step, the same on every rank: a recompile with a symbolic batch dim."""
    n = (8, 12, 16, 6, 10)[step]
    return dict(x=torch.randn(n, 16, generator=gen), y=torch.randint(0, 5, (n,), generator=gen))


def mlp_batch_varying(gen, step, rank):
    """Rank 1's third batch has 9 rows where every other batch has 8: its guards fail there."""
    n = 9 if rank == 1 and step == 2 else 8
    return dict(x=torch.randn(n, 16, generator=gen), y=torch.randint(0, 5, (n,), generator=gen))


def mlp_batch(gen, step, rank):
    return dict(x=torch.randn(8, 16, generator=gen), y=torch.randint(0, 5, (8,), generator=gen))


class GPT2Loss(nn.Module):
    def __init__(self):
        super().__init__()
        import transformers as t
        cfg = t.GPT2Config(n_layer=2, n_embd=64, n_head=2, vocab_size=128, n_positions=64,
                           resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0, bos_token_id=0,
                           eos_token_id=0, use_cache=False)
        self.model = t.GPT2LMHeadModel(cfg).train()

    def forward(self, input_ids, labels):
        return self.model(input_ids=input_ids, labels=labels).loss


def gpt2():
    return GPT2Loss()


def gpt2_batch(gen, step, rank):
    ids = torch.randint(0, 128, (2, 16), generator=gen)
    return dict(input_ids=ids, labels=ids.clone())


MODELS = {"mlp": (mlp, mlp_batch), "gpt2": (gpt2, gpt2_batch), "mlp_unused": (MLPUnused, mlp_batch),
          "mlp_varying": (mlp, mlp_batch_varying), "mlp_bn": (MLPBN, mlp_batch),
          "mlp_sizes": (mlp, mlp_batch_sizes), "mlp_autocast": (MLPAutocast, mlp_batch)}


def _comm_trace(log, done):
    """A DDP communication hook that records each bucket's all-reduce launch (in `log`) and
    completion (in `done`, from the future's callback) with the number of compiled backward
    pieces begun so far, and all-reduces as DDP's default does."""
    from pydynamo import aot

    def hook(state, bucket):
        index = bucket.index()
        log.append((index, aot.counters["backward_calls"]))
        t = bucket.buffer()
        t.div_(dist.get_world_size())

        def finished(f):
            done.append((index, aot.counters["backward_calls"]))
            return f.value()[0]
        return dist.all_reduce(t, async_op=True).get_future().then(finished)
    return hook


def train(rank, world, model="mlp", backend=None, bucket_cap_mb=None, steps=STEPS,
          accumulate=1, no_sync_steps=(), ddp_kwargs=None, options=None, config=None,
          trace=True, wrap="outer"):
    import pydynamo
    from pydynamo import aot, convert_frame, distributed
    for k, v in (config or {}).items():
        setattr(pydynamo.config, k, v)
    factory, make_batch = MODELS[model]
    torch.manual_seed(0)
    net = factory()
    torch.manual_seed(1 + rank)          # dropout's stream: per rank, the same in eager
    kwargs = dict(ddp_kwargs or {})
    if bucket_cap_mb is not None:
        kwargs["bucket_cap_mb"] = bucket_cap_mb
    if backend is not None and wrap == "inner":        # DDP(pydynamo.optimize(net))
        ddp = DDP(pydynamo.optimize(net, backend=backend, options=options), **kwargs)
    else:
        ddp = DDP(net, **kwargs)
    log: list = []
    done: list = []
    if trace:
        ddp.register_comm_hook(None, _comm_trace(log, done))
    if backend is None or wrap == "inner":
        step_fn = ddp
    elif backend.startswith("torch.compile:"):        # the reference: torch.compile's counts
        import torch._dynamo as dynamo
        dynamo.reset()
        dynamo.utils.counters.clear()
        step_fn = torch.compile(ddp, backend=backend.split(":", 1)[1])
    elif wrap == "step":                                # a compiled function that calls DDP
        step_fn = pydynamo.optimize(lambda **b: ddp(**b), backend=backend, options=options)
    else:                                               # pydynamo.optimize(DDP(net))
        step_fn = pydynamo.optimize(ddp, backend=backend, options=options)
    opt = torch.optim.SGD(ddp.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    frames = []
    warned = warnings.catch_warnings(record=True)
    caught = warned.__enter__()
    warnings.simplefilter("always")
    convert_frame.RECORDERS.append(frames.append)
    aot.counters.clear()
    losses, traces, completions, pieces = [], [], [], []
    for step in range(steps):
        opt.zero_grad(set_to_none=True)
        for micro in range(accumulate):
            batch = make_batch(gen, step, rank)
            sync = step not in no_sync_steps and micro == accumulate - 1
            ctx = ddp.no_sync() if not sync else _null()
            with ctx:
                start = aot.counters["backward_calls"]
                del log[:], done[:]
                loss = step_fn(**batch)
                loss.backward()
                traces.append([(b, n - start) for b, n in log])
                completions.append([(b, n - start) for b, n in done])
                pieces.append(aot.counters["backward_calls"] - start)
            losses.append(loss.detach())
        opt.step()
    convert_frame.RECORDERS.remove(frames.append)
    warned.__exit__(None, None, None)
    results = [f for f in frames if isinstance(f, convert_frame.FrameResult)]
    if backend is not None and backend.startswith("torch.compile:"):
        import torch._dynamo as dynamo
        results = [None] * dynamo.utils.counters["stats"]["unique_graphs"]
        frames = []
    return dict(losses=torch.stack(losses), params={k: v.detach().clone() for k, v in
                                                    net.state_dict().items()},
                graphs=sum(len(f.graphs) if f is not None else 1 for f in results),
                frames=len(results),
                traces=traces, completions=completions, pieces=pieces, counters=dict(aot.counters),
                guard_checks=distributed.counters["guard_checks"],
                ddp=dict(distributed.counters),
                warnings=sorted({str(w.message) for w in caught if "pydynamo" in str(w.message)}))


class _null:
    def __enter__(self):
        return self

    def __exit__(self, *a):
        return False


def train_kw(rank, world, model, backend, cap, kw):
    return train(rank, world, model, backend, cap, **kw)



def train_fsdp(rank, world, model="mlp", backend=None, steps=STEPS, bf16=False):
    """FSDP2: fully_shard on each layer (the MLP's Linears, GPT-2's blocks) and the root (CPU,
    gloo), bf16: MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=float32); returns
    losses, full parameters (gathered), graph counts, graph breaks and warnings."""
    import pydynamo
    from pydynamo import aot, convert_frame
    from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard
    factory, make_batch = MODELS[model]
    torch.manual_seed(0)
    net = factory()
    policy = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) \
        if bf16 else MixedPrecisionPolicy()
    layers = net.layers if model == "mlp" else net.model.transformer.h
    for layer in layers:
        fully_shard(layer, mp_policy=policy)
    fully_shard(net, mp_policy=policy)
    step_fn = net if backend is None else pydynamo.optimize(net, backend=backend)
    opt = torch.optim.SGD(net.parameters(), lr=0.05, momentum=0.9)
    gen = torch.Generator().manual_seed(100 + rank)
    frames = []
    warned = warnings.catch_warnings(record=True)
    caught = warned.__enter__()
    warnings.simplefilter("always")
    convert_frame.RECORDERS.append(frames.append)
    aot.counters.clear()
    losses = []
    try:
        for step in range(steps):
            opt.zero_grad(set_to_none=True)
            loss = step_fn(**make_batch(gen, step, rank))
            loss.backward()
            opt.step()
            losses.append(loss.detach())
    finally:
        convert_frame.RECORDERS.remove(frames.append)
        warned.__exit__(None, None, None)
    params = {k: v.full_tensor().detach().clone() if hasattr(v, "full_tensor") else v.detach().clone()
              for k, v in net.state_dict().items()}
    results = [f for f in frames if isinstance(f, convert_frame.FrameResult)]
    return dict(losses=torch.stack(losses), params=params, graphs=sum(len(f.graphs) for f in results),
                frames=len(results), counters=dict(aot.counters),
                breaks=[str(f.graph_break)[:200] for f in results if getattr(f, "graph_break", None)],
                warnings=sorted({str(w.message)[:300] for w in caught if "pydynamo" in str(w.message)}))


def fsdp_kw(rank, world, model, backend, bf16):
    return train_fsdp(rank, world, model, backend, bf16=bf16)

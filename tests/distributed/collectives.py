"""Collectives called inside compiled functions (module level, for the forkserver's ranks).

`run(rank, world, name, backend)` compiles the function `name` with pydynamo.optimize, calls it
3 times on a rank-dependent input and the uncompiled function on a copy, and returns both
results per call, the graphs compiled, the graph breaks and pydynamo's warnings.
"""
import torch, torch.distributed as dist, warnings
import torch.nn.functional as F

def f_allreduce(x):
    y = x * 2
    dist.all_reduce(y)
    return y + 1

def f_rank(x):
    if dist.get_rank() == 0:
        return x * 2
    return x * 3 + dist.get_world_size()

def f_allgather(x):
    out = [torch.empty_like(x) for _ in range(dist.get_world_size())]
    dist.all_gather(out, x * 2)
    return torch.cat(out) + 1

def f_fc(x):
    import torch.distributed._functional_collectives as fc
    return fc.all_reduce(x * 2, "sum", dist.group.WORLD) + 1

def run(rank, world, name, backend):
    import pydynamo
    from pydynamo import convert_frame
    fn = globals()[name]
    frames = []
    convert_frame.RECORDERS.append(frames.append)
    outs = []
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        cf = pydynamo.optimize(fn, backend=backend)
        for i in range(3):
            x = torch.arange(4.0) + rank + i
            try:
                outs.append((cf(x), fn(x.clone())))
            except Exception as e:
                outs.append(repr(e)[:300])
    results = [f for f in frames if isinstance(f, convert_frame.FrameResult)]
    return dict(outs=outs, graphs=sum(len(f.graphs) for f in results),
                breaks=[str(f.graph_break).split("\n")[0][-120:] for f in results if getattr(f, "graph_break", None)],
                warns=sorted({str(x.message)[:200] for x in w}))

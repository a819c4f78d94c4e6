"""torch.autocast regions in compiled code (CPU, bfloat16), shared by test_autocast.py and the
torch.compile reference it runs in a subprocess (both engines install a frame hook):

    python tests/executor/autocast_cases.py   # prints {case: graphs compiled} under torch.compile

Each case is called twice on fresh random inputs; `ambient` cases are called inside an ambient
autocast region (the caller's), then outside it.
"""
import contextlib
import json
import warnings

import torch
import torch.nn.functional as F

GRAPH_BREAK = [None]   # the engine's graph_break(), set by run()

BF16 = torch.bfloat16


def region(x, w):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ w
    return y.float() + 1


def region_amp(x, w):
    with torch.amp.autocast("cpu", dtype=BF16):
        y = torch.mm(x, w) + x.sum()
        z = F.linear(x, w.t())
        s = torch.softmax(y, -1)
    return y, z, s, (y + z).sum(-1)


def region_cpu_amp(x, w):
    with torch.cpu.amp.autocast():
        y = x @ w
    return y, y.dtype


def nested_disabled(x, w):
    with torch.autocast("cpu", dtype=BF16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            b = x @ w
        c = a @ w.t()
    return a, b, c


def return_inside(x, w):
    with torch.autocast("cpu", dtype=BF16):
        return (x @ w).relu()


def query_inside(x, w):
    with torch.autocast("cpu", dtype=BF16):
        if torch.is_autocast_enabled("cpu") and torch.get_autocast_dtype("cpu") == BF16:
            y = x @ w
        else:
            y = x - 1
    return y, torch.is_autocast_enabled("cpu")


def break_inside(x, w):
    with torch.autocast("cpu", dtype=BF16):
        y = x @ w
        GRAPH_BREAK[0]()
        z = y @ w.t()    # resumed code: still under autocast
    return y, z, z.float() + 1


def break_in_nested(x, w):
    with torch.autocast("cpu", dtype=BF16):
        a = x @ w
        with torch.autocast("cpu", enabled=False):
            GRAPH_BREAK[0]()
            b = x @ w
        c = a @ w.t()
    return a, b, c


@torch.autocast("cpu", dtype=BF16)
def _decorated(x, w):
    return x @ w


def decorated_inlined(x, w):
    return _decorated(x, w).float() * 2


def _mm(x, w):
    return x @ w


def decorator_in_frame(x, w):
    return torch.autocast("cpu", dtype=BF16)(_mm)(x, w) + 1


_W = torch.nn.Parameter(torch.randn(8, 8))


def with_grad(x, w):
    with torch.autocast("cpu", dtype=BF16):
        y = (x @ _W).sum(-1)
    return y.detach(), y.requires_grad, y.dtype


def plain(x, w):
    return x @ w + 1


# name: (function, called inside an ambient autocast first)
CASES = {f.__name__: (f, False) for f in (
    region, region_amp, region_cpu_amp, nested_disabled, return_inside, query_inside, break_inside,
    break_in_nested, decorated_inlined, decorator_in_frame, with_grad)}
CASES.update({"ambient_then_outside": (plain, True), "region_under_ambient": (region, True)})


def inputs(m=4):
    return torch.randn(m, 8), torch.randn(8, 8)


def same(got, want) -> bool:
    """Outputs and dtypes equal eager's (bf16 results compared at bf16 tolerance)."""
    if isinstance(want, (tuple, list)):
        return len(got) == len(want) and all(same(a, b) for a, b in zip(got, want))
    if isinstance(want, torch.Tensor):
        return got.dtype == want.dtype and got.shape == want.shape and \
            torch.allclose(got.float(), want.float(), rtol=1e-2, atol=1e-2)
    return got == want


def run(compile_fn, reset, graph_break, names=None, dynamic=None, errors_ok=False) -> dict:
    """{case: (graphs compiled, outputs and dtypes equal eager on every call)}; with `errors_ok`
    (the torch.compile reference) a case whose compiled call raises gives (None, the error)."""
    GRAPH_BREAK[0] = graph_break
    out = {}
    for name in names or CASES:
        fn, ambient = CASES[name]
        reset()
        graphs = []

        def backend(gm, example_inputs):
            graphs.append(gm)
            return gm.forward
        compiled = compile_fn(fn, backend, dynamic)
        try:
            ok = _calls(fn, compiled, ambient, dynamic)
        except Exception as e:  # noqa: BLE001 - the reference engine's own failure, reported
            if not errors_ok:
                raise
            out[name] = (None, f"{type(e).__name__}: {str(e).splitlines()[0][:200]}")
            continue
        out[name] = (len(graphs), ok)
    return out


def _calls(fn, compiled, ambient, dynamic) -> bool:
    """Calls `compiled` and `fn` on the same fresh inputs; do all results match?"""
    ok = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        calls = [("ambient", 4), ("ambient", 4), ("plain", 4), ("plain", 4)] if ambient else \
            [("plain", 4), ("plain", 6 if dynamic else 4), ("plain", 9 if dynamic else 4)]
        for where, m in calls:
            torch.manual_seed(m)
            args = inputs(m)
            ctx = torch.autocast("cpu", dtype=BF16) if where == "ambient" else contextlib.nullcontext()
            with ctx:
                got = compiled(*[a.clone() for a in args])
                want = fn(*[a.clone() for a in args])
            ok = ok and same(got, want)
    return ok


def torch_compile(fn, backend, dynamic):
    return torch.compile(fn, backend=backend, dynamic=dynamic)


if __name__ == "__main__":
    import torch._dynamo
    res = {"static": run(torch_compile, torch._dynamo.reset, torch._dynamo.graph_break, errors_ok=True),
           "dynamic": run(torch_compile, torch._dynamo.reset, torch._dynamo.graph_break,
                          names=["region_amp", "break_inside"], dynamic=True, errors_ok=True)}
    print(json.dumps(res))

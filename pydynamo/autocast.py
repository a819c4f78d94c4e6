"""torch.autocast as the executor models it: the autocast state a trace runs under, the graph
nodes that switch it, and metadata computed exactly as eager computes it under autocast.

Why: autocast changes the dtypes ops produce (a CPU matmul under bfloat16 autocast returns
bfloat16), decided in eager by the Autocast dispatch keys of the *inputs' device*. Meta tensors
carry no autocast key, so a plain meta run would answer float32. Here each meta tensor is wrapped,
for the one call, in a `_Probe`: a tensor subclass that reports the real device (so the dispatcher
applies that device's autocast rules, casts included) and does the work on the meta tensor inside
(`__torch_dispatch__`). The dtypes come from torch's own autocast, never from a copied op list.

State: a tuple `((device_type, enabled, dtype), ...)` over `DEVICES`. The graph records a region
as `enter_autocast(device_type, dtype, enabled, cache_enabled)` ... `exit_autocast(ctx)` nodes,
which use only the public `torch.amp.autocast` context; running the graph reproduces eager.
"""
from __future__ import annotations

import contextlib
import threading
from typing import Callable, Optional

import torch
from torch.utils._python_dispatch import TorchDispatchMode

# the devices whose autocast state the executor models; any other one enabled: not traced
DEVICES = ("cpu", "cuda")


def current() -> tuple:
    """The thread's autocast state, as the trace state (also a GLOBAL_STATE guard value)."""
    return tuple((d, torch.is_autocast_enabled(d), torch.get_autocast_dtype(d)) for d in DEVICES)


def guard_state():
    """The GLOBAL_STATE guard's value: None when no autocast is on (the cheap common case)."""
    return current() if torch._C._is_any_autocast_enabled() else None


def default_dtypes() -> tuple:
    """The dtypes a region entered without dtype= takes (per device)."""
    return tuple(torch.get_autocast_dtype(d) for d in DEVICES)


def any_enabled(state: tuple) -> bool:
    return any(enabled for _, enabled, _ in state)


_OTHER_DEVICES = ("xpu", "mps", "hpu", "xla", "ipu", "mtia", "maia", "privateuseone")


def modelled() -> bool:
    """False when autocast is on for a device the executor does not model (xpu, mps, ...)."""
    if not torch._C._is_any_autocast_enabled():
        return True
    for d in _OTHER_DEVICES:
        try:
            if torch.is_autocast_enabled(d):
                return False
        except (RuntimeError, ValueError):   # a device type this build does not know
            continue
    return True


def device_state(state: tuple, device_type: str) -> Optional[tuple]:
    """(enabled, dtype) of one device in `state`, or None for a device not modelled."""
    for d, enabled, dtype in state:
        if d == device_type:
            return enabled, dtype
    return None


def with_device(state: tuple, device_type: str, enabled: bool, dtype) -> tuple:
    return tuple((d, enabled, dtype) if d == device_type else (d, e, t) for d, e, t in state)


# --- graph nodes -----------------------------------------------------------------------------

_OPEN = threading.local()   # regions the graphs of this thread entered and have not left


def _open() -> list:
    stack = getattr(_OPEN, "stack", None)
    if stack is None:
        stack = _OPEN.stack = []
    return stack


def enter_autocast(device_type: str, dtype, enabled: bool, cache_enabled: Optional[bool]):
    """Graph node: enter an autocast region; returns the context for `exit_autocast`."""
    ctx = torch.amp.autocast(device_type, dtype=dtype, enabled=enabled, cache_enabled=cache_enabled)
    ctx.__enter__()
    _open().append(ctx)
    return ctx


def exit_autocast(ctx) -> None:
    """Graph node: leave the region `enter_autocast` opened."""
    stack = _open()
    if stack and stack[-1] is ctx:
        stack.pop()
    ctx.__exit__(None, None, None)


def open_regions() -> int:
    return len(_open())


def close_regions(mark: int) -> None:
    """Leave every region entered since `open_regions()` answered `mark`, innermost first: a
    graph that raises between its enter and exit nodes must not leak autocast past the call
    (eager's `with` would have left it)."""
    stack = _open()
    while len(stack) > mark:
        stack.pop().__exit__(None, None, None)


GRAPH_NODES = (enter_autocast, exit_autocast)


# --- metadata under autocast -----------------------------------------------------------------

@contextlib.contextmanager
def applied(state: tuple):
    """Run the body under `state` (caching off: a meta run must not fill eager's cast cache)."""
    with contextlib.ExitStack() as stack:
        for device_type, enabled, dtype in state:
            if (enabled, dtype) != (torch.is_autocast_enabled(device_type),
                                    torch.get_autocast_dtype(device_type)):
                stack.enter_context(torch.amp.autocast(device_type, dtype=dtype, enabled=enabled,
                                                       cache_enabled=False))
        yield


class _Probe(torch.Tensor):
    """A meta tensor that says it lives on `device`: the dispatcher's autocast layer for that
    device sees it (and casts it), then the op runs on the meta tensor inside."""

    @staticmethod
    def __new__(cls, elem: torch.Tensor, device):
        r = torch.Tensor._make_wrapper_subclass(
            cls, elem.shape, strides=elem.stride(), storage_offset=elem.storage_offset(),
            dtype=elem.dtype, device=device, requires_grad=elem.requires_grad)
        r.elem = elem
        return r

    __torch_function__ = torch._C._disabled_torch_function_impl

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        probes: list = []
        _map(lambda a: probes.append(a) if isinstance(a, _Probe) else None, (args, kwargs))
        device = probes[0].device
        by_elem = {id(p.elem): p for p in probes}
        with torch.no_grad():
            m_args, m_kwargs = _map(_unwrap, args), _map(_unwrap, kwargs)
            # eager's answer without torch's Python references where meta_direct knows it
            # (their first call imports torch's tracing frontend: seconds of a cold compile).
            # Imported here, not at the top: a warm-cache hit imports this module for its
            # autocast state and must not load meta_direct's tables (sympy) with it
            from pydynamo import meta_direct
            out = meta_direct.call_aten(func, m_args, m_kwargs)
        # an in-place op answers its input: hand back that very probe (identity, as in eager)
        def wrap(t):
            if not isinstance(t, torch.Tensor):
                return t
            p = by_elem.get(id(t))
            return p if p is not None else _Probe(t, device)
        return _map(wrap, out)


class _FactoriesOnMeta(TorchDispatchMode):
    """A tensor an op makes inside a probed call (`at::empty(..., query.options())` in CUDA
    attention) would be made on the probe's real device: it is made on meta and probed too."""


def _factories_dispatch(self, func, types, args=(), kwargs=None):
    kwargs = kwargs or {}
    device = kwargs.get("device")
    probes: list = []
    _map(lambda a: probes.append(a) if isinstance(a, _Probe) else None, (args, kwargs))
    if probes or device is None or torch.device(device).type == "meta":
        return func(*args, **kwargs)
    out = func(*args, **dict(kwargs, device=torch.device("meta")))
    return _map(lambda t: _Probe(t, torch.device(device)) if isinstance(t, torch.Tensor) else t, out)


# set after the class statement, as the training recorder's mode is (pydynamo/aot/recorder.py):
# torch wraps a __torch_dispatch__ defined in a mode's class body in a function whose first call
# imports torch's own tracing frontend, which pydynamo never runs under
_FactoriesOnMeta.__torch_dispatch__ = _factories_dispatch


def _unwrap(v):
    return v.elem if isinstance(v, _Probe) else v


def _map(fn, v):
    if isinstance(v, (list, tuple)) and not isinstance(v, torch.Size):
        items = [_map(fn, x) for x in v]
        return type(v)(items) if type(v) in (list, tuple) else type(v)(*items)
    if isinstance(v, dict):
        return {k: _map(fn, x) for k, x in v.items()}
    return fn(v)


def run_meta(state: tuple, fn: Callable, args, kwargs: dict, device_of: Callable):
    """fn(*args, **kwargs) over meta tensors as eager runs it under autocast `state`:
    `device_of(meta_tensor)` names each tensor's real device. Returns meta tensors (the inputs
    themselves where the op answers one of them)."""
    wrapped: dict = {}

    def wrap(t):
        if isinstance(t, torch.Tensor) and t.device.type == "meta":
            p = wrapped.get(id(t))
            if p is None:
                p = wrapped[id(t)] = _Probe(t, device_of(t))
            return p
        return t
    pargs, pkwargs = _map(wrap, args), _map(wrap, kwargs)
    originals = {id(p): t for t, p in ((p.elem, p) for p in wrapped.values())}
    with applied(state), _FactoriesOnMeta():
        out = fn(*pargs, **pkwargs)

    def unwrap(t):
        if not isinstance(t, _Probe):
            return t
        if id(t) in originals:
            return originals[id(t)]
        e = t.elem
        if t.requires_grad and not e.requires_grad:
            e = e.detach().requires_grad_(True)
        return e
    return _map(unwrap, out)

"""The Triton target's run-time steps, as codegen/runtime.py's CppRuntime is the C++ target's:
namespace(g) -> the wrapper's target-dependent names (the graph's device, its allocator, the
current stream), load(source, options) -> (kernels' module, path), bind(module, kernel, info, wp,
options) -> what the wrapper calls as the kernel (a TritonLauncher's launch, or the autotuned
kernel itself). gpu_wrapper.TritonBackend is this plus lowering and printing.

Invariant: a rebuilt Triton wrapper (a warm-cache hit, a wrapper run on its own:
codegen/run_wrapper.py) needs only this module, codegen/runtime.py and codegen/triton_launch.py
(and Triton): never the pipeline, its lowering or sympy (tests/cache/test_warm_hit_cost.py).
"""
from __future__ import annotations

import functools
from typing import Any, Dict

import torch

from codegen.runtime import allocator, ensure_layout
from codegen.triton_launch import TritonLauncher, current_stream, load_module


def _no_stream():
    return None       # the interpreter runs kernels on CPU tensors: no stream


class TritonRuntime:
    def __init__(self, device: torch.device):
        self.device = device
        self.devices = (device.type,)
        self.on_gpu = device.type == "cuda"

    def namespace(self, g) -> Dict[str, Any]:
        device = self.device
        return {"_device": device, "_allocator": allocator(device),
                "_ensure": functools.partial(ensure_layout, device=device),
                "_new_err": functools.partial(torch.zeros, 1, dtype=torch.int32, device=device),
                "_current_stream": current_stream if self.on_gpu else _no_stream}

    def load(self, source, options):
        return load_module(source)

    def bind(self, module, kernel, info, wp, options):
        fn, cfg = getattr(module, info.name), info.config
        if kernel.name not in wp.launch_kinds:
            return fn               # autotuned: Triton's own launch
        return TritonLauncher(fn, cfg.xblock, cfg.num_warps, wp.launch_kinds[kernel.name],
                              options.triton_fast_launch).launch

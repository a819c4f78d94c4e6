"""Running a generated wrapper file on its own (`python <wrapper file>`; codegen/standalone.py
writes the footer that calls `run`): its namespace rebuilt from the footer's spec through the
backends' own `load` and `bind`, random inputs and constants of the recorded layouts, the median
time per call printed."""
from __future__ import annotations

import sys
import time
from types import SimpleNamespace
from typing import Any, Dict, List

import torch

from codegen.options import Options
from codegen.runtime import CPP_RUNTIME, base_namespace
from codegen.standalone import _EVAL_NAMES, _random, resolve
from pydynamo.stages import lazy

# the Triton target's run-time half (not its lowering): a C++ wrapper rebuilt here never imports it
triton_runtime = lazy("codegen.triton_runtime")


def namespace(spec, fallbacks=None, constants=None, kernels_source=None, consts=None
              ) -> Dict[str, Any]:
    """The namespace pipeline.build executes a wrapper in, rebuilt from its footer's spec.
    A run on its own has no graph and no values: inputs that differ from the recorded ones are
    refused and constants are random. The warm cache (pydynamo/warm_cache.py) passes the real
    ones: `fallbacks` (runtime.fallbacks(gm): the eager escapes), `constants` (name -> tensor),
    `kernels_source` (the kernels' text: the file at kernels_path may not exist) and `consts`
    (the extern arguments themselves, where some have no evaluable text)."""
    options = Options(vector_width=spec["vector_width"],
                      triton_fast_launch=spec["fast_launch"])
    backend = CPP_RUNTIME if spec["backend"] == "cpp" else \
        triton_runtime.TritonRuntime(torch.device(spec["device"]))

    def refuse(*args, **kwargs):
        raise RuntimeError("the inputs differ from the recorded ones (this standalone run has no "
                           "graph to run them eagerly)")
    if consts is None:
        consts = [eval(t, dict(_EVAL_NAMES)) for t in spec["consts"]]
    # each distinct name resolved once (a warm hit's wrapper calls the same few ops many times;
    # a name whose head is a package, torch._addmm_activation, first misses a submodule search)
    resolved = {name: resolve(name) for name in set(spec["externs"])}
    ns = base_namespace(consts, [resolved[n] for n in spec["externs"]], {},
                        backend.namespace(None), *(fallbacks or (refuse, refuse)))
    for name, layout in spec["constants"].items():
        ns[name] = constants[name] if constants is not None else _random(*layout)
    if spec["kernels_path"]:
        src = kernels_source if kernels_source is not None else open(spec["kernels_path"]).read()
        module, _ = backend.load(src, options)
        for kname, b in spec["bindings"].items():
            if spec["backend"] == "cpp":
                wp = SimpleNamespace(arg_kind=b["kinds"].__getitem__)
                ns[kname] = backend.bind(module, SimpleNamespace(name=kname), b["args"], wp,
                                         options)
            else:
                info = SimpleNamespace(name=b["name"], config=SimpleNamespace(
                    xblock=b["xblock"], num_warps=b["num_warps"]))
                wp = SimpleNamespace(launch_kinds={kname: b["launch"]} if b["launch"] else {})
                ns[kname] = backend.bind(module, SimpleNamespace(name=kname), info, wp, options)
    return ns


def run(path: str, spec, calls: int = 20) -> float:
    """Execute the wrapper at `path` in its rebuilt namespace, call it on random inputs of the
    recorded layouts and print (and return) the median microseconds per call."""
    ns = namespace(spec)
    exec(compile(open(path).read(), path, "exec"), ns)
    args = [_random(*i[1:]) if i[0] == "tensor" else i[1] for i in spec["inputs"]]
    cuda = spec["device"].startswith("cuda")
    times: List[float] = []
    with torch.no_grad():
        for i in range(calls + 3):
            if cuda:
                torch.cuda.synchronize()
            t0 = time.perf_counter()
            ns["call"](*args)
            if cuda:
                torch.cuda.synchronize()
            if i >= 3:
                times.append((time.perf_counter() - t0) * 1e6)
    import statistics   # (a standalone run only: 25 ms of imports a warm-start hit skips)
    med = statistics.median(times)
    print(f"{path}: {med:.1f} us per call (median of {calls}, random inputs of the recorded "
          f"layouts, {spec['backend']} kernels on {spec['device']})")
    sys.stdout.flush()
    return med

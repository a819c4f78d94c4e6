"""The Triton backend of the one pipeline (codegen/pipeline.py): `TritonBackend`, its wrapper printer.

`compile_fx` asks `choose_backend(...)`; for CUDA example inputs or parameters, or
options backend_kernels="triton" (which with TRITON_INTERPRET=1 runs the Triton kernels on CPU
tensors, for tests), it is a `TritonBackend` on the graph's device, and `compile_graph` runs:
  lowering (same IR and lowerings as the C++ path; fp16/bf16 are in its dtypes; a device move
  refuses the graph; SDPA's output layout is probed on the device) -> the same scheduler ->
  codegen/triton.py kernels in one content-addressed module -> a wrapper printed by
  `GpuWrapperPrinter`, the CPU wrapper with device-aware allocation (torch's caching allocator)
  and Triton launches on the current stream; extern ops (mm, conv, ...) are torch's own calls
  (cuBLAS, cuDNN) -> optionally wrapped in CUDA-graph replay (codegen/cudagraphs.py).
Same never-a-wrong-answer contract as the C++ path: anything that cannot be printed runs the
graph eagerly with one warning. An out-of-range indirect index raises eager's exception on CPU
(the interpreter; codegen/runtime.py kernel_error) and trips a device-side assert on GPU (as
eager CUDA indexing does), never reads stray memory.
"""
from __future__ import annotations

import itertools
from typing import Dict

import torch

from codegen.cudagraphs import maybe_wrap
from codegen.ir import ComputedBuffer, ExternBuffer
from codegen.options import Options
from codegen.pipeline import CPP, Backend, counters
from codegen.scheduler import same_index
from codegen.sizevars import static_int
from codegen.triton import generate_source
from codegen.triton_launch import interpreting
from codegen.triton_runtime import TritonRuntime
from codegen.wrapper import FRESH_RESULT_EXTERNS, WrapperPrinter, _py, kernel_site



class GpuWrapperPrinter(WrapperPrinter):
    DEVICE_CHECK = "{a}.device != _device"
    DEVICE_EXPR = "str(_device)"

    def __init__(self, graph, steps, infos, on_gpu: bool):
        super().__init__(graph, steps, {n: i.arg_names for n, i in infos.items()},
                         {n: i.uses_err for n, i in infos.items()})
        self.infos = infos
        self.on_gpu = on_gpu
        # kernel name -> argument kinds of its TritonLauncher ("t" tensor, "i" int, "f" float)
        self.launch_kinds: Dict[str, str] = {}

    def _body(self):
        if self.infos:
            self.emit("_stream = _current_stream()")     # the launchers' stream, once a call
        super()._body()

    def _kernel(self, k, typed, free):
        self._in_place(k, typed)
        super()._kernel(k, typed, free)

    def _in_place(self, k, typed):
        """A pointwise kernel writes an output into an input that dies here (same bytes, each
        element read only where it is written): no allocation, and the stores land on lines
        the loads just brought into L2 (GELU after a matmul). The input must be ours: a
        buffer this wrapper allocated or a fresh matmul result, never a graph input, a
        parameter or an extern's possible view."""
        if k.has_inner or len(k.nodes) != 1:
            return
        node, i = k.nodes[0], self.step_index
        deps = node.reads(len(k.outer))
        if deps.indirect:
            return
        out = node.buf.name
        if out in k.removed:
            return
        lay = node.buf.layout
        store = node.store_index(len(k.outer))
        bounds = dict(zip(node.vars(len(k.outer))[0], k.outer))
        for r in deps.reads:
            b = self.g.buffers_by_name.get(r.name)
            fresh = (isinstance(b, ComputedBuffer) and r.name in self.allocated) or \
                (isinstance(b, ExternBuffer) and b.call.target in FRESH_RESULT_EXTERNS)
            if not fresh or r.name in typed or self.life.last_use.get(r.name) != i or \
                    b.dtype != node.buf.dtype or not b.layout.is_contiguous() or \
                    self._nbytes(r.name) != self._nbytes(out) or self._nbytes(out) is None:
                continue
            if out in typed and (list(b.layout.size) != list(lay.size) or
                                 list(b.layout.stride) != list(lay.stride)):
                continue        # an extern or the caller sees `out` with its own shape
            if any(o.name == r.name and not same_index(o.index, store, bounds) for o in deps.reads):
                continue
            var = self.alias.get(r.name, r.name)
            self.alias[out] = var
            self.allocated.add(out)
            self.assigned.add(out)
            self.allocated.discard(r.name)      # its memory lives on as `out`
            self.emit(f"{out} = {var}  # in place: {r.name} dies here")
            return

    def _launch(self, k):
        info = self.infos[k.name]
        xnumel = static_int(info.xnumel)
        if xnumel == 0:
            self.emit(f"# {k.name}: empty iteration space, nothing to launch")
            return
        for a in info.arg_names:
            if a != "pd_err":
                self.arg_kind(a)      # every parameter has a binding in the wrapper
        n = str(xnumel) if xnumel is not None else f"({_py(info.xnumel)})"
        indent = 1
        if xnumel is None:
            self.emit(f"if {n} > 0:")
            indent = 2
        args = ["_err" if a == "pd_err" else a for a in info.arg_names]
        if info.uses_err:
            self.emit("_err = _new_err()", indent)
        cfg = info.config
        if cfg.autotune and self.on_gpu:
            self.emit(f"{k.name}[lambda m: (({n} + m['XBLOCK'] - 1) // m['XBLOCK'],)]"
                      f"({', '.join(args)})", indent)
        else:
            # a TritonLauncher's launch (codegen/triton_launch.py): (stream, 3-D grid, arguments)
            grid = cfg.grid(xnumel) if cfg.tile or xnumel is not None else \
                (f"({n} + {cfg.xblock - 1}) // {cfg.xblock}",)
            grid = "(" + ", ".join(str(g) for g in tuple(grid) + (1, 1)[:3 - len(grid)]) + ")"
            self.launch_kinds[k.name] = "".join(
                "t" if a == "pd_err" else _LAUNCH_KIND[self.arg_kind(a)] for a in info.arg_names)
            self.emit(f"{k.name}(_stream, {grid}, {', '.join(args)})"
                      f"  # XBLOCK={cfg.xblock}, num_warps={cfg.num_warps}", indent)
        if info.uses_err:
            where = f"{k.name} ({', '.join(o.name for o in k.origins())})"
            if self.on_gpu:   # no host sync (keeps CUDA graphs capturable); eager CUDA asserts too
                self.emit("torch._assert_async(_err == 0)" + f"  # bad index or zero divisor in {where}",
                          indent)
            else:
                self.emit("if _err.item():", indent)
                self.emit(f"_kernel_error(int(_err.item()), "
                          f"{self.const(kernel_site(k.name, k.origins()))})", indent + 1)


_LAUNCH_KIND = {"ptr": "t", "size": "i", "scalar": "f"}


def _device_move(gm, device):
    """The first node that names another device (x.to("cpu"), x.cpu(), device=...), or None.
    The kernels write every buffer on the graph's device, so such a graph runs eagerly."""
    for n in gm.graph.nodes:
        if n.op == "call_method" and n.target in ("cpu", "cuda") and n.target != device.type:
            return n.format_node()
        for a in list(n.args) + list(n.kwargs.values()):
            try:
                d = torch.device(a) if isinstance(a, str) else a
            except RuntimeError:        # a string that names no device
                continue
            if isinstance(d, torch.device) and d.type != device.type:
                return n.format_node()
    return None


class TritonBackend(TritonRuntime, Backend):
    """Triton kernels (codegen/triton.py) in one module, launched on the graph's device (CPU
    tensors under TRITON_INTERPRET=1), and the GPU wrapper printer; its run-time steps
    (namespace, load, bind) are TritonRuntime's (codegen/triton_runtime.py: what a warm hit
    imports instead of this module)."""
    name = "triton"
    row_scratch = False
    pad_gemm_operands = True
    gemm_bias_min_numel = None      # cuBLAS's bias: only where the product is written anyway
    split_reductions = True
    recompute_shared = True
    source_attributes = True

    def refuse(self, gm):
        if not self.on_gpu and not interpreting():
            # backend_kernels="triton" on CPU tensors: compiled Triton cannot read them (it
            # raised from the launch, where eager returns: H100 host, tests/codegen_triton)
            return "Triton kernels run on CUDA tensors (CPU tensors only under TRITON_INTERPRET=1)"
        moved = _device_move(gm, self.device)
        return moved and f"{moved} moves a tensor off the graph's device ({self.device})"

    def print_kernels(self, kernels, buffers, options):
        return generate_source(kernels, buffers, options.autotune and self.on_gpu)

    def wrapper(self, g, steps, infos):
        wp = GpuWrapperPrinter(g, steps, infos, self.on_gpu)
        wp.out_reuse = self.gemm_out_reuse
        return wp

    def wrapper_source(self, wp, g, title):
        src = wp.generate(title)
        if not g.size_bindings:     # for the CUDA-graph runner (the interpreter's tests use it too)
            src += "\n\n" + wp.matches_source()
        return src

    def binding_spec(self, kernel, info, wp) -> dict:
        return {"name": info.name, "xblock": info.config.xblock,
                "num_warps": info.config.num_warps, "launch": wp.launch_kinds.get(kernel.name)}

    def source_path(self, kpath):
        return kpath            # the module is its source

    def finish(self, call, gm, g, options, stats, ns):
        if self.on_gpu:
            call = maybe_wrap(call, gm, g, options, stats, ns.get("matches"))
        return call


def choose_backend(gm, example_inputs, options: Options) -> Backend:
    """Triton on the graph's device when an input, parameter or buffer is on CUDA (or
    backend_kernels="triton": on CPU tensors under TRITON_INTERPRET=1), else C++."""
    tensors = [x for x in example_inputs if isinstance(x, torch.Tensor)]
    cuda = next((t.device for t in itertools.chain(tensors, gm.parameters(), gm.buffers())
                 if t.is_cuda), None)
    if options.backend_kernels == "cpp" or (cuda is None and options.backend_kernels is None):
        return CPP
    counters["triton_path"] += 1
    return TritonBackend(cuda or torch.device("cpu"))

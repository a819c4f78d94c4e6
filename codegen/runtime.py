"""What a generated wrapper calls at run time, apart from its kernels: the names every wrapper's
namespace holds (`base_namespace`: errors raised as eager raises them, the layout check of extern
results, the eager escapes `fallbacks`), and the C++ target's loading and binding of its kernel
library (`CppRuntime`, the run-time half of pipeline.Backend).

A wrapper rebuilt without compiling (a warm-start hit, pydynamo/warm_cache.py; a wrapper run on
its own, codegen/run_wrapper.py) needs this module and codecache only: nothing here imports the
lowering (sympy, the IR, the printers), so such a process never loads it. `counters` are the
pipeline's counters (graphs compiled, eager escapes taken), kept here so the escapes count
without it.
"""
from __future__ import annotations

import collections
import ctypes
import logging
import warnings
from typing import Any, Dict, Optional

import torch

from codegen import codecache
from pydynamo import tensor_check
from pydynamo.user_errors import raise_at

log = logging.getLogger("pydynamo.codegen")

counters: collections.Counter = collections.Counter()

# the codes a kernel's error flag holds (codegen/ops.py flags them, kernel_error raises them as
# eager's exception): an out-of-range index of a gather/scatter-family op (eager: RuntimeError), a
# zero integer divisor, an out-of-range index of index_select/embedding (eager: IndexError "index
# out of range in self")
ERR_INDEX, ERR_ZERO_DIV, ERR_INDEX_IN_SELF = 1, 2, 3

CTYPES_BY_KIND = {"ptr": ctypes.c_void_p, "size": ctypes.c_int64, "scalar": ctypes.c_double}


class CppRuntime:
    """The C++/OpenMP target's run-time steps: namespace(g) -> the wrapper's target-dependent
    names, load(source, options) -> (library, path) (codecache's verified cache: a hit compiles
    nothing), bind(library, kernel, arg names, wp, options) -> the ctypes function the wrapper
    calls. pipeline.Backend (the C++ target) is this plus lowering and printing."""

    def namespace(self, g) -> Dict[str, Any]:
        return {"_allocator": allocator(torch.device("cpu")), "_ensure": ensure_layout}

    def load(self, source, options):
        return codecache.load_library(source, options.vector_width)

    def bind(self, lib, kernel, arg_names, wp, options):
        fn = getattr(lib, kernel.name)
        fn.argtypes = [CTYPES_BY_KIND[wp.arg_kind(a)] for a in arg_names]
        fn.restype = ctypes.c_int
        return fn


CPP_RUNTIME = CppRuntime()


def base_namespace(consts, externs, scalar_fns, backend_ns, eager_grad, mismatch) -> Dict[str, Any]:
    """What every wrapper's code refers to besides its kernels and constants (also rebuilt by a
    wrapper run on its own: codegen/standalone.py)."""
    entry, make_specs = entry_check()
    return {"torch": torch, "_consts": consts, "_externs": externs,
            "_grad_enabled": torch.is_grad_enabled, "_kernel_error": kernel_error,
            "_extern_error": extern_error, "_ShapeMismatch": ShapeMismatch,
            "_scalar_fns": scalar_fns, **backend_ns, "_eager_grad": eager_grad,
            "_mismatch": mismatch, "_entry": entry, "_make_entry_specs": make_specs}


def allocator(device: torch.device):
    """`_allocator(dtype)`, which a wrapper calls once per dtype it allocates when it loads:
    a bound `new_empty_strided(size, stride)` of an empty tensor of that dtype on the graph's
    device (the same tensor `torch.empty_strided(size, stride, dtype=, device=)` makes,
    without parsing the dtype and device keywords on every allocation: 0.94 against 1.19 us
    on the idle 2-core CPU, benchmarks/host_calls.py)."""
    return lambda dtype: torch.empty(0, dtype=dtype, device=device).new_empty_strided


def entry_check():
    """(entry, make_specs): a wrapper's entry check of all its tensor inputs in one call,
    `_entry(tensors, _entry_specs, grad)` with `_entry_specs = _make_entry_specs(rows)` made
    when the wrapper loads (rows: (dtype, device string, sizes, strides), None = any size).
    Returns -2 for autograd's path (grad mode on and grad == 2, or grad == 1 and an input
    requires grad), the index of the first input whose dtype, device, sizes (rank) or strides
    differ, or -1. The C++ tensor check's `entry` where it is built (pydynamo/tensor_check.py);
    otherwise the specs are a straight-line Python function of the same predicate."""
    mod = tensor_check.module()
    if mod is None:
        return _python_entry, _python_specs
    return mod.entry, lambda rows: tuple(
        mod.make_spec(torch.Tensor, dt, dev, sizes, strides, False, False, -1, -1)
        for dt, dev, sizes, strides in rows)


def _python_entry(tensors, specs, grad) -> int:
    return specs(tensors, grad)


def _python_specs(rows):
    lines = ["def check(ts, grad):",
             "    if grad and _grad_enabled() and (grad == 2 or any(getattr(t, 'requires_grad', "
             "False) for t in ts)):",
             "        return -2"]
    consts = {"_T": torch.Tensor, "_grad_enabled": torch.is_grad_enabled}
    for i, (dt, dev, sizes, strides) in enumerate(rows):
        consts[f"_dt{i}"], consts[f"_dev{i}"] = dt, torch.device(dev)
        conds = ["not isinstance(t, _T)", f"t.dtype is not _dt{i}", f"t.device != _dev{i}"]
        if None not in sizes and None not in strides:
            conds += [f"t.shape != {tuple(sizes)}", f"t.stride() != {tuple(strides)}"]
        else:
            conds.append(f"t.dim() != {len(sizes)}")
            conds += [f"t.shape[{d}] != {n}" for d, n in enumerate(sizes) if n is not None]
            conds += [f"t.stride({d}) != {n}" for d, n in enumerate(strides) if n is not None]
        lines += [f"    t = ts[{i}]", f"    if {' or '.join(conds)}:", f"        return {i}"]
    exec("\n".join(lines + ["    return -1", ""]), consts)
    return consts["check"]


def fallbacks(gm):
    """The two eager escapes every generated wrapper calls from its entry check."""
    warned = []      # once per reason: "grad", None (inputs differ) or a size relation

    def eager_grad(*args):
        counters["eager_grad_calls"] += 1
        if "grad" not in warned:
            warned.append("grad")
            log.info("codegen: inputs require grad under grad mode; running %s eagerly",
                     type(gm).__name__)
        return gm(*args)

    def mismatch(*args, why=None, error=False):
        if error:    # a kernel or extern raised: eager's partial in-place updates, its error
            counters["error_replays"] += 1
            return gm(*args)
        counters["input_mismatch_calls"] += 1
        if why is not None:      # a size relation the kernels were compiled under
            counters["size_assumption_calls"] += 1
        if why not in warned:
            warned.append(why)
            what = ("sizes break the relation the kernels were compiled under: " + why) if why \
                else "inputs differ from the compiled ones (shape/stride/dtype/device/aliasing)"
            warnings.warn(f"pydynamo codegen: {what}; running the graph eagerly", stacklevel=3)
        return gm(*args)
    return eager_grad, mismatch


# What eager raises when an index tensor holds a value outside the indexed dimension, by
# canonical op (kernels flag code 1 without the value, so the message keeps eager's wording
# minus the value): gather/scatter-family ops raise RuntimeError, index_select and embedding
# IndexError("index out of range in self"), Python-style indexing IndexError.
_INDEX_ERRORS = {
    "gather": RuntimeError, "scatter": RuntimeError, "scatter_add": RuntimeError,
    "scatter_reduce": RuntimeError, "index_add": RuntimeError, "take_along_dim": RuntimeError,
    "index_select": "in self", "embedding": "in self",
}


class KernelSite:
    """Where a kernel's error flag came from: the kernel and the FX nodes fused into it, each as
    (name, canonical op, the user's source lines -- `File "f.py", line 3, in fn` lines, outermost
    first, the calls the node was inlined through included --, (dim, size) of an indexed
    dimension or None);
    built by codegen/wrapper.py kernel_site, kept in the wrapper's constants."""

    def __init__(self, kernel: str, nodes):
        self.kernel = kernel
        self.nodes = nodes

    def __str__(self):
        return f"{self.kernel} ({', '.join(n[0] for n in self.nodes)})"


def kernel_error(code: int, where):
    """Raise what eager raises for the condition a kernel flagged (`where`: a KernelSite, or
    the kernel's name). The exception's traceback ends in frames at the user's lines of the
    op that flagged it (the first indexing or dividing op fused into the kernel) and of the
    calls it was inlined through, as eager's would; a note names the compiled kernel."""
    site = None if isinstance(where, str) else where
    node = None
    if code == ERR_ZERO_DIV:
        exc = RuntimeError("ZeroDivisionError")
        if site is not None:
            node = next((n for n in site.nodes if n[1] in ("floor_divide", "remainder", "fmod",
                                                         "div", "floordiv", "mod")), None)
    else:
        # the code names the family of the op whose index was out of range (a kernel may fuse
        # a gather and an index_select): the first fused op of that family flagged it
        want = "in self" if code == ERR_INDEX_IN_SELF else RuntimeError
        if site is not None:
            node = next((n for n in site.nodes if _INDEX_ERRORS.get(n[1]) == want), None)
        kind = _INDEX_ERRORS.get(node[1]) if node is not None else None
        if node is None and code == ERR_INDEX_IN_SELF:
            kind = "in self"
        if kind == "in self":
            exc = IndexError("index out of range in self")
        else:
            dim = f" for dimension {node[3][0]} with size {node[3][1]}" \
                if node is not None and node[3] else ""
            cls = kind if kind is RuntimeError else IndexError
            exc = cls(f"index is out of bounds{dim}")
    if node is None and site is not None:
        node = next((n for n in site.nodes if n[2]), None)
    exc.add_note(f"(raised by the compiled kernel {where})")
    src = node[2] if node is not None else ""
    exc._pydynamo_placed, exc._pydynamo_src = True, src
    if src:
        _raise_at(exc, src)
    raise exc


def _source_lines(text: str, stacks: Optional[Dict[str, str]] = None) -> Dict[int, str]:
    """Wrapper line number -> the user's source lines of the step it belongs to (from the
    `# node   [File "f.py", line 3, in fn]` comment opening each step: `stacks[comment]`, the
    node's whole stack, outermost first, where given, else the comment's innermost line)."""
    out, cur = {}, ""
    for n, ln in enumerate(text.splitlines(), 1):
        s = ln.strip()
        if s.startswith("# ") and s.endswith("]") and "[File " in s:
            cur = (stacks or {}).get(s) or s[s.rindex("[File ") + 1:-1]
        elif s and not s.startswith("#"):
            out[n] = cur
    return out


def extern_error(exc, sources: Dict[int, str], replay=None):
    """An extern op raised inside the wrapper: raise `exc` itself (eager's exception, as the op
    raised it) from frames at the user's lines of the op (and of the calls it was inlined
    through); a kernel's error is placed already.
    `replay` (graphs writing inputs in place, whose write-backs had not run yet): run the graph
    eagerly instead, so the inputs hold eager's updates before the failing op, and raise its
    exception from the same user line (or return its result, should eager not raise)."""
    src = getattr(exc, "_pydynamo_src", None)
    if src is None:
        tb, line = exc.__traceback__, None
        while tb is not None:       # the wrapper's frame: its line is the failing extern call
            if tb.tb_frame.f_code.co_name == "call" and \
                    tb.tb_frame.f_globals.get("_extern_error") is extern_error:
                line = tb.tb_lineno
            tb = tb.tb_next
        src = sources.get(line, "") if line is not None else ""
    if replay is not None:
        try:
            return replay()
        except Exception as e:
            e.__suppress_context__ = True     # not "during handling of" the compiled error
            exc = e
    elif getattr(exc, "_pydynamo_placed", False):
        return
    exc._pydynamo_placed, exc._pydynamo_src = True, src
    if src:
        _raise_at(exc, src)
    if replay is not None:
        raise exc


def _raise_at(exc, src: str):
    """Raise `exc` from frames at the user's file:line lines (pydynamo/user_errors.py, shared with
    the executor's graphs); a source that is no `File ...` line goes into a note."""
    raise_at(exc, src)
    exc.add_note(f"  {src}")
    raise exc


class ShapeMismatch(Exception):
    """An extern op returned another shape than the kernels were compiled for."""


def _same_but_unit_dims(got, want, size) -> bool:
    """Strides equal but in dims of size 1, whose stride no index reads: a symbolic plan guessed
    such a stride at the hints (`s0*s1` as 24: an extern's `new_empty_strided` / `as_strided`
    of a joint recorded over size symbols), and a backward, which cannot replay eagerly, raised
    at the next size (tests/aot/test_dynamic_view_writes.py)."""
    return len(got) == len(want) and all(a == b or n == 1 for a, b, n in zip(got, want, size))


def ensure_layout(t, size, stride, dtype, view=False, device=None):
    """Pin an extern result to the layout (and, given one, the device) the kernels were compiled
    for (copy if it differs; `view`: a view result of another layout is a wrong plan, the graph
    runs eagerly). The GPU wrapper binds `device`."""
    if t.shape != size:
        raise ShapeMismatch
    if (t.stride() == stride or _same_but_unit_dims(t.stride(), stride, size)) and \
            t.dtype is dtype and (device is None or t.device == device):
        return t
    if view and t._is_view():
        raise ShapeMismatch
    out = torch.empty_strided(size, stride, dtype=dtype, device=device)
    if t.device.type == "cpu" and out.device.type != "cpu":
        # a CPU result on a GPU graph (the fused attention's 0-d random-state tensors without
        # dropout): copied without waiting for the queued GPU work, which a plain copy does (a
        # host stall per call); the source is this call's own fresh tensor, staged at once
        counters["extern_device_copies"] += 1
        out.copy_(t, non_blocking=True)
        return out
    # a copy on every call (a device pass over the result): the compile-time layout was a
    # guess the device's kernel does not follow; benchmarks print the count
    counters["extern_layout_copies"] += 1
    out.copy_(t)
    return out

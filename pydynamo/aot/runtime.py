"""Running a recorded, partitioned graph under autograd, and replaying eager around it.

One `torch.autograd.Function` per compiled graph: its forward runs the compiled forward graph
(grad mode off, as in any Function) and saves what the partition saved; its backward runs the
compiled backward graph, compiled at the first `.backward()` from the real saved tensors and
tangents (so it is specialized to the strides the forward produced; the compiled code re-checks
them per call) and cached. An output the loss does not reach gets None from autograd, not an
output-sized tensor of zeros (`set_materialize_grads(False)`): a call with absent tangents runs a
backward variant compiled for that set, with zeros filled inside its kernels. A backward with
create_graph=True (double backward) raises a clear
error: the compiled backward is not differentiable, and gradients without history would make
a second derivative silently zero.

Around the Function, the epilogue replays what eager would have done to the user's tensors:
  * a graph input written in place gets its final value copied in (`x.copy_(new)`, under the
    caller's grad mode: autograd records the write exactly as an in-place op, and the version
    counter moves);
  * an output that is an input is that input; an output that is a view of an input is rebuilt
    as a view of the real input (after the writes), one that views another output as a view of
    that output, so `_base`, storage and version counter are eager's.
A call whose inputs share storage where the graph writes one of them runs with eager autograd
(the recorded graph assumed them distinct), as does a graph the recorder refused.

Dynamic graphs: a forward graph with symbolic sizes is recorded over its size symbols
(recorder.py) and its compiled joint serves every input signature (sizes and strides of tensor
inputs, values of int inputs) its `sizes.admits`; a signature none admits, or a graph recorded at
concrete sizes, gets a joint recorded on the first call that needs it ("joint_recompiles").
"""
from __future__ import annotations

import collections
import contextlib
import copy
import math
import warnings
from typing import Callable, Dict, List, Optional

import torch
import torch.fx

from pydynamo import _C, logs, phases
from pydynamo.aot.partition import fit_unit_strides, nbytes, partition, shape_arg
from pydynamo.aot.recorder import Joint, Unsupported, record

# tests and benchmarks read these: "joint_graphs" (graphs compiled for training),
# "backward_compiled", "backward_calls", "eager_fallback" (graphs that run with eager autograd),
# "joint_recompiles" (a dynamic graph recorded again for new sizes), "error_replays" (a
# compiled forward raised and the graph ran eagerly to raise eager's error),
# "backward_zero_tangents" (backward variants compiled for calls where outputs got no gradient)
# "joint_concrete" (a graph with symbolic sizes or int inputs recorded at concrete sizes)
counters: collections.Counter = collections.Counter()


@contextlib.contextmanager
def autocast_off():
    """The recorded graphs hold autocast's casts as ops: they run (and compile) with autocast off,
    so an ambient region does not cast them again."""
    if not torch._C._is_any_autocast_enabled():
        yield
        return
    with contextlib.ExitStack() as stack:
        for device in ("cpu", "cuda"):
            if torch.is_autocast_enabled(device):
                stack.enter_context(torch.autocast(device, enabled=False))
        yield


def needs_autograd(example_inputs) -> bool:
    """The training path: grad mode on and a tensor input that requires grad (guards pin both)."""
    return torch.is_grad_enabled() and any(
        isinstance(x, torch.Tensor) and x.requires_grad for x in example_inputs)


class CompiledJoint:
    """One recorded joint graph, its compiled forward and (lazily) backward."""

    def __init__(self, joint: Joint, example_inputs, fw_compiler, bw_compiler, name: str,
                 split_statistics: bool = False):
        """bw_compiler None: an inference graph (recorded without autograd): the forward runs
        bare, no Function. split_statistics: the compilers fuse (partition.py's flag)."""
        self.joint = joint
        self.name = name
        self.signature = _signature(example_inputs)
        with phases.phase("graph passes"):
            fw_gm, bw_gm, saved, positions, recompute = partition(
                joint.gm, len(joint.computed), joint.num_tangents, joint.num_inputs,
                {i for i, *_ in joint.mutated}, split_statistics)
        self.fw_gm, self.bw_gm = fw_gm, bw_gm
        self.num_saved = len(saved)
        self.saved_bytes = sum(nbytes(s) for s in saved if s.op != "placeholder")
        self.recomputed = len(recompute)
        self.grad_positions = positions
        self.bw_compiler = bw_compiler
        self.bw = None
        self.bw_variants: Dict[tuple, Callable] = {}
        # absent tangents -> (graph, what bw_compiler returned for it): the warm cache stores them
        self.bw_compiled: Dict[tuple, tuple] = {}
        # called with self once a backward (the full one or a variant) is compiled
        self.on_backward: List[Callable] = []
        if logs.enabled("aot"):
            logs.log("aot", "%s joint graph:\n%s", name, joint.gm.code)
            logs.log("aot", "%s forward graph:\n%s", name, fw_gm.code)
            logs.log("aot", "%s backward graph (%d saved, %d recomputed):\n%s", name,
                     len(saved), len(recompute), bw_gm.code)
        # an inference graph: the compiler may write a written-back output into its input
        # (the copy below is then onto itself); a training forward's inputs stay unwritten
        extra = {"written_back": tuple((k, i) for i, k, bumps in joint.mutated if bumps)} \
            if bw_compiler is None and joint.mutated else {}
        with autocast_off():
            self.fw = fw_compiler(fw_gm, list(example_inputs), **extra)
        self.function = self._make_function() if bw_compiler is not None else None

    def _make_function(self):
        compiled = self
        joint = self.joint
        n_computed = len(joint.computed)
        diff = joint.differentiable
        nondiff = [k for k, d in enumerate(diff) if not d]
        n_inputs = joint.num_inputs

        class CompiledFunction(torch.autograd.Function):
            @staticmethod
            def forward(ctx, *args):
                with autocast_off():
                    outs = compiled.fw(*args)
                computed, saved = _own_roots(outs[:n_computed], outs[n_computed:])
                tensors = [s for s in saved if isinstance(s, torch.Tensor)]
                ctx.save_for_backward(*tensors)
                ctx.saved_layout = [isinstance(s, torch.Tensor) for s in saved]
                ctx.saved_other = [s for s in saved if not isinstance(s, torch.Tensor)]
                ctx.mark_non_differentiable(*[computed[k] for k in nondiff])
                # an output the loss does not reach gets None, not a tensor of zeros the size
                # of the output (the backward variant for it fills zeros inside its kernels)
                ctx.set_materialize_grads(False)
                return tuple(computed)

            @staticmethod
            def backward(ctx, *grads):
                if torch.is_grad_enabled():
                    # create_graph=True: the compiled backward is not itself differentiable;
                    # grads without history would make a second derivative silently zero
                    raise RuntimeError(
                        "pydynamo: backward with create_graph=True (double backward) through a "
                        "compiled graph is not supported; run this function without "
                        "pydynamo.optimize (or under pydynamo.disable) when it needs higher-order "
                        "gradients")
                counters["backward_calls"] += 1
                tensors, others = iter(ctx.saved_tensors), iter(ctx.saved_other)
                args = [next(tensors) if t else next(others) for t in ctx.saved_layout]
                del tensors
                tangents = [g for g, d in zip(grads, diff) if d]
                absent = tuple(k for k, g in enumerate(tangents) if g is None)
                args += [g.contiguous() for g in tangents if g is not None]
                del grads, tangents
                # without retain_graph, autograd drops the saved tensors once this returns: drop
                # them now, so the compiled backward (which empties `args`) frees each one at
                # its last use, as eager's backward frees a node's saved tensors after it runs
                ctx.maybe_clear_saved_tensors()
                prev = _C.set_eval_frame(None)
                try:
                    with autocast_off():
                        out = compiled.backward_for(absent, args)(args)
                finally:
                    _C.set_eval_frame(prev)
                result: List[Optional[torch.Tensor]] = [None] * n_inputs
                for pos, g in zip(compiled.grad_positions, out):
                    result[pos] = g
                return tuple(result)

        return CompiledFunction

    def backward_for(self, absent: tuple, example_args: list) -> Callable:
        """The backward's callable for a call whose tangents at positions `absent` (among the
        differentiable outputs) are None, compiled at its first use from `example_args`: it
        takes one list of saved values and the present tangents (emptied by a boxed codegen
        wrapper, which frees each at its last use; copied by any other). The usual call has
        every tangent (`self.bw`); an output the loss does not reach (a key/value cache, logits
        returned beside the loss) gets a variant whose graph fills that tangent with zeros, so
        no output-sized buffer of zeros is allocated for it."""
        if not absent:
            if self.bw is None:
                self.bw = self._compile_backward(self.bw_gm, example_args)
                for hook in self.on_backward:
                    hook(self)
            return self.bw
        fn = self.bw_variants.get(absent)
        if fn is None:
            counters["backward_zero_tangents"] += 1
            fn = self.bw_variants[absent] = self._compile_backward(
                _zero_tangents(self.backward_graph(), self.num_saved, absent), example_args, absent)
            for hook in self.on_backward:
                hook(self)
        return fn

    def backward_graph(self) -> torch.fx.GraphModule:
        """bw_gm; a loaded joint's is read from the warm cache at its first use (a variant)."""
        if callable(self.bw_gm) and not isinstance(self.bw_gm, torch.nn.Module):
            self.bw_gm = self.bw_gm()
        return self.bw_gm

    def _compile_backward(self, gm, example_args: list, absent: tuple = ()) -> Callable:
        if self.joint.sizes is not None:
            fit_unit_strides(gm, example_args)
        fn = self.bw_compiler(gm, list(example_args))
        self.bw_compiled[absent] = (gm, fn)
        counters["backward_compiled"] += 1
        boxed = getattr(fn, "boxed_entry", None)
        return boxed if boxed is not None else lambda args: fn(*args)

    @classmethod
    def loaded(cls, joint: Joint, fw: Callable, bw: Optional[Callable], bw_gm, grad_positions: list,
               num_saved: int, bw_compiler: Optional[Callable], name: str) -> "CompiledJoint":
        """A joint an earlier process recorded, partitioned and compiled, rebuilt by the warm cache
        (pydynamo/warm_cache.py) from its parts: `fw` and `bw` (the backward as
        `_compile_backward` returns it; None with `bw_compiler` None: an inference graph) run
        as they did there; `bw_compiler` compiles a backward variant (absent tangents) from the
        backward graph `bw_gm` returns, if one is needed."""
        self = cls.__new__(cls)
        self.joint, self.name, self.signature = joint, name, None
        self.fw_gm, self.bw_gm, self.fw, self.bw = None, bw_gm, fw, bw
        self.num_saved, self.saved_bytes, self.recomputed = num_saved, 0, 0
        self.grad_positions = grad_positions
        self.bw_compiler, self.bw_compiled = bw_compiler, {}
        self.bw_variants, self.on_backward = {}, []
        self.function = self._make_function() if bw_compiler is not None else None
        return self

    def __call__(self, *args):
        joint = self.joint
        if self.function is not None:
            computed = self.function.apply(*args)
        else:
            with autocast_off():
                computed, _ = _own_roots(self.fw(*args), ())
        for i, k, bumps in joint.mutated:
            # `.data` shares the storage, not the version counter: batch norm's running
            # statistics change in eager without a version bump
            (args[i] if bumps else args[i].data).copy_(computed[k])
        if joint.view_bases:
            computed = list(computed)
            for k, (size, stride) in joint.bases(args).items():
                c = computed[k]
                if c.stride() != stride or c.storage_offset() != 0:
                    # views are rebuilt on the recorded layout: a compiled forward that laid the
                    # base out otherwise gets it copied into that layout (differentiably)
                    computed[k] = torch.empty_strided(size, stride, dtype=c.dtype,
                                                      device=c.device).copy_(c)
        outs = []
        for kind, what in joint.user_outputs:
            if kind == "computed":
                outs.append(computed[what])
            elif kind == "const":
                outs.append(what)
            else:
                outs.append(_alias(what, args, computed))
        return tuple(outs)


def _own_roots(computed, saved):
    """Each computed value is a storage root in eager (no `_base`: recorder.py's `user_outputs`),
    but a backend may hand one out as a view of memory of its own (codegen's `as_strided` of a
    functionalized write's flat base). Such a value becomes a tensor of its own over that storage
    (autograd forbids in-place writes through views a Function returns; the caller would see a
    `_base`), and every saved tensor on the same storage a view of it, so an in-place write to
    the output still bumps the version counter autograd checks the saved one against."""
    if not any(isinstance(c, torch.Tensor) and c._base is not None for c in computed):
        return computed, saved
    computed, saved = list(computed), list(saved)
    for k, c in enumerate(computed):
        if not isinstance(c, torch.Tensor) or c._base is None:
            continue
        storage = c.untyped_storage()
        own = c.new_empty(0).set_(storage, c.storage_offset(), c.shape, c.stride())
        computed[k] = own
        for j, t in enumerate(saved):
            if isinstance(t, torch.Tensor) and t.untyped_storage()._cdata == storage._cdata:
                saved[j] = own.as_strided(t.shape, t.stride(), t.storage_offset())
    return computed, saved


def _zero_tangents(bw_gm: torch.fx.GraphModule, num_saved: int, absent: tuple):
    """A copy of the backward graph whose tangent placeholders at `absent` (counted after the
    `num_saved` saved values) are zeros of the tangent's recorded size, dtype and device."""
    gm = torch.fx.GraphModule(bw_gm, copy.deepcopy(bw_gm.graph))
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    first = next(n for n in gm.graph.nodes if n.op != "placeholder")
    for k in absent:
        p = placeholders[num_saved + k]
        v = p.meta["val"]
        with gm.graph.inserting_before(first):
            z = gm.graph.call_function(torch.ops.aten.zeros.default,
                                       (shape_arg(gm.graph, v.shape, first),),
                                       {"dtype": v.dtype, "device": v.device})
        z.meta = dict(p.meta)
        p.replace_all_uses_with(z)
        gm.graph.erase_node(p)
    gm.graph.lint()
    gm.recompile()
    return gm


def _alias(a, args, computed):
    if a.kind == "input":
        return args[a.source]
    src = args[a.source] if a.kind == "input_view" else computed[a.source]
    size, stride, offset = a.geometry(args)
    view = _reshaped(src, size, stride, offset)
    if view is None:
        view = src.as_strided(size, stride, src.storage_offset() + offset)
    return view.detach() if a.detached else view


def _reshaped(src, size, stride, offset):
    """`src.view(size)` where that is the view asked for (the logits [batch, seq, vocab] of a
    [batch * seq, vocab] product), else None. Its backward reshapes the gradient; an
    as_strided view's backward scatters it into zeros of the base's size (a fill and a copy of
    the whole base: 0.4 ms per GPT-2 small fp32 step for the logits)."""
    if offset != 0 or not src.is_contiguous() or src.numel() != math.prod(size):
        return None
    view = src.view(size)
    return view if view.stride() == tuple(stride) else None


def _signature(args) -> tuple:
    return tuple((tuple(a.shape), a.stride()) if isinstance(a, torch.Tensor) else
                 (a if isinstance(a, (int, float, bool)) else None) for a in args)


def _writes_shared_input(args, mutated) -> bool:
    """A written input shares storage with another input (the recording assumed distinct)."""
    keys = {}
    for i, a in enumerate(args):
        if isinstance(a, torch.Tensor):
            keys.setdefault(a.untyped_storage().data_ptr(), []).append(i)
    return any(len(keys[args[i].untyped_storage().data_ptr()]) > 1 for i, *_ in mutated
               if args[i].untyped_storage().data_ptr() != 0)


_warned: set = set()


def _fallback(gm, reason: str):
    counters["eager_fallback"] += 1
    key = reason.split(":")[0]
    if key not in _warned:
        _warned.add(key)
        warnings.warn(f"pydynamo: a graph runs with eager autograd ({reason})", stacklevel=2)
    return gm.forward


def aot_compile(gm: torch.fx.GraphModule, example_inputs, fw_compiler: Callable,
                bw_compiler: Callable, name: str = "graph",
                split_statistics: bool = False) -> Callable:
    """The training callable for `gm`: joint graph recorded, partitioned, forward compiled now,
    backward at first use. A graph the recorder refuses runs `gm.forward` (eager autograd).
    split_statistics: the compilers fuse pointwise work (partition.py)."""
    try:
        with phases.phase("graph passes"):     # (the joint graph)
            joint = record(gm, example_inputs)
        first = CompiledJoint(joint, example_inputs, fw_compiler, bw_compiler, name,
                              split_statistics)
    except Unsupported as e:
        return _fallback(gm, str(e))
    except Exception as e:     # the recorder is young: a graph it fails on still runs
        return _fallback(gm, f"recording failed: {type(e).__name__}: {e}")
    counters["joint_graphs"] += 1
    return _dispatching(gm, first, lambda args: CompiledJoint(
        record(gm, list(args)), list(args), fw_compiler, bw_compiler, name, split_statistics))


def functional_compile(gm: torch.fx.GraphModule, example_inputs, compiler: Callable,
                       name: str = "graph") -> Optional[Callable]:
    """An inference graph that writes tensors in place, functionalized by the recorder and
    compiled as a functional graph, the writes and aliases replayed by the epilogue. None when
    the recorder refuses it (the caller compiles the graph its own way). `compiler(gm, inputs,
    written_back=((output index, input position), ...))`: the outputs the epilogue copies into
    inputs (codegen writes a scatter of such an input into it: codegen/reinplace.py)."""
    try:
        with phases.phase("graph passes"):
            joint = record(gm, example_inputs, with_grad=False)
        first = CompiledJoint(joint, example_inputs, compiler, None, name)
    except Exception as e:
        logs.log("aot", "%s: not functionalized (%s: %s)", name, type(e).__name__, e)
        return None
    counters["functional_graphs"] += 1
    return _dispatching(gm, first, lambda args: CompiledJoint(
        record(gm, list(args), with_grad=False), list(args), compiler, None, name))


def _dispatching(gm, first: CompiledJoint, rebuild: Optional[Callable],
                dynamic: Optional[bool] = None) -> Callable:
    """The callable: the compiled joint for this call's sizes (one per signature when the graph
    is dynamic), eager for inputs that share storage with a written one. `dynamic` None: read
    from `gm` (a joint loaded by the warm cache passes False: its graph is read lazily)."""
    dynamic = is_dynamic(gm) if dynamic is None else dynamic
    cache: Dict[tuple, CompiledJoint] = {first.signature: first}
    symbolic = [first] if first.joint.sizes is not None else []
    if dynamic and not symbolic:
        counters["joint_concrete"] += 1
    check_alias = bool(first.joint.mutated)

    def compiled_for(args) -> CompiledJoint:
        if not dynamic:
            return first
        key = _signature(args)
        c = cache.get(key)
        if c is None:
            # a joint recorded over the size symbols serves every call its relations admit
            c = next((s for s in symbolic if s.joint.sizes.admits(args)), None)
            if c is None:
                counters["joint_recompiles"] += 1
                c = rebuild(args)
                if c.joint.sizes is not None:
                    symbolic.append(c)
            cache[key] = c
        return c

    def run(*args):
        c = compiled_for(args)
        if check_alias and _writes_shared_input(args, c.joint.mutated):
            return gm.forward(*args)
        try:
            return c(*args)
        except Exception:
            # the functional forward raised before any write reached the caller's tensors:
            # eager's run raises the same error with eager's effects (an in-place op that fails
            # half way has written half), or, if eager does not raise, answers
            counters["error_replays"] += 1
            return gm.forward(*args)

    _C.set_code_state(run.__code__, "skip")
    run.compiled = first
    return run


def is_dynamic(gm) -> bool:
    """Whether the forward graph has symbolic sizes (or int inputs): then calls may differ in
    sizes the recorded joint baked in."""
    for n in gm.graph.nodes:
        if n.op != "placeholder":
            continue
        v = n.meta.get("val")
        if isinstance(v, torch.Tensor):
            continue
        dims = tuple(getattr(v, "shape", ())) + tuple(getattr(v, "stride", ()))
        if v is None or not hasattr(v, "shape") or any(not isinstance(d, int) for d in dims):
            return True
    return False

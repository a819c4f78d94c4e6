"""The per-graph Python wrapper: readable generated code that checks, allocates, launches.

`WrapperPrinter(...).generate()` returns Python source defining `call(arg0, arg1, ...)`:
  1. entry checks: autograd needed (grad mode and an input or parameter requires grad) or
     inputs unlike the compile-time ones (shape, stride, dtype, device, scalar value) ->
     run the original graph eagerly (counted);
  2. one statement group per step, each preceded by the FX node(s) and user source line it
     implements: allocate outputs (reusing dead buffers of the same byte size when only
     kernels ever see them), call the kernel through ctypes with data pointers, or call the
     extern op and pin its output layout; a buffer not kept for reuse is dropped (`del`) at its
     last use, so its memory returns to the allocator then, as in eager. With `out_reuse`
     (Backend.gemm_out_reuse, both backends) a matrix product writes with its `out=` form into
     a dead buffer of exactly its planned size, stride and dtype (a linear: of its result's
     2-D view), and a buffer an extern reads may be placed in one: the pool holds only this
     call's own tensors that nothing still reads or views (never an input, an output, a
     written-back value, or a buffer an extern that may return a view has read), and the entry
     checks have sent autograd's calls to eager. A kernel's output that externs read only as
     a linear's 2-D input is allocated 2-D (`_held_geometries`), and `geom` records each
     variable's tensor geometry, so a reference is the variable itself wherever the geometries
     agree and an `as_strided` of it elsewhere; on a GPU, where a product's host time is the
     forward's, that leaves a layer's products with no view and no allocation;
  3. write-backs of in-place ops on inputs, then the outputs in the graph's structure.
     A kernel or extern that raises in a graph with write-backs makes the graph run eagerly
     on the (still untouched) inputs: eager's updates before the failing op, its exception.
The kernel printer knows nothing of this file; a Triton printer can reuse it unchanged apart
from the launch line. What the generated code calls besides kernels and externs (eager's
exceptions for a kernel's error flag or an extern's error, the layout check of extern results,
the eager escapes) is codegen/runtime.py: a wrapper rebuilt without compiling needs no lowering.
"""
from __future__ import annotations

from typing import Dict, List

import sympy
import torch

from codegen.canonical import _canon_name
from codegen.graph_outputs import may_alias
from codegen.ir import ArgRef, ComputedBuffer, ExternCall, InputBuffer, NewViewRef, OwnTensorRef
from codegen.runtime import KernelSite, _source_lines
from codegen.scalars import is_scalar_symbol
from codegen.scheduler import FusedKernel, _argrefs, lifetimes
from codegen.sizevars import static_int
from pydynamo.symbols import pyexpr


def _py(x) -> str:
    """A size expression as Python source (size symbols are wrapper locals s0, s1, ...)."""
    return pyexpr(x)


_RELATIONS = {sympy.Eq: "==", sympy.Ne: "!=", sympy.Lt: "<", sympy.Le: "<=", sympy.Gt: ">",
              sympy.Ge: ">="}


def _py_rel(rel) -> str:
    return f"{_py(rel.lhs)} {_RELATIONS[type(rel)]} {_py(rel.rhs)}"


def _offset(name: str, r) -> str:
    """as_strided's storage offset of ArgRef `r` over the variable `name` of its buffer. IR
    offsets count from the buffer's first element (its data_ptr, which kernels are handed);
    as_strided's is absolute in the storage. A graph input, a constant or an extern's result may
    itself be a view with a storage offset, read per call; a computed buffer starts at 0."""
    if isinstance(r.buffer, ComputedBuffer):
        return _py(r.offset)
    return f"{name}.storage_offset()" + ("" if r.offset == 0 else f" + {_py(r.offset)}")


def _tuple(xs):
    xs = [_py(x) for x in xs]
    return "(" + ", ".join(xs) + ("," if len(xs) == 1 else "") + ")"


def _dtype(dt):
    return str(dt)  # "torch.float32"


# externs whose result is a new tensor, contiguous, of its inputs' dtype and device (the
# wrapper checks its layout inline; GPU kernels may write into it in place)
FRESH_RESULT_EXTERNS = {torch.mm, torch.addmm, torch.bmm, torch.baddbmm,
                        torch.nn.functional.linear}
# those with an `out=` form the wrapper may write into a reused buffer (out_reuse; F.linear as
# addmm / mm on 2-D views, which is what eager's linear runs for a contiguous input)
OUT_EXTERNS = {torch.mm, torch.addmm, torch.bmm, torch.baddbmm, torch._addmm_activation}
# externs whose result never views an argument: a buffer only these read may be reused once dead
NO_VIEW_EXTERNS = FRESH_RESULT_EXTERNS | OUT_EXTERNS | \
    {torch.nn.functional.scaled_dot_product_attention}


def _source_stack(node) -> str:
    """The user's `File "f.py", line 3, in fn` lines of the node's stack trace, one a line,
    outermost first: the calls the node was inlined through, then its own line (an error at
    the node is raised from one frame each, pydynamo/user_errors.py raise_at)."""
    st = node.meta.get("stack_trace") if node is not None else None
    return "\n".join(ln.strip() for ln in (st or "").strip().splitlines()
                     if ln.strip().startswith("File"))


def _source_line(node) -> str:
    """The node's own (innermost) user line: the one the wrapper's step comment shows."""
    return _source_stack(node).rpartition("\n")[2]


class WrapperPrinter:
    DEVICE_CHECK = "not {a}.is_cpu"     # entry check text; the GPU wrapper names its device
    DEVICE_EXPR = "'cpu'"                # the same device as a string (the batched entry check)
    # Options.boxed: also emit `call_boxed(args)`, which takes the arguments as one list, empties
    # it and drops each tensor input at its last use (a backward frees saved activations as it
    # goes, as eager's autograd does); `call(*args)` then forwards to it
    boxed = False
    # products into dead buffers of their exact layout (`out=`), see the module docstring; the
    # backend sets it (Backend.gemm_out_reuse)
    out_reuse = False

    def __init__(self, graph, steps, kernel_args: Dict[str, List[str]], may_err):
        self.g = graph
        self.steps = steps
        self.kernel_args = kernel_args
        self.may_err = may_err
        self.lines: List[str] = []
        self.consts: List[object] = []       # non-literal extern arguments
        self.externs: List[object] = []
        self.alias: Dict[str, str] = {}      # buffer name -> python variable holding it
        self.allocated = set()               # buffers this wrapper allocates (reusable)
        self.assigned = set()                # buffer names given a python variable so far
        # out_reuse: python variable -> (size, stride, dtype) of the tensor object it holds
        # (known exactly: made by _empty, or written through `out=`); buffer -> the geometry
        # the wrapper makes it with where that is not its planned layout (_held_geometries)
        self.geom: Dict[str, tuple] = {}
        self.held: Dict[str, tuple] = {}
        # step comment -> the whole user stack of its node (the comment shows the innermost
        # line only; an extern's error is raised from every frame of the stack)
        self.stacks: Dict[str, str] = {}
        # run once when the wrapper module loads, before `call` is defined: the entry check's
        # input specs and one allocator per dtype the body allocates (`_empty_<dtype>`)
        self.module_lines: List[str] = []
        self.alloc_dtypes: List[torch.dtype] = []

    def emit(self, s, indent=1):
        self.lines.append("    " * indent + s)

    def const(self, v) -> str:
        if v is None or isinstance(v, (bool, int, str)) or \
                (isinstance(v, float) and v == v and v not in (float("inf"), float("-inf"))):
            return repr(v)
        if isinstance(v, torch.dtype):
            return _dtype(v)
        self.consts.append(v)
        return f"_consts[{len(self.consts) - 1}]"

    def ref(self, r: ArgRef) -> str:
        """The variable holding r's buffer where its tensor object has r's geometry, else an
        `as_strided` of it. The object's geometry is its buffer's planned layout, or where the
        wrapper made it (`geom`: an allocation, an `out=` target) the one it was made with."""
        name = self.alias.get(r.buffer.name, r.buffer.name)
        made = self.geom.get(name)
        if made is not None:
            if _ref_geometry(r) == made[:2]:
                return name
        else:
            lay = r.buffer.layout
            if list(r.size) == list(lay.size) and list(r.stride) == list(lay.stride) and \
                    r.offset == lay.offset:
                return name
        return f"torch.as_strided({name}, {_tuple(r.size)}, {_tuple(r.stride)}, {_offset(name, r)})"

    def value(self, a) -> str:
        if isinstance(a, ArgRef):
            return self.ref(a)
        if isinstance(a, list):
            return "[" + ", ".join(self.value(x) for x in a) + "]"
        if isinstance(a, tuple):
            return "(" + "".join(self.value(x) + ", " for x in a) + ")"
        if isinstance(a, dict):
            return "{" + ", ".join(f"{k!r}: {self.value(v)}" for k, v in a.items()) + "}"
        if isinstance(a, slice):
            return f"slice({self.value(a.start)}, {self.value(a.stop)}, {self.value(a.step)})"
        if isinstance(a, sympy.Expr) and not a.is_number:
            return _py(a)          # a size computed from the size symbols
        return self.const(a)

    # ------------------------------------------------------------------ generation
    def generate(self, title: str) -> str:
        g = self.g
        n_params = len(g.inputs) + len(g.scalar_inputs)
        params = [f"arg{i}" for i in range(n_params)]
        kernels = [s for s in self.steps if isinstance(s, FusedKernel)]
        externs = [s for s in self.steps if isinstance(s, ExternCall)]
        head = [f"# pydynamo codegen wrapper: {title}",
                f"# {len(kernels)} kernels, {len(externs)} extern calls, "
                f"{g.stats.native} FX nodes lowered natively, {g.stats.extern} extern",
                "import torch", ""]
        if self.boxed:
            defs = ["", "", "def call(*args):", "    return call_boxed(list(args))", "", "",
                    "def call_boxed(args):",
                    f"    {''.join(p + ', ' for p in params)}= args",
                    "    args.clear()        # the caller's list no longer holds them"]
        else:
            defs = ["", "", f"def call({', '.join(params)}):"]
        self._entry_checks(params)
        start = len(self.lines)
        self._body()
        may_raise = any(self.may_err.values())
        if externs or (g.mutations and may_raise):
            # an extern result of another shape than compiled for (a data-dependent op, a
            # wrong symbolic guess): the whole graph runs eagerly; externs are pure and
            # write-backs come last, so nothing was changed yet
            body = ["    " + ln if ln else ln for ln in self.lines[start:]]
            # an extern (eager op) that raises: the same exception, from a frame at the
            # user's line of that op (the step comments above each call name it)
            sources: Dict[int, str] = {}
            handler = [f"        _extern_error(_e, {self.const(sources)})", "        raise"]
            mismatch = [f"        return _mismatch({', '.join(params)})"]
            if self.boxed:
                # inputs may be released already: no eager replay (a backward graph writes no
                # input, so an extern's error is eager's own; a result of a shape the plan did
                # not foresee is an internal error, raised rather than answered wrongly)
                mismatch = ["        raise RuntimeError('pydynamo codegen: an extern op returned "
                            "a shape the compiled graph did not plan for') from None"]
            elif g.mutations:
                # eager has applied the in-place updates before the failing op, the wrapper
                # none (write-backs come last): the graph runs eagerly on the untouched
                # inputs, which applies them and raises eager's exception (at the user's line)
                handler = [f"        return _extern_error(_e, {self.const(sources)}, "
                           f"lambda: _mismatch({', '.join(params)}, error=True))"]
            self.lines[start:] = ["    try:"] + body + ["    except _ShapeMismatch:"] + \
                mismatch + ["    except Exception as _e:"] + handler
            text = "\n".join(self._head(head) + defs + self.lines) + "\n"
            sources.update(_source_lines(text, self.stacks))
            return text
        return "\n".join(self._head(head) + defs + self.lines) + "\n"

    def _head(self, head):
        allocators = [f"_empty_{_dtype(dt)[6:]} = _allocator({_dtype(dt)})"
                      for dt in self.alloc_dtypes]
        made = self.module_lines + allocators
        if not made:
            return head
        # made in the wrapper's namespace when it loads; a file run on its own (`python
        # <wrapper>`, codegen/standalone.py's footer) rebuilds the namespace and runs it there
        return head + ["if globals().get('__name__') != '__main__':"] + \
            ["    " + ln for ln in made]

    def _entry_checks(self, params):
        g = self.g
        tensors = [f"arg{b.position}" for b in g.inputs]
        conds = []     # each input's check as Python text (matches_source: input_conds)
        rows = []      # the same per input, as the batched check's specs
        for b in g.inputs:
            a = f"arg{b.position}"
            if all(sympy.sympify(x).is_number for x in b.layout.size + b.layout.stride):
                conds.append(self.DEVICE_CHECK.format(a=a) + f" or {a}.dtype is not "
                             f"{_dtype(b.dtype)} or {a}.shape != {_tuple(b.layout.size)} or "
                             f"{a}.stride() != {_tuple(b.layout.stride)}")
                rows.append(f"({_dtype(b.dtype)}, {self.DEVICE_EXPR}, "
                            f"{_tuple(b.layout.size)}, {_tuple(b.layout.stride)})")
                continue
            # symbolic: rank here (the bindings index the shape), sizes after the bindings
            conds.append(self.DEVICE_CHECK.format(a=a) + f" or {a}.dtype is not "
                         f"{_dtype(b.dtype)} or {a}.dim() != {len(b.layout.size)}")
            rank = "(" + "None, " * len(b.layout.size) + ")"
            rows.append(f"({_dtype(b.dtype)}, {self.DEVICE_EXPR}, {rank}, {rank})")
        # grad mode with an input that requires grad, or parameters that do (2): autograd's path
        grad = 2 if g.needs_grad_params else 1 if tensors else 0
        if tensors:
            # every tensor input's layout in one call (runtime.entry_check: the C++ tensor
            # check's `entry` where it is built, the same predicate in Python otherwise): 1.2 us
            # for 100 inputs against 32 for the Python conditions (benchmarks/host_calls.py)
            self.module_lines.append("_entry_specs = _make_entry_specs((" +
                                     "".join(r + ", " for r in rows) + "))")
            self.emit(f"_i = _entry(({''.join(t + ', ' for t in tensors)}), _entry_specs, {grad})")
            self.emit("if _i == -2:")
            self.emit(f"return _eager_grad({', '.join(params)})", 2)
            self.emit("if _i != -1:")
            self.emit(f"return _mismatch({', '.join(params)})", 2)
        elif grad:
            self.emit("if _grad_enabled():")
            self.emit(f"return _eager_grad({', '.join(params)})", 2)
        tensor_conds, conds = conds, []
        for pos, v in g.scalar_inputs.items():
            if pos in g.size_args:
                conds.append(f"type(arg{pos}) is not int")
            elif pos in g.scalars.inputs:     # a kernel argument: any float value
                conds.append(f"type(arg{pos}) is not float")
            else:
                conds.append(f"arg{pos} != {self.const(v)}")
        if g.mutations and len(g.inputs) > 1:
            # a mutated input sharing memory with another input: eager's aliasing semantics
            ptrs = ", ".join(f"arg{b.position}.untyped_storage().data_ptr()" for b in g.inputs)
            conds.append(f"len({{{ptrs}}}) != {len(g.inputs)}")
        self._mismatch_checks(conds)
        self.input_conds = tensor_conds + conds     # (static graphs: all of them)
        sizes = g.sizes
        bound = sorted(sizes.bindings.items(), key=lambda kv: kv[0].name)
        for sym_, src in bound:
            self.emit(f"{sym_.name} = {src}")
        # after binding: static dims exactly, symbolic ones for consistency with the bindings;
        # sizes 0 and 1 of tensor dims were specialized away at compile time
        conds = [f"{c.source} != {_tuple(c.expected) if isinstance(c.expected, tuple) else _py(c.expected)}"
                 for c in sizes.checks]
        small = [f"{s.name} < 2" for s, _ in bound if s in sizes.from_tensor]
        if small:
            conds.append(" or ".join(small))
        self._mismatch_checks(conds)
        # relations the lowerings decided on the example sizes (a broadcast, a slice clamp, a
        # view's divisibility): a call that breaks one runs eagerly, counted with the relation
        for r in sizes.assumptions:
            self._mismatch_checks([f"not ({_py_rel(r)})"], why=_py_rel(r))
        for a in g.scalars.args:      # runtime floats, and Python arithmetic on them
            self.emit(f"{a.symbol.name} = {a.source}")

    def matches_source(self) -> str:
        """`matches(arg0, ...)`: whether a call passes the first group of entry checks (every
        input's device, dtype, shape, stride; scalar values; no aliasing of a mutated input).
        For a graph without size symbols these are all of them: the CUDA-graph runner uses it
        to pick its capture instead of building a key of every input's metadata per call."""
        n = len(self.g.inputs) + len(self.g.scalar_inputs)
        lines = [f"def matches({', '.join(f'arg{i}' for i in range(n))}):"]
        lines += [f"    if {c}:\n        return False" for c in self.input_conds]
        return "\n".join(lines + ["    return True", ""])

    def _mismatch_checks(self, conds, why=None):
        params = ", ".join(f"arg{i}" for i in range(len(self.g.inputs) + len(self.g.scalar_inputs)))
        extra = f", why={why!r}" if why else ""
        for c in conds:
            self.emit(f"if {c}:")
            self.emit(f"return _mismatch({params}{extra})", 2)

    def _body(self):
        g = self.g
        self.size_names = {s.name for s in g.size_bindings}
        self.scalar_names = {a.symbol.name for a in g.scalars.args}
        life = self.life = lifetimes(self.steps, g.outputs, list(g.mutations.values()))
        # boxed: tensor inputs dropped at their last use, except those written back at the end
        written = {f"arg{m.position}" for m in g.mutations.values()}
        self.released_inputs = {f"arg{b.position}" for b in g.inputs} - written \
            if self.boxed else set()
        for name in sorted(self.released_inputs - set(life.last_use)):
            self.emit(f"del {name}")        # read by the entry checks only
        typed = {r.buffer.name for s in self.steps if isinstance(s, ExternCall)
                 for r in _argrefs(s.args) + _argrefs(s.kwargs)}
        typed |= {r.buffer.name for r in _argrefs(g.outputs) +
                  _argrefs([m.value for m in g.mutations.values()])}
        free: Dict[int, List[str]] = {}     # nbytes -> python variables free for reuse
        self.geom, self.held = {}, {}
        # out_reuse: buffers never pooled
        self.pinned = set() if not self.out_reuse else _pinned(self.steps, g)
        if self.out_reuse:
            self.held = self._held_geometries()
        for i, step in enumerate(self.steps):
            self.emit("")
            for node in _step_origins(step):
                src = _source_line(node)
                comment = f"# {node.format_node()}" + (f"   [{src}]" if src else "")
                self.stacks[comment] = _source_stack(node)
                self.emit(comment)
            if isinstance(step, FusedKernel):
                self.step_index = i
                self._kernel(step, typed, free)
            else:
                self._extern(step, free)
            dead = []
            for name, last in life.last_use.items():
                if last != i:
                    continue
                dead.append(name)
                if self.out_reuse:
                    if name in self.pinned or name not in self.allocated:
                        continue
                elif name in typed or name not in self.allocated:
                    continue
                var = self.alias.get(name, name)
                nbytes = self._nbytes(name)
                if nbytes is not None and var not in sum(free.values(), []):
                    free.setdefault(nbytes, []).append(var)
            self._release(dead, i, free)
        self.emit("")
        for m in g.mutations.values():
            self.emit(f"arg{m.position}.copy_({self.ref(m.value)})")
        self._own_tensors(g.outputs)
        self.emit(f"return {self._out(g.outputs)}")

    def _own_tensors(self, outs):
        """Bind each buffer handed out as a tensor of its own (ir.OwnTensorRef) to one such
        tensor, made before the return; every other output on that buffer (a training forward's
        saved value, the same node returned twice) is then that tensor or a view of it, so they
        share its version counter as eager's output and what autograd saves of it do (an
        in-place write to the output is then seen by autograd's check of the saved one)."""
        self.owned = {}
        for r in _argrefs(outs):
            if isinstance(r, OwnTensorRef) and r.buffer.name not in self.owned:
                name = self.alias.get(r.buffer.name, r.buffer.name)
                own = f"_own{len(self.owned)}"
                self.emit(f"{own} = {name}.new_empty(0).set_({name}.untyped_storage(), "
                          f"{_offset(name, r)}, "
                          f"{_tuple(r.size)}, {_tuple(r.stride)})   # eager's new tensor, no _base")
                self.owned[r.buffer.name] = (own, r)

    def _release(self, dead, i, free):
        """Drop the variables of buffers whose last use was step i (unless kept for reuse or
        still held under another name): their memory goes back to the allocator now, as eager
        frees a tensor at its last use, not at the end of the graph (a backward graph's
        gradient buffers would otherwise all live until it returns)."""
        pooled = set(sum(free.values(), []))
        live = {self.alias.get(n, n) for n, last in self.life.last_use.items() if last > i}
        for name in dead:
            var = self.alias.get(name, name)
            if name in self.released_inputs:
                self.emit(f"del {name}")
            elif name in self.assigned and var not in pooled and var not in live:
                self.emit(f"del {var}")
                live.add(var)       # once

    def _nbytes(self, name):
        b = self.g.buffers_by_name[name]
        n = static_int(b.layout.numel)
        return None if n is None else n * b.dtype.itemsize

    def _kernel(self, k: FusedKernel, typed, free):
        for n in k.nodes:
            for name in n.output_names():
                if name in k.removed or name in self.alias:   # register-only, or placed already
                    continue
                b = self.g.buffers_by_name[name]
                nbytes = self._nbytes(name)
                var = None
                geom = self.held.get(name) or _geometry(b.layout, b.dtype)
                if name not in typed and nbytes is not None and free.get(nbytes):
                    var = free[nbytes].pop()
                elif self.out_reuse and nbytes is not None:
                    # an extern or the caller sees it: only a tensor of the geometry they read
                    var = self._take(free, nbytes, geom)
                if var is not None:
                    self.alias[name] = var
                    self.allocated.add(name)
                    self.assigned.add(name)
                    self.emit(f"{name} = {var}  # reuse")
                    continue
                self.allocated.add(name)
                self.assigned.add(name)
                self._allocate(name, b.dtype, geom[:2] if name in self.held else
                               (b.layout.size, b.layout.stride))
                if self.out_reuse and nbytes is not None:
                    self.geom[name] = geom
        self._launch(k)

    def _allocate(self, name, dtype, geometry):
        if dtype not in self.alloc_dtypes:
            self.alloc_dtypes.append(dtype)
        size, stride = geometry
        self.emit(f"{name} = _empty_{_dtype(dtype)[6:]}({_tuple(size)}, {_tuple(stride)})")

    def _launch(self, k: FusedKernel):
        """The call of one kernel (the GPU wrapper overrides this with a Triton launch)."""
        args = []
        for a in self.kernel_args[k.name]:
            args.append(f"{a}.data_ptr()" if self.arg_kind(a) == "ptr" else a)
        call = f"{k.name}({', '.join(args)})"
        if self.may_err.get(k.name):
            self.emit(f"_err = {call}")
            self.emit("if _err:")
            self.emit(f"_kernel_error(_err, {self.const(kernel_site(k.name, k.origins()))})", 2)
        else:
            self.emit(call)

    def arg_kind(self, name: str) -> str:
        """What a kernel parameter is: "size" (int64), "scalar" (a runtime float: double) or
        "ptr" (a buffer's data)."""
        if name in self.size_names:
            return "size"
        if name in self.scalar_names:
            return "scalar"
        if name in self.g.buffers_by_name:
            return "ptr"
        raise NotImplementedError(f"kernel argument {name} has no binding in the wrapper")

    def _take(self, free, nbytes, geom):
        """A free variable holding a tensor of exactly `geom`, removed from the pool (or None):
        the one freed last (as the kernels' reuse pops), whose lines the cache may still hold."""
        if geom is None:
            return None
        pool = free.get(nbytes, [])
        for j in range(len(pool) - 1, -1, -1):
            if self.geom.get(pool[j]) == geom:
                return pool.pop(j)
        return None

    def _dense_result(self, call: ExternCall):
        """The one result of `call` an `out=` form can write: static, contiguous, at offset 0,
        of known bytes (None: none)."""
        if len(call.outputs) != 1 or "out" in call.kwargs:
            return None
        b = call.outputs[0]
        if b.out_path or not self._nbytes(b.name) or not b.layout.is_contiguous() or \
                b.layout.offset != 0:
            return None
        return b

    def _linear_out_form(self, call: ExternCall):
        """(input's 2-D view, weight, bias or None, result's 2-D view) of an F.linear the
        wrapper writes with `out=` (out_reuse): a static input viewable as (rows, last dim), a
        2-D weight, a 1-D bias or none, one contiguous result at offset 0 of more than one row
        and column (a size-1 dimension's stride is whatever the op made, so the 2-D result's
        geometry would not be known exactly); else None."""
        b = self._dense_result(call)
        if not self.out_reuse or b is None or call.target is not torch.nn.functional.linear or \
                call.kwargs or not 2 <= len(call.args) <= 3 or \
                not all(isinstance(a, ArgRef) for a in call.args):
            return None
        x, w = call.args[0], call.args[1]
        bias = call.args[2] if len(call.args) == 3 else None
        flat = _flat2d(x)
        if flat is None or len(w.size) != 2 or len(b.layout.size) != len(x.size) or \
                (bias is not None and len(bias.size) != 1):
            return None
        m, n = flat.size[0], static_int(w.size[0])
        if m == 1 or n is None or n <= 1:
            return None
        return flat, w, bias, ArgRef(b, (m, n), (n, 1), 0)

    def _held_geometries(self) -> Dict[str, tuple]:
        """kernel output -> (size, stride, dtype) it is allocated with instead of its planned
        layout: the 2-D (rows, last dim) geometry where that is the only one any extern, `out=`
        write or output reads it with (a linear's flattened input, a linear's result written through
        its 2-D view): the product then takes the variable itself, where a view made per call
        costs more host time than the call's own Python (linear of a 3-D input 22.0 us, of a
        2-D one 20.5 us, a view 1.9-2.5 us on an H200's host; benchmarks/gpu/
        extern_host_probe.py). Kernels read buffers through pointers, whatever the object's
        geometry."""
        uses: Dict[str, set] = {}

        def use(r):
            if isinstance(r, ArgRef):
                uses.setdefault(r.buffer.name, set()).add(_ref_geometry(r))
        for s in self.steps:
            if not isinstance(s, ExternCall):
                continue
            form = self._linear_out_form(s)
            for r in (form if form else _argrefs(s.args) + _argrefs(s.kwargs)):
                use(r)
        for r in _argrefs(self.g.outputs) + _argrefs([m.value for m in self.g.mutations.values()]):
            use(r)
        held = {}
        for name, gs in uses.items():
            b = self.g.buffers_by_name.get(name)
            planned = _geometry(b.layout, b.dtype) if isinstance(b, ComputedBuffer) else None
            if len(gs) != 1 or None in gs or planned is None or not b.layout.is_contiguous():
                continue
            (size, stride), = gs
            if len(size) == 2 and (size, stride) != planned[:2] and stride == (size[1], 1):
                held[name] = (size, stride, b.dtype)
        return held

    def _extern_out(self, call: ExternCall, free) -> bool:
        """A product written with `out=` (out_reuse): mm / addmm / bmm / baddbmm as called into
        a dead buffer of its planned layout; F.linear on the input's 2-D view into the result's
        2-D view (eager's linear of a contiguous input does that addmm / mm), into a dead 2-D
        buffer of that size or one of the result's planned layout, and where none is free, as
        linear's own new 2-D result. Static, contiguous layouts only: the result is then the
        reused (or new) tensor itself, of the geometry the plan pinned."""
        b = self._dense_result(call)
        if not self.out_reuse or b is None:
            return False
        nbytes = self._nbytes(b.name)
        form = self._linear_out_form(call)
        if form is None and call.target not in OUT_EXTERNS:
            return False
        geom = _geometry(b.layout, b.dtype)
        if form is not None:
            # a dead 2-D tensor takes the result without a view; else one of its layout
            flat2 = _ref_geometry(form[3]) + (b.dtype,)
            var = self._take(free, nbytes, flat2) or self._take(free, nbytes, geom)
            geom = flat2
        else:
            var = self._take(free, nbytes, geom)
            if var is None:
                return False
        self.externs.append(call.target)
        idx = len(self.externs) - 1
        self.allocated.add(b.name)
        self.assigned.add(b.name)
        name = call.target.__name__
        if form is not None:
            flat, w, bias, out = form
            vals = [self.ref(flat), self.ref(w)] + ([self.value(bias)] if bias is not None else [])
            if var is None:
                # nothing of its size is dead yet: linear's own new 2-D result (readers of
                # another geometry view it, as they would view the 3-D one)
                res = f"_r{idx}"
                self.emit(f"{res} = _externs[{idx}]({', '.join(vals)})  # {name} (2-D)")
                self._pin_fresh(b.name, res, geom[0], geom[1], b.dtype)
                self.emit(f"del {res}")
                self.geom[b.name] = geom
                return True
            self.alias[b.name] = var
            self.emit(f"_externs[{idx}]({', '.join(vals)}, out={self.ref(out)})  # {name} (out=)")
        else:
            self.alias[b.name] = var
            vals = [self.value(a) for a in call.args] + \
                [f"{k}={self.value(v)}" for k, v in call.kwargs.items()]
            res = f"_r{idx}"
            self.emit(f"{res} = _externs[{idx}]({', '.join(vals + [f'out={var}'])})  "
                      f"# {name} (out=)")
            # an out= op returns its `out`, written in place at the planned layout; anything
            # else would be a wrong plan: the eager run
            self.emit(f"if {res} is not {var}:")
            self.emit("raise _ShapeMismatch", 2)
            self.emit(f"del {res}")
        self.emit(f"{b.name} = {var}  # reuse, written by out=")
        return True

    def _pin_fresh(self, name, get, size, stride, dtype):
        """`name = get` pinned to (size, stride): a product's new tensor of its inputs' dtype
        and device (both pinned) can differ from the plan only in layout, and checking that
        inline saves a call per extern."""
        size, stride = _tuple(size), _tuple(stride)
        self.emit(f"{name} = {get} if {get}.stride() == {stride} and {get}.shape == {size} "
                  f"else _ensure({get}, {size}, {stride}, {_dtype(dtype)})")

    def _extern(self, call: ExternCall, free=None):
        if free is not None and self._extern_out(call, free):
            return
        self.externs.append(call.target)
        idx = len(self.externs) - 1
        args = ", ".join([self.value(a) for a in call.args] +
                         [f"{k}={self.value(v)}" for k, v in call.kwargs.items()])
        res = f"_r{idx}"
        name = getattr(call.target, "__name__", type(call.target).__name__)
        self.emit(f"{res} = _externs[{idx}]({args})  # {name}")
        # an op that may return a view of its argument: a copy to the planned layout would
        # break what eager's result aliases (a wrong symbolic stride guess runs eagerly)
        view = ", view=True" if call.origin is not None and may_alias(call.origin) else ""
        for b in call.outputs:
            get = res + "".join(f"[{p}]" for p in b.out_path)
            if call.target in FRESH_RESULT_EXTERNS and not b.out_path:
                self._pin_fresh(b.name, get, b.layout.size, b.layout.stride, b.dtype)
            else:
                self.emit(f"{b.name} = _ensure({get}, {_tuple(b.layout.size)}, "
                          f"{_tuple(b.layout.stride)}, {_dtype(b.dtype)}{view})")
            self.assigned.add(b.name)
            if self.out_reuse and call.target in NO_VIEW_EXTERNS and len(call.outputs) == 1 \
                    and not b.out_path and self._nbytes(b.name) is not None:
                # a new tensor, ours alone: reusable once dead; its exact layout is known (for
                # `out=` and extern readers) where no dimension has size 1, whose stride
                # _ensure leaves as the op made it
                self.allocated.add(b.name)
                geom = _geometry(b.layout, b.dtype)
                if geom is not None and all(s != 1 for s in geom[0]):
                    self.geom[b.name] = geom
        self.emit(f"del {res}")       # the outputs live on as their buffers

    def _out(self, outs) -> str:
        if isinstance(outs, ArgRef) and outs.buffer.name in self.owned:
            own, r = self.owned[outs.buffer.name]
            if outs is r or not isinstance(outs, NewViewRef) and \
                    (outs.size, outs.stride, outs.offset) == (r.size, r.stride, r.offset):
                return own
            # another tensor on the owned buffer: a view of the owned tensor (its counter)
            offset = f"{own}.storage_offset()" + ("" if outs.offset == r.offset else
                                                  f" + {_py(outs.offset - r.offset)}")
            view = f"torch.as_strided({own}, {_tuple(outs.size)}, {_tuple(outs.stride)}, {offset})"
            return view + ".detach()" if isinstance(outs, NewViewRef) and outs.detached else view
        if isinstance(outs, NewViewRef):   # always a new view object, even of equal geometry
            name = self.alias.get(outs.buffer.name, outs.buffer.name)
            view = (f"torch.as_strided({name}, {_tuple(outs.size)}, {_tuple(outs.stride)}, "
                    f"{name}.storage_offset() + {_py(outs.offset)})")
            return view + ".detach()" if outs.detached else view
        if isinstance(outs, ArgRef):
            return self.ref(outs)
        if is_scalar_symbol(outs):
            return outs.name       # a runtime float the graph returns: this call's value
        if isinstance(outs, sympy.Expr) and not outs.is_number:
            return _py(outs)       # a size the graph returns (a training forward's saved sizes)
        if isinstance(outs, list):
            return "[" + ", ".join(self._out(o) for o in outs) + "]"
        if isinstance(outs, tuple):
            return "(" + "".join(self._out(o) + ", " for o in outs) + ")"
        return self.const(outs)


def _geometry(layout, dtype):
    """(size, stride, dtype) of a static layout at offset 0 as ints (None: symbolic)."""
    size, stride = [static_int(x) for x in layout.size], [static_int(x) for x in layout.stride]
    if None in size or None in stride or layout.offset != 0:
        return None
    return tuple(size), tuple(stride), dtype


def _ref_geometry(r: ArgRef):
    """((size), (stride)) of a static ref at its buffer's first element, else None."""
    size, stride = [static_int(x) for x in r.size], [static_int(x) for x in r.stride]
    if None in size or None in stride or static_int(r.offset) != 0:
        return None
    return tuple(size), tuple(stride)


def _flat2d(r: ArgRef):
    """The 2-D (rows, last dim) view of a static, contiguous extern argument, or None."""
    size, stride = [static_int(x) for x in r.size], [static_int(x) for x in r.stride]
    if len(size) < 2 or None in size or None in stride:
        return None
    expect = 1
    for s, st in reversed(list(zip(size, stride))):
        if s != 1 and st != expect:
            return None
        expect *= s
    k = size[-1]
    return ArgRef(r.buffer, (expect // k if k else 0, k), (k, 1), r.offset)


def _pinned(steps, g) -> set:
    """Buffers whose memory must never return to the wrapper's pool: the graph's outputs and
    written-back values, and every buffer an extern reads other than the products and
    attention (whose results are new tensors): another extern's result may view it."""
    refs = _argrefs(g.outputs) + _argrefs([m.value for m in g.mutations.values()])
    for s in steps:
        if isinstance(s, ExternCall) and s.target not in NO_VIEW_EXTERNS:
            refs += _argrefs(s.args) + _argrefs(s.kwargs)
    return {r.buffer.name for r in refs}


def _step_origins(step):
    if isinstance(step, FusedKernel):
        return step.origins()
    return [step.origin] if step.origin is not None else []


def kernel_site(kernel: str, origins) -> KernelSite:
    """Where a kernel's error flag comes from (codegen/runtime.py): the FX nodes fused into it,
    each with its op and the user's source lines (the calls it was inlined through included)."""
    return KernelSite(kernel, [(o.name, _canonical(o), _source_stack(o), _size_info(o))
                               for o in origins])


def _canonical(node):
    try:
        return _canon_name(node)
    except Exception:       # a name for the message only: never fail building the wrapper
        return None


def _size_info(node):
    """(dim, size) of the dimension an indexing node indexes, where the graph records it."""
    try:
        name = _canonical(node)
        if name not in ("gather", "scatter", "scatter_add", "scatter_reduce", "index_add",
                        "index_select"):
            return None
        dim = node.args[1] if len(node.args) > 1 else node.kwargs.get("dim")
        val = node.args[0].meta.get("val")
        n = int(val.shape[dim])
        return dim % val.dim(), n
    except Exception:
        return None

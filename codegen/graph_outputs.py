"""The graph's `output` node: what each returned tensor is, and which memory it shares.

Eager's outputs alias as eager's ops made them: a view op's result shares its argument's storage,
any other op's result is a new tensor. The compiled graph hands back the same sharing, read from
the tracer's records (codegen/node_meta.py), never guessed from this lowering's buffers:
  * an output of a non-view op is a new tensor: a buffer already handed out (or an input's, a
    constant's, part of a larger buffer) is copied (`_fresh_output`), in eager's memory order
    when eager's strides are dense in another order (`_output_in_eager_order`; a buffer is
    contiguous, ir.py's invariant);
  * a returned view of an input written in place is lowered again over the input, so it shows
    the wrapper's write-backs (`_view_of_written_input`); an intermediate two or more returned
    tensors view is realized whole and they are strided views of that one buffer
    (`_shared_view_roots`); a returned view of an input that is not eager's input object itself
    is a `NewViewRef` (a new tensor object over the input's memory);
  * an output eager returns as a view of something the caller can see, whose strides this
    lowering cannot derive, raises `EagerFallback`: a copy would not share its memory.
`GraphOutputs` is a part of GraphLowering (codegen/graph.py), which inherits it: its methods read
the lowering's state (`env`, `gm`, `example_inputs`, `mutations`, `input_alias`,
`buffers_by_name`) and call its `_meta`, `hint`, `to_arg`, `_input_value`, `_tensors_to_values`
and `_extern_node`; `output` sets `outputs`. `_eager_new_tensor` (does eager's reshape copy?) is
also asked by GraphLowering.call, which realizes such a reshape.
"""
from __future__ import annotations

import operator
from typing import Dict, List, Optional

import sympy
import torch
import torch.fx

from codegen.canonical import VIEW_OPS, _canon_name, canonicalize
from codegen.fallback import _LOWERING_ERRORS, EagerFallback
from codegen.graph_args import _flat, _refs
from codegen.ir import (ArgRef, ComputedBuffer, ExternBuffer, InputBuffer, NewViewRef, NotLowered,
                        OwnTensorRef, TensorValue, realize, strided_view_of)
from codegen.lowering import LOWERINGS
from codegen.node_meta import _is_tensor_meta, _stand_in, _view_flag
from codegen.ops import as_single_load
from codegen.sizevars import contiguous_strides, product
from codegen.symbolic import meta_stride
from codegen.view_lowerings import _decided, view_strides
from pydynamo.symbols import loop_vars


# view ops whose result is a view of their input whatever its layout (reshape, a cast, a
# contiguous() may copy)
_ALWAYS_VIEWS = {"view", "permute", "transpose", "swapaxes", "swapdims", "t", "movedim",
                 "moveaxis", "unsqueeze", "squeeze", "expand", "expand_as", "broadcast_to",
                 "select", "narrow", "getitem", "split", "split_with_sizes", "chunk", "unbind",
                 "detach", "alias", "diagonal", "unflatten"}


def _whole(ref) -> bool:
    """Is `ref` its buffer's whole storage, contiguously, in another shape (a GEMM's rows
    folded back to (..., M, N))? Eager's result of that shape is the same dense tensor."""
    lay = ref.buffer.layout
    return sympy.sympify(ref.offset) == 0 and lay.is_contiguous() and \
        sympy.sympify(product(ref.size) - product(lay.size)) == 0 and \
        [sympy.sympify(s) for s in ref.stride] == \
        [sympy.sympify(s) for s in contiguous_strides(list(ref.size))]


def may_alias(node) -> bool:
    """Could eager's result of this node share storage with another tensor?"""
    if node.op in ("placeholder", "get_attr"):
        return True
    name = _canon_name(node)
    return name is None or name in VIEW_OPS


def _dense_order(size, stride) -> Optional[List[int]]:
    """The dims from outermost to innermost of a dense, non-overlapping layout (a permutation
    of a contiguous one, size-1 dims kept in place), or None."""
    big = sorted((d for d in range(len(size)) if size[d] != 1), key=lambda d: -stride[d])
    expect = 1
    for d in reversed(big):
        if stride[d] != expect:
            return None
        expect *= size[d]
    # size-1 dims go back to their own place among the others (no stride to order them by)
    out, it = [], iter(big)
    for d in range(len(size)):
        out.append(d if size[d] == 1 else next(it))
    return out


def _own_tensor(ref):
    """A new output (eager's result is no view) over its buffer in another geometry: handed out
    as a tensor of its own (ir.OwnTensorRef), never as a view of the buffer."""
    if not isinstance(ref, ArgRef) or isinstance(ref, NewViewRef) or \
            not isinstance(ref.buffer, (ComputedBuffer, ExternBuffer)):
        return ref
    lay = ref.buffer.layout
    if list(ref.size) == list(lay.size) and list(ref.stride) == list(lay.stride) and \
            ref.offset == lay.offset:
        return ref
    return OwnTensorRef(ref.buffer, ref.size, ref.stride, ref.offset)


class GraphOutputs:
    """GraphLowering's `output` handler and the aliasing rules it applies (module docstring)."""

    def output(self, node):
        # seen: buffer name -> the node whose eager tensor that buffer is (its owner); a
        # returned view hands out its base's buffer under the base's name, so a new tensor
        # returned in any order after it is that buffer only if it is the base itself
        seen, done = {}, {}
        self._shared_view_roots(node)

        def finalize(n):
            if n in done:          # the same node twice: the same tensor twice, as in eager
                return done[n]
            r = _finalize(n)
            if isinstance(r, ArgRef) and isinstance(r.buffer, InputBuffer) and \
                    n.op != "placeholder" and r.buffer.position not in self.mutations and \
                    not self._returns_the_input(n):
                r = NewViewRef(r.buffer, r.size, r.stride, r.offset,   # a view op's new tensor
                               _canon_name(n) == "detach")
            elif isinstance(r, ArgRef) and not isinstance(r, NewViewRef) and \
                    not isinstance(r.buffer, InputBuffer) and self._new_view_object(n):
                # a view of a computed tensor is a tensor object of its own even where its
                # geometry is its base's (`y.t()` of a 1x1 y): never the base handed back
                r = NewViewRef(r.buffer, r.size, r.stride, r.offset, _canon_name(n) == "detach")
            done[n] = r
            return r

        def _finalize(n):
            pos = self.input_alias.get(n)
            if pos is not None and pos in self.mutations:
                return self.to_arg(self._input_value(pos))   # the mutated input itself
            if n in self._root_refs:     # a root computed in eager's order: its view back
                ref = self._root_refs[n]
                seen.setdefault(ref.buffer.name, n)
                return ref
            v = self.env[n]
            if isinstance(v, (list, tuple)):
                return self._nested_output(v, seen)
            aliasing = may_alias(n)
            w = self._view_of_written_input(n, v) if aliasing else v
            of_input, v = w is not v, w     # lowered again over a base: no copy on its chain
            if aliasing and isinstance(v, TensorValue) and v.buffer is None and \
                    strided_view_of(v) is None:
                if _view_flag(self._meta(n)) is not False and self._reads_visible(n, v, node):
                    # eager returns a view of an input or of another output: a copy would
                    # not share its memory, so the index map must fold to strides
                    raise EagerFallback(f"output {n.name}: a view whose strides the "
                                        f"lowering cannot derive")
                aliasing = False     # a new tensor either way (a cast, a copying reshape)
            if aliasing and not of_input and self._copy_in_chain(n, node) and \
                    isinstance(v, TensorValue):
                # eager copies unless the input already has the layout asked for: the
                # result (or a view of that copy) is a new tensor, never the input's buffer
                v, aliasing = TensorValue(list(v.size), v.dtype, v.loader, None, v.cost), False
            if not aliasing:
                ref = self._output_in_eager_order(v, self._meta(n), seen, n)
                if ref is None:
                    ref = self._fresh_output(v, aliasing, seen, n)
                return _own_tensor(ref)
            return self._fresh_output(v, aliasing, seen, self._view_base(n, v))
        self.outputs = torch.fx.node.map_arg(node.args[0], finalize)
        for m in self.mutations.values():
            m.value = self.to_arg(m.value)
        return None

    def _new_view_object(self, n) -> bool:
        """Is eager's value of `n` a view op's new tensor object (never its argument itself:
        every op of _ALWAYS_VIEWS makes one), by the tracer's record where it has one? A
        getitem must be recorded a view (a tuple's element, an advanced index: new tensors)."""
        if n.op not in ("call_function", "call_method") or _canon_name(n) not in _ALWAYS_VIEWS:
            return False
        flag = _view_flag(self._meta(n))
        return flag is True or flag is None and _canon_name(n) != "getitem"

    def _returns_the_input(self, n) -> bool:
        """Is eager's value of `n` the graph input object itself (`x.contiguous()` of a contiguous
        x, `x.to(x.dtype)`, `x.type_as(x)`), rather than a new tensor viewing it (`x.detach()`,
        `x[:]`, `x.view_as(x)`)? The chain of calls from the input is run on stand-ins of the
        example inputs (other arguments: constants or graph inputs); where that cannot be
        decided the answer is yes (the input object, as before)."""
        inputs = [p for p in self.gm.graph.nodes if p.op == "placeholder"]
        chain = []
        while n.op in ("call_function", "call_method"):
            if not n.args or not isinstance(n.args[0], torch.fx.Node):
                return True
            chain.append(n)
            n = n.args[0]
        if n.op != "placeholder":
            return True
        try:
            stand_ins = {p: _stand_in(x, on_meta=True) for p, x in zip(inputs, self.example_inputs)}

            def value(a):
                if a.op != "placeholder":
                    raise NotLowered("an argument computed in the graph")
                return stand_ins[a]
            t = stand_ins[n]
            with torch.no_grad():
                for c in reversed(chain):
                    rest, kwargs = torch.fx.node.map_arg((c.args[1:], c.kwargs), value)
                    fn = c.target if c.op == "call_function" else getattr(type(t), c.target)
                    r = fn(t, *rest, **kwargs)
                    if r is not t:
                        return False
                    t = r
        except Exception:
            return True
        return True

    def _eager_new_tensor(self, n) -> bool:
        """Does eager's reshape `n` copy? torch's reshape copies where its input's eager layout
        (the tracer's strides) cannot give the new shape (`minimum` of a permuted input keeps
        that order, so its reshape copies), even where this lowering's contiguous buffer could
        be viewed (device sweep seed 4364). The view rule is decided on the example sizes,
        each relation re-checked at every call."""
        if _canon_name(n) not in ("reshape", "flatten", "unflatten", "reshape_as") or \
                not n.args or not isinstance(n.args[0], torch.fx.Node):
            return False
        meta, have = self._meta(n), self._meta(n.args[0])
        if not _is_tensor_meta(meta) or not _is_tensor_meta(have) or not have.shape:
            return False
        size = [sympy.sympify(d) for d in have.shape]
        if any(self.hint(d) == 0 for d in size):
            return False
        stride = meta_stride(have)
        return view_strides(size, [sympy.sympify(d) for d in stride],
                            [sympy.sympify(d) for d in meta.shape], _decided) is None

    def _nested_output(self, v, seen):
        if isinstance(v, (list, tuple)):
            return type(v)(self._nested_output(x, seen) for x in v)
        return self._fresh_output(v, False, seen, None)

    def _view_of_written_input(self, n, v):
        """A returned view of an input written in place (`x.add_(1); return x[1:]`): eager's
        is a view of the input, which holds the new values once the wrapper's write-backs ran
        (they precede the return). The view chain is lowered again over the input itself, a
        view op the lowerings cannot express (a diagonal of symbolic sizes) as its extern over
        the input (a view, so it shows the write-backs too); `v` (a view of the new values'
        computation) is kept where that is not possible."""
        chain = []
        root = self._eager_view_root(n) if self._view_roots else None
        while n.op in ("call_function", "call_method") and self.input_alias.get(n) is None \
                and (n is not root or root not in self._view_roots):
            name = _canon_name(n)
            if name not in VIEW_OPS or not n.args or \
                    not isinstance(n.args[0], torch.fx.Node) or \
                    name == "contiguous" and not self._same_eager_strides(n, n.args[0]) or \
                    name == "getitem" and any(isinstance(a, torch.fx.Node) and
                                              _is_tensor_meta(self._meta(a))
                                              for a in _flat(n.args[1:])):
                return v     # (a tensor index: advanced indexing, a copy)
            chain.append(n)
            n = n.args[0]
        pos = self.input_alias.get(n)
        if chain and n is root and root in self._view_roots:
            env = {n: self.env[n]}
        elif not chain or pos is None or pos not in self.mutations:
            return v
        else:
            env = {n: self._input_value(pos)}
        try:
            for node in reversed(chain):
                args = torch.fx.node.map_arg(node.args, lambda a: env.get(a, self.env[a]))
                kwargs = torch.fx.node.map_arg(node.kwargs, lambda a: env.get(a, self.env[a]))
                canon = canonicalize(node, self.gm, args, kwargs)
                if canon is None or canon.inplace:
                    return v
                try:
                    env[node] = LOWERINGS[canon.name](*self._tensors_to_values(canon.args),
                                                      **self._tensors_to_values(canon.kwargs))
                except _LOWERING_ERRORS:     # as call(): an unbind of a symbolic size
                    env[node] = self._extern_node(node, args, kwargs)
        except (NotLowered, TypeError, ValueError, IndexError, KeyError):
            return v
        out = env[chain[0]]
        if not isinstance(out, TensorValue) or out.dtype != v.dtype or \
                [self.hint(a) for a in out.size] != [self.hint(b) for b in v.size] or \
                strided_view_of(out) is None:
            return v
        return out

    def _same_eager_strides(self, a, b) -> bool:
        """Do eager's tensors of nodes `a` and `b` (the tracer's metadata) have the same
        strides in every dim above size 1 (a `contiguous()` that returns its input itself)?
        Unknown metadata: no."""
        ma, mb = self._meta(a), self._meta(b)
        if not (_is_tensor_meta(ma) and _is_tensor_meta(mb)) or len(ma.shape) != len(mb.shape):
            return False
        sa = meta_stride(ma)
        sb = meta_stride(mb)
        return all(self.hint(x) == self.hint(y) for x, y, d in zip(sa, sb, ma.shape)
                   if self.hint(d) != 1)

    def _copy_in_chain(self, n, output_node) -> bool:
        """Is eager's value of the returned view `n` a `contiguous()` that copies, or a view
        of one (`x.contiguous().view(-1)`), reached through view ops? Then it shares memory
        with nothing below that copy. A copy another output also holds (the copy itself, or
        a view between it and `n`) would have to be shared: the graph runs eagerly."""
        chain = []
        while n.op in ("call_function", "call_method") and n.args and \
                isinstance(n.args[0], torch.fx.Node) and _canon_name(n) in VIEW_OPS:
            chain.append(n)
            if _canon_name(n) == "contiguous" and self._needs_copy(n, self.env.get(n)):
                others = [m for m in _flat(torch.fx.node.map_arg(output_node.args[0],
                                                                 lambda m: m))
                          if isinstance(m, torch.fx.Node)]
                if any(m in others for m in chain[1:]):
                    raise EagerFallback(f"output {chain[0].name}: a view of a copy "
                                        f"{n.name} another output holds")
                return True
            n = n.args[0]
        return False

    _view_roots = frozenset()
    _root_refs: Dict[torch.fx.Node, ArgRef] = {}

    def _shared_view_roots(self, output_node):
        """Intermediates (new tensors in eager) that two or more returned tensors are, or are
        views of: eager's outputs share that tensor's storage, at offsets and strides within
        it. Each is realized whole and its returned views are lowered again over it
        (_view_of_written_input), so they are strided views of one buffer, as in eager
        (a view here of a loader would be a separate copy of just the view)."""
        self._view_roots, self._root_refs = set(), {}
        outs = {m for m in _flat(torch.fx.node.map_arg(output_node.args[0], lambda m: m))
                if isinstance(m, torch.fx.Node)}
        count = {}
        for m in outs:
            r = self._eager_view_root(m)
            if r is not None:
                count[r] = count.get(r, 0) + 1
        for r, k in count.items():
            v = self.env.get(r)
            if k < 2 or not isinstance(v, TensorValue):
                continue
            meta = self._meta(r)
            if self._meta_contiguous(meta):
                self.env[r] = realize(v)
                self._view_roots.add(r)
                continue
            # a buffer is contiguous (ir.py's invariant): a root eager lays out in another
            # dense order (`relu` of a permuted input keeps its order) is computed permuted,
            # contiguously, and its value is the view back, at eager's strides (seed 5313)
            stride = meta_stride(meta)
            order = _dense_order([self.hint(x) for x in meta.shape],
                                 [self.hint(x) for x in stride])
            if order is None or v.buffer is not None:
                continue
            buf = realize(LOWERINGS["permute"](v, order)).buffer
            back = [order.index(d) for d in range(len(order))]
            self.env[r] = LOWERINGS["permute"](TensorValue.of_buffer(buf), back)
            self._root_refs[r] = strided_view_of(self.env[r])
            self._view_roots.add(r)

    def _meta_contiguous(self, meta) -> bool:
        stride = meta_stride(meta)
        want = 1
        for d, st in reversed(list(zip(meta.shape, stride))):
            if self.hint(d) != 1 and self.hint(st) != want:
                return False
            want *= self.hint(d)
        return True

    def _eager_view_root(self, n):
        """The intermediate node whose new tensor eager's value of `n` is or is a view of,
        through view ops (by the tracer's meta tensors); None for inputs or when unknown."""
        def views(n, m):  # a view, or views (split, unbind, chunk: indexed by getitem)
            if isinstance(m, (list, tuple)):
                return len(m) > 0 and all(views(n, x) for x in m)
            src = self._meta(n.args[0]) if n.args and isinstance(n.args[0], torch.fx.Node) \
                else None
            flag = _view_flag(m)
            if flag or flag is not None and _view_flag(src) is not None:
                return flag
            # a record whose view flag holds on the example sizes only (symbolic shapes; a
            # static result of a symbolic input), or none: ops that always view, a reshape
            # where torch's view rule on eager's layout allows (re-checked at every call)
            name = _canon_name(n)
            if name in ("reshape", "flatten", "unflatten", "reshape_as"):
                return not self._eager_new_tensor(n)
            return name in _ALWAYS_VIEWS and not any(
                isinstance(a, torch.fx.Node) and _is_tensor_meta(self._meta(a))
                for a in _flat((n.args[1:], n.kwargs)))     # x[idx]: advanced indexing copies
        while n.op in ("call_function", "call_method") and _canon_name(n) in VIEW_OPS and \
                views(n, self._meta(n)) and n.args and isinstance(n.args[0], torch.fx.Node):
            n = n.args[0]
        meta = self._meta(n)
        if n.op not in ("call_function", "call_method") or \
                _canon_name(n) in VIEW_OPS and not self._new_tensor_of_view_op(n, meta) or \
                not _is_tensor_meta(meta) or _view_flag(meta) \
                or self.input_alias.get(n) is not None:
            return None
        return n

    def _new_tensor_of_view_op(self, n, meta) -> bool:
        """Is eager's value of `n`, an op that may return a view or its input (`to`, `float`,
        `type_as`), a new tensor at every size? Yes where it casts to another dtype (a copy:
        `x.float()` of a bool x, seed 150930, whose views returned beside it share its
        storage). A `contiguous()` that copies is left to _copy_in_chain."""
        src = self._meta(n.args[0]) if n.args and isinstance(n.args[0], torch.fx.Node) else None
        return _is_tensor_meta(meta) and _is_tensor_meta(src) and meta.dtype != src.dtype

    def _needs_copy(self, n, v) -> bool:
        """Is eager's `contiguous(...)` (node `n`, value `v`) a new tensor? Eager returns its
        input itself when that already has the asked-for layout (the tracer's strides,
        else contiguous): it copies when eager's input has other strides (the input's
        meta), and here the value is a new tensor too when the lowered input lacks them."""
        if not isinstance(v, TensorValue):
            return False
        meta, src = self._meta(n), self._meta(n.args[0])
        if _is_tensor_meta(meta) and _is_tensor_meta(src):
            want = meta_stride(meta)
            have = meta_stride(src)
            if any(self.hint(a) != self.hint(b) for a, b, d in zip(have, want, meta.shape)
                   if self.hint(d) != 1):
                return True
        ref = strided_view_of(v)
        if ref is None:
            return True
        if _is_tensor_meta(meta) and _is_tensor_meta(src):
            # eager returns its input itself: so does this lowering where the lowered input
            # has eager's strides (a view of an input at an offset: the same view, seed 5371)
            want = meta_stride(meta)
            return any(self.hint(a) != self.hint(b) for a, b, d in zip(ref.stride, want, ref.size)
                       if self.hint(d) != 1)
        lay = ref.buffer.layout
        if list(ref.size) != list(lay.size) or list(ref.stride) != list(lay.stride) or \
                ref.offset != lay.offset:
            return True      # a view: eager's input may be a view of the buffer, not the buffer
        return not lay.is_contiguous()

    def _reads_visible(self, n, v: TensorValue, output_node) -> bool:
        """Is `v` (node `n`'s value) a load of a tensor the caller can see (an input, a
        constant, an output)? (A view of an intermediate shares memory with nothing the
        caller holds.)"""
        probe = as_single_load(v.loader, loop_vars("v", v.ndim))
        if probe is None:
            return False
        buf = self.buffers_by_name[probe.name]
        if self._buffer_visible(buf):
            return self._views_all_the_way(n)
        outs = torch.fx.node.map_arg(output_node.args[0], lambda n: n)
        return any(isinstance(self.env.get(n), TensorValue) and
                   self.env[n].buffer is buf for n in _flat(outs) if isinstance(n, torch.fx.Node))

    def _buffer_visible(self, buf) -> bool:
        """An input or constant, or an extern's result that may be a view of one (a view op
        run eagerly: its result is never copied to a planned layout, see wrapper._extern)."""
        if isinstance(buf, InputBuffer):
            return True
        call = getattr(buf, "call", None)
        return call is not None and call.origin is not None and may_alias(call.origin) and \
            any(self._buffer_visible(r.buffer) for r in _refs((call.args, call.kwargs)))

    def _views_all_the_way(self, n) -> bool:
        """Does eager's value of `n` share memory with a graph input, through ops that return
        views? A copy on the way (a contiguous() that copies, a cast to another dtype, an op
        that computes) makes it a new tensor; an unknown op or a reshape (a view where the
        layout allows) counts as a view."""
        while n.op not in ("placeholder", "get_attr"):
            name = _canon_name(n)
            if name is None and n.target is not operator.getitem:
                return True             # unknown: may be a view of anything
            if name is not None and name not in VIEW_OPS:
                return False            # computes a new tensor
            src = next((a for a in n.args if isinstance(a, torch.fx.Node)), None)
            if src is None:
                return True
            out, inp = self.env.get(n), self.env.get(src)
            if name == "contiguous" and self._needs_copy(n, out) or \
                    isinstance(out, TensorValue) and isinstance(inp, TensorValue) and \
                    out.dtype != inp.dtype:
                return False
            n = src
        return True

    def _view_base(self, n, v):
        """The node whose eager tensor a returned view `n` (value `v`) shares memory with:
        the deepest node down its chain of view ops whose value is `v`'s buffer (`v[0]` of a
        realized `v`: `v`), else `n` itself (a buffer no other node's value is)."""
        ref = strided_view_of(v) if isinstance(v, TensorValue) else None
        owner = n
        while ref is not None and n.op in ("call_function", "call_method"):
            val = self.env.get(n)
            if isinstance(val, TensorValue) and val.buffer is ref.buffer or \
                    n in self._root_refs and self._root_refs[n].buffer is ref.buffer:
                owner = n
            if _canon_name(n) not in VIEW_OPS or not n.args or \
                    not isinstance(n.args[0], torch.fx.Node):
                break
            n = n.args[0]
        return owner

    def _output_in_eager_order(self, v, meta, seen, owner) -> Optional[ArgRef]:
        """A new output tensor in eager's memory order. Eager gives the result of a pointwise
        op the dim order of its input (a transposed or channels_last input gives a transposed
        or channels_last result: TensorIterator's rule, which the tracer's meta tensor
        follows); a buffer here is contiguous (ir.py's invariant), so an output whose eager
        strides are dense in another order is computed as the permuted value, contiguously,
        and handed out as the permuted view of it. Only outputs not computed yet (a
        loader): one already realized (a reduction, a value with other users) keeps the
        contiguous layout rather than pay a copy."""
        if not isinstance(v, TensorValue) or v.buffer is not None or not _is_tensor_meta(meta):
            return None
        stride = meta_stride(meta)
        order = _dense_order([self.hint(x) for x in meta.shape], [self.hint(x) for x in stride])
        if order is None or order == sorted(order):
            return None
        permuted = LOWERINGS["permute"](v, order)
        buf = realize(permuted).buffer
        out = [None] * v.ndim
        for d, st in zip(order, buf.layout.stride):
            out[d] = st
        seen[buf.name] = owner
        return ArgRef(buf, tuple(v.size), tuple(out), sympy.Integer(0))

    def _fresh_output(self, v, aliasing, seen, owner):
        """Outputs of non-view ops must be new tensors, as in eager: a new tensor (`owner`
        its node, None: a list element) gets a buffer already handed out only when that
        buffer is its own (claimed by a returned view of it, `return v[0], v`)."""
        if not isinstance(v, TensorValue):
            return v
        ref = self.to_arg(v)
        name = ref.buffer.name
        taken = name in seen and (owner is None or seen[name] is not owner)
        # a new tensor that is part of a larger buffer (a padded GEMM's result, codegen/gemm.py)
        # is copied out: eager's is dense
        partial = list(ref.size) != list(ref.buffer.layout.size) and not _whole(ref)
        if not aliasing and (not isinstance(ref.buffer, ComputedBuffer) or taken or partial):
            if not isinstance(ref.buffer, ExternBuffer) or taken or partial:
                copy = TensorValue(list(v.size), v.dtype, v.loader, None, v.cost)
                ref = self.to_arg(realize(copy))
        seen.setdefault(ref.buffer.name, owner)
        return ref

"""Scheduler: dead-code removal, fusion into kernels, and buffer lifetimes.

Input: the program-ordered list of ComputedBuffers and ExternCalls from GraphLowering.
Output: a list of steps, each a `FusedKernel` (one C++ function) or an `ExternCall`.

A FusedKernel shares outer loops `outer` (sympy ranges, loop variables x0..) among its nodes.
Each node is a pointwise buffer whose size is `outer + inner` (inner loop vars y0..) or a
reduction whose kept ranges equal `outer` (reduction vars r0..). Nodes run in order inside one
iteration of the outer loops, so a node may read what an earlier node of the same kernel wrote
only at the element(s) written in the same outer iteration ("row-local" reads); that is the
legality test for fusing.

The reload rule (why: a Triton program's lanes are not ordered between a store and a load of
another lane's element, so such a load reads stale memory; an OpenMP loop's iterations are not
ordered either): a node reads a buffer an earlier node of its kernel writes only at the very
element the same iteration wrote, proven by `same_element` (outer loop variables over one flat
index, inner ones over another, simplified over their ranges, then identical: the form the
Triton printer keys its store -> load forwarding on), so the value is forwarded from a
register, never loaded back (Triton: except after the block barrier a looped inner range puts
between nodes; a load of a buffer stored since the last barrier that is not forwarded raises,
and the graph runs eagerly; C++ may load it back: the same thread wrote it). Otherwise the
reader is not fused there: it starts a later kernel.

Fusion is greedy into the most recent kernel (program order is a topological order), so no
node ever waits on work scheduled after it and nothing is recomputed beyond what lowering
already inlined.
"""
from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Set

import sympy

from codegen.ir import (ArgRef, ComputedBuffer, ExternCall, InputBuffer, Pointwise, Reduction)
from codegen.ops import collect_deps
from codegen.sizevars import (contiguous_strides, decompose, equals, flat_index, product,
                              simplify_index, static_int)
from pydynamo.symbols import index_symbol, loop_vars


@dataclass(eq=False)
class SchedNode:
    buf: ComputedBuffer

    @property
    def is_reduction(self):
        return isinstance(self.buf.data, Reduction)

    @property
    def full_ranges(self):
        d = self.buf.data
        return list(d.ranges) + (list(d.reduction_ranges) if self.is_reduction else [])

    @property
    def outer_ranges(self):
        return list(self.buf.data.ranges)

    def inner_ranges(self, k):
        d = self.buf.data
        return list(d.reduction_ranges) if self.is_reduction else list(d.ranges[k:])

    def vars(self, k):
        d = self.buf.data
        if self.is_reduction:
            return loop_vars("x", len(d.ranges)), loop_vars("r", len(d.reduction_ranges))
        return loop_vars("x", k), loop_vars(f"y_{self.buf.name}_", len(d.ranges) - k)

    def reads(self, k):
        xs, inner = self.vars(k)
        d = self.buf.data
        if self.is_reduction:
            return collect_deps(d.inner_fn, xs, inner)
        return collect_deps(d.inner_fn, xs + inner)

    def store_index(self, k):
        xs, inner = self.vars(k)
        if self.is_reduction:
            return flat_index(xs, contiguous_strides(self.buf.data.ranges))
        return flat_index(xs + inner, contiguous_strides(self.buf.data.ranges))

    def output_names(self):
        return [self.buf.name] + ([self.buf.aux.name] if self.buf.aux is not None else [])


@dataclass(eq=False)
class FusedKernel:
    name: str
    outer: List[sympy.Expr]
    nodes: List[SchedNode]
    removed: Set[str] = field(default_factory=set)     # buffers the wrapper never allocates
    # of `removed`: buffers held in a per-outer-iteration scratch array (name -> elements);
    # the rest of `removed` lives in registers only
    local: Dict[str, int] = field(default_factory=dict)

    @property
    def has_inner(self):
        return any(n.is_reduction or len(n.full_ranges) > len(self.outer) for n in self.nodes)

    def origins(self):
        seen = []
        for n in self.nodes:
            for o in n.buf.origins:
                if o not in seen:
                    seen.append(o)
        return seen


def _same(a, b) -> bool:
    return len(a) == len(b) and all(equals(x, y) for x, y in zip(a, b))


def _candidate_outer(nodes: List[SchedNode]) -> Optional[List[sympy.Expr]]:
    """The shared outer ranges for these nodes, or None if they cannot share loops."""
    reds = [n for n in nodes if n.is_reduction]
    if reds:
        outer = reds[0].outer_ranges
        if not all(_same(r.outer_ranges, outer) for r in reds):
            return None
    else:
        outer = nodes[0].full_ranges
        for n in nodes[1:]:
            if not _same(n.full_ranges, outer):
                return None
        return outer
    for n in nodes:
        if not n.is_reduction and not _same(n.full_ranges[:len(outer)], outer):
            return None
    return outer


def _legal(nodes: List[SchedNode], outer) -> bool:
    k = len(outer)
    producer = {}
    for n in nodes:
        for name in n.output_names():
            producer[name] = n
    for n in nodes:
        deps = n.reads(k)
        if deps.indirect and any(r.name in producer for r in deps.reads):
            return False
        xs, n_inner = n.vars(k)
        for r in deps.reads:
            m = producer.get(r.name)
            if m is None:
                continue
            if m is n:
                return False
            if m.is_reduction:
                want = m.store_index(k)
            else:
                _, m_inner = m.vars(k)
                if len(m_inner) != len(n_inner) or \
                        not _same(m.inner_ranges(k), n.inner_ranges(k)):
                    return False
                want = m.store_index(k).subs(dict(zip(m_inner, n_inner)))
            if not same_element(r.index, want, (xs, outer), (n_inner, n.inner_ranges(k))):
                return False
    return True


XFLAT, RFLAT = index_symbol("xindex"), index_symbol("rindex")


def same_element(a, b, outer, inner) -> bool:
    """Do indices `a` and `b` (over outer variables and ranges `outer`, inner ones `inner`)
    name the same element in the form a kernel printer keys forwarding on (codegen/triton.py
    `forward_key`): each group over one flat index, simplified, then identical. Identity, not
    mere equality, is what lets the printer forward the stored value (the module docstring's
    reload rule)."""
    return flat_form(a, outer, inner) == flat_form(b, outer, inner)


def flat_form(index, outer, inner=((), ())):
    """`index` with the outer loop variables over XFLAT and the inner ones over RFLAT,
    simplified over their ranges."""
    (xs, xr), (ys, yr) = outer, inner
    sub = decompose(xs, xr, XFLAT)
    sub.update(decompose(ys, yr, RFLAT))
    return simplify_index(sympy.sympify(index).xreplace(sub),
                          {XFLAT: product(xr), RFLAT: product(yr)})


def same_index(a, b, bounds) -> bool:
    """Equal indices, also after folding the div/mod a view leaves (x // n * n + x % n)."""
    return equals(a, b) or equals(simplify_index(a, bounds), simplify_index(b, bounds))


def buffer_readers(items, outputs, mutations) -> Dict[str, int]:
    """How many consumers read each buffer name (kernels, externs, outputs, write-backs)."""
    counts: Dict[str, int] = {}

    def bump(name):
        counts[name] = counts.get(name, 0) + 1
    for it in items:
        if isinstance(it, ComputedBuffer):
            for name in SchedNode(it).reads(0).read_names:
                bump(name)
        else:
            for ref in _argrefs(it.args) + _argrefs(it.kwargs):
                bump(ref.buffer.name)
    for ref in _argrefs(outputs) + _argrefs([m.value for m in mutations]):
        bump(ref.buffer.name)
    return counts


def _argrefs(a) -> List[ArgRef]:
    if isinstance(a, ArgRef):
        return [a]
    if isinstance(a, (list, tuple)):
        return [r for x in a for r in _argrefs(x)]
    if isinstance(a, dict):
        return [r for x in a.values() for r in _argrefs(x)]
    return []


def eliminate_dead(items, outputs, mutations):
    items = list(items)
    while True:
        counts = buffer_readers(items, outputs, mutations)
        live = [it for it in items if not isinstance(it, ComputedBuffer) or
                any(counts.get(n, 0) for n in SchedNode(it).output_names())]
        if len(live) == len(items):
            return live
        items = live


def schedule(items, outputs, mutations, fuse=True):
    """-> list of FusedKernel | ExternCall."""
    items = eliminate_dead(items, outputs, mutations)
    steps: List[object] = []
    for it in items:
        if isinstance(it, ExternCall):
            steps.append(it)
            continue
        node = SchedNode(it)
        if fuse and _fuse_into_earlier(steps, node):
            continue
        outer = node.outer_ranges if node.is_reduction else node.full_ranges
        steps.append(FusedKernel(f"kernel{len([s for s in steps if isinstance(s, FusedKernel)])}",
                                 outer, [node]))
    _mark_removed(steps, outputs, mutations)
    for k in steps:
        if isinstance(k, FusedKernel):
            k.name += _summary(k)
    return steps


def _summary(kernel: FusedKernel, most: int = 4) -> str:
    """`_log_softmax_nll_loss`-style suffix of a kernel's name: the ops it computes (their first
    few, in order), so a profile or a wrapper names what each kernel does."""
    names: List[str] = []
    for o in kernel.origins():
        t = o.target
        name = getattr(t, "_opname", None) or getattr(t, "__name__", None) or str(t)
        name = "".join(c if c.isalnum() else "_" for c in name).strip("_")
        if name and name not in names and name not in _NAMELESS:
            names.append(name)
    return "".join("_" + n for n in names[:most])


# ops every kernel has a share of: they say nothing about it
_NAMELESS = {"view", "reshape", "_unsafe_view", "expand", "permute", "transpose", "t",
             "unsqueeze", "squeeze", "getitem", "alias", "detach", "as_strided", "contiguous",
             "clone", "_to_copy", "to", "output"}


def _fuse_into_earlier(steps, node: SchedNode) -> bool:
    """Fuse into the latest kernel that no later step's output feeds; True if fused.

    Walking back from the end, a step that produces something `node` reads is the last
    candidate (the node cannot run before its inputs exist). Pure nodes may move earlier past
    unrelated steps: nothing scheduled after the target depends on them yet.
    """
    needs = node.reads(0).read_names
    for s in reversed(steps):
        produced = set()
        if isinstance(s, FusedKernel):
            for n in s.nodes:
                produced.update(n.output_names())
            for n in (node, _reranged(node, s.outer)):
                if n is None:
                    continue
                cand = s.nodes + [n]
                outer = _candidate_outer(cand)
                if outer is not None and _legal(cand, outer):
                    s.nodes.append(n)
                    s.outer = outer
                    return True
        else:
            produced.update(b.name for b in s.outputs)
        if produced & needs:
            return False
    return False


def _reranged(node: SchedNode, outer) -> Optional[SchedNode]:
    """`node` iterated as `outer + rest` when its leading ranges are `outer` merged (a view:
    LayerNorm's normalize over (tokens, hidden) after its statistics over (batch, seq,
    hidden)); None when they are not. The flat store index is unchanged, so the buffer's
    layout and every reader stay valid; each old leading variable becomes the flat index of
    its group of new ones, linear (no division), so the fusion checks compare exact indices."""
    if node.is_reduction:
        return None
    ranges = node.full_ranges
    if _same(ranges[:len(outer)], outer):
        return None
    groups, i = [], 0
    for r in ranges:
        if i == len(outer):
            break
        j = i + 1
        while j < len(outer) and not equals(product(outer[i:j]), r):
            j += 1
        if not equals(product(outer[i:j]), r):
            return None
        groups.append((i, j))
        i = j
    if i != len(outer):
        return None
    k, inner_fn = len(groups), node.buf.data.inner_fn

    def fn(idx):
        idx = list(idx)
        old = [flat_index(idx[a:b], contiguous_strides(outer[a:b])) for a, b in groups]
        return inner_fn(old + idx[len(outer):])
    buf = dataclasses.replace(node.buf, data=Pointwise(list(outer) + list(ranges[k:]), fn))
    return SchedNode(buf)


def _pinned_and_readers(steps, outputs, mutations):
    """Buffers the graph hands out (outputs, write-backs), and which steps read each buffer."""
    pinned = {r.buffer.name for r in _argrefs(outputs) + _argrefs([m.value for m in mutations])}
    readers: Dict[str, Set[int]] = {}
    for i, s in enumerate(steps):
        if isinstance(s, FusedKernel):
            for n in s.nodes:
                for name in n.reads(len(s.outer)).read_names:
                    readers.setdefault(name, set()).add(i)
        else:
            for ref in _argrefs(s.args) + _argrefs(s.kwargs):
                readers.setdefault(ref.buffer.name, set()).add(i)
    return pinned, readers


def _mark_removed(steps, outputs, mutations):
    """Buffers read only inside their own kernel, at the element just computed, need no memory."""
    pinned, readers = _pinned_and_readers(steps, outputs, mutations)
    for i, s in enumerate(steps):
        if not isinstance(s, FusedKernel):
            continue
        for n in s.nodes:
            if not n.is_reduction and s.has_inner:
                continue
            for name in n.output_names():
                if name not in pinned and readers.get(name, set()) <= {i}:
                    s.removed.add(name)


ROW_LOCAL_BYTES = 65536    # row-local scratch per kernel: stack arrays of each thread


def mark_row_local(steps, outputs, mutations, max_bytes=ROW_LOCAL_BYTES):
    """C++ only: a pointwise node of a kernel with inner loops whose output only that kernel
    reads (always at the element of the current outer iteration, which `_legal` guarantees)
    needs one row of scratch per outer iteration, not a whole buffer in memory."""
    pinned, readers = _pinned_and_readers(steps, outputs, mutations)
    for i, s in enumerate(steps):
        if not isinstance(s, FusedKernel) or not s.has_inner:
            continue
        k, used = len(s.outer), 0
        for n in s.nodes:
            if n.is_reduction or n.buf.aux is not None or n.buf.name in pinned:
                continue
            elems = static_int(product(n.inner_ranges(k)))
            if elems is None or readers.get(n.buf.name, set()) != {i}:
                continue
            nbytes = elems * n.buf.dtype.itemsize
            if used + nbytes > max_bytes:
                continue
            used += nbytes
            s.removed.add(n.buf.name)
            s.local[n.buf.name] = elems


def kernel_count(steps) -> int:
    return sum(1 for s in steps if isinstance(s, FusedKernel))


@dataclass
class Lifetimes:
    last_use: Dict[str, int]
    first_def: Dict[str, int]


def lifetimes(steps, outputs, mutations) -> Lifetimes:
    last, first = {}, {}
    for i, s in enumerate(steps):
        if isinstance(s, FusedKernel):
            for n in s.nodes:
                for name in n.output_names():
                    first.setdefault(name, i)
                for name in n.reads(len(s.outer)).read_names:
                    last[name] = i
        else:
            for b in s.outputs:
                first.setdefault(b.name, i)
            for ref in _argrefs(s.args) + _argrefs(s.kwargs):
                last[ref.buffer.name] = i
    for ref in _argrefs(outputs) + _argrefs([m.value for m in mutations]):
        last[ref.buffer.name] = len(steps)
    return Lifetimes(last, first)

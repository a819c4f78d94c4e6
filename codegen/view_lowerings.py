"""Lowerings that move data rather than compute it: views as index maps (reshape, permute,
slice, select, expand, getitem, split, flip, roll, repeat, triu/tril), cat and stack, fills and
factories, indexing with tensors (index_select, embedding, gather).

They register into codegen/lowering.py's LOWERINGS under the same contract (TensorValues for
tensor arguments, eager's signature, `NotLowered` for anything not implemented exactly) and
build on its primitives (`register`, dtype promotion, broadcast, `value_loader`). A view is a
TensorValue whose loader maps the view's index to its source's (no copy); where eager's view
has strides the wrapper must reproduce (an output, an extern's argument), `view_strides`
decides them and the graph lowering checks them against the node's metadata.
"""
from __future__ import annotations

import sympy
import torch

from codegen.ir import NotLowered, TensorValue, current, realize, strided_view_of
from codegen.lowering import (broadcast_sizes, cast, check_dtype, expand_to, is_tensor,
                              maybe_realize, norm_dim, register, result_dtype, value_loader)
from codegen.ops import ERR_INDEX, ERR_INDEX_IN_SELF, ops
from codegen.sizevars import _is_int_poly, contiguous_strides, equals, flat_index, product
from codegen.symbolic import same_size, size_hint, size_is_one
from pydynamo.symbols import FloorDiv, ModIdx


# ------------------------------------------------------------------ views (index maps)


def _view(x: TensorValue, size, index_map) -> TensorValue:
    return TensorValue([sympy.sympify(s) for s in size], x.dtype,
                       lambda idx: x.loader(index_map(idx)), None, x.cost)


def _infer_size(shape, numel):
    shape = list(shape)
    if len(shape) == 1 and isinstance(shape[0], (list, tuple, torch.Size)):
        shape = list(shape[0])
    neg = [i for i, s in enumerate(shape) if s == -1]
    if len(neg) > 1:
        raise NotLowered("two -1 in view")
    if neg:
        known = product([s for s in shape if s != -1])
        if known == 0:
            raise NotLowered("view with 0")
        q = sympy.cancel(sympy.sympify(numel) / known)
        # not a polynomial (s0*16 / (2*(s0//2))): exact division, checked below
        shape[neg[0]] = q if _is_int_poly(q) else FloorDiv(numel, known)
    shape = [sympy.sympify(s) for s in shape]
    if not same_size(product(shape), numel):
        raise NotLowered("view numel mismatch")
    return shape


@register("reshape", "view")
def reshape(input, *shape):
    if len(shape) == 1 and isinstance(shape[0], torch.dtype):
        raise NotLowered("view(dtype)")
    old = list(input.size)
    new = _infer_size(shape, product(old))
    if new == old:
        return input
    view = _input_view(input, new)
    if isinstance(view, TensorValue):
        return view
    if view is False:
        # eager's copy (the result views it, not the input), contiguous: the result is its
        # view with contiguous strides (so views of the result fold to strides of the copy
        # under symbolic sizes too, sharing it as eager's do)
        copy = realize(TensorValue(old, input.dtype, input.loader, None, input.cost,
                                   input.origins))
        name, st = copy.buffer.name, contiguous_strides(new)
        return TensorValue(list(new), input.dtype,
                           lambda idx: ops.load(name, flat_index(idx, st, 0)), None,
                           copy.cost, list(input.origins))
    groups = _reshape_groups(old, new)

    def index_map(idx):
        out = [None] * len(old)
        for (ia, ib), (oa, ob) in groups:
            osz = new[oa:ob]
            lin = flat_index(idx[oa:ob], contiguous_strides(osz))
            isz = old[ia:ib]
            if ib - ia == 1:
                out[ia] = lin
                continue
            ist = contiguous_strides(isz)
            for k in range(ia, ib):
                st, sz = ist[k - ia], isz[k - ia]
                out[k] = FloorDiv(lin, st) if k == ia else ModIdx(lin, st, sz)
        return out
    return _view(input, new, index_map)


def _input_view(x: TensorValue, new):
    """Eager's reshape of `x` where `x` is a strided view of a buffer (a graph input, a
    constant, an extern's result, which may itself be a view of an input, or a computed
    buffer, which may be an output): the view it returns (a TensorValue over the buffer with
    torch's strides, `view_strides`), or False when that layout cannot give the new shape and
    eager reshapes a contiguous copy: what the result aliases and what as_strided on it reads
    follow from that (a view of a copy never aliases another output). None: not such a view
    (an unrealized value: the index map reshapes it, nothing shares its memory). Symbolic
    layouts are decided on the example sizes, each relation the decision used checked by the
    wrapper at every call."""
    if x.buffer is not None and x.buffer.layout.is_contiguous():
        return None
    ref = strided_view_of(x)
    if ref is None or any(size_hint(e) == 0 for e in ref.size):
        return None
    st = view_strides(list(ref.size), list(ref.stride), list(new), _decided)
    if st is None:
        return False
    name, offset = ref.buffer.name, ref.offset
    return TensorValue(list(new), x.dtype, lambda idx: ops.load(name, flat_index(idx, st, offset)),
                       None, x.cost, list(x.origins))


def _decided(rel) -> bool:
    """A relation between sizes, decided on the example sizes; a symbolic one is recorded as
    an assumption (or its negation) the wrapper re-checks."""
    rel = sympy.sympify(rel)
    if rel in (sympy.true, sympy.false):
        return bool(rel)
    sizes = getattr(current.graph, "sizes", None)
    if sizes is None:
        raise NotLowered("symbolic layout outside a graph")
    if sizes.assume(rel):
        return True
    sizes.assume(rel.negated)
    return False


def view_strides(size, stride, new, holds=bool):
    """torch's rule for viewing a tensor of (size, stride) as shape `new` (all sizes >= 1):
    the new strides, or None when the layout cannot give them (reshape then copies, view
    raises). Dims are merged only where each is contiguous with the next (size-1 dims are
    free). `holds` decides each relation (symbolic sizes: see _decided)."""
    if not size:
        return list(contiguous_strides(new))
    out = [0] * len(new)
    view_d = len(new) - 1
    chunk = stride[-1]
    tensor_numel = view_numel = 1
    for d in range(len(size) - 1, -1, -1):
        tensor_numel = tensor_numel * size[d]
        if d == 0 or (holds(sympy.Ne(size[d - 1], 1)) and
                      holds(sympy.Ne(stride[d - 1], tensor_numel * chunk))):
            while view_d >= 0 and (holds(sympy.Lt(view_numel, tensor_numel)) or
                                   holds(sympy.Eq(new[view_d], 1))):
                out[view_d] = view_numel * chunk
                view_numel = view_numel * new[view_d]
                view_d -= 1
            if holds(sympy.Ne(view_numel, tensor_numel)):
                return None
            if d > 0:
                chunk, tensor_numel, view_numel = stride[d - 1], 1, 1
    return out if view_d == -1 else None


def _reshape_groups(old, new):
    """Pair up minimal runs of old/new dims with equal products."""
    groups, i, j = [], 0, 0
    while i < len(old) or j < len(new):
        ia, ja = i, j
        po, pn = sympy.Integer(1), sympy.Integer(1)
        if i < len(old):
            po = old[i]
            i += 1
        if j < len(new):
            pn = new[j]
            j += 1
        while not equals(po, pn) and not (size_hint(po) == size_hint(pn) and same_size(po, pn)):
            if size_hint(po) < size_hint(pn) or j >= len(new):
                if i >= len(old):
                    raise NotLowered("reshape grouping")
                po = po * old[i]
                i += 1
            else:
                pn = pn * new[j]
                j += 1
        # absorb trailing size-1 dims on both sides into this group
        while i < len(old) and old[i] == 1 and (j >= len(new) or new[j] != 1):
            i += 1
        while j < len(new) and new[j] == 1 and (i >= len(old) or old[i] != 1):
            j += 1
        groups.append(((ia, i), (ja, j)))
    return groups


@register("flatten")
def flatten(input, start_dim=0, end_dim=-1):
    if input.ndim == 0:
        return reshape(input, [1])
    s, e = norm_dim(start_dim, input.ndim), norm_dim(end_dim, input.ndim)
    size = input.size[:s] + [product(input.size[s:e + 1])] + input.size[e + 1:]
    return reshape(input, size)


@register("unflatten")
def unflatten(input, dim, sizes):
    d = norm_dim(dim, input.ndim)
    sizes = list(sizes)
    inner = _infer_size(sizes, input.size[d])
    return reshape(input, input.size[:d] + inner + input.size[d + 1:])


@register("view_as", "reshape_as")
def view_as(input, other):
    return reshape(input, list(other.size))


@register("permute")
def permute(input, *dims):
    if len(dims) == 1 and isinstance(dims[0], (list, tuple)):
        dims = dims[0]
    dims = [norm_dim(d, input.ndim) for d in dims]
    if sorted(dims) != list(range(input.ndim)):
        raise NotLowered("bad permutation")
    inv = [dims.index(i) for i in range(input.ndim)]
    out = _view(input, [input.size[d] for d in dims], lambda idx: [idx[inv[i]] for i in range(len(inv))])
    if input.buffer is None and dims != sorted(dims):
        out.view_of = (input, lambda source: permute(source, dims))
    return out


@register("transpose", "swapaxes", "swapdims")
def transpose(input, dim0, dim1):
    if input.ndim == 0:
        return input
    a, b = norm_dim(dim0, input.ndim), norm_dim(dim1, input.ndim)
    p = list(range(input.ndim))
    p[a], p[b] = p[b], p[a]
    return permute(input, p)


@register("t")
def t(input):
    if input.ndim > 2:
        raise NotLowered("t of >2d")
    return transpose(input, 0, 1) if input.ndim == 2 else input


@register("movedim", "moveaxis")
def movedim(input, source, destination):
    src = [source] if isinstance(source, int) else list(source)
    dst = [destination] if isinstance(destination, int) else list(destination)
    src = [norm_dim(s, input.ndim) for s in src]
    dst = [norm_dim(d, input.ndim) for d in dst]
    order = [None] * input.ndim
    for s, d in zip(src, dst):
        order[d] = s
    rest = iter([i for i in range(input.ndim) if i not in src])
    order = [o if o is not None else next(rest) for o in order]
    return permute(input, order)


@register("unsqueeze")
def unsqueeze(input, dim):
    d = dim % (input.ndim + 1) if -input.ndim - 1 <= dim <= input.ndim else None
    if d is None:
        raise NotLowered("unsqueeze dim")
    size = input.size[:d] + [sympy.Integer(1)] + input.size[d:]
    return _view(input, size, lambda idx: idx[:d] + idx[d + 1:])


@register("squeeze")
def squeeze(input, dim=None):
    if dim is None:
        dims = [d for d, s in enumerate(input.size) if s == 1]
    else:
        dims = [norm_dim(d, input.ndim) for d in ([dim] if isinstance(dim, int) else dim)]
        dims = [d for d in dims if input.ndim and input.size[d] == 1]
    if not dims:
        return input
    size = [s for d, s in enumerate(input.size) if d not in dims]
    keep = [d for d in range(input.ndim) if d not in dims]

    def index_map(idx):
        out = [sympy.Integer(0)] * input.ndim
        for d, i in zip(keep, idx):
            out[d] = i
        return out
    return _view(input, size, index_map)


@register("expand")
def expand(input, *sizes):
    if len(sizes) == 1 and isinstance(sizes[0], (list, tuple, torch.Size)):
        sizes = sizes[0]
    sizes = list(sizes)
    lead = len(sizes) - input.ndim
    if lead < 0:
        raise NotLowered("expand")
    out = [input.size[i - lead] if (s == -1) else sympy.sympify(s) for i, s in enumerate(sizes)]
    for i in range(lead, len(out)):
        if not size_is_one(input.size[i - lead]) and not same_size(out[i], input.size[i - lead]):
            raise NotLowered("expand mismatch")
    result = expand_to(input, out)
    if input.buffer is None and result is not input:
        result.view_of = (input, lambda source: expand_to(source, out))
    return result


@register("expand_as")
def expand_as(input, other):
    return expand(input, list(other.size))


@register("broadcast_to")
def broadcast_to(input, size):
    return expand(input, list(size))


def slice_(x, dim, start, end, step=1):
    d = norm_dim(dim, x.ndim)
    n = x.size[d]
    if not isinstance(step, int) or step <= 0:
        raise NotLowered("slice step")
    if n.is_number and all(v is None or isinstance(v, int) for v in (start, end)):
        start, end, step = slice(start, end, step).indices(int(n))
        length = sympy.Integer(max(0, (end - start + step - 1) // step))
    else:
        start, length = _symbolic_slice(n, start, end, step)
    size = list(x.size)
    size[d] = length

    def index_map(idx):
        idx = list(idx)
        idx[d] = idx[d] * step + start
        return idx
    return _view(x, size, index_map)


def _symbolic_slice(n, start, end, step):
    """(start, length) of a slice of a dim of symbolic size `n` or with symbolic bounds. Python
    clamps bounds into [0, n]; which clamp applies is decided on the example sizes and
    recorded as an assumption the wrapper re-checks at every call (else: eager)."""
    sizes = getattr(current.graph, "sizes", None)
    if sizes is None:
        raise NotLowered("symbolic slice outside a graph")

    def bound(v, default):
        if v is None:
            return default
        v = sympy.sympify(v)
        if not v.is_integer:
            raise NotLowered("slice bound")
        if v.is_number and v < 0:
            v = n + v
        elif not v.is_number and not sizes.assume(sympy.Ge(v, 0)):
            sizes.assume(sympy.Lt(v, 0))    # counts from the end, as in Python
            v = n + v
        if not sizes.assume(sympy.Ge(v, 0)):
            sizes.assume(sympy.Lt(v, 0))
            return sympy.Integer(0)
        if not sizes.assume(sympy.Le(v, n)):
            sizes.assume(sympy.Gt(v, n))
            return n
        return v
    lo, hi = bound(start, sympy.Integer(0)), bound(end, n)
    if not sizes.assume(sympy.Lt(lo, hi)):
        sizes.assume(sympy.Ge(lo, hi))
        return lo, sympy.Integer(0)
    return lo, (hi - lo if step == 1 else FloorDiv(hi - lo + step - 1, step))


def select(x, dim, index):
    d = norm_dim(dim, x.ndim)
    n = x.size[d]
    if not isinstance(index, int):
        raise NotLowered("select index")
    if n.is_number:
        if not -int(n) <= index < int(n):
            raise NotLowered("select index")
        index = sympy.Integer(index % int(n))
    else:       # a symbolic dim: in range on the example sizes, checked at each call
        sizes = getattr(current.graph, "sizes", None)
        if sizes is None or not sizes.assume(sympy.Ge(n, index + 1 if index >= 0 else -index)):
            raise NotLowered("select index")
        index = sympy.Integer(index) if index >= 0 else n + index
    size = x.size[:d] + x.size[d + 1:]
    return _view(x, size, lambda idx: list(idx[:d]) + [index] + list(idx[d:]))


register("select")(select)


@register("narrow")
def narrow(input, dim, start, length):
    if not isinstance(start, int):
        raise NotLowered("tensor start")
    d = norm_dim(dim, input.ndim)
    if start < 0:
        start += int(input.size[d])
    return slice_(input, d, start, start + length)


@register("getitem")
def getitem(x, item):
    if isinstance(x, (list, tuple)):
        return x[item]
    if not is_tensor(x):
        raise NotLowered("getitem on non-tensor")
    if not isinstance(item, tuple):
        item = (item,)
    if any(is_tensor(i) or isinstance(i, (list, bool)) for i in item):
        return _leading_tensor_index(x, item)
    n_real = sum(1 for i in item if i is not None and i is not Ellipsis)
    if n_real > x.ndim:
        raise NotLowered("too many indices")
    out, d = x, 0
    expanded = []
    for i in item:
        if i is Ellipsis:
            expanded.extend([slice(None)] * (x.ndim - n_real))
        else:
            expanded.append(i)
    for i in expanded:
        if i is None:
            out = unsqueeze(out, d)
            d += 1
        elif isinstance(i, slice):
            if i != slice(None):
                out = slice_(out, d, i.start, i.stop, 1 if i.step is None else i.step)
            d += 1
        elif isinstance(i, int):
            out = select(out, d, i)
        else:
            raise NotLowered(f"index {type(i).__name__}")
    return out


def _leading_tensor_index(x, item):
    """x[i0, i1, ...] (trailing `:` or `...` allowed) with integer index tensors on x's leading
    dims (transformers' mask functions: `cumsum[batch_idx, q_idx]`): the result is the indices'
    broadcast shape followed by x's other dims, each element loaded at the indices' values,
    counted back from the end when negative and flagged out of range (IndexError) as Python
    indexing is. Other forms (bool masks, lists, a tensor after a slice, None or int) stay
    extern, and so does a single index tensor `x[i]`: eager's message names the offending value
    and dim, which a kernel's flag does not carry (tests/codegen/test_kernel_errors.py)."""
    item = list(item)
    while item and not is_tensor(item[-1]) and (item[-1] is Ellipsis or item[-1] == slice(None)):
        item.pop()
    k = len(item)
    if not 1 < k <= x.ndim or not all(is_tensor(i) and i.dtype in (torch.int64, torch.int32)
                                      for i in item):
        raise NotLowered("advanced indexing")
    shape = broadcast_sizes(*[i.size for i in item])
    picks = [expand_to(i, shape) for i in item]
    nb = len(shape)

    def loader(idx):
        idx = list(idx)
        at = [ops.indirect_indexing(p.loader(idx[:nb]), x.size[d], ERR_INDEX)
              for d, p in enumerate(picks)]
        return x.loader(at + idx[nb:])
    return TensorValue(list(shape) + list(x.size[k:]), x.dtype, loader, None,
                       x.cost + sum(p.cost for p in picks) + 2 * k)


@register("split")
def split(input, split_size_or_sections, dim=0):
    d = norm_dim(dim, input.ndim)
    n = input.size[d]
    if not n.is_number:
        raise NotLowered("symbolic split")
    n = int(n)
    if isinstance(split_size_or_sections, int):
        s = split_size_or_sections
        sizes = [min(s, n - i) for i in range(0, n, s)] if s > 0 else [n]
    else:
        sizes = list(split_size_or_sections)
    outs, start = [], 0
    for s in sizes:
        outs.append(slice_(input, d, start, start + s))
        start += s
    return tuple(outs)


@register("split_with_sizes")
def split_with_sizes(input, split_sizes, dim=0):
    return split(input, list(split_sizes), dim)


@register("chunk")
def chunk(input, chunks, dim=0):
    d = norm_dim(dim, input.ndim)
    n = int(input.size[d])
    s = -(-n // chunks)
    return split(input, s, d)


@register("unbind")
def unbind(input, dim=0):
    d = norm_dim(dim, input.ndim)
    return tuple(select(input, d, i) for i in range(int(input.size[d])))


@register("flip")
def flip(input, dims):
    dims = [norm_dim(d, input.ndim) for d in ([dims] if isinstance(dims, int) else dims)]

    def index_map(idx):
        return [(input.size[d] - 1 - i) if d in dims else i for d, i in enumerate(idx)]
    return _view(input, input.size, index_map)


@register("roll")
def roll(input, shifts, dims=None):
    if dims is None:
        flat = reshape(input, [-1])
        return reshape(roll(flat, shifts, 0), list(input.size))
    shifts = [shifts] if isinstance(shifts, int) else list(shifts)
    dims = [dims] if isinstance(dims, int) else list(dims)
    out = input
    for s, d in zip(shifts, dims):
        d = norm_dim(d, input.ndim)
        n = out.size[d]
        if not n.is_number:
            raise NotLowered("symbolic roll")
        n = int(n)
        s = s % n if n else 0

        def index_map(idx, d=d, n=n, s=s):
            idx = list(idx)
            idx[d] = ModIdx(idx[d] + (n - s), 1, n)
            return idx
        out = _view(out, out.size, index_map)
    return out


@register("repeat")
def repeat(input, *repeats):
    if len(repeats) == 1 and isinstance(repeats[0], (list, tuple, torch.Size)):
        repeats = repeats[0]
    repeats = list(repeats)
    lead = len(repeats) - input.ndim
    if lead < 0:
        raise NotLowered("repeat dims")
    base = [sympy.Integer(1)] * lead + list(input.size)
    size = [b * r for b, r in zip(base, repeats)]

    def index_map(idx):
        return [ModIdx(i, 1, b) if b != 1 else sympy.Integer(0)
                for i, b in zip(idx[lead:], base[lead:])]
    return _view(input, size, index_map)


def _tri(upper):
    def lower(input, diagonal=0):
        if input.ndim < 2:
            raise NotLowered("tril/triu of <2d")
        nd = input.ndim

        def loader(idx):
            r, c = idx[nd - 2], idx[nd - 1]
            diff = ops.sub(ops.index_expr(c, torch.int64), ops.index_expr(r, torch.int64))
            thr = ops.constant(diagonal, torch.int64)
            keep = ops.ge(diff, thr) if upper else ops.le(diff, thr)
            return ops.where(keep, input.loader(idx), ops.constant(0, input.dtype))
        return TensorValue(list(input.size), input.dtype, loader, None, input.cost + 4)
    return lower


register("triu")(_tri(True))
register("tril")(_tri(False))


# ------------------------------------------------------------------ cat / stack


@register("cat", "concat", "concatenate")
def cat(tensors, dim=0):
    tensors = [t for t in tensors if not (t.ndim == 1 and t.size[0] == 0)]
    if not tensors:
        raise NotLowered("empty cat")
    nd = tensors[0].ndim
    if nd == 0:
        raise NotLowered("cat of 0-d")
    d = norm_dim(dim, nd)
    dt = result_dtype(*tensors)
    if any(t.ndim != nd for t in tensors):
        raise NotLowered("cat rank mismatch")
    # a piece of length 0 along `dim` adds nothing, and a clamped load from it would read
    # element 0 of an empty tensor (out of bounds: a crash when its storage is null)
    pieces = [t for t in tensors if not (sympy.sympify(t.size[d]).is_zero)]
    tensors = pieces or tensors[:1]
    offsets, off = [], sympy.Integer(0)
    for t in tensors:
        offsets.append(off)
        off = off + t.size[d]
    size = list(tensors[0].size)
    size[d] = off
    loaders = [value_loader(t, dt) for t in tensors]
    ends = [lo + t.size[d] for lo, t in zip(offsets, tensors)]

    def loader(idx):
        # Clamped indices keep every load in bounds; `where` picks the right piece.
        i = idx[d]
        val = None
        for k in reversed(range(len(tensors))):
            sub_idx = list(idx)
            lo, n = offsets[k], tensors[k].size[d]
            sub_idx[d] = sympy.Max(0, sympy.Min(i - lo, n - 1)) if len(tensors) > 1 else i - lo
            v = loaders[k](sub_idx)
            if val is None:
                val = v
            else:
                end = sympy.sympify(ends[k])
                cond = ops.lt(ops.index_expr(i, torch.int64),
                              ops.constant(int(end), torch.int64) if end.is_number else
                              ops.index_expr(end, torch.int64))
                val = ops.where(cond, v, val)
        return val
    cost = sum(t.cost for t in tensors) + 2 * len(tensors)
    return maybe_realize(TensorValue(size, dt, loader, None, cost))


@register("stack")
def stack(tensors, dim=0):
    nd = tensors[0].ndim + 1
    d = dim % nd
    return cat([unsqueeze(t, d) for t in tensors], d)


@register("hstack")
def hstack(tensors):
    return cat(tensors, 0 if tensors[0].ndim == 1 else 1)


@register("vstack")
def vstack(tensors):
    return cat([t if t.ndim >= 2 else reshape(t, [1, -1]) for t in tensors], 0)


# ------------------------------------------------------------------ fills


def _size_arg(size):
    if len(size) == 1 and isinstance(size[0], (list, tuple, torch.Size)):
        size = size[0]
    return [sympy.sympify(s) for s in size]


def _check_factory(kw):
    dev = kw.get("device")
    if dev is not None:     # the graph's own device (cuda on the Triton path) is fine
        d, own = torch.device(dev), getattr(current.graph, "device", None)
        if d.type not in getattr(current.graph, "devices", ("cpu",)) or \
                d.index is not None and own is not None and d != own:
            raise NotLowered("device")
    if kw.get("requires_grad"):
        raise NotLowered("requires_grad factory")
    if kw.get("layout") not in (None, torch.strided):
        raise NotLowered("layout")


def full(size, fill_value, *, dtype=None, **kw):
    _check_factory(kw)
    if dtype is None:
        dtype = (torch.bool if isinstance(fill_value, bool) else torch.int64
                 if isinstance(fill_value, int) else torch.get_default_dtype())
    check_dtype(dtype)
    size = [sympy.sympify(s) for s in size]
    return TensorValue(size, dtype, lambda idx: ops.constant(fill_value, dtype), None, 0)


register("full")(lambda size, fill_value, **kw: full(list(size), fill_value, **kw))


@register("zeros", "empty")
def zeros(*size, dtype=None, **kw):
    return full(_size_arg(size), 0, dtype=dtype or torch.get_default_dtype(), **kw)


@register("ones")
def ones(*size, dtype=None, **kw):
    return full(_size_arg(size), 1, dtype=dtype or torch.get_default_dtype(), **kw)


def _like(value):
    def lower(input, *, dtype=None, memory_format=None, **kw):
        return full(list(input.size), value, dtype=dtype or input.dtype, **kw)
    return lower


register("zeros_like", "empty_like")(_like(0))
register("ones_like")(_like(1))


@register("full_like")
def full_like(input, fill_value, *, dtype=None, memory_format=None, **kw):
    return full(list(input.size), fill_value, dtype=dtype or input.dtype, **kw)


@register("new_zeros", "new_empty")
def new_zeros(input, *size, dtype=None, **kw):
    return full(_size_arg(size), 0, dtype=dtype or input.dtype, **kw)


@register("new_ones")
def new_ones(input, *size, dtype=None, **kw):
    return full(_size_arg(size), 1, dtype=dtype or input.dtype, **kw)


@register("new_full")
def new_full(input, size, fill_value, *, dtype=None, **kw):
    return full(list(size), fill_value, dtype=dtype or input.dtype, **kw)


@register("arange")
def arange(*args, dtype=None, **kw):
    _check_factory(kw)
    if len(args) == 1:
        start, end, step = 0, args[0], 1
    elif len(args) == 2:
        start, end, step = args[0], args[1], 1
    else:
        start, end, step = args
    if not all(isinstance(v, int) and not isinstance(v, bool) for v in (start, end, step)):
        raise NotLowered("non-int arange")
    n = max(0, -(-(end - start) // step))
    dtype = dtype or torch.int64
    check_dtype(dtype)

    def loader(idx):
        v = ops.index_expr(idx[0] * step + start, torch.int64)
        return ops.to_dtype(v, dtype) if dtype != torch.int64 else v
    return TensorValue([sympy.Integer(n)], dtype, loader, None, 1)


@register("fill")
def fill(input, value):
    if is_tensor(value):
        if value.ndim != 0:
            raise NotLowered("fill with tensor")
        v = cast(value, input.dtype)
        return TensorValue(list(input.size), input.dtype, lambda idx: v.loader([]), None, v.cost)
    return full(list(input.size), value, dtype=input.dtype)


@register("zero")
def zero(input):
    return full(list(input.size), 0, dtype=input.dtype)


# ------------------------------------------------------------------ indexing with tensors


def _indirect(index_tv: TensorValue, size, code=ERR_INDEX):
    """The index loader of gather / index_select / embedding. Unlike Python-style indexing,
    these ops refuse a negative index (eager raises), so a negative value is mapped to `size`:
    out of range, which the kernel flags with `code` (the op family's error, codegen/ops.py),
    instead of counting back from the end."""
    if index_tv.dtype not in (torch.int64, torch.int32):
        raise NotLowered("index dtype")

    def load(idx):
        v = index_tv.loader(idx)
        zero = ops.constant(0, index_tv.dtype)
        past = ops.index_expr(sympy.sympify(size), index_tv.dtype)
        return ops.indirect_indexing(ops.where(ops.lt(v, zero), past, v), size, code)
    return load


@register("index_select")
def index_select(input, dim, index):
    d = norm_dim(dim, input.ndim)
    if index.ndim > 1:
        raise NotLowered("index_select index ndim")
    if index.ndim == 0:
        index = unsqueeze(index, 0)
    ind = _indirect(index, input.size[d], ERR_INDEX_IN_SELF)
    size = list(input.size)
    size[d] = index.size[0]

    def loader(idx):
        idx = list(idx)
        idx[d] = ind([idx[d]])
        return input.loader(idx)
    return TensorValue(size, input.dtype, loader, None, input.cost + 2)


@register("embedding")
def embedding(input, weight, padding_idx=None, max_norm=None, norm_type=2.0,
              scale_grad_by_freq=False, sparse=False):
    if max_norm is not None:
        raise NotLowered("embedding max_norm")
    if not is_tensor(input) or weight.ndim != 2:
        raise NotLowered("embedding args")
    ind = _indirect(input, weight.size[0], ERR_INDEX_IN_SELF)
    nd = input.ndim

    def loader(idx):
        return weight.loader([ind(idx[:nd]), idx[nd]])
    return TensorValue(list(input.size) + [weight.size[1]], weight.dtype, loader, None,
                       weight.cost + 2)


@register("gather")
def gather(input, dim, index, *, sparse_grad=False):
    d = norm_dim(dim, input.ndim)
    if index.ndim != input.ndim:
        raise NotLowered("gather rank")
    ind = _indirect(index, input.size[d])

    def loader(idx):
        idx2 = list(idx)
        idx2[d] = ind(idx)
        return input.loader(idx2)
    return TensorValue(list(index.size), input.dtype, loader, None, input.cost + 2)


"""Semantics cases: torch.func transforms that library code calls under is_compiling() —
torch.vmap (transformers' masking_utils builds masks with nested vmaps over index functions) and
the associative_scan over a vmapped combine function (Mamba's selective scan), with the pytree
helpers torch's own code flattens with. pydynamo traces the function once on per-example values
into a sub-graph called by one node (pydynamo/executor/higher_order.py); what it cannot represent
so (in-place ops, chunk_size, non-tensor outputs) runs eagerly at a graph break."""
import torch
import torch.utils._pytree as pytree
from torch._higher_order_ops.associative_scan import associative_scan

from compat_case import case, t

# --- torch.vmap ------------------------------------------------------------------------------


@case(t(3, 4), t(4))
def vmap_lambda_unbatched_arg(x, y):
    return torch.vmap(lambda a, b: a * b + 1, in_dims=(0, None))(x, y).sin()


@case(t(3, 4), t(5), change=(t(6, 4), t(5)))
def vmap_closure_reduction(x, w):
    def f(row):
        return row.sum() * w.mean() + row.max()
    return torch.vmap(f)(x)


@case(t(4, 3), t(3, 4))
def vmap_in_dims_1(x, y):
    return torch.vmap(torch.dot, in_dims=(1, 0))(x, y)


@case(t(3, 4))
def vmap_out_dims_1(x):
    return torch.vmap(lambda r: r * 2, out_dims=1)(x)


@case(t(3, 4), t(3, 4))
def vmap_tuple_output(x, y):
    a, b = torch.vmap(lambda p, q: (p + q, p * q))(x, y)
    return a - b


@case(t(2, 3, 4))
def vmap_nested(x):
    inner = torch.vmap(lambda v: v.softmax(0))
    return torch.vmap(inner)(x) + 1


@case(t(3, 4), t(3, 4))
def vmap_tuple_argument(x, y):
    def f(pair):
        a, b = pair
        return a * b.exp()
    return torch.vmap(f, in_dims=((0, 0),))((x, y))


@case(t(5), t(5))
def vmap_matmul_outer(x, y):
    return torch.vmap(lambda a: a * y)(x)


@case(2, 3, 4)
def vmap_index_mask_functions(b, q, kv):
    """transformers' sdpa_mask with use_vmap: a mask function of indices vmapped over all four."""
    def causal(batch_idx, head_idx, q_idx, kv_idx):
        return kv_idx <= q_idx

    fn = causal
    for dims in [(None, None, None, 0), (None, None, 0, None), (None, 0, None, None), (0, None, None, None)]:
        fn = torch.vmap(fn, in_dims=dims, out_dims=0)
    return fn(torch.arange(b), torch.arange(1), torch.arange(q), torch.arange(kv))


@case(t(2, 4))
def vmap_mask_reads_closure_tensor(x):
    """transformers' padding mask function under TransformGetItemToIndex: aten.index of a
    closure tensor by the (batched) index tensors."""
    pad = x > 0

    def padding(batch_idx, kv_idx):
        return torch.ops.aten.index(pad, [batch_idx, kv_idx])
    fn = torch.vmap(torch.vmap(padding, in_dims=(None, 0)), in_dims=(0, None))
    return fn(torch.arange(2), torch.arange(4)) & (x < 1)


@case(t(3, 4))
def vmap_in_place_on_own_tensor(x):
    def f(r):
        return r.clone().add_(1) * 2
    return torch.vmap(f)(x)


@case(t(3, 4), t(3))
def vmap_no_grad_inside(x, y):
    def f(r, s):
        with torch.no_grad():
            z = r * s
        return z + r
    return torch.vmap(f)(x, y)


@case(t(3, 4, requires_grad=True))
def vmap_grad_flows(x):
    return torch.vmap(lambda r: (r * r).sum())(x) * 2


# --- torch.utils._pytree and associative_scan ------------------------------------------------


@case(t(3), t(3))
def pytree_flatten_unflatten(x, y):
    leaves, spec = pytree.tree_flatten({"a": (x, None), "b": [y]})
    leaves = [v if v is None else v * 2 for v in leaves]
    out = pytree.tree_unflatten(leaves, spec)
    return out["b"][0] + pytree.tree_leaves((x, [y]))[1], out["a"][1] is None


@case(t(2, 3))
def pytree_tree_map(x):
    out = pytree.tree_map(lambda v: v + 1, (x, [x * 2]))
    return out[0] * out[1][0]


def combine(left, right):
    a_left, b_left = left
    a_right, b_right = right
    return a_left * a_right, a_right * b_left + b_right


@case(t(2, 3, 5, 4), t(2, 3, 5, 4))
def associative_scan_mamba(a, b):
    """Mamba's selective scan on CPU: associative_scan over torch.vmap(combine_fn). (No size
    change: torch.compile's symbolic recompile of the scan takes over the harness's 60 s per case
    on a loaded machine; tests/semantics/test_higher_order.py changes sizes against eager.)"""
    _, states = associative_scan(combine, (a.sigmoid(), b), dim=2, combine_mode="generic")
    return states.sum(-1)


@case(t(7, 3))
def associative_scan_cumsum(x):
    return associative_scan(lambda p, q: p + q, x, dim=0, combine_mode="generic")

"""Compat cases on inputs that are not plain contiguous tensors: views with a storage offset (what
`qkv.split(...)` or a KV-cache slice hands a function), transposed and channels_last inputs, with
views, matmuls, scans and in-place updates on them (issue 14: no test input had an offset)."""
import torch
import torch.nn.functional as F

from compat_case import case, t

OFF, TR, CL = "offset", "transposed", "channels_last"


@case(t(5, 6, layout=OFF), t(6, 3), change=(t(7, 6, layout=OFF), t(6, 3)))
def offset_slice_matmul(x, w):
    return x[1:] @ w


@case(t(6, 4, layout=OFF), change=(t(9, 4, layout=OFF),))
def offset_cumsum_of_slice(x):
    return torch.cumsum(x[2:], 0)


@case(t(2, 5, 12, layout=OFF))
def offset_qkv_split_attention(qkv):
    q, k, v = qkv.split(4, -1)
    return torch.softmax(q @ k.transpose(-1, -2), -1) @ v


@case(t(3, 4, layout=OFF))
def offset_input_updated_in_place(x):
    x.add_(1)
    x[:, 0] = 0.5
    return x * 2


@case(t(4, 6, layout=TR), change=(t(5, 6, layout=TR),))
def transposed_view_chain(x):
    return x.t()[1:].reshape(-1) * 2, x[:, ::2].sum(0)


@case(t(2, 3, 5, 5, layout=CL), t(4, 3, 3, 3))
def channels_last_conv_relu(x, w):
    y = F.conv2d(x, w, padding=1)
    return F.relu(y) + x.mean(1, keepdim=True)


@case(t(4, 5, dtype=torch.int64, layout=OFF), t(4, 5, dtype=torch.bool, layout=TR))
def offset_integer_results_exact(a, m):
    return (a * 1000 + 1).sum(), a.masked_fill(m, 0).cumsum(1), m.sum(0)


@case(t(3, 8, layout=OFF), 5)
def offset_kv_cache_slice(cache, n):
    return cache[:, :n].softmax(-1), cache[:, n:].amax(-1)

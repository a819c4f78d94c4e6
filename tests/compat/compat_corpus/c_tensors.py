"""Compat cases: tensors, torch functions, torch.nn.functional, Tensor methods and attributes,
torch.Size / dtype / device objects, indexing, in-place ops and `x[i] = v` on inputs."""
import torch
import torch.nn.functional as F

from compat_case import case, factory, kw, t

F64 = torch.float64


@case(t(2), changes=((t(2, dtype=F64),), (t(2),)))  # recompile, then hit the first entry
def add_one(x):
    return x + 1


@case(t(3, 4), t(3, 4), change=(t(5, 4), t(5, 4)))
def binary_ops(x, y):
    return x + y, x - y, x * y, x / (y.abs() + 1), x ** 2, -x


@case(t(4, 4))
def unary_chain(x):
    return torch.tanh(torch.sin(x).exp()).relu().sqrt() + torch.cos(x).abs()


@case(t(3, 5), change=(t(3, 5, dtype=F64),))
def reductions(x):
    return x.sum(), x.mean(dim=1), x.amax(0), x.min(), torch.prod(x, 1), x.std(dim=0)


@case(t(3, 5))
def reduction_keepdim(x):
    return x.sum(-1, keepdim=True) / x.norm(dim=-1, keepdim=True)


@case(t(4, 6))
def argmax_topk(x):
    v, i = x.topk(2, dim=1)
    return x.argmax(dim=1), v, i, torch.sort(x, dim=0).values


@case(t(3, 4), t(4, 5), change=(t(3, 4, dtype=F64), t(4, 5, dtype=F64)))
def matmul(a, b):
    return a @ b, torch.mm(a, b), torch.matmul(a, b).t()


@case(t(2, 3, 4), t(2, 4, 5))
def bmm_einsum(a, b):
    return torch.bmm(a, b) + torch.einsum("bij,bjk->bik", a, b)


@case(t(2, 3, 4))
def views(x):
    return x.view(6, 4), x.reshape(-1), x.permute(2, 0, 1), x.transpose(0, 1).contiguous(), x.flatten(1)


@case(t(2, 1, 4))
def squeeze_unsqueeze(x):
    return x.squeeze(1).unsqueeze(0), x.expand(2, 3, 4), x[:, None].shape


@case(t(4, 6))
def slicing(x):
    return x[1:3], x[:, ::2], x[-1], x[..., 0], x[None, 1:, 2]


@case(t(5, 3), change=(t(6, 3),))
def index_with_tensor(x):
    idx = torch.tensor([0, 2, 4])
    return x[idx], x.index_select(0, idx), x.gather(1, torch.zeros(5, 1, dtype=torch.long)[: x.shape[0]])


@case(t(4, 4))
def masked(x):
    m = x > 0
    return torch.where(m, x, torch.zeros_like(x)), x.masked_fill(~m, -1.0), m.sum()


@case(t(2, 3), t(2, 3), change=(t(2, 3), t(2, 3)))  # fresh values only: no recompile
def cat_stack(x, y):
    return torch.cat([x, y], 0), torch.stack((x, y), dim=1), torch.cat([x, y], dim=-1).chunk(3, dim=1)


@case(t(6, 4))
def split_unbind(x):
    a, b = x.split(3)
    c = x.unbind(1)
    return a * b, c[0] + c[3]


@case(t(3, 4))
def factories(x):
    return (x + torch.ones(3, 4), torch.zeros_like(x), torch.full((2,), 3.5), torch.arange(6).view(2, 3),
            torch.eye(3) @ x, torch.empty_like(x).fill_(2.0), x.new_ones(2))


@case(t(3, 4), change=(t(3, 4, dtype=F64),))
def tensor_attrs(x):
    return x * 2, x.shape, x.size(), x.size(1), x.dim(), x.ndim, x.dtype, x.device, x.numel(), x.requires_grad


@case(t(3, 4))
def transpose_attrs(x):
    return x.T + 1, x.mT.shape, x.is_floating_point(), x.is_contiguous(), x.T.is_contiguous()


@case(t(3, 4), t(2, 3, 4))
def size_objects(x, y):
    s = x.shape
    n = s[0] * s[1]
    return x.reshape(n), torch.Size([s[1], s[0]]), y.shape[1:] == s, len(y.shape), s.numel()


@case(t(4, dtype=torch.int64), change=(t(4, dtype=torch.int32),))
def int_tensors(x):
    return x * 2, x // 3, x % 4, x.float() / 2, x.bitwise_and(3)


@case(t(4), change=(t(4, dtype=F64),))
def dtype_objects(x):
    d = x.dtype
    y = x.to(torch.float64) if d == torch.float32 else x.to(torch.float32)
    return y, d.is_floating_point, x.to(dtype=torch.float16).float(), torch.zeros(2, dtype=d)


@case(t(3))
def device_objects(x):
    dev = x.device
    return torch.ones(3, device=dev) + x, dev.type, x.to(dev), x.cpu()


@case(t(2, 8))
def functional_activations(x):
    return F.relu(x), F.gelu(x), F.silu(x), F.softmax(x, dim=-1), F.log_softmax(x, -1), F.leaky_relu(x, 0.1)


@case(t(4, 8), t(16, 8), t(16))
def functional_linear(x, w, b):
    return F.linear(x, w, b), F.linear(x, w)


@case(t(2, 3, 8))
def functional_layer_norm(x):
    return F.layer_norm(x, (8,)), F.normalize(x, dim=-1), F.dropout(x, p=0.5, training=False)


@case(t(1, 2, 6, 6), t(3, 2, 3, 3))
def functional_conv_pool(x, w):
    y = F.conv2d(x, w, padding=1)
    return F.max_pool2d(y, 2), F.avg_pool2d(y, 2), F.adaptive_avg_pool2d(y, 1)


@case(t(5, 4), factory(lambda g: torch.randint(0, 4, (5,), generator=g)))
def functional_losses(x, target):
    return F.cross_entropy(x, target), F.mse_loss(x, x.flip(0)), F.nll_loss(F.log_softmax(x, 1), target)


@case(t(2, 4, 8), t(2, 4, 8), t(2, 4, 8))
def scaled_dot_product(q, k, v):
    return F.scaled_dot_product_attention(q, k, v), F.scaled_dot_product_attention(q, k, v, is_causal=True)


@case(t(6))
def torch_math_functions(x):
    return torch.clamp(x, -0.5, 0.5), torch.addcmul(x, x, x, value=0.5), torch.lerp(x, x.flip(0), 0.3), x.clamp(min=0)


@case(t(3, 3))
def cumulative(x):
    return x.cumsum(0), torch.cumprod(x, dim=1), x.tril(), x.triu(1), x.diag()


@case(t(4, 4), t(4))
def broadcasting(x, y):
    return x + y, x * y[:, None], torch.outer(y, y), y.unsqueeze(0).expand_as(x) - x


@case(t(5))
def inplace_on_input(x):
    x.add_(1)
    x.mul_(2)
    return x.sum()


@case(t(4, 3), t(3))
def setitem_on_input(x, v):
    x[0] = v
    x[1:3, 0] = 5.0
    x[:, 2] += 1
    return x * 2


@case(t(4))
def setitem_on_local(x):
    y = x.clone()
    y[1] = 0.5
    y[y > 0.7] = 0.0
    return y


@case(t(3, 3))
def inplace_on_view(x):
    y = x.clone()
    y.diagonal().fill_(1.0)
    y[0].zero_()
    return y


@case(t(4, 5))
def clone_detach_contig(x):
    y = x.detach().clone()
    return y.t().contiguous().view(-1), x.new_zeros(3), x.type_as(torch.ones(1, dtype=F64))


@case(t(3, 4, requires_grad=True))
def requires_grad_input(x):
    return x * 2, x.requires_grad, (x * 3).detach().requires_grad


# torch.allclose returns a Python bool from tensor data: both engines graph-break there (one graph
# before it, nothing after)
@case(t(2, 3), t(2, 3), change=(t(2, 3), t(2, 3)))  # fresh values only: no recompile
def comparisons(x, y):
    return x > y, x == x, torch.eq(x, y), (x < 0) & (y < 0), torch.maximum(x, y), torch.allclose(x, x)


@case(t(4, 4))
def complex_tensor(x):
    z = torch.complex(x, x.flip(0))
    return z.abs(), z.real * 2, torch.view_as_real(z * z)


@case(t(8))
def tensor_method_chain(x):
    return x.view(2, 4).t().reshape(4, 2).sum(1).softmax(0).mul(3).sub_(1)


@case(t(3, 4), 1)
def int_arg_dim(x, dim):
    return x.sum(dim), x.softmax(dim), x.size(dim)


@case(t(2, 5))
def rand_like_shapes(x):
    return torch.zeros(x.shape), torch.ones(x.size(0), 2 * x.size(1)), x.new_full((x.shape[1],), 7.0)


@case(t(3, 4), t(3, 4))
def torch_where_scalar(x, y):
    return torch.where(x > y, 1.0, -1.0), torch.where(x > 0, x, y)


@case(t(2, 3, 4, 5))
def multi_dim_reduce(x):
    return x.sum((1, 3)), x.mean(dim=[0, 2], keepdim=True), x.var(dim=-1, unbiased=False)


@case(t(6, 6), t(6, 6), kwargs={"alpha": 0.5}, change=kw(t(6, 6), t(6, 6), alpha=2.0))
def kwargs_to_torch(x, y, alpha):
    return torch.add(x, y, alpha=alpha), torch.sub(x, y, alpha=2)

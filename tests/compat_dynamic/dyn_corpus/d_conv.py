"""Convolution and pooling output sizes."""
import torch
import torch.nn.functional as F

from dyn_case import dyn_case, t


@dyn_case((t(2, 3, 8), t(4, 3, 3)), (t(2, 3, 11), t(4, 3, 3)), (t(3, 3, 16), t(4, 3, 3)))
def conv1d_pad(x, w):
    return F.conv1d(x, w, padding=1).relu()


@dyn_case((t(2, 3, 8, 8), t(4, 3, 3, 3)), (t(2, 3, 10, 8), t(4, 3, 3, 3)), (t(1, 3, 12, 9), t(4, 3, 3, 3)))
def conv2d_stride(x, w):
    return F.conv2d(x, w, stride=2).mean((2, 3))


@dyn_case((t(2, 3, 8, 8), t(4, 3, 3, 3)), (t(2, 3, 10, 10), t(4, 3, 3, 3)), (t(2, 3, 13, 9), t(4, 3, 3, 3)))
def conv_pool(x, w):
    y = F.max_pool2d(F.conv2d(x, w, padding=1), 2)
    return y.flatten(1).sum(1) + y.shape[-1]

"""Convolution, pooling and batch-normalisation layers: Conv1d/Conv2d,
MaxPool1d/2d, AvgPool1d/2d, AdaptiveAvgPool2d, BatchNorm1d/2d.

They call the functions of fastad/ops/conv.pyx. Weights use PyTorch's layout,
(out_channels, in_channels / groups, *kernel), and its default initialisation
(kaiming-uniform with a = sqrt(5): uniform in +-1/sqrt(fan_in) for the weight
and the bias).
"""
import math

import numpy as np

from fastad.ops.conv import (adaptive_avg_pool2d, avg_pool1d, avg_pool2d, batch_norm, conv1d,
                            conv2d, conv_steps, int_tuple, max_pool1d, max_pool2d, pool_window)
from fastad._engine.graph import Parameter
from fastad import random as fastad_random
from fastad.checks import check_flag, check_int, check_number, check_sizes
from fastad.nn.functional import check_float_variable
from fastad.nn.layers import _uniform
from fastad.nn.module import Module, _WithArguments

__all__ = ["Conv1d", "Conv2d", "MaxPool1d", "MaxPool2d", "AvgPool1d", "AvgPool2d",
           "AdaptiveAvgPool2d", "BatchNorm1d", "BatchNorm2d"]


class _ConvNd(Module):
    function = None
    dims = 0

    def __init__(self, in_channels, out_channels, kernel_size, stride=1, padding=0, dilation=1,
                 groups=1, bias=True, dtype=None, generator=None):
        super().__init__()
        who = type(self).__name__
        in_channels, out_channels, groups = check_sizes(who, in_channels=in_channels,
                                                        out_channels=out_channels, groups=groups)
        kernel = int_tuple(who, "kernel_size", kernel_size, self.dims, 1)
        conv_steps(who, self.dims, stride, padding, dilation)
        if in_channels % groups or out_channels % groups:
            raise ValueError(f"{who}: in_channels {in_channels} and out_channels {out_channels} "
                             f"must both be divisible by groups={groups}")
        rng = fastad_random.generator(who, generator)
        fan_in = in_channels // groups * math.prod(kernel)
        bound = 1 / math.sqrt(fan_in)
        self.in_channels, self.out_channels, self.kernel_size = in_channels, out_channels, kernel
        self.stride, self.padding, self.dilation, self.groups = stride, padding, dilation, groups
        self.weight = _uniform((out_channels, in_channels // groups) + kernel, bound, rng, dtype)
        self.bias = _uniform((out_channels,), bound, rng, dtype) \
            if check_flag(who, "bias", bias) else None

    def forward(self, x):
        return type(self).function(x, self.weight, self.bias, self.stride, self.padding,
                                   self.dilation, self.groups)

    def extra_repr(self):
        return (f"{self.in_channels}, {self.out_channels}, kernel_size={self.kernel_size}, "
                f"stride={self.stride}, padding={self.padding}, dilation={self.dilation}, "
                f"groups={self.groups}, bias={self.bias is not None}")


class Conv1d(_ConvNd):
    """1-d convolution over x (batch, in_channels, length), as `fa.conv1d`.

    >>> conv = fa.nn.Conv1d(3, 8, kernel_size=5, padding=2)
    >>> conv(fa.Input(np.zeros((4, 3, 100)))).shape
    (4, 8, 100)
    """
    function = staticmethod(conv1d)
    dims = 1


class Conv2d(_ConvNd):
    """2-d convolution over x (batch, in_channels, height, width), as `fa.conv2d`;
    kernel_size, stride, padding and dilation are ints or (height, width) pairs.

    >>> conv = fa.nn.Conv2d(1, 16, kernel_size=3, padding=1)
    >>> conv(fa.Input(np.zeros((32, 1, 8, 8)))).shape
    (32, 16, 8, 8)
    """
    function = staticmethod(conv2d)
    dims = 2


class _PoolNd(_WithArguments):
    arguments = ("kernel_size", "stride", "padding")
    dims = 0

    def __init__(self, kernel_size, stride=None, padding=0):
        super().__init__(kernel_size, stride, padding)

    def check(self, kernel_size, stride, padding):
        pool_window(type(self).__name__, self.dims, kernel_size, stride, padding)


class MaxPool1d(_PoolNd):
    """`fa.max_pool1d` as a layer: MaxPool1d(kernel_size, stride=None, padding=0)."""
    function = staticmethod(max_pool1d)
    dims = 1


class MaxPool2d(_PoolNd):
    """`fa.max_pool2d` as a layer: MaxPool2d(kernel_size, stride=None, padding=0).

    >>> fa.nn.MaxPool2d(2)(fa.Input(np.zeros((1, 4, 8, 8)))).shape
    (1, 4, 4, 4)
    """
    function = staticmethod(max_pool2d)
    dims = 2


class AvgPool1d(_PoolNd):
    """`fa.avg_pool1d` as a layer: AvgPool1d(kernel_size, stride=None, padding=0)."""
    function = staticmethod(avg_pool1d)
    dims = 1


class AvgPool2d(_PoolNd):
    """`fa.avg_pool2d` as a layer: AvgPool2d(kernel_size, stride=None, padding=0)."""
    function = staticmethod(avg_pool2d)
    dims = 2


class AdaptiveAvgPool2d(_WithArguments):
    """`fa.adaptive_avg_pool2d` as a layer: AdaptiveAvgPool2d(output_size).

    >>> fa.nn.AdaptiveAvgPool2d(1)(fa.Input(np.zeros((2, 16, 5, 5)))).shape
    (2, 16, 1, 1)
    """
    function, arguments = adaptive_avg_pool2d, ("output_size",)

    def __init__(self, output_size):
        super().__init__(output_size)

    def check(self, output_size):
        int_tuple("AdaptiveAvgPool2d", "output_size", output_size, 2, 1)


class _BatchNorm(Module):
    ranks = ()

    def __init__(self, num_features, eps=1e-5, momentum=0.1, affine=True, dtype=None):
        super().__init__()
        who = type(self).__name__
        self.num_features = check_int(who, "num_features", num_features)
        self.momentum = check_number(who, "momentum", momentum, at_least=0, at_most=1)
        self.eps = check_number(who, "eps", eps, above=0)
        affine = check_flag(who, "affine", affine)
        self.weight = Parameter(np.ones(num_features), dtype=dtype) if affine else None
        self.bias = Parameter(np.zeros(num_features), dtype=dtype) if affine else None
        self.register_buffer("running_mean", np.zeros(num_features), dtype=dtype)
        self.register_buffer("running_var", np.ones(num_features), dtype=dtype)

    def forward(self, x):
        who = type(self).__name__
        check_float_variable(who, x)
        if len(x.shape) not in self.ranks or x.shape[1] != self.num_features:
            shapes = " or ".join(f"{r}-D" for r in self.ranks)
            raise ValueError(f"{who}: x must be {shapes} with {self.num_features} channels on axis "
                             f"1 (batch, num_features, ...), got shape {x.shape}")
        if self.training and x.size // x.shape[1] <= 1:
            raise ValueError(f"{who}: training needs more than one value per channel to compute a "
                             f"batch variance, got x shape {x.shape} (a batch of one; use "
                             f"eval() to normalise with the running averages)")
        return batch_norm(x, self.running_mean.value, self.running_var.value, self.weight,
                          self.bias, self.training, self.momentum, self.eps)

    def extra_repr(self):
        return (f"{self.num_features}, eps={self.eps}, momentum={self.momentum}, "
                f"affine={self.weight is not None}")


class BatchNorm1d(_BatchNorm):
    """Batch normalisation of x (batch, num_features) or (batch, num_features, length)
    per feature, as PyTorch's: training normalises with the batch's mean and biased
    variance and moves running_mean/running_var (buffers, unbiased variance) by
    `momentum` at every forward and replay (building a graph computes its
    forward, so that moves them too); eval() normalises with them.

    >>> norm = fa.nn.BatchNorm1d(64)
    >>> norm(fa.Input(np.random.randn(32, 64))).shape
    (32, 64)
    """
    ranks = (2, 3)


class BatchNorm2d(_BatchNorm):
    """Batch normalisation of x (batch, num_features, height, width) per channel; see
    BatchNorm1d.

    >>> norm = fa.nn.BatchNorm2d(16)
    >>> norm(fa.Input(np.random.randn(8, 16, 4, 4))).shape
    (8, 16, 4, 4)
    """
    ranks = (4,)

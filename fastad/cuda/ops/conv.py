"""Convolutions, pooling and batch normalisation on a GPU (cuda/conv.cu).

fastad/ops/conv.pyx checks the arguments and works out the geometry, then sends
device operands here. A convolution is im2col, one cuBLAS GEMM per group into
a staged (out_channels, batch * spots) buffer, and a copy into the output's
layout (adding the bias); its backward stages the gradient the same way, and
two GEMMs per group give the weight's and the columns' gradients, which col2im
folds back onto the input. Scratch buffers are made when the node is built.
"""
import numpy as np

from fastad._engine.graph import grad_slot
from fastad.cuda.ops.common import (I32, I64, InputGrads, backend, cleared, from_host, launch,
                                    make_node)

GEOMETRY = ("n", "c", "h", "w", "oh", "ow", "kh", "kw", "sh", "sw", "ph", "pw", "dh", "dw")


class Conv:
    """y[n, o] = the group's weights against x's receptive fields (+ bias[o])."""

    def __init__(self, geometry, groups, out_channels, dtype):
        g = self.g = geometry
        self.meta = from_host(np.array([g[name] for name in GEOMETRY], dtype=np.int64))
        self.groups, self.out_channels = groups, out_channels
        self.spots = g["oh"] * g["ow"]
        self.width = g["n"] * self.spots
        self.depth = g["c"] // groups * g["kh"] * g["kw"]
        xb = backend()
        self.cols = xb.empty((groups, self.depth, self.width), dtype)
        self.dcols = xb.empty((groups, self.depth, self.width), dtype)
        self.staged = xb.empty((groups, out_channels // groups, self.width), dtype)

    def forward(self, node):
        x, w = node.parents[:2]
        bias = node.parents[2].value if len(node.parents) == 3 else self.staged
        if self.width == 0:
            return
        launch("im2col", node.dtype, self.cols.size, x.value, self.cols, self.meta,
               I64(self.cols.size))
        weights = w.value.reshape((self.groups, -1, self.depth))
        gemm = backend().gemm
        for grp in range(self.groups):
            gemm(weights[grp], self.cols[grp], self.staged[grp])
        launch("conv_unstage", node.dtype, node.size, self.staged, bias, node.value,
               I64(self.g["n"]), I64(self.out_channels), I64(self.spots),
               I32(len(node.parents) == 3))

    def backward(self, node):
        x, w = node.parents[:2]
        launch("conv_stage", node.dtype, node.size, node.grad, self.staged, I64(self.g["n"]),
               I64(self.out_channels), I64(self.spots))
        gemm = backend().gemm
        if len(node.parents) == 3 and node.parents[2].requires_grad:
            grad, accumulate = grad_slot(node.parents[2])
            launch("conv_bias_backward", node.dtype, self.out_channels, self.staged, grad,
                   I64(self.out_channels), I64(self.width), I32(accumulate))
        if w.requires_grad:
            if self.width == 0:
                cleared(*grad_slot(w))
            else:
                grad, accumulate = grad_slot(w)
                target = grad.reshape((self.groups, -1, self.depth))
                for grp in range(self.groups):        # dW_g = dY_g @ cols_g^T
                    gemm(self.staged[grp], self.cols[grp], target[grp], trans_b=True,
                         beta=1.0 if accumulate else 0.0)
        if x.requires_grad:
            grad, accumulate = grad_slot(x)
            if self.width == 0:                       # an empty batch: x has no elements
                return
            weights = w.value.reshape((self.groups, -1, self.depth))
            for grp in range(self.groups):            # dcols_g = W_g^T @ dY_g
                gemm(weights[grp], self.staged[grp], self.dcols[grp], trans_a=True)
            launch("col2im", node.dtype, x.size, self.dcols, grad, self.meta, I64(x.size),
                   I32(accumulate))


def conv(op, inputs, out_shape, geometry, groups):
    """The convolution node; the arguments are fastad/ops/conv.pyx's checked geometry."""
    x = inputs[0]
    return make_node(op, inputs, out_shape, x.dtype,
                     Conv(geometry, groups, out_shape[1], x.dtype))


class Pool(InputGrads):
    """Max or mean over each window of each (batch, channel) plane (see Pool in conv.pyx)."""

    def __init__(self, x_shape, out_shape, is_max, windows, divisor):
        self.planes = I64(x_shape[0] * x_shape[1])
        h, w = (x_shape[2:] if len(x_shape) == 4 else (1,) + x_shape[2:])
        oh, ow = (out_shape[2:] if len(out_shape) == 4 else (1,) + out_shape[2:])
        self.dims = (I64(h), I64(w), I64(oh), I64(ow), I64(windows.shape[1]))
        self.windows = from_host(windows)
        self.divisor, self.is_max = I64(divisor), I32(is_max)
        self.argmax = backend().empty(out_shape if is_max else (1,), np.int64)

    def forward(self, node):
        launch("pool_forward", node.dtype, node.size, node.parents[0].value, node.value,
               self.argmax, self.windows, self.planes, *self.dims, self.divisor, self.is_max)

    def backward_into(self, node, k, x, grad, accumulate):
        launch("pool_backward", node.dtype, node.size, node.grad, cleared(grad, accumulate),
               self.argmax, self.windows, self.planes, *self.dims, self.divisor, self.is_max)


def pool(op, x, out_shape, is_max, windows, divisor):
    """The pooling node; windows: int64 (4, row_len) bounds as fastad/ops/conv.pyx made them."""
    return make_node(op, (x,), out_shape, x.dtype, Pool(x.shape, out_shape, is_max, windows,
                                                        divisor))


class BatchNorm:
    """Per-channel normalisation (see BatchNorm in conv.pyx); `stats` holds the mean
    and 1/sqrt(var + eps) the last forward used, `sums` the backward's channel sums."""

    def __init__(self, x, weight, bias, running_mean, running_var, training, momentum, eps):
        self.batch, self.channels = x.shape[0], x.shape[1]
        self.spots = x.size // (self.batch * self.channels) if x.size else 0
        self.weight, self.bias = weight, bias
        self.running_mean, self.running_var = running_mean, running_var
        self.training, self.momentum, self.eps = training, momentum, eps
        xb = backend()
        self.stats = xb.zeros((2, self.channels), np.float64)
        self.sums = xb.zeros((2, self.channels), np.float64)
        self.ones = from_host(np.ones(self.channels, x.dtype))
        self.zeros = from_host(np.zeros(self.channels, x.dtype))
        self.shape = (I64(self.batch), I64(self.channels), I64(self.spots))
        if running_mean is None:              # training without running averages
            self.running_mean = self.running_var = self.zeros

    def forward(self, node):
        x = node.parents[0]
        launch("batch_norm_stats", node.dtype, self.channels, x.value, self.running_mean,
               self.running_var, self.stats, *self.shape, I32(self.training),
               I32(self.running_mean is not self.zeros), np.float64(self.momentum),
               np.float64(self.eps))
        launch("batch_norm_forward", node.dtype, node.size, x.value,
               self.weight.value if self.weight is not None else self.ones,
               self.bias.value if self.bias is not None else self.zeros, self.stats,
               node.value, I64(node.size), I64(self.channels), I64(self.spots))

    def backward(self, node):
        x = node.parents[0]
        want_w = self.weight is not None and self.weight.requires_grad
        want_b = self.bias is not None and self.bias.requires_grad
        gw, acc_w = grad_slot(self.weight) if want_w else (self.zeros, False)
        gb, acc_b = grad_slot(self.bias) if want_b else (self.zeros, False)
        launch("batch_norm_sums", node.dtype, self.channels, x.value, node.grad, self.stats,
               self.sums, gw, gb, *self.shape, I32(want_w), I32(acc_w), I32(want_b),
               I32(acc_b))
        if x.requires_grad:
            grad, accumulate = grad_slot(x)
            launch("batch_norm_backward", node.dtype, node.size, x.value, node.grad,
                   self.weight.value if self.weight is not None else self.ones, self.stats,
                   self.sums, grad, I64(node.size), I64(self.channels), I64(self.spots),
                   I32(self.training), I32(accumulate))


def batch_norm(x, weight, bias, running_mean, running_var, training, momentum, eps):
    """The batch-norm node; running_mean/running_var: device arrays of x's dtype and
    shape (channels,) (a BatchNorm layer moved with .to()), or both None."""
    for name, array in (("running_mean", running_mean), ("running_var", running_var)):
        if array is not None and (type(array) is not type(x.value) or array.dtype != x.dtype
                                  or tuple(array.shape) != (x.shape[1],)):
            raise TypeError(f"batch_norm: on {x.device}, {name} must be an array on that device "
                            f"of {x.dtype} and shape ({x.shape[1]},) (move the layer with "
                            f".to(device)), got {type(array).__name__}")
    inputs = (x,) + tuple(v for v in (weight, bias) if v is not None)
    return make_node("batch_norm", inputs, x.shape, x.dtype,
                     BatchNorm(x, weight, bias, running_mean, running_var, training, momentum,
                               eps))

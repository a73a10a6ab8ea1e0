"""Convolutions, pooling and batch normalisation over (batch, channels, *spatial) arrays.

Every op here sees its input as (batch, channels, height, width); the 1-d forms
are the 2-d ones with height 1. A convolution is im2col + GEMM: the node
unfolds the input's receptive fields into a column matrix holding the whole
batch, cols[(c, i, j), (n, oy, ox)], so that each group needs one GEMM for the
forward, one for the weight's gradient and one for the columns' gradient,
which im2col's adjoint folds back onto the input. Measured beside direct loops (a
throwaway Cython version, vectorised over output columns) on the layers of
examples/cnn.py, forward + backward, float32, one thread: 1->16 channels on
8x8 and 16->32 on 4x4, 3x3 kernels, took 4.2x and 9.5x longer with the loops
at batch 1 and 7.6x and 6.6x at batch 32: their inner loops are only 4-8
columns long, while one GEMM per group covers the whole batch.
All scratch buffers are made when the node is built; replays allocate nothing.
"""
import operator

import numpy as np
cimport cython
cimport numpy as cnp
from libc.limits cimport INT_MAX
from libc.math cimport INFINITY, sqrt
from libc.stdint cimport int64_t
from cython cimport floating

from fastad._engine.blas cimport gemm
from fastad._engine.graph cimport (Variable, OneInput, init_node, finish, require_float, same_dtype,
                              backend_of, val_ptr_or_null, keep_data)
from fastad._engine.loops cimport vec_zero

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["conv1d", "conv2d", "max_pool1d", "max_pool2d", "avg_pool1d", "avg_pool2d",
           "adaptive_avg_pool2d"]


cdef struct Geom:
    Py_ssize_t n, c, h, w           # the input: batch, channels, height, width
    Py_ssize_t oh, ow               # the output's height and width
    Py_ssize_t kh, kw, sh, sw, ph, pw, dh, dw    # kernel, stride, padding, dilation


# ------------------------------------------------------------- arguments

cpdef tuple int_tuple(str op, str name, object value, int n, Py_ssize_t minimum):
    """value (an int, or a tuple of n ints) as a tuple of n ints, each >= minimum, or a
    TypeError/ValueError naming `op` and `name`."""
    items = tuple(value) if isinstance(value, (tuple, list)) else (value,) * n
    expected = f"an int or a tuple of {n} ints, each >= {minimum}" if n > 1 else \
        f"an int >= {minimum}"
    if len(items) != n:
        raise ValueError(f"{op}: {name} must be {expected}, got {value!r}")
    out = []
    for item in items:
        if isinstance(item, bool):
            raise TypeError(f"{op}: {name} must be {expected}, got {value!r}")
        try:
            k = operator.index(item)
        except TypeError:
            raise TypeError(f"{op}: {name} must be {expected}, got {value!r}") from None
        if k < minimum:
            raise ValueError(f"{op}: {name} must be {expected}, got {value!r}")
        out.append(k)
    return tuple(out)


cdef int require_input(str op, Variable x, int nd) except -1:
    if len(x._shape) != nd + 2:
        spatial_names = "length" if nd == 1 else "height, width"
        raise ValueError(f"{op}: x must have shape (batch, channels, {spatial_names}) "
                         f"({nd + 2}-D), got shape {x._shape}")
    return 0


cdef tuple spatial(Variable x, int nd):
    """x's (height, width); a 1-d input has height 1."""
    return x._shape[2:] if nd == 2 else (1,) + x._shape[2:]


cdef tuple pad1(int nd, tuple values, Py_ssize_t fill):
    """A 1-d op's (value,) as the 2-d (fill, value)."""
    return values if nd == 2 else (fill,) + values


def conv_steps(str op, int nd, stride, padding, dilation):
    """(strides, pads, dilations) of an nd-d convolution as (height, width) pairs (a 1-d
    one's height is 1): stride and dilation ints >= 1, padding >= 0, each an int or a tuple
    of nd ints, or an error naming `op`. The layers check theirs with it when made."""
    return (pad1(nd, int_tuple(op, "stride", stride, nd, 1), 1),
            pad1(nd, int_tuple(op, "padding", padding, nd, 0), 0),
            pad1(nd, int_tuple(op, "dilation", dilation, nd, 1), 1))


def pool_window(str op, int nd, kernel_size, stride, padding):
    """(kernel, strides, pads) of an nd-d pooling window as (height, width) pairs (a 1-d
    one's height is 1): kernel_size and stride (None: kernel_size) ints >= 1, padding >= 0
    and at most half the kernel, each an int or a tuple of nd ints, or an error naming
    `op`. The layers check theirs with it when made."""
    kernel = pad1(nd, int_tuple(op, "kernel_size", kernel_size, nd, 1), 1)
    strides = kernel if stride is None else pad1(nd, int_tuple(op, "stride", stride, nd, 1), 1)
    pads = pad1(nd, int_tuple(op, "padding", padding, nd, 0), 0)
    for k, p in zip(kernel, pads):
        if 2 * p > k:
            raise ValueError(f"{op}: padding {padding!r} must be at most half of "
                             f"kernel_size {kernel_size!r}")
    return kernel, strides, pads


cdef Py_ssize_t out_size(str op, str what, Py_ssize_t size, Py_ssize_t kernel, Py_ssize_t stride,
                         Py_ssize_t padding, Py_ssize_t dilation, tuple shape) except -1:
    """The output length along one axis; ValueError when the kernel does not fit."""
    cdef Py_ssize_t span = dilation * (kernel - 1) + 1
    if span > size + 2 * padding:
        raise ValueError(f"{op}: the {what} ({span}, dilation included) is larger than the "
                         f"padded input ({size} + 2 * {padding} padding) of x with shape {shape}")
    return (size + 2 * padding - span) // stride + 1


# ------------------------------------------------------------ convolution

cdef inline void valid_columns(const Geom* g, Py_ssize_t ix0, Py_ssize_t* lo,
                               Py_ssize_t* hi) noexcept nogil:
    """The output columns ox in [lo, hi) whose input column ox*sw + ix0 lies inside x."""
    lo[0] = 0 if ix0 >= 0 else (-ix0 + g.sw - 1) // g.sw
    hi[0] = (g.w - ix0 + g.sw - 1) // g.sw if g.w > ix0 else 0
    if hi[0] > g.ow:
        hi[0] = g.ow
    if lo[0] > hi[0]:
        lo[0] = hi[0]


cdef inline void im2col(const Geom* g, floating* image, floating* cols, bint fold) noexcept nogil:
    """cols[(c, i, j), (n, oy, ox)] = image[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw] (0 outside
    the image); or, with `fold`, its adjoint (col2im): image[n, c, iy, ix] += every column entry
    copied from it. Each caller passes `fold` as a constant: the branch per row is predictable."""
    cdef Py_ssize_t spots = g.oh * g.ow, width = g.n * spots
    cdef Py_ssize_t c, i, j, n, oy, ox, iy, ix0, lo, hi
    cdef floating* col
    cdef floating* row
    for c in range(g.c):
        for i in range(g.kh):
            for j in range(g.kw):
                ix0 = j * g.dw - g.pw
                valid_columns(g, ix0, &lo, &hi)
                for n in range(g.n):
                    col = cols + ((c * g.kh + i) * g.kw + j) * width + n * spots
                    for oy in range(g.oh):
                        iy = oy * g.sh - g.ph + i * g.dh
                        if iy < 0 or iy >= g.h:
                            if not fold:
                                vec_zero(col, g.ow)
                        elif fold:
                            row = image + ((n * g.c + c) * g.h + iy) * g.w + ix0
                            for ox in range(lo, hi):
                                row[ox * g.sw] += col[ox]
                        else:
                            row = image + ((n * g.c + c) * g.h + iy) * g.w + ix0
                            vec_zero(col, lo)
                            for ox in range(lo, hi):
                                col[ox] = row[ox * g.sw]
                            vec_zero(col + hi, g.ow - hi)
                        col += g.ow


@cython.no_gc
cdef class Conv(Variable):
    """y[n, o] = sum over the group's channels and the kernel of w[o] * x's receptive field (+ b[o]).

    With batch 1 the GEMMs write the output and read its gradient in place;
    a larger batch stages them as (out_channels, batch * spots), the column
    matrix's layout, and copies to and from (batch, out_channels, spots).
    """
    cdef Variable x, w, b           # b is None without a bias
    cdef Geom g
    cdef Py_ssize_t groups, out_channels
    cdef cnp.ndarray cols, dcols, staged
    cdef char* cols_ptr
    cdef char* dcols_ptr
    cdef char* staged_ptr           # NULL with batch 1
    cdef bint empty                 # no output spots (batch 0)

    cdef int run_forward(self) except -1 nogil:
        if self.empty:
            return 0
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        cdef const floating* b = <floating*>val_ptr_or_null(self.b)
        cdef floating* cols = <floating*>self.cols_ptr
        cdef floating* staged = <floating*>self.staged_ptr
        cdef Py_ssize_t spots = self.g.oh * self.g.ow, width = self.g.n * spots
        cdef Py_ssize_t per_out = self.out_channels // self.groups
        cdef Py_ssize_t depth = (self.g.c // self.groups) * self.g.kh * self.g.kw
        cdef Py_ssize_t grp, n, o, l
        cdef floating* out = staged if staged != NULL else y
        cdef floating* dst
        cdef const floating* src
        cdef floating bias
        im2col(&self.g, <floating*>self.x.val_ptr, cols, False)
        for grp in range(self.groups):
            gemm(False, False, <int>per_out, <int>width, <int>depth,
                 <floating*>self.w.val_ptr + grp * per_out * depth, <int>depth,
                 cols + grp * depth * width, <int>width, out + grp * per_out * width, <int>width, False)
        for n in range(self.g.n):
            for o in range(self.out_channels):
                dst = y + (n * self.out_channels + o) * spots
                src = out + o * width + n * spots
                bias = b[o] if b != NULL else 0
                if staged != NULL or b != NULL:
                    for l in range(spots):
                        dst[l] = src[l] + bias
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, floating* gy) except -1 nogil:
        cdef Py_ssize_t spots = self.g.oh * self.g.ow, width = self.g.n * spots
        cdef Py_ssize_t per_out = self.out_channels // self.groups
        cdef Py_ssize_t depth = (self.g.c // self.groups) * self.g.kh * self.g.kw
        cdef Py_ssize_t grp, n, o, l
        cdef floating* staged = <floating*>self.staged_ptr
        cdef const floating* gout = staged if staged != NULL else gy
        cdef const floating* w = <floating*>self.w.val_ptr
        cdef floating* dcols = <floating*>self.dcols_ptr
        cdef floating* gb
        cdef floating* gw
        cdef floating* gx
        cdef floating total
        cdef bint add
        if staged != NULL:
            for n in range(self.g.n):
                for o in range(self.out_channels):
                    for l in range(spots):
                        staged[o * width + n * spots + l] = gy[(n * self.out_channels + o) * spots + l]
        if self.b is not None and self.b.requires_grad:
            add = self.b.prepare_grad()
            gb = <floating*>self.b.grad_ptr
            for o in range(self.out_channels):
                total = 0
                for l in range(width):
                    total += gout[o * width + l]
                gb[o] = gb[o] + total if add else total
        if self.w.requires_grad:
            add = self.w.prepare_grad()
            gw = <floating*>self.w.grad_ptr
            if self.empty:
                if not add:
                    vec_zero(gw, self.w.size)
            else:
                for grp in range(self.groups):      # dW_g = dY_g @ cols_g^T
                    gemm(False, True, <int>per_out, <int>depth, <int>width,
                         gout + grp * per_out * width, <int>width, <floating*>self.cols_ptr
                         + grp * depth * width, <int>width, gw + grp * per_out * depth, <int>depth,
                         add)
        if self.x.requires_grad:
            add = self.x.prepare_grad()
            gx = <floating*>self.x.grad_ptr
            if not add:
                vec_zero(gx, self.x.size)
            if not self.empty:
                for grp in range(self.groups):      # dcols_g = W_g^T @ dY_g
                    gemm(True, False, <int>depth, <int>width, <int>per_out,
                         w + grp * per_out * depth, <int>depth, gout + grp * per_out * width,
                         <int>width, dcols + grp * depth * width, <int>width, False)
                im2col(&self.g, gx, dcols, True)
        return 0


cdef Variable _conv(str op, int nd, object x, object weight, object bias, object stride,
                    object padding, object dilation, object groups):
    cdef Variable vx = require_float(op, x, "x"), vb = None
    cdef Variable vw = require_float(op, weight, "weight")
    same_dtype(op, vx, vw)
    if bias is not None:
        vb = require_float(op, bias, "bias")
        same_dtype(op, vx, vb)
    require_input(op, vx, nd)
    kernel_names = "kernel_length" if nd == 1 else "kernel_height, kernel_width"
    if len(vw._shape) != nd + 2:
        raise ValueError(f"{op}: weight must have shape (out_channels, in_channels / groups, "
                         f"{kernel_names}) ({nd + 2}-D), got shape {vw._shape}")
    cdef Py_ssize_t n_groups = int_tuple(op, "groups", groups, 1, 1)[0]
    cdef Py_ssize_t channels = vx._shape[1], out_channels = vw._shape[0]
    if channels % n_groups:
        raise ValueError(f"{op}: the input's {channels} channels (x shape {vx._shape}) are not "
                         f"divisible by groups={n_groups}")
    if out_channels == 0 or out_channels % n_groups:
        raise ValueError(f"{op}: weight's out_channels {out_channels} (weight shape {vw._shape}) "
                         f"must be a positive multiple of groups={n_groups}")
    if vw._shape[1] != channels // n_groups:
        raise ValueError(f"{op}: weight shape {vw._shape} does not match x shape {vx._shape}: "
                         f"weight's axis 1 must be in_channels / groups = {channels // n_groups}")
    if 0 in vw._shape[2:] or channels == 0:
        raise ValueError(f"{op}: empty kernel or no channels: weight shape {vw._shape}, "
                         f"x shape {vx._shape}")
    if vb is not None and vb._shape != (out_channels,):
        raise ValueError(f"{op}: bias must have shape ({out_channels},) (out_channels), "
                         f"got {vb._shape}")
    cdef tuple strides, pads, dilations
    strides, pads, dilations = conv_steps(op, nd, stride, padding, dilation)
    cdef tuple kernel = pad1(nd, vw._shape[2:], 1)
    cdef tuple hw = spatial(vx, nd)
    cdef Geom g
    g.n, g.c, g.h, g.w = vx._shape[0], channels, hw[0], hw[1]
    g.kh, g.kw = kernel
    g.sh, g.sw = strides
    g.ph, g.pw = pads
    g.dh, g.dw = dilations
    g.oh = out_size(op, "kernel height" if nd == 2 else "kernel", g.h, g.kh, g.sh, g.ph, g.dh,
                    vx._shape)
    g.ow = out_size(op, "kernel width" if nd == 2 else "kernel", g.w, g.kw, g.sw, g.pw, g.dw,
                    vx._shape)
    cdef tuple out_shape = (g.n, out_channels) + ((g.oh, g.ow) if nd == 2 else (<object>g.ow,))
    cdef Py_ssize_t width = g.n * g.oh * g.ow, depth = (channels // n_groups) * g.kh * g.kw
    if width > INT_MAX or depth > INT_MAX:
        raise ValueError(f"{op}: x shape {vx._shape} with weight shape {vw._shape} exceeds "
                         f"BLAS's 32-bit dimension limit")
    cdef tuple inputs = (vx, vw) if vb is None else (vx, vw, vb)
    if (dev := backend_of(vx)) is not None:
        return dev.conv(op, inputs, out_shape, g, n_groups)
    cdef Conv node = Conv.__new__(Conv)
    node.x, node.w, node.b = vx, vw, vb
    node.g = g
    node.groups, node.out_channels = n_groups, out_channels
    node.empty = width == 0
    dtype = np.float64 if vx.f64 else np.float32
    node.cols = keep_data(np.empty(channels * g.kh * g.kw * width, dtype=dtype), &node.cols_ptr)
    node.dcols = keep_data(np.empty_like(node.cols), &node.dcols_ptr)
    if g.n > 1:
        node.staged = keep_data(np.empty(out_channels * width, dtype=dtype), &node.staged_ptr)
    init_node(node, op, inputs, out_shape, vx.f64)
    return finish(node)


def conv1d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """1-d convolution (cross-correlation, as PyTorch's): x (batch, in_channels, length),
    weight (out_channels, in_channels / groups, kernel), bias (out_channels,) or None
    -> (batch, out_channels, out_length).

    stride, padding (zeros on both sides) and dilation are ints (or 1-tuples);
    groups splits the channels into independent convolutions.

    >>> fa.conv1d(fa.Input(np.ones((2, 3, 10))), fa.Parameter(np.ones((4, 3, 3))), padding=1).shape
    (2, 4, 10)
    """
    return _conv("conv1d", 1, x, weight, bias, stride, padding, dilation, groups)


def conv2d(x, weight, bias=None, stride=1, padding=0, dilation=1, groups=1):
    """2-d convolution (cross-correlation, as PyTorch's): x (batch, in_channels, height, width),
    weight (out_channels, in_channels / groups, kernel_height, kernel_width), bias
    (out_channels,) or None -> (batch, out_channels, out_height, out_width).

    stride, padding (zeros on every side) and dilation are ints or (height, width)
    pairs; groups splits the channels into independent convolutions.

    >>> x = fa.Input(np.ones((1, 1, 8, 8))); w = fa.Parameter(np.ones((4, 1, 3, 3)))
    >>> fa.conv2d(x, w, stride=2, padding=1).shape
    (1, 4, 4, 4)
    """
    return _conv("conv2d", 2, x, weight, bias, stride, padding, dilation, groups)


# ---------------------------------------------------------------- pooling

cdef enum PoolMode:
    POOL_MAX, POOL_AVG


@cython.no_gc
cdef class Pool(OneInput):
    """Max or mean of each window of each (batch, channel) plane.

    Output row oy reads input rows [row_start[oy], row_end[oy]) and column ox
    columns [col_start[ox], col_end[ox]) (windows clipped to the input; built
    once). A mean divides by `divisor`, or by the clipped window's area when
    divisor is 0 (adaptive pooling). Max pooling records each output's argmax
    in `argmax` (the flat position in its plane) for the backward.
    """
    cdef int mode
    cdef Py_ssize_t planes, h, w, oh, ow, divisor
    cdef cnp.ndarray windows         # int64 (4, max(oh, ow)): row_start, row_end, col_start, col_end
    cdef cnp.ndarray argmax          # int64, the output's shape (max pooling)
    cdef const int64_t* row_start
    cdef const int64_t* row_end
    cdef const int64_t* col_start
    cdef const int64_t* col_end
    cdef int64_t* argmax_ptr

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef Py_ssize_t p, oy, ox, iy, ix, y0, y1, x0, x1, best_at, w = self.w
        cdef floating best, v, total
        cdef const floating* plane
        cdef int64_t* argmax = self.argmax_ptr
        for p in range(self.planes):
            plane = x + p * self.h * w
            for oy in range(self.oh):
                y0, y1 = self.row_start[oy], self.row_end[oy]
                for ox in range(self.ow):
                    x0, x1 = self.col_start[ox], self.col_end[ox]
                    if self.mode == POOL_MAX:
                        best = -INFINITY
                        best_at = y0 * w + x0
                        for iy in range(y0, y1):
                            for ix in range(x0, x1):
                                v = plane[iy * w + ix]
                                if v > best or v != v:      # a NaN wins, as in PyTorch
                                    best = v
                                    best_at = iy * w + ix
                        y[0] = best
                        argmax[0] = best_at
                        argmax += 1
                    else:
                        total = 0
                        for iy in range(y0, y1):
                            for ix in range(x0, x1):
                                total += plane[iy * w + ix]
                        y[0] = total / self._divisor(oy, ox)
                    y += 1
        return 0

    cdef inline Py_ssize_t _divisor(self, Py_ssize_t oy, Py_ssize_t ox) noexcept nogil:
        if self.divisor:
            return self.divisor
        return (self.row_end[oy] - self.row_start[oy]) * (self.col_end[ox] - self.col_start[ox])

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef Py_ssize_t p, oy, ox, iy, ix, k = 0
        cdef floating share
        cdef floating* plane
        if not add:
            vec_zero(gx, self.x.size)
        for p in range(self.planes):
            plane = gx + p * self.h * self.w
            for oy in range(self.oh):
                for ox in range(self.ow):
                    if self.mode == POOL_MAX:
                        plane[self.argmax_ptr[k]] += gy[k]
                    else:
                        share = gy[k] / self._divisor(oy, ox)
                        for iy in range(self.row_start[oy], self.row_end[oy]):
                            for ix in range(self.col_start[ox], self.col_end[ox]):
                                plane[iy * self.w + ix] += share
                    k += 1
        return 0


cdef Variable _pool(str op, int nd, int mode, object x, tuple hw, tuple out_hw, object starts,
                    object ends, Py_ssize_t divisor):
    """The pooling node over x's planes; starts/ends: (rows, cols) int64 window bounds."""
    cdef Variable vx = <Variable>x
    cdef tuple out_shape = vx._shape[:2] + (out_hw if nd == 2 else out_hw[1:])
    windows = np.zeros((4, max(out_hw)), dtype=np.int64)
    windows[0, :out_hw[0]], windows[1, :out_hw[0]] = starts[0], ends[0]
    windows[2, :out_hw[1]], windows[3, :out_hw[1]] = starts[1], ends[1]
    if (dev := backend_of(vx)) is not None:
        return dev.pool(op, vx, out_shape, mode == POOL_MAX, windows, divisor)
    cdef Pool node = Pool.__new__(Pool)
    node.x = vx
    node.mode = mode
    node.planes = vx._shape[0] * vx._shape[1]
    node.h, node.w = hw
    node.oh, node.ow = out_hw
    node.divisor = divisor
    node.windows = windows
    cdef int64_t* bounds = <int64_t*>cnp.PyArray_DATA(windows)
    cdef Py_ssize_t row_len = windows.shape[1]
    node.row_start, node.row_end = bounds, bounds + row_len
    node.col_start, node.col_end = bounds + 2 * row_len, bounds + 3 * row_len
    if mode == POOL_MAX:
        node.argmax = np.empty(out_shape, dtype=np.int64)
        node.argmax_ptr = <int64_t*>cnp.PyArray_DATA(node.argmax)
    init_node(node, op, (vx,), out_shape, vx.f64)
    return finish(node)


cdef Variable _window_pool(str op, int nd, int mode, object x, object kernel_size, object stride,
                           object padding):
    cdef Variable vx = require_float(op, x, "x")
    require_input(op, vx, nd)
    cdef tuple kernel, strides, pads
    kernel, strides, pads = pool_window(op, nd, kernel_size, stride, padding)
    cdef tuple hw = spatial(vx, nd)
    names = ("kernel height", "kernel width") if nd == 2 else ("kernel", "kernel")
    out_hw = tuple(out_size(op, names[a], hw[a], kernel[a], strides[a], pads[a], 1, vx._shape)
                   for a in range(2))
    starts = [np.arange(out_hw[a]) * strides[a] - pads[a] for a in range(2)]
    ends = [np.minimum(starts[a] + kernel[a], hw[a]) for a in range(2)]
    starts = [np.maximum(s, 0) for s in starts]
    return _pool(op, nd, mode, vx, hw, out_hw, starts, ends, kernel[0] * kernel[1])


def max_pool1d(x, kernel_size, stride=None, padding=0):
    """Maximum over windows of x (batch, channels, length) -> (batch, channels, out_length).

    stride defaults to kernel_size; padding (at most half the kernel) never wins
    (it is -inf, as in PyTorch). The gradient goes to each window's maximum.

    >>> fa.max_pool1d(fa.Input(np.arange(6.0).reshape(1, 1, 6)), 2).value
    array([[[1., 3., 5.]]], dtype=float32)
    """
    return _window_pool("max_pool1d", 1, POOL_MAX, x, kernel_size, stride, padding)


def max_pool2d(x, kernel_size, stride=None, padding=0):
    """Maximum over windows of x (batch, channels, height, width); kernel_size, stride
    (default: kernel_size) and padding (at most half the kernel; -inf) are ints or
    (height, width) pairs.

    >>> fa.max_pool2d(fa.Input(np.ones((2, 3, 8, 8))), 2).shape
    (2, 3, 4, 4)
    """
    return _window_pool("max_pool2d", 2, POOL_MAX, x, kernel_size, stride, padding)


def avg_pool1d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of x (batch, channels, length); zero padding counts in the
    mean (PyTorch's count_include_pad=True); stride defaults to kernel_size.

    >>> fa.avg_pool1d(fa.Input(np.arange(6.0).reshape(1, 1, 6)), 3).value
    array([[[1., 4.]]], dtype=float32)
    """
    return _window_pool("avg_pool1d", 1, POOL_AVG, x, kernel_size, stride, padding)


def avg_pool2d(x, kernel_size, stride=None, padding=0):
    """Mean over windows of x (batch, channels, height, width); zero padding counts
    in the mean (count_include_pad=True); ints or (height, width) pairs.

    >>> fa.avg_pool2d(fa.Input(np.ones((2, 3, 8, 8))), 2).shape
    (2, 3, 4, 4)
    """
    return _window_pool("avg_pool2d", 2, POOL_AVG, x, kernel_size, stride, padding)


def adaptive_avg_pool2d(x, output_size):
    """Mean over the windows that split x (batch, channels, height, width) into
    output_size (an int or (height, width)) cells, PyTorch's windows: cell i of
    n along an axis of length L covers [floor(i L / n), ceil((i + 1) L / n)).

    >>> fa.adaptive_avg_pool2d(fa.Input(np.ones((2, 3, 7, 7))), 1).shape
    (2, 3, 1, 1)
    """
    op = "adaptive_avg_pool2d"
    cdef Variable vx = require_float(op, x, "x")
    require_input(op, vx, 2)
    cdef tuple out_hw = int_tuple(op, "output_size", output_size, 2, 1)
    cdef tuple hw = spatial(vx, 2)
    if 0 in hw:
        raise ValueError(f"{op}: x must have a non-empty height and width, got shape {vx._shape}")
    starts = [np.arange(out_hw[a]) * hw[a] // out_hw[a] for a in range(2)]
    ends = [-(-(np.arange(out_hw[a]) + 1) * hw[a] // out_hw[a]) for a in range(2)]
    return _pool(op, 2, POOL_AVG, vx, hw, out_hw, starts, ends, 0)


# ------------------------------------------------------ batch normalisation

@cython.no_gc
cdef class BatchNorm(Variable):
    """Per-channel normalisation of x seen as (batch, channels, spots).

    Training: each channel's batch mean and biased variance normalise it, and
    each forward moves the running averages (when given) by `momentum`, the
    variance's unbiased; otherwise the running averages normalise. `stats`
    (float64, (2, channels)) keeps the mean and 1/sqrt(var + eps) the last
    forward used, for the backward.
    """
    cdef Variable x, w, b            # w, b: None without the affine part
    cdef cnp.ndarray running_mean, running_var   # the caller's buffers (updated in place), or None
    cdef char* running_mean_ptr                  # their data (NULL for None), for the passes
    cdef char* running_var_ptr
    cdef bint training
    cdef double momentum, eps
    cdef Py_ssize_t n, c, spots
    cdef cnp.ndarray stats
    cdef double* mean
    cdef double* inv_std

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef const floating* w = <floating*>val_ptr_or_null(self.w)
        cdef const floating* b = <floating*>val_ptr_or_null(self.b)
        cdef floating* running_mean = <floating*>self.running_mean_ptr
        cdef floating* running_var = <floating*>self.running_var_ptr
        cdef Py_ssize_t i, ch, k, count = self.n * self.spots, stride = self.c * self.spots
        cdef double total, mean, var, d, scale, shift
        cdef const floating* xc
        cdef floating* yc
        for ch in range(self.c):
            if self.training:
                total = 0
                for i in range(self.n):
                    xc = x + i * stride + ch * self.spots
                    for k in range(self.spots):
                        total += xc[k]
                mean = total / count
                total = 0
                for i in range(self.n):
                    xc = x + i * stride + ch * self.spots
                    for k in range(self.spots):
                        d = xc[k] - mean
                        total += d * d
                var = total / count
                if running_mean != NULL:
                    running_mean[ch] = (1 - self.momentum) * running_mean[ch] + self.momentum * mean
                    running_var[ch] = ((1 - self.momentum) * running_var[ch]
                                       + self.momentum * var * count / (count - 1))
            else:
                mean = running_mean[ch]
                var = running_var[ch]
            self.mean[ch] = mean
            self.inv_std[ch] = 1 / sqrt(var + self.eps)
            scale = self.inv_std[ch] * (w[ch] if w != NULL else 1)
            shift = (b[ch] if b != NULL else 0) - mean * scale
            for i in range(self.n):
                xc = x + i * stride + ch * self.spots
                yc = y + i * stride + ch * self.spots
                for k in range(self.spots):
                    yc[k] = <floating>(xc[k] * scale + shift)
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* gy) except -1 nogil:
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef const floating* w = <floating*>val_ptr_or_null(self.w)
        cdef Py_ssize_t i, ch, k, count = self.n * self.spots, stride = self.c * self.spots
        cdef double sum_g, sum_gxhat, mean, inv_std, scale, xhat, d
        cdef const floating* xc
        cdef const floating* gc
        cdef floating* gxc
        cdef bint want_x = self.x.requires_grad
        cdef bint want_w = self.w is not None and self.w.requires_grad
        cdef bint want_b = self.b is not None and self.b.requires_grad
        cdef bint add_x = self.x.prepare_grad() if want_x else False
        cdef bint add_w = self.w.prepare_grad() if want_w else False
        cdef bint add_b = self.b.prepare_grad() if want_b else False
        cdef floating* gx = <floating*>self.x.grad_ptr if want_x else NULL
        cdef floating* gw = <floating*>self.w.grad_ptr if want_w else NULL
        cdef floating* gb = <floating*>self.b.grad_ptr if want_b else NULL
        for ch in range(self.c):
            mean, inv_std = self.mean[ch], self.inv_std[ch]
            sum_g = sum_gxhat = 0
            for i in range(self.n):
                xc = x + i * stride + ch * self.spots
                gc = gy + i * stride + ch * self.spots
                for k in range(self.spots):
                    sum_g += gc[k]
                    sum_gxhat += gc[k] * (xc[k] - mean) * inv_std
            if want_w:
                gw[ch] = <floating>(gw[ch] + sum_gxhat if add_w else sum_gxhat)
            if want_b:
                gb[ch] = <floating>(gb[ch] + sum_g if add_b else sum_g)
            if not want_x:
                continue
            scale = inv_std * (w[ch] if w != NULL else 1)
            for i in range(self.n):
                xc = x + i * stride + ch * self.spots
                gc = gy + i * stride + ch * self.spots
                gxc = gx + i * stride + ch * self.spots
                for k in range(self.spots):
                    if self.training:      # the batch statistics depend on x too
                        xhat = (xc[k] - mean) * inv_std
                        d = scale * (gc[k] - (sum_g + xhat * sum_gxhat) / count)
                    else:
                        d = scale * gc[k]
                    gxc[k] = <floating>(gxc[k] + d if add_x else d)
        return 0


cdef int check_running(str name, object array, Variable x, Py_ssize_t channels) except -1:
    expected = np.float64 if x.f64 else np.float32
    if not isinstance(array, np.ndarray) or array.dtype != expected or array.shape != (channels,) \
            or not array.flags.c_contiguous or not array.flags.writeable:
        got = (f"{type(array).__name__} {array.dtype} {array.shape}" if isinstance(array, np.ndarray)
               else type(array).__name__)
        raise TypeError(f"batch_norm: {name} must be a writable C-contiguous numpy array of "
                        f"{np.dtype(expected)} and shape ({channels},) (x's dtype, channels), "
                        f"got {got}")
    return 0


def batch_norm(x, running_mean, running_var, weight=None, bias=None, training=False,
               momentum=0.1, eps=1e-5):
    """Batch normalisation of x (batch, channels, *spatial) per channel, as PyTorch's
    F.batch_norm: (x - mean) / sqrt(var + eps) * weight + bias.

    training=True normalises with the batch's mean and biased variance and moves
    running_mean/running_var (numpy arrays of x's dtype, shape (channels,), or
    both None) in place by `momentum`, the variance's unbiased, at every forward
    and replay; it needs more than one value per channel. training=False
    normalises with the running averages. weight and bias: (channels,) or None.

    >>> rm, rv = np.zeros(3, np.float32), np.ones(3, np.float32)
    >>> fa.nn.functional.batch_norm(fa.Input(np.random.randn(8, 3)), rm, rv, training=True).shape
    (8, 3)
    """
    op = "batch_norm"
    cdef Variable vx = require_float(op, x, "x")
    if len(vx._shape) < 2:
        raise ValueError(f"{op}: x must have shape (batch, channels, ...), got {vx._shape}")
    cdef Py_ssize_t channels = vx._shape[1]
    cdef Py_ssize_t per_channel = vx.size // channels if channels else 0
    for name, v in (("weight", weight), ("bias", bias)):
        if v is None:
            continue
        require_float(op, v, name)
        same_dtype(op, vx, <Variable>v)
        if (<Variable>v)._shape != (channels,):
            raise ValueError(f"{op}: {name} must have shape ({channels},) (x's channels, x shape "
                             f"{vx._shape}), got {(<Variable>v)._shape}")
    cdef Variable vw = weight, vb = bias
    dev = backend_of(vx)
    if (running_mean is None) != (running_var is None):
        raise ValueError(f"{op}: give both running_mean and running_var, or neither")
    if running_mean is not None and dev is None:
        check_running("running_mean", running_mean, vx, channels)
        check_running("running_var", running_var, vx, channels)
    if not training and running_mean is None:
        raise ValueError(f"{op}: training=False normalises with running_mean and running_var; "
                         f"got None")
    if training and per_channel <= 1:
        raise ValueError(f"{op}: training needs more than one value per channel to compute a "
                         f"variance, got x shape {vx._shape}")
    if isinstance(momentum, bool) or not isinstance(momentum, (int, float, np.floating)) \
            or not 0 <= momentum <= 1:
        raise ValueError(f"{op}: momentum must be a number in [0, 1], got {momentum!r}")
    if isinstance(eps, bool) or not isinstance(eps, (int, float, np.floating)) or not eps > 0:
        raise ValueError(f"{op}: eps must be a number > 0, got {eps!r}")
    cdef tuple inputs = (vx,) + tuple(v for v in (vw, vb) if v is not None)
    if dev is not None:
        return dev.batch_norm(vx, vw, vb, running_mean, running_var, bool(training),
                              float(momentum), float(eps))
    cdef BatchNorm node = BatchNorm.__new__(BatchNorm)
    node.x, node.w, node.b = vx, vw, vb
    node.running_mean, node.running_var = running_mean, running_var
    if running_mean is not None:
        node.running_mean_ptr = <char*>cnp.PyArray_DATA(running_mean)
        node.running_var_ptr = <char*>cnp.PyArray_DATA(running_var)
    node.training = bool(training)
    node.momentum, node.eps = momentum, eps
    node.n, node.c = vx._shape[0], channels
    node.spots = per_channel // vx._shape[0] if vx._shape[0] else 0
    node.stats = np.zeros((2, max(channels, 1)))
    node.mean = <double*>cnp.PyArray_DATA(node.stats)
    node.inv_std = node.mean + max(channels, 1)
    init_node(node, op, inputs, vx._shape, vx.f64)
    return finish(node)

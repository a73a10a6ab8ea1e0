"""Reductions on a GPU (cuda/reduction.cu): sum, mean, max, min, logsumexp and the 2-norm
over any axes, argmax/argmin and cumsum along one axis, and softmax and log_softmax along one.

fastad/ops/reduction.pyx checks the axes and works out the shapes, then sends a
device operand here with them. softmax views its input as (outer, n, inner)
around the chosen axis; one thread normalises one (outer, inner) line along n
(a 0-d input counts as one element along one axis, as on the CPU).
"""
import numpy as np

from fastad.cuda.ops.common import (I32, I64, InputGrads, launch, scalar, meta_array, make_node,
                                    backend, fill)

# The CPU's ReduceOp codes (fastad/ops/reduction.pyx) and the kernels' ReduceMode.
R_SUM, R_MEAN, R_MAX, R_LOGSUMEXP, R_MIN, R_NORM2 = range(6)
MODE_SUM, MODE_MAX, MODE_LOGSUMEXP, MODE_NORM2 = range(4)
MODES = {R_SUM: MODE_SUM, R_MEAN: MODE_SUM, R_MAX: MODE_MAX, R_MIN: MODE_MAX,
         R_LOGSUMEXP: MODE_LOGSUMEXP, R_NORM2: MODE_NORM2}
FORWARD_KERNELS = {R_MAX: "reduce_max", R_MIN: "reduce_min", R_LOGSUMEXP: "reduce_logsumexp",
                   R_NORM2: "reduce_norm2"}

# Slots that fold more than CHUNK elements, when there are few of them, are
# summed by several threads each (atomically), so a full sum is not one thread's loop.
CHUNK = 256
FEW_SLOTS = 4096


MAX_DIMS = 8        # FA_MAX_DIMS in cuda/common.cuh


def _coalesce(dims, keep):
    """The same fold over fewer axes: length-1 axes dropped, and neighbours that are
    both kept or both folded merged into one."""
    out_dims, out_keep = [], []
    for d, k in zip(dims, keep):
        k = bool(k)
        if d == 1:
            continue
        if out_keep and out_keep[-1] == k:
            out_dims[-1] *= d
        else:
            out_dims.append(d)
            out_keep.append(k)
    return out_dims, out_keep


class Fold:
    """How the elements of a contiguous array of shape `dims` fold into slots: the
    axes with keep[k] true stay (see FaFold in cuda/common.cuh). Holds the
    kernels' shape metadata, made once, and the chunking of sums."""

    def __init__(self, dims, keep, op="reduction"):
        dims, keep = _coalesce(dims, keep)
        if len(dims) > MAX_DIMS:
            raise ValueError(f"{op}: on a GPU, a reduction handles at most {MAX_DIMS} runs of "
                             f"kept and reduced axes, got {len(dims)}")
        self.nd = I32(len(dims))
        self.meta = meta_array(list(dims) + [int(k) for k in keep])
        size = int(np.prod(dims, dtype=np.int64))
        self.n_slots = I64(np.prod([d for d, k in zip(dims, keep) if k], dtype=np.int64))
        per_slot = size // self.n_slots if self.n_slots else 0
        chunked = self.n_slots < FEW_SLOTS and per_slot > CHUNK
        self.chunk = I64(CHUNK if chunked else max(per_slot, 1))
        self.n_chunks = I64(-(-per_slot // CHUNK) if chunked else 1)

    def sum(self, src, dst, scale, accumulate):
        """dst (+)= scale * each slot's sum of src (write when accumulate is 0)."""
        t = dst.dtype
        if self.n_chunks > 1 and not accumulate:
            fill(dst, 0)
        launch("reduce_sum", t, self.n_slots * self.n_chunks, src, dst, self.n_slots, self.chunk,
               self.n_chunks, self.meta, self.nd, scalar(t, scale), I32(accumulate))


class Reduce(InputGrads):
    def __init__(self, code, x, kept, scale):
        self.code = code
        # keep: the axes the output keeps (a length-1 axis may count as either)
        self.fold = Fold(x.shape, [k == d for k, d in zip(kept, x.shape)])
        self.scale = scale
        # max, min: how many elements of each slot equal its max (double: exact past 2**24)
        self.ties = backend().empty((self.fold.n_slots if code in (R_MAX, R_MIN) else 1,),
                                    np.float64)

    def forward(self, node):
        x = node.parents[0]
        f = self.fold
        if self.code in (R_SUM, R_MEAN):
            f.sum(x.value, node.value, self.scale, 0)
        else:
            launch(FORWARD_KERNELS[self.code], node.dtype, f.n_slots, x.value, node.value,
                   f.n_slots, f.meta, f.nd)

    def backward_into(self, node, k, x, grad, accumulate):
        t, f = node.dtype, self.fold
        if self.code in (R_MAX, R_MIN):
            launch("count_ties", t, f.n_slots, x.value, node.value, self.ties, f.n_slots, f.meta, f.nd)
        launch("reduce_backward", t, x.size, x.value, node.value, node.grad, self.ties, grad,
               I64(x.size), f.meta, f.nd, I32(MODES[self.code]), scalar(t, self.scale),
               I32(accumulate))


def reduce(name, code, x, kept, out_shape, scale):
    """Build sum/mean/max/min/logsumexp/norm (the CPU's ReduceOp `code`) of x: `kept` is the
    keepdims shape, `out_shape` the output's, `scale` mean's 1/count (else 1)."""
    return make_node(name, (x,), out_shape, x.dtype, Reduce(code, x, kept, scale))


class _AlongAxis:
    """An op along the middle axis of x's (outer, n, inner) view, with one int flag."""

    def __init__(self, flag, outer, n, inner):
        self.flag = I32(flag)
        self.outer, self.n, self.inner = I64(outer), I64(n), I64(inner)


class ArgReduce(_AlongAxis):
    """argmax (flag `lowest` False) or argmin of x along the middle axis of (outer, n, inner):
    the device forward of an argmax/argmin node, which fastad/ops/reduction.pyx builds (an
    integer node: its ids live in the node's id buffer)."""

    def forward(self, node):
        x = node.parents[0]
        launch("arg_reduce", x.dtype, int(self.outer * self.inner), x.value, node.storage.value,
               self.outer, self.n, self.inner, self.flag)


arg_reduce = ArgReduce      # the primitive: arg_reduce(lowest, outer, n, inner)


class Cumsum(_AlongAxis, InputGrads):
    """The running sum along the middle axis of (outer, n, inner) (no flag)."""

    def forward(self, node):
        x = node.parents[0]
        launch("cumsum_forward", node.dtype, int(self.outer * self.inner), x.value, node.value,
               self.outer, self.n, self.inner)

    def backward_into(self, node, k, x, grad, accumulate):
        launch("cumsum_backward", node.dtype, int(self.outer * self.inner), node.grad, grad,
               self.outer, self.n, self.inner, I32(accumulate))


def cumsum(x, outer, n, inner, shape):
    """Build the running sum of x along the middle axis of its (outer, n, inner) view,
    of `shape` (fastad/ops/reduction.pyx's `cumsum` checks the axis)."""
    return make_node("cumsum", (x,), shape, x.dtype, Cumsum(0, outer, n, inner))


class Softmax(_AlongAxis, InputGrads):
    """softmax (flag `log` False) or log_softmax (True) along the middle axis of (outer, n, inner)."""

    def forward(self, node):
        x = node.parents[0]
        launch("softmax_forward", node.dtype, int(self.outer * self.inner), x.value, node.value,
               self.outer, self.n, self.inner, self.flag)

    def backward_into(self, node, k, x, grad, accumulate):
        launch("softmax_backward", node.dtype, int(self.outer * self.inner), node.value,
               node.grad, grad, self.outer, self.n, self.inner, self.flag, I32(accumulate))


def softmax(x, log, outer, n, inner):
    """Build softmax (log False) or log_softmax (log True) of x along the middle axis
    of its (outer, n, inner) view; fastad/ops/reduction.pyx's `_softmax` checks the
    axis and sends device inputs here."""
    name = "log_softmax" if log else "softmax"
    return make_node(name, (x,), x.shape, x.dtype, Softmax(log, outer, n, inner))

"""softmax and log_softmax on a GPU (cuda/softmax.cu), as fastad_cy/reduction.pyx's `_softmax`.

The input is viewed as (outer, n, inner) around the chosen axis; one thread
normalises one (outer, inner) line along n. A 0-d input counts as one element
along one axis, as on the CPU.
"""
import operator

import numpy as np

from fastad_cy.graph import device_grad_slot
from fastad.cuda.ops.common import I32, I64, launch, make_node, require_float


class Softmax:
    """softmax (log False) or log_softmax (log True) along the middle axis of (outer, n, inner)."""

    def __init__(self, log, outer, n, inner):
        self.log = I32(log)
        self.outer, self.n, self.inner = I64(outer), I64(n), I64(inner)

    def forward(self, node):
        x = node.parents[0]
        launch("softmax_forward", node.dtype, int(self.outer * self.inner), x.value, node.value,
               self.outer, self.n, self.inner, self.log)

    def backward(self, node):
        x = node.parents[0]
        if not x.requires_grad:
            return
        grad, accumulate = device_grad_slot(x)
        launch("softmax_backward", node.dtype, int(self.outer * self.inner), node.value,
               node.grad, grad, self.outer, self.n, self.inner, self.log, I32(accumulate))


def _axis(name, axis, ndim):
    """One axis in [0, ndim), with the CPU's errors (normalize_axes in reduction.pyx)."""
    if axis is None or isinstance(axis, tuple):
        raise TypeError(f"{name}: axis must be one int, got {axis!r}")
    try:
        k = operator.index(axis)
    except TypeError:
        raise TypeError(f"{name}: axis must be None, an int or a tuple of ints, "
                        f"got {axis!r}") from None
    if not -ndim <= k < ndim:
        raise np.exceptions.AxisError(
            f"{name}: axis {k} is out of range for an input with {ndim} dimensions "
            f"(valid axes: from {-ndim} to {ndim - 1})")
    return k % ndim


def softmax(x, axis, log):
    """Build softmax (log False) or log_softmax (log True) of x along `axis`;
    fastad_cy/reduction.pyx's `_softmax` sends device inputs here."""
    name = "log_softmax" if log else "softmax"
    require_float(name, x, "x")
    dims = x.shape or (1,)
    k = _axis(name, axis, len(dims))
    outer = int(np.prod(dims[:k], dtype=np.int64))
    inner = int(np.prod(dims[k + 1:], dtype=np.int64))
    return make_node(name, (x,), x.shape, x.dtype, Softmax(log, outer, dims[k], inner))

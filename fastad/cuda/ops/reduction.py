"""Reductions on a GPU (cuda/reduction.cu): sum, mean, max and logsumexp over any axes.

fastad_cy/reduction.pyx checks the axes and works out the shapes, then sends a
device operand here with them.
"""
import numpy as np

from fastad_cy.graph import device_grad_slot
from fastad.cuda.ops.common import I32, I64, launch, scalar, meta_array, make_node, backend

# The CPU's ReduceOp codes (fastad_cy/reduction.pyx) and the kernels' ReduceMode.
R_SUM, R_MEAN, R_MAX, R_LOGSUMEXP = range(4)
MODE_SUM, MODE_MAX, MODE_LOGSUMEXP = range(3)

# Slots that fold more than CHUNK elements, when there are few of them, are
# summed by several threads each (atomically), so a full sum is not one thread's loop.
CHUNK = 256
FEW_SLOTS = 4096


class Reduce:
    def __init__(self, code, x, kept, scale, n_slots):
        self.code = code
        self.nd = I32(len(kept))
        # keep[k] = 1 where the output keeps axis k (a length-1 axis may count as either)
        self.meta = meta_array(list(x.shape) + [int(k == d) for k, d in zip(kept, x.shape)])
        self.scale = scale
        self.n_slots = I64(n_slots)
        per_slot = x.size // n_slots if n_slots else 0
        chunked = code in (R_SUM, R_MEAN) and n_slots < FEW_SLOTS and per_slot > CHUNK
        self.chunk = I64(CHUNK if chunked else max(per_slot, 1))
        self.n_chunks = I64(-(-per_slot // CHUNK) if chunked else 1)
        self.ties = backend().empty((n_slots,), x.dtype) if code == R_MAX else None

    def forward(self, node):
        x = node.parents[0]
        t = node.dtype
        if self.code in (R_SUM, R_MEAN):
            if self.n_chunks > 1:
                launch("fill", t, node.size, node.value, I64(node.size), scalar(t, 0))
            launch("reduce_sum", t, self.n_slots * self.n_chunks, x.value, node.value, self.n_slots,
                   self.chunk, self.n_chunks, self.meta, self.nd, scalar(t, self.scale),
                   I32(self.n_chunks > 1))
        elif self.code == R_MAX:
            launch("reduce_max", t, self.n_slots, x.value, node.value, self.n_slots, self.meta, self.nd)
        else:
            launch("reduce_logsumexp", t, self.n_slots, x.value, node.value, self.n_slots,
                   self.meta, self.nd)

    def backward(self, node):
        x = node.parents[0]
        if not x.requires_grad:
            return
        t = node.dtype
        ties = node.value
        if self.code == R_MAX:
            launch("count_ties", t, self.n_slots, x.value, node.value, self.ties, self.n_slots,
                   self.meta, self.nd)
            ties = self.ties
        mode = {R_SUM: MODE_SUM, R_MEAN: MODE_SUM, R_MAX: MODE_MAX}.get(self.code, MODE_LOGSUMEXP)
        grad, accumulate = device_grad_slot(x)
        launch("reduce_backward", t, x.size, x.value, node.value, node.grad, ties, grad,
               I64(x.size), self.meta, self.nd, I32(mode), scalar(t, self.scale), I32(accumulate))


def reduce(name, code, x, kept, out_shape, scale):
    """Build sum/mean/max/logsumexp (the CPU's ReduceOp `code`) of x: `kept` is the
    keepdims shape, `out_shape` the output's, `scale` mean's 1/count (else 1)."""
    n_slots = int(np.prod(out_shape, dtype=np.int64))
    return make_node(name, (x,), out_shape, x.dtype, Reduce(code, x, kept, scale, n_slots))

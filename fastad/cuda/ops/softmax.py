"""softmax and log_softmax on a GPU (cuda/softmax.cu), as fastad_cy/reduction.pyx's `_softmax`.

The input is viewed as (outer, n, inner) around the chosen axis; one thread
normalises one (outer, inner) line along n. A 0-d input counts as one element
along one axis, as on the CPU.
"""
from fastad_cy.graph import device_grad_slot
from fastad.cuda.ops.common import I32, I64, launch, make_node


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


def softmax(x, log, outer, n, inner):
    """Build softmax (log False) or log_softmax (log True) of x along the middle axis
    of its (outer, n, inner) view; fastad_cy/reduction.pyx's `_softmax` checks the
    axis and sends device inputs here."""
    name = "log_softmax" if log else "softmax"
    return make_node(name, (x,), x.shape, x.dtype, Softmax(log, outer, n, inner))

"""Row gathers on a GPU (cuda/sparse.cu): `take`, with a sparse gradient, and
`take_along_axis` (sparse along axis 0 of a Parameter, dense otherwise).

The backward scatter-adds the gathered rows' gradients into the table's
gradient buffer (repeated ids add, atomically). A Parameter records which id
arrays touched it, so optimizers update, and zero_grad clears, only those
rows (see fastad_cy/graph.pyx, device_sparse_slot).
"""
import numpy as np

from fastad_cy.graph import Parameter, bound_ids, device_ids, device_sparse_slot, device_grad_slot
from fastad.cuda.ops.common import I64, fill, launch, make_node, same_device


class Take:
    def __init__(self, row_len):
        self.row_len = I64(row_len)

    def forward(self, node):
        table, ix = node.parents
        launch("gather_rows", node.dtype, node.size, table.value, device_ids(ix), node.value,
               I64(ix.size), self.row_len)

    def backward(self, node):
        table, ix = node.parents
        if table.requires_grad:
            ids = device_ids(ix)
            grad = device_sparse_slot(table, ids)
            launch("scatter_add_rows", node.dtype, node.size, node.grad, ids, grad,
                   I64(ix.size), self.row_len)


def take(table, ix):
    """Rows `ix` (an IndexInput) of `table` (fastad_cy/sparse.pyx's `take`, after its
    checks): ids are checked now and at every `ix.set_value`, on the host, before
    they reach the device."""
    same_device("take", table, ix)
    rows = table.shape[0]
    bound_ids(ix, rows, "take")
    row_len = table.size // rows if rows else 0
    return make_node("take", (table, ix), ix.shape + table.shape[1:], table.dtype, Take(row_len))


class TakeAlong:
    """x viewed as (outer, n, inner), ids and the output as (outer, k, inner)."""

    def __init__(self, n, k, inner, sparse):
        self.n, self.k, self.inner = I64(n), I64(k), I64(inner)
        self.sparse = sparse

    def forward(self, node):
        x, ix = node.parents
        launch("along_forward", node.dtype, node.size, x.value, device_ids(ix), node.value,
               I64(node.size), self.n, self.k, self.inner)

    def backward(self, node):
        x, ix = node.parents
        if not x.requires_grad:
            return
        ids = device_ids(ix)
        if self.sparse:      # along axis 0 the ids are row ids: record them as touched rows
            grad = device_sparse_slot(x, ids)
        else:
            grad, accumulate = device_grad_slot(x)
            if not accumulate:
                fill(grad, 0)
        launch("along_scatter_add", node.dtype, node.size, node.grad, ids, grad, I64(node.size),
               self.n, self.k, self.inner)


def take_along_axis(x, ix, axis):
    """x's elements picked by ix along `axis` (fastad_cy/sparse.pyx's `take_along_axis`,
    after its shape checks): ids are checked now and at every `ix.set_value`."""
    same_device("take_along_axis", x, ix)
    n = x.shape[axis]
    bound_ids(ix, n, "take_along_axis")
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    fn = TakeAlong(n, ix.shape[axis], inner, isinstance(x, Parameter) and axis == 0)
    return make_node("take_along_axis", (x, ix), ix.shape, x.dtype, fn)

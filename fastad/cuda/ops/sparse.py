"""Row gathers on a GPU (cuda/sparse.cu): `take`, with a sparse gradient.

The backward scatter-adds the gathered rows' gradients into the table's
gradient buffer (repeated ids add, atomically). A Parameter records which id
arrays touched it, so optimizers update, and zero_grad clears, only those
rows (see fastad_cy/graph.pyx, device_sparse_slot).
"""
from fastad_cy.graph import bound_ids, device_ids, device_sparse_slot
from fastad.cuda.ops.common import I64, launch, make_node, same_device


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

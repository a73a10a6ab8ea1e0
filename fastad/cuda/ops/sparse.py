"""Row gathers on a GPU (cuda/sparse.cu): `take`, `embedding` and `embedding_bag`, with a
sparse gradient, and `take_along_axis` (sparse along axis 0 of a Parameter, dense otherwise).

The backward scatter-adds the gathered rows' gradients into the table's
gradient buffer (repeated ids add, atomically). A Parameter records which id
arrays touched it, so optimizers update, and zero_grad clears, only those
rows (see fastad/_engine/graph.pyx, sparse_grad_slot, and fastad/cuda/storage.py).
"""
import numpy as np

from fastad._engine.graph import Parameter, grad_slot, sparse_grad_slot
from fastad.ops.sparse import bag_bounds
from fastad.cuda.optim import new_owner
from fastad.cuda.ops.common import (I32, I64, backend, bound_ids, cleared, copy_from_host, launch,
                                    make_node, same_device)


class Take:
    """A gather (fa.take, fa.embedding): with max_norm, the looked-up rows are first
    renormalised in place, each distinct row once (claim_rows picks the position that
    renormalises it); with a padding row (padding_idx >= 0), that row gets no gradient."""

    def __init__(self, rows, row_len, padding_idx, max_norm, norm_type):
        self.row_len = I64(row_len)
        self.padding_idx = I64(padding_idx)
        self.max_norm, self.norm_type = max_norm, norm_type
        self.owner = new_owner(backend(), rows) if max_norm > 0 else None

    def forward(self, node):
        table, ix = node.parents
        ids = ix.storage.value
        if self.owner is not None:
            launch("claim_rows", node.dtype, ix.size, ids, self.owner, I64(0), I64(ix.size))
            launch("renorm_rows", node.dtype, ix.size, table.value, ids, self.owner, I64(ix.size),
                   self.row_len, np.float64(self.max_norm), np.float64(self.norm_type),
                   I32(self.norm_type == np.inf))
            launch("release_rows", node.dtype, ix.size, ids, self.owner, I64(ix.size))
        launch("gather_rows", node.dtype, node.size, table.value, ids, node.value,
               I64(ix.size), self.row_len)

    def backward(self, node):
        table, ix = node.parents
        if table.requires_grad:
            ids = ix.storage.value
            grad = sparse_grad_slot(table, ids)
            launch("scatter_add_rows", node.dtype, node.size, node.grad, ids, grad,
                   I64(ix.size), self.row_len, self.padding_idx)


def take(table, ix, op="take", padding_idx=-1, max_norm=0.0, norm_type=2.0):
    """Rows `ix` (an IndexInput) of `table` (fastad/ops/sparse.pyx's `take` and
    `embedding`, after their checks): ids are checked now and at every
    `ix.set_value`, on the host, before they reach the device."""
    same_device(op, table, ix)
    rows = table.shape[0]
    bound_ids(ix, rows, op)
    row_len = table.size // rows if rows else 0
    return make_node(op, (table, ix), ix.shape + table.shape[1:], table.dtype,
                     Take(rows, row_len, padding_idx, max_norm, norm_type))


class TakeAlong:
    """x viewed as (outer, n, inner), ids and the output as (outer, k, inner)."""

    def __init__(self, n, k, inner, sparse):
        self.n, self.k, self.inner = I64(n), I64(k), I64(inner)
        self.sparse = sparse

    def forward(self, node):
        x, ix = node.parents
        launch("along_forward", node.dtype, node.size, x.value, ix.storage.value, node.value,
               I64(node.size), self.n, self.k, self.inner)

    def backward(self, node):
        x, ix = node.parents
        if not x.requires_grad:
            return
        ids = ix.storage.value
        # along axis 0 (sparse) the ids are row ids: record them as touched rows
        grad = sparse_grad_slot(x, ids) if self.sparse else cleared(*grad_slot(x))
        launch("along_scatter_add", node.dtype, node.size, node.grad, ids, grad, I64(node.size),
               self.n, self.k, self.inner)


def take_along_axis(x, ix, axis):
    """x's elements picked by ix along `axis` (fastad/ops/sparse.pyx's `take_along_axis`,
    after its shape checks): ids are checked now and at every `ix.set_value`."""
    same_device("take_along_axis", x, ix)
    n = x.shape[axis]
    bound_ids(ix, n, "take_along_axis")
    inner = int(np.prod(x.shape[axis + 1:], dtype=np.int64))
    fn = TakeAlong(n, ix.shape[axis], inner, isinstance(x, Parameter) and axis == 0)
    return make_node("take_along_axis", (x, ix), ix.shape, x.dtype, fn)


class EmbeddingBag:
    """Bags of rows summed (or averaged), each row times its per_sample_weights when
    weighted (the node's third parent). The offsets stay on the host: before each pass
    they are checked there (fastad.ops.sparse.bag_bounds, as on the CPU) and the bags'
    bounds are copied to the device; 2-D ids have fixed bounds, copied once."""

    def __init__(self, offsets, n_bags, n_ids, row_len, mean, include_last_offset, sparse, bounds,
                 dtype):
        self.offsets, self.n_bags, self.n_ids = offsets, n_bags, n_ids
        self.row_len, self.mean = I64(row_len), I32(mean)
        self.include_last_offset, self.sparse = include_last_offset, sparse
        self.host_bounds = bounds
        self.bounds = backend().from_host(bounds)
        self.rows = backend().empty((n_ids, row_len), dtype)   # each id's gradient row

    def refresh_bounds(self):
        if self.offsets is not None:
            bag_bounds(self.offsets, self.n_ids, self.n_bags, self.include_last_offset,
                       self.host_bounds)
            copy_from_host(self.bounds, self.host_bounds)
        return int(self.host_bounds[0]), int(self.host_bounds[-1] - self.host_bounds[0])

    @staticmethod
    def weights_of(node):
        """(the weights' values, 1) of a weighted bag, else (the table's values, 0): the
        kernels read the weights only when weighted."""
        table = node.parents[0]
        return (node.parents[2].value, I32(1)) if len(node.parents) == 3 else (table.value, I32(0))

    def forward(self, node):
        table, ix = node.parents[:2]
        self.refresh_bounds()
        launch("bag_forward", node.dtype, node.size, table.value, ix.storage.value, self.bounds,
               self.weights_of(node)[0], node.value, I64(self.n_bags), self.row_len, self.mean,
               self.weights_of(node)[1])

    def backward(self, node):
        table, ix = node.parents[:2]
        first, used = self.refresh_bounds()
        weights, weighted = self.weights_of(node)
        if weighted and node.parents[2].requires_grad:    # from the rows forward read
            gw, accumulate = grad_slot(node.parents[2])
            launch("bag_weights_backward", node.dtype, self.n_ids, node.grad, table.value,
                   ix.storage.value, self.bounds, gw, I64(self.n_ids), I64(self.n_bags),
                   self.row_len, I32(accumulate))
        if not table.requires_grad:
            return
        rows = self.rows[first:first + used]
        launch("bag_backward_rows", node.dtype, used * int(self.row_len), node.grad, self.bounds,
               weights, self.rows, I64(self.n_bags), I64(first), I64(used), self.row_len,
               self.mean, weighted)
        ids = ix.storage.value.reshape(-1)[first:first + used]
        grad = sparse_grad_slot(table, ids) if self.sparse else cleared(*grad_slot(table))
        launch("scatter_add_rows", node.dtype, used * int(self.row_len), rows, ids, grad,
               I64(used), self.row_len, I64(-1))


def embedding_bag(table, ix, offsets, n_bags, mean, include_last_offset, sparse, weights=None):
    """fastad/ops/sparse.pyx's `embedding_bag` on a GPU, after its checks: ids are checked
    now and at every `ix.set_value`, offsets (on the host) before every pass; `weights`
    (per_sample_weights, on the device) or None."""
    same_device("embedding_bag", table, ix)
    bound_ids(ix, table.shape[0], "embedding_bag")
    n_ids = ix.size
    if offsets is None:
        bounds = np.arange(n_bags + 1, dtype=np.int64) * ix.shape[1]
    else:
        bounds = bag_bounds(offsets, n_ids, n_bags, include_last_offset,
                            np.zeros(n_bags + 1, dtype=np.int64))
    row_len = table.shape[1] if len(table.shape) == 2 else 1
    fn = EmbeddingBag(offsets, n_bags, n_ids, row_len, mean, include_last_offset, sparse,
                      bounds, table.dtype)
    # The host offsets are no input of the device node (the engine keeps a node's inputs
    # on one device): fn reads them before each pass.
    parents = (table, ix) if weights is None else (table, ix, weights)
    return make_node("embedding_bag", parents, (n_bags,) + tuple(table.shape[1:]), table.dtype, fn)

"""Row gathers with sparse gradients: `table[ix]`, `fastad.take(table, ix)`.

The backward sends (row ids, row gradients) to the table's `add_grad_rows`;
a Parameter keeps them as a sparse gradient over the touched rows only, so an
optimizer step costs time in proportion to the rows used, not the table.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.string cimport memcpy

from fastad_cy.graph cimport (Variable, IndexInput, init_node, finish, require_float, on_device,
                              device_ops)

cnp.import_array()


@cython.no_gc
cdef class Take(Variable):
    cdef Variable table
    cdef IndexInput ix
    cdef Py_ssize_t rows, row_len, row_bytes

    cdef int check_ids(self) except -1 nogil:
        """Every id must name a row: ids can change through set_value between passes."""
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, n = self.ix.size
        for k in range(n):
            if ids[k] < 0 or ids[k] >= self.rows:
                with gil:
                    raise IndexError(
                        f"take: id {ids[k]} at position {k} of the IndexInput is out of range "
                        f"for a table with {self.rows} rows")
        return 0

    cdef int run_forward(self) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, n = self.ix.size, width = self.row_bytes
        self.check_ids()
        for k in range(n):
            memcpy(self.val_ptr + k * width, self.table.val_ptr + ids[k] * width, width)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if self.table.requires_grad:
            self.check_ids()
            self.table.add_grad_rows(<const int64_t*>self.ix.val_ptr, self.ix.size, self.grad_ptr,
                                     self.row_len)
        return 0


def take(table, ix):
    """Rows `ix` of `table`: shape `ix.shape + table.shape[1:]`, with a sparse gradient.

    `table` is a float Variable with at least one axis (usually a 2-D
    Parameter of shape (rows, dim)); `ix` is an IndexInput (or integer ids,
    wrapped in one). Repeated ids are fine: their gradients add. Ids are
    checked against the table's rows on every forward and backward.

    >>> E = fa.Parameter(np.random.randn(100, 8))
    >>> ix = fa.IndexInput([3, 7, 3])
    >>> rows = E[ix]                     # shape (3, 8); E.grad touches rows 3 and 7 only
    """
    require_float("take", table, "table")
    cdef Variable t = <Variable>table
    if not t._shape:
        raise ValueError("take: the table must have at least one axis, got a 0-d Variable")
    if not isinstance(ix, IndexInput):
        if isinstance(ix, Variable):
            raise TypeError(f"take: ids must be an IndexInput or integers, got a float Variable")
        ix = IndexInput(ix, device=t.device)
    if on_device(t) or on_device(ix):
        return device_ops().take(t, ix)
    cdef Take node = Take.__new__(Take)
    node.table = t
    node.ix = <IndexInput>ix
    node.rows = t._shape[0]
    node.row_len = t.size // node.rows if node.rows else 0
    node.row_bytes = node.row_len * (8 if t.f64 else 4)
    init_node(node, "take", (t, ix), ix.shape + t._shape[1:], t.f64)
    return finish(node)

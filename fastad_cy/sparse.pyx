"""Row gathers with sparse gradients: `table[ix]`, `fastad.take(table, ix)`, and
`fastad.take_along_axis(x, ids, axis)` (sparse along axis 0 of a Parameter).

The backward sends (row ids, row gradients) to the table's `add_grad_rows`;
a Parameter keeps them as a sparse gradient over the touched rows only, so an
optimizer step costs time in proportion to the rows used, not the table.
"""
from math import prod

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy
from cython cimport floating

from fastad_cy.graph cimport (Variable, Parameter, IndexInput, init_node, finish, require_float,
                              on_device, device_ops)
from fastad_cy.loops cimport vec_zero
from fastad_cy.reduction import _normalize_axes
from fastad_cy.shape import reshape as _reshape

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


# --------------------------------------------------------- take_along_axis

cdef void along_forward(const floating* x, const int64_t* ids, floating* y, Py_ssize_t outer,
                        Py_ssize_t n, Py_ssize_t k, Py_ssize_t inner) noexcept nogil:
    """y[o, a, j] = x[o, ids[o, a, j], j], x viewed as (outer, n, inner), ids and y as (outer, k, inner)."""
    cdef Py_ssize_t o, a, j, at
    for o in range(outer):
        for a in range(k):
            at = (o * k + a) * inner
            for j in range(inner):
                y[at + j] = x[(o * n + ids[at + j]) * inner + j]


cdef void along_scatter(floating* gx, const int64_t* ids, const floating* g, Py_ssize_t outer,
                        Py_ssize_t n, Py_ssize_t k, Py_ssize_t inner) noexcept nogil:
    """gx[o, ids[o, a, j], j] += g[o, a, j]: repeated ids add."""
    cdef Py_ssize_t o, a, j, at
    for o in range(outer):
        for a in range(k):
            at = (o * k + a) * inner
            for j in range(inner):
                gx[(o * n + ids[at + j]) * inner + j] += g[at + j]


cdef Py_ssize_t along_rows(const int64_t* ids, const floating* g, Py_ssize_t k, Py_ssize_t inner,
                           int32_t* slot_of, int64_t* distinct, floating* rows) noexcept nogil:
    """The gradient of a gather along axis 0 as whole rows: distinct[s] is the s-th distinct
    row id met and rows[s, :] its gradient (zero but where ids point to it); returns how
    many. slot_of (per table row, -1 when untouched) is left all -1 again."""
    cdef Py_ssize_t a, j, s, count = 0
    cdef int64_t r
    for a in range(k):
        for j in range(inner):
            r = ids[a * inner + j]
            s = slot_of[r]
            if s < 0:
                s = count
                slot_of[r] = <int32_t>count
                distinct[count] = r
                vec_zero(rows + count * inner, inner)
                count += 1
            rows[s * inner + j] += g[a * inner + j]
    for s in range(count):
        slot_of[distinct[s]] = -1
    return count


@cython.no_gc
cdef class TakeAlong(Variable):
    """take_along_axis: x and ids viewed as (outer, n, inner) and (outer, k, inner).

    The ids are checked on every forward and backward (set_value may change them).
    Along axis 0 of a Parameter the gradient goes to the rows the ids touch, as a
    sparse gradient (`sparse`); otherwise it is scattered into x's dense gradient.
    """
    cdef Variable x
    cdef IndexInput ix
    cdef Py_ssize_t outer, n, k, inner
    cdef int axis
    cdef bint sparse
    cdef cnp.ndarray slot_of        # sparse: int32 per row of x, all -1 between passes
    cdef cnp.ndarray distinct       # sparse: int64, the distinct rows of one backward
    cdef cnp.ndarray rows           # sparse: their gradients, one row of x each

    cdef int check_ids(self) except -1:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t i
        for i in range(self.ix.size):
            if ids[i] < 0 or ids[i] >= self.n:
                raise IndexError(
                    f"take_along_axis: id {ids[i]} at position "
                    f"{tuple(int(p) for p in np.unravel_index(i, self.ix._shape))} of ids is out "
                    f"of range for axis {self.axis} of x, of length {self.n} (shape {self.x._shape})")
        return 0

    cdef int run_forward(self) except -1 nogil:
        with gil:       # the id check builds its message from Python objects
            self.check_ids()
        if self.f64:
            along_forward(<double*>self.x.val_ptr, <int64_t*>self.ix.val_ptr, <double*>self.val_ptr,
                          self.outer, self.n, self.k, self.inner)
        else:
            along_forward(<float*>self.x.val_ptr, <int64_t*>self.ix.val_ptr, <float*>self.val_ptr,
                          self.outer, self.n, self.k, self.inner)
        return 0

    cdef int run_backward(self) except -1 nogil:
        with gil:       # the scratch rows are numpy arrays
            return self.backward_with_gil()

    cdef int backward_with_gil(self) except -1:
        cdef Variable x = self.x
        if not x.requires_grad:
            return 0
        self.check_ids()
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef int64_t* distinct
        cdef Py_ssize_t count
        if self.sparse:
            distinct = <int64_t*>cnp.PyArray_DATA(self.distinct)
            if self.f64:
                count = along_rows(ids, <double*>self.grad_ptr, self.k, self.inner,
                                   <int32_t*>cnp.PyArray_DATA(self.slot_of), distinct,
                                   <double*>cnp.PyArray_DATA(self.rows))
            else:
                count = along_rows(ids, <float*>self.grad_ptr, self.k, self.inner,
                                   <int32_t*>cnp.PyArray_DATA(self.slot_of), distinct,
                                   <float*>cnp.PyArray_DATA(self.rows))
            x.add_grad_rows(distinct, count, <const char*>cnp.PyArray_DATA(self.rows), self.inner)
            return 0
        if not x.prepare_grad():
            if self.f64:
                vec_zero(<double*>x.grad_ptr, x.size)
            else:
                vec_zero(<float*>x.grad_ptr, x.size)
        if self.f64:
            along_scatter(<double*>x.grad_ptr, ids, <double*>self.grad_ptr, self.outer, self.n,
                          self.k, self.inner)
        else:
            along_scatter(<float*>x.grad_ptr, ids, <float*>self.grad_ptr, self.outer, self.n,
                          self.k, self.inner)
        return 0


def take_along_axis(x, ids, axis):
    """Elements of x picked along `axis` by `ids`, as numpy.take_along_axis (torch.gather).

    `ids` is an IndexInput (or integers, wrapped in one) with x's number of
    axes; its length along `axis` is free, every other axis must match x's
    (no broadcasting). The output has ids' shape:
    out[..., i, ...] = x[..., ids[..., i, ...], ...] along `axis`. `axis=None`
    takes from the flattened x (then ids is 1-D). Ids are checked against x's
    length along `axis` on every forward and backward.

    Along axis 0 of a Parameter the gradient is sparse over the rows the ids
    touch (as `p[ix]`); otherwise it is dense, repeated ids adding up.

    >>> scores = fa.Parameter([[0.1, 0.9, 0.0], [0.5, 0.2, 0.3]])
    >>> fa.take_along_axis(scores, [[2, 0], [1, 1]], axis=1).value
    array([[0. , 0.1],
           [0.2, 0.2]], dtype=float32)
    """
    require_float("take_along_axis", x, "x")
    cdef Variable v = <Variable>x
    if not isinstance(ids, IndexInput):
        if isinstance(ids, Variable):
            raise TypeError("take_along_axis: ids must be an IndexInput or integers, "
                            "got a float Variable")
        ids = IndexInput(ids, device=v.device)
    cdef IndexInput ix = <IndexInput>ids
    if axis is None:
        v = _reshape(v, -1)
        axis = 0
    cdef tuple xs = v._shape, ks = ix._shape
    if len(ks) != len(xs):
        raise ValueError(f"take_along_axis: ids has {len(ks)} axes (shape {ks}) but x has "
                         f"{len(xs)} (shape {xs}); they need the same number")
    cdef Py_ssize_t ax = _normalize_axes("take_along_axis", axis, len(xs))[0]
    for d in range(len(xs)):
        if d != ax and ks[d] != xs[d]:
            raise ValueError(f"take_along_axis: ids has shape {ks} but x has shape {xs}; every "
                             f"axis but axis {ax} must match (axis {d}: {ks[d]} vs {xs[d]})")
    if on_device(v) or on_device(ix):
        return device_ops().take_along_axis(v, ix, ax)
    cdef TakeAlong node = TakeAlong.__new__(TakeAlong)
    node.x = v
    node.ix = ix
    node.axis = ax
    node.outer = prod(xs[:ax])
    node.n = xs[ax]
    node.k = ks[ax]
    node.inner = prod(xs[ax + 1:])
    node.sparse = isinstance(v, Parameter) and ax == 0
    if node.sparse:
        node.slot_of = np.full(node.n, -1, dtype=np.int32)
        node.distinct = np.empty(min(node.n, ix.size), dtype=np.int64)
        node.rows = np.empty((min(node.n, ix.size), node.inner), dtype=v.dtype)
    init_node(node, "take_along_axis", (v, ix), ks, v.f64)
    return finish(node)

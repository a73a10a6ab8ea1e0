"""Dots of gathered rows, in one node each: `fastad.gather_dot` (a row of A against its own
rows of B: skip-gram's scores, a user against candidate items) and `fastad.bag_dot` (the mean
of a bag of A rows against rows of B: fastText's subword scores). Each keeps the rows it
gathered for its backward, which sends the tables their gradient rows (a row gather: under
`fastad.train`'s plain SGD each row takes its step inside backward).
"""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from fastad._engine.graph cimport (Variable, IndexInput, RowGather, empty_buffer, init_node, finish,
                                   backend_among, check_flag, send_rows, send_scaled_rows, keep_data)
from fastad._engine.loops cimport element_size, row_axpy, row_dot, vec_fill, vec_zero
from fastad.ops.sparse cimport as_ids, check_ids, fa_ids_out_of_range, row_tables

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["gather_dot", "bag_dot"]

cdef extern from "gather_dot.h":
    void fa_gather_dot_rows_f(const float* A, const float* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              float* a_rows, float* b_rows, float* out) noexcept nogil
    void fa_gather_dot_rows_d(const double* A, const double* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              double* a_rows, double* b_rows, double* out) noexcept nogil


cdef inline void gather_dot_rows(const floating* A, const floating* B, const int64_t* a_ids,
                                 const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                                 floating* a_rows, floating* b_rows, floating* out) noexcept nogil:
    """out[k] = B[b_ids[k]] . A[a_ids[k // per]], keeping the gathered rows (gather_dot.h)."""
    if floating is float:
        fa_gather_dot_rows_f(A, B, a_ids, b_ids, n, per, dim, a_rows, b_rows, out)
    else:
        fa_gather_dot_rows_d(A, B, a_ids, b_ids, n, per, dim, a_rows, b_rows, out)


cdef void _sum_scaled_rows(floating* h, const floating* rows, const floating* g, Py_ssize_t n,
                           Py_ssize_t per, Py_ssize_t dim) noexcept nogil:
    """h row r = sum over j of g[r * per + j] * rows[r * per + j], for r < n: each gathered
    row's (or bag's hidden's) gradient from its `per` kept B rows, added in order of j into
    a zero row (as vector_dot's backward adds a broadcast operand's gradient)."""
    cdef Py_ssize_t r, k
    for r in range(n):
        vec_zero(h + r * dim, dim)
        for k in range(r * per, (r + 1) * per):
            row_axpy(h + r * dim, rows + k * dim, dim, g[k])


@cython.no_gc
cdef class RowsDot(RowGather):
    """The base of gather_dot's and bag_dot's nodes: y[k] = B[b_ids[k]] . (A row k // per),
    an A row being a gathered row of A (GatherDot) or the mean of a bag of them (BagDot),
    kept by the forward in `a_kept` with the gathered B rows. The backward sends A its
    gradient rows (send_a_rows, from the sums g[k] * B row k of each A row), then B its rows
    g[k] * A row (send_scaled_rows: a Parameter under fastad.train's plain SGD steps them
    directly), in the order the composed ops' backwards add them, which matters when A is B."""
    cdef Variable a_table, b_table
    cdef IndexInput b_ids
    cdef Py_ssize_t dim, per, n_a, a_count, b_count   # per: B rows an A row; n_a: A rows; *_count: table rows
    cdef cnp.ndarray a_kept, b_rows, a_grads, scratch   # kept by the forward; the backward's buffers
    cdef char* a_kept_ptr
    cdef char* b_rows_ptr
    cdef char* a_grads_ptr
    cdef char* scratch_ptr

    cdef int check_inputs(self) except -1 nogil:
        """Every id names a row (the leaves can change through set_value between passes)."""
        return check_ids(self, self.b_ids, self.b_count)

    cdef int send_a_rows(self) except -1 nogil:
        """Send A the gradient rows of its rows, from a_grads (each A row's)."""
        return 0

    cdef int run_backward(self) except -1 nogil:
        self.check_inputs()
        if self.a_table.requires_grad:
            if self.f64:
                _sum_scaled_rows(<double*>self.a_grads_ptr, <const double*>self.b_rows_ptr,
                                 <const double*>self.grad_ptr, self.n_a, self.per, self.dim)
            else:
                _sum_scaled_rows(<float*>self.a_grads_ptr, <const float*>self.b_rows_ptr,
                                 <const float*>self.grad_ptr, self.n_a, self.per, self.dim)
            self.send_a_rows()
        if self.b_table.requires_grad:
            send_scaled_rows(self, 1, self.b_table, <const int64_t*>self.b_ids.val_ptr, self.size,
                             self.a_kept_ptr, self.grad_ptr, self.dim, self.per, self.scratch_ptr)
        return 0


@cython.no_gc
@cython.final
cdef class GatherDot(RowsDot):
    """y[..., j] = B[b_ids[..., j]] . A[a_ids[...]] in one node: what two gathers, a reshape
    and a broadcast vector_dot compute, with the same values and gradients, copying each
    A row once for its `per` B rows."""
    cdef IndexInput a_ids

    cdef int run_forward(self) except -1 nogil:
        self.check_inputs()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        gather_dot_rows(<const floating*>self.a_table.val_ptr, <const floating*>self.b_table.val_ptr,
                        <const int64_t*>self.a_ids.val_ptr, <const int64_t*>self.b_ids.val_ptr,
                        self.n_a, self.per, self.dim, <floating*>self.a_kept_ptr,
                        <floating*>self.b_rows_ptr, y)
        return 0

    cdef int check_inputs(self) except -1 nogil:
        check_ids(self, self.a_ids, self.a_count)
        return RowsDot.check_inputs(self)

    cdef int send_a_rows(self) except -1 nogil:
        return send_rows(self, 0, self.a_table, <const int64_t*>self.a_ids.val_ptr, self.n_a,
                         self.a_grads_ptr, self.dim)


@cython.no_gc
@cython.final
cdef class BagDot(RowsDot):
    """y[b, j] = mean(A[bag b]) . B[b_ids[b, j]] in one node, bag b being the A rows
    bag_ids[offsets[b]:offsets[b + 1]]: each bag's mean (the hidden, its A row) is summed
    once and kept. Each bag row takes the hidden's gradient (`hidden_gradient`) or 1/n of
    it (the exact gradient of the mean)."""
    cdef IndexInput bag_ids, bag_offsets
    cdef bint hidden_gradient
    cdef cnp.ndarray coefs
    cdef char* coefs_ptr

    cdef int run_forward(self) except -1 nogil:
        self.check_inputs()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef const floating* A = <floating*>self.a_table.val_ptr
        cdef const floating* B = <floating*>self.b_table.val_ptr
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef const int64_t* b_ids = <int64_t*>self.b_ids.val_ptr
        cdef floating* hidden = <floating*>self.a_kept_ptr
        cdef floating* rows = <floating*>self.b_rows_ptr
        cdef floating* h
        cdef Py_ssize_t b, k, dim = self.dim
        cdef floating share
        for b in range(self.n_a):
            h = hidden + b * dim
            share = <floating>(1.0 / (offsets[b + 1] - offsets[b]))
            vec_zero(h, dim)
            for k in range(offsets[b], offsets[b + 1]):
                row_axpy(h, A + ids[k] * dim, dim, share)
            for k in range(b * self.per, (b + 1) * self.per):
                memcpy(rows + k * dim, B + b_ids[k] * dim, dim * sizeof(floating))
                out[k] = row_dot(rows + k * dim, h, dim)
        return 0

    cdef int send_a_rows(self) except -1 nogil:
        """Each bag's rows the hidden's gradient times its coefficient."""
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef Py_ssize_t b, n, row_bytes = self.dim * element_size(self.f64)
        for b in range(self.n_a):
            n = offsets[b + 1] - offsets[b]
            if not self.hidden_gradient and self.f64:
                vec_fill(<double*>self.coefs_ptr, 1.0 / n, n)
            elif not self.hidden_gradient:
                vec_fill(<float*>self.coefs_ptr, <float>(1.0 / n), n)
            send_scaled_rows(self, 0, self.a_table, ids + offsets[b], n,
                             self.a_grads_ptr + b * row_bytes, self.coefs_ptr, self.dim, n,
                             self.scratch_ptr)
        return 0

    cdef int check_inputs(self) except -1 nogil:
        """The offsets must cut non-empty bags within bag_ids, and every id of them (and of
        b_ids) name a row."""
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef Py_ssize_t b, k
        for b in range(self.n_a):
            if offsets[b] < 0 or offsets[b + 1] <= offsets[b] or offsets[b + 1] > self.bag_ids.size:
                with gil:
                    raise ValueError(f"bag_dot: bag_offsets must rise strictly from >= 0 to at most "
                                     f"len(bag_ids) = {self.bag_ids.size} (each bag non-empty), got "
                                     f"{self.bag_offsets.value.tolist()}")
        if fa_ids_out_of_range(<const uint64_t*>(ids + offsets[0]), offsets[self.n_a] - offsets[0],
                               self.a_count):
            for k in range(offsets[0], offsets[self.n_a]):
                if ids[k] < 0 or ids[k] >= self.a_count:
                    with gil:
                        raise IndexError(f"bag_dot: id {ids[k]} at position {k} of bag_ids is out of "
                                         f"range for a_table with {self.a_count} rows")
        return RowsDot.check_inputs(self)


cdef int _keep_buffers(RowsDot node, Variable A, Variable B, IndexInput b_ids, Py_ssize_t n_a,
                       Py_ssize_t scratch_rows) except -1:
    """The node's tables, B's ids (the last axis: the B rows of each of the n_a A rows) and
    their sizes, its kept rows and the backward's buffers."""
    node.a_table, node.b_table, node.b_ids = A, B, b_ids
    node.a_count, node.b_count, node.dim = A._shape[0], B._shape[0], A._shape[1]
    node.n_a, node.per = n_a, b_ids._shape[len(b_ids._shape) - 1]
    dtype = np.float64 if node.f64 else np.float32
    node.a_kept = keep_data(empty_buffer((n_a, node.dim), dtype), &node.a_kept_ptr)
    node.a_grads = keep_data(empty_buffer((n_a, node.dim), dtype), &node.a_grads_ptr)
    node.b_rows = keep_data(empty_buffer((node.b_ids.size, node.dim), dtype), &node.b_rows_ptr)
    node.scratch = keep_data(empty_buffer((scratch_rows, node.dim), dtype), &node.scratch_ptr)
    return 0


def gather_dot(a_table, a_ids, b_table, b_ids):
    """The dot products of gathered rows: `out[..., j] = A[a_ids[...]] . B[b_ids[..., j]]`,
    each row of A against its own `m` rows of B (a skip-gram centre word against its
    context word and its negatives, a user against candidate items).

    `a_table` (A) and `b_table` (B) are float Variables of shapes (rows_a, dim) and
    (rows_b, dim), usually Parameters (they may be one); `a_ids` and `b_ids` are
    IndexInputs (or integer ids) of shapes S and S + (m,), and the result has
    b_ids' shape. It is `vector_dot(take(B, b_ids), reshape(take(A, a_ids), S + (1,
    dim)))` with the same values and gradients bit for bit, in one node that copies
    each A row once. Gradients are sparse (rows of A and
    B), and repeated ids add, as with `take`; under `fastad.train`'s plain SGD each
    row takes its step inside backward, as a take's does. On a GPU it is composed of
    those ops.

    >>> W = fa.Parameter(np.random.randn(100, 8)); C = fa.Parameter(np.random.randn(100, 8))
    >>> scores = fa.gather_dot(W, [3, 7], C, [[1, 2, 9], [4, 4, 0]])     # shape (2, 3)
    >>> loss = fa.nn.bce_with_logits(scores, [[1, 0, 0], [1, 0, 0]], reduction="sum")
    """
    cdef str op = "gather_dot"
    cdef Variable A, B
    A, B = row_tables(op, "a_table", a_table, "b_table", b_table)
    cdef IndexInput a_index = as_ids(op, "a_ids", a_ids, A.device)
    cdef IndexInput b_index = as_ids(op, "b_ids", b_ids, B.device)
    cdef tuple lead = a_index._shape
    if b_index._shape[:len(b_index._shape) - 1] != lead or len(b_index._shape) != len(lead) + 1:
        raise ValueError(f"{op}: b_ids must have a_ids' shape plus one axis (the B rows of each "
                         f"A row): a_ids has shape {lead}, so b_ids needs {lead + ('m',)}, got "
                         f"{b_index._shape}")
    if (dev := backend_among((A, B, a_index, b_index))) is not None:
        return dev.gather_dot(A, a_index, B, b_index)
    cdef GatherDot node = GatherDot.__new__(GatherDot)
    node.a_ids = a_index
    init_node(node, op, (A, B, a_index, b_index), b_index._shape, A.f64)
    node.gathers((A, B), ((a_index, A), (b_index, B)))
    _keep_buffers(node, A, B, b_index, a_index.size, b_index.size)
    return finish(node)


def bag_dot(a_table, bag_ids, bag_offsets, b_table, b_ids, hidden_gradient=False):
    """The dot products of bag means with gathered rows: `out[b, j] = mean(A[bag b]) .
    B[b_ids[b, j]]`, bag b being the A rows `bag_ids[bag_offsets[b]:bag_offsets[b + 1]]`
    (fastText's scores: a word's mean over its own row and its character n-gram rows,
    against its context word and negatives).

    `a_table` (A) and `b_table` (B) are float Variables of shapes (rows_a, dim) and
    (rows_b, dim), usually Parameters; `bag_ids` a 1-D IndexInput (a capacity: the ids
    past the last offset are not read, so variable bags need no padding);
    `bag_offsets` an IndexInput of n_bags + 1 offsets rising strictly (every bag
    non-empty), torch's include_last_offset layout; `b_ids` an IndexInput of shape
    (n_bags, m), which is the result's shape. The values are those of
    `embedding_bag(A, bag_ids, bag_offsets, mode="mean", include_last_offset=True)`
    dotted with `take(B, b_ids)`, in one node.

    `hidden_gradient` False: the exact gradients (each bag row takes 1/n of its bag
    mean's gradient). True: each bag row takes the whole gradient of its bag's mean,
    fastText's (and gensim's FastText) update of the subword rows, n times the
    gradient; B's gradients are exact either way. Repeated ids add, as with `take`;
    under `fastad.train`'s plain SGD each row takes its step inside backward, as a
    take's does. CPU only: a GPU table raises a ValueError.

    >>> A = fa.Parameter(np.random.randn(100, 8)); B = fa.Parameter(np.random.randn(20, 8))
    >>> scores = fa.bag_dot(A, [3, 50, 71, 9], [0, 3, 4], B, [[1, 2], [4, 0]])   # bags [3, 50, 71], [9]
    """
    cdef str op = "bag_dot"
    cdef Variable A, B
    A, B = row_tables(op, "a_table", a_table, "b_table", b_table)
    cdef IndexInput ids = as_ids(op, "bag_ids", bag_ids, A.device)
    cdef IndexInput offsets = as_ids(op, "bag_offsets", bag_offsets, A.device)
    cdef IndexInput targets = as_ids(op, "b_ids", b_ids, B.device)
    if len(ids._shape) != 1 or ids.size == 0:
        raise ValueError(f"{op}: bag_ids must be a non-empty 1-D IndexInput, got shape {ids._shape}")
    if len(offsets._shape) != 1 or offsets.size < 2:
        raise ValueError(f"{op}: bag_offsets must be 1-D with n_bags + 1 >= 2 offsets, got shape "
                         f"{offsets._shape}")
    cdef Py_ssize_t bags = offsets.size - 1
    if len(targets._shape) != 2 or targets._shape[0] != bags:
        raise ValueError(f"{op}: b_ids must have shape (n_bags, m) = ({bags}, m) (bag_offsets holds "
                         f"{bags} bags), got {targets._shape}")
    if backend_among((A, B, ids, offsets, targets)) is not None:
        raise ValueError(f"{op}: the tables and ids must be on the CPU: bag_dot has no GPU path yet")
    cdef BagDot node = BagDot.__new__(BagDot)
    node.bag_ids, node.bag_offsets = ids, offsets
    node.hidden_gradient = check_flag(op, "hidden_gradient", hidden_gradient)
    init_node(node, op, (A, B, ids, offsets, targets), targets._shape, A.f64)
    node.gathers((A, B), ((ids, A), (targets, B)))
    node.sends_once = bags == 1           # the A rows go bag by bag
    _keep_buffers(node, A, B, targets, bags, max(ids.size, targets.size))
    node.coefs = keep_data(empty_buffer((ids.size,), node.a_kept.dtype), &node.coefs_ptr)
    node.coefs.fill(1)
    return finish(node)

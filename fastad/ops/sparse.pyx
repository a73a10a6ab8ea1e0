"""Row gathers with sparse gradients: `table[ix]`, `fastad.take(table, ix)`,
`fastad.embedding` (PyTorch's padding_idx and max_norm), `fastad.embedding_bag`
(sums or means of ragged bags of rows), and `fastad.take_along_axis(x, ids, axis)`
(sparse along axis 0 of a Parameter).

The backward sends (row ids, row gradients) to the table (`send_rows`): a
Parameter keeps them as a sparse gradient over the touched rows only, so an
optimizer step costs time in proportion to the rows used, not the table; under
`fastad.train`, its optimizer's row step may take them instead (`RowGather`).
"""
import numbers
from math import prod

import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.math cimport fabs, pow, sqrt, INFINITY
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy

from fastad._engine.graph cimport (Variable, Input, IndexInput, Parameter, RowGather, empty_buffer,
                                   init_node, finish, require_float, same_dtype, backend_of,
                                   send_rows, keep_data)
from fastad._engine.graph import register_methods
from fastad._engine.loops cimport element_size, row_dot, vec_zero
from fastad.ops.reduction import _normalize_axes
from fastad.ops.shape import reshape as _reshape

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["take", "take_along_axis", "embedding", "embedding_bag"]

cdef extern from *:
    """
    #include <string.h>
    /* dst row k = table row ids[k], rows of `width` bytes. A short row (up to 64 bytes: 16
     * float32 values) is copied by loads and stores of its known size: a library memcpy call
     * per row would cost more than the copy (longer rows go to memcpy, whose wide moves beat
     * a loop here). */
    #define FA_GATHER_FIXED(W) \
        for (k = 0; k < n; k++) memcpy(dst + (W) * k, table + (W) * ids[k], (W))
    static inline void fa_gather_rows(char* dst, const char* table, const int64_t* ids,
                                      Py_ssize_t n, Py_ssize_t width) {
        Py_ssize_t k;
        switch (width) {
        case 4: FA_GATHER_FIXED(4); break;
        case 8: FA_GATHER_FIXED(8); break;
        case 16: FA_GATHER_FIXED(16); break;
        case 32: FA_GATHER_FIXED(32); break;
        case 64: FA_GATHER_FIXED(64); break;
        default:
            for (k = 0; k < n; k++) memcpy(dst + k * width, table + ids[k] * width, width);
        }
    }
    """
    void fa_gather_rows(char* dst, const char* table, const int64_t* ids, Py_ssize_t n,
                        Py_ssize_t width) noexcept nogil

cdef extern from "bag_sums.h":
    void fa_bag_sum_f(float* out, const float* table, const int64_t* ids, const float* weights,
                      Py_ssize_t count, Py_ssize_t len) noexcept nogil
    void fa_bag_sum_d(double* out, const double* table, const int64_t* ids, const double* weights,
                      Py_ssize_t count, Py_ssize_t len) noexcept nogil
    void fa_bag_spread_f(float* rows, const float* grad, const float* weights, float scale,
                         Py_ssize_t count, Py_ssize_t len) noexcept nogil
    void fa_bag_spread_d(double* rows, const double* grad, const double* weights, double scale,
                         Py_ssize_t count, Py_ssize_t len) noexcept nogil


cdef int raise_bad_id(Variable node, IndexInput ix, Py_ssize_t rows) except -1 nogil:
    cdef const int64_t* ids = <const int64_t*>ix.val_ptr
    cdef Py_ssize_t k
    for k in range(ix.size):
        if ids[k] < 0 or ids[k] >= rows:
            with gil:
                raise IndexError(f"{node.op_name}: id {ids[k]} at position {k} of the IndexInput "
                                 f"is out of range for a table with {rows} rows")
    return 0


cdef IndexInput as_ids(str op, str argname, object ids, object device):
    if isinstance(ids, IndexInput):
        return <IndexInput>ids
    if isinstance(ids, Variable):
        raise TypeError(f"{op}: {argname} must be an IndexInput or integers, got a float Variable")
    return IndexInput(ids, device=device)


cdef tuple row_tables(str op, str a_name, object a, str b_name, object b):
    cdef Variable A = require_float(op, a, a_name), B = require_float(op, b, b_name)
    if len(A._shape) != 2 or len(B._shape) != 2 or A._shape[1] != B._shape[1]:
        raise ValueError(f"{op}: {a_name} and {b_name} must be 2-D with one row length, got "
                         f"shapes {A._shape} and {B._shape}")
    same_dtype(op, A, B)
    return A, B


cdef double row_norm(const floating* row, Py_ssize_t n, double norm_type) noexcept nogil:
    """The norm_type-norm of a row (norm_type > 0, or inf for the largest magnitude)."""
    cdef Py_ssize_t j
    cdef double total = 0.0
    if norm_type == 2.0:
        for j in range(n):
            total += <double>row[j] * row[j]
        return sqrt(total)
    if norm_type == INFINITY:
        for j in range(n):
            total = max(total, fabs(row[j]))
        return total
    for j in range(n):
        total += pow(fabs(row[j]), norm_type)
    return pow(total, 1.0 / norm_type)


@cython.no_gc
cdef class Take(RowGather):
    cdef Variable table
    cdef IndexInput ix
    cdef Py_ssize_t rows, row_len, row_bytes
    cdef int64_t padding_idx          # the row that gets no gradient, or -1
    cdef cnp.ndarray kept_ids, kept_rows  # with a padding row: the other ids and their gradient
    cdef int64_t* kept_ids_ptr            # rows, gathered for one send
    cdef char* kept_rows_ptr
    cdef double max_norm              # rows longer than this are renormalised on lookup; 0: never
    cdef double norm_type

    cdef int run_forward(self) except -1 nogil:
        check_ids(self, self.ix, self.rows)
        if self.max_norm > 0:
            (self._renorm(<double*>self.table.val_ptr) if self.f64
             else self._renorm(<float*>self.table.val_ptr))
        fa_gather_rows(self.val_ptr, self.table.val_ptr, <const int64_t*>self.ix.val_ptr, self.ix.size,
                       self.row_bytes)
        return 0

    cdef int _renorm(self, floating* table) except -1 nogil:
        """Scale each row ids[k] whose norm exceeds max_norm to max_norm / (norm + 1e-7) of
        itself, in place (torch.embedding_renorm_; a row met twice is already within bounds)."""
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, j, row_len = self.row_len
        cdef double norm
        cdef floating scale
        cdef floating* row
        for k in range(self.ix.size):
            row = table + ids[k] * row_len
            norm = row_norm(row, row_len, self.norm_type)
            if norm > self.max_norm:
                scale = <floating>(self.max_norm / (norm + 1e-7))
                for j in range(row_len):
                    row[j] *= scale
        return 0

    cdef int run_backward(self) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, start = 0, n = self.ix.size
        if not self.table.requires_grad:
            return 0
        check_ids(self, self.ix, self.rows)
        if self.padding_idx < 0:
            return send_rows(self, 0, self.table, ids, n, self.grad_ptr, self.row_len)
        # The padding row gets nothing: the other ids go in one call (a stateful row step takes
        # one send an example), as they are when every padding id comes after them.
        while start < n and ids[start] != self.padding_idx:
            start += 1
        k = start
        while k < n and ids[k] == self.padding_idx:
            k += 1
        if k == n:      # nothing to send when every id is the padding row's
            return send_rows(self, 0, self.table, ids, start, self.grad_ptr, self.row_len) if start else 0
        cdef Py_ssize_t kept = 0
        for k in range(n):
            if ids[k] != self.padding_idx:
                self.kept_ids_ptr[kept] = ids[k]
                memcpy(self.kept_rows_ptr + kept * self.row_bytes,
                       self.grad_ptr + k * self.row_bytes, self.row_bytes)
                kept += 1
        return send_rows(self, 0, self.table, self.kept_ids_ptr, kept, self.kept_rows_ptr,
                         self.row_len)


cdef Variable _gather(str op, object table, object ix, int64_t padding_idx, double max_norm,
                      double norm_type):
    cdef Variable t = require_float(op, table, "table")
    if not t._shape:
        raise ValueError(f"{op}: the table must have at least one axis, got a 0-d Variable")
    ix = as_ids(op, "ids", ix, t.device)
    if (dev := backend_of(t, ix)) is not None:
        return dev.take(t, ix, op, padding_idx, max_norm, norm_type)
    cdef Take node = Take.__new__(Take)
    node.table = t
    node.ix = <IndexInput>ix
    node.rows = t._shape[0]
    node.row_len = t.size // node.rows if node.rows else 0
    node.row_bytes = node.row_len * element_size(t.f64)
    node.padding_idx = padding_idx
    node.max_norm = max_norm
    node.norm_type = norm_type
    init_node(node, op, (t, ix), ix.shape + t._shape[1:], t.f64)
    node.gathers((t,), ((ix, t),))
    if padding_idx >= 0:
        node.kept_ids = keep_data(empty_buffer((ix.size,), np.int64), <char**>&node.kept_ids_ptr)
        node.kept_rows = keep_data(empty_buffer((ix.size, node.row_len), t.dtype), &node.kept_rows_ptr)
    return finish(node)


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
    return _gather("take", table, ix, -1, 0.0, 2.0)


def padding_row(str op, object padding_idx, Py_ssize_t rows):
    """padding_idx as a row in [0, rows) (negative counts from the end), or None for None;
    `op` names the caller in the errors."""
    if padding_idx is None:
        return None
    if isinstance(padding_idx, bool) or not isinstance(padding_idx, numbers.Integral):
        raise TypeError(f"{op}: padding_idx must be an int or None, got {padding_idx!r}")
    if not -rows <= padding_idx < rows:
        raise ValueError(f"{op}: padding_idx must be in [-{rows}, {rows}) for a table with "
                         f"{rows} rows, got {padding_idx}")
    return int(padding_idx) % rows


cpdef double check_positive(str op, str name, object value, bint allow_inf) except -1.0:
    """`value` (embedding's max_norm or norm_type) as a float > 0, infinite only when
    `allow_inf`, or a ValueError naming `op` and `name`; `fa.nn.Embedding` checks its
    options with it when it is made."""
    if isinstance(value, bool) or not isinstance(value, numbers.Real) or not value > 0 \
            or value != value or (value == INFINITY and not allow_inf):
        raise ValueError(f"{op}: {name} must be a number > 0{'' if allow_inf else ' (finite)'}, "
                         f"got {value!r}")
    return float(value)


def embedding(weight, ids, padding_idx=None, max_norm=None, norm_type=2.0):
    """Rows `ids` of `weight` as torch.nn.functional.embedding, with a sparse gradient.

    `padding_idx` (an int, negative from the end): that row gets no gradient.
    `max_norm`: on every forward, each looked-up row whose `norm_type`-norm
    exceeds max_norm is scaled in place, in `weight` itself, to
    max_norm / (norm + 1e-7) of itself before it is read (PyTorch's
    embedding_renorm_); weight must then be a leaf. Otherwise as `take`. On a
    GPU the padding row may be listed among a sparse gradient's touched rows,
    with a zero gradient.

    >>> E = fa.Parameter(np.random.randn(100, 8))
    >>> rows = fa.embedding(E, fa.IndexInput([0, 5, 0]), padding_idx=0, max_norm=1.0)
    """
    require_float("embedding", weight, "weight")
    if not (<Variable>weight)._shape:
        raise ValueError("embedding: the table must have at least one axis, got a 0-d Variable")
    cdef Py_ssize_t rows = (<Variable>weight)._shape[0]
    row = padding_row("embedding", padding_idx, rows)
    cdef int64_t pad = -1 if row is None else row
    cdef double limit = 0.0
    if max_norm is not None:
        limit = check_positive("embedding", "max_norm", max_norm, False)
        if not (<Variable>weight).is_leaf:
            raise ValueError("embedding: max_norm renormalises rows of the table in place; the "
                             "table must be a leaf (a Parameter), not an op's result")
    return _gather("embedding", weight, ids, pad, limit, check_positive("embedding", "norm_type",
                                                                        norm_type, True))


# ---------------------------------------------------------------- embedding_bag

cdef int fill_bounds(const int64_t* offsets, Py_ssize_t n_offsets, Py_ssize_t n_ids,
                     Py_ssize_t n_bags, bint include_last_offset, int64_t* bounds) except -1 nogil:
    """bounds[b], bounds[b + 1] = where bag b starts and ends (n_bags + 1 entries), after
    checking that offsets start at 0, never decrease and stay within the n_ids ids."""
    cdef Py_ssize_t b
    for b in range(n_offsets):
        if b == 0 and offsets[0] != 0:
            with gil:
                raise ValueError(f"embedding_bag: offsets[0] must be 0 (the first bag starts "
                                 f"at the first id), got {offsets[0]}")
        if b > 0 and offsets[b] < offsets[b - 1]:
            with gil:
                raise ValueError(f"embedding_bag: offsets must not decrease, got "
                                 f"offsets[{b - 1}] = {offsets[b - 1]} and offsets[{b}] = "
                                 f"{offsets[b]}")
        if offsets[b] > n_ids:
            with gil:
                raise ValueError(f"embedding_bag: offsets[{b}] = {offsets[b]} is past the end "
                                 f"of the {n_ids} ids")
        if b < n_bags:
            bounds[b] = offsets[b]
    bounds[n_bags] = offsets[n_bags] if include_last_offset else n_ids
    return 0


def bag_bounds(IndexInput offsets, Py_ssize_t n_ids, Py_ssize_t n_bags, bint include_last_offset,
               cnp.ndarray[int64_t, ndim=1, mode="c"] bounds not None):
    """Check host `offsets` and write the bags' bounds into `bounds` (int64, n_bags + 1),
    as embedding_bag's CPU node does before each pass (its device version calls this)."""
    if offsets.on_device:
        raise ValueError("embedding_bag: on a GPU the offsets stay on the host (an IndexInput "
                         "without device=), where they are checked before each pass")
    if bounds.shape[0] != n_bags + 1:
        raise ValueError(f"bag_bounds: bounds must have {n_bags + 1} entries, got {bounds.shape[0]}")
    fill_bounds(<const int64_t*>offsets.val_ptr, offsets.size, n_ids, n_bags, include_last_offset,
                <int64_t*>cnp.PyArray_DATA(bounds))
    return bounds


@cython.no_gc
cdef class EmbeddingBag(RowGather):
    """out[b] = sum (or mean) of table[ids[k]] (times weights[k]) over bag b's positions k;
    a sparse (or dense) row gradient."""
    cdef Variable table
    cdef IndexInput ix
    cdef IndexInput offsets           # None: ids is 2-D, one bag per row
    cdef Variable weights             # per_sample_weights (the ids' shape), or None
    cdef Py_ssize_t rows, row_len, n_bags
    cdef bint mean, include_last_offset    # (and RowGather's dense_grad)
    cdef cnp.ndarray bounds           # int64 (n_bags + 1,): bag b is ids[bounds[b]:bounds[b + 1]]
    cdef cnp.ndarray scratch          # (n_ids, row_len): each position's gradient row
    cdef int64_t* bounds_ptr          # their data, for the passes
    cdef char* scratch_ptr
    cdef bint table_is_parameter

    cdef int check_inputs(self) except -1 nogil:
        """The bounds from offsets that form a valid partition, and the ids the bags hold in
        range: ids and offsets can change through set_value between passes. The ids past
        the last bag's end (include_last_offset: a leaf made for the longest of bags of
        any length, as `fa.data.BagSampler` fills) are never read, so only the bags' ids are
        checked: a short bag in a long leaf costs its own length, not the leaf's."""
        cdef Py_ssize_t end = self.ix.size      # where the last bag can end; the ids first,
        if self.offsets is not None and self.include_last_offset:     # as fa.train's check expects
            end = min(max((<const int64_t*>self.offsets.val_ptr)[self.n_bags], 0), end)
        # the bags start at position 0 (offsets[0] must be 0), so the first bad id is a bag's
        if fa_any_id_out_of_range(<const uint64_t*>self.ix.val_ptr, end, self.rows):
            return raise_bad_id(self, self.ix, self.rows)
        if self.offsets is not None:      # else fixed bags: the bounds were set at build
            fill_bounds(<const int64_t*>self.offsets.val_ptr, self.offsets.size, self.ix.size,
                        self.n_bags, self.include_last_offset, self.bounds_ptr)
        return 0

    cdef int run_forward(self) except -1 nogil:
        self.check_inputs()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        """out[b] = the sum (or mean) of the rows ids[bounds[b]:bounds[b + 1]]; an empty bag is zeros."""
        cdef const floating* table = <floating*>self.table.val_ptr
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef const int64_t* bounds = self.bounds_ptr
        cdef Py_ssize_t b, j, row_len = self.row_len
        cdef const floating* weights = <const floating*>self.weights.val_ptr if self.weights is not None else NULL
        cdef floating* o
        cdef floating inv
        for b in range(self.n_bags):
            o = out + b * row_len
            if floating is float:
                fa_bag_sum_f(o, table, ids + bounds[b], weights + bounds[b] if weights != NULL else NULL,
                             bounds[b + 1] - bounds[b], row_len)
            else:
                fa_bag_sum_d(o, table, ids + bounds[b], weights + bounds[b] if weights != NULL else NULL,
                             bounds[b + 1] - bounds[b], row_len)
            if self.mean and bounds[b + 1] > bounds[b] + 1:
                inv = <floating>(1.0 / (bounds[b + 1] - bounds[b]))
                for j in range(row_len):
                    o[j] *= inv
        return 0

    cdef int run_backward(self) except -1 nogil:
        cdef bint to_weights = self.weights is not None and self.weights.requires_grad
        if not (self.table.requires_grad or to_weights):
            return 0
        self.check_inputs()
        if to_weights:      # from the rows as forward read them: before a row step moves them
            (self._weights_backward(<const double*>self.grad_ptr) if self.f64
             else self._weights_backward(<const float*>self.grad_ptr))
        if not self.table.requires_grad:
            return 0
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _weights_backward(self, const floating* grad) except -1 nogil:
        """Position k of bag b: grad[b] . table[ids[k]], into the weights' gradient (0 for
        positions outside every bag)."""
        cdef const int64_t* bounds = self.bounds_ptr
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef const floating* table = <const floating*>self.table.val_ptr
        cdef bint add = self.weights.prepare_grad()
        cdef floating* gw = <floating*>self.weights.grad_ptr
        cdef Py_ssize_t b, k, row_len = self.row_len
        if not add:
            vec_zero(gw, self.weights.size)
        for b in range(self.n_bags):
            for k in range(bounds[b], bounds[b + 1]):
                gw[k] += row_dot(grad + b * row_len, table + ids[k] * row_len, row_len)
        return 0

    cdef int _backward(self, const floating* grad) except -1 nogil:
        """Position k of bag b gets the row grad[b] (/ the bag's size for a mean; times
        weights[k] when weighted), to the table's rows ids[k]."""
        cdef const int64_t* bounds = self.bounds_ptr
        cdef floating* rows = <floating*>self.scratch_ptr
        cdef const floating* weights = <const floating*>self.weights.val_ptr if self.weights is not None else NULL
        # ids outside the bags (past an include_last_offset end) count for nothing
        cdef Py_ssize_t b, row_len = self.row_len, first = bounds[0]
        cdef floating scale
        for b in range(self.n_bags):
            scale = 1
            if self.mean and bounds[b + 1] > bounds[b]:
                scale = <floating>(1.0 / (bounds[b + 1] - bounds[b]))
            if floating is float:
                fa_bag_spread_f(rows + bounds[b] * row_len, grad + b * row_len,
                                weights + bounds[b] if weights != NULL else NULL, scale,
                                bounds[b + 1] - bounds[b], row_len)
            else:
                fa_bag_spread_d(rows + bounds[b] * row_len, grad + b * row_len,
                                weights + bounds[b] if weights != NULL else NULL, scale,
                                bounds[b + 1] - bounds[b], row_len)
        if (self.dense_grad and self.table_is_parameter and self.route_ptrs[0] == NULL
                and not self.table.prepare_grad()):
            # a Parameter's first dense contribution: start from zeros (none while its rows go
            # to a row step: no gradient is kept then)
            vec_zero(<floating*>self.table.grad_ptr, self.table.size)
        return send_rows(self, 0, self.table, <const int64_t*>self.ix.val_ptr + first,
                         bounds[self.n_bags] - first, <char*>(rows + first * row_len), row_len)


def embedding_bag(weight, ids, offsets=None, mode="mean", include_last_offset=False, sparse=True,
                  per_sample_weights=None):
    """Sums or means of bags of rows of `weight`, as torch.nn.functional.embedding_bag.

    `ids` is an IndexInput (or integer ids). 1-D ids come with `offsets` (an
    IndexInput or integers): bag b is ids[offsets[b]:offsets[b + 1]], the last
    bag running to the end of ids; offsets[0] must be 0 and offsets must not
    decrease. With include_last_offset=True, offsets has one entry more than
    there are bags and its last entry ends the last bag. 2-D ids (bags, n) need
    no offsets: each row is a bag. `mode` is "sum" or "mean"; an empty bag
    gives zeros. The result is (bags, dim), or (bags,) for a 1-D weight (a number a row: a
    linear model's weights over hashed features). Ids and offsets are checked on every
    forward and backward (set_value may change them, keeping their lengths).

    `per_sample_weights` (a float Variable, or numbers, of the ids' shape and the table's
    dtype, with mode="sum" only, as in torch) scales each id's row: bag b is the sum of
    per_sample_weights[k] * weight[ids[k]]; weighted features (a value per hashed
    feature) and normalised feature rows are such bags. The weights get a gradient when
    they require one (grad[b] . weight[ids[k]]).

    The gradient is sparse (only the rows used; repeated ids add) when `sparse`,
    else a dense gradient of the whole table. Under plain SGD, `fa.train` steps
    the table's rows inside backward instead (a row gather, as `take`), either way.

    >>> E = fa.Parameter(np.random.randn(100, 8))
    >>> fa.embedding_bag(E, fa.IndexInput([1, 2, 3, 4, 5]), fa.IndexInput([0, 2, 2]), mode="sum").shape
    (3, 8)
    """
    cdef Variable t = require_float("embedding_bag", weight, "weight")
    if len(t._shape) not in (1, 2):
        raise ValueError(f"embedding_bag: weight must be 2-D (rows, dim) or 1-D (rows,: a "
                         f"number a row, as a linear model's), got shape {t._shape}")
    if mode not in ("sum", "mean"):
        raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")
    cdef IndexInput ix = as_ids("embedding_bag", "ids", ids, t.device)
    cdef Variable w = None
    if per_sample_weights is not None:
        w = _bag_weights(per_sample_weights, t, ix, mode)
    if offsets is not None:
        offsets = as_ids("embedding_bag", "offsets", offsets, None)
    cdef Py_ssize_t n_bags
    if len(ix._shape) == 2:
        if offsets is not None:
            raise ValueError(f"embedding_bag: 2-D ids {ix._shape} are one bag per row and take "
                             f"no offsets")
        n_bags = ix._shape[0]
    elif len(ix._shape) == 1:
        if offsets is None:
            raise ValueError("embedding_bag: 1-D ids need offsets (where each bag starts)")
        if len((<IndexInput>offsets)._shape) != 1:
            raise ValueError(f"embedding_bag: offsets must be 1-D, got shape "
                             f"{(<IndexInput>offsets)._shape}")
        n_bags = (<IndexInput>offsets).size - (1 if include_last_offset else 0)
        if n_bags < 0:
            raise ValueError("embedding_bag: with include_last_offset=True, offsets needs at "
                             "least one entry (the end of the last bag)")
    else:
        raise ValueError(f"embedding_bag: ids must be 1-D (with offsets) or 2-D (bags, n), "
                         f"got shape {ix._shape}")
    if (dev := backend_of(t, ix)) is not None:
        return dev.embedding_bag(t, ix, offsets, n_bags, mode == "mean",
                                 bool(include_last_offset), bool(sparse), w)
    cdef EmbeddingBag node = EmbeddingBag.__new__(EmbeddingBag)
    node.table = t
    node.ix = ix
    node.offsets = offsets
    node.rows = t._shape[0]
    node.row_len = t._shape[1] if len(t._shape) == 2 else 1
    node.n_bags = n_bags
    node.mean = mode == "mean"
    node.include_last_offset = bool(include_last_offset)
    node.dense_grad = not sparse
    node.bounds = (np.zeros(n_bags + 1, dtype=np.int64) if offsets is not None
                   else np.arange(n_bags + 1, dtype=np.int64) * ix._shape[1])
    node.scratch = empty_buffer((ix.size, node.row_len), np.float64 if t.f64 else np.float32)
    node.bounds_ptr = <int64_t*>cnp.PyArray_DATA(node.bounds)
    node.scratch_ptr = <char*>cnp.PyArray_DATA(node.scratch)
    node.table_is_parameter = isinstance(t, Parameter)
    node.weights = w
    inputs = (t, ix) if offsets is None else (t, ix, offsets)
    init_node(node, "embedding_bag", inputs if w is None else inputs + (w,),
              (n_bags,) + t._shape[1:], t.f64)
    node.gathers((t,), ((ix, t),))
    return finish(node)


cdef Variable _bag_weights(object weights, Variable table, IndexInput ix, str mode):
    """embedding_bag's per_sample_weights, checked: a float Variable of the ids' shape and the
    table's dtype, with mode "sum"."""
    if mode != "sum":
        raise ValueError(f"embedding_bag: per_sample_weights needs mode='sum' (got {mode!r}), as "
                         f"in torch; divide the weighted sum by the bag's size in the graph")
    if not isinstance(weights, Variable):
        values = np.asarray(weights)
        if values.dtype.kind not in "fiub":
            raise TypeError(f"embedding_bag: per_sample_weights must be a float Variable or "
                            f"numbers, got dtype {values.dtype}")
        weights = Input(values, dtype=table.dtype, device=None if table.device == "cpu" else table.device)
    cdef Variable w = require_float("embedding_bag", weights, "per_sample_weights")
    if w._shape != ix._shape:
        raise ValueError(f"embedding_bag: per_sample_weights has shape {w._shape}, expected the "
                         f"ids' shape {ix._shape} (one weight per id)")
    same_dtype("embedding_bag", table, w)
    if w.device != table.device:
        raise ValueError(f"embedding_bag: per_sample_weights is on {w.device}, weight on "
                         f"{table.device}")
    return w


cdef inline void along(floating* x, const int64_t* ids, floating* y, Py_ssize_t outer,
                       Py_ssize_t n, Py_ssize_t k, Py_ssize_t inner, bint scatter) noexcept nogil:
    """y[o, a, j] = x[o, ids[o, a, j], j] (the forward), or with `scatter` x[o, ids[o, a, j],
    j] += y[o, a, j] (the backward, x a gradient: repeated ids add); x viewed as (outer, n,
    inner), ids and y as (outer, k, inner). Inline: a call's constant `scatter` keeps one
    of the two loops."""
    cdef Py_ssize_t o, a, j, at
    for o in range(outer):
        for a in range(k):
            at = (o * k + a) * inner
            for j in range(inner):
                if scatter:
                    x[(o * n + ids[at + j]) * inner + j] += y[at + j]
                else:
                    y[at + j] = x[(o * n + ids[at + j]) * inner + j]


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
    cdef int32_t* slot_of_ptr       # their data (sparse), for the passes
    cdef int64_t* distinct_ptr
    cdef char* rows_ptr

    cdef int check_ids(self) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t i
        for i in range(self.ix.size):
            if ids[i] < 0 or ids[i] >= self.n:
                with gil:
                    raise self.id_error(i)
        return 0

    cdef object id_error(self, Py_ssize_t i):
        """The IndexError for the out-of-range id at flat position i (built apart from
        check_ids, whose loop must not set up Python objects)."""
        cdef int64_t id_ = (<const int64_t*>self.ix.val_ptr)[i]
        position = tuple(int(p) for p in np.unravel_index(i, self.ix._shape))
        return IndexError(f"take_along_axis: id {id_} at position {position} of ids is out of "
                          f"range for axis {self.axis} of x, of length {self.n} (shape "
                          f"{self.x._shape})")

    cdef int run_forward(self) except -1 nogil:
        self.check_ids()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        along(<floating*>self.x.val_ptr, <int64_t*>self.ix.val_ptr, y, self.outer, self.n, self.k,
              self.inner, False)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        self.check_ids()
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* g) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t count
        if self.sparse:
            count = along_rows(ids, g, self.k, self.inner, self.slot_of_ptr, self.distinct_ptr,
                               <floating*>self.rows_ptr)
            self.x.add_grad_rows(self.distinct_ptr, count, self.rows_ptr, self.inner)
            return 0
        if not self.x.prepare_grad():
            vec_zero(<floating*>self.x.grad_ptr, self.x.size)
        along(<floating*>self.x.grad_ptr, ids, <floating*>g, self.outer, self.n, self.k, self.inner, True)
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
    cdef Variable v = require_float("take_along_axis", x, "x")
    cdef IndexInput ix = as_ids("take_along_axis", "ids", ids, v.device)
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
    if (dev := backend_of(v, ix)) is not None:
        return dev.take_along_axis(v, ix, ax)
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
        node.rows = keep_data(np.empty((min(node.n, ix.size), node.inner), dtype=v.dtype),
                              &node.rows_ptr)
        node.slot_of_ptr = <int32_t*>cnp.PyArray_DATA(node.slot_of)
        node.distinct_ptr = <int64_t*>cnp.PyArray_DATA(node.distinct)
    init_node(node, "take_along_axis", (v, ix), ks, v.f64)
    return finish(node)


register_methods(take=take)   # Variable's operators and methods

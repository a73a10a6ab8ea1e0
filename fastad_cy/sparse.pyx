"""Row gathers with sparse gradients: `table[ix]`, `fastad.take(table, ix)`,
`fastad.embedding` (PyTorch's padding_idx and max_norm), `fastad.embedding_bag`
(sums or means of ragged bags of rows), and `fastad.take_along_axis(x, ids, axis)`
(sparse along axis 0 of a Parameter).

The backward sends (row ids, row gradients) to the table's `add_grad_rows`;
a Parameter keeps them as a sparse gradient over the touched rows only, so an
optimizer step costs time in proportion to the rows used, not the table.
"""
import numbers
from math import prod

import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.math cimport fabs, pow, sqrt, INFINITY
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.string cimport memcpy

from fastad_cy.graph cimport (Variable, IndexInput, Parameter, empty_buffer, init_node, finish, require_float,
                              same_dtype, on_device, GRAD_SPARSE, GRAD_DENSE, backend_of)
from fastad_cy.graph import register_methods
from fastad_cy.loops cimport element_size, put_values, row_axpy, store_value, vec_zero, zero_values
from fastad_cy.reduced_bce cimport (RED_NONE, reduction_code, reduction_name, reduction_scale,
                                    bce_forward, bce_backward)
from fastad_cy.linalg import vector_dot
from fastad_cy.reduction import _normalize_axes
from fastad_cy.shape import reshape as _reshape

cnp.import_array()

cdef extern from *:
    """
    #include <string.h>
    #include "clones.h"
    /* dst row k = table row ids[k], rows of `width` bytes. A row of one value is copied by
     * a load and a store of its known size: a library memcpy call per row would cost more
     * than the copy (longer rows go to memcpy, whose wide moves beat a loop here). */
    static inline void fa_gather_rows(char* dst, const char* table, const int64_t* ids,
                                      Py_ssize_t n, Py_ssize_t width) {
        Py_ssize_t k;
        if (width == 4) {
            for (k = 0; k < n; k++) memcpy(dst + 4 * k, table + 4 * ids[k], 4);
        } else if (width == 8) {
            for (k = 0; k < n; k++) memcpy(dst + 8 * k, table + 8 * ids[k], 8);
        } else {
            for (k = 0; k < n; k++) memcpy(dst + k * width, table + ids[k] * width, width);
        }
    }

    /* 1 if an id is not below `rows`. The loop has no branch (an id below 0 is a huge
     * unsigned number) and its AVX2 clone compares four ids at a time. */
    static inline int fa_ids_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        int bad = 0;
        for (Py_ssize_t k = 0; k < n; k++) bad |= ids[k] >= (uint64_t)rows;
        return bad;
    }
    FA_CLONED int fa_ids_out_of_range_cloned(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        return fa_ids_out_of_range(ids, n, rows);
    }
    /* A few ids (one example's) are compared inline, without the call and the vector
     * loop's set-up, which cost more than the comparisons. */
    static inline int fa_any_id_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) {
        return n > 4 ? fa_ids_out_of_range_cloned(ids, n, rows) : fa_ids_out_of_range(ids, n, rows);
    }

    /* Elementwise loops in steps of 32 bytes with gcc (FA_IN_BLOCKS over fa_block: one AVX2
     * register in the AVX2 clone, two SSE ones in the other), the rest one element at a
     * time. A row's loop then needs no run-time overlap checks or vector set-up, which cost
     * more than a short row's arithmetic; each element takes the scalar loop's operations,
     * so the values are the same. Elsewhere the block loop never runs. */
    #if defined(__GNUC__)
    #define FA_BLOCK_TYPE(T) typedef T fa_block __attribute__((vector_size(32), aligned(sizeof(T)), may_alias));
    #define FA_IN_BLOCKS(T, i, n) for (; (i) + (Py_ssize_t)(32 / sizeof(T)) <= (n); (i) += 32 / sizeof(T))
    #else
    #define FA_BLOCK_TYPE(T) typedef T fa_block;
    #define FA_IN_BLOCKS(T, i, n) if (0)
    #endif
    #define FA_BLOCK_AT(p, i) (*(fa_block*)((p) + (i)))
    #define FA_BLOCK_OF(p, i) (*(const fa_block*)((p) + (i)))
    /* A short row's copy stays a loop: gcc would make it a library memcpy call, which
     * costs more than copying BPR's 32-float rows (-27 instructions a triple); for
     * gather_dot's rows of 64 the call was cheaper (+2% a skip-gram epoch), so it keeps it. */
    #if defined(__GNUC__) && !defined(__clang__)
    #define FA_NO_LIBRARY_COPY __attribute__((optimize("no-tree-loop-distribute-patterns")))
    #else
    #define FA_NO_LIBRARY_COPY
    #endif

    /* margins[k] = U[users[k]] . (V[pos[k]] - V[neg[k]]) (+ (bias[pos[k]] - bias[neg[k]])
     * unless bias is NULL), keeping the user row and the difference of each example for
     * the backward: the values of a gather, a difference and fa_dot, in one loop. */
    #define FA_MARGIN_ROWS(T, S)                                                            \
    FA_CLONED FA_NO_LIBRARY_COPY                                                             \
    void fa_margin_rows_##S(const T* U, const T* V, const T* bias,                           \
                            const int64_t* users, const int64_t* pos,                        \
                            const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,                \
                            T* __restrict user_rows, T* __restrict differences,              \
                            T* __restrict margins) {                                         \
        for (Py_ssize_t k = 0; k < n; k++) {                                                 \
            T* __restrict u = user_rows + k * dim;                                           \
            T* __restrict d = differences + k * dim;                                         \
            const T* ur = U + users[k] * dim;                                                \
            const T* pr = V + pos[k] * dim;                                                  \
            const T* nr = V + neg[k] * dim;                                                  \
            FA_BLOCK_TYPE(T)                                                                 \
            Py_ssize_t i = 0;                                                                \
            FA_IN_BLOCKS(T, i, dim) {                                                        \
                FA_BLOCK_AT(u, i) = FA_BLOCK_OF(ur, i);                                      \
                FA_BLOCK_AT(d, i) = FA_BLOCK_OF(pr, i) - FA_BLOCK_OF(nr, i);                 \
            }                                                                                \
            for (; i < dim; i++) { u[i] = ur[i]; d[i] = pr[i] - nr[i]; }                     \
            T m = fa_dot_##S(u, d, dim);                                                     \
            margins[k] = bias ? m + (bias[pos[k]] - bias[neg[k]]) : m;                       \
        }                                                                                    \
    }
    FA_MARGIN_ROWS(float, f)
    FA_MARGIN_ROWS(double, d)

    /* One triple's plain SGD steps in one call (ranking_margin's backward under the
     * compiled loop): unless bias is NULL, bias[neg] += a_bias * -g, bias[pos] += a_bias * g;
     * then neg_row += a_item * (-g * u), pos_row += a_item * (g * u), user_row += a_user *
     * (g * d), each rounded as fa_sgd_rows and fa_sgd_scaled_rows round them. Element i of
     * a row depends only on element i of the forward's copies u and d, and takes its steps
     * in the order of the separate calls (biases, negative, positive, user), so the values
     * are theirs bit for bit even when rows coincide (pos == neg, or one table for users
     * and items): the rows are not restrict, and the compiler checks for overlap. */
    #define FA_MARGIN_SGD_STEP(T, S)                                                         \
    FA_CLONED void fa_margin_sgd_step_##S(T* user_row, T* pos_row, T* neg_row, T* bias,      \
                                          int64_t pos, int64_t neg, const T* __restrict u,   \
                                          const T* __restrict d, T g, Py_ssize_t dim,        \
                                          T a_user, T a_item, T a_bias) {                    \
        T ng = -g;                                                                           \
        if (bias) {                                                                          \
            bias[neg] += a_bias * ng;                                                        \
            bias[pos] += a_bias * g;                                                         \
        }                                                                                    \
        FA_BLOCK_TYPE(T)                                                                     \
        Py_ssize_t i = 0;                                                                    \
        FA_IN_BLOCKS(T, i, dim) {                                                            \
            fa_block ui = FA_BLOCK_OF(u, i);                                                 \
            FA_BLOCK_AT(neg_row, i) += a_item * (ng * ui);                                   \
            FA_BLOCK_AT(pos_row, i) += a_item * (g * ui);                                    \
            FA_BLOCK_AT(user_row, i) += a_user * (g * FA_BLOCK_OF(d, i));                    \
        }                                                                                    \
        for (; i < dim; i++) {                                                               \
            neg_row[i] += a_item * (ng * u[i]);                                              \
            pos_row[i] += a_item * (g * u[i]);                                               \
            user_row[i] += a_user * (g * d[i]);                                              \
        }                                                                                    \
    }
    FA_MARGIN_SGD_STEP(float, f)
    FA_MARGIN_SGD_STEP(double, d)

    /* out[k] = B[b_ids[k]] . A[a_ids[k / per]] for the n * per scores, keeping a copy of
     * each gathered row for the backward: the values of two gathers and fa_dot, in one
     * loop (each A row is read once for its per B rows). */
    #define FA_GATHER_DOT_ROWS(T, S)                                                        \
    FA_CLONED void fa_gather_dot_rows_##S(const T* A, const T* B, const int64_t* a_ids,      \
                                          const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, \
                                          Py_ssize_t dim, T* __restrict a_rows,              \
                                          T* __restrict b_rows, T* __restrict out) {         \
        for (Py_ssize_t r = 0; r < n; r++) {                                                 \
            T* __restrict a = a_rows + r * dim;                                              \
            const T* ar = A + a_ids[r] * dim;                                                \
            for (Py_ssize_t i = 0; i < dim; i++) a[i] = ar[i];                               \
            for (Py_ssize_t k = r * per; k < (r + 1) * per; k++) {                           \
                T* __restrict b = b_rows + k * dim;                                          \
                const T* br = B + b_ids[k] * dim;                                            \
                for (Py_ssize_t i = 0; i < dim; i++) b[i] = br[i];                           \
                out[k] = fa_dot_##S(b, a, dim);                                              \
            }                                                                                \
        }                                                                                    \
    }
    FA_GATHER_DOT_ROWS(float, f)
    FA_GATHER_DOT_ROWS(double, d)
    """
    void fa_gather_rows(char* dst, const char* table, const int64_t* ids, Py_ssize_t n,
                        Py_ssize_t width) noexcept nogil
    bint fa_ids_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) noexcept nogil
    bint fa_any_id_out_of_range(const uint64_t* ids, Py_ssize_t n, Py_ssize_t rows) noexcept nogil
    void fa_margin_rows_f(const float* U, const float* V, const float* bias, const int64_t* users,
                          const int64_t* pos, const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,
                          float* user_rows, float* differences, float* margins) noexcept nogil
    void fa_margin_rows_d(const double* U, const double* V, const double* bias,
                          const int64_t* users, const int64_t* pos, const int64_t* neg,
                          Py_ssize_t n, Py_ssize_t dim, double* user_rows, double* differences,
                          double* margins) noexcept nogil
    void fa_margin_sgd_step_f(float* user_row, float* pos_row, float* neg_row, float* bias,
                              int64_t pos, int64_t neg, const float* u, const float* d, float g,
                              Py_ssize_t dim, float a_user, float a_item, float a_bias) noexcept nogil
    void fa_margin_sgd_step_d(double* user_row, double* pos_row, double* neg_row, double* bias,
                              int64_t pos, int64_t neg, const double* u, const double* d, double g,
                              Py_ssize_t dim, double a_user, double a_item,
                              double a_bias) noexcept nogil
    void fa_gather_dot_rows_f(const float* A, const float* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              float* a_rows, float* b_rows, float* out) noexcept nogil
    void fa_gather_dot_rows_d(const double* A, const double* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              double* a_rows, double* b_rows, double* out) noexcept nogil


cdef inline int check_ids(Variable node, IndexInput ix, Py_ssize_t rows) except -1 nogil:
    """Every id must name a row: ids can change through set_value between passes. The
    bad id is looked for, in its own function, only when there is one."""
    if fa_any_id_out_of_range(<const uint64_t*>ix.val_ptr, ix.size, rows):
        return raise_bad_id(node, ix, rows)
    return 0


cdef int raise_bad_id(Variable node, IndexInput ix, Py_ssize_t rows) except -1 nogil:
    cdef const int64_t* ids = <const int64_t*>ix.val_ptr
    cdef Py_ssize_t k
    for k in range(ix.size):
        if ids[k] < 0 or ids[k] >= rows:
            with gil:
                raise IndexError(f"{node.op_name}: id {ids[k]} at position {k} of the IndexInput "
                                 f"is out of range for a table with {rows} rows")
    return 0


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


cdef void renorm_rows(floating* table, const int64_t* ids, Py_ssize_t n, Py_ssize_t row_len,
                      double max_norm, double norm_type) noexcept nogil:
    """Scale each row ids[k] whose norm exceeds max_norm to max_norm / (norm + 1e-7) of
    itself, in place (torch.embedding_renorm_; a row met twice is already within bounds)."""
    cdef Py_ssize_t k, j
    cdef double norm
    cdef floating scale
    cdef floating* row
    for k in range(n):
        row = table + ids[k] * row_len
        norm = row_norm(row, row_len, norm_type)
        if norm > max_norm:
            scale = <floating>(max_norm / (norm + 1e-7))
            for j in range(row_len):
                row[j] *= scale


@cython.no_gc
cdef class Take(Variable):
    cdef Variable table
    cdef IndexInput ix
    cdef Py_ssize_t rows, row_len, row_bytes
    cdef int64_t padding_idx          # the row that gets no gradient, or -1
    cdef double max_norm              # rows longer than this are renormalised on lookup; 0: never
    cdef double norm_type

    def _row_sources(self):
        """(ids, table) for each table this node gathers rows of: what the training loop
        prefetches for the next example (see Sampler.set_row_prefetches)."""
        return [(self.ix, self.table)]

    cdef int run_forward(self) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, n = self.ix.size, width = self.row_bytes
        check_ids(self, self.ix, self.rows)
        if self.max_norm > 0:
            if self.f64:
                renorm_rows(<double*>self.table.val_ptr, ids, n, self.row_len, self.max_norm,
                            self.norm_type)
            else:
                renorm_rows(<float*>self.table.val_ptr, ids, n, self.row_len, self.max_norm,
                            self.norm_type)
        fa_gather_rows(self.val_ptr, self.table.val_ptr, ids, n, self.row_bytes)
        return 0

    cdef int run_backward(self) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t k, start = 0, n = self.ix.size
        if not self.table.requires_grad:
            return 0
        check_ids(self, self.ix, self.rows)
        if self.padding_idx < 0:
            self.table.add_grad_rows(ids, n, self.grad_ptr, self.row_len)
            return 0
        # The padding row gets nothing: send the runs of ids between its occurrences.
        for k in range(n + 1):
            if k == n or ids[k] == self.padding_idx:
                if k > start:
                    self.table.add_grad_rows(ids + start, k - start, self.grad_ptr + start * self.row_bytes,
                                             self.row_len)
                start = k + 1
        return 0


cdef Variable _gather(str op, object table, object ix, int64_t padding_idx, double max_norm,
                      double norm_type):
    require_float(op, table, "table")
    cdef Variable t = <Variable>table
    if not t._shape:
        raise ValueError(f"{op}: the table must have at least one axis, got a 0-d Variable")
    if not isinstance(ix, IndexInput):
        if isinstance(ix, Variable):
            raise TypeError(f"{op}: ids must be an IndexInput or integers, got a float Variable")
        ix = IndexInput(ix, device=t.device)
    dev = backend_of(t, ix)
    if dev is not None:
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


cdef void negate(floating* y, const floating* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t k
    for k in range(n):
        y[k] = -x[k]


@cython.no_gc
cdef class RankingMargin(Variable):
    """y[k] = U[users[k]] . (V[pos[k]] - V[neg[k]]) (+ b[pos[k]] - b[neg[k]]) in one node:
    what the gathers, differences, vector_dot (and sum) compute, with the same values and
    gradients, without storing the gathered item rows or any gradient row. The backward
    hands each table its gradient rows as scaled rows (add_scaled_rows): a Parameter under
    the compiled loop's plain SGD steps its rows from them directly.

    As ranking_loss's node (`logistic`), its value is the logistic loss of those margins,
    reduced: what bce_with_logits of them against ones computes, by the same loops, and
    the backward's coefficient of each triple is that loss's gradient instead of y's."""
    cdef Variable user_table, item_table, item_bias    # item_bias: None or n_items values
    cdef IndexInput users, pos, neg
    cdef Py_ssize_t dim, n_users, n_items
    cdef Py_ssize_t n_triples        # the size of users, pos and neg (the node's too, unless reduced)
    cdef bint parameter_tables      # U, V (and b, if any) are Parameters: see _steps_in_place
    cdef cnp.ndarray user_rows, differences, negated_grad, scratch   # kept by the forward
    cdef char* user_rows_ptr
    cdef char* differences_ptr
    cdef char* negated_grad_ptr
    cdef char* scratch_ptr
    cdef bint logistic              # ranking_loss: the loss of the margins, reduced
    cdef int reduction
    cdef double scale
    cdef cnp.ndarray margins, exp_of_margins, ones, coefs   # logistic: kept by the forward, and
    cdef char* margins_ptr                                  # the margins' gradient (coefs)
    cdef char* exp_of_margins_ptr
    cdef char* ones_ptr
    cdef char* coefs_ptr

    def _row_sources(self):
        """(ids, table) for each table this node gathers rows of (see Take._row_sources)."""
        sources = [(self.users, self.user_table), (self.pos, self.item_table), (self.neg, self.item_table)]
        if self.item_bias is not None:
            sources += [(self.pos, self.item_bias), (self.neg, self.item_bias)]
        return sources

    cdef int run_forward(self) except -1 nogil:
        cdef char* margins = self.margins_ptr if self.logistic else self.val_ptr
        cdef double total
        self._check_ids()
        if self.f64:
            fa_margin_rows_d(<const double*>self.user_table.val_ptr,
                             <const double*>self.item_table.val_ptr,
                             <const double*>self._bias_values(),
                             <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                             <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                             <double*>self.user_rows_ptr, <double*>self.differences_ptr,
                             <double*>margins)
        else:
            fa_margin_rows_f(<const float*>self.user_table.val_ptr,
                             <const float*>self.item_table.val_ptr,
                             <const float*>self._bias_values(),
                             <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                             <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                             <float*>self.user_rows_ptr, <float*>self.differences_ptr,
                             <float*>margins)
        if self.logistic:
            total = bce_forward(margins, self.ones_ptr, self.n_triples, self.exp_of_margins_ptr,
                                self.val_ptr if self.reduction == RED_NONE else NULL, self.f64)
            if self.reduction != RED_NONE:
                store_value(self.val_ptr, total * self.scale, self.f64)
        return 0

    cdef int run_backward(self) except -1 nogil:
        """The gradient rows g[k] * (V[pos] - V[neg]) for U, g[k] * U[users] for V[pos] and
        -g[k] * U[users] for V[neg] (g[k] and -g[k] for the biases), each table's in the
        order the separate ops' backwards add them. g is the margins' gradient: the node's
        own, or (logistic) the loss's through bce_with_logits' backward."""
        cdef Py_ssize_t n = self.n_triples
        cdef const char* g = self.grad_ptr
        self._check_ids()
        if self.logistic:
            bce_backward(self.margins_ptr, self.ones_ptr, self.exp_of_margins_ptr, n, self.grad_ptr,
                         1 if self.reduction == RED_NONE else 0, self.scale, self.coefs_ptr, False,
                         self.f64)
            g = self.coefs_ptr
        if n == 1 and self._steps_in_place():
            return self._step_one_triple(g)
        if self.f64:
            negate(<double*>self.negated_grad_ptr, <const double*>g, n)
        else:
            negate(<float*>self.negated_grad_ptr, <const float*>g, n)
        if self.item_bias is not None and self.item_bias.requires_grad:
            self.item_bias.add_grad_rows(<const int64_t*>self.neg.val_ptr, n, self.negated_grad_ptr, 1)
            self.item_bias.add_grad_rows(<const int64_t*>self.pos.val_ptr, n, g, 1)
        if self.item_table.requires_grad:
            self.item_table.add_scaled_rows(<const int64_t*>self.neg.val_ptr, n, self.user_rows_ptr,
                                            self.negated_grad_ptr, self.dim, 1, self.scratch_ptr)
            self.item_table.add_scaled_rows(<const int64_t*>self.pos.val_ptr, n, self.user_rows_ptr,
                                            g, self.dim, 1, self.scratch_ptr)
        if self.user_table.requires_grad:
            self.user_table.add_scaled_rows(<const int64_t*>self.users.val_ptr, n, self.differences_ptr,
                                            g, self.dim, 1, self.scratch_ptr)
        return 0

    @cython.final
    cdef bint _steps_in_place(self) noexcept nogil:
        """Whether the compiled loop's plain SGD steps every table as its rows come
        (apply_lr): then one triple's backward is _step_one_triple."""
        return self.parameter_tables and (
            (<Parameter>self.user_table).apply_lr != NULL
            and (<Parameter>self.item_table).apply_lr != NULL
            and (self.item_bias is None or (<Parameter>self.item_bias).apply_lr != NULL))

    @cython.final
    cdef int _step_one_triple(self, const char* g) except -1 nogil:
        """One triple's SGD steps of b's values, V's and U's rows in one call
        (fa_margin_sgd_step) from its margin's gradient g, the values of the general
        path's calls bit for bit."""
        cdef int64_t user = (<const int64_t*>self.users.val_ptr)[0]
        cdef int64_t pos = (<const int64_t*>self.pos.val_ptr)[0], neg = (<const int64_t*>self.neg.val_ptr)[0]
        cdef double lr_u = (<Parameter>self.user_table).apply_lr[0]
        cdef double lr_v = (<Parameter>self.item_table).apply_lr[0]
        cdef double lr_b = 0.0
        cdef char* bias = NULL
        cdef Py_ssize_t dim = self.dim
        cdef char* u = self.user_table.val_ptr
        cdef char* v = self.item_table.val_ptr
        if self.item_bias is not None:
            bias, lr_b = self.item_bias.val_ptr, (<Parameter>self.item_bias).apply_lr[0]
        if self.f64:
            fa_margin_sgd_step_d(<double*>u + user * dim, <double*>v + pos * dim, <double*>v + neg * dim,
                                 <double*>bias, pos, neg, <const double*>self.user_rows_ptr,
                                 <const double*>self.differences_ptr, (<const double*>g)[0],
                                 dim, -lr_u, -lr_v, -lr_b)
        else:
            fa_margin_sgd_step_f(<float*>u + user * dim, <float*>v + pos * dim, <float*>v + neg * dim,
                                 <float*>bias, pos, neg, <const float*>self.user_rows_ptr,
                                 <const float*>self.differences_ptr, (<const float*>g)[0],
                                 dim, <float>-lr_u, <float>-lr_v, <float>-lr_b)
        (<Parameter>self.user_table).applied = True
        (<Parameter>self.item_table).applied = True
        if self.item_bias is not None:
            (<Parameter>self.item_bias).applied = True
        return 0

    @cython.final
    cdef const char* _bias_values(self) noexcept nogil:
        return self.item_bias.val_ptr if self.item_bias is not None else NULL

    @cython.final
    cdef inline int _check_ids(self) except -1 nogil:
        if self.n_triples == 1 and not (        # one triple: its three ids in one test, no calls
                fa_ids_out_of_range(<const uint64_t*>self.users.val_ptr, 1, self.n_users)
                | fa_ids_out_of_range(<const uint64_t*>self.pos.val_ptr, 1, self.n_items)
                | fa_ids_out_of_range(<const uint64_t*>self.neg.val_ptr, 1, self.n_items)):
            return 0
        check_ids(self, self.users, self.n_users)
        check_ids(self, self.pos, self.n_items)
        check_ids(self, self.neg, self.n_items)
        return 0


cdef void sum_scaled_rows(floating* h, const floating* rows, const floating* coefs, Py_ssize_t n,
                          Py_ssize_t per, Py_ssize_t dim) noexcept nogil:
    """h row r = sum over j of coefs[r * per + j] * rows row r * per + j, added in order of j
    into a zero row (as vector_dot's backward adds a broadcast operand's gradient)."""
    cdef Py_ssize_t r, k
    for r in range(n):
        vec_zero(h + r * dim, dim)
        for k in range(r * per, (r + 1) * per):
            row_axpy(h + r * dim, rows + k * dim, dim, coefs[k])


@cython.no_gc
cdef class GatherDot(Variable):
    """y[..., j] = B[b_ids[..., j]] . A[a_ids[...]] in one node: what two gathers, a reshape
    and a broadcast vector_dot compute, with the same values and gradients, copying each
    A row once for its `per` B rows. The backward hands B its gradient rows as scaled A
    rows (add_scaled_rows: a Parameter under the compiled loop's plain SGD steps them
    directly) and A the sums of its B rows, in the order the composed ops' backwards do."""
    cdef Variable a_table, b_table
    cdef IndexInput a_ids, b_ids
    cdef Py_ssize_t dim, per, a_count, b_count      # per: B rows for each A row; *_count: table rows
    cdef cnp.ndarray a_rows, b_rows, a_grads, scratch   # kept by the forward; the backward's buffers
    cdef char* a_rows_ptr
    cdef char* b_rows_ptr
    cdef char* a_grads_ptr
    cdef char* scratch_ptr

    def _row_sources(self):
        """(ids, table) for each table this node gathers rows of (see Take._row_sources)."""
        return [(self.a_ids, self.a_table), (self.b_ids, self.b_table)]

    cdef int run_forward(self) except -1 nogil:
        self._check_ids()
        if self.f64:
            fa_gather_dot_rows_d(<const double*>self.a_table.val_ptr, <const double*>self.b_table.val_ptr,
                                 <const int64_t*>self.a_ids.val_ptr, <const int64_t*>self.b_ids.val_ptr,
                                 self.a_ids.size, self.per, self.dim, <double*>self.a_rows_ptr,
                                 <double*>self.b_rows_ptr, <double*>self.val_ptr)
        else:
            fa_gather_dot_rows_f(<const float*>self.a_table.val_ptr, <const float*>self.b_table.val_ptr,
                                 <const int64_t*>self.a_ids.val_ptr, <const int64_t*>self.b_ids.val_ptr,
                                 self.a_ids.size, self.per, self.dim, <float*>self.a_rows_ptr,
                                 <float*>self.b_rows_ptr, <float*>self.val_ptr)
        return 0

    cdef int run_backward(self) except -1 nogil:
        """A's gradient rows (the sums g[k] * B row k of each A row's scores, from the kept
        B rows), then B's rows g[k] * A row (from the kept A rows): the order in which the
        composed ops' backwards add them, which matters when A is B."""
        cdef Py_ssize_t n = self.a_ids.size
        self._check_ids()
        if self.a_table.requires_grad:
            if self.f64:
                sum_scaled_rows(<double*>self.a_grads_ptr, <const double*>self.b_rows_ptr,
                                <const double*>self.grad_ptr, n, self.per, self.dim)
            else:
                sum_scaled_rows(<float*>self.a_grads_ptr, <const float*>self.b_rows_ptr,
                                <const float*>self.grad_ptr, n, self.per, self.dim)
            self.a_table.add_grad_rows(<const int64_t*>self.a_ids.val_ptr, n, self.a_grads_ptr, self.dim)
        if self.b_table.requires_grad:
            self.b_table.add_scaled_rows(<const int64_t*>self.b_ids.val_ptr, self.size, self.a_rows_ptr,
                                         self.grad_ptr, self.dim, self.per, self.scratch_ptr)
        return 0

    @cython.final
    cdef int _check_ids(self) except -1 nogil:
        check_ids(self, self.a_ids, self.a_count)
        check_ids(self, self.b_ids, self.b_count)
        return 0


cdef IndexInput _ids(str op, str argname, object ids, Variable table):
    if isinstance(ids, IndexInput):
        return <IndexInput>ids
    if isinstance(ids, Variable):
        raise TypeError(f"{op}: {argname} must be an IndexInput or integers, got a float Variable")
    return IndexInput(ids, device=table.device)


cdef tuple _row_tables(str op, str a_name, object a, str b_name, object b):
    """(a, b) as float Variables: two tables of rows of one length and dtype."""
    require_float(op, a, a_name)
    require_float(op, b, b_name)
    cdef Variable A = <Variable>a, B = <Variable>b
    if len(A._shape) != 2 or len(B._shape) != 2 or A._shape[1] != B._shape[1]:
        raise ValueError(f"{op}: {a_name} and {b_name} must be 2-D with one row length, got "
                         f"shapes {A._shape} and {B._shape}")
    same_dtype(op, A, B)
    return A, B


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
    A, B = _row_tables(op, "a_table", a_table, "b_table", b_table)
    cdef IndexInput a_index = _ids(op, "a_ids", a_ids, A), b_index = _ids(op, "b_ids", b_ids, B)
    cdef tuple lead = a_index._shape
    if b_index._shape[:len(b_index._shape) - 1] != lead or len(b_index._shape) != len(lead) + 1:
        raise ValueError(f"{op}: b_ids must have a_ids' shape plus one axis (the B rows of each "
                         f"A row): a_ids has shape {lead}, so b_ids needs {lead + ('m',)}, got "
                         f"{b_index._shape}")
    cdef Py_ssize_t dim = A._shape[1]
    if any(on_device(x) for x in (A, B, a_index, b_index)):
        a_rows = _reshape(_gather("take", A, a_index, -1, 0.0, 2.0), lead + (1, dim))
        return vector_dot(_gather("take", B, b_index, -1, 0.0, 2.0), a_rows)
    cdef GatherDot node = GatherDot.__new__(GatherDot)
    node.a_table, node.b_table = A, B
    node.a_ids, node.b_ids = a_index, b_index
    node.a_count, node.b_count, node.dim = A._shape[0], B._shape[0], dim
    node.per = b_index._shape[len(lead)]
    init_node(node, op, (A, B, a_index, b_index), b_index._shape, A.f64)
    dtype = np.float64 if node.f64 else np.float32
    node.a_rows = empty_buffer((a_index.size, dim), dtype)
    node.a_grads = empty_buffer((a_index.size, dim), dtype)
    node.b_rows = empty_buffer((b_index.size, dim), dtype)
    node.scratch = empty_buffer((b_index.size, dim), dtype)
    node.a_rows_ptr = <char*>cnp.PyArray_DATA(node.a_rows)
    node.a_grads_ptr = <char*>cnp.PyArray_DATA(node.a_grads)
    node.b_rows_ptr = <char*>cnp.PyArray_DATA(node.b_rows)
    node.scratch_ptr = <char*>cnp.PyArray_DATA(node.scratch)
    return finish(node)


def ranking_margin(user_table, users, item_table, pos, neg, item_bias=None):
    """The margins of pairwise ranking examples: `U[users] . (V[pos] - V[neg])` row by row,
    plus `b[pos] - b[neg]` with item biases b.

    `user_table` (U) and `item_table` (V) are float Variables of shapes (n_users,
    dim) and (n_items, dim), usually Parameters; `item_bias` (optional) one of
    shape (n_items,) or (n_items, 1); `users`, `pos` and `neg` are IndexInputs (or
    integer ids) of one shape, which is the result's. It is
    `vector_dot(take(U, users), take(V, pos) - take(V, neg))` (+ `reshape(take(b,
    pos) - take(b, neg), shape)`) with the same values and gradients bit for bit,
    in one node that stores no gathered item row and no gradient row: the BPR
    loss of `fastad.models.BPR` is built on it. Gradients are sparse (rows of U,
    V and b), and repeated ids add, as with `take`. On a GPU it is composed of
    those ops.

    >>> U = fa.Parameter(np.random.randn(100, 8)); V = fa.Parameter(np.random.randn(50, 8))
    >>> margins = fa.ranking_margin(U, [3, 7], V, [1, 2], [4, 4])       # shape (2,)
    >>> loss = -fa.sum(fa.logsigmoid(margins))
    """
    return _ranking_node("ranking_margin", user_table, users, item_table, pos, neg, item_bias, -1)


def ranking_loss(user_table, users, item_table, pos, neg, item_bias=None, reduction="mean"):
    """The logistic pairwise ranking loss (BPR's): -log sigmoid of each `ranking_margin`,
    averaged ("mean", the default), summed ("sum") or one per example ("none").

    It is `bce_with_logits(ranking_margin(...), ones, reduction)` with the same values and
    gradients bit for bit, in one node: the arguments are ranking_margin's, the margins
    are not a node of their own, and the loss's gradient reaches the tables without a
    pass of its own (under `fastad.train`'s plain SGD at one triple a step, the backward
    takes the triple's steps of U, V and b at once). `fastad.models.BPR`'s loss is this
    with reduction="sum". On a GPU it is composed of those ops.

    >>> U = fa.Parameter(np.random.randn(100, 8)); V = fa.Parameter(np.random.randn(50, 8))
    >>> loss = fa.ranking_loss(U, [3, 7], V, [1, 2], [4, 4], reduction="sum")   # shape ()
    >>> loss.backward()
    """
    return _ranking_node("ranking_loss", user_table, users, item_table, pos, neg, item_bias,
                         reduction_code("ranking_loss", reduction))


cdef object _ranking_node(str op, object user_table, object users, object item_table, object pos,
                          object neg, object item_bias, int reduction):
    """ranking_margin's node (reduction -1), or ranking_loss's with that reduction code."""
    cdef Variable U, V
    U, V = _row_tables(op, "user_table", user_table, "item_table", item_table)
    cdef Variable b = None
    if item_bias is not None:
        require_float(op, item_bias, "item_bias")
        b = <Variable>item_bias
        if b._shape not in ((V._shape[0],), (V._shape[0], 1)):
            raise ValueError(f"{op}: item_bias must have shape ({V._shape[0]},) or ({V._shape[0]}, 1) "
                             f"(one value per row of item_table), got {b._shape}")
        same_dtype(op, V, b)
    cdef IndexInput user_ids = _ids(op, "users", users, U)
    cdef IndexInput pos_ids = _ids(op, "pos", pos, V), neg_ids = _ids(op, "neg", neg, V)
    if not (user_ids._shape == pos_ids._shape == neg_ids._shape):
        raise ValueError(f"{op}: users, pos and neg must have one shape, got {user_ids._shape}, "
                         f"{pos_ids._shape} and {neg_ids._shape}")
    if any(on_device(x) for x in (U, V, b, user_ids, pos_ids, neg_ids)):
        margin = vector_dot(_gather("take", U, user_ids, -1, 0.0, 2.0),
                            _gather("take", V, pos_ids, -1, 0.0, 2.0)
                            - _gather("take", V, neg_ids, -1, 0.0, 2.0))
        if b is not None:
            margin = margin + _reshape(_gather("take", b, pos_ids, -1, 0.0, 2.0)
                                       - _gather("take", b, neg_ids, -1, 0.0, 2.0), margin.shape)
        if reduction < 0:
            return margin
        from fastad_cy.losses import bce_with_logits     # losses imports this module
        return bce_with_logits(margin, np.ones(margin.shape, dtype=margin.dtype),
                               reduction_name(reduction))
    cdef RankingMargin node = RankingMargin.__new__(RankingMargin)
    node.user_table, node.item_table, node.item_bias = U, V, b
    node.users, node.pos, node.neg = user_ids, pos_ids, neg_ids
    node.n_users, node.n_items, node.dim = U._shape[0], V._shape[0], U._shape[1]
    node.n_triples = user_ids.size
    node.parameter_tables = (isinstance(U, Parameter) and isinstance(V, Parameter)
                             and (b is None or isinstance(b, Parameter)))
    inputs = (U, V, user_ids, pos_ids, neg_ids) if b is None else (U, V, b, user_ids, pos_ids, neg_ids)
    node.logistic = reduction >= 0
    node.reduction = reduction
    node.scale = reduction_scale(reduction, user_ids.size)
    init_node(node, op, inputs, () if node.logistic and reduction != RED_NONE else user_ids._shape, U.f64)
    dtype = np.float64 if U.f64 else np.float32
    node.user_rows = empty_buffer((user_ids.size, node.dim), dtype)
    node.differences = empty_buffer((user_ids.size, node.dim), dtype)
    node.scratch = empty_buffer((user_ids.size, node.dim), dtype)
    node.negated_grad = empty_buffer((user_ids.size,), dtype)
    node.user_rows_ptr = <char*>cnp.PyArray_DATA(node.user_rows)
    node.differences_ptr = <char*>cnp.PyArray_DATA(node.differences)
    node.scratch_ptr = <char*>cnp.PyArray_DATA(node.scratch)
    node.negated_grad_ptr = <char*>cnp.PyArray_DATA(node.negated_grad)
    if node.logistic:
        node.margins = empty_buffer((user_ids.size,), dtype)
        node.exp_of_margins = empty_buffer((user_ids.size,), dtype)
        node.coefs = empty_buffer((user_ids.size,), dtype)
        node.ones = empty_buffer((user_ids.size,), dtype)
        node.ones.fill(1)
        node.margins_ptr = <char*>cnp.PyArray_DATA(node.margins)
        node.exp_of_margins_ptr = <char*>cnp.PyArray_DATA(node.exp_of_margins)
        node.coefs_ptr = <char*>cnp.PyArray_DATA(node.coefs)
        node.ones_ptr = <char*>cnp.PyArray_DATA(node.ones)
    return finish(node)


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

cdef void bag_forward(const floating* table, const int64_t* ids, const int64_t* bounds,
                      floating* out, Py_ssize_t n_bags, Py_ssize_t row_len, bint mean) noexcept nogil:
    """out[b] = the sum (or mean) of the rows ids[bounds[b]:bounds[b + 1]]; an empty bag is zeros."""
    cdef Py_ssize_t b, k, j
    cdef floating* o
    cdef const floating* row
    cdef floating inv
    for b in range(n_bags):
        o = out + b * row_len
        vec_zero(o, row_len)
        for k in range(bounds[b], bounds[b + 1]):
            row = table + ids[k] * row_len
            for j in range(row_len):
                o[j] += row[j]
        if mean and bounds[b + 1] > bounds[b] + 1:
            inv = <floating>(1.0 / (bounds[b + 1] - bounds[b]))
            for j in range(row_len):
                o[j] *= inv


cdef void bag_backward_rows(const floating* grad, const int64_t* bounds, floating* rows,
                            Py_ssize_t n_bags, Py_ssize_t row_len, bint mean) noexcept nogil:
    """rows[k] = grad[b] (/ the bag's size for a mean) for each position k of bag b."""
    cdef Py_ssize_t b, k, j
    cdef floating scale
    for b in range(n_bags):
        scale = 1
        if mean and bounds[b + 1] > bounds[b]:
            scale = <floating>(1.0 / (bounds[b + 1] - bounds[b]))
        for k in range(bounds[b], bounds[b + 1]):
            for j in range(row_len):
                rows[k * row_len + j] = grad[b * row_len + j] * scale


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
cdef class EmbeddingBag(Variable):
    """out[b] = sum (or mean) of table[ids[k]] over bag b's positions k; a sparse (or
    dense) row gradient."""
    cdef Variable table
    cdef IndexInput ix
    cdef IndexInput offsets           # None: ids is 2-D, one bag per row
    cdef Py_ssize_t rows, row_len, n_bags
    cdef bint mean, include_last_offset, dense_grad
    cdef cnp.ndarray bounds           # int64 (n_bags + 1,): bag b is ids[bounds[b]:bounds[b + 1]]
    cdef cnp.ndarray scratch          # (n_ids, row_len): each position's gradient row
    cdef int64_t* bounds_ptr          # their data, for the passes
    cdef char* scratch_ptr
    cdef bint table_is_parameter

    cdef int check_inputs(self) except -1 nogil:
        """Ids in range, and the bounds from offsets that form a valid partition: ids and
        offsets can change through set_value between passes."""
        check_ids(self, self.ix, self.rows)
        if self.offsets is not None:      # else fixed bags: the bounds were set at build
            fill_bounds(<const int64_t*>self.offsets.val_ptr, self.offsets.size, self.ix.size,
                        self.n_bags, self.include_last_offset, self.bounds_ptr)
        return 0

    cdef int run_forward(self) except -1 nogil:
        self.check_inputs()
        cdef const int64_t* bounds = self.bounds_ptr
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        if self.f64:
            bag_forward(<const double*>self.table.val_ptr, ids, bounds, <double*>self.val_ptr,
                        self.n_bags, self.row_len, self.mean)
        else:
            bag_forward(<const float*>self.table.val_ptr, ids, bounds, <float*>self.val_ptr,
                        self.n_bags, self.row_len, self.mean)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.table.requires_grad:
            return 0
        self.check_inputs()
        cdef const int64_t* bounds = self.bounds_ptr
        cdef char* rows = self.scratch_ptr
        # ids outside the bags (past an include_last_offset end) count for nothing
        cdef Py_ssize_t first = bounds[0], used = bounds[self.n_bags] - bounds[0]
        if self.f64:
            bag_backward_rows(<const double*>self.grad_ptr, bounds, <double*>rows, self.n_bags,
                              self.row_len, self.mean)
        else:
            bag_backward_rows(<const float*>self.grad_ptr, bounds, <float*>rows, self.n_bags,
                              self.row_len, self.mean)
        if self.dense_grad and self.table_is_parameter and not self.table.prepare_grad():
            # a Parameter's first dense contribution: start from zeros
            zero_values(self.table.grad_ptr, self.table.size, self.f64)
        self.table.add_grad_rows(<const int64_t*>self.ix.val_ptr + first, used,
                                 rows + first * self.row_len * element_size(self.f64), self.row_len)
        return 0


def embedding_bag(weight, ids, offsets=None, mode="mean", include_last_offset=False, sparse=True):
    """Sums or means of bags of rows of `weight`, as torch.nn.functional.embedding_bag.

    `ids` is an IndexInput (or integer ids). 1-D ids come with `offsets` (an
    IndexInput or integers): bag b is ids[offsets[b]:offsets[b + 1]], the last
    bag running to the end of ids; offsets[0] must be 0 and offsets must not
    decrease. With include_last_offset=True, offsets has one entry more than
    there are bags and its last entry ends the last bag. 2-D ids (bags, n) need
    no offsets: each row is a bag. `mode` is "sum" or "mean"; an empty bag
    gives zeros. The result is (bags, dim). Ids and offsets are checked on every
    forward and backward (set_value may change them, keeping their lengths).

    The gradient is sparse (only the rows used; repeated ids add) when `sparse`,
    else a dense gradient of the whole table.

    >>> E = fa.Parameter(np.random.randn(100, 8))
    >>> fa.embedding_bag(E, fa.IndexInput([1, 2, 3, 4, 5]), fa.IndexInput([0, 2, 2]), mode="sum").shape
    (3, 8)
    """
    require_float("embedding_bag", weight, "weight")
    cdef Variable t = <Variable>weight
    if len(t._shape) != 2:
        raise ValueError(f"embedding_bag: weight must be 2-D (rows, dim), got shape {t._shape}")
    if mode not in ("sum", "mean"):
        raise ValueError(f"embedding_bag: mode must be 'sum' or 'mean', got {mode!r}")
    if not isinstance(ids, IndexInput):
        if isinstance(ids, Variable):
            raise TypeError("embedding_bag: ids must be an IndexInput or integers, got a float Variable")
        ids = IndexInput(ids, device=t.device)
    cdef IndexInput ix = <IndexInput>ids
    if offsets is not None and not isinstance(offsets, IndexInput):
        if isinstance(offsets, Variable):
            raise TypeError("embedding_bag: offsets must be an IndexInput or integers, got a "
                            "float Variable")
        offsets = IndexInput(offsets)
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
    dev = backend_of(t, ix)
    if dev is not None:
        return dev.embedding_bag(t, ix, offsets, n_bags, mode == "mean",
                                 bool(include_last_offset), bool(sparse))
    cdef EmbeddingBag node = EmbeddingBag.__new__(EmbeddingBag)
    node.table = t
    node.ix = ix
    node.offsets = offsets
    node.rows = t._shape[0]
    node.row_len = t._shape[1]
    node.n_bags = n_bags
    node.mean = mode == "mean"
    node.include_last_offset = bool(include_last_offset)
    node.dense_grad = not sparse
    if offsets is None:
        node.bounds = np.arange(n_bags + 1, dtype=np.int64) * (ix._shape[1])
    else:
        node.bounds = np.zeros(n_bags + 1, dtype=np.int64)
    node.scratch = empty_buffer((ix.size, node.row_len), np.float64 if t.f64 else np.float32)
    node.bounds_ptr = <int64_t*>cnp.PyArray_DATA(node.bounds)
    node.scratch_ptr = <char*>cnp.PyArray_DATA(node.scratch)
    node.table_is_parameter = isinstance(t, Parameter)
    init_node(node, "embedding_bag", (t, ix) if offsets is None else (t, ix, offsets),
              (n_bags, node.row_len), t.f64)
    return finish(node)


# ------------------------------------------------- gradients moved between processes
# A synchronised parallel mode reads each worker's gradient (grad_mode, and
# sparse_grad() or grad), and one process adds them all into its own Parameter.

cdef int _require_host_parameter(str who, object p) except -1:
    if not isinstance(p, Parameter):
        raise TypeError(f"{who}: expected a Parameter, got {type(p).__name__}")
    if (<Parameter>p).on_device:
        raise ValueError(f"{who}: the Parameter is on {p.device}; this works on "
                         f"CPU Parameters")
    return 0


def grad_mode(p):
    """How CPU Parameter `p` holds its gradient: "none", "sparse" (rows only) or "dense"."""
    _require_host_parameter("grad_mode", p)
    return ("none", "sparse", "dense")[(<Parameter>p).grad_mode]


cdef void scale(floating* x, Py_ssize_t n, floating factor) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        x[i] *= factor


def add_grad(p, values, rows=None):
    """Add `values` into CPU Parameter `p`'s gradient, as a backward pass would.

    Without `rows`, `values` has p's shape and adds densely. With `rows` (int64
    ids below p.shape[0]), `values` is (len(rows), row_len) and row k adds into
    row rows[k] of a sparse gradient (repeated rows add; into a dense gradient
    if p already holds one). `values` must have p's dtype and be C-contiguous.
    """
    _require_host_parameter("add_grad", p)
    cdef Parameter param = <Parameter>p
    if not isinstance(values, np.ndarray) or values.dtype != param._value.dtype \
            or not values.flags.c_contiguous:
        raise TypeError(f"add_grad: values must be a C-contiguous {param._value.dtype} array, got "
                        f"{type(values).__name__} {getattr(values, 'dtype', '')}")
    cdef cnp.ndarray arr = <cnp.ndarray>values
    cdef cnp.ndarray ids
    cdef bint add
    if rows is None:
        if values.shape != param._shape:
            raise ValueError(f"add_grad: values have shape {values.shape}, expected the "
                             f"Parameter's {param._shape}")
        add = param.prepare_grad()
        put_values(param.grad_ptr, <const char*>cnp.PyArray_DATA(arr), param.size, add, param.f64)
        return
    ids = np.ascontiguousarray(rows, dtype=np.int64)
    if ids.ndim != 1 or values.shape != (ids.shape[0], param.row_len) or not param._shape:
        raise ValueError(f"add_grad: rows of shape {np.shape(rows)} and values of shape "
                         f"{values.shape} do not fit a Parameter of shape {param._shape}: "
                         f"expected (n,) and (n, {param.row_len})")
    if ids.size and (ids.min() < 0 or ids.max() >= param._shape[0]):
        raise IndexError(f"add_grad: rows must be in [0, {param._shape[0]}), got "
                         f"{ids.min()}..{ids.max()}")
    param.add_grad_rows(<const int64_t*>cnp.PyArray_DATA(ids), ids.shape[0],
                        <const char*>cnp.PyArray_DATA(arr), param.row_len)


def scale_grad(p, double factor):
    """Multiply CPU Parameter `p`'s gradient (dense, or the rows of a sparse one) by `factor`."""
    _require_host_parameter("scale_grad", p)
    cdef Parameter param = <Parameter>p
    cdef Py_ssize_t n
    cdef char* data
    if param.grad_mode == GRAD_SPARSE:
        data, n = param.slab_ptr, param.n_touched * param.row_len
    elif param.grad_mode == GRAD_DENSE:
        data, n = param.grad_ptr, param.size
    else:
        return
    if param.f64:
        scale(<double*>data, n, factor)
    else:
        scale(<float*>data, n, <float>factor)


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
        if self.f64:
            along_forward(<double*>self.x.val_ptr, <int64_t*>self.ix.val_ptr, <double*>self.val_ptr,
                          self.outer, self.n, self.k, self.inner)
        else:
            along_forward(<float*>self.x.val_ptr, <int64_t*>self.ix.val_ptr, <float*>self.val_ptr,
                          self.outer, self.n, self.k, self.inner)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        self.check_ids()
        if self.f64:
            return self._backward(<const double*>self.grad_ptr)
        return self._backward(<const float*>self.grad_ptr)

    cdef int _backward(self, const floating* g) except -1 nogil:
        cdef const int64_t* ids = <const int64_t*>self.ix.val_ptr
        cdef Py_ssize_t count
        if self.sparse:
            count = along_rows(ids, g, self.k, self.inner, self.slot_of_ptr, self.distinct_ptr,
                               <floating*>self.rows_ptr)
            self.x.add_grad_rows(self.distinct_ptr, count, self.rows_ptr, self.inner)
            return 0
        if not self.x.prepare_grad():
            zero_values(self.x.grad_ptr, self.x.size, self.f64)
        along_scatter(<floating*>self.x.grad_ptr, ids, g, self.outer, self.n, self.k, self.inner)
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
    dev = backend_of(v, ix)
    if dev is not None:
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
        node.rows = np.empty((min(node.n, ix.size), node.inner), dtype=v.dtype)
        node.slot_of_ptr = <int32_t*>cnp.PyArray_DATA(node.slot_of)
        node.distinct_ptr = <int64_t*>cnp.PyArray_DATA(node.distinct)
        node.rows_ptr = <char*>cnp.PyArray_DATA(node.rows)
    init_node(node, "take_along_axis", (v, ix), ks, v.f64)
    return finish(node)


register_methods(take=take)   # Variable's operators and methods

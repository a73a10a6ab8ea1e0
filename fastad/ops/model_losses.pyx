"""The fused model losses: `fastad.ranking_margin` and `fastad.ranking_loss` (BPR's margin
and loss), `fastad.gather_dot` (skip-gram's scores) and `fastad.bag_dot` (fastText's subword
scores), each the values and gradients of
composed gathers and dots in one node, whose backward hands the tables scaled rows.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport int64_t, uint64_t
from libc.string cimport memcpy

from fastad._engine.graph cimport (Variable, IndexInput, Parameter, empty_buffer, init_node, finish,
                              require_float, same_dtype, backend_among, val_ptr_or_null, check_real,
                              check_flag)
from fastad._engine.loops cimport element_size, row_axpy, row_dot, store_value, vec_fill, vec_zero
from fastad.ops.reduced_bce cimport (RED_NONE, reduction_code, reduction_name, reduction_scale,
                                    bce_forward, bce_backward)
from fastad.ops.sparse cimport check_ids, fa_ids_out_of_range

cnp.import_array()

cdef extern from *:
    """
    #include "clones.h"
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

    /* ranking_loss with regularization r: fa_margin_sgd_step's steps with each row's L2
     * term, as implicit's bpr.pyx takes them: neg_row += a_item * (-g * u + r * neg_row),
     * pos_row += a_item * (g * u + r * pos_row), user_row += a_user * (g * d + r * u) (and
     * bias[.] += a_bias * (+-g + r * bias[.])). Each row's term reads its value before this
     * triple's writes (u is the forward's copy of the user row), as the gradient at the
     * forward's values says, so coinciding rows take the general path's steps. */
    #define FA_MARGIN_SGD_REG_STEP(T, S)                                                     \
    FA_CLONED void fa_margin_sgd_reg_step_##S(T* user_row, T* pos_row, T* neg_row, T* bias,  \
                                              int64_t pos, int64_t neg, const T* __restrict u, \
                                              const T* __restrict d, T g, T r, Py_ssize_t dim, \
                                              T a_user, T a_item, T a_bias) {                \
        T ng = -g;                                                                           \
        if (bias) {                                                                          \
            T bp = bias[pos], bn = bias[neg];                                                \
            bias[neg] += a_bias * (ng + r * bn);                                             \
            bias[pos] += a_bias * (g + r * bp);                                              \
        }                                                                                    \
        FA_BLOCK_TYPE(T)                                                                     \
        Py_ssize_t i = 0;                                                                    \
        FA_IN_BLOCKS(T, i, dim) {                                                            \
            fa_block ui = FA_BLOCK_OF(u, i);                                                 \
            fa_block p0 = FA_BLOCK_OF(pos_row, i), n0 = FA_BLOCK_OF(neg_row, i);             \
            FA_BLOCK_AT(neg_row, i) += a_item * (ng * ui + r * n0);                          \
            FA_BLOCK_AT(pos_row, i) += a_item * (g * ui + r * p0);                           \
            FA_BLOCK_AT(user_row, i) += a_user * (g * FA_BLOCK_OF(d, i) + r * ui);           \
        }                                                                                    \
        for (; i < dim; i++) {                                                               \
            T p0 = pos_row[i], n0 = neg_row[i];                                              \
            neg_row[i] += a_item * (ng * u[i] + r * n0);                                     \
            pos_row[i] += a_item * (g * u[i] + r * p0);                                      \
            user_row[i] += a_user * (g * d[i] + r * u[i]);                                   \
        }                                                                                    \
    }
    FA_MARGIN_SGD_REG_STEP(float, f)
    FA_MARGIN_SGD_REG_STEP(double, d)

    /* fa_margin_rows, and penalties[k] = |U[users[k]]|^2 + |V[pos[k]]|^2 + |V[neg[k]]|^2
     * (+ bias[pos[k]]^2 + bias[neg[k]]^2 unless bias is NULL), twice triple k's L2 term over
     * r, summed in the same pass over the rows (in lanes, then across them). */
    #define FA_MARGIN_PENALTY_ROWS(T, S)                                                    \
    FA_CLONED FA_NO_LIBRARY_COPY                                                             \
    void fa_margin_penalty_rows_##S(const T* U, const T* V, const T* bias,                   \
                                    const int64_t* users, const int64_t* pos,                \
                                    const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,        \
                                    T* __restrict user_rows, T* __restrict differences,      \
                                    T* __restrict margins, T* __restrict penalties) {        \
        FA_BLOCK_TYPE(T)                                                                     \
        for (Py_ssize_t k = 0; k < n; k++) {                                                 \
            T* __restrict u = user_rows + k * dim;                                           \
            T* __restrict d = differences + k * dim;                                         \
            const T* ur = U + users[k] * dim;                                                \
            const T* pr = V + pos[k] * dim;                                                  \
            const T* nr = V + neg[k] * dim;                                                  \
            fa_block squares;                                                                \
            T lanes[sizeof(fa_block) / sizeof(T)];                                           \
            T total = 0;                                                                     \
            memset(&squares, 0, sizeof squares);                                             \
            Py_ssize_t i = 0;                                                                \
            FA_IN_BLOCKS(T, i, dim) {                                                        \
                fa_block ub = FA_BLOCK_OF(ur, i), pb = FA_BLOCK_OF(pr, i), nb = FA_BLOCK_OF(nr, i); \
                FA_BLOCK_AT(u, i) = ub;                                                      \
                FA_BLOCK_AT(d, i) = pb - nb;                                                 \
                squares += ub * ub + pb * pb + nb * nb;                                      \
            }                                                                                \
            for (; i < dim; i++) {                                                           \
                u[i] = ur[i]; d[i] = pr[i] - nr[i];                                          \
                total += ur[i] * ur[i] + pr[i] * pr[i] + nr[i] * nr[i];                      \
            }                                                                                \
            memcpy(lanes, &squares, sizeof lanes);                                           \
            for (size_t l = 0; l < sizeof(fa_block) / sizeof(T); l++) total += lanes[l];     \
            T m = fa_dot_##S(u, d, dim);                                                     \
            margins[k] = bias ? m + (bias[pos[k]] - bias[neg[k]]) : m;                       \
            if (bias) total += bias[pos[k]] * bias[pos[k]] + bias[neg[k]] * bias[neg[k]];    \
            penalties[k] = total;                                                            \
        }                                                                                    \
    }
    FA_MARGIN_PENALTY_ROWS(float, f)
    FA_MARGIN_PENALTY_ROWS(double, d)

    /* The gradient rows of ranking_loss with regularization, from the tables' values before
     * any of them is stepped: user_grads[k] = g[k] * d_k + r[k] * u_k, pos_grads[k] = g[k] *
     * u_k + r[k] * V[pos[k]], neg_grads[k] = -g[k] * u_k + r[k] * V[neg[k]], and (unless
     * bias is NULL) the biases' g[k] + r[k] * bias[pos[k]] and -g[k] + r[k] * bias[neg[k]]. */
    #define FA_REGULARIZED_GRADS(T, S)                                                       \
    FA_CLONED void fa_regularized_grads_##S(const T* V, const T* bias, const int64_t* pos,   \
                                            const int64_t* neg, const T* user_rows,          \
                                            const T* differences, const T* g, const T* r,    \
                                            Py_ssize_t n, Py_ssize_t dim,                    \
                                            T* __restrict user_grads, T* __restrict pos_grads, \
                                            T* __restrict neg_grads, T* __restrict pos_bias, \
                                            T* __restrict neg_bias) {                        \
        for (Py_ssize_t k = 0; k < n; k++) {                                                 \
            const T* u = user_rows + k * dim;                                                \
            const T* d = differences + k * dim;                                              \
            const T* pr = V + pos[k] * dim;                                                  \
            const T* nr = V + neg[k] * dim;                                                  \
            T gk = g[k], rk = r[k];                                                          \
            for (Py_ssize_t i = 0; i < dim; i++) {                                           \
                user_grads[k * dim + i] = gk * d[i] + rk * u[i];                             \
                pos_grads[k * dim + i] = gk * u[i] + rk * pr[i];                             \
                neg_grads[k * dim + i] = -gk * u[i] + rk * nr[i];                            \
            }                                                                                \
            if (bias) {                                                                      \
                pos_bias[k] = gk + rk * bias[pos[k]];                                        \
                neg_bias[k] = -gk + rk * bias[neg[k]];                                       \
            }                                                                                \
        }                                                                                    \
    }
    FA_REGULARIZED_GRADS(float, f)
    FA_REGULARIZED_GRADS(double, d)

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
    void fa_margin_sgd_reg_step_f(float* user_row, float* pos_row, float* neg_row, float* bias,
                                  int64_t pos, int64_t neg, const float* u, const float* d, float g,
                                  float r, Py_ssize_t dim, float a_user, float a_item,
                                  float a_bias) noexcept nogil
    void fa_margin_sgd_reg_step_d(double* user_row, double* pos_row, double* neg_row, double* bias,
                                  int64_t pos, int64_t neg, const double* u, const double* d,
                                  double g, double r, Py_ssize_t dim, double a_user, double a_item,
                                  double a_bias) noexcept nogil
    void fa_margin_penalty_rows_f(const float* U, const float* V, const float* bias,
                                  const int64_t* users, const int64_t* pos, const int64_t* neg,
                                  Py_ssize_t n, Py_ssize_t dim, float* user_rows, float* differences,
                                  float* margins, float* penalties) noexcept nogil
    void fa_margin_penalty_rows_d(const double* U, const double* V, const double* bias,
                                  const int64_t* users, const int64_t* pos, const int64_t* neg,
                                  Py_ssize_t n, Py_ssize_t dim, double* user_rows,
                                  double* differences, double* margins,
                                  double* penalties) noexcept nogil
    void fa_regularized_grads_f(const float* V, const float* bias, const int64_t* pos,
                                const int64_t* neg, const float* user_rows, const float* differences,
                                const float* g, const float* r, Py_ssize_t n, Py_ssize_t dim,
                                float* user_grads, float* pos_grads, float* neg_grads,
                                float* pos_bias, float* neg_bias) noexcept nogil
    void fa_regularized_grads_d(const double* V, const double* bias, const int64_t* pos,
                                const int64_t* neg, const double* user_rows,
                                const double* differences, const double* g, const double* r,
                                Py_ssize_t n, Py_ssize_t dim, double* user_grads, double* pos_grads,
                                double* neg_grads, double* pos_bias, double* neg_bias) noexcept nogil
    void fa_gather_dot_rows_f(const float* A, const float* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              float* a_rows, float* b_rows, float* out) noexcept nogil
    void fa_gather_dot_rows_d(const double* A, const double* B, const int64_t* a_ids,
                              const int64_t* b_ids, Py_ssize_t n, Py_ssize_t per, Py_ssize_t dim,
                              double* a_rows, double* b_rows, double* out) noexcept nogil


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
    cdef double regularization      # logistic: the L2 term's r (0: none, and no buffers below)
    cdef cnp.ndarray penalties, rates, grad_rows, bias_grads    # its forward's and backward's
    cdef char* penalties_ptr
    cdef char* rates_ptr
    cdef char* grad_rows_ptr
    cdef char* bias_grads_ptr

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
        if self.regularization != 0:
            self._margin_penalty_rows(margins)
        elif self.f64:
            fa_margin_rows_d(<const double*>self.user_table.val_ptr,
                             <const double*>self.item_table.val_ptr,
                             <const double*>val_ptr_or_null(self.item_bias),
                             <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                             <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                             <double*>self.user_rows_ptr, <double*>self.differences_ptr,
                             <double*>margins)
        else:
            fa_margin_rows_f(<const float*>self.user_table.val_ptr,
                             <const float*>self.item_table.val_ptr,
                             <const float*>val_ptr_or_null(self.item_bias),
                             <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                             <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                             <float*>self.user_rows_ptr, <float*>self.differences_ptr,
                             <float*>margins)
        if self.logistic:
            total = bce_forward(margins, self.ones_ptr, self.n_triples, self.exp_of_margins_ptr,
                                self.val_ptr if self.reduction == RED_NONE else NULL, self.f64)
            if self.regularization != 0:
                total += self._add_penalties()
            if self.reduction != RED_NONE:
                store_value(self.val_ptr, total * self.scale, self.f64)
        return 0

    @cython.final
    cdef int _margin_penalty_rows(self, char* margins) except -1 nogil:
        """The forward's rows and margins, and each triple's squared norms (penalties)."""
        if self.f64:
            fa_margin_penalty_rows_d(<const double*>self.user_table.val_ptr,
                                     <const double*>self.item_table.val_ptr,
                                     <const double*>val_ptr_or_null(self.item_bias),
                                     <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                                     <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                                     <double*>self.user_rows_ptr, <double*>self.differences_ptr,
                                     <double*>margins, <double*>self.penalties_ptr)
        else:
            fa_margin_penalty_rows_f(<const float*>self.user_table.val_ptr,
                                     <const float*>self.item_table.val_ptr,
                                     <const float*>val_ptr_or_null(self.item_bias),
                                     <const int64_t*>self.users.val_ptr, <const int64_t*>self.pos.val_ptr,
                                     <const int64_t*>self.neg.val_ptr, self.n_triples, self.dim,
                                     <float*>self.user_rows_ptr, <float*>self.differences_ptr,
                                     <float*>margins, <float*>self.penalties_ptr)
        return 0

    @cython.final
    cdef double _add_penalties(self) except? -1.0 nogil:
        """Each triple's L2 term r / 2 * (the squared norms of its rows, from the forward's
        penalties), added to its loss (reduction "none"); returns their sum."""
        cdef Py_ssize_t k, n = self.n_triples
        cdef double half_r = 0.5 * self.regularization, total = 0.0
        if self.f64:
            for k in range(n):
                total += half_r * (<double*>self.penalties_ptr)[k]
                if self.reduction == RED_NONE:
                    (<double*>self.val_ptr)[k] += half_r * (<double*>self.penalties_ptr)[k]
        else:
            for k in range(n):
                total += half_r * (<float*>self.penalties_ptr)[k]
                if self.reduction == RED_NONE:
                    (<float*>self.val_ptr)[k] += <float>(half_r * (<float*>self.penalties_ptr)[k])
        return total

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
            if self.regularization != 0:
                self._fill_rates()
                if n == 1 and self._steps_in_place():
                    return self._step_one_triple(g)
                return self._add_regularized_grads(g)
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
    cdef int _fill_rates(self) except -1 nogil:
        """rates[k] = the coefficient of triple k's rows in its L2 term's gradient: r times
        the loss's gradient (its k-th under reduction "none") and the reduction's scale."""
        cdef Py_ssize_t k, step = 1 if self.reduction == RED_NONE else 0
        cdef double r = self.regularization * self.scale
        for k in range(self.n_triples):
            if self.f64:
                (<double*>self.rates_ptr)[k] = r * (<const double*>self.grad_ptr)[k * step]
            else:
                (<float*>self.rates_ptr)[k] = <float>(r * (<const float*>self.grad_ptr)[k * step])
        return 0

    @cython.final
    cdef int _add_regularized_grads(self, const char* g) except -1 nogil:
        """The gradient rows with the L2 terms' (fa_regularized_grads: every row computed
        from the tables' values before any is added, for a Parameter under the compiled
        loop steps as they come), handed to the tables in the order of the plain path."""
        cdef Py_ssize_t n = self.n_triples, block = n * self.dim * element_size(self.f64)
        cdef Py_ssize_t bias_block = n * element_size(self.f64)
        cdef char* user_grads = self.grad_rows_ptr
        if self.f64:
            fa_regularized_grads_d(<const double*>self.item_table.val_ptr,
                                   <const double*>val_ptr_or_null(self.item_bias),
                                   <const int64_t*>self.pos.val_ptr, <const int64_t*>self.neg.val_ptr,
                                   <const double*>self.user_rows_ptr, <const double*>self.differences_ptr,
                                   <const double*>g, <const double*>self.rates_ptr, n, self.dim,
                                   <double*>user_grads, <double*>(user_grads + block),
                                   <double*>(user_grads + 2 * block), <double*>self.bias_grads_ptr,
                                   <double*>(self.bias_grads_ptr + bias_block))
        else:
            fa_regularized_grads_f(<const float*>self.item_table.val_ptr,
                                   <const float*>val_ptr_or_null(self.item_bias),
                                   <const int64_t*>self.pos.val_ptr, <const int64_t*>self.neg.val_ptr,
                                   <const float*>self.user_rows_ptr, <const float*>self.differences_ptr,
                                   <const float*>g, <const float*>self.rates_ptr, n, self.dim,
                                   <float*>user_grads, <float*>(user_grads + block),
                                   <float*>(user_grads + 2 * block), <float*>self.bias_grads_ptr,
                                   <float*>(self.bias_grads_ptr + bias_block))
        if self.item_bias is not None and self.item_bias.requires_grad:
            self.item_bias.add_grad_rows(<const int64_t*>self.neg.val_ptr, n,
                                         self.bias_grads_ptr + bias_block, 1)
            self.item_bias.add_grad_rows(<const int64_t*>self.pos.val_ptr, n, self.bias_grads_ptr, 1)
        if self.item_table.requires_grad:
            self.item_table.add_grad_rows(<const int64_t*>self.neg.val_ptr, n, user_grads + 2 * block,
                                          self.dim)
            self.item_table.add_grad_rows(<const int64_t*>self.pos.val_ptr, n, user_grads + block, self.dim)
        if self.user_table.requires_grad:
            self.user_table.add_grad_rows(<const int64_t*>self.users.val_ptr, n, user_grads, self.dim)
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
        if self.regularization != 0:
            if self.f64:
                fa_margin_sgd_reg_step_d(<double*>u + user * dim, <double*>v + pos * dim,
                                         <double*>v + neg * dim, <double*>bias, pos, neg,
                                         <const double*>self.user_rows_ptr,
                                         <const double*>self.differences_ptr, (<const double*>g)[0],
                                         (<const double*>self.rates_ptr)[0], dim, -lr_u, -lr_v, -lr_b)
            else:
                fa_margin_sgd_reg_step_f(<float*>u + user * dim, <float*>v + pos * dim,
                                         <float*>v + neg * dim, <float*>bias, pos, neg,
                                         <const float*>self.user_rows_ptr,
                                         <const float*>self.differences_ptr, (<const float*>g)[0],
                                         (<const float*>self.rates_ptr)[0], dim, <float>-lr_u,
                                         <float>-lr_v, <float>-lr_b)
        elif self.f64:
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
                _sum_scaled_rows(<double*>self.a_grads_ptr, <const double*>self.b_rows_ptr,
                                 <const double*>self.grad_ptr, n, self.per, self.dim)
            else:
                _sum_scaled_rows(<float*>self.a_grads_ptr, <const float*>self.b_rows_ptr,
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


@cython.no_gc
cdef class BagDot(Variable):
    """y[b, j] = mean(A[bag b]) . B[b_ids[b, j]] in one node, bag b being the A rows
    bag_ids[offsets[b]:offsets[b + 1]]: each bag's mean (the hidden) is summed once and
    kept, with the B rows, for the backward. The backward sends B its rows g * hidden
    and each bag row the hidden's gradient (`hidden_gradient`) or 1/n of it (the exact
    gradient of the mean), through add_scaled_rows: a Parameter under the compiled
    loop's plain SGD steps them directly."""
    cdef Variable a_table, b_table
    cdef IndexInput bag_ids, bag_offsets, b_ids
    cdef Py_ssize_t dim, per, bags, a_count, b_count      # per: B rows for each bag
    cdef bint hidden_gradient
    cdef cnp.ndarray hidden, b_rows, hidden_grads, coefs, scratch   # kept by the forward; the backward's
    cdef char* hidden_ptr
    cdef char* b_rows_ptr
    cdef char* hidden_grads_ptr
    cdef char* coefs_ptr
    cdef char* scratch_ptr

    def _row_sources(self):
        """(ids, table) for each table this node gathers rows of (see Take._row_sources)."""
        return [(self.bag_ids, self.a_table), (self.b_ids, self.b_table)]

    cdef int run_forward(self) except -1 nogil:
        self._check_ids()
        if self.f64:
            self._forward(<double*>self.val_ptr)
        else:
            self._forward(<float*>self.val_ptr)
        return 0

    @cython.final
    cdef int _forward(self, floating* out) except -1 nogil:
        cdef const floating* A = <floating*>self.a_table.val_ptr
        cdef const floating* B = <floating*>self.b_table.val_ptr
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef const int64_t* b_ids = <int64_t*>self.b_ids.val_ptr
        cdef floating* hidden = <floating*>self.hidden_ptr
        cdef floating* rows = <floating*>self.b_rows_ptr
        cdef floating* h
        cdef Py_ssize_t b, k, dim = self.dim
        cdef floating share
        for b in range(self.bags):
            h = hidden + b * dim
            share = <floating>(1.0 / (offsets[b + 1] - offsets[b]))
            vec_zero(h, dim)
            for k in range(offsets[b], offsets[b + 1]):
                row_axpy(h, A + ids[k] * dim, dim, share)
            for k in range(b * self.per, (b + 1) * self.per):
                memcpy(rows + k * dim, B + b_ids[k] * dim, dim * sizeof(floating))
                out[k] = row_dot(rows + k * dim, h, dim)
        return 0

    cdef int run_backward(self) except -1 nogil:
        """The bags' rows (each the hidden's gradient, the sum of g[k] * its B rows, from the
        kept B rows, times its coefficient), then B's rows g[k] * hidden (from the kept
        hidden), in the order gather_dot sends its tables theirs."""
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef Py_ssize_t b, n, row_bytes = self.dim * element_size(self.f64)
        self._check_ids()
        if self.a_table.requires_grad:
            if self.f64:
                _sum_scaled_rows(<double*>self.hidden_grads_ptr, <const double*>self.b_rows_ptr,
                                 <const double*>self.grad_ptr, self.bags, self.per, self.dim)
            else:
                _sum_scaled_rows(<float*>self.hidden_grads_ptr, <const float*>self.b_rows_ptr,
                                 <const float*>self.grad_ptr, self.bags, self.per, self.dim)
            for b in range(self.bags):
                n = offsets[b + 1] - offsets[b]
                if not self.hidden_gradient and self.f64:
                    vec_fill(<double*>self.coefs_ptr, 1.0 / n, n)
                elif not self.hidden_gradient:
                    vec_fill(<float*>self.coefs_ptr, <float>(1.0 / n), n)
                self.a_table.add_scaled_rows(ids + offsets[b], n, self.hidden_grads_ptr + b * row_bytes,
                                             self.coefs_ptr, self.dim, n, self.scratch_ptr)
        if self.b_table.requires_grad:
            self.b_table.add_scaled_rows(<const int64_t*>self.b_ids.val_ptr, self.size, self.hidden_ptr,
                                         self.grad_ptr, self.dim, self.per, self.scratch_ptr)
        return 0

    @cython.final
    cdef int _check_ids(self) except -1 nogil:
        """The offsets must cut non-empty bags within bag_ids, and every id of them (and of
        b_ids) name a row: the leaves can change through set_value between passes."""
        cdef const int64_t* offsets = <int64_t*>self.bag_offsets.val_ptr
        cdef const int64_t* ids = <int64_t*>self.bag_ids.val_ptr
        cdef Py_ssize_t b, k
        for b in range(self.bags):
            if offsets[b] < 0 or offsets[b + 1] <= offsets[b] or offsets[b + 1] > self.bag_ids.size:
                with gil:
                    raise ValueError(f"bag_dot: bag_offsets must rise strictly from >= 0 to at most "
                                     f"len(bag_ids) = {self.bag_ids.size} (each bag non-empty), got "
                                     f"{self.bag_offsets.value.tolist()}")
        if fa_ids_out_of_range(<const uint64_t*>(ids + offsets[0]), offsets[self.bags] - offsets[0],
                               self.a_count):
            for k in range(offsets[0], offsets[self.bags]):
                if ids[k] < 0 or ids[k] >= self.a_count:
                    with gil:
                        raise IndexError(f"bag_dot: id {ids[k]} at position {k} of bag_ids is out of "
                                         f"range for a_table with {self.a_count} rows")
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
    if (dev := backend_among((A, B, a_index, b_index))) is not None:
        return dev.gather_dot(A, a_index, B, b_index)
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
    A, B = _row_tables(op, "a_table", a_table, "b_table", b_table)
    cdef IndexInput ids = _ids(op, "bag_ids", bag_ids, A), offsets = _ids(op, "bag_offsets", bag_offsets, A)
    cdef IndexInput targets = _ids(op, "b_ids", b_ids, B)
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
    node.a_table, node.b_table = A, B
    node.bag_ids, node.bag_offsets, node.b_ids = ids, offsets, targets
    node.a_count, node.b_count, node.dim = A._shape[0], B._shape[0], A._shape[1]
    node.bags, node.per = bags, targets._shape[1]
    node.hidden_gradient = check_flag(op, "hidden_gradient", hidden_gradient)
    init_node(node, op, (A, B, ids, offsets, targets), targets._shape, A.f64)
    dtype = np.float64 if node.f64 else np.float32
    node.hidden = empty_buffer((bags, node.dim), dtype)
    node.hidden_grads = empty_buffer((bags, node.dim), dtype)
    node.b_rows = empty_buffer((targets.size, node.dim), dtype)
    node.coefs = empty_buffer((ids.size,), dtype)
    node.coefs.fill(1)
    node.scratch = empty_buffer((max(ids.size, targets.size), node.dim), dtype)
    node.hidden_ptr = <char*>cnp.PyArray_DATA(node.hidden)
    node.hidden_grads_ptr = <char*>cnp.PyArray_DATA(node.hidden_grads)
    node.b_rows_ptr = <char*>cnp.PyArray_DATA(node.b_rows)
    node.coefs_ptr = <char*>cnp.PyArray_DATA(node.coefs)
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
    return _ranking_node("ranking_margin", user_table, users, item_table, pos, neg, item_bias, -1, 0.0)


def ranking_loss(user_table, users, item_table, pos, neg, item_bias=None, reduction="mean",
                 regularization=0.0):
    """The logistic pairwise ranking loss (BPR's): -log sigmoid of each `ranking_margin`,
    averaged ("mean", the default), summed ("sum") or one per example ("none").

    `regularization` r >= 0 adds to each triple's loss the L2 term r / 2 * (|U[user]|^2 +
    |V[pos]|^2 + |V[neg]|^2 (+ b[pos]^2 + b[neg]^2)) of the rows it touches, whose
    gradient r * row joins each row's: under per-example SGD at rate lr each touched row
    takes `row += lr * (its BPR gradient step - r * row)`, implicit's BayesianPersonalizedRanking
    update (its `regularization`) exactly.

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
    cdef double r = check_real("ranking_loss", "regularization", regularization)
    if r < 0:
        raise ValueError(f"ranking_loss: regularization must be >= 0, got {regularization!r}")
    return _ranking_node("ranking_loss", user_table, users, item_table, pos, neg, item_bias,
                         reduction_code("ranking_loss", reduction), r)


cdef object _ranking_node(str op, object user_table, object users, object item_table, object pos,
                          object neg, object item_bias, int reduction, double regularization):
    """ranking_margin's node (reduction -1), or ranking_loss's with that reduction code and
    L2 term."""
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
    if (dev := backend_among((U, V, b, user_ids, pos_ids, neg_ids))) is not None:
        return dev.ranking(U, user_ids, V, pos_ids, neg_ids, b,
                           None if reduction < 0 else reduction_name(reduction), regularization)
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
    node.regularization = regularization
    if regularization != 0:
        node.penalties = empty_buffer((user_ids.size,), dtype)
        node.rates = empty_buffer((user_ids.size,), dtype)
        node.grad_rows = empty_buffer((3, user_ids.size, node.dim), dtype)
        node.bias_grads = empty_buffer((2, user_ids.size), dtype)
        node.penalties_ptr = <char*>cnp.PyArray_DATA(node.penalties)
        node.rates_ptr = <char*>cnp.PyArray_DATA(node.rates)
        node.grad_rows_ptr = <char*>cnp.PyArray_DATA(node.grad_rows)
        node.bias_grads_ptr = <char*>cnp.PyArray_DATA(node.bias_grads)
    return finish(node)

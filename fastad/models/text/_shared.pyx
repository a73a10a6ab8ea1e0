"""Skip-gram with shared negatives in one node (pWord2Vec's form, Ji et al. 2016):
`window_loss`, the negative-sampling loss of a centre's whole window against the centre and
k negatives drawn once for it, which `fa.data.SharedNegativeSampler` fills and
`Word2Vec(shared_negatives=True)` trains.

One example is a block: the n context rows of W (n <= 2 * window) and the 1 + k rows of C
(the centre, then its negatives), copied once into two small dense blocks. The scores are
one small matrix product (n x (1 + k)), the gradients of the two blocks two more, and the
rows go back through send_rows, or, under `fastad.train`'s plain SGD, are stepped in place
(lock-free, Hogwild-style, as the pair-at-a-time path's rows are). A word touches
n + 1 + k rows for its n (1 + k) scores, where the pair form touches 2 + k rows a pair:
n (2 + k) rows for the same flops.
"""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.stdint cimport int64_t

from fastad._engine.graph cimport (Variable, IndexInput, Input, RowGather, RowStep, empty_buffer,
                                   init_node, finish, same_dtype, backend_among, send_rows, keep_data)
from fastad._engine.loops cimport element_size
from fastad.ops.pointwise_loss cimport fa_bce_backward_d, fa_bce_backward_f
from fastad.ops.sparse cimport as_ids, check_ids, row_tables

cnp.import_array()

__all__ = ["window_loss"]


cdef inline double row_loss(const floating* scores, Py_ssize_t m, floating* exps) noexcept nogil:
    """sum_j bce(scores[j], j == 0), keeping exp(-|scores[j]|) in exps (fa_window_row_loss)."""
    if floating is float:
        return fa_window_row_loss_f(scores, m, exps)
    else:
        return fa_window_row_loss_d(scores, m, exps)


cdef inline void bce_row_backward(const floating* scores, const floating* labels, const floating* exps,
                                  Py_ssize_t m, floating coef, floating* g) noexcept nogil:
    """g = coef * (sigmoid(scores) - labels) over m scores."""
    if floating is float:
        fa_bce_backward_f(scores, labels, exps, m, &coef, 0, 1, g, False)
    else:
        fa_bce_backward_d(scores, labels, exps, m, &coef, 0, 1, g, False)


cdef extern from *:
    """
    #include <math.h>
    #include <stdint.h>
    #include <string.h>
    #include "clones.h"
    #include "elementwise_loops.h"
    /* The block kernels of window_loss, in vectors of 32 bytes (8 floats or 4 doubles: one
     * AVX2 register in the AVX2 clone, two SSE ones elsewhere, the same values either way).
     *
     * A row's last elements short of a whole vector go through one of half its width (dim 100
     * in floats: 12 vectors and one half), the rest one at a time.
     *
     * fa_window_scores: copy the n context rows of W into the block `rows` and, for each of
     * the `groups` groups of context rows (n split in order into groups of n / groups rows,
     * to rounding), the centre's row and the group's k negatives (target[1 + g k ...]) of C
     * into group g's m = 1 + k rows of the block `outs`, and score each group's rows
     * against its own: scores (n x m), row i against its group's block of outs.
     *
     * fa_window_rows: for r < n_out, the row sum_k g[r * gr + k * gk] * src[k] (src: n_in
     * rows), times `scale`: written into dst row r (ids NULL), or added into dst row ids[r]
     * (a table's row, stepped in place; a repeated id is stepped twice). The row is read
     * and written once, a vector at a time, the n_in source rows summed in registers.
     *
     * fa_window_row_loss: sum_j bce(s_j, j == 0) of a row of m scores, keeping t_j =
     * exp(-|s_j|) for fa_bce_backward (elementwise_loops.h), the loss nodes' rule: the
     * softplus's m terms log1p(t_j) taken as one log of the product of the 1 + t_j (in
     * double; each factor lies in [1, 2]), one log a context word instead of m. */
    /* the first context row of group g of `groups` over n rows (g = groups: n), with no
     * division when there is one group (a division costs more than a window's scores' loop) */
    static inline Py_ssize_t fa_win_bound(Py_ssize_t g, Py_ssize_t n, Py_ssize_t groups) {
        return groups == 1 ? (g ? n : 0) : g * n / groups;
    }
    /* y[0:LANES] = scale * acc, or += when ids (a table's row), in fa_window_rows */
    #define FA_WIN_PUT(S, Y, ACC) do {                                                            \
        fa_win_vec_##S out_;                                                                     \
        if (ids) { memcpy(&out_, (Y), 32); out_ += scale * (ACC); } else out_ = scale * (ACC);   \
        memcpy((Y), &out_, 32);                                                                  \
    } while (0)
    #define FA_WINDOW_KERNELS(T, S, LANES, EXP_NEGABS)                                           \
    static inline double fa_window_row_loss_##S(const T* s, Py_ssize_t m, T* t) {               \
        double product = 1, linear = 0;                                                          \
        for (Py_ssize_t j = 0; j < m; j++) {                                                     \
            t[j] = EXP_NEGABS(s[j]);                                                             \
            product *= 1.0 + (double)t[j];                                                       \
            linear += (s[j] > 0 ? (double)s[j] : 0.0) - (j == 0 ? (double)s[j] : 0.0);           \
        }                                                                                        \
        return linear + log(product);                                                            \
    }                                                                                            \
    typedef T fa_win_vec_##S __attribute__((vector_size(32)));                                   \
    typedef T fa_win_half_##S __attribute__((vector_size(16)));                                  \
    static inline T fa_win_dot_##S(const T* x, const T* y, Py_ssize_t dim) {                     \
        fa_win_vec_##S acc = {0}, a, b;                                                          \
        fa_win_half_##S h = {0}, ha, hb;                                                         \
        Py_ssize_t p = 0;                                                                        \
        for (; p + LANES <= dim; p += LANES) {                                                   \
            memcpy(&a, x + p, 32); memcpy(&b, y + p, 32);                                        \
            acc += a * b;                                                                        \
        }                                                                                        \
        if (p + LANES / 2 <= dim) {                                                              \
            memcpy(&ha, x + p, 16); memcpy(&hb, y + p, 16);                                      \
            h = ha * hb;                                                                         \
            p += LANES / 2;                                                                      \
        }                                                                                        \
        T total = 0;                                                                             \
        for (int l = 0; l < LANES / 2; l++) total += acc[l] + acc[l + LANES / 2] + h[l];         \
        for (; p < dim; p++) total += x[p] * y[p];                                               \
        return total;                                                                            \
    }                                                                                            \
    static inline void fa_win_dot2_##S(const T* x, const T* y0, const T* y1, Py_ssize_t dim,     \
                                       T* out) {                                                 \
        fa_win_vec_##S acc0 = {0}, acc1 = {0}, a, b0, b1;                                        \
        fa_win_half_##S h0 = {0}, h1 = {0}, ha, hb;                                              \
        Py_ssize_t p = 0;                                                                        \
        for (; p + LANES <= dim; p += LANES) {                                                   \
            memcpy(&a, x + p, 32); memcpy(&b0, y0 + p, 32); memcpy(&b1, y1 + p, 32);             \
            acc0 += a * b0; acc1 += a * b1;                                                      \
        }                                                                                        \
        if (p + LANES / 2 <= dim) {                                                              \
            memcpy(&ha, x + p, 16); memcpy(&hb, y0 + p, 16); h0 = ha * hb;                       \
            memcpy(&hb, y1 + p, 16); h1 = ha * hb;                                               \
            p += LANES / 2;                                                                      \
        }                                                                                        \
        T t0 = 0, t1 = 0;                                                                        \
        for (int l = 0; l < LANES / 2; l++) {                                                    \
            t0 += acc0[l] + acc0[l + LANES / 2] + h0[l];                                         \
            t1 += acc1[l] + acc1[l + LANES / 2] + h1[l];                                         \
        }                                                                                        \
        for (; p < dim; p++) { t0 += x[p] * y0[p]; t1 += x[p] * y1[p]; }                        \
        out[0] = t0; out[1] = t1;                                                                \
    }                                                                                            \
    FA_CLONED void fa_window_scores_##S(const T* W, const int64_t* context, Py_ssize_t n,        \
                                        const T* C, const int64_t* target, Py_ssize_t groups,    \
                                        Py_ssize_t k, Py_ssize_t dim, T* rows, T* outs,          \
                                        T* scores) {                                             \
        size_t row_bytes = (size_t)dim * sizeof(T);                                              \
        Py_ssize_t m = 1 + k;                                                                    \
        for (Py_ssize_t i = 0; i < n; i++) memcpy(rows + i * dim, W + context[i] * dim, row_bytes); \
        for (Py_ssize_t g = 0; g < groups; g++) {                                                \
            T* block = outs + g * m * dim;                                                       \
            memcpy(block, C + target[0] * dim, row_bytes);                                       \
            for (Py_ssize_t j = 0; j < k; j++)                                                   \
                memcpy(block + (1 + j) * dim, C + target[1 + g * k + j] * dim, row_bytes);      \
        }                                                                                        \
        for (Py_ssize_t g = 0; g < groups; g++) {                                                \
            const T* block = outs + g * m * dim;                                                 \
            Py_ssize_t hi = fa_win_bound(g + 1, n, groups);                                      \
            for (Py_ssize_t i = fa_win_bound(g, n, groups); i < hi; i++) {                       \
                Py_ssize_t j = 0;                                                                \
                for (; j + 2 <= m; j += 2)      /* two target rows a pass over the context row */ \
                    fa_win_dot2_##S(rows + i * dim, block + j * dim, block + (j + 1) * dim, dim, \
                                    scores + i * m + j);                                         \
                if (j < m) scores[i * m + j] = fa_win_dot_##S(rows + i * dim, block + j * dim, dim); \
            }                                                                                    \
        }                                                                                        \
    }                                                                                            \
    FA_CLONED void fa_window_rows_##S(const T* g, Py_ssize_t gr, Py_ssize_t gk, Py_ssize_t n_out, \
                                      Py_ssize_t n_in, const T* src, Py_ssize_t dim, T* dst,     \
                                      const int64_t* ids, T scale) {                             \
        for (Py_ssize_t r = 0; r < n_out; r++) {                                                 \
            T* y = ids ? dst + ids[r] * dim : dst + r * dim;                                     \
            const T* c = g + r * gr;                                                             \
            Py_ssize_t p = 0;                                                                    \
            for (; p + 4 * LANES <= dim; p += 4 * LANES) {   /* four vectors: one broadcast each k */ \
                fa_win_vec_##S a0 = {0}, a1 = {0}, a2 = {0}, a3 = {0}, x0, x1, x2, x3;           \
                for (Py_ssize_t k = 0; k < n_in; k++) {                                          \
                    const T* xs = src + k * dim + p;                                             \
                    T ck = c[k * gk];                                                            \
                    memcpy(&x0, xs, 32); memcpy(&x1, xs + LANES, 32);                            \
                    memcpy(&x2, xs + 2 * LANES, 32); memcpy(&x3, xs + 3 * LANES, 32);            \
                    a0 += ck * x0; a1 += ck * x1; a2 += ck * x2; a3 += ck * x3;                  \
                }                                                                                \
                FA_WIN_PUT(S, y + p, a0); FA_WIN_PUT(S, y + p + LANES, a1);                      \
                FA_WIN_PUT(S, y + p + 2 * LANES, a2); FA_WIN_PUT(S, y + p + 3 * LANES, a3);      \
            }                                                                                    \
            for (; p + LANES <= dim; p += LANES) {                                               \
                fa_win_vec_##S acc = {0}, x;                                                     \
                for (Py_ssize_t k = 0; k < n_in; k++) {                                          \
                    memcpy(&x, src + k * dim + p, 32);                                           \
                    acc += c[k * gk] * x;                                                        \
                }                                                                                \
                FA_WIN_PUT(S, y + p, acc);                                                       \
            }                                                                                    \
            if (p + LANES / 2 <= dim) {                                                          \
                fa_win_half_##S acc = {0}, x, out;                                               \
                for (Py_ssize_t k = 0; k < n_in; k++) {                                          \
                    memcpy(&x, src + k * dim + p, 16);                                           \
                    acc += c[k * gk] * x;                                                        \
                }                                                                                \
                if (ids) { memcpy(&out, y + p, 16); out += scale * acc; }                        \
                else out = scale * acc;                                                          \
                memcpy(y + p, &out, 16);                                                         \
                p += LANES / 2;                                                                  \
            }                                                                                    \
            for (; p < dim; p++) {                                                               \
                T acc = 0;                                                                       \
                for (Py_ssize_t k = 0; k < n_in; k++) acc += c[k * gk] * src[k * dim + p];      \
                y[p] = ids ? y[p] + scale * acc : scale * acc;                                   \
            }                                                                                    \
        }                                                                                        \
    }
    FA_WINDOW_KERNELS(float, f, 8, fa_exp_negabsf)
    FA_WINDOW_KERNELS(double, d, 4, fa_exp_negabs)
    /* fa_window_rows_running: the context rows' SGD steps of a window, row i (of n, group gi)
     * stepped against the centre's row as the steps of rows 0..i-1 left it: W[ids[i]] +=
     * in_scale * (g[i, 0] * run + sum_{j >= 1} g[i, j] * (group gi's negative j)), then
     * run += out_scale * g[i, 0] * rows[i], run starting from `centre`; then the centre's
     * table row takes the n steps, centre_dst += run - centre. A chunk of two vectors of
     * the columns at a time, its part of the running centre held in registers over the n
     * rows (four vectors, or a row at a time with the running centre in memory, measured
     * slower): the pair form's order at the multiply-adds of the block's (the centre's
     * row summed here, not in the output rows' product). */
    #define FA_RUN_CHUNK(T, V, STEP, NV)                                                         \
    for (; p + (NV) * (STEP) <= dim; p += (NV) * (STEP)) {                                       \
        V run[NV], acc[NV], x, y;                                                                \
        for (int v = 0; v < (NV); v++) memcpy(&run[v], centre + p + v * (STEP), sizeof(V));      \
        Py_ssize_t gi = 0, next = first_next;                                                    \
        for (Py_ssize_t i = 0; i < n; i++) {                                                     \
            if (i == next) { gi++; next = fa_win_bound(gi + 1, n, groups); }                     \
            const T* c = g + i * m;                                                              \
            const T* negs = outs + (gi * m + 1) * dim + p;                                       \
            for (int v = 0; v < (NV); v++) acc[v] = c[0] * run[v];                               \
            for (Py_ssize_t j = 1; j < m; j++)                                                   \
                for (int v = 0; v < (NV); v++) {                                                 \
                    memcpy(&x, negs + (j - 1) * dim + v * (STEP), sizeof(V));                    \
                    acc[v] += c[j] * x;                                                          \
                }                                                                                \
            T* w = W + ids[i] * dim + p;                                                         \
            const T* r = rows + i * dim + p;                                                     \
            T up = out_scale * c[0];                                                             \
            for (int v = 0; v < (NV); v++) {                                                     \
                memcpy(&y, w + v * (STEP), sizeof(V)); y += in_scale * acc[v];                   \
                memcpy(w + v * (STEP), &y, sizeof(V));                                           \
                memcpy(&x, r + v * (STEP), sizeof(V)); run[v] += up * x;                         \
            }                                                                                    \
        }                                                                                        \
        for (int v = 0; v < (NV); v++) {                                                         \
            memcpy(&x, centre + p + v * (STEP), sizeof(V));                                      \
            memcpy(&y, centre_dst + p + v * (STEP), sizeof(V));                                  \
            y += run[v] - x;                                                                     \
            memcpy(centre_dst + p + v * (STEP), &y, sizeof(V));                                  \
        }                                                                                        \
    }
    #define FA_WINDOW_RUNNING(T, S, LANES)                                                       \
    FA_CLONED void fa_window_rows_running_##S(const T* g, Py_ssize_t n, Py_ssize_t m,            \
                                              Py_ssize_t groups, const T* centre, const T* outs, \
                                              const T* rows, Py_ssize_t dim, T* W,               \
                                              const int64_t* ids, T* centre_dst, T in_scale,     \
                                              T out_scale) {                                     \
        Py_ssize_t p = 0, first_next = fa_win_bound(1, n, groups);                               \
        FA_RUN_CHUNK(T, fa_win_vec_##S, LANES, 2)                                                \
        FA_RUN_CHUNK(T, fa_win_vec_##S, LANES, 1)                                                \
        FA_RUN_CHUNK(T, fa_win_half_##S, LANES / 2, 1)                                           \
        FA_RUN_CHUNK(T, T, 1, 1)                                                                 \
    }
    FA_WINDOW_RUNNING(float, f, 8)
    FA_WINDOW_RUNNING(double, d, 4)
    """
    Py_ssize_t fa_win_bound(Py_ssize_t g, Py_ssize_t n, Py_ssize_t groups) noexcept nogil
    void fa_window_rows_running_f(const float* g, Py_ssize_t n, Py_ssize_t m, Py_ssize_t groups,
                                  const float* centre, const float* outs, const float* rows, Py_ssize_t dim,
                                  float* W, const int64_t* ids, float* centre_dst, float in_scale,
                                  float out_scale) noexcept nogil
    void fa_window_rows_running_d(const double* g, Py_ssize_t n, Py_ssize_t m, Py_ssize_t groups,
                                  const double* centre, const double* outs, const double* rows, Py_ssize_t dim,
                                  double* W, const int64_t* ids, double* centre_dst, double in_scale,
                                  double out_scale) noexcept nogil
    double fa_window_row_loss_f(const float* s, Py_ssize_t m, float* t) noexcept nogil
    double fa_window_row_loss_d(const double* s, Py_ssize_t m, double* t) noexcept nogil
    void fa_window_scores_f(const float* W, const int64_t* context, Py_ssize_t n, const float* C,
                            const int64_t* target, Py_ssize_t groups, Py_ssize_t k, Py_ssize_t dim,
                            float* rows, float* outs, float* scores) noexcept nogil
    void fa_window_scores_d(const double* W, const int64_t* context, Py_ssize_t n, const double* C,
                            const int64_t* target, Py_ssize_t groups, Py_ssize_t k, Py_ssize_t dim,
                            double* rows, double* outs, double* scores) noexcept nogil
    void fa_window_rows_f(const float* g, Py_ssize_t gr, Py_ssize_t gk, Py_ssize_t n_out,
                          Py_ssize_t n_in, const float* src, Py_ssize_t dim, float* dst,
                          const int64_t* ids, float scale) noexcept nogil
    void fa_window_rows_d(const double* g, Py_ssize_t gr, Py_ssize_t gk, Py_ssize_t n_out,
                          Py_ssize_t n_in, const double* src, Py_ssize_t dim, double* dst,
                          const int64_t* ids, double scale) noexcept nogil


cdef inline void window_scores(const floating* W, const int64_t* context, Py_ssize_t n,
                               const floating* C, const int64_t* target, Py_ssize_t groups, Py_ssize_t k,
                               Py_ssize_t dim, floating* rows, floating* outs, floating* scores) noexcept nogil:
    if floating is float:
        fa_window_scores_f(W, context, n, C, target, groups, k, dim, rows, outs, scores)
    else:
        fa_window_scores_d(W, context, n, C, target, groups, k, dim, rows, outs, scores)


cdef inline void window_rows(const floating* g, Py_ssize_t gr, Py_ssize_t gk, Py_ssize_t n_out,
                             Py_ssize_t n_in, const floating* src, Py_ssize_t dim, floating* dst,
                             const int64_t* ids, floating scale) noexcept nogil:
    if floating is float:
        fa_window_rows_f(g, gr, gk, n_out, n_in, src, dim, dst, ids, scale)
    else:
        fa_window_rows_d(g, gr, gk, n_out, n_in, src, dim, dst, ids, scale)


cdef inline void window_rows_running(const floating* g, Py_ssize_t n, Py_ssize_t m, Py_ssize_t groups,
                                     const floating* centre, const floating* outs, const floating* rows,
                                     Py_ssize_t dim, floating* W, const int64_t* ids, floating* centre_dst,
                                     floating in_scale, floating out_scale) noexcept nogil:
    if floating is float:
        fa_window_rows_running_f(g, n, m, groups, centre, outs, rows, dim, W, ids, centre_dst, in_scale, out_scale)
    else:
        fa_window_rows_running_d(g, n, m, groups, centre, outs, rows, dim, W, ids, centre_dst, in_scale, out_scale)


# The node's buffers of rows: the context rows kept, the centre's and negatives' rows kept,
# then the gradients of each.
cdef enum:
    B_IN, B_OUT, B_IN_GRADS, B_OUT_GRADS
    N_BLOCKS


@cython.no_gc
@cython.final
cdef class WindowLoss(RowGather):
    """sum over i of weights[i] * sum over j of bce(W[context[i]] . C[target[j]], j == 0), the
    rows of weight 0 skipped: skip-gram's negative-sampling loss of a window whose context
    words share one target and its negatives (see the module's docstring)."""
    cdef Variable in_table, out_table, weights
    cdef IndexInput context, target
    cdef Py_ssize_t dim, slots, m, n_in_rows, n_out_rows
    cdef Py_ssize_t groups, k        # the groups of context rows, each with its own k negatives; m = 1 + k
    cdef Py_ssize_t block_rows       # the rows of each block: max(slots, groups * m)
    cdef Py_ssize_t n                # the context rows of the current example (weight != 0)
    cdef Py_ssize_t n_groups         # the groups of the current example: min(groups, n)
    cdef bint steps_in_place         # both tables' rows go to plain SGD row steps
    cdef bint sequential_centre      # in place: each context row steps against the centre as the rows before left it
    # the blocks (N_BLOCKS, block_rows, dim): the context rows, each group's centre and negatives
    # (groups * m rows, the centre's copied into each), then their gradients (the centre's and
    # each negative's once: 1 + groups * k rows); scores, exps and grads (slots, m); labels (m,); ids and
    # weights of the kept rows (slots,)
    cdef cnp.ndarray blocks, scores, exps, grads, labels, kept_ids, kept_weights
    cdef char* blocks_ptr
    cdef char* scores_ptr
    cdef char* exps_ptr
    cdef char* grads_ptr
    cdef char* labels_ptr
    cdef char* kept_ids_ptr
    cdef char* kept_weights_ptr

    cdef inline char* block(self, int kind) noexcept nogil:
        return self.blocks_ptr + kind * self.block_rows * self.dim * element_size(self.f64)

    cdef int routes_changed(self) except -1:
        self.steps_in_place = all(slot is not None and (<RowStep>slot).plain_sgd_rate() != NULL
                                  for slot in self.routes)
        return 0

    cdef int run_forward(self) except -1 nogil:
        check_ids(self, self.context, self.n_in_rows)
        check_ids(self, self.target, self.n_out_rows)
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """Copy the rows into the blocks, score them, and sum each row's losses by its weight."""
        cdef const int64_t* context = <const int64_t*>self.context.val_ptr
        cdef const floating* weights = <const floating*>self.weights.val_ptr
        cdef floating* scores = <floating*>self.scores_ptr
        cdef int64_t* kept_ids = <int64_t*>self.kept_ids_ptr
        cdef floating* kept_weights = <floating*>self.kept_weights_ptr
        cdef Py_ssize_t i, n = 0, m = self.m
        cdef double total = 0.0
        for i in range(self.slots):
            if weights[i] != 0:
                kept_ids[n], kept_weights[n] = context[i], weights[i]
                n += 1
        self.n = n
        self.n_groups = min(self.groups, n)
        window_scores(<const floating*>self.in_table.val_ptr, kept_ids, n,
                      <const floating*>self.out_table.val_ptr, <const int64_t*>self.target.val_ptr,
                      self.n_groups, self.k, self.dim, <floating*>self.block(B_IN), <floating*>self.block(B_OUT),
                      scores)
        for i in range(n):
            total += kept_weights[i] * row_loss(scores + i * m, m, <floating*>self.exps_ptr + i * m)
        y[0] = <floating>total
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<const double*>self.grad_ptr) if self.f64 else self._backward(<const float*>self.grad_ptr)

    cdef int _backward(self, const floating* gy) except -1 nogil:
        """The scores' gradient g (n x m), then the context rows' g C_block and the target
        rows' g^T W_block, both from the rows the forward kept, stepped or sent; with groups,
        each group's context rows against its own block of outs, the centre's row summed over
        all n context rows, each group's negatives over its own."""
        cdef floating* scores = <floating*>self.scores_ptr
        cdef floating* g = <floating*>self.grads_ptr
        cdef const floating* kept_weights = <const floating*>self.kept_weights_ptr
        cdef Py_ssize_t i, n = self.n, m = self.m
        for i in range(n):
            bce_row_backward(scores + i * m, <const floating*>self.labels_ptr,
                             <const floating*>self.exps_ptr + i * m, m, gy[0] * kept_weights[i], g + i * m)
        if self.steps_in_place and self.sequential_centre and n > 1:
            self._rows_running(g, <floating*>self.in_table.val_ptr, <floating*>self.out_table.val_ptr,
                                  <floating>-(<RowStep>self.route_ptrs[0]).plain_sgd_rate()[0],
                                  <floating>-(<RowStep>self.route_ptrs[1]).plain_sgd_rate()[0])
            (<RowStep>self.route_ptrs[0]).applied[0] = True
            (<RowStep>self.route_ptrs[1]).applied[0] = True
            return 0
        if self.steps_in_place:        # each row's step: its gradient summed in registers, added once
            self._rows(g, <floating*>self.in_table.val_ptr, <floating*>self.out_table.val_ptr, True,
                       <floating>-(<RowStep>self.route_ptrs[0]).plain_sgd_rate()[0],
                       <floating>-(<RowStep>self.route_ptrs[1]).plain_sgd_rate()[0])
            (<RowStep>self.route_ptrs[0]).applied[0] = True
            (<RowStep>self.route_ptrs[1]).applied[0] = True
            return 0
        cdef floating* in_grads = <floating*>self.block(B_IN_GRADS)
        cdef floating* out_grads = <floating*>self.block(B_OUT_GRADS)
        self._rows(g, in_grads, out_grads, False, 1, 1)
        if self.in_table.requires_grad:
            send_rows(self, 0, self.in_table, <const int64_t*>self.kept_ids_ptr, n, <char*>in_grads, self.dim)
        if self.out_table.requires_grad:
            send_rows(self, 1, self.out_table, <const int64_t*>self.target.val_ptr,
                      1 + self.n_groups * self.k, <char*>out_grads, self.dim)
        return 0

    cdef void _rows_running(self, const floating* g, floating* W, floating* C, floating in_scale,
                            floating out_scale) noexcept nogil:
        """The rows' SGD steps in place, each context row stepping against the centre's row as
        the steps of the rows before it left it (`sequential_centre`), the centre's row taking
        their n steps in the same pass; the negatives' rows as `_rows` steps them."""
        cdef const int64_t* target = <const int64_t*>self.target.val_ptr
        cdef const floating* rows = <const floating*>self.block(B_IN)
        cdef const floating* outs = <const floating*>self.block(B_OUT)
        cdef Py_ssize_t n = self.n, m = self.m, k = self.k, dim = self.dim, groups = self.n_groups
        cdef Py_ssize_t gi, lo, hi
        window_rows_running(g, n, m, groups, outs, outs, rows, dim, W, <const int64_t*>self.kept_ids_ptr,
                            C + target[0] * dim, in_scale, out_scale)      # the centre's row too
        for gi in range(groups):          # each group's negatives
            lo, hi = fa_win_bound(gi, n, groups), fa_win_bound(gi + 1, n, groups)
            window_rows(g + lo * m + 1, 1, m, k, hi - lo, rows + lo * dim, dim, C, target + 1 + gi * k, out_scale)

    cdef void _rows(self, const floating* g, floating* in_dst, floating* out_dst, bint tables,
                    floating in_scale, floating out_scale) noexcept nogil:
        """The context rows' gradients (g C_block, a group at a time) times in_scale and the
        target rows' (g^T W_block: the centre's, then each group's negatives) times
        out_scale: added into the tables' rows (`tables`), else written into in_dst's n
        rows and out_dst's 1 + n_groups k rows."""
        cdef const int64_t* kept_ids = <const int64_t*>self.kept_ids_ptr
        cdef const int64_t* target = <const int64_t*>self.target.val_ptr
        cdef const floating* rows = <const floating*>self.block(B_IN)
        cdef const floating* outs = <const floating*>self.block(B_OUT)
        cdef Py_ssize_t n = self.n, m = self.m, k = self.k, dim = self.dim, groups = self.n_groups
        cdef Py_ssize_t gi, lo, hi
        if groups <= 1:                # one block: the rows of the window against the same m
            window_rows(g, m, 1, n, m, outs, dim, in_dst, kept_ids if tables else NULL, in_scale)
            window_rows(g, 1, m, m, n, rows, dim, out_dst, target if tables else NULL, out_scale)
            return
        for gi in range(groups):
            lo, hi = fa_win_bound(gi, n, groups), fa_win_bound(gi + 1, n, groups)
            window_rows(g + lo * m, m, 1, hi - lo, m, outs + gi * m * dim, dim,
                        in_dst if tables else in_dst + lo * dim, kept_ids + lo if tables else NULL, in_scale)
        window_rows(g, 1, m, 1, n, rows, dim, out_dst, target if tables else NULL, out_scale)     # the centre
        for gi in range(groups):
            lo, hi = fa_win_bound(gi, n, groups), fa_win_bound(gi + 1, n, groups)
            window_rows(g + lo * m + 1, 1, m, k, hi - lo, rows + lo * dim, dim,
                        out_dst if tables else out_dst + (1 + gi * k) * dim,
                        target + 1 + gi * k if tables else NULL, out_scale)


def window_loss(in_table, context, weights, out_table, target, groups=1, sequential_centre=False):
    """Skip-gram's negative-sampling loss of one window with shared negatives (pWord2Vec):
    `sum_i weights[i] * (-log sigmoid(W[context[i]] . C[target[0]])
    - sum_{j >= 1} log sigmoid(-W[context[i]] . C[target[j]]))`, a scalar.

    `in_table` (W) and `out_table` (C) are float tables (rows, dim) of one dtype, usually
    Parameters; `context` a 1-D IndexInput of the window's slots (up to 2 * window ids),
    `weights` an Input of as many values of the tables' dtype (1 for a context word, 0 for
    an empty slot: its row is not read, and gets no gradient), `target` a 1-D IndexInput
    of 1 + k ids: the centre word, then its k negatives, which every context word shares.
    What `take`, a matmul and `bce_with_logits` compute, in one node that copies the
    n + 1 + k rows once; the scores are one (n x (1 + k)) product and the two gradients two
    more. Gradients are sparse (rows of W and C; repeated ids add); under `fastad.train`'s
    plain SGD the rows take their step inside backward, in place (a row repeated within an
    example takes one step per occurrence, its sum to rounding), else they go to the
    tables' gradients or the optimizer's row step. CPU only.

    `groups` (default 1) splits the window's context words into that many groups, each with
    k negatives of its own: `target` then holds the centre and `groups` runs of k negatives
    (1 + groups * k ids), and the n context words of the example (those of weight != 0, in
    slot order) go in order to the groups, group g taking words g n // groups up to
    (g + 1) n // groups, each scored against the centre and its own k negatives (with
    fewer words than groups, the first n groups, one word each; the other negatives are not
    read). Still n (1 + k) scores, the rows of all groups copied once; the window's pairs
    draw `groups` times as many distinct negatives.

    `sequential_centre=True` changes the rows' in-place SGD step only (under `fastad.train`'s
    plain SGD; the gradients sent to another optimizer are the loss's, as without it): the
    centre's row is stepped after each context word in turn, as word2vec's pair form steps
    it, and context word i steps against the centre's row as the steps of words 0..i-1 left
    it (its scores, and so its gradient, are the block's, as the window found it: scoring
    it against the stepped row too moved the neighbours no further); the negatives' steps
    are the block's. The loss is the window's as the forward found it. `Word2Vec(shared_negatives=True)` trains so:
    with the centre's n steps taken together from the row as the window found it, its
    neighbours drifted from gensim's by more than the issue's 0.05 (docs/guide/models.md).

    >>> ctx, wts, tgt = fa.IndexInput([0] * 10), fa.Input(np.zeros(10)), fa.IndexInput([0] * 6)
    >>> loss = window_loss(W, ctx, wts, C, tgt)
    >>> fa.train(loss, opt, fa.data.SharedNegativeSampler(tokens, ctx, wts, tgt, window=5, seed=0))
    """
    cdef str op = "window_loss"
    cdef Variable W, C
    if isinstance(groups, bool) or not isinstance(groups, (int, np.integer)):
        raise TypeError(f"{op}: groups must be an int (the groups of context words, each with its "
                        f"own negatives), got {type(groups).__name__}")
    if groups < 1:
        raise ValueError(f"{op}: groups must be >= 1 (the groups of context words, each with its "
                         f"own negatives), got {groups}")
    groups = int(groups)
    if not isinstance(sequential_centre, (bool, np.bool_)):
        raise TypeError(f"{op}: sequential_centre must be a bool, got {type(sequential_centre).__name__}")
    W, C = row_tables(op, "in_table", in_table, "out_table", out_table)
    cdef IndexInput ctx = as_ids(op, "context", context, W.device)
    cdef IndexInput tgt = as_ids(op, "target", target, C.device)
    if len(ctx._shape) != 1 or ctx.size == 0:
        raise ValueError(f"{op}: context must be a non-empty 1-D IndexInput (the window's slots), "
                         f"got shape {ctx._shape}")
    if len(tgt._shape) != 1 or tgt.size == 0:
        raise ValueError(f"{op}: target must be a non-empty 1-D IndexInput (the centre, then its "
                         f"negatives), got shape {tgt._shape}")
    if not isinstance(weights, Input) or (<Variable>weights).size != ctx.size or weights.requires_grad:
        raise ValueError(f"{op}: weights must be an Input of {ctx.size} values (one per slot of context) "
                         f"that takes no gradient, got {weights!r}")
    if (tgt.size - 1) % groups or tgt.size - 1 < groups:
        raise ValueError(f"{op}: target must hold the centre, then k >= 1 negatives for each of the "
                         f"{groups} group(s) (1 + {groups} * k ids), got {tgt.size} ids")
    same_dtype(op, W, <Variable>weights)
    if backend_among((W, C, ctx, tgt, weights)) is not None:
        raise ValueError(f"{op}: the tables and leaves must be on the CPU: window_loss has no GPU path")
    cdef WindowLoss node = WindowLoss.__new__(WindowLoss)
    node.in_table, node.out_table, node.weights = W, C, weights
    node.context, node.target = ctx, tgt
    node.groups, node.k = groups, (tgt.size - 1) // groups
    node.sequential_centre = sequential_centre
    node.dim, node.slots, node.m = W._shape[1], ctx.size, 1 + node.k
    node.n_in_rows, node.n_out_rows = W._shape[0], C._shape[0]
    init_node(node, op, (W, ctx, weights, C, tgt), (), W.f64)
    node.gathers((W, C), ((ctx, W), (tgt, C)))
    dtype = np.float64 if W.f64 else np.float32
    cdef Py_ssize_t rows = max(node.slots, node.groups * node.m)
    node.block_rows = rows
    node.blocks = keep_data(empty_buffer((N_BLOCKS, rows, node.dim), dtype), &node.blocks_ptr)
    node.scores = keep_data(empty_buffer((node.slots, node.m), dtype), &node.scores_ptr)
    node.exps = keep_data(empty_buffer((node.slots, node.m), dtype), &node.exps_ptr)
    node.grads = keep_data(empty_buffer((node.slots, node.m), dtype), &node.grads_ptr)
    node.labels = keep_data(np.zeros(node.m, dtype=dtype), &node.labels_ptr)
    node.labels[0] = 1
    node.kept_ids = keep_data(empty_buffer((node.slots,), np.int64), &node.kept_ids_ptr)
    node.kept_weights = keep_data(empty_buffer((node.slots,), dtype), &node.kept_weights_ptr)
    return finish(node)

/* The kernels of the fused ranking node (fastad/ops/ranking.pyx): the margins of pairwise
 * ranking examples with the rows their backward keeps, the L2 terms, and one triple's plain SGD
 * steps. It needs fa_dot_f/fa_dot_d (fastad/_engine/loops.pxd, cimported before it). */
#ifndef FASTAD_RANKING_H
#define FASTAD_RANKING_H
#include <string.h>
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

#endif

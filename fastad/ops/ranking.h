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
 * the backward: the values of a gather, a difference and fa_dot, in one loop. With
 * PENALTIES (1 in fa_margin_penalty_rows, 0 in fa_margin_plain_rows: a constant, so each
 * keeps its own code), also penalties[k] = |U[users[k]]|^2 + |V[pos[k]]|^2 + |V[neg[k]]|^2
 * (+ bias[pos[k]]^2 + bias[neg[k]]^2 unless bias is NULL), twice triple k's L2 term over
 * r, summed in the same pass over the rows (in lanes, then across them). fa_margin_rows
 * takes the first when penalties is not NULL. */
#define FA_MARGIN_ROWS(T, S, NAME, PENALTIES)                                            \
FA_CLONED FA_NO_LIBRARY_COPY                                                             \
void NAME##_##S(const T* U, const T* V, const T* bias, const int64_t* users,             \
                const int64_t* pos, const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,    \
                T* __restrict user_rows, T* __restrict differences,                      \
                T* __restrict margins, T* __restrict penalties) {                        \
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
        if (PENALTIES) memset(&squares, 0, sizeof squares);                              \
        Py_ssize_t i = 0;                                                                \
        FA_IN_BLOCKS(T, i, dim) {                                                        \
            fa_block ub = FA_BLOCK_OF(ur, i), pb = FA_BLOCK_OF(pr, i), nb = FA_BLOCK_OF(nr, i); \
            FA_BLOCK_AT(u, i) = ub;                                                      \
            FA_BLOCK_AT(d, i) = pb - nb;                                                 \
            if (PENALTIES) squares += ub * ub + pb * pb + nb * nb;                       \
        }                                                                                \
        for (; i < dim; i++) {                                                           \
            u[i] = ur[i]; d[i] = pr[i] - nr[i];                                          \
            if (PENALTIES) total += ur[i] * ur[i] + pr[i] * pr[i] + nr[i] * nr[i];       \
        }                                                                                \
        T m = fa_dot_##S(u, d, dim);                                                     \
        margins[k] = bias ? m + (bias[pos[k]] - bias[neg[k]]) : m;                       \
        if (PENALTIES) {                                                                 \
            memcpy(lanes, &squares, sizeof lanes);                                       \
            for (size_t l = 0; l < sizeof(fa_block) / sizeof(T); l++) total += lanes[l]; \
            if (bias) total += bias[pos[k]] * bias[pos[k]] + bias[neg[k]] * bias[neg[k]]; \
            penalties[k] = total;                                                        \
        }                                                                                \
    }                                                                                    \
}
#define FA_MARGIN_ROWS_OF(T, S)                                                          \
FA_MARGIN_ROWS(T, S, fa_margin_plain_rows, 0)                                            \
FA_MARGIN_ROWS(T, S, fa_margin_penalty_rows, 1)                                          \
static inline void fa_margin_rows_##S(const T* U, const T* V, const T* bias,             \
                                      const int64_t* users, const int64_t* pos,          \
                                      const int64_t* neg, Py_ssize_t n, Py_ssize_t dim,  \
                                      T* user_rows, T* differences, T* margins,          \
                                      T* penalties) {                                    \
    if (penalties)                                                                       \
        fa_margin_penalty_rows_##S(U, V, bias, users, pos, neg, n, dim, user_rows,       \
                                   differences, margins, penalties);                     \
    else                                                                                 \
        fa_margin_plain_rows_##S(U, V, bias, users, pos, neg, n, dim, user_rows,         \
                                 differences, margins, penalties);                       \
}
FA_MARGIN_ROWS_OF(float, f)
FA_MARGIN_ROWS_OF(double, d)

/* One triple's plain SGD steps in one call (the ranking node's backward when its tables'
 * rows go to plain SGD row steps): unless bias is NULL, bias[neg] += a_bias * -g,
 * bias[pos] += a_bias * g; then neg_row += a_item * (-g * u), pos_row += a_item * (g * u),
 * user_row += a_user * (g * d), each rounded as fa_sgd_rows and fa_sgd_scaled_rows round
 * them. Element i of a row depends only on element i of the forward's copies u and d,
 * and takes its steps in the order of the separate calls (biases, negative, positive,
 * user), so the values are theirs bit for bit even when rows coincide (pos == neg, or
 * one table for users and items): the rows are not restrict, and the compiler checks for
 * overlap.
 * With the L2 term of regularization r (fa_margin_l2_step; TERM is FA_L2_TERM there,
 * FA_NO_TERM in fa_margin_plain_step), each step adds r times the row's value, as
 * implicit's bpr.pyx takes it: neg_row += a_item * (-g * u + r * neg_row), ... and
 * user_row += a_user * (g * d + r * u). Each row's term reads its value before this
 * triple's writes (u is the forward's copy of the user row), as the gradient at the
 * forward's values says, so coinciding rows take the general path's steps.
 * fa_margin_step takes the second when `regularized`. */
#define FA_NO_TERM(x)
#define FA_L2_TERM(x) + r * (x)
#define FA_MARGIN_STEP(T, S, NAME, TERM)                                                 \
FA_CLONED void NAME##_##S(T* user_row, T* pos_row, T* neg_row, T* bias, int64_t pos,     \
                          int64_t neg, const T* __restrict u, const T* __restrict d, T g, \
                          T r, Py_ssize_t dim, T a_user, T a_item, T a_bias) {           \
    T ng = -g;                                                                           \
    if (bias) {                                                                          \
        T bp = bias[pos], bn = bias[neg];                                                \
        (void)bp; (void)bn;                                                              \
        bias[neg] += a_bias * (ng TERM(bn));                                             \
        bias[pos] += a_bias * (g TERM(bp));                                              \
    }                                                                                    \
    FA_BLOCK_TYPE(T)                                                                     \
    Py_ssize_t i = 0;                                                                    \
    FA_IN_BLOCKS(T, i, dim) {                                                            \
        fa_block ui = FA_BLOCK_OF(u, i);                                                 \
        fa_block p0 = FA_BLOCK_OF(pos_row, i), n0 = FA_BLOCK_OF(neg_row, i);             \
        (void)p0; (void)n0;                                                              \
        FA_BLOCK_AT(neg_row, i) += a_item * (ng * ui TERM(n0));                          \
        FA_BLOCK_AT(pos_row, i) += a_item * (g * ui TERM(p0));                           \
        FA_BLOCK_AT(user_row, i) += a_user * (g * FA_BLOCK_OF(d, i) TERM(ui));           \
    }                                                                                    \
    for (; i < dim; i++) {                                                               \
        T p0 = pos_row[i], n0 = neg_row[i];                                              \
        (void)p0; (void)n0;                                                              \
        neg_row[i] += a_item * (ng * u[i] TERM(n0));                                     \
        pos_row[i] += a_item * (g * u[i] TERM(p0));                                      \
        user_row[i] += a_user * (g * d[i] TERM(u[i]));                                   \
    }                                                                                    \
}
#define FA_MARGIN_STEP_OF(T, S)                                                          \
FA_MARGIN_STEP(T, S, fa_margin_plain_step, FA_NO_TERM)                                   \
FA_MARGIN_STEP(T, S, fa_margin_l2_step, FA_L2_TERM)                                      \
static inline void fa_margin_step_##S(T* user_row, T* pos_row, T* neg_row, T* bias,      \
                                      int64_t pos, int64_t neg, const T* u, const T* d,  \
                                      T g, int regularized, T r, Py_ssize_t dim,         \
                                      T a_user, T a_item, T a_bias) {                    \
    if (regularized)                                                                     \
        fa_margin_l2_step_##S(user_row, pos_row, neg_row, bias, pos, neg, u, d, g, r, dim, \
                              a_user, a_item, a_bias);                                   \
    else                                                                                 \
        fa_margin_plain_step_##S(user_row, pos_row, neg_row, bias, pos, neg, u, d, g, r, \
                                 dim, a_user, a_item, a_bias);                           \
}
FA_MARGIN_STEP_OF(float, f)
FA_MARGIN_STEP_OF(double, d)

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

/* Plain SGD's row kernels (fastad/optim/optimizers.pyx): the sparse step of SGD without
 * momentum or weight decay, and its row step inside backward (SGDRowStep). */
#ifndef FASTAD_SGD_ROWS_H
#define FASTAD_SGD_ROWS_H
#include <stdint.h>
#include "clones.h"

/* Plain SGD on rows rows[k] of p, k < n_rows: p row += a * (gradient row k), where the
 * gradient row is g row k (fa_sgd_rows) or coefs[k] * x row k, never stored but rounded
 * as if it had been (c * x first), so the two give the same values bit for bit
 * (fa_sgd_scaled_rows; with `marks`, only the rows r whose marks[r] is FA_NAMED_ONCE).
 * One call for all the rows: no call per row. */
#define FA_NAMED_ONCE (-2)
#define FA_SGD_ROWS(T, S)                                                               \
FA_CLONED void fa_sgd_rows_##S(T* __restrict p, const T* __restrict g,                   \
                               const int64_t* rows, Py_ssize_t n_rows, Py_ssize_t len, T a) { \
    if (len == 1) {     /* a bias: no row loop to set up per value */                    \
        for (Py_ssize_t k = 0; k < n_rows; k++) p[rows[k]] += a * g[k];                  \
        return;                                                                          \
    }                                                                                    \
    for (Py_ssize_t k = 0; k < n_rows; k++) {                                            \
        T* __restrict y = p + rows[k] * len;                                             \
        const T* __restrict x = g + k * len;                                             \
        for (Py_ssize_t i = 0; i < len; i++) y[i] += a * x[i];                           \
    }                                                                                    \
}                                                                                        \
static inline void fa_sgd_scaled_row_##S(T* __restrict y, const T* __restrict x, T c,    \
                                         Py_ssize_t len, T a) {                          \
    for (Py_ssize_t i = 0; i < len; i++) y[i] += a * (c * x[i]);                         \
}                                                                                        \
FA_CLONED void fa_sgd_scaled_rows_##S(T* __restrict p, const T* __restrict x,            \
                                      const T* coefs, const int64_t* rows,               \
                                      Py_ssize_t n_rows, Py_ssize_t len,                 \
                                      Py_ssize_t per_x, const int32_t* marks, T a) {     \
    const T* __restrict xk = x;                                                          \
    Py_ssize_t left = per_x;            /* the rows xk serves still */                   \
    if (marks) {                                                                         \
        for (Py_ssize_t k = 0; k < n_rows; k++) {                                        \
            if (marks[rows[k]] == FA_NAMED_ONCE)                                         \
                fa_sgd_scaled_row_##S(p + rows[k] * len, xk, coefs[k], len, a);          \
            if (--left == 0) { xk += len; left = per_x; }                                \
        }                                                                                \
    } else if (per_x == 1) {    /* the common case, without the marks and the count */   \
        for (Py_ssize_t k = 0; k < n_rows; k++)                                          \
            fa_sgd_scaled_row_##S(p + rows[k] * len, x + k * len, coefs[k], len, a);     \
    } else {                                                                             \
        for (Py_ssize_t k = 0; k < n_rows; k++) {                                        \
            fa_sgd_scaled_row_##S(p + rows[k] * len, xk, coefs[k], len, a);              \
            if (--left == 0) { xk += len; left = per_x; }                                \
        }                                                                                \
    }                                                                                    \
}
FA_SGD_ROWS(float, f)
FA_SGD_ROWS(double, d)

#endif

/* The kernel of gather_dot's node (fastad/ops/gather_dot.pyx). It needs fa_dot_f/fa_dot_d
 * (fastad/_engine/loops.pxd, cimported before it). */
#ifndef FASTAD_GATHER_DOT_H
#define FASTAD_GATHER_DOT_H
#include "clones.h"
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

#endif

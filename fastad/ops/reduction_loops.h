/* Sum's and mean's loops over contiguous rows (fastad/ops/reduction.pyx), with AVX2
 * clones (clones.h). Each adds in the order the reduction's Cython walk has always added:
 * a folded row in LANES interleaved partial sums merged in lane order, then its tail; a
 * kept row element by element; so every clone, and every CPU, gives the same values. */
#ifndef FASTAD_REDUCTION_LOOPS_H
#define FASTAD_REDUCTION_LOOPS_H

#include <stddef.h>
#include "clones.h"

#define FA_SUM_LANES 8
#define FA_SUM_BLOCK 32    /* columns of a column sum held in registers at once */

#define FA_REDUCTION_LOOPS(T, S)                                                           \
/* acc + x[0] + ... + x[n-1], rows of 2 * FA_SUM_LANES and more in FA_SUM_LANES lanes. */     \
static inline T fa_fold_sum_##S(const T* restrict x, ptrdiff_t n, T acc) {                \
    T lanes[FA_SUM_LANES] = {0};                                                          \
    ptrdiff_t i = 0, l;                                                                   \
    if (n >= 2 * FA_SUM_LANES) {                                                          \
        for (; i + FA_SUM_LANES <= n; i += FA_SUM_LANES)                                  \
            for (l = 0; l < FA_SUM_LANES; l++) lanes[l] += x[i + l];                       \
        for (l = 0; l < FA_SUM_LANES; l++) acc += lanes[l];                               \
    }                                                                                     \
    for (; i < n; i++) acc += x[i];                                                       \
    return acc;                                                                           \
}                                                                                         \
/* acc[i] + x[i] + x[x_step + i] + ... over `rows` rows, for the columns i of [from, to), \
 * block by block of `width` columns held in registers (a row added into acc in memory     \
 * would wait on the store of the row before). */                                         \
static inline ptrdiff_t fa_sum_columns_##S(const T* restrict x, ptrdiff_t rows,            \
                                           ptrdiff_t x_step, T* restrict acc,              \
                                           ptrdiff_t from, ptrdiff_t to, ptrdiff_t width) { \
    ptrdiff_t c = from;                                                                   \
    for (; c + width <= to; c += width) {                                                 \
        T part[FA_SUM_BLOCK];                                                             \
        for (ptrdiff_t l = 0; l < width; l++) part[l] = acc[c + l];                       \
        for (ptrdiff_t r = 0; r < rows; r++)                                              \
            for (ptrdiff_t l = 0; l < width; l++) part[l] += x[r * x_step + c + l];       \
        for (ptrdiff_t l = 0; l < width; l++) acc[c + l] = part[l];                       \
    }                                                                                     \
    return c;                                                                             \
}                                                                                         \
/* Rows r < rows of n values, x + r * x_step: each folded into acc[r * acc_step] (`folds`)  \
 * or added into the row acc + r * acc_step, in row order. One call for all the rows. */  \
FA_CLONED void fa_sum_rows_##S(const T* x, ptrdiff_t rows, ptrdiff_t n, ptrdiff_t x_step,  \
                               T* acc, ptrdiff_t acc_step, int folds) {                   \
    if (!folds && acc_step == 0 && rows > 1) {      /* every row into one: a column sum */ \
        ptrdiff_t c = fa_sum_columns_##S(x, rows, x_step, acc, 0, n, FA_SUM_BLOCK);        \
        c = fa_sum_columns_##S(x, rows, x_step, acc, c, n, FA_SUM_LANES);                  \
        fa_sum_columns_##S(x, rows, x_step, acc, c, n, 1);                                 \
        return;                                                                           \
    }                                                                                     \
    for (ptrdiff_t r = 0; r < rows; r++) {                                                \
        const T* restrict xr = x + r * x_step;                                            \
        T* restrict ar = acc + r * acc_step;                                              \
        if (folds) ar[0] = fa_fold_sum_##S(xr, n, ar[0]);                                 \
        else for (ptrdiff_t i = 0; i < n; i++) ar[i] = ar[i] + xr[i];                     \
    }                                                                                     \
}                                                                                         \
/* The gradient of those rows: row r of g (g + r * g_step) = (or +=, `add`) its slot's     \
 * gradient gy[r * gy_step] * scale spread over it (`folds`), or the row gy + r * gy_step  \
 * times scale. */                                                                        \
FA_CLONED void fa_spread_rows_##S(T* g, ptrdiff_t rows, ptrdiff_t n, ptrdiff_t g_step,    \
                                  const T* gy, ptrdiff_t gy_step, T scale, int folds,     \
                                  int add) {                                              \
    for (ptrdiff_t r = 0; r < rows; r++) {                                                \
        T* restrict gr = g + r * g_step;                                                  \
        const T* restrict gyr = gy + r * gy_step;                                         \
        ptrdiff_t i;                                                                      \
        if (folds) {                                                                      \
            T v = gyr[0] * scale;                                                         \
            if (add) for (i = 0; i < n; i++) gr[i] += v;                                  \
            else for (i = 0; i < n; i++) gr[i] = v;                                       \
        } else if (add) {                                                                 \
            for (i = 0; i < n; i++) gr[i] += gyr[i] * scale;                              \
        } else {                                                                          \
            for (i = 0; i < n; i++) gr[i] = gyr[i] * scale;                               \
        }                                                                                 \
    }                                                                                     \
}

FA_REDUCTION_LOOPS(float, f)
FA_REDUCTION_LOOPS(double, d)

#endif

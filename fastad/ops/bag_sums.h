/* The loops of embedding_bag's node (fastad/ops/sparse.pyx) and of WarpSampler's feature bags
 * (fastad/models/recsys/_pairs.pyx). A bag's rows summed: each element's products added in
 * the bag's order from zero, the values of `out[j] = 0; out[j] += w[k] * row_k[j]` row after
 * row. The sums of a tile of 8 vectors of
 * 32 bytes (64 floats, 32 doubles) stay in registers while each row's part is read once, then
 * a tile of 2, then one element at a time: the elements are independent, so the values are
 * the same; the AVX2 clone takes no FMA (clones.h), so every CPU gives the same values. A
 * bag of the model's rows was written back to memory after each row before (a load, an add
 * and a store an element a row), the most of the node's time. */
#ifndef FASTAD_BAG_SUMS_H
#define FASTAD_BAG_SUMS_H
#include <stdint.h>
#include <string.h>
#include "clones.h"

#if defined(__GNUC__)
typedef float fa_bag_vec_f __attribute__((vector_size(32), aligned(4), may_alias));
typedef double fa_bag_vec_d __attribute__((vector_size(32), aligned(8), may_alias));
#define FA_BAG_INLINE inline __attribute__((always_inline))
#define FA_BAG_TILED 1
#else
typedef float fa_bag_vec_f;
typedef double fa_bag_vec_d;
#define FA_BAG_INLINE inline
#define FA_BAG_TILED 0
#endif
#define FA_BAG_TILE 8           /* vectors of a tile: 64 floats, 32 doubles */

/* FA_BAG_SUM_LOOPS(T, VEC, ID, W, tag): the loops of a bag of rows of a T table (VEC: its
 * vector of 32 bytes), ids of type ID, weights of type W (each taken as a T):
 * fa_bag_sum_<tag>(out, table, ids, weights, count, len): out[0:len] = the sum over k < count
 * of weights[k] * table[ids[k] * len:][0:len] (weights NULL: the rows' plain sum; count 0:
 * zeros); fa_bag_sum_lanes_<tag>, the sums over elements [j, j + lanes vectors) into
 * sums[0:lanes] (always inlined: `lanes` a constant, the sums stay in registers), and
 * fa_bag_sum_element_<tag>, the sum at element j, for loops that go on with the sums
 * (WarpSampler's scores, fastad/models/recsys/_pairs.pyx). */
#define FA_BAG_SUM_LOOPS(T, VEC, ID, W, tag)                                                 \
static FA_BAG_INLINE T fa_bag_sum_element_##tag(const T* table, const ID* ids, const W* weights, \
                                                Py_ssize_t count, Py_ssize_t len, Py_ssize_t j) { \
    T sum = 0;                                                                               \
    for (Py_ssize_t k = 0; k < count; k++)                                                   \
        sum += weights ? (T)weights[k] * table[(int64_t)ids[k] * len + j]                    \
                       : table[(int64_t)ids[k] * len + j];                                   \
    return sum;                                                                              \
}                                                                                            \
static FA_BAG_INLINE void fa_bag_sum_lanes_##tag(const T* table, const ID* ids, const W* weights, \
                                                 Py_ssize_t count, Py_ssize_t len, Py_ssize_t j, \
                                                 VEC* sums, int lanes) {                     \
    const Py_ssize_t L = sizeof(VEC) / sizeof(T);                                            \
    for (int l = 0; l < lanes; l++) sums[l] = (VEC){0};                                      \
    for (Py_ssize_t k = 0; k < count; k++) {                                                 \
        const T* row = table + (int64_t)ids[k] * len + j;                                    \
        if (weights) {                                                                       \
            T w = (T)weights[k];                                                             \
            for (int l = 0; l < lanes; l++) sums[l] += w * *(const VEC*)(row + l * L);       \
        } else {                                                                             \
            for (int l = 0; l < lanes; l++) sums[l] += *(const VEC*)(row + l * L);           \
        }                                                                                    \
    }                                                                                        \
}                                                                                            \
FA_CLONED void fa_bag_sum_##tag(T* __restrict out, const T* table, const ID* ids,            \
                                const W* weights, Py_ssize_t count, Py_ssize_t len) {        \
    Py_ssize_t j = 0;                                                                        \
    const Py_ssize_t L = sizeof(VEC) / sizeof(T);                                            \
    for (; FA_BAG_TILED && j + FA_BAG_TILE * L <= len; j += FA_BAG_TILE * L) {               \
        VEC tile[FA_BAG_TILE];                                                               \
        fa_bag_sum_lanes_##tag(table, ids, weights, count, len, j, tile, FA_BAG_TILE);       \
        memcpy(out + j, tile, sizeof tile);                                                  \
    }                                                                                        \
    for (; FA_BAG_TILED && j + 2 * L <= len; j += 2 * L) {                                   \
        VEC pair[2];                                                                         \
        fa_bag_sum_lanes_##tag(table, ids, weights, count, len, j, pair, 2);                 \
        memcpy(out + j, pair, sizeof pair);                                                  \
    }                                                                                        \
    for (; j < len; j++) out[j] = fa_bag_sum_element_##tag(table, ids, weights, count, len, j); \
}

FA_BAG_SUM_LOOPS(float, fa_bag_vec_f, int64_t, float, f)
FA_BAG_SUM_LOOPS(double, fa_bag_vec_d, int64_t, double, d)

/* The backward's rows: fa_bag_spread_<f|d>(rows, grad, weights, scale, count, len): row k of
 * `rows` (k < count, len elements each) = grad[0:len] * weights[k] (weights NULL: * scale), in
 * the AVX2 clone eight floats a store. */
#define FA_BAG_SPREAD(T, S)                                                                  \
FA_CLONED void fa_bag_spread_##S(T* __restrict rows, const T* __restrict grad,                \
                                 const T* weights, T scale, Py_ssize_t count, Py_ssize_t len) { \
    for (Py_ssize_t k = 0; k < count; k++) {                                                 \
        T w = weights ? weights[k] : scale;                                                  \
        for (Py_ssize_t j = 0; j < len; j++) rows[k * len + j] = grad[j] * w;                \
    }                                                                                        \
}
FA_BAG_SPREAD(float, f)
FA_BAG_SPREAD(double, d)

#endif

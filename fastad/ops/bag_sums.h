/* The loops of embedding_bag's node (fastad/ops/sparse.pyx). Its forward: a bag's rows summed, each
 * element's products added in the bag's order from zero, the values of
 * `out[j] = 0; out[j] += w[k] * row_k[j]` row after row. The sums of a tile of 8 vectors of
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
#define FA_BAG_INLINE inline
#define FA_BAG_TILED 0
#endif

/* fa_bag_sum_<f|d>(out, table, ids, weights, count, len): out[0:len] = the sum over k < count
 * of weights[k] * table[ids[k] * len:][0:len] (weights NULL: the rows' plain sum; count 0:
 * zeros). */
#define FA_BAG_SUMS(T, S)                                                                    \
static FA_BAG_INLINE T fa_bag_sum_element_##S(const T* table, const int64_t* ids,            \
                                              const T* weights, Py_ssize_t count,            \
                                              Py_ssize_t len, Py_ssize_t j) {                \
    T sum = 0;                                                                               \
    for (Py_ssize_t k = 0; k < count; k++)                                                   \
        sum += weights ? weights[k] * table[ids[k] * len + j] : table[ids[k] * len + j];     \
    return sum;                                                                              \
}                                                                                            \
FA_BAG_SUM_TILES(T, S)                                                                       \
FA_CLONED void fa_bag_sum_##S(T* __restrict out, const T* table, const int64_t* ids,         \
                              const T* weights, Py_ssize_t count, Py_ssize_t len) {          \
    Py_ssize_t j = 0;                                                                        \
    FA_BAG_SUM_TILED_PART(S)                                                                 \
    for (; j < len; j++) out[j] = fa_bag_sum_element_##S(table, ids, weights, count, len, j); \
}

#if FA_BAG_TILED
/* the bag's sums over elements [j, j + lanes vectors) into sums[0:lanes] (always inlined:
 * `lanes` a constant, the sums stay in registers) */
#define FA_BAG_SUM_TILES(T, S)                                                               \
static FA_BAG_INLINE void fa_bag_sum_lanes_##S(const T* table, const int64_t* ids,           \
                                               const T* weights, Py_ssize_t count,           \
                                               Py_ssize_t len, Py_ssize_t j,                 \
                                               fa_bag_vec_##S* sums, int lanes) {            \
    const Py_ssize_t L = sizeof(fa_bag_vec_##S) / sizeof(T);                                 \
    for (int l = 0; l < lanes; l++) sums[l] = (fa_bag_vec_##S){0};                           \
    for (Py_ssize_t k = 0; k < count; k++) {                                                 \
        const T* row = table + ids[k] * len + j;                                             \
        if (weights) {                                                                       \
            T w = weights[k];                                                                \
            for (int l = 0; l < lanes; l++) sums[l] += w * *(const fa_bag_vec_##S*)(row + l * L); \
        } else {                                                                             \
            for (int l = 0; l < lanes; l++) sums[l] += *(const fa_bag_vec_##S*)(row + l * L); \
        }                                                                                    \
    }                                                                                        \
}
#define FA_BAG_SUM_TILED_PART(S)                                                             \
    {                                                                                        \
        const Py_ssize_t L = sizeof(fa_bag_vec_##S) / sizeof(*out);                          \
        for (; j + 8 * L <= len; j += 8 * L) {                                               \
            fa_bag_vec_##S tile[8];                                                          \
            fa_bag_sum_lanes_##S(table, ids, weights, count, len, j, tile, 8);               \
            memcpy(out + j, tile, sizeof tile);                                              \
        }                                                                                    \
        for (; j + 2 * L <= len; j += 2 * L) {                                               \
            fa_bag_vec_##S pair[2];                                                          \
            fa_bag_sum_lanes_##S(table, ids, weights, count, len, j, pair, 2);               \
            memcpy(out + j, pair, sizeof pair);                                              \
        }                                                                                    \
    }
#else
#define FA_BAG_SUM_TILES(T, S)
#define FA_BAG_SUM_TILED_PART(S)
#endif

FA_BAG_SUMS(float, f)
FA_BAG_SUMS(double, d)

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

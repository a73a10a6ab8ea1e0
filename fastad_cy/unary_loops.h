/* Whole-buffer loops over the unary table of rules.h, for the CPU (host C only).
 *
 * The rule's switch on the op code, left inside a loop, keeps every op scalar. Here
 * each op code up to 31 gets its own loop in which the code is a constant, so the
 * compiler folds the switch away and vectorises what the rule allows (relu, the
 * scalar ops, clamps, ...); higher codes, if the table grows past 31, take the
 * generic loop. No rule is written here: this file only places the loops. */
#ifndef FASTAD_UNARY_LOOPS_H
#define FASTAD_UNARY_LOOPS_H

#include <stddef.h>
#include "rules.h"

/* flatten: inline the rule into every loop (gcc would otherwise keep one call per element) */
#if defined(__GNUC__)
#define FA_FLATTEN __attribute__((flatten))
#else
#define FA_FLATTEN
#endif

#define FA_EACH_CODE(M, S) M(0, S) M(1, S) M(2, S) M(3, S) M(4, S) M(5, S) M(6, S) M(7, S) M(8, S) M(9, S) M(10, S) M(11, S) M(12, S) M(13, S) M(14, S) M(15, S) M(16, S) M(17, S) M(18, S) M(19, S) M(20, S) M(21, S) M(22, S) M(23, S) M(24, S) M(25, S) M(26, S) M(27, S) M(28, S) M(29, S) M(30, S) M(31, S)

#define FA_FORWARD_CASE(k, S) \
    case k: for (i = 0; i < n; i++) y[i] = fa_unary_value_##S(k, x[i], p); return;
#define FA_SLOPE_ADD_CASE(k, S) \
    case k: for (i = 0; i < n; i++) gx[i] += gy[i] * fa_unary_slope_##S(k, x[i], y[i], p); return;
#define FA_SLOPE_WRITE_CASE(k, S) \
    case k: for (i = 0; i < n; i++) gx[i] = gy[i] * fa_unary_slope_##S(k, x[i], y[i], p); return;

#define FA_UNARY_LOOPS(T, S)                                                                \
static inline FA_FLATTEN void fa_unary_forward_##S(int op, const T* x, T* y, ptrdiff_t n, T p) {      \
    ptrdiff_t i;                                                                            \
    switch (op) { FA_EACH_CODE(FA_FORWARD_CASE, S) }                                        \
    for (i = 0; i < n; i++) y[i] = fa_unary_value_##S(op, x[i], p);                         \
}                                                                                           \
static inline FA_FLATTEN void fa_unary_backward_##S(int op, const T* x, const T* y, const T* gy,      \
                                         T* gx, ptrdiff_t n, T p, int add) {               \
    ptrdiff_t i;                                                                            \
    if (add) {                                                                              \
        switch (op) { FA_EACH_CODE(FA_SLOPE_ADD_CASE, S) }                                  \
        for (i = 0; i < n; i++) gx[i] += gy[i] * fa_unary_slope_##S(op, x[i], y[i], p);     \
    } else {                                                                                \
        switch (op) { FA_EACH_CODE(FA_SLOPE_WRITE_CASE, S) }                                \
        for (i = 0; i < n; i++) gx[i] = gy[i] * fa_unary_slope_##S(op, x[i], y[i], p);      \
    }                                                                                       \
}

FA_UNARY_LOOPS(float, f)
FA_UNARY_LOOPS(double, d)

#endif

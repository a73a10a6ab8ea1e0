/* Whole-buffer loops over the unary, binary and pointwise-loss tables of rules.h, for
 * the CPU (host C only).
 *
 * A rule's switch on the op code, left inside a loop, keeps every op scalar. Here
 * each op code gets its own loop in which the code is a constant, so the compiler
 * folds the switch away and vectorises what the rule allows (relu, + - *, clamps,
 * ...); unary codes above 31, if the table grows past them, take the generic loop.
 * No rule is written here: this file only places the loops. */
#ifndef FASTAD_ELEMENTWISE_LOOPS_H
#define FASTAD_ELEMENTWISE_LOOPS_H

#include <stddef.h>
#include "rules.h"
#include "clones.h"

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

/* FA_UNARY_LOOP_BODIES: the forward and backward loops of one type under the name
 * prefix P, with attributes ATTR. */
#define FA_UNARY_LOOP_BODIES(T, S, ATTR, P)                                                 \
ATTR FA_FLATTEN void P##forward_##S(int op, const T* x, T* y, ptrdiff_t n, T p) {          \
    ptrdiff_t i;                                                                            \
    switch (op) { FA_EACH_CODE(FA_FORWARD_CASE, S) }                                        \
    for (i = 0; i < n; i++) y[i] = fa_unary_value_##S(op, x[i], p);                         \
}                                                                                           \
ATTR FA_FLATTEN void P##backward_##S(int op, const T* x, const T* y, const T* gy,          \
                                     T* gx, ptrdiff_t n, T p, int add) {                    \
    ptrdiff_t i;                                                                            \
    if (add) {                                                                              \
        switch (op) { FA_EACH_CODE(FA_SLOPE_ADD_CASE, S) }                                  \
        for (i = 0; i < n; i++) gx[i] += gy[i] * fa_unary_slope_##S(op, x[i], y[i], p);     \
    } else {                                                                                \
        switch (op) { FA_EACH_CODE(FA_SLOPE_WRITE_CASE, S) }                                \
        for (i = 0; i < n; i++) gx[i] = gy[i] * fa_unary_slope_##S(op, x[i], y[i], p);      \
    }                                                                                       \
}

/* Rows shorter than FA_SHORT_ROW (a scalar node's one element) run the loops inlined where
 * they are called: the cloned loops' dispatch (a call through the resolver's pointer, a few
 * nanoseconds) would cost more than the vectors save on them. */
#define FA_SHORT_ROW 16
#define FA_UNARY_LOOPS(T, S)                                                                \
FA_UNARY_LOOP_BODIES(T, S, FA_CLONED_WIDE, fa_unary_rows_)                                     \
FA_UNARY_LOOP_BODIES(T, S, static inline, fa_unary_short_)                                  \
static inline void fa_unary_forward_##S(int op, const T* x, T* y, ptrdiff_t n, T p) {       \
    if (n < FA_SHORT_ROW) fa_unary_short_forward_##S(op, x, y, n, p);                       \
    else fa_unary_rows_forward_##S(op, x, y, n, p);                                         \
}                                                                                           \
static inline void fa_unary_backward_##S(int op, const T* x, const T* y, const T* gy,       \
                                         T* gx, ptrdiff_t n, T p, int add) {                \
    if (n < FA_SHORT_ROW) fa_unary_short_backward_##S(op, x, y, gy, gx, n, p, add);         \
    else fa_unary_rows_backward_##S(op, x, y, gy, gx, n, p, add);                           \
}

FA_UNARY_LOOPS(float, f)
FA_UNARY_LOOPS(double, d)

/* Binary ops over `rows` rows of n: row r is y[r*n + i] = a[r*ra + i*sa] op b[r*rb + i*sb]
 * (y contiguous), and the gradient into a (to_a) or b, g[r*rg + i*sg] (+)= gy[r*n + i] *
 * slope, rg and sg that side's row and element strides. A stride of 0 is a side broadcast
 * along the row or across the rows; its gradient then sums into the same elements, in row
 * order, so only `add` may take a stride other than the output's. One call walks a
 * two-axis broadcast (a bias over a batch's rows) whole: a call a row would cost more than
 * a short row's arithmetic. */
/* FA_EACH_BINARY_CODE: every binary code, from op_codes.h (the op manifest). */

#define FA_BINARY_FORWARD_CASE(k, S)                                                        \
    case k:                                                                                 \
        for (r = 0; r < rows; r++, a += ra, b += rb, y += n) {                              \
            if (sa == 1 && sb == 1) for (i = 0; i < n; i++) y[i] = fa_binary_value_##S(k, a[i], b[i]);          \
            else if (sb == 0) for (i = 0; i < n; i++) y[i] = fa_binary_value_##S(k, a[i * sa], b[0]);            \
            else if (sa == 0) for (i = 0; i < n; i++) y[i] = fa_binary_value_##S(k, a[0], b[i * sb]);            \
            else for (i = 0; i < n; i++) y[i] = fa_binary_value_##S(k, a[i * sa], b[i * sb]);                    \
        }                                                                                   \
        return;

#define FA_BINARY_GRAD_LOOP(k, S, SLOPE, OP, G)                                             \
    for (i = 0; i < n; i++) G OP gy[i] * fa_binary_##SLOPE##_##S(k, a[i * sa], b[i * sb], y[i]);
#define FA_BINARY_BACKWARD_CASE(k, S)                                                       \
    case k:                                                                                 \
        for (r = 0; r < rows; r++, a += ra, b += rb, y += n, gy += n, g += to_a ? ra : rb) { \
            if (sa == 1 && sb == 1) {                                                       \
                if (to_a && add) { for (i = 0; i < n; i++) g[i] += gy[i] * fa_binary_da_##S(k, a[i], b[i], y[i]); } \
                else if (to_a) { for (i = 0; i < n; i++) g[i] = gy[i] * fa_binary_da_##S(k, a[i], b[i], y[i]); }   \
                else if (add) { for (i = 0; i < n; i++) g[i] += gy[i] * fa_binary_db_##S(k, a[i], b[i], y[i]); }   \
                else { for (i = 0; i < n; i++) g[i] = gy[i] * fa_binary_db_##S(k, a[i], b[i], y[i]); }            \
            } else if (to_a) {                                                              \
                FA_BINARY_GRAD_LOOP(k, S, da, +=, g[i * sa])                                \
            } else {                                                                        \
                FA_BINARY_GRAD_LOOP(k, S, db, +=, g[i * sb])                                \
            }                                                                               \
        }                                                                                   \
        return;

#define FA_BINARY_LOOPS(T, S)                                                               \
FA_CLONED FA_FLATTEN void fa_binary_forward_##S(int op, const T* a, ptrdiff_t ra, ptrdiff_t sa, \
                                                    const T* b, ptrdiff_t rb, ptrdiff_t sb, \
                                                    T* y, ptrdiff_t rows, ptrdiff_t n) {    \
    ptrdiff_t i, r;                                                                         \
    switch (op) { FA_EACH_BINARY_CODE(FA_BINARY_FORWARD_CASE, S) }                          \
}                                                                                           \
FA_CLONED FA_FLATTEN void fa_binary_backward_##S(int op, int to_a, const T* a, ptrdiff_t ra,     \
                                                     ptrdiff_t sa, const T* b, ptrdiff_t rb, \
                                                     ptrdiff_t sb, const T* y, const T* gy, \
                                                     T* g, ptrdiff_t rows, ptrdiff_t n, int add) { \
    ptrdiff_t i, r;                                                                         \
    switch (op) { FA_EACH_BINARY_CODE(FA_BINARY_BACKWARD_CASE, S) }                         \
}

FA_BINARY_LOOPS(float, f)
FA_BINARY_LOOPS(double, d)

/* Pointwise losses (a the prediction, b the target): the forward sums the elements'
 * losses in order, in double (each also into `losses` unless NULL); the backward writes
 * or adds (`add`) g[i] = gy[i * gy_step] * scale * d(loss)/da (to_a) or d/db. */
/* FA_EACH_LOSS_CODE: every loss code, from op_codes.h (the op manifest). */

#define FA_LOSS_FORWARD_CASE(k, S)                                                          \
    case k:                                                                                 \
        if (losses) { for (i = 0; i < n; i++) { v = fa_loss_value_##S(k, a[i], b[i], delta); total += v; losses[i] = v; } } \
        else { for (i = 0; i < n; i++) total += fa_loss_value_##S(k, a[i], b[i], delta); }  \
        return total;

#define FA_LOSS_BACKWARD_CASE(k, S)                                                         \
    case k:                                                                                 \
        if (to_a && add) { for (i = 0; i < n; i++) g[i] += gy[i * gy_step] * scale * fa_loss_da_##S(k, a[i], b[i], delta); } \
        else if (to_a) { for (i = 0; i < n; i++) g[i] = gy[i * gy_step] * scale * fa_loss_da_##S(k, a[i], b[i], delta); }   \
        else if (add) { for (i = 0; i < n; i++) g[i] += gy[i * gy_step] * scale * fa_loss_db_##S(k, a[i], b[i], delta); }   \
        else { for (i = 0; i < n; i++) g[i] = gy[i * gy_step] * scale * fa_loss_db_##S(k, a[i], b[i], delta); }            \
        return;

#define FA_LOSS_LOOPS(T, S)                                                                 \
static inline FA_FLATTEN double fa_loss_forward_##S(int op, const T* a, const T* b, ptrdiff_t n, \
                                                    T delta, T* losses) {                  \
    ptrdiff_t i;                                                                            \
    double total = 0;                                                                       \
    T v;                                                                                    \
    switch (op) { FA_EACH_LOSS_CODE(FA_LOSS_FORWARD_CASE, S) }                              \
    return total;                                                                           \
}                                                                                           \
static inline FA_FLATTEN void fa_loss_backward_##S(int op, int to_a, const T* a, const T* b,         \
                                                   ptrdiff_t n, T delta, const T* gy,       \
                                                   ptrdiff_t gy_step, T scale, T* g, int add) { \
    ptrdiff_t i;                                                                            \
    switch (op) { FA_EACH_LOSS_CODE(FA_LOSS_BACKWARD_CASE, S) }                             \
}

FA_LOSS_LOOPS(float, f)
FA_LOSS_LOOPS(double, d)

/* The logits' binary cross-entropy (P_BCE), its forward keeping t = exp(-|a|) per
 * element for the backward: the rule's softplus and sigmoid are written over that t
 * (rules.h, fastmath.h), so these give the rule's values, bit for bit, with one exp an
 * element instead of two. */
#define FA_BCE_LOOPS(T, S, EXP_NEGABS, SIGMOID_OF_EXP)                                       \
static inline double fa_bce_forward_##S(const T* a, const T* b, ptrdiff_t n, T* t, T* losses) { \
    ptrdiff_t i;                                                                            \
    double total = 0;                                                                       \
    T v;                                                                                    \
    for (i = 0; i < n; i++) {                                                               \
        t[i] = EXP_NEGABS(a[i]);                                                            \
        v = fa_softplus_of_exp_##S(a[i], t[i]) - a[i] * b[i];                               \
        total += v;                                                                         \
        if (losses) losses[i] = v;                                                          \
    }                                                                                       \
    return total;                                                                           \
}                                                                                           \
static inline void fa_bce_backward_##S(const T* a, const T* b, const T* t, ptrdiff_t n,    \
                                       const T* gy, ptrdiff_t gy_step, T scale, T* g, int add) { \
    ptrdiff_t i;                                                                            \
    T d;                                                                                    \
    for (i = 0; i < n; i++) {                                                               \
        d = gy[i * gy_step] * scale * (SIGMOID_OF_EXP(a[i], t[i]) - b[i]);                  \
        g[i] = add ? g[i] + d : d;                                                          \
    }                                                                                       \
}

FA_BCE_LOOPS(float, f, fa_exp_negabsf, fa_sigmoidf_of_exp)
FA_BCE_LOOPS(double, d, fa_exp_negabs, fa_sigmoid_of_exp)

#endif /* FASTAD_ELEMENTWISE_LOOPS_H */

/* The optimizers' element rules of rules.h (fastad/ops/rules.h) run over rows
 * (fastad/optim/optimizers.pyx): one loop function per rule and precision updates rows
 * rows[k] (len elements each) of a value and its state from the gradient rows packed
 * row after row in g, or, with rows NULL, the n_rows * len elements from 0 (a dense
 * step). The loop over a row's elements calls the rule on distinct (restrict) buffers,
 * so that the compiler runs it in vector registers (Adagrad's square roots and
 * divisions four or eight at a time): each element takes the rule's operations in
 * the rule's order, so the values are those of the rule, element by element, bit for
 * bit. One call for all the rows of a step: no call per row. */
#ifndef FASTAD_RULE_ROWS_H
#define FASTAD_RULE_ROWS_H
#include <stdint.h>
#include "rules.h"
#include "clones.h"

/* A step's arguments of every rule: the optimizer's lr, hyperparameters h[0..3] and flag
 * (see optimizers.pyx's _kernel_spec), and the step's coefficients (Optimizer.begin). */
typedef struct {
    double lr, h[4];
    int flag, first;            /* first: SGD's first dense step */
    double step_size;           /* Adamax */
    FaAdamStep adam;
    FaRAdamStep radam;
    FaNAdamStep nadam;
} FaRuleArgs;

/* FA_RULE_ROWS(name, T, S, call): fa_<name>_rule_rows_<S>, whose row loop makes `call` for
 * element e of the row's p, g, s0 and s1, with the arguments' fields read into locals
 * first (lr, h0..h3, flag, first, step_size, and the coefficients' pointers). */
#define FA_RULE_ROWS(name, T, S, call)                                                    \
static inline void fa_##name##_rule_row_##S(T* __restrict p, const T* __restrict g,            \
                                       T* __restrict s0, T* __restrict s1, Py_ssize_t len, \
                                       const FaRuleArgs* a) {                             \
    const double lr = a->lr, h0 = a->h[0], h1 = a->h[1], h2 = a->h[2], h3 = a->h[3];      \
    const int flag = a->flag, first = a->first;                                           \
    const double step_size = a->step_size;                                                \
    const FaAdamStep adam = a->adam;                                                      \
    const FaRAdamStep radam = a->radam;                                                   \
    const FaNAdamStep nadam = a->nadam;                                                   \
    (void)lr; (void)h0; (void)h1; (void)h2; (void)h3; (void)flag; (void)first;            \
    (void)step_size; (void)adam; (void)radam; (void)nadam; (void)s0; (void)s1;            \
    for (Py_ssize_t e = 0; e < len; e++) call;                                            \
}                                                                                         \
FA_CLONED void fa_##name##_rule_rows_##S(T* p, const T* g, T* s0, T* s1, const int64_t* rows,  \
                                    Py_ssize_t n_rows, Py_ssize_t len, const FaRuleArgs* a) { \
    if (rows == NULL) {                                                                   \
        fa_##name##_rule_row_##S(p, g, s0, s1, n_rows * len, a);                               \
        return;                                                                           \
    }                                                                                     \
    for (Py_ssize_t k = 0; k < n_rows; k++) {                                             \
        Py_ssize_t at = rows[k] * len;                                                    \
        fa_##name##_rule_row_##S(p + at, g + k * len, s0 ? s0 + at : NULL, s1 ? s1 + at : NULL, \
                            len, a);                                                      \
    }                                                                                     \
}

#define FA_RULES_ROWS(T, S)                                                               \
FA_RULE_ROWS(sgd, T, S, fa_sgd_element_##S(p, g, s0, e, lr, h0, h1, h2, flag, first))     \
FA_RULE_ROWS(adagrad, T, S, fa_adagrad_element_##S(p, g, s0, e, lr, h0, h1))              \
FA_RULE_ROWS(adam, T, S, fa_adam_element_##S(p, g, s0, s1, e, &adam, h0, h1, h2))         \
FA_RULE_ROWS(rmsprop, T, S, fa_rmsprop_element_##S(p, g, s0, s1, e, lr, h0, h1, h2, h3))  \
FA_RULE_ROWS(adadelta, T, S, fa_adadelta_element_##S(p, g, s0, s1, e, lr, h0, h1, h2))    \
FA_RULE_ROWS(adamax, T, S, fa_adamax_element_##S(p, g, s0, s1, e, step_size, h0, h1, h2, h3)) \
FA_RULE_ROWS(radam, T, S, fa_radam_element_##S(p, g, s0, s1, e, &radam, lr, h0, h1, h2))  \
FA_RULE_ROWS(nadam, T, S, fa_nadam_element_##S(p, g, s0, s1, e, &nadam, h0, h1, h2))     \
FA_RULE_ROWS(ftrl, T, S, fa_ftrl_element_##S(p, g, s0, s1, e, lr, h0, h1, h2))

FA_RULES_ROWS(float, f)
FA_RULES_ROWS(double, d)

#endif

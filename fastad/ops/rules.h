/* The scalar rules of fastad, written once: each unary op's value and slope, the
 * binary ops, the pointwise losses, and the optimizers' element updates.
 *
 * The same text compiles two ways:
 * - host C, for the CPU kernels in fastad/ops/ (through Cython's `cdef extern`, see
 *   scalar.pxd): every rule is a `static inline` function, once for float (suffix _f)
 *   and once for double (suffix _d); exp/log/tanh/sigmoid come from fastmath.h, so
 *   FASTAD_FAST_MATH applies to them;
 * - CUDA device code, for the kernels in cuda/ (fastad/cuda/kernels.py puts this file
 *   after common.cuh in every family's program; common.cuh defines FA_RULES_ON_DEVICE
 *   and the fa_* math overloads): every rule is one template on T, without suffix.
 *
 * The op codes (enums UnaryOp, BinaryOp, PointwiseLoss) come from the op manifest,
 * fastad/ops/manifest.py, through the generated op_codes.h: a rule's case is the one
 * place an op is written here.
 *
 * Host C includes this file three times: once for the op codes and the type macros,
 * then once per element type for the rules (FA_RULES_BODY). */
#ifndef FASTAD_RULES_H
#define FASTAD_RULES_H

/* On a device the program carries op_codes.h's text before this file's (kernels.py). */
#ifdef FA_RULES_ON_DEVICE
#define FA_PLAIN_RULE __device__ __forceinline__
#else
#include <math.h>
#include "fastmath.h"
#include "op_codes.h"
#define FA_PLAIN_RULE static inline
#endif

/* Adam's per-step coefficients: the bias-corrected step size and sqrt(1 - beta2**t),
 * AdamW's decay factor 1 - lr * weight_decay (else 1) and Adam's L2 term (else 0). */
typedef struct {
    double step_size, bc2_sqrt, decay, l2;
} FaAdamStep;

FA_PLAIN_RULE FaAdamStep fa_adam_step(double lr, long long t, double beta1, double beta2,
                                      double weight_decay, int decoupled) {
    FaAdamStep c;
    c.step_size = lr / (1 - pow(beta1, (double)t));
    c.bc2_sqrt = sqrt(1 - pow(beta2, (double)t));
    c.decay = decoupled ? 1 - lr * weight_decay : 1.0;
    c.l2 = decoupled ? 0.0 : weight_decay;
    return c;
}

/* Adamax's bias-corrected step size lr / (1 - beta1**t). */
FA_PLAIN_RULE double fa_adamax_step_size(double lr, long long t, double beta1) {
    return lr / (1 - pow(beta1, (double)t));
}

/* RAdam's per-step coefficients (torch.optim.RAdam): the bias corrections, whether the
 * variance is tractable (rho_t > 5) and then the rectification term, and the weight
 * decay as in FaAdamStep. */
typedef struct {
    double bc1, bc2_sqrt, rect, decay, l2;
    int adaptive;
} FaRAdamStep;

FA_PLAIN_RULE FaRAdamStep fa_radam_step(double lr, long long t, double beta1, double beta2,
                                        double weight_decay, int decoupled) {
    FaRAdamStep c;
    double bc2 = 1 - pow(beta2, (double)t);
    double rho_inf = 2 / (1 - beta2) - 1;
    double rho_t = rho_inf - 2 * (double)t * pow(beta2, (double)t) / bc2;
    c.bc1 = 1 - pow(beta1, (double)t);
    c.bc2_sqrt = sqrt(bc2);
    c.adaptive = rho_t > 5.0;
    c.rect = c.adaptive ? sqrt((rho_t - 4) * (rho_t - 2) * rho_inf /
                               ((rho_inf - 4) * (rho_inf - 2) * rho_t)) : 0.0;
    c.decay = decoupled ? 1 - lr * weight_decay : 1.0;
    c.l2 = decoupled ? 0.0 : weight_decay;
    return c;
}

/* NAdam's momentum schedule mu_t = beta1 * (1 - 0.5 * 0.96**(t * momentum_decay)). */
FA_PLAIN_RULE double fa_nadam_mu(double beta1, long long t, double momentum_decay) {
    return beta1 * (1.0 - 0.5 * pow(0.96, (double)t * momentum_decay));
}

/* NAdam's per-step coefficients, given the running product P_t = mu_1 * ... * mu_t
 * (which the optimizer keeps): 1 - beta2**t, the factors of the gradient's and the
 * average's terms, and the weight decay as in FaAdamStep. */
typedef struct {
    double bc2, grad_factor, avg_factor, decay, l2;
} FaNAdamStep;

FA_PLAIN_RULE FaNAdamStep fa_nadam_step(double lr, long long t, double beta1, double beta2,
                                        double weight_decay, int decoupled,
                                        double momentum_decay, double product) {
    FaNAdamStep c;
    double mu = fa_nadam_mu(beta1, t, momentum_decay);
    double mu_next = fa_nadam_mu(beta1, t + 1, momentum_decay);
    c.bc2 = 1 - pow(beta2, (double)t);
    c.grad_factor = -lr * (1.0 - mu) / (1.0 - product);
    c.avg_factor = (-lr * mu_next) / (1.0 - product * mu_next);
    c.decay = decoupled ? 1 - lr * weight_decay : 1.0;
    c.l2 = decoupled ? 0.0 : weight_decay;
    return c;
}

#ifdef FA_RULES_ON_DEVICE
#define FA_RULE template <typename T> __device__ __forceinline__
#define FA_T T
#define FA_NAME(name) name
#define FA_EXP fa_exp
#define FA_EXP_NEGABS(x) fa_exp(-fa_abs(x))
#define FA_LOG fa_log
#define FA_LOG1P fa_log1p
#define FA_TANH fa_tanh
#define FA_SIGMOID fa_sigmoid
#define FA_SQRT fa_sqrt
#define FA_ABS fa_abs
#define FA_POW fa_pow
#define FA_ERF fa_erf
#define FA_EXPM1 fa_expm1
#define FA_RULES_BODY
#else
#define FA_RULE static inline

#define FA_T float
#define FA_NAME(name) name##_f
#define FA_EXP fa_expf
#define FA_EXP_NEGABS fa_exp_negabsf
#define FA_LOG fa_logf
#define FA_LOG1P log1pf
#define FA_TANH fa_tanhf
#define FA_SIGMOID fa_sigmoidf
#define FA_SQRT sqrtf
#define FA_ABS fabsf
#define FA_POW powf
#define FA_ERF erff
#define FA_EXPM1 expm1f
#define FA_RULES_BODY
#include "rules.h"
#undef FA_T
#undef FA_NAME
#undef FA_EXP
#undef FA_EXP_NEGABS
#undef FA_LOG
#undef FA_LOG1P
#undef FA_TANH
#undef FA_SIGMOID
#undef FA_SQRT
#undef FA_ABS
#undef FA_POW
#undef FA_ERF
#undef FA_EXPM1

#define FA_T double
#define FA_NAME(name) name##_d
#define FA_EXP fa_exp
#define FA_EXP_NEGABS fa_exp_negabs
#define FA_LOG fa_log
#define FA_LOG1P log1p
#define FA_TANH fa_tanh
#define FA_SIGMOID fa_sigmoid
#define FA_SQRT sqrt
#define FA_ABS fabs
#define FA_POW pow
#define FA_ERF erf
#define FA_EXPM1 expm1
#include "rules.h"
#undef FA_RULES_BODY
#endif

#endif /* FASTAD_RULES_H */

#ifdef FA_RULES_BODY
/* ------------------------------------------------------------------ unary ops */

/* log(1 + exp(x)) without overflow, from t = exp(-|x|) (which a caller may already hold). */
FA_RULE FA_T FA_NAME(fa_softplus_of_exp)(FA_T x, FA_T t) {
    return (x > 0 ? x : (FA_T)0) + FA_LOG1P(t);
}

FA_RULE FA_T FA_NAME(fa_softplus)(FA_T x) {
    return FA_NAME(fa_softplus_of_exp)(x, FA_EXP_NEGABS(x));
}

/* GELU's tanh approximation as PyTorch writes it: sqrt(2/pi) and the cubic's coefficient. */
#define FA_GELU_BETA 0.7978845608028654
#define FA_GELU_KAPPA 0.044715

/* y = f(x); p is the exponent of U_POW, the negative slope of U_LEAKY_RELU, ELU's alpha,
 * the bound of U_CLAMP_MIN/U_CLAMP_MAX (clip) or U_HARDTANH_MIN/U_HARDTANH_MAX (hardtanh
 * chains the two), or the number of a *_SCALAR op. */
FA_RULE FA_T FA_NAME(fa_unary_value)(int op, FA_T x, FA_T p) {
    switch (op) {
        case U_NEG: return -x;
        case U_EXP: return FA_EXP(x);
        case U_LOG: return FA_LOG(x);
        case U_TANH: return FA_TANH(x);
        case U_SIGMOID: return FA_SIGMOID(x);
        case U_RELU: return x > 0 ? x : (FA_T)0;
        case U_SOFTPLUS: return FA_NAME(fa_softplus)(x);
        case U_LOGSIGMOID: return -FA_NAME(fa_softplus)(-x);
        case U_SQRT: return FA_SQRT(x);
        case U_SQUARE: return x * x;
        case U_ABS: return FA_ABS(x);
        case U_POW: return FA_POW(x, p);
        case U_LEAKY_RELU: return x > 0 ? x : p * x;
        case U_GELU: return (FA_T)0.5 * x * ((FA_T)1 + FA_ERF(x * (FA_T)0.7071067811865476));
        case U_GELU_TANH:
            return (FA_T)0.5 * x *
                   ((FA_T)1 + FA_TANH((FA_T)FA_GELU_BETA * (x + (FA_T)FA_GELU_KAPPA * x * x * x)));
        case U_ELU: return x > 0 ? x : p * FA_EXPM1(x);
        case U_SILU: return x * FA_SIGMOID(x);
        case U_SOFTSIGN: return x / ((FA_T)1 + FA_ABS(x));
        case U_FLOOR: return (FA_T)floor((double)x);   /* exact: a float's floor is a float */
        case U_ADD_SCALAR: return x + p;
        case U_RSUB_SCALAR: return p - x;
        case U_MUL_SCALAR: return x * p;
        case U_DIV_SCALAR: return x / p;
        case U_HARDTANH_MIN:
        case U_CLAMP_MIN: return x < p ? p : x;
        case U_HARDTANH_MAX:
        case U_CLAMP_MAX: return x > p ? p : x;
        default: return p / x;  /* U_RDIV_SCALAR */
    }
}

/* dy/dx, from the input x and the output y. */
FA_RULE FA_T FA_NAME(fa_unary_slope)(int op, FA_T x, FA_T y, FA_T p) {
    switch (op) {
        case U_NEG: return (FA_T)-1;
        case U_EXP: return y;
        case U_LOG: return (FA_T)1 / x;
        case U_TANH: return (FA_T)1 - y * y;
        case U_SIGMOID: return y * ((FA_T)1 - y);
        case U_RELU: return x > 0 ? (FA_T)1 : (FA_T)0;
        case U_SOFTPLUS: return FA_SIGMOID(x);
        case U_LOGSIGMOID: return FA_SIGMOID(-x);
        case U_SQRT: return (FA_T)0.5 / y;
        case U_SQUARE: return (FA_T)2 * x;
        case U_ABS: return (FA_T)((x > 0) - (x < 0));
        case U_POW: return p == 0 ? (FA_T)0 : p * FA_POW(x, p - (FA_T)1);
        case U_LEAKY_RELU: return x > 0 ? (FA_T)1 : p;
        case U_GELU:
            return (FA_T)0.5 * ((FA_T)1 + FA_ERF(x * (FA_T)0.7071067811865476)) +
                   x * (FA_T)0.3989422804014327 * FA_EXP((FA_T)-0.5 * x * x);
        case U_GELU_TANH: {
            FA_T t = FA_TANH((FA_T)FA_GELU_BETA * (x + (FA_T)FA_GELU_KAPPA * x * x * x));
            return (FA_T)0.5 * ((FA_T)1 + t) + (FA_T)0.5 * x * ((FA_T)1 - t * t) *
                   (FA_T)FA_GELU_BETA * ((FA_T)1 + (FA_T)(3 * FA_GELU_KAPPA) * x * x);
        }
        case U_ELU: return x > 0 ? (FA_T)1 : p * FA_EXP(x);
        case U_SILU: {
            FA_T s = FA_SIGMOID(x);
            return s * ((FA_T)1 + x * ((FA_T)1 - s));
        }
        case U_SOFTSIGN: {
            FA_T t = (FA_T)1 + FA_ABS(x);
            return (FA_T)1 / (t * t);
        }
        case U_FLOOR: return (FA_T)0;
        /* hardtanh's gradient flows strictly inside (min_val, max_val), as PyTorch's */
        case U_HARDTANH_MIN: return x > p ? (FA_T)1 : (FA_T)0;
        case U_HARDTANH_MAX: return x < p ? (FA_T)1 : (FA_T)0;
        case U_ADD_SCALAR: return (FA_T)1;
        case U_RSUB_SCALAR: return (FA_T)-1;
        case U_MUL_SCALAR: return p;
        case U_DIV_SCALAR: return (FA_T)1 / p;
        /* 1 at the bound itself, as torch.clamp */
        case U_CLAMP_MIN: return x >= p ? (FA_T)1 : (FA_T)0;
        case U_CLAMP_MAX: return x <= p ? (FA_T)1 : (FA_T)0;
        default: return -y / x;  /* U_RDIV_SCALAR */
    }
}

/* ----------------------------------------------------------------- binary ops */

/* + - * / (B_ADD .. B_DIV) and the other binary ops have rule sets of their own, joined
 * by fa_binary_* below (the CPU loops of elementwise_loops.h fix the op code, so either
 * folds to the one rule). */
FA_RULE FA_T FA_NAME(fa_arith_value)(int op, FA_T a, FA_T b) {
    switch (op) {
        case B_ADD: return a + b;
        case B_SUB: return a - b;
        case B_MUL: return a * b;
        default: return a / b;  /* B_DIV */
    }
}

/* d(a op b)/da and d(a op b)/db, given y = a op b. */
FA_RULE FA_T FA_NAME(fa_arith_da)(int op, FA_T a, FA_T b, FA_T y) {
    if (op == B_MUL) return b;
    if (op == B_DIV) return (FA_T)1 / b;
    return (FA_T)1;
}

FA_RULE FA_T FA_NAME(fa_arith_db)(int op, FA_T a, FA_T b, FA_T y) {
    if (op == B_ADD) return (FA_T)1;
    if (op == B_SUB) return (FA_T)-1;
    if (op == B_MUL) return a;
    return -y / b;  /* B_DIV */
}

FA_RULE FA_T FA_NAME(fa_other_value)(int op, FA_T a, FA_T b) {
    int lt, eq, gt;
    if (op == B_POW) return FA_POW(a, b);
    /* a NaN on either side wins, as torch.maximum/minimum */
    if (op == B_MAXIMUM) return (a > b || a != a) ? a : b;
    if (op == B_MINIMUM) return (a < b || a != a) ? a : b;
    /* a comparison, with no branch on the data (so that loops vectorise): the relations
     * among <, ==, > it accepts; != is "not ==", so true for NaN */
    lt = a < b;
    eq = a == b;
    gt = a > b;
    return (FA_T)(((((op == B_LESS) | (op == B_LESS_EQUAL)) & lt)
                   | (((op == B_LESS_EQUAL) | (op == B_GREATER_EQUAL) | (op == B_EQUAL)
                       | (op == B_NOT_EQUAL)) & eq)
                   | (((op == B_GREATER) | (op == B_GREATER_EQUAL)) & gt))
                  ^ (op == B_NOT_EQUAL));
}

/* maximum's share of the gradient for the side that is `mine`: all of it where that side
 * is larger (or a NaN), half at a tie, none where it is smaller (torch's rule); without
 * a branch on the data. */
FA_RULE FA_T FA_NAME(fa_max_share)(FA_T mine, FA_T other) {
    return (FA_T)1 - (FA_T)(mine < other) - (FA_T)0.5 * (FA_T)(mine == other);
}

/* pow follows torch: no gradient through a zero exponent, and d/db = y * log(a) except
 * 0 where a == 0 and b >= 0 (NaN for a < 0). Comparisons have none. */
FA_RULE FA_T FA_NAME(fa_other_da)(int op, FA_T a, FA_T b, FA_T y) {
    if (op == B_POW) return b == 0 ? (FA_T)0 : b * FA_POW(a, b - (FA_T)1);
    if (op == B_MAXIMUM) return FA_NAME(fa_max_share)(a, b);
    if (op == B_MINIMUM) return FA_NAME(fa_max_share)(b, a);
    return (FA_T)0;
}

FA_RULE FA_T FA_NAME(fa_other_db)(int op, FA_T a, FA_T b, FA_T y) {
    if (op == B_POW) return (a == 0 && b >= 0) ? (FA_T)0 : y * FA_LOG(a);
    if (op == B_MAXIMUM) return FA_NAME(fa_max_share)(b, a);
    if (op == B_MINIMUM) return FA_NAME(fa_max_share)(a, b);
    return (FA_T)0;
}

/* Every binary op: y = a op b, and d(a op b)/da, d(a op b)/db given y. */
FA_RULE FA_T FA_NAME(fa_binary_value)(int op, FA_T a, FA_T b) {
    return op <= B_DIV ? FA_NAME(fa_arith_value)(op, a, b) : FA_NAME(fa_other_value)(op, a, b);
}

FA_RULE FA_T FA_NAME(fa_binary_da)(int op, FA_T a, FA_T b, FA_T y) {
    return op <= B_DIV ? FA_NAME(fa_arith_da)(op, a, b, y) : FA_NAME(fa_other_da)(op, a, b, y);
}

FA_RULE FA_T FA_NAME(fa_binary_db)(int op, FA_T a, FA_T b, FA_T y) {
    return op <= B_DIV ? FA_NAME(fa_arith_db)(op, a, b, y) : FA_NAME(fa_other_db)(op, a, b, y);
}

/* ----------------------------------------------------------- pointwise losses */

/* PyTorch's floor under BCE's logs, and under p * (1 - p) in its gradient (a float
 * constant there, so a float here too). */
#define FA_BCE_LOG_FLOOR -100
#define FA_BCE_EPSILON 1e-12f

FA_RULE FA_T FA_NAME(fa_floored_log)(FA_T x) {
    FA_T l = FA_LOG(x);
    return l > (FA_T)FA_BCE_LOG_FLOOR ? l : (FA_T)FA_BCE_LOG_FLOOR;
}

FA_RULE FA_T FA_NAME(fa_floored_log1m)(FA_T x) {
    FA_T l = FA_LOG1P(-x);
    return l > (FA_T)FA_BCE_LOG_FLOOR ? l : (FA_T)FA_BCE_LOG_FLOOR;
}

/* Stirling's term t log t - t + log(2 pi t) / 2 for t > 1 (0 elsewhere), which Poisson
 * NLL's full=True adds, and its slope. */
FA_RULE FA_T FA_NAME(fa_stirling)(FA_T t) {
    return t > 1 ? t * FA_LOG(t) - t + (FA_T)0.5 * FA_LOG((FA_T)6.283185307179586 * t) : (FA_T)0;
}

FA_RULE FA_T FA_NAME(fa_stirling_slope)(FA_T t) {
    return t > 1 ? FA_LOG(t) + (FA_T)0.5 / t : (FA_T)0;
}

/* The loss of one element: a is the prediction (a logit for BCE, a probability for
 * BCE_PROB, a log-probability for KL_DIV, log-rate or rate for POISSON_NLL, the
 * difference input - target for GAUSSIAN_NLL), b the target (GAUSSIAN_NLL: the
 * variance). delta: Huber's delta, SMOOTH_L1's beta, POISSON_NLL's eps, GAUSSIAN_NLL's
 * floor under the variance (whose gradient passes the floor unchanged, as PyTorch's). */
FA_RULE FA_T FA_NAME(fa_loss_value)(int op, FA_T a, FA_T b, FA_T delta) {
    FA_T d;
    switch (op) {
        case P_KL_DIV: return (b == 0 ? (FA_T)0 : b * FA_LOG(b)) - b * a;
        case P_KL_DIV_LOG_TARGET: return FA_EXP(b) * (b - a);
        case P_SMOOTH_L1:
            d = FA_ABS(a - b);
            return d < delta ? (FA_T)0.5 * d * d / delta : d - (FA_T)0.5 * delta;
        case P_BINARY_CROSS_ENTROPY:
            return (b - (FA_T)1) * FA_NAME(fa_floored_log1m)(a) - b * FA_NAME(fa_floored_log)(a);
        case P_POISSON_NLL: return FA_EXP(a) - b * a;
        case P_POISSON_NLL_FULL: return FA_EXP(a) - b * a + FA_NAME(fa_stirling)(b);
        case P_POISSON_NLL_RATE: return a - b * FA_LOG(a + delta);
        case P_POISSON_NLL_RATE_FULL: return a - b * FA_LOG(a + delta) + FA_NAME(fa_stirling)(b);
        case P_GAUSSIAN_NLL:
            d = b > delta ? b : delta;
            return (FA_T)0.5 * (FA_LOG(d) + a * a / d);
        case P_SOFT_MARGIN: return FA_NAME(fa_softplus)(-a * b);
        case P_HINGE: d = (FA_T)1 - a * b; return d > 0 ? d : (FA_T)0;
        default: break;
    }
    if (op == P_BCE) return FA_NAME(fa_softplus)(a) - a * b;
    d = a - b;
    if (op == P_MSE) return d * d;
    if (FA_ABS(d) < delta) return (FA_T)0.5 * d * d;
    return delta * (FA_ABS(d) - (FA_T)0.5 * delta);
}

FA_RULE FA_T FA_NAME(fa_loss_da)(int op, FA_T a, FA_T b, FA_T delta) {
    FA_T d;
    switch (op) {
        case P_KL_DIV: return -b;
        case P_KL_DIV_LOG_TARGET: return -FA_EXP(b);
        case P_SMOOTH_L1:
            d = a - b;
            if (FA_ABS(d) < delta) return d / delta;
            return (FA_T)((d > 0) - (d < 0));
        case P_BINARY_CROSS_ENTROPY:
            d = a * ((FA_T)1 - a);
            return (a - b) / (d > (FA_T)FA_BCE_EPSILON ? d : (FA_T)FA_BCE_EPSILON);
        case P_POISSON_NLL:
        case P_POISSON_NLL_FULL: return FA_EXP(a) - b;
        case P_POISSON_NLL_RATE:
        case P_POISSON_NLL_RATE_FULL: return (FA_T)1 - b / (a + delta);
        case P_GAUSSIAN_NLL: return a / (b > delta ? b : delta);
        case P_SOFT_MARGIN: return -b * FA_SIGMOID(-a * b);
        case P_HINGE: return (FA_T)1 - a * b > 0 ? -b : (FA_T)0;
        default: break;
    }
    if (op == P_BCE) return FA_SIGMOID(a) - b;
    d = a - b;
    if (op == P_MSE) return (FA_T)2 * d;
    if (FA_ABS(d) < delta) return d;
    return d > 0 ? delta : -delta;
}

FA_RULE FA_T FA_NAME(fa_loss_db)(int op, FA_T a, FA_T b, FA_T delta) {
    FA_T v;
    switch (op) {
        case P_BCE: return -a;
        case P_KL_DIV: return FA_LOG(b) + (FA_T)1 - a;
        case P_KL_DIV_LOG_TARGET: return FA_EXP(b) * (b - a + (FA_T)1);
        case P_BINARY_CROSS_ENTROPY: return FA_NAME(fa_floored_log1m)(a) - FA_NAME(fa_floored_log)(a);
        case P_POISSON_NLL: return -a;
        case P_POISSON_NLL_FULL: return -a + FA_NAME(fa_stirling_slope)(b);
        case P_POISSON_NLL_RATE: return -FA_LOG(a + delta);
        case P_POISSON_NLL_RATE_FULL: return -FA_LOG(a + delta) + FA_NAME(fa_stirling_slope)(b);
        case P_GAUSSIAN_NLL:
            v = b > delta ? b : delta;
            return (FA_T)0.5 * ((FA_T)1 / v - a * a / (v * v));
        case P_SOFT_MARGIN: return -a * FA_SIGMOID(-a * b);
        case P_HINGE: return (FA_T)1 - a * b > 0 ? -a : (FA_T)0;
        default: break;
    }
    return -FA_NAME(fa_loss_da)(op, a, b, delta);
}

/* -------------------------------------------------------- optimizer elements
 * One element e of a Parameter's value p, its gradient g and its state. The order
 * of operations follows torch.optim's single-tensor implementations; where the
 * arithmetic goes through double (the `1.0 - x` terms, sqrt), it does so on purpose. */

/* SGD: buf is used only when momentum != 0; `first`: the Parameter's first, dense step. */
FA_RULE void FA_NAME(fa_sgd_element)(FA_T* p, const FA_T* g, FA_T* buf, long long e, double lr,
                                     double weight_decay, double momentum, double dampening,
                                     int nesterov, int first) {
    FA_T lr_ = (FA_T)lr, wd = (FA_T)weight_decay, mom = (FA_T)momentum;
    FA_T keep = (FA_T)(1.0 - dampening);
    FA_T d = g[e], b;
    if (wd != (FA_T)0) d = d + wd * p[e];
    if (momentum != 0) {
        b = first ? d : buf[e] * mom + keep * d;
        buf[e] = b;
        d = nesterov ? d + mom * b : b;
    }
    p[e] = p[e] + (-lr_) * d;
}

/* Adagrad: the square root and the division in the value's precision, as torch's
 * (float32 for a float32 table: eight lanes of a vector register, where going through
 * double took four and most of a sparse row step's time). */
FA_RULE void FA_NAME(fa_adagrad_element)(FA_T* p, const FA_T* g, FA_T* sums, long long e,
                                         double lr, double weight_decay, double eps) {
    FA_T lr_ = (FA_T)lr, wd = (FA_T)weight_decay, eps_ = (FA_T)eps;
    FA_T d = g[e], s;
    if (wd != (FA_T)0) d = d + wd * p[e];
    s = sums[e] + d * d;
    sums[e] = s;
    p[e] = p[e] + (-lr_) * (d / (FA_SQRT(s) + eps_));
}

/* torch.lerp(start, end, weight) with a scalar weight, evaluated its way for both sizes
 * of the weight. */
FA_RULE FA_T FA_NAME(fa_lerp)(FA_T start, FA_T end, double weight) {
    FA_T w = (FA_T)weight;
    if (fabs(weight) < 0.5) return start + w * (end - start);
    return (FA_T)(end - (end - start) * (1.0 - w));
}

/* What Adam, RAdam and NAdam do first: AdamW's decoupled decay of p (decay != 1), Adam's
 * L2 term (l2 != 0), then the moments m (a lerp towards d) and v; returns d. */
FA_RULE FA_T FA_NAME(fa_adam_moments)(FA_T* p, const FA_T* g, FA_T* m, FA_T* v, long long e,
                                      double l2, double decay, double beta1, double beta2) {
    FA_T wd = (FA_T)l2, dec = (FA_T)decay, b2 = (FA_T)beta2, w2 = (FA_T)(1.0 - beta2);
    FA_T d = g[e];
    if ((double)dec != 1.0) p[e] = p[e] * dec;
    if (wd != (FA_T)0) d = d + wd * p[e];
    m[e] = FA_NAME(fa_lerp)(m[e], d, 1.0 - beta1);
    v[e] = v[e] * b2 + w2 * d * d;
    return d;
}

/* Adam and AdamW, with the step's coefficients c (fa_adam_step). */
FA_RULE void FA_NAME(fa_adam_element)(FA_T* p, const FA_T* g, FA_T* m, FA_T* v, long long e,
                                      const FaAdamStep* c, double beta1, double beta2,
                                      double eps) {
    FA_T step = (FA_T)c->step_size, bc2 = (FA_T)c->bc2_sqrt, eps_ = (FA_T)eps;
    FA_T mi, vi;
    FA_NAME(fa_adam_moments)(p, g, m, v, e, c->l2, c->decay, beta1, beta2);
    mi = m[e];
    vi = v[e];
    p[e] = (FA_T)(p[e] + (-step) * ((double)mi / (sqrt((double)vi) / (double)bc2 + eps_)));
}

/* RMSprop: buf is used only when momentum != 0. */
FA_RULE void FA_NAME(fa_rmsprop_element)(FA_T* p, const FA_T* g, FA_T* sq, FA_T* buf, long long e,
                                         double lr, double alpha, double eps,
                                         double weight_decay, double momentum) {
    FA_T lr_ = (FA_T)lr, a = (FA_T)alpha, w = (FA_T)(1.0 - alpha), eps_ = (FA_T)eps;
    FA_T wd = (FA_T)weight_decay, mom = (FA_T)momentum;
    FA_T d = g[e], s, step;
    if (wd != (FA_T)0) d = d + wd * p[e];
    s = sq[e] * a + w * d * d;
    sq[e] = s;
    step = (FA_T)((double)d / (sqrt((double)s) + eps_));
    if (momentum != 0) {
        step = buf[e] * mom + step;
        buf[e] = step;
    }
    p[e] = p[e] + (-lr_) * step;
}

/* Adadelta: sq = square_avg, acc = acc_delta. */
FA_RULE void FA_NAME(fa_adadelta_element)(FA_T* p, const FA_T* g, FA_T* sq, FA_T* acc, long long e,
                                          double lr, double rho, double eps, double weight_decay) {
    FA_T lr_ = (FA_T)lr, r = (FA_T)rho, w = (FA_T)(1.0 - rho), eps_ = (FA_T)eps;
    FA_T wd = (FA_T)weight_decay;
    FA_T d = g[e], s, delta, a;
    if (wd != (FA_T)0) d = d + wd * p[e];
    s = sq[e] * r + w * d * d;
    sq[e] = s;
    delta = FA_SQRT(acc[e] + eps_) / FA_SQRT(s + eps_) * d;
    a = acc[e] * r + w * delta * delta;
    acc[e] = a;
    p[e] = p[e] + (-lr_) * delta;
}

/* Adamax: m = exp_avg, u = exp_inf (the decayed infinity norm); step_size from
 * fa_adamax_step_size. NaN propagates through the max, as torch.maximum. */
FA_RULE void FA_NAME(fa_adamax_element)(FA_T* p, const FA_T* g, FA_T* m, FA_T* u, long long e,
                                        double step_size, double beta1, double beta2, double eps,
                                        double weight_decay) {
    FA_T wd = (FA_T)weight_decay, b2 = (FA_T)beta2, eps_ = (FA_T)eps;
    FA_T d = g[e], mi, ui, bound;
    if (wd != (FA_T)0) d = d + wd * p[e];
    mi = FA_NAME(fa_lerp)(m[e], d, 1.0 - beta1);
    ui = u[e] * b2;
    bound = FA_ABS(d) + eps_;
    if (!(ui > bound || ui != ui)) ui = bound;
    m[e] = mi;
    u[e] = ui;
    p[e] = p[e] + (FA_T)(-step_size) * mi / ui;
}

/* RAdam, with the step's coefficients c (fa_radam_step). */
FA_RULE void FA_NAME(fa_radam_element)(FA_T* p, const FA_T* g, FA_T* m, FA_T* v, long long e,
                                       const FaRAdamStep* c, double lr, double beta1,
                                       double beta2, double eps) {
    FA_T lr_ = (FA_T)lr, eps_ = (FA_T)eps;
    FA_T mi, vi, corrected;
    FA_NAME(fa_adam_moments)(p, g, m, v, e, c->l2, c->decay, beta1, beta2);
    mi = m[e];
    vi = v[e];
    corrected = mi / (FA_T)c->bc1;
    if (c->adaptive)
        p[e] = p[e] - corrected * lr_ * ((FA_T)c->bc2_sqrt / (FA_SQRT(vi) + eps_)) * (FA_T)c->rect;
    else
        p[e] = p[e] - corrected * lr_;
}

/* NAdam, with the step's coefficients c (FaNAdamStep). */
FA_RULE void FA_NAME(fa_nadam_element)(FA_T* p, const FA_T* g, FA_T* m, FA_T* v, long long e,
                                       const FaNAdamStep* c, double beta1, double beta2,
                                       double eps) {
    FA_T eps_ = (FA_T)eps;
    FA_T d, mi, vi, denom;
    d = FA_NAME(fa_adam_moments)(p, g, m, v, e, c->l2, c->decay, beta1, beta2);
    mi = m[e];
    vi = v[e];
    denom = FA_SQRT(vi / (FA_T)c->bc2) + eps_;
    p[e] = p[e] + (FA_T)c->grad_factor * d / denom;
    p[e] = p[e] + (FA_T)c->avg_factor * mi / denom;
}

/* FTRL-Proximal (McMahan et al. 2013, per coordinate): z and n its sums, alpha the rate:
 * sigma = (sqrt(n + g^2) - sqrt(n)) / alpha; z += g - sigma p; n += g^2; then p is the
 * proximal solution, 0 where |z| <= l1 (the L1 term's sparsity), else
 * -(z - sign(z) l1) / ((beta + sqrt(n)) / alpha + l2). */
FA_RULE void FA_NAME(fa_ftrl_element)(FA_T* p, const FA_T* g, FA_T* z, FA_T* n, long long e,
                                      double alpha, double beta, double l1, double l2) {
    FA_T gi = g[e], ni = n[e], n_new = ni + gi * gi, root = FA_SQRT(n_new);
    FA_T sigma = (root - FA_SQRT(ni)) / (FA_T)alpha;
    FA_T zi = z[e] + (gi - sigma * p[e]), l1_ = (FA_T)l1;
    z[e] = zi;
    n[e] = n_new;
    if (FA_ABS(zi) <= l1_)
        p[e] = (FA_T)0;
    else
        p[e] = -(zi - (zi > (FA_T)0 ? l1_ : -l1_)) / (((FA_T)beta + root) / (FA_T)alpha + (FA_T)l2);
}
#endif /* FA_RULES_BODY */

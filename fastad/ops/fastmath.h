/* Scalar math used by fastad's CPU kernels.
 *
 * fa_exp/fa_log/fa_tanh/fa_sigmoid (and the float versions with an f suffix)
 * call the C library (but for float tanh, which takes one exp from fa_exp_small,
 * as accurate and without a call), unless the package was built
 * with FASTAD_FAST_MATH=1: then they use the branch-light approximations below,
 * which gcc can inline and vectorise. The approximations are always compiled so that the tests can
 * check their error bounds on any build:
 *
 *   exp      relative error <= 1e-8 (double), <= 1e-6 (float); results below
 *            the smallest normal number flush to zero
 *   log      relative error <= 1e-8 (double), <= 1e-6 (float)
 *   tanh     absolute error <= 1e-8 (double), <= 1e-6 (float)
 *   sigmoid  absolute error <= 1e-8 (double), <= 1e-6 (float)
 *
 * NaN and infinities propagate as in the C library, so detect_anomaly still
 * sees them.
 */
#ifndef FASTAD_FASTMATH_H
#define FASTAD_FASTMATH_H

#include <float.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

/* sigmoid(x) from t = exp(-|x|), which never overflows. Every sigmoid below goes
 * through these, so a caller that already holds t (bce_with_logits's backward) gets
 * the same value. */
static inline double fa_sigmoid_of_exp(double x, double t) {
    return x >= 0 ? 1.0 / (1.0 + t) : t / (1.0 + t);
}
static inline float fa_sigmoidf_of_exp(float x, float t) {
    return x >= 0 ? 1.0f / (1.0f + t) : t / (1.0f + t);
}

/* ---- double ------------------------------------------------------------ */

static inline double fa_fast_exp(double x) {
    if (!(x <= 709.782712893384)) return x * INFINITY;   /* log(DBL_MAX): +inf; NaN stays NaN */
    if (x < -708.3964185322641) return 0.0;              /* log(DBL_MIN): flush to zero */
    double k = nearbyint(x * 1.4426950408889634);
    /* Cody-Waite: ln2 split in two parts keeps r exact enough. */
    double r = (x - k * 0.693145751953125) - k * 1.4286068203094173e-06;
    double p = 1.0 + r * (1.0 + r * (1.0 / 2 + r * (1.0 / 6 + r * (1.0 / 24 + r * (1.0 / 120
               + r * (1.0 / 720 + r * (1.0 / 5040 + r * (1.0 / 40320))))))));
    /* 2**k as two normal powers of two: k reaches 1024, one past the largest exponent. */
    int64_t k1 = (int64_t)k / 2, k2 = (int64_t)k - k1;
    uint64_t bits1 = (uint64_t)(k1 + 1023) << 52, bits2 = (uint64_t)(k2 + 1023) << 52;
    double scale1, scale2;
    memcpy(&scale1, &bits1, sizeof scale1);
    memcpy(&scale2, &bits2, sizeof scale2);
    return p * scale1 * scale2;
}

static inline double fa_fast_log(double x) {
    if (!(x >= DBL_MIN && x <= DBL_MAX)) return log(x);  /* <=0, subnormal, inf, NaN */
    uint64_t bits;
    memcpy(&bits, &x, sizeof bits);
    int64_t e = (int64_t)((bits >> 52) & 0x7ff) - 1023;
    bits = (bits & 0x000fffffffffffffULL) | 0x3ff0000000000000ULL;  /* m in [1, 2) */
    double m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.4142135623730951) { m *= 0.5; e += 1; }            /* m in [0.707, 1.414) */
    double s = (m - 1.0) / (m + 1.0), s2 = s * s;
    double logm = 2.0 * s * (1.0 + s2 * (1.0 / 3 + s2 * (1.0 / 5 + s2 * (1.0 / 7
                  + s2 * (1.0 / 9 + s2 * (1.0 / 11))))));
    return (double)e * 0.6931471805599453 + logm;
}

static inline double fa_fast_tanh(double x) {
    double a = fabs(x);
    if (a < 0.0625) {
        double x2 = x * x;
        return x * (1.0 + x2 * (-1.0 / 3 + x2 * (2.0 / 15 + x2 * (-17.0 / 315 + x2 * (62.0 / 2835)))));
    }
    double t = fa_fast_exp(-2.0 * a);
    return copysign((1.0 - t) / (1.0 + t), x);
}

static inline double fa_fast_sigmoid(double x) {
    return fa_sigmoid_of_exp(x, fa_fast_exp(-fabs(x)));
}

/* ---- float ------------------------------------------------------------- */

static inline float fa_fast_expf(float x) {
    if (!(x <= 88.7228391f)) return x * INFINITY;        /* log(FLT_MAX), as above */
    if (x < -87.3365448f) return 0.0f;                   /* log(FLT_MIN) */
    float k = nearbyintf(x * 1.44269504f);
    float r = (x - k * 0.693359375f) + k * 2.12194440e-4f;
    float p = 1.0f + r * (1.0f + r * (0.5f + r * (1.0f / 6 + r * (1.0f / 24 + r * (1.0f / 120
              + r * (1.0f / 720))))));
    int32_t k1 = (int32_t)k / 2, k2 = (int32_t)k - k1;   /* k reaches 128 */
    uint32_t bits1 = (uint32_t)(k1 + 127) << 23, bits2 = (uint32_t)(k2 + 127) << 23;
    float scale1, scale2;
    memcpy(&scale1, &bits1, sizeof scale1);
    memcpy(&scale2, &bits2, sizeof scale2);
    return p * scale1 * scale2;
}

static inline float fa_fast_logf(float x) {
    if (!(x >= FLT_MIN && x <= FLT_MAX)) return logf(x);
    uint32_t bits;
    memcpy(&bits, &x, sizeof bits);
    int32_t e = (int32_t)((bits >> 23) & 0xff) - 127;
    bits = (bits & 0x007fffffu) | 0x3f800000u;
    float m;
    memcpy(&m, &bits, sizeof m);
    if (m > 1.41421356f) { m *= 0.5f; e += 1; }
    float s = (m - 1.0f) / (m + 1.0f), s2 = s * s;
    float logm = 2.0f * s * (1.0f + s2 * (1.0f / 3 + s2 * (1.0f / 5 + s2 * (1.0f / 7 + s2 * (1.0f / 9)))));
    return (float)e * 0.693147181f + logm;
}

static inline float fa_fast_tanhf(float x) {
    float a = fabsf(x);
    if (a < 0.0625f) {
        float x2 = x * x;
        return x * (1.0f + x2 * (-1.0f / 3 + x2 * (2.0f / 15 + x2 * (-17.0f / 315))));
    }
    float t = fa_fast_expf(-2.0f * a);
    return copysignf((1.0f - t) / (1.0f + t), x);
}

static inline float fa_fast_sigmoidf(float x) {
    return fa_sigmoidf_of_exp(x, fa_fast_expf(-fabsf(x)));
}

/* ---- exact (C library) ------------------------------------------------- */

static inline double fa_exact_sigmoid(double x) {
    return fa_sigmoid_of_exp(x, exp(-fabs(x)));
}

/* exp(x) for x in [-200, 0] (NaN gives NaN) to double precision, without branches or calls,
 * so that a loop over it vectorises: k = round(x / ln2) by the 1.5 * 2**52 shift (whose low
 * bits then hold k), r = x - k ln2 in two parts (Cody-Waite), e**r by its Taylor series to
 * r**12 (|r| <= ln2 / 2: the next term is below 2e-15 of the sum) and 2**k from k's bits. */
static inline double fa_exp_small(double x) {
    const double shift = 0x1.8p52;
    double v = x * 1.4426950408889634 + shift;
    double k = v - shift;
    double r = (x - k * 0.693145751953125) - k * 1.4286068203094173e-06;
    /* Estrin's scheme: the same terms in a shallow tree (about a fifth of Horner's chain of
     * dependent multiply-adds), so that one exp a scalar node is not a long latency */
    double r2 = r * r, r4 = r2 * r2, r8 = r4 * r4;
    double s0 = (1.0 + r) + (0.5 + r * (1.0 / 6)) * r2;
    double s1 = (1.0 / 24 + r * (1.0 / 120)) + (1.0 / 720 + r * (1.0 / 5040)) * r2;
    double s2 = (1.0 / 40320 + r * (1.0 / 362880)) + (1.0 / 3628800 + r * (1.0 / 39916800)) * r2;
    double p = (s0 + s1 * r4) + (s2 + (1.0 / 479001600) * r4) * r8;
    uint64_t bits, scale_bits;
    memcpy(&bits, &v, sizeof bits);
    scale_bits = (bits + 1023) << 52;
    double scale;
    memcpy(&scale, &scale_bits, sizeof scale);
    return p * scale;
}

/* tanh in float from one double exp, as (1 - e**-2|x|) / (1 + e**-2|x|): within 1 ulp
 * (glibc's tanhf goes through expm1f and costs twice as much) and the same float as with
 * glibc's exp at every 7th float tried, all of [0, inf); no call, so its loops vectorise.
 * From |x| = 10 on the float is 1, and below 1e-4 tanh(x) = x to float precision. */
static inline float fa_exact_tanhf(float x) {
    float a = fabsf(x);
    double t = fa_exp_small(-2.0 * (a > 10.0f ? 10.0 : (double)a));
    float y = copysignf((float)((1.0 - t) / (1.0 + t)), x);
    return a < 1e-4f ? x : y;
}

/* e**-|x| in float, as every sigmoid and softplus in float takes it (and the logits' BCE
 * loops, which keep it): the C library's expf. These run mostly over short rows (a word2vec
 * pair's 6 scores, a scalar node), where an exp's latency, not a vectorised loop, sets the
 * speed: fa_exp_small here made word2vec 4-6% slower (three alternated fits) and the BiLSTM
 * tagger's gates no faster. */
static inline float fa_exact_exp_negabsf(float x) {
    return expf(-fabsf(x));
}

static inline float fa_exact_sigmoidf(float x) {
    return fa_sigmoidf_of_exp(x, fa_exact_exp_negabsf(x));
}

/* ---- what the kernels call ---------------------------------------------- */

#ifdef FASTAD_FAST_MATH
#define FASTAD_FAST_MATH_ENABLED 1
#define fa_exp fa_fast_exp
#define fa_log fa_fast_log
#define fa_tanh fa_fast_tanh
#define fa_sigmoid fa_fast_sigmoid
#define fa_expf fa_fast_expf
#define fa_logf fa_fast_logf
#define fa_tanhf fa_fast_tanhf
#define fa_sigmoidf fa_fast_sigmoidf
#define fa_exp_negabsf(x) fa_fast_expf(-fabsf(x))
#else
#define FASTAD_FAST_MATH_ENABLED 0
#define fa_exp exp
#define fa_log log
#define fa_tanh tanh
#define fa_sigmoid fa_exact_sigmoid
#define fa_expf expf
#define fa_logf logf
#define fa_tanhf fa_exact_tanhf
#define fa_sigmoidf fa_exact_sigmoidf
#define fa_exp_negabsf fa_exact_exp_negabsf
#endif

/* e**-|x| in double, as the double sigmoid and softplus take it */
static inline double fa_exp_negabs(double x) {
    return fa_exp(-fabs(x));
}

#endif

/* LinearModel's and FactorizationMachine's optimizer="vw": Vowpal Wabbit's default update
 * (adaptive, normalised, invariant), one example at a time over CSR bags. Our code, after
 * the rules VW describes:
 *
 *   - adaptive (Duchi et al., AdaGrad): each coordinate j keeps G_j, the sum of the squared
 *     loss derivatives times its input squared (g^2 a_j^2, g^2 times the importance);
 *   - normalised (Ross, Mineiro, Langford 2013, "Normalized online learning"): each keeps
 *     N_j, the largest |a_j| seen; when a larger one comes, its weight is multiplied by
 *     N_j / |a_j| (as if the inputs had always been on the new scale); its rate is
 *     1 / (sqrt(G_j) N_j), and every step is multiplied by sqrt(sum of importances / sum of
 *     importance * sum_j a_j^2 / N_j^2), the examples' mean normalised norm so far;
 *   - invariant (Karampatziakis, Langford 2011, importance-aware updates): the prediction
 *     moves along ds/dh = -loss'(p + s u) for h from 0 to eta * importance, u = sum_j a_j^2
 *     rate_j (the prediction's change per unit of step), solved in closed form per loss: a
 *     large importance weight never steps past the label.
 *
 * A coordinate's input a_j is its derivative of the logit: the feature's value for W, 1 for
 * b. Classes > 1: one against all, W and b hold a column per class, each class a binary
 * problem (its targets +1 for the example's class, -1 for the others).
 */
#ifndef FASTAD_ONLINE_H
#define FASTAD_ONLINE_H

#include <math.h>
#include <stdint.h>

/* A hint to fetch the cache line at p for writing (a hashed table's rows are far apart). */
#if defined(__GNUC__)
#define FA_ONLINE_PREFETCH(p) __builtin_prefetch((p), 1)
#else
#define FA_ONLINE_PREFETCH(p) ((void)(p))
#endif

enum { FA_ONLINE_LOGISTIC = 0, FA_ONLINE_SQUARED = 1, FA_ONLINE_HINGE = 2, FA_ONLINE_QUANTILE = 3 };

typedef struct {
    int loss;
    double tau;                 /* the quantile loss's tau */
    double eta;                 /* the learning rate */
    int64_t classes;            /* the columns of W and b (1, or one against all's K) */
    /* each weight interleaved with its G and N (one cache line: w[3j], w[3j + 1], w[3j + 2]) */
    float *w;                   /* W (rows x classes) */
    float *b;                   /* b (classes) */
    double total_weight;        /* the normalised rule's running sums */
    double sum_norm_x;
} fa_online;

/* The loss of prediction p against target y (+1/-1 for logistic and hinge). */
static inline double fa_online_loss(const fa_online* m, double p, double y) {
    switch (m->loss) {
    case FA_ONLINE_LOGISTIC: { double z = -y * p; return z > 0 ? z + log1p(exp(-z)) : log1p(exp(z)); }
    case FA_ONLINE_SQUARED: return (p - y) * (p - y);
    case FA_ONLINE_HINGE: return y * p < 1 ? 1 - y * p : 0;
    default: return y >= p ? m->tau * (y - p) : (1 - m->tau) * (p - y);
    }
}

/* The loss's derivative in p. */
static inline double fa_online_slope(const fa_online* m, double p, double y) {
    switch (m->loss) {
    case FA_ONLINE_LOGISTIC: return -y / (1 + exp(y * p));
    case FA_ONLINE_SQUARED: return 2 * (p - y);
    case FA_ONLINE_HINGE: return y * p < 1 ? -y : 0;
    default: return y > p ? -m->tau : (y < p ? 1 - m->tau : 0);
    }
}

/* The solution z of z + exp(z) = c (Newton's method from a bound on each side's form). */
static inline double fa_online_solve_logistic(double c) {
    double z = c > 1 ? log(c) : c - exp(c);
    for (int it = 0; it < 50; it++) {
        double e = exp(z), step = (z + e - c) / (1 + e);
        z -= step;
        if (fabs(step) <= 1e-12 * (1 + fabs(z))) break;
    }
    return z;
}

/* The step s of the invariant update: the prediction p becomes p + s u after the loss has
 * pulled it along for h (eta * importance) with u the prediction's change per unit of s. */
static inline double fa_online_step(const fa_online* m, double p, double y, double h, double u) {
    switch (m->loss) {
    case FA_ONLINE_LOGISTIC: {
        /* with z = y (p + s u): dz/dh = u / (1 + e^z), so z + e^z grows by h u */
        double z0 = y * p, z;
        if (h * u < 1e-6) return y * h / (1 + exp(z0));          /* first order: no cancellation */
        z = fa_online_solve_logistic(z0 + exp(z0) + h * u);
        return (y * z - p) / u;
    }
    case FA_ONLINE_SQUARED:
        if (h * u < 1e-6) return 2 * (y - p) * h;
        return (y - p) * -expm1(-2 * h * u) / u;
    case FA_ONLINE_HINGE: {
        double gap = 1 - y * p;                                  /* > 0 here */
        return y * (h * u < gap ? h : gap / u);
    }
    default: {
        double err = y - p;
        if (err > 0) return m->tau * h * u < err ? m->tau * h : err / u;
        return (1 - m->tau) * h * u < -err ? -(1 - m->tau) * h : err / u;
    }
    }
}

/* Coordinate j's statistics for input a (G, N updated, the weight rescaled when a's scale
 * is new); adds a^2 / N^2 to *norm and returns its rate 1 / (sqrt(G) N). */
static inline double fa_online_rate(float* w, double a, double g2, double* norm) {
    float *g = w + 1, *n = w + 2;
    double abs_a = fabs(a);
    *g += (float)(g2 * a * a);
    if (abs_a > *n) {
        if (*n > 0) *w = (float)(*w * (*n / abs_a));
        *n = (float)abs_a;
    }
    *norm += (a * a) / ((double)*n * *n);
    return 1.0 / (sqrt((double)*g) * *n);
}

/* The logit of one example for class c. */
static inline double fa_online_logit(const fa_online* m, const int32_t* ids, const float* x,
                                     int64_t len, int64_t c) {
    double p = m->b[3 * c];
    int64_t C = m->classes;
    for (int64_t i = 0; i < len; i++) p += (double)(x ? x[i] : 1.0f) * m->w[3 * ((int64_t)ids[i] * C + c)];
    return p;
}

/* One update of class c on one example of importance `weight` towards target y; `rate` is
 * scratch of len + 1 doubles. Returns the loss before the update. */
static inline double fa_online_example(fa_online* m, const int32_t* ids, const float* x, int64_t len,
                                       int64_t c, double y, double weight, double* rate) {
    int64_t C = m->classes;
    double p = fa_online_logit(m, ids, x, len, c);
    double loss = fa_online_loss(m, p, y);
    double slope = fa_online_slope(m, p, y);
    double g2 = slope * slope * weight;
    if (loss <= 0 || g2 <= 0) return loss;
    double norm = 0, u = 0;
    rate[0] = fa_online_rate(m->b + 3 * c, 1.0, g2, &norm);
    u += rate[0];
    for (int64_t i = 0; i < len; i++) {
        double a = x ? x[i] : 1.0;
        if (a == 0) { rate[1 + i] = 0; continue; }
        rate[1 + i] = fa_online_rate(m->w + 3 * ((int64_t)ids[i] * C + c), a, g2, &norm);
        u += a * a * rate[1 + i];
    }
    m->total_weight += weight;
    m->sum_norm_x += weight * norm;
    double multiplier = sqrt(m->total_weight / m->sum_norm_x);
    u *= multiplier;
    double step = fa_online_step(m, p, y, m->eta * weight, u) * multiplier;
    m->b[3 * c] += (float)(step * rate[0]);
    for (int64_t i = 0; i < len; i++)
        m->w[3 * ((int64_t)ids[i] * C + c)] += (float)(step * (x ? x[i] : 1.0) * rate[1 + i]);
    return loss;
}

/* One pass over the examples order[0..n): each class's update (targets: n x classes).
 * Returns the sum of importance * loss before each update (VW's progressive loss). */
static inline double fa_online_pass(fa_online* m, const int32_t* ids, const int64_t* offsets,
                                    const float* values, const float* targets, const float* weights,
                                    const int64_t* order, int64_t n, double* scratch) {
    int64_t C = m->classes;
    double total = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t r = order[e], start = offsets[r], len = offsets[r + 1] - start;
        double weight = weights ? weights[r] : 1.0;
        if (e + 1 < n) {            /* the next example's weights on their way while this one trains */
            int64_t next = order[e + 1];
            for (int64_t i = offsets[next]; i < offsets[next + 1]; i++)
                FA_ONLINE_PREFETCH(m->w + 3 * (int64_t)ids[i] * C);
        }
        if (weight <= 0) continue;
        for (int64_t c = 0; c < C; c++)
            total += weight * fa_online_example(m, ids + start, values ? values + start : 0, len, c,
                                                targets[r * C + c], weight, scratch);
    }
    return total;
}

#endif

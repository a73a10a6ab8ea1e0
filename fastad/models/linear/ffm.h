/* FactorizationMachine(field_aware=True): a field-aware factorization machine (libffm's form,
 * Juan et al. 2016), one example at a time over CSR bags:
 *
 *   logit = b + sum_p x_p W[i_p] + sum over pairs p < q of x_p x_q <V[i_p, f_q], V[i_q, f_p]>
 *
 * for the example's positions p (feature i_p, value x_p, field f_p): each feature holds a
 * k-vector per field, and a pair takes the vector each feature keeps for the other's field.
 * A position of field -1 (a field the model was not trained on) takes no pair. Trained by
 * AdaGrad as libffm (each coordinate's accumulator starting at 1: the tables keep the sum of
 * the squared gradients, from 0, and a step divides by the square root of 1 plus it, so a
 * new table is zeros that no page of is written before its row is used), our code.
 *
 * With one field this is Rendle's factorization machine (FactorizationMachine's default
 * form): every pair takes <V[i_p], V[i_q]>, and the logit is computed in O(len k) as
 * 1/2 sum_f ((sum_p x_p V[i_p, f])^2 - sum_p x_p^2 V[i_p, f]^2), with the gradient
 * x_p (s_f - x_p V[i_p, f]) in V[i_p, f], s the first sum (libFM's form); or, crossed,
 * only the pairs between two sides (two namespaces: VW's --lrq).
 */
#ifndef FASTAD_FFM_H
#define FASTAD_FFM_H

#include <math.h>
#include <stdint.h>
#include <string.h>

typedef struct {
    int64_t fields, k;
    float *w, *w_g;             /* W (rows) and its AdaGrad sums (less libffm's initial 1) */
    float *b, *b_g;             /* b (1) */
    float *v, *v_g;             /* V (rows x fields x k) */
    int interleaved;            /* 0: W and V alone; 1: each weight of W followed by its sum, each
                                   k-vector of V by its k sums (w_g = w + 1, v_g = v + k): a row's
                                   step then reads one cache line where it read two */
    double lr;
    int logistic;               /* the loss: logistic (targets 0/1) or squared */
    int crossed;                /* one field: only the pairs across sides 0 and 1 (fa_fm_pairs) */
} fa_ffm;

/* The k-vector of V (or of its sums, table m->v_g) of feature id and field. */
static inline const float* fa_ffm_row(const fa_ffm* m, const float* table, int32_t id, int32_t field) {
    return table + (((int64_t)id * m->fields + field) * m->k << m->interleaved);
}

/* W's weight (or sum) of feature id. */
static inline int64_t fa_ffm_at(const fa_ffm* m, int32_t id) {
    return (int64_t)id << m->interleaved;
}

/* A one-field model's linear part and pairs in O(len k) (the factorization machine); dv as
 * fa_ffm_logit's. Crossed (VW's --lrq ab): a position's field is its side, 0 or 1 (-1: none),
 * and only pairs across the sides count, sum_f s0_f s1_f with s_i the sides' sums; the
 * gradient in V[i_p, f] is x_p times the other side's sum. s: scratch of 2 k (the sums). */
static inline double fa_fm_pairs(const fa_ffm* m, const int32_t* ids, const float* x, const int32_t* fields,
                                 int64_t len, double* dv, double* s) {
    int64_t k = m->k;
    double p = 0, squares = 0;
    for (int64_t f = 0; f < 2 * k; f++) s[f] = 0;
    for (int64_t a = 0; a < len; a++) {
        double xa = x ? x[a] : 1.0;
        p += xa * m->w[fa_ffm_at(m, ids[a])];
        if (fields[a] < 0) continue;
        const float* va = fa_ffm_row(m, m->v, ids[a], 0);
        double* sa = s + (m->crossed ? fields[a] : 0) * k;
        for (int64_t f = 0; f < k; f++) {
            double t = xa * va[f];
            sa[f] += t;
            squares += t * t;
        }
    }
    if (m->crossed)
        for (int64_t f = 0; f < k; f++) p += s[f] * s[k + f];
    else {
        for (int64_t f = 0; f < k; f++) p += 0.5 * s[f] * s[f];
        p -= 0.5 * squares;
    }
    if (dv)
        for (int64_t a = 0; a < len; a++) {
            double xa = x ? x[a] : 1.0;
            const float* va = fa_ffm_row(m, m->v, ids[a], 0);
            if (fields[a] < 0)
                for (int64_t f = 0; f < k; f++) dv[a * k + f] = 0;
            else if (m->crossed) {
                const double* other = s + (1 - fields[a]) * k;
                for (int64_t f = 0; f < k; f++) dv[a * k + f] = xa * other[f];
            } else
                for (int64_t f = 0; f < k; f++) dv[a * k + f] = xa * (s[f] - xa * va[f]);
        }
    return p;
}

/* The logit of one example; with dv (len x fields x k), also its gradient in V[i_p, f] at
 * dv[p, f] (only the fields of the example's positions are written; the rest zeroed).
 * sums: scratch of 2 k (the one-field model's, fa_fm_pairs). */
static inline double fa_ffm_logit(const fa_ffm* m, const int32_t* ids, const float* x, const int32_t* fields,
                                  int64_t len, double* dv, double* sums) {
    int64_t F = m->fields, k = m->k;
    double p = m->b[0];
    if (F == 1) return p + fa_fm_pairs(m, ids, x, fields, len, dv, sums);
    if (dv) memset(dv, 0, sizeof(double) * (size_t)(len * F * k));
    for (int64_t a = 0; a < len; a++) {
        double xa = x ? x[a] : 1.0;
        p += xa * m->w[fa_ffm_at(m, ids[a])];
        if (fields[a] < 0) continue;
        for (int64_t c = a + 1; c < len; c++) {
            if (fields[c] < 0) continue;
            double xc = x ? x[c] : 1.0, xx = xa * xc, dot = 0;
            const float* va = fa_ffm_row(m, m->v, ids[a], fields[c]);
            const float* vc = fa_ffm_row(m, m->v, ids[c], fields[a]);
            for (int64_t f = 0; f < k; f++) dot += (double)va[f] * vc[f];
            p += xx * dot;
            if (dv) {
                double* ga = dv + (a * F + fields[c]) * k;
                double* gc = dv + (c * F + fields[a]) * k;
                for (int64_t f = 0; f < k; f++) { ga[f] += xx * vc[f]; gc[f] += xx * va[f]; }
            }
        }
    }
    return p;
}

static inline void fa_ffm_adagrad(float* w, float* g, double grad, double lr) {
    *g += (float)(grad * grad);
    *w -= (float)(lr * grad / sqrt(1.0 + *g));
}

/* AdaGrad on k weights of one row, the gradient slope * grad[j], in float (a loop gcc
 * vectorises). */
static inline void fa_ffm_adagrad_row(float* restrict w, float* restrict g, const double* restrict grad,
                                      double slope, double lr, int64_t k) {
    float rate = (float)lr;
    for (int64_t j = 0; j < k; j++) {
        float gj = (float)(slope * grad[j]);
        g[j] += gj * gj;
        w[j] -= rate * gj / sqrtf(1.0f + g[j]);
    }
}

/* One AdaGrad step on one example of importance `weight`; dv is scratch of len x fields x k,
 * sums of 2 k. Returns the loss before the step. */
static inline double fa_ffm_example(fa_ffm* m, const int32_t* ids, const float* x, const int32_t* fields,
                                    int64_t len, double y, double weight, double* dv, double* sums) {
    int64_t F = m->fields, k = m->k;
    double p = fa_ffm_logit(m, ids, x, fields, len, dv, sums), loss, slope;
    if (m->logistic) {
        double z = p > 0 ? p : -p;
        loss = log1p(exp(-z)) + (p > 0 ? p : 0) - y * p;
        slope = 1 / (1 + exp(-p)) - y;
    } else {
        loss = (p - y) * (p - y);
        slope = 2 * (p - y);
    }
    slope *= weight;
    if (slope == 0) return loss;
    fa_ffm_adagrad(m->b, m->b_g, slope, m->lr);
    for (int64_t a = 0; a < len; a++) {
        int64_t at = fa_ffm_at(m, ids[a]);
        fa_ffm_adagrad(m->w + at, m->w_g + at, slope * (x ? x[a] : 1.0), m->lr);
        if (fields[a] < 0) continue;
        for (int64_t f = 0; f < F; f++) {
            const double* g = dv + (a * F + f) * k;
            int64_t row = fa_ffm_row(m, m->v, ids[a], (int32_t)f) - m->v;
            int touched = 0;
            for (int64_t j = 0; j < k; j++) touched |= g[j] != 0;
            if (!touched) continue;
            fa_ffm_adagrad_row(m->v + row, m->v_g + row, g, slope, m->lr, k);
        }
    }
    return loss;
}

/* One pass over the examples order[0..n); returns the sum of importance * loss. scratch: 2 k
 * doubles, then longest x fields x k. */
static inline double fa_ffm_pass(fa_ffm* m, const int32_t* ids, const int64_t* offsets, const float* values,
                                 const int32_t* fields, const float* targets, const float* weights,
                                 const int64_t* order, int64_t n, double* scratch) {
    double total = 0;
    for (int64_t e = 0; e < n; e++) {
        int64_t r = order[e], start = offsets[r];
        double weight = weights ? weights[r] : 1.0;
        if (weight <= 0) continue;
        total += weight * fa_ffm_example(m, ids + start, values ? values + start : 0, fields + start,
                                         offsets[r + 1] - start, targets[r], weight, scratch + 2 * m->k, scratch);
    }
    return total;
}

/* The logit of each example r < n into out; sums: scratch of 2 k. */
static inline void fa_ffm_logits(const fa_ffm* m, const int32_t* ids, const int64_t* offsets, const float* values,
                                 const int32_t* fields, int64_t n, double* out, double* sums) {
    for (int64_t r = 0; r < n; r++)
        out[r] = fa_ffm_logit(m, ids + offsets[r], values ? values + offsets[r] : 0, fields + offsets[r],
                              offsets[r + 1] - offsets[r], 0, sums);
}

#endif

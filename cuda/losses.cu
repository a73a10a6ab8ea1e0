// The losses: cross-entropy and NLL over class ids, and the pointwise losses (BCE with
// logits, MSE, Huber, their rules in fastad/ops/rules.h). The arithmetic follows
// fastad/ops/losses.pyx step by step.
//
// A reduced loss ("mean" or "sum") goes through `acc`, three doubles owned by the op:
// the forward kernel adds each thread's partial sum of the losses into acc[0] and its
// count of kept elements into acc[1] (atomicAdd, after acc[0..1] were zeroed), then
// loss_finish writes the output and the scale the backward applies, acc[2]
// (1 / count for "mean", 1 for "sum"; the op sets acc[2] = 1 once for "none").

// A quiet NaN, without NAN from <math.h> (NVRTC has no headers).
__device__ __forceinline__ double fa_nan() {
    double zero = 0;
    return zero / zero;
}

// --------------------------------------------------------- reduced losses

// One thread's partial sum of the losses and count of kept elements, into acc.
__device__ __forceinline__ void fa_add_partial(double* acc, double total, double kept) {
    atomicAdd(acc, total);
    atomicAdd(acc + 1, kept);
}

// out[0] = acc[0] * scale, scale = 1 / acc[1] for "mean" (NaN when nothing was
// counted, as torch's mean of nothing) or 1 for "sum"; the scale is kept in acc[2].
template <typename T>
__global__ void loss_finish(double* acc, T* out, int mean) {
    FA_GRID_STRIDE(i, 1) {
        double scale = mean ? (acc[1] > 0 ? 1.0 / acc[1] : fa_nan()) : 1.0;
        acc[2] = scale;
        out[0] = T(acc[0] * scale);
    }
}

// ------------------------------------------------------ class-target losses
// x is (rows, classes); t holds rows class ids, each in [0, classes) or `ignore`. An id
// outside both (which only an IndexInput's ids below their bound can be, see
// fastad/cuda/ops/losses.py) is never read through: its row's loss and gradient are NaN.
// The forward copies the ids it used into t_saved (which may be t itself), so the
// backward uses them even if the IndexInput changed in between.

__device__ __forceinline__ bool fa_class_ok(i64 t, i64 classes) { return t >= 0 && t < classes; }

// Row b's loss = lse - (1 - smoothing) * x[b, t] - smoothing * mean(x[b]), lse the row's
// log-sum-exp (kept for the backward); 0 for an ignored row. each = 1: into losses[b];
// each = 0: summed (and counted) into acc.
template <typename T>
__global__ void cross_entropy_forward(const T* x, const i64* t, i64* t_saved, T* lse, T* losses,
                                      i64 rows, i64 classes, i64 ignore, T smoothing, int each,
                                      double* acc) {
    double total = 0, kept = 0;
    FA_GRID_STRIDE(b, rows) {
        i64 tb = t[b];
        t_saved[b] = tb;
        T loss = 0;
        if (tb != ignore && fa_class_ok(tb, classes)) {
            const T* xr = x + b * classes;
            T m = xr[0];  // the row's max; NaN if any element is NaN
            for (i64 c = 1; c < classes; ++c) {
                if (xr[c] > m || xr[c] != xr[c]) m = xr[c];
            }
            T s = 0;
            for (i64 c = 0; c < classes; ++c) s += fa_exp(xr[c] - m);
            lse[b] = m + fa_log(s);
            loss = lse[b] - (T(1) - smoothing) * xr[tb];
            if (smoothing != 0) {
                T row_sum = 0;
                for (i64 c = 0; c < classes; ++c) row_sum += xr[c];
                loss -= smoothing * row_sum / T(classes);
            }
        } else if (tb != ignore) {
            loss = T(fa_nan());
        }
        kept += tb != ignore;
        if (each) losses[b] = loss;
        total += loss;
    }
    if (!each) fa_add_partial(acc, total, kept);
}

// gx[b, c] (+)= g * (softmax(x[b])[c] - smoothing / classes - (1 - smoothing) * [c == t]),
// g = gy[b * gy_step] * acc[2]; 0 for an ignored row. One thread per element.
template <typename T>
__global__ void cross_entropy_backward(const T* x, const i64* t, const T* lse, const T* gy,
                                       i64 gy_step, const double* acc, T* gx, i64 rows,
                                       i64 classes, i64 ignore, T smoothing, int accumulate) {
    T off = smoothing / T(classes);
    FA_GRID_STRIDE(i, rows * classes) {
        i64 b = i / classes, c = i % classes, tb = t[b];
        T v = 0;
        if (tb != ignore) {
            T g = gy[b * gy_step] * T(acc[2]);
            if (fa_class_ok(tb, classes)) {
                v = g * (fa_exp(x[i] - lse[b]) - off);
                if (c == tb) v -= g * (T(1) - smoothing);
            } else {
                v = T(fa_nan());
            }
        }
        fa_put(gx + i, v, accumulate);
    }
}

// Row b's loss = -x[b, t[b]], 0 for an ignored row; each and acc as in cross_entropy_forward.
template <typename T>
__global__ void nll_forward(const T* x, const i64* t, i64* t_saved, T* losses, i64 rows,
                            i64 classes, i64 ignore, int each, double* acc) {
    double total = 0, kept = 0;
    FA_GRID_STRIDE(b, rows) {
        i64 tb = t[b];
        t_saved[b] = tb;
        T loss = 0;
        if (tb != ignore) loss = fa_class_ok(tb, classes) ? -x[b * classes + tb] : T(fa_nan());
        kept += tb != ignore;
        if (each) losses[b] = loss;
        total += loss;
    }
    if (!each) fa_add_partial(acc, total, kept);
}

// gx[b, c] (+)= -gy[b * gy_step] * acc[2] where c == t[b] (not ignored), else 0.
template <typename T>
__global__ void nll_backward(const i64* t, const T* gy, i64 gy_step, const double* acc, T* gx,
                             i64 rows, i64 classes, i64 ignore, int accumulate) {
    FA_GRID_STRIDE(i, rows * classes) {
        i64 b = i / classes, c = i % classes, tb = t[b];
        T v = 0;
        if (tb != ignore) {
            if (!fa_class_ok(tb, classes)) v = T(fa_nan());
            else if (c == tb) v = -(gy[b * gy_step] * T(acc[2]));
        }
        fa_put(gx + i, v, accumulate);
    }
}

// ---------------------------------------------------------- pointwise losses

// Each element's loss into losses[i] (each = 1), or summed and counted into acc (each = 0).
template <typename T>
__global__ void pointwise_loss_forward(int op, const T* a, const T* b, T* losses, i64 n, T delta,
                                       int each, double* acc) {
    double total = 0, count = 0;
    FA_GRID_STRIDE(i, n) {
        T v = fa_loss_value(op, a[i], b[i], delta);
        if (each) losses[i] = v;
        total += v;
        count += 1;
    }
    if (!each) fa_add_partial(acc, total, count);
}

// g (+)= gy[i * gy_step] * acc[2] * d(loss)/da (to_a = 1) or d(loss)/db (to_a = 0).
template <typename T>
__global__ void pointwise_loss_backward(int op, int to_a, const T* a, const T* b, const T* gy,
                                        i64 gy_step, const double* acc, T* g, i64 n, T delta,
                                        int accumulate) {
    T scale = T(acc[2]);
    FA_GRID_STRIDE(i, n) {
        T v = gy[i * gy_step] * scale;
        v *= to_a ? fa_loss_da(op, a[i], b[i], delta) : fa_loss_db(op, a[i], b[i], delta);
        fa_put(g + i, v, accumulate);
    }
}

// Elementwise ops: unary functions, broadcasting binary ops (+ - * / pow maximum minimum and
// the comparisons), where, and the small buffer kernels
// (fill, copy-or-add, finiteness check) the engine uses.
// Each op's value and derivative are rules of fastad/ops/rules.h, shared with the CPU.

template <typename T>
__global__ void unary_forward(const T* x, T* y, i64 n, int op, T p) {
    FA_GRID_STRIDE(i, n) { y[i] = fa_unary_value(op, x[i], p); }
}

template <typename T>
__global__ void unary_backward(const T* x, const T* y, const T* gy, T* gx, i64 n, int op, T p,
                               int accumulate) {
    FA_GRID_STRIDE(i, n) { fa_put(gx + i, gy[i] * fa_unary_slope(op, x[i], y[i], p), accumulate); }
}

// out[i] = a op b over the output's n elements. meta = [dims(nd), a strides(nd),
// b strides(nd)] in elements, 0 along broadcast axes; nd = 0 when a, b and out
// share one shape.
template <typename T>
__global__ void binary_forward(const T* a, const T* b, T* out, i64 n, int op, const i64* meta,
                               int nd) {
    FA_GRID_STRIDE(i, n) {
        i64 oa = i, ob = i;
        if (nd) {
            oa = fa_offset(i, meta, meta + nd, nd);
            ob = fa_offset(i, meta, meta + 2 * nd, nd);
        }
        out[i] = fa_binary_value(op, a[oa], b[ob]);
    }
}

// g[i] (+)= gy[i] * d(out)/d(operand) at each of the output's n elements, for the
// operand a (to_a) or b: the gradient of an operand of the output's shape, or, written
// into scratch, the terms a broadcast operand's gradient sums (the chunked reduce_sum
// does that sum; see Binary in fastad/cuda/ops/elementwise.py). meta and nd as in
// binary_forward.
template <typename T>
__global__ void binary_backward(const T* a, const T* b, const T* y, const T* gy, T* g, i64 n,
                                int op, int to_a, const i64* meta, int nd, int accumulate) {
    FA_GRID_STRIDE(i, n) {
        i64 oa = nd ? fa_offset(i, meta, meta + nd, nd) : i;
        i64 ob = nd ? fa_offset(i, meta, meta + 2 * nd, nd) : i;
        T slope = to_a ? fa_binary_da(op, a[oa], b[ob], y[i])
                        : fa_binary_db(op, a[oa], b[ob], y[i]);
        fa_put(g + i, gy[i] * slope, accumulate);
    }
}

// out[i] = a where cond is nonzero, else b, over the output's n elements. meta = [dims(nd),
// cond strides(nd), a strides(nd), b strides(nd)], as in binary_forward; nd = 0 when
// all four share one shape.
template <typename T>
__global__ void where_forward(const T* cond, const T* a, const T* b, T* out, i64 n,
                              const i64* meta, int nd) {
    FA_GRID_STRIDE(i, n) {
        i64 oc = i, oa = i, ob = i;
        if (nd) {
            oc = fa_offset(i, meta, meta + nd, nd);
            oa = fa_offset(i, meta, meta + 2 * nd, nd);
            ob = fa_offset(i, meta, meta + 3 * nd, nd);
        }
        out[i] = cond[oc] != T(0) ? a[oa] : b[ob];
    }
}

// g[i] (+)= gy[i] where cond picks the operand (a: to_a, where cond is nonzero; b: where
// it is 0), else 0, at each of the output's n elements: an operand's gradient, or the
// terms a broadcast operand's gradient sums (as binary_backward). meta and nd as in
// where_forward.
template <typename T>
__global__ void where_backward(const T* cond, const T* gy, T* g, i64 n, int to_a,
                               const i64* meta, int nd, int accumulate) {
    FA_GRID_STRIDE(i, n) {
        i64 oc = nd ? fa_offset(i, meta, meta + nd, nd) : i;
        bool picked = (cond[oc] != T(0)) == (to_a != 0);
        fa_put(g + i, picked ? gy[i] : T(0), accumulate);
    }
}

template <typename T>
__global__ void fill(T* out, i64 n, T value) {
    FA_GRID_STRIDE(i, n) { out[i] = value; }
}

// dst = src (accumulate 0) or dst += src (accumulate 1).
template <typename T>
__global__ void copy_or_add(const T* src, T* dst, i64 n, int accumulate) {
    FA_GRID_STRIDE(i, n) { fa_put(dst + i, src[i], accumulate); }
}

// flag[0] becomes 1 if any of x's n elements is NaN or infinite (flag starts at 0).
template <typename T>
__global__ void all_finite(const T* x, i64 n, int* flag) {
    FA_GRID_STRIDE(i, n) {
        if (!fa_isfinite(x[i])) atomicExch(flag, 1);
    }
}

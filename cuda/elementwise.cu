// Elementwise ops: unary functions, broadcasting + - * /, row-wise dot, and the
// small buffer kernels (fill, copy-or-add, finiteness check) the engine uses.
// Each op's value and derivative stand side by side, as in fastad_cy/elementwise.pyx.

// The order of fastad.cuda.kernels.UNARY_OPS.
enum UnaryOp {
    U_NEG, U_EXP, U_LOG, U_TANH, U_SIGMOID, U_RELU, U_SOFTPLUS, U_LOGSIGMOID,
    U_SQRT, U_SQUARE, U_ABS, U_POW,
    U_ADD_SCALAR, U_RSUB_SCALAR, U_MUL_SCALAR, U_DIV_SCALAR, U_RDIV_SCALAR
};

// y = f(x); p is the exponent of U_POW or the number of a *_SCALAR op.
template <typename T> __device__ __forceinline__ T unary_value(int op, T x, T p) {
    switch (op) {
        case U_NEG: return -x;
        case U_EXP: return fa_exp(x);
        case U_LOG: return fa_log(x);
        case U_TANH: return fa_tanh(x);
        case U_SIGMOID: return fa_sigmoid(x);
        case U_RELU: return x > 0 ? x : T(0);
        case U_SOFTPLUS: return fa_softplus(x);
        case U_LOGSIGMOID: return -fa_softplus(-x);
        case U_SQRT: return fa_sqrt(x);
        case U_SQUARE: return x * x;
        case U_ABS: return fa_abs(x);
        case U_POW: return fa_pow(x, p);
        case U_ADD_SCALAR: return x + p;
        case U_RSUB_SCALAR: return p - x;
        case U_MUL_SCALAR: return x * p;
        case U_DIV_SCALAR: return x / p;
        default: return p / x;  // U_RDIV_SCALAR
    }
}

// dy/dx, from the input x and the output y.
template <typename T> __device__ __forceinline__ T unary_slope(int op, T x, T y, T p) {
    switch (op) {
        case U_NEG: return T(-1);
        case U_EXP: return y;
        case U_LOG: return T(1) / x;
        case U_TANH: return T(1) - y * y;
        case U_SIGMOID: return y * (T(1) - y);
        case U_RELU: return x > 0 ? T(1) : T(0);
        case U_SOFTPLUS: return fa_sigmoid(x);
        case U_LOGSIGMOID: return fa_sigmoid(-x);
        case U_SQRT: return T(0.5) / y;
        case U_SQUARE: return T(2) * x;
        case U_ABS: return T((x > 0) - (x < 0));
        case U_POW: return p == 0 ? T(0) : p * fa_pow(x, p - T(1));
        case U_ADD_SCALAR: return T(1);
        case U_RSUB_SCALAR: return T(-1);
        case U_MUL_SCALAR: return p;
        case U_DIV_SCALAR: return T(1) / p;
        default: return -y / x;  // U_RDIV_SCALAR
    }
}

template <typename T>
__global__ void unary_forward(const T* x, T* y, i64 n, int op, T p) {
    FA_GRID_STRIDE(i, n) { y[i] = unary_value(op, x[i], p); }
}

template <typename T>
__global__ void unary_backward(const T* x, const T* y, const T* gy, T* gx, i64 n, int op, T p,
                               int accumulate) {
    FA_GRID_STRIDE(i, n) { fa_put(gx + i, gy[i] * unary_slope(op, x[i], y[i], p), accumulate); }
}

// The order of fastad.cuda.kernels.BINARY_OPS.
enum BinaryOp { B_ADD, B_SUB, B_MUL, B_DIV };

template <typename T> __device__ __forceinline__ T binary_value(int op, T a, T b) {
    switch (op) {
        case B_ADD: return a + b;
        case B_SUB: return a - b;
        case B_MUL: return a * b;
        default: return a / b;
    }
}

// d(a op b)/da and d(a op b)/db, given y = a op b.
template <typename T> __device__ __forceinline__ T binary_da(int op, T a, T b, T y) {
    if (op == B_MUL) return b;
    if (op == B_DIV) return T(1) / b;
    return T(1);
}
template <typename T> __device__ __forceinline__ T binary_db(int op, T a, T b, T y) {
    if (op == B_ADD) return T(1);
    if (op == B_SUB) return T(-1);
    if (op == B_MUL) return a;
    return -y / b;
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
        out[i] = binary_value(op, a[oa], b[ob]);
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
        T slope = to_a ? binary_da(op, a[oa], b[ob], y[i]) : binary_db(op, a[oa], b[ob], y[i]);
        fa_put(g + i, gy[i] * slope, accumulate);
    }
}

// Row-wise dot product of two (rows, k) arrays: out[r] = sum_j a[r, j] * b[r, j].
template <typename T>
__global__ void row_dot_forward(const T* a, const T* b, T* out, i64 rows, i64 k) {
    FA_GRID_STRIDE(r, rows) {
        T total = 0;
        for (i64 j = 0; j < k; ++j) total += a[r * k + j] * b[r * k + j];
        out[r] = total;
    }
}

// g[r, j] (+)= gy[r] * other[r, j]: the gradient of one operand of row_dot.
template <typename T>
__global__ void row_dot_backward(const T* other, const T* gy, T* g, i64 rows, i64 k,
                                 int accumulate) {
    FA_GRID_STRIDE(i, rows * k) { fa_put(g + i, gy[i / k] * other[i], accumulate); }
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

// vector_dot (fastad/ops/linalg.pyx); matmul goes to cuBLAS and has no kernel here.

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

// Elements by flat position: transpose, indexing, concat and stack. Positions are
// computed and checked on the host.

// out[i] (+)= x[positions[i]].
template <typename T>
__global__ void gather_positions(const T* x, const i64* positions, T* out, i64 n, int accumulate) {
    FA_GRID_STRIDE(i, n) { fa_put(out + i, x[positions[i]], accumulate); }
}

// out[positions[i]] = x[i] (positions distinct).
template <typename T>
__global__ void put_positions(const T* x, const i64* positions, T* out, i64 n) {
    FA_GRID_STRIDE(i, n) { out[positions[i]] = x[i]; }
}

// grad[positions[i]] += g[i]; repeated positions add (atomically).
template <typename T>
__global__ void scatter_add_positions(const T* g, const i64* positions, T* grad, i64 n) {
    FA_GRID_STRIDE(i, n) { atomicAdd(grad + positions[i], g[i]); }
}

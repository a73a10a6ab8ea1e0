// Rows of a table by id: take's gather and its sparse gradient (scatter-add),
// take_along_axis's gather and scatter-add, and the buffers of a sparse gradient's
// record of touched rows. Ids are checked on the host
// before any of these runs.

// out[k, :] = table[ids[k], :] for each of the n_ids ids.
template <typename T>
__global__ void gather_rows(const T* table, const i64* ids, T* out, i64 n_ids, i64 row_len) {
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 k = i / row_len, j = i % row_len;
        out[i] = table[ids[k] * row_len + j];
    }
}

// grad[ids[k], :] += rows[k, :]; repeated ids add (atomically).
template <typename T>
__global__ void scatter_add_rows(const T* rows, const i64* ids, T* grad, i64 n_ids, i64 row_len) {
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 k = i / row_len, j = i % row_len;
        atomicAdd(grad + ids[k] * row_len + j, rows[i]);
    }
}

// grad[ids[k], :] = 0 (a sparse gradient's rows, cleared by zero_grad).
template <typename T>
__global__ void zero_rows(T* grad, const i64* ids, i64 n_ids, i64 row_len) {
    FA_GRID_STRIDE(i, n_ids * row_len) { grad[ids[i / row_len] * row_len + i % row_len] = T(0); }
}

// dst[i] = src[i] for int64 ids (T is unused: instantiated once per table dtype).
template <typename T>
__global__ void copy_ids(const i64* src, i64* dst, i64 n) {
    FA_GRID_STRIDE(i, n) { dst[i] = src[i]; }
}

// take_along_axis, x viewed as (outer, n, inner), ids and out as (outer, k, inner):
// out[o, a, j] = x[o, ids[o, a, j], j].
template <typename T>
__global__ void along_forward(const T* x, const i64* ids, T* out, i64 size, i64 n, i64 k,
                              i64 inner) {
    FA_GRID_STRIDE(i, size) {
        i64 o = i / (k * inner), j = i % inner;
        out[i] = x[(o * n + ids[i]) * inner + j];
    }
}

// grad[o, ids[o, a, j], j] += g[o, a, j]; repeated ids add (atomically).
template <typename T>
__global__ void along_scatter_add(const T* g, const i64* ids, T* grad, i64 size, i64 n, i64 k,
                                  i64 inner) {
    FA_GRID_STRIDE(i, size) {
        i64 o = i / (k * inner), j = i % inner;
        atomicAdd(grad + (o * n + ids[i]) * inner + j, g[i]);
    }
}

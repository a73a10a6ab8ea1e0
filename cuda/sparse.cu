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

// grad[ids[k], :] += rows[k, :] except for the row skip_id (embedding's padding_idx; -1:
// none); repeated ids add (atomically).
template <typename T>
__global__ void scatter_add_rows(const T* rows, const i64* ids, T* grad, i64 n_ids, i64 row_len,
                                 i64 skip_id) {
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 k = i / row_len, j = i % row_len;
        if (ids[k] != skip_id) atomicAdd(grad + ids[k] * row_len + j, rows[i]);
    }
}

// embedding's max_norm: each distinct row ids[k] (the position k that claim_rows let own it)
// whose norm_type-norm (the largest magnitude when largest) exceeds max_norm is scaled in
// place to max_norm / (norm + 1e-7) of itself, as torch.embedding_renorm_.
template <typename T>
__global__ void renorm_rows(T* table, const i64* ids, const int* owner, i64 n_ids, i64 row_len,
                            double max_norm, double norm_type, int largest) {
    FA_GRID_STRIDE(k, n_ids) {
        if (owner[ids[k]] == (int)k) {
            T* row = table + ids[k] * row_len;
            double total = 0.0;
            for (i64 j = 0; j < row_len; ++j) {
                double x = fa_abs((double)row[j]);
                if (largest) total = fa_max(total, x);
                else total += norm_type == 2.0 ? x * x : fa_pow(x, norm_type);
            }
            double norm = largest ? total : norm_type == 2.0 ? fa_sqrt(total)
                                                             : fa_pow(total, 1.0 / norm_type);
            if (norm > max_norm) {
                T scale = T(max_norm / (norm + 1e-7));
                for (i64 j = 0; j < row_len; ++j) row[j] *= scale;
            }
        }
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

// embedding_bag: out[b, :] = the sum (or, when mean, the mean) of table[ids[k], :] (times
// weights[k] when weighted: per_sample_weights) over bag b's positions k in [bounds[b],
// bounds[b + 1]); an empty bag is zeros. The bounds come from offsets checked on the host
// (sorted, within the ids).
template <typename T>
__global__ void bag_forward(const T* table, const i64* ids, const i64* bounds, const T* weights,
                            T* out, i64 n_bags, i64 row_len, int mean, int weighted) {
    FA_GRID_STRIDE(i, n_bags * row_len) {
        i64 b = i / row_len, j = i % row_len;
        i64 start = bounds[b], end = bounds[b + 1];
        T total = T(0);
        for (i64 k = start; k < end; ++k)
            total += weighted ? weights[k] * table[ids[k] * row_len + j] : table[ids[k] * row_len + j];
        out[i] = mean && end - start > 1 ? total * T(1.0 / double(end - start)) : total;
    }
}

// The bag of position k: the last bag b with bounds[b] <= k (so empty bags are skipped).
__device__ inline i64 bag_of(const i64* bounds, i64 n_bags, i64 k) {
    i64 lo = 0, hi = n_bags - 1;
    while (lo < hi) {
        i64 mid = (lo + hi + 1) / 2;
        if (bounds[mid] <= k) lo = mid; else hi = mid - 1;
    }
    return lo;
}

// rows[k, :] = grad[b, :] (times 1 / the bag's size when mean, weights[k] when weighted) for
// each position k in [first, first + used) of bag b.
template <typename T>
__global__ void bag_backward_rows(const T* grad, const i64* bounds, const T* weights, T* rows,
                                  i64 n_bags, i64 first, i64 used, i64 row_len, int mean,
                                  int weighted) {
    FA_GRID_STRIDE(i, used * row_len) {
        i64 k = first + i / row_len, j = i % row_len;
        i64 b = bag_of(bounds, n_bags, k);
        i64 count = bounds[b + 1] - bounds[b];
        T scale = mean ? T(1.0 / double(count)) : weighted ? weights[k] : T(1);
        rows[k * row_len + j] = grad[b * row_len + j] * scale;
    }
}

// The gradient of per_sample_weights: gw[k] = (gw[k] +) grad[b, :] . table[ids[k], :] for the
// position k of bag b, 0 for positions outside every bag.
template <typename T>
__global__ void bag_weights_backward(const T* grad, const T* table, const i64* ids,
                                     const i64* bounds, T* gw, i64 n_ids, i64 n_bags, i64 row_len,
                                     int accumulate) {
    FA_GRID_STRIDE(k, n_ids) {
        T dot = T(0);
        if (n_bags > 0 && k >= bounds[0] && k < bounds[n_bags]) {
            i64 b = bag_of(bounds, n_bags, k);
            for (i64 j = 0; j < row_len; ++j) dot += grad[b * row_len + j] * table[ids[k] * row_len + j];
        }
        gw[k] = accumulate ? gw[k] + dot : dot;
    }
}

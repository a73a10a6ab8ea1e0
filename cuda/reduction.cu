// Reductions over any axes: sum (and mean), max, min, logsumexp, the 2-norm, and their
// backward; argmax/argmin and cumsum along one axis; and softmax and log_softmax along
// one axis (fastad/ops/reduction.pyx's `_softmax`).
// meta = [dims(nd), keep(nd)] of the input: keep[k] != 0 for the axes the output
// keeps (see FaFold in common.cuh); nd = 0 for a 0-d input. As in
// fastad/ops/reduction.pyx, max's gradient is shared equally among ties and
// logsumexp shifts by the max (by 0 when the max is not finite).

// out[slot] (+)= scale * (sum of the slot's elements). With n_chunks > 1, thread t
// sums chunk t % n_chunks of slot t / n_chunks and adds it atomically: the caller
// zeroes out first, and accumulate must be 1.
template <typename T>
__global__ void reduce_sum(const T* x, T* out, i64 n_slots, i64 chunk, i64 n_chunks,
                           const i64* meta, int nd, T scale, int accumulate) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(t, n_slots * n_chunks) {
        i64 slot = t / n_chunks, first = (t % n_chunks) * chunk;
        i64 last = fa_min(first + chunk, fold.count);
        i64 base = fa_fold_base(&fold, slot, meta, keep, nd);
        T total = 0;
        for (i64 r = first; r < last; ++r) total += x[base + fa_fold_step(&fold, r, meta, keep, nd)];
        if (n_chunks > 1) atomicAdd(out + slot, scale * total);
        else fa_put(out + slot, scale * total, accumulate);
    }
}

// The largest (smallest when `lowest`) element of the slot starting at `base`; a NaN
// sticks, as in numpy.
template <typename T>
__device__ T slot_max(const T* x, const FaFold* fold, i64 base, const i64* meta, const i64* keep,
                      int nd, int lowest = 0) {
    T best = x[base];
    for (i64 r = 1; r < fold->count && best == best; ++r) {
        T v = x[base + fa_fold_step(fold, r, meta, keep, nd)];
        if ((lowest ? v < best : v > best) || v != v) best = v;
    }
    return best;
}

// out[slot] = the slot's largest element; a NaN sticks, as in numpy.
template <typename T>
__global__ void reduce_max(const T* x, T* out, i64 n_slots, const i64* meta, int nd) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(slot, n_slots) {
        out[slot] = slot_max(x, &fold, fa_fold_base(&fold, slot, meta, keep, nd), meta, keep, nd);
    }
}

// out[slot] = the slot's smallest element; a NaN sticks, as in numpy.
template <typename T>
__global__ void reduce_min(const T* x, T* out, i64 n_slots, const i64* meta, int nd) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(slot, n_slots) {
        out[slot] = slot_max(x, &fold, fa_fold_base(&fold, slot, meta, keep, nd), meta, keep, nd, 1);
    }
}

// out[slot] = sqrt(sum(x * x)) over the slot (0 for an empty slot).
template <typename T>
__global__ void reduce_norm2(const T* x, T* out, i64 n_slots, const i64* meta, int nd) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(slot, n_slots) {
        i64 base = fa_fold_base(&fold, slot, meta, keep, nd);
        T total = 0;
        for (i64 r = 0; r < fold.count; ++r) {
            T v = x[base + fa_fold_step(&fold, r, meta, keep, nd)];
            total += v * v;
        }
        out[slot] = fa_sqrt(total);
    }
}

// out[slot] = log(sum(exp(x))) over the slot, shifted by the slot's max.
template <typename T>
__global__ void reduce_logsumexp(const T* x, T* out, i64 n_slots, const i64* meta, int nd) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(slot, n_slots) {
        i64 base = fa_fold_base(&fold, slot, meta, keep, nd);
        T shift = slot_max(x, &fold, base, meta, keep, nd);
        if (!fa_isfinite(shift)) shift = 0;
        T total = 0;
        for (i64 r = 0; r < fold.count; ++r)
            total += fa_exp(x[base + fa_fold_step(&fold, r, meta, keep, nd)] - shift);
        out[slot] = shift + fa_log(total);
    }
}

// ties[slot] = how many of the slot's elements equal its max (or min) y[slot].
template <typename T>
__global__ void count_ties(const T* x, const T* y, double* ties, i64 n_slots, const i64* meta,
                           int nd) {
    const i64* keep = meta + nd;
    FaFold fold;
    fa_fold_init(&fold, meta, keep, nd);
    FA_GRID_STRIDE(slot, n_slots) {
        i64 base = fa_fold_base(&fold, slot, meta, keep, nd);
        double count = 0;
        for (i64 r = 0; r < fold.count; ++r)
            count += x[base + fa_fold_step(&fold, r, meta, keep, nd)] == y[slot];
        ties[slot] = count;
    }
}

enum ReduceMode { R_SUM, R_MAX, R_LOGSUMEXP, R_NORM2 };

// The gradient of a reduction, one thread per input element i in slot s:
// R_SUM: scale * gy[s]; R_MAX (max and min): gy[s] / ties[s] where x[i] is the
// max, else 0; R_LOGSUMEXP: gy[s] * exp(x[i] - y[s]); R_NORM2: gy[s] * x[i] / y[s],
// 0 at a zero norm (as torch).
template <typename T>
__global__ void reduce_backward(const T* x, const T* y, const T* gy, const double* ties, T* gx, i64 n,
                                const i64* meta, int nd, int mode, T scale, int accumulate) {
    const i64* keep = meta + nd;
    FA_GRID_STRIDE(i, n) {
        i64 s = fa_fold_slot(i, meta, keep, nd);
        T g;
        if (mode == R_SUM) g = scale * gy[s];
        else if (mode == R_MAX) g = x[i] == y[s] ? gy[s] / T(ties[s]) : T(0);
        else if (mode == R_NORM2) g = y[s] != T(0) ? gy[s] * x[i] / y[s] : T(0);
        else g = gy[s] * fa_exp(x[i] - y[s]);
        fa_put(gx + i, g, accumulate);
    }
}

// ------------------------------------------------------ argmax, argmin, cumsum
// x viewed as (outer, n, inner); one thread per (outer, inner) line along n.

// ids[line] = the first k whose x is largest (smallest when `lowest`) on the line; a NaN
// wins, as in numpy.
template <typename T>
__global__ void arg_reduce(const T* x, i64* ids, i64 outer, i64 n, i64 inner, int lowest) {
    FA_GRID_STRIDE(line, outer * inner) {
        const T* xl = x + (line / inner) * n * inner + line % inner;
        T best = xl[0];
        i64 best_k = 0;
        for (i64 k = 1; k < n && best == best; ++k) {
            T v = xl[k * inner];
            if ((lowest ? v < best : v > best) || v != v) {
                best = v;
                best_k = k;
            }
        }
        ids[line] = best_k;
    }
}

// y = the running sum of x along n.
template <typename T>
__global__ void cumsum_forward(const T* x, T* y, i64 outer, i64 n, i64 inner) {
    FA_GRID_STRIDE(line, outer * inner) {
        i64 base = (line / inner) * n * inner + line % inner;
        T total = 0;
        for (i64 k = 0; k < n; ++k) {
            total += x[base + k * inner];
            y[base + k * inner] = total;
        }
    }
}

// gx (+)= the running sum of gy along n, taken from the end.
template <typename T>
__global__ void cumsum_backward(const T* gy, T* gx, i64 outer, i64 n, i64 inner, int accumulate) {
    FA_GRID_STRIDE(line, outer * inner) {
        i64 base = (line / inner) * n * inner + line % inner;
        T total = 0;
        for (i64 k = n - 1; k >= 0; --k) {
            total += gy[base + k * inner];
            fa_put(gx + base + k * inner, total, accumulate);
        }
    }
}

// ------------------------------------------------------------- softmax

// softmax (log = 0) or log_softmax (log = 1) of x viewed as (outer, n, inner), along n.
// One thread per (outer, inner) line; the line's elements are `inner` apart.
template <typename T>
__global__ void softmax_forward(const T* x, T* y, i64 outer, i64 n, i64 inner, int log) {
    FA_GRID_STRIDE(line, outer * inner) {
        if (n == 0) continue;
        const T* xl = x + (line / inner) * n * inner + line % inner;
        T* yl = y + (line / inner) * n * inner + line % inner;
        T m = xl[0];  // the line's max; NaN if any element is NaN
        for (i64 k = 1; k < n; ++k) {
            T v = xl[k * inner];
            if (v > m || v != v) m = v;
        }
        T s = 0;
        for (i64 k = 0; k < n; ++k) {
            T e = fa_exp(xl[k * inner] - m);
            yl[k * inner] = e;
            s += e;
        }
        if (log) {
            T lse = m + fa_log(s);
            for (i64 k = 0; k < n; ++k) yl[k * inner] = xl[k * inner] - lse;
        } else {
            T r = T(1) / s;
            for (i64 k = 0; k < n; ++k) yl[k * inner] *= r;
        }
    }
}

// From the output y and its gradient gy: softmax: gx = y * (gy - sum(gy * y));
// log_softmax: gx = gy - exp(y) * sum(gy). One thread per line, as the forward.
template <typename T>
__global__ void softmax_backward(const T* y, const T* gy, T* gx, i64 outer, i64 n, i64 inner,
                                 int log, int accumulate) {
    FA_GRID_STRIDE(line, outer * inner) {
        i64 base = (line / inner) * n * inner + line % inner;
        T d = 0;
        for (i64 k = 0; k < n; ++k) {
            i64 o = base + k * inner;
            d += log ? gy[o] : gy[o] * y[o];
        }
        for (i64 k = 0; k < n; ++k) {
            i64 o = base + k * inner;
            fa_put(gx + o, log ? gy[o] - fa_exp(y[o]) * d : y[o] * (gy[o] - d), accumulate);
        }
    }
}

// Convolutions (im2col + cuBLAS GEMM), pooling and batch normalisation
// (fastad/ops/conv.pyx). Every op sees its input as (batch, channels, height, width).

// The geometry array g of a convolution, as fastad/cuda/ops/conv.py builds it.
enum ConvGeom { G_N, G_C, G_H, G_W, G_OH, G_OW, G_KH, G_KW, G_SH, G_SW, G_PH, G_PW, G_DH, G_DW };

// cols[(c, i, j), (n, oy, ox)] = x[n, c, oy*sh - ph + i*dh, ox*sw - pw + j*dw] (0 outside x).
template <typename T>
__global__ void im2col(const T* x, T* cols, const i64* g, i64 total) {
    FA_GRID_STRIDE(k, total) {
        i64 ox = k % g[G_OW], r = k / g[G_OW];
        i64 oy = r % g[G_OH]; r /= g[G_OH];
        i64 n = r % g[G_N]; r /= g[G_N];
        i64 j = r % g[G_KW]; r /= g[G_KW];
        i64 i = r % g[G_KH];
        i64 c = r / g[G_KH];
        i64 iy = oy * g[G_SH] - g[G_PH] + i * g[G_DH];
        i64 ix = ox * g[G_SW] - g[G_PW] + j * g[G_DW];
        bool inside = iy >= 0 && iy < g[G_H] && ix >= 0 && ix < g[G_W];
        cols[k] = inside ? x[((n * g[G_C] + c) * g[G_H] + iy) * g[G_W] + ix] : T(0);
    }
}

// The adjoint of im2col, one thread per input element (no atomics):
// gx[n, c, iy, ix] (+)= the sum of the column entries copied from it.
template <typename T>
__global__ void col2im(const T* dcols, T* gx, const i64* g, i64 total, int accumulate) {
    i64 spots = g[G_OH] * g[G_OW], width = g[G_N] * spots;
    FA_GRID_STRIDE(k, total) {
        i64 ix = k % g[G_W], r = k / g[G_W];
        i64 iy = r % g[G_H]; r /= g[G_H];
        i64 c = r % g[G_C];
        i64 n = r / g[G_C];
        T sum = 0;
        for (i64 i = 0; i < g[G_KH]; ++i) {
            i64 ty = iy + g[G_PH] - i * g[G_DH];
            if (ty < 0 || ty % g[G_SH] != 0 || ty / g[G_SH] >= g[G_OH]) continue;
            for (i64 j = 0; j < g[G_KW]; ++j) {
                i64 tx = ix + g[G_PW] - j * g[G_DW];
                if (tx < 0 || tx % g[G_SW] != 0 || tx / g[G_SW] >= g[G_OW]) continue;
                i64 row = (c * g[G_KH] + i) * g[G_KW] + j;
                sum += dcols[row * width + n * spots + (ty / g[G_SH]) * g[G_OW] + tx / g[G_SW]];
            }
        }
        fa_put(gx + k, sum, accumulate);
    }
}

// y[n, o, l] = staged[o, n * spots + l] (+ bias[o] when has_bias): the GEMM's
// (out_channels, batch * spots) result in the output's layout.
template <typename T>
__global__ void conv_unstage(const T* staged, const T* bias, T* y, i64 batch, i64 out_channels,
                             i64 spots, int has_bias) {
    FA_GRID_STRIDE(k, batch * out_channels * spots) {
        i64 l = k % spots, o = (k / spots) % out_channels, n = k / (spots * out_channels);
        y[k] = staged[(o * batch + n) * spots + l] + (has_bias ? bias[o] : T(0));
    }
}

// staged[o, n * spots + l] = gy[n, o, l]: the output gradient in the GEMMs' layout.
template <typename T>
__global__ void conv_stage(const T* gy, T* staged, i64 batch, i64 out_channels, i64 spots) {
    FA_GRID_STRIDE(k, batch * out_channels * spots) {
        i64 l = k % spots, o = (k / spots) % out_channels, n = k / (spots * out_channels);
        staged[(o * batch + n) * spots + l] = gy[k];
    }
}

// gb[o] (+)= sum over the row o of the staged (out_channels, width) gradient.
template <typename T>
__global__ void conv_bias_backward(const T* staged, T* gb, i64 out_channels, i64 width,
                                   int accumulate) {
    FA_GRID_STRIDE(o, out_channels) {
        T total = 0;
        for (i64 l = 0; l < width; ++l) total += staged[o * width + l];
        fa_put(gb + o, total, accumulate);
    }
}

// Pooling: output row oy of each plane reads input rows [windows[oy], windows[L + oy])
// and column ox columns [windows[2L + ox], windows[3L + ox]) (L = row_len). Max
// pooling records the argmax (flat position in the plane); a mean divides by
// `divisor`, or by the window's area when divisor is 0.
template <typename T>
__global__ void pool_forward(const T* x, T* y, i64* argmax, const i64* windows, i64 planes,
                             i64 h, i64 w, i64 oh, i64 ow, i64 row_len, i64 divisor,
                             int is_max) {
    FA_GRID_STRIDE(k, planes * oh * ow) {
        i64 ox = k % ow, oy = (k / ow) % oh, p = k / (ow * oh);
        i64 y0 = windows[oy], y1 = windows[row_len + oy];
        i64 x0 = windows[2 * row_len + ox], x1 = windows[3 * row_len + ox];
        const T* plane = x + p * h * w;
        if (is_max) {
            i64 best_at = y0 * w + x0;          // windows are never empty
            T best = plane[best_at];
            for (i64 iy = y0; iy < y1; ++iy)
                for (i64 ix = x0; ix < x1; ++ix) {
                    T v = plane[iy * w + ix];
                    if (v > best || v != v) { best = v; best_at = iy * w + ix; }
                }
            y[k] = best;
            argmax[k] = best_at;
        } else {
            T total = 0;
            for (i64 iy = y0; iy < y1; ++iy)
                for (i64 ix = x0; ix < x1; ++ix) total += plane[iy * w + ix];
            y[k] = total / T(divisor ? divisor : (y1 - y0) * (x1 - x0));
        }
    }
}

// gx += each output's gradient at its argmax (max) or spread over its window (mean);
// windows overlap, so the adds are atomic (gx was zeroed or holds earlier contributions).
template <typename T>
__global__ void pool_backward(const T* gy, T* gx, const i64* argmax, const i64* windows,
                              i64 planes, i64 h, i64 w, i64 oh, i64 ow, i64 row_len,
                              i64 divisor, int is_max) {
    FA_GRID_STRIDE(k, planes * oh * ow) {
        i64 ox = k % ow, oy = (k / ow) % oh, p = k / (ow * oh);
        T* plane = gx + p * h * w;
        if (is_max) {
            atomicAdd(plane + argmax[k], gy[k]);
            continue;
        }
        i64 y0 = windows[oy], y1 = windows[row_len + oy];
        i64 x0 = windows[2 * row_len + ox], x1 = windows[3 * row_len + ox];
        T share = gy[k] / T(divisor ? divisor : (y1 - y0) * (x1 - x0));
        for (i64 iy = y0; iy < y1; ++iy)
            for (i64 ix = x0; ix < x1; ++ix) atomicAdd(plane + iy * w + ix, share);
    }
}

// Batch normalisation of x seen as (batch, channels, spots). stats[ch] and
// stats[channels + ch] get the mean and 1/sqrt(var + eps) used: the batch's
// (training; the running averages move by momentum, the variance's unbiased)
// or the running averages'.
template <typename T>
__global__ void batch_norm_stats(const T* x, T* running_mean, T* running_var, double* stats,
                                 i64 batch, i64 channels, i64 spots, int training, int track,
                                 double momentum, double eps) {
    FA_GRID_STRIDE(ch, channels) {
        double mean, var;
        if (training) {
            i64 count = batch * spots;
            double total = 0;
            for (i64 n = 0; n < batch; ++n)
                for (i64 l = 0; l < spots; ++l) total += x[(n * channels + ch) * spots + l];
            mean = total / count;
            total = 0;
            for (i64 n = 0; n < batch; ++n)
                for (i64 l = 0; l < spots; ++l) {
                    double d = x[(n * channels + ch) * spots + l] - mean;
                    total += d * d;
                }
            var = total / count;
            if (track) {
                running_mean[ch] = T((1 - momentum) * running_mean[ch] + momentum * mean);
                running_var[ch] = T((1 - momentum) * running_var[ch]
                                    + momentum * var * count / (count - 1));
            }
        } else {
            mean = running_mean[ch];
            var = running_var[ch];
        }
        stats[ch] = mean;
        stats[channels + ch] = 1 / fa_sqrt(var + eps);
    }
}

// y = (x - mean) * inv_std * weight + bias, per channel.
template <typename T>
__global__ void batch_norm_forward(const T* x, const T* weight, const T* bias,
                                   const double* stats, T* y, i64 total, i64 channels,
                                   i64 spots) {
    FA_GRID_STRIDE(k, total) {
        i64 ch = (k / spots) % channels;
        y[k] = T((x[k] - stats[ch]) * stats[channels + ch] * weight[ch] + bias[ch]);
    }
}

// Per channel: sums[ch] = sum of gy, sums[channels + ch] = sum of gy * xhat; and
// gw (+)= the second, gb (+)= the first where wanted.
template <typename T>
__global__ void batch_norm_sums(const T* x, const T* gy, const double* stats, double* sums,
                                T* gw, T* gb, i64 batch, i64 channels, i64 spots, int want_w,
                                int accumulate_w, int want_b, int accumulate_b) {
    FA_GRID_STRIDE(ch, channels) {
        double sum_g = 0, sum_gxhat = 0;
        for (i64 n = 0; n < batch; ++n)
            for (i64 l = 0; l < spots; ++l) {
                i64 k = (n * channels + ch) * spots + l;
                sum_g += gy[k];
                sum_gxhat += gy[k] * (x[k] - stats[ch]) * stats[channels + ch];
            }
        sums[ch] = sum_g;
        sums[channels + ch] = sum_gxhat;
        if (want_w) fa_put(gw + ch, T(sum_gxhat), accumulate_w);
        if (want_b) fa_put(gb + ch, T(sum_g), accumulate_b);
    }
}

// gx (+)= weight * inv_std * (gy - (sum_g + xhat * sum_gxhat) / count) in training
// (the batch statistics depend on x), weight * inv_std * gy otherwise.
template <typename T>
__global__ void batch_norm_backward(const T* x, const T* gy, const T* weight,
                                    const double* stats, const double* sums, T* gx, i64 total,
                                    i64 channels, i64 spots, int training, int accumulate) {
    i64 count = total / channels;
    FA_GRID_STRIDE(k, total) {
        i64 ch = (k / spots) % channels;
        double inv_std = stats[channels + ch], scale = inv_std * weight[ch];
        double d = gy[k];
        if (training) {
            double xhat = (x[k] - stats[ch]) * inv_std;
            d -= (sums[ch] + xhat * sums[channels + ch]) / count;
        }
        fa_put(gx + k, T(scale * d), accumulate);
    }
}

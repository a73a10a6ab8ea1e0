# Small vector loops shared by the op modules. Plain counted loops over raw
# pointers so that gcc vectorises them at -O3; `floating` is float or double.
# The helpers over char* buffers take the precision as a flag (`f64`), so that
# a node passes its buffers without a float/double branch of its own.
from libc.string cimport memcpy, memset
from cython cimport floating

cdef extern from *:
    """
    /* Row kernels. y and x never overlap (restrict): a loop needs no run-time overlap
     * check before its vector part, which a short row would pay for. */
    #include <stdint.h>
    #include "clones.h"
    FA_CLONED void fa_axpy_f(float* __restrict y, const float* __restrict x, Py_ssize_t n, float a) {
        for (Py_ssize_t i = 0; i < n; i++) y[i] += a * x[i];
    }
    FA_CLONED void fa_axpy_d(double* __restrict y, const double* __restrict x, Py_ssize_t n, double a) {
        for (Py_ssize_t i = 0; i < n; i++) y[i] += a * x[i];
    }
    FA_CLONED void fa_scale_f(float* __restrict y, const float* __restrict x, Py_ssize_t n, float a) {
        for (Py_ssize_t i = 0; i < n; i++) y[i] = a * x[i];
    }
    FA_CLONED void fa_scale_d(double* __restrict y, const double* __restrict x, Py_ssize_t n, double a) {
        for (Py_ssize_t i = 0; i < n; i++) y[i] = a * x[i];
    }
    /* The outer product C (M x N, rows ldc apart) = a b (a[i * sa], b contiguous), or added
     * into C (`add`): one call for all the rows (a call a row costs more than a short row).
     * Adding into a weight's gradient of 256 x 64 (an LSTM's) runs at the speed the caches
     * move C, which 64-byte vectors double: an AVX-512 clone too, its products not fused
     * into the adds (fp-contract off), so that every clone gives the same values. */
    #define FA_OUTER(T, S)                                                                  \
    FA_CLONED_WIDE void fa_outer_##S(T* __restrict C, Py_ssize_t ldc, const T* a, Py_ssize_t sa,  \
                                const T* __restrict b, Py_ssize_t M, Py_ssize_t N, int add) { \
        for (Py_ssize_t i = 0; i < M; i++) {                                                 \
            T ai = a[i * sa];                                                                \
            T* __restrict c = C + i * ldc;                                                   \
            if (add) { for (Py_ssize_t j = 0; j < N; j++) c[j] += ai * b[j]; }               \
            else { for (Py_ssize_t j = 0; j < N; j++) c[j] = ai * b[j]; }                    \
        }                                                                                    \
    }
    FA_OUTER(float, f)
    FA_OUTER(double, d)

    /* x . y in four partial sums s0..s3 (s_k takes the products at positions = k mod 4,
     * the tail goes to s0, then (s0 + s1) + (s2 + s3)), so that each add need not wait
     * for the previous one. The compiler keeps a float reduction scalar (vectorising it
     * would reorder the sums), so with gcc or clang the four sums are the lanes of
     * vectors: the same additions in the same order, four (or two) at a time. */
    #if defined(__GNUC__)
    typedef float fa_v4f __attribute__((vector_size(16), aligned(4), may_alias));
    typedef double fa_v2d __attribute__((vector_size(16), aligned(8), may_alias));
    #endif
    /* the four sums one product at a time (without vector types), and the tail and total */
    #define FA_DOT_SCALAR_QUADS                                                   \
        for (; p + 4 <= n; p += 4) {                                              \
            s0 += x[p] * y[p]; s1 += x[p + 1] * y[p + 1];                         \
            s2 += x[p + 2] * y[p + 2]; s3 += x[p + 3] * y[p + 3];                 \
        }
    #define FA_DOT_TAIL_AND_TOTAL                                                 \
        for (; p < n; p++) s0 += x[p] * y[p];                                     \
        return (s0 + s1) + (s2 + s3);
    static inline float fa_dot_f(const float* x, const float* y, Py_ssize_t n) {
        Py_ssize_t p = 0;
    #if defined(__GNUC__)
        fa_v4f s = {0, 0, 0, 0};
        for (; p + 8 <= n; p += 8) {     /* two steps a turn: half the loop's counting */
            s += *(const fa_v4f*)(x + p) * *(const fa_v4f*)(y + p);
            s += *(const fa_v4f*)(x + p + 4) * *(const fa_v4f*)(y + p + 4);
        }
        for (; p + 4 <= n; p += 4) s += *(const fa_v4f*)(x + p) * *(const fa_v4f*)(y + p);
        float s0 = s[0], s1 = s[1], s2 = s[2], s3 = s[3];
    #else
        float s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        FA_DOT_SCALAR_QUADS
    #endif
        FA_DOT_TAIL_AND_TOTAL
    }
    static inline double fa_dot_d(const double* x, const double* y, Py_ssize_t n) {
        Py_ssize_t p = 0;
    #if defined(__GNUC__)
        fa_v2d lo = {0, 0}, hi = {0, 0};
        for (; p + 4 <= n; p += 4) {
            lo += *(const fa_v2d*)(x + p) * *(const fa_v2d*)(y + p);
            hi += *(const fa_v2d*)(x + p + 2) * *(const fa_v2d*)(y + p + 2);
        }
        double s0 = lo[0], s1 = lo[1], s2 = hi[0], s3 = hi[1];
    #else
        double s0 = 0, s1 = 0, s2 = 0, s3 = 0;
        FA_DOT_SCALAR_QUADS
    #endif
        FA_DOT_TAIL_AND_TOTAL
    }
    """
    void fa_axpy_f(float* y, const float* x, Py_ssize_t n, float a) noexcept nogil
    void fa_axpy_d(double* y, const double* x, Py_ssize_t n, double a) noexcept nogil
    void fa_scale_f(float* y, const float* x, Py_ssize_t n, float a) noexcept nogil
    void fa_scale_d(double* y, const double* x, Py_ssize_t n, double a) noexcept nogil
    void fa_outer_f(float* C, Py_ssize_t ldc, const float* a, Py_ssize_t sa, const float* b,
                    Py_ssize_t M, Py_ssize_t N, bint add) noexcept nogil
    void fa_outer_d(double* C, Py_ssize_t ldc, const double* a, Py_ssize_t sa, const double* b,
                    Py_ssize_t M, Py_ssize_t N, bint add) noexcept nogil
    float fa_dot_f(const float* x, const float* y, Py_ssize_t n) noexcept nogil
    double fa_dot_d(const double* x, const double* y, Py_ssize_t n) noexcept nogil


cdef inline void row_axpy(floating* y, const floating* x, Py_ssize_t n, floating a) noexcept nogil:
    """y += a * x over n elements (y and x do not overlap)."""
    if floating is float:
        fa_axpy_f(y, x, n, a)
    else:
        fa_axpy_d(y, x, n, a)


cdef inline void outer(floating* C, Py_ssize_t ldc, const floating* a, Py_ssize_t sa,
                       const floating* b, Py_ssize_t M, Py_ssize_t N, bint add) noexcept nogil:
    """C (M x N, rows ldc apart) = a b^T, a[i * sa] and b contiguous, or += with `add`."""
    if floating is float:
        fa_outer_f(C, ldc, a, sa, b, M, N, add)
    else:
        fa_outer_d(C, ldc, a, sa, b, M, N, add)


cdef inline void row_scale(floating* y, const floating* x, Py_ssize_t n, floating a) noexcept nogil:
    """y = a * x over n elements (y and x do not overlap)."""
    if floating is float:
        fa_scale_f(y, x, n, a)
    else:
        fa_scale_d(y, x, n, a)


cdef inline floating row_dot(const floating* x, const floating* y, Py_ssize_t n) noexcept nogil:
    """x . y in four partial sums (fa_dot)."""
    if floating is float:
        return fa_dot_f(x, y, n)
    else:
        return fa_dot_d(x, y, n)


cdef inline void vec_put(floating* dst, const floating* src, Py_ssize_t n, bint add) noexcept nogil:
    """dst = src, or dst += src when `add` (the gradient write-then-add rule)."""
    cdef Py_ssize_t i
    if add:
        for i in range(n):
            dst[i] += src[i]
    else:
        memcpy(dst, src, n * sizeof(floating))


cdef inline void vec_fill(floating* dst, floating value, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t i
    for i in range(n):
        dst[i] = value


cdef inline void vec_zero(floating* dst, Py_ssize_t n) noexcept nogil:
    memset(dst, 0, n * sizeof(floating))


cdef inline Py_ssize_t element_size(bint f64) noexcept nogil:
    """Bytes per element of a float64 (f64) or float32 buffer."""
    return 8 if f64 else 4


cdef inline void zero_values(char* dst, Py_ssize_t n, bint f64) noexcept nogil:
    """Zeros n elements of either precision (IEEE zero is all-zero bits)."""
    memset(dst, 0, n * element_size(f64))


cdef inline void store_value(char* dst, double value, bint f64) noexcept nogil:
    """dst[0] = value, rounded to float32 unless f64."""
    if f64:
        (<double*>dst)[0] = value
    else:
        (<float*>dst)[0] = <float>value


cdef inline void put_values(char* dst, const char* src, Py_ssize_t n, bint add,
                            bint f64) noexcept nogil:
    """vec_put on n elements of either precision."""
    if f64:
        vec_put(<double*>dst, <const double*>src, n, add)
    else:
        vec_put(<float*>dst, <const float*>src, n, add)


cdef inline void scale_each_row(floating* y, const floating* x, const floating* coefs,
                                Py_ssize_t n_rows, Py_ssize_t row_len, Py_ssize_t per_x) noexcept nogil:
    """y row k = coefs[k] * x row k // per_x."""
    cdef Py_ssize_t k
    for k in range(n_rows):
        row_scale(y + k * row_len, x + (k // per_x) * row_len, row_len, coefs[k])


cdef inline void scale_rows_of(char* y, const char* x, const char* coefs, Py_ssize_t n_rows,
                               Py_ssize_t row_len, Py_ssize_t per_x, bint f64) noexcept nogil:
    """scale_each_row on buffers of either precision."""
    if f64:
        scale_each_row(<double*>y, <const double*>x, <const double*>coefs, n_rows, row_len, per_x)
    else:
        scale_each_row(<float*>y, <const float*>x, <const float*>coefs, n_rows, row_len, per_x)

# Small vector loops shared by the op modules. Plain counted loops over raw
# pointers so that gcc vectorises them at -O3; `floating` is float or double.
# The helpers over char* buffers take the precision as a flag (`f64`), so that
# a node passes its buffers without a float/double branch of its own.
from libc.string cimport memcpy, memset
from cython cimport floating


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

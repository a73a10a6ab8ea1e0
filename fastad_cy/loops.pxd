# Small vector loops shared by the op modules. Plain counted loops over raw
# pointers so that gcc vectorises them at -O3; `floating` is float or double.
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

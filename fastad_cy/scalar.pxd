# Scalar math for float and double kernels. exp/log/tanh/sigmoid go through
# fastmath.h, which switches them to fast approximations in a FASTAD_FAST_MATH
# build; the rest is the C library.
from cython cimport floating
from libc.math cimport log1p, log1pf, sqrt, sqrtf, fabs, fabsf, pow, powf

cdef extern from "fastmath.h":
    int FASTAD_FAST_MATH_ENABLED
    double fa_exp(double) noexcept nogil
    double fa_log(double) noexcept nogil
    double fa_tanh(double) noexcept nogil
    double fa_sigmoid(double) noexcept nogil
    float fa_expf(float) noexcept nogil
    float fa_logf(float) noexcept nogil
    float fa_tanhf(float) noexcept nogil
    float fa_sigmoidf(float) noexcept nogil
    double fa_fast_exp(double) noexcept nogil
    double fa_fast_log(double) noexcept nogil
    double fa_fast_tanh(double) noexcept nogil
    double fa_fast_sigmoid(double) noexcept nogil
    float fa_fast_expf(float) noexcept nogil
    float fa_fast_logf(float) noexcept nogil
    float fa_fast_tanhf(float) noexcept nogil
    float fa_fast_sigmoidf(float) noexcept nogil


cdef inline floating s_exp(floating x) noexcept nogil:
    if floating is float:
        return fa_expf(x)
    else:
        return fa_exp(x)


cdef inline floating s_log(floating x) noexcept nogil:
    if floating is float:
        return fa_logf(x)
    else:
        return fa_log(x)


cdef inline floating s_tanh(floating x) noexcept nogil:
    if floating is float:
        return fa_tanhf(x)
    else:
        return fa_tanh(x)


cdef inline floating s_sigmoid(floating x) noexcept nogil:
    if floating is float:
        return fa_sigmoidf(x)
    else:
        return fa_sigmoid(x)


cdef inline floating s_log1p(floating x) noexcept nogil:
    if floating is float:
        return log1pf(x)
    else:
        return log1p(x)


cdef inline floating s_sqrt(floating x) noexcept nogil:
    if floating is float:
        return sqrtf(x)
    else:
        return sqrt(x)


cdef inline floating s_abs(floating x) noexcept nogil:
    if floating is float:
        return fabsf(x)
    else:
        return fabs(x)


cdef inline floating s_pow(floating x, floating p) noexcept nogil:
    if floating is float:
        return powf(x, p)
    else:
        return pow(x, p)


cdef inline floating s_softplus(floating x) noexcept nogil:
    """log(1 + exp(x)) without overflow."""
    return (x if x > 0 else 0) + s_log1p(s_exp(-s_abs(x)))

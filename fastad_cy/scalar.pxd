# exp/log/tanh/sigmoid for float and double kernels, through fastmath.h, which
# switches them to fast approximations in a FASTAD_FAST_MATH build. The scalar
# rules the CUDA kernels share are in rules.h (rules.pxd).
from cython cimport floating

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

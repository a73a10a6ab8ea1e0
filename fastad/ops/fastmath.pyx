"""The fast-math approximations of fastmath.h, applied to arrays.

`fastad` uses them in its kernels only when built with FASTAD_FAST_MATH=1
(`enabled()` says whether this build does); this module applies them to any
array so that their documented error bounds can be checked on every build.
"""
import numpy as np
cimport numpy as cnp

from fastad.ops.scalar cimport (FASTAD_FAST_MATH_ENABLED, fa_fast_exp, fa_fast_log, fa_fast_tanh,
                               fa_fast_sigmoid, fa_fast_expf, fa_fast_logf, fa_fast_tanhf,
                               fa_fast_sigmoidf)

cnp.import_array()

FUNCTIONS = ("exp", "log", "tanh", "sigmoid")


def enabled():
    """True when this build's kernels use the fast approximations."""
    return bool(FASTAD_FAST_MATH_ENABLED)


def approximate(str name, x):
    """The fast approximation of `name` (exp, log, tanh, sigmoid) over a float32/float64 array."""
    if name not in FUNCTIONS:
        raise ValueError(f"approximate: unknown function {name!r}; expected one of {FUNCTIONS}")
    arr = np.ascontiguousarray(x)
    if arr.dtype != np.float32 and arr.dtype != np.float64:
        raise TypeError(f"approximate: expected a float32 or float64 array, got {arr.dtype}")
    out = np.empty_like(arr)
    cdef Py_ssize_t i, n = arr.size
    cdef double[::1] xd, yd
    cdef float[::1] xf, yf
    cdef int code = FUNCTIONS.index(name)
    if arr.dtype == np.float64:
        xd = arr.reshape(-1)
        yd = out.reshape(-1)
        for i in range(n):
            yd[i] = (fa_fast_exp(xd[i]) if code == 0 else fa_fast_log(xd[i]) if code == 1
                     else fa_fast_tanh(xd[i]) if code == 2 else fa_fast_sigmoid(xd[i]))
    else:
        xf = arr.reshape(-1)
        yf = out.reshape(-1)
        for i in range(n):
            yf[i] = (fa_fast_expf(xf[i]) if code == 0 else fa_fast_logf(xf[i]) if code == 1
                     else fa_fast_tanhf(xf[i]) if code == 2 else fa_fast_sigmoidf(xf[i]))
    return out

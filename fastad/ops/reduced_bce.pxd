# What the loss nodes of two modules share: the reduction codes of every loss, and the
# logits' binary cross-entropy over raw buffers, which PairLoss (losses.pyx) and
# ranking_loss's node (sparse.pyx, which losses.pyx imports) both run.
from libc.math cimport NAN

cdef enum Reduction:
    RED_NONE, RED_MEAN, RED_SUM


cdef inline int reduction_code(str op, object reduction) except -1:
    if isinstance(reduction, str):
        if reduction == "mean":
            return RED_MEAN
        if reduction == "sum":
            return RED_SUM
        if reduction == "none":
            return RED_NONE
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


cdef inline str reduction_name(int reduction):
    return ("none", "mean", "sum")[reduction]


cdef inline double reduction_scale(int reduction, Py_ssize_t n) noexcept nogil:
    """The factor of a reduced loss's total: 1 / n for a mean (NaN over no elements), else 1."""
    if reduction == RED_MEAN:
        return 1.0 / n if n else NAN
    return 1.0


cdef extern from "elementwise_loops.h":
    # P_BCE keeping exp(-|a|) of the forward in t for the backward
    double fa_bce_forward_f(const float* a, const float* b, Py_ssize_t n, float* t,
                            float* losses) noexcept nogil
    double fa_bce_forward_d(const double* a, const double* b, Py_ssize_t n, double* t,
                            double* losses) noexcept nogil
    void fa_bce_backward_f(const float* a, const float* b, const float* t, Py_ssize_t n,
                           const float* gy, Py_ssize_t gy_step, float scale, float* g,
                           bint add) noexcept nogil
    void fa_bce_backward_d(const double* a, const double* b, const double* t, Py_ssize_t n,
                           const double* gy, Py_ssize_t gy_step, double scale, double* g,
                           bint add) noexcept nogil


cdef inline double bce_forward(const char* a, const char* b, Py_ssize_t n, char* t, char* losses,
                               bint f64) noexcept nogil:
    """The summed binary cross-entropy of logits a against targets b (each element's also into
    `losses` unless NULL), keeping exp(-|a|) in t for bce_backward."""
    if f64:
        return fa_bce_forward_d(<const double*>a, <const double*>b, n, <double*>t, <double*>losses)
    else:
        return fa_bce_forward_f(<const float*>a, <const float*>b, n, <float*>t, <float*>losses)


cdef inline void bce_backward(const char* a, const char* b, const char* t, Py_ssize_t n,
                              const char* gy, Py_ssize_t gy_step, double scale, char* g, bint add,
                              bint f64) noexcept nogil:
    """g = (or += with `add`) gy[i * gy_step] * scale * (sigmoid(a) - b), from the t of
    bce_forward."""
    if f64:
        fa_bce_backward_d(<const double*>a, <const double*>b, <const double*>t, n,
                          <const double*>gy, gy_step, scale, <double*>g, add)
    else:
        fa_bce_backward_f(<const float*>a, <const float*>b, <const float*>t, n,
                          <const float*>gy, gy_step, <float>scale, <float*>g, add)

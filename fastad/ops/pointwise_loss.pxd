# The pointwise losses over raw buffers, by their code in the op manifest (rules.h's
# fa_loss_value and its partial derivatives), and the reduction codes of every loss: what
# the loss nodes of two modules share, PairLoss (losses.pyx) and the ranking node
# (ranking.pyx, whose loss of each margin is one of them).
from libc.math cimport NAN

from fastad.ops.op_codes cimport P_BCE

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
    # One loop per loss code (the code a constant there, so that the rule vectorises).
    double fa_loss_forward_f(int op, const float* a, const float* b, Py_ssize_t n, float delta,
                             float* losses) noexcept nogil
    double fa_loss_forward_d(int op, const double* a, const double* b, Py_ssize_t n, double delta,
                             double* losses) noexcept nogil
    void fa_loss_backward_f(int op, bint to_a, const float* a, const float* b, Py_ssize_t n,
                            float delta, const float* gy, Py_ssize_t gy_step, float scale, float* g,
                            bint add) noexcept nogil
    void fa_loss_backward_d(int op, bint to_a, const double* a, const double* b, Py_ssize_t n,
                            double delta, const double* gy, Py_ssize_t gy_step, double scale,
                            double* g, bint add) noexcept nogil
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


cdef inline bint keeps_exp(int code) noexcept nogil:
    """Whether loss `code`'s forward keeps exp(-|a|) for its backward (the logits' binary
    cross-entropy): its nodes then give loss_forward and loss_backward a buffer `kept` of
    one element per loss."""
    return code == P_BCE


cdef inline double loss_forward(int code, const char* a, const char* b, Py_ssize_t n, double delta,
                                char* kept, char* losses, bint f64) noexcept nogil:
    """The summed losses `code` of a against b, each also into `losses` unless NULL."""
    if code == P_BCE and f64:
        return fa_bce_forward_d(<const double*>a, <const double*>b, n, <double*>kept, <double*>losses)
    if code == P_BCE:
        return fa_bce_forward_f(<const float*>a, <const float*>b, n, <float*>kept, <float*>losses)
    if f64:
        return fa_loss_forward_d(code, <const double*>a, <const double*>b, n, delta, <double*>losses)
    return fa_loss_forward_f(code, <const float*>a, <const float*>b, n, <float>delta, <float*>losses)


cdef inline void loss_backward(int code, bint to_a, const char* a, const char* b, const char* kept,
                               Py_ssize_t n, double delta, const char* gy, Py_ssize_t gy_step,
                               double scale, char* g, bint add, bint f64) noexcept nogil:
    """g = (or += with `add`) gy[i * gy_step] * scale * d(loss)/da (to_a) or d(loss)/db, from
    the `kept` of loss_forward."""
    if code == P_BCE and to_a and f64:
        fa_bce_backward_d(<const double*>a, <const double*>b, <const double*>kept, n,
                          <const double*>gy, gy_step, scale, <double*>g, add)
    elif code == P_BCE and to_a:
        fa_bce_backward_f(<const float*>a, <const float*>b, <const float*>kept, n,
                          <const float*>gy, gy_step, <float>scale, <float*>g, add)
    elif f64:
        fa_loss_backward_d(code, to_a, <const double*>a, <const double*>b, n, delta,
                           <const double*>gy, gy_step, scale, <double*>g, add)
    else:
        fa_loss_backward_f(code, to_a, <const float*>a, <const float*>b, n, <float>delta,
                           <const float*>gy, gy_step, <float>scale, <float*>g, add)

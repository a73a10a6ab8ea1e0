# Scalar math and rules for the float and double CPU loops, as fused-type helpers
# that pick a C function's float or double version: exp/log/tanh/sigmoid through
# fastmath.h (fast approximations in a FASTAD_FAST_MATH build), and the optimizers'
# element updates of rules.h, which the CUDA kernels share.
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


cdef extern from "rules.h":
    ctypedef struct FaAdamStep:
        double step_size, bc2_sqrt, decay, l2
    FaAdamStep fa_adam_step(double lr, long long t, double beta1, double beta2,
                            double weight_decay, int decoupled) noexcept nogil
    double fa_adamax_step_size(double lr, long long t, double beta1) noexcept nogil
    ctypedef struct FaRAdamStep:
        double bc1, bc2_sqrt, rect, decay, l2
        int adaptive
    FaRAdamStep fa_radam_step(double lr, long long t, double beta1, double beta2,
                              double weight_decay, int decoupled) noexcept nogil
    ctypedef struct FaNAdamStep:
        double bc2, grad_factor, avg_factor, decay, l2
    double fa_nadam_mu(double beta1, long long t, double momentum_decay) noexcept nogil
    FaNAdamStep fa_nadam_step(double lr, long long t, double beta1, double beta2,
                              double weight_decay, int decoupled, double momentum_decay,
                              double product) noexcept nogil

    void fa_sgd_element_f(float* p, const float* g, float* buf, long long e, double lr,
                          double weight_decay, double momentum, double dampening,
                          int nesterov, int first) noexcept nogil
    void fa_sgd_element_d(double* p, const double* g, double* buf, long long e, double lr,
                          double weight_decay, double momentum, double dampening,
                          int nesterov, int first) noexcept nogil
    void fa_adagrad_element_f(float* p, const float* g, float* sums, long long e, double lr,
                              double weight_decay, double eps) noexcept nogil
    void fa_adagrad_element_d(double* p, const double* g, double* sums, long long e, double lr,
                              double weight_decay, double eps) noexcept nogil
    void fa_adam_element_f(float* p, const float* g, float* m, float* v, long long e,
                           const FaAdamStep* c, double beta1, double beta2,
                           double eps) noexcept nogil
    void fa_adam_element_d(double* p, const double* g, double* m, double* v, long long e,
                           const FaAdamStep* c, double beta1, double beta2,
                           double eps) noexcept nogil
    void fa_rmsprop_element_f(float* p, const float* g, float* sq, float* buf, long long e,
                              double lr, double alpha, double eps, double weight_decay,
                              double momentum) noexcept nogil
    void fa_rmsprop_element_d(double* p, const double* g, double* sq, double* buf, long long e,
                              double lr, double alpha, double eps, double weight_decay,
                              double momentum) noexcept nogil
    void fa_adadelta_element_f(float* p, const float* g, float* sq, float* acc, long long e,
                               double lr, double rho, double eps, double weight_decay) noexcept nogil
    void fa_adadelta_element_d(double* p, const double* g, double* sq, double* acc, long long e,
                               double lr, double rho, double eps, double weight_decay) noexcept nogil
    void fa_adamax_element_f(float* p, const float* g, float* m, float* u, long long e,
                             double step_size, double beta1, double beta2, double eps,
                             double weight_decay) noexcept nogil
    void fa_adamax_element_d(double* p, const double* g, double* m, double* u, long long e,
                             double step_size, double beta1, double beta2, double eps,
                             double weight_decay) noexcept nogil
    void fa_radam_element_f(float* p, const float* g, float* m, float* v, long long e,
                            const FaRAdamStep* c, double lr, double beta1, double beta2,
                            double eps) noexcept nogil
    void fa_radam_element_d(double* p, const double* g, double* m, double* v, long long e,
                            const FaRAdamStep* c, double lr, double beta1, double beta2,
                            double eps) noexcept nogil
    void fa_nadam_element_f(float* p, const float* g, float* m, float* v, long long e,
                            const FaNAdamStep* c, double beta1, double beta2,
                            double eps) noexcept nogil
    void fa_nadam_element_d(double* p, const double* g, double* m, double* v, long long e,
                            const FaNAdamStep* c, double beta1, double beta2,
                            double eps) noexcept nogil


cdef inline void sgd_element(floating* p, const floating* g, floating* buf, Py_ssize_t e,
                             double lr, double weight_decay, double momentum, double dampening,
                             bint nesterov, bint first) noexcept nogil:
    if floating is float:
        fa_sgd_element_f(p, g, buf, e, lr, weight_decay, momentum, dampening, nesterov, first)
    else:
        fa_sgd_element_d(p, g, buf, e, lr, weight_decay, momentum, dampening, nesterov, first)


cdef inline void adagrad_element(floating* p, const floating* g, floating* sums, Py_ssize_t e,
                                 double lr, double weight_decay, double eps) noexcept nogil:
    if floating is float:
        fa_adagrad_element_f(p, g, sums, e, lr, weight_decay, eps)
    else:
        fa_adagrad_element_d(p, g, sums, e, lr, weight_decay, eps)


cdef inline void adam_element(floating* p, const floating* g, floating* m, floating* v,
                              Py_ssize_t e, const FaAdamStep* c, double beta1, double beta2,
                              double eps) noexcept nogil:
    if floating is float:
        fa_adam_element_f(p, g, m, v, e, c, beta1, beta2, eps)
    else:
        fa_adam_element_d(p, g, m, v, e, c, beta1, beta2, eps)


cdef inline void rmsprop_element(floating* p, const floating* g, floating* sq, floating* buf,
                                 Py_ssize_t e, double lr, double alpha, double eps,
                                 double weight_decay, double momentum) noexcept nogil:
    if floating is float:
        fa_rmsprop_element_f(p, g, sq, buf, e, lr, alpha, eps, weight_decay, momentum)
    else:
        fa_rmsprop_element_d(p, g, sq, buf, e, lr, alpha, eps, weight_decay, momentum)


cdef inline void adadelta_element(floating* p, const floating* g, floating* sq, floating* acc,
                                  Py_ssize_t e, double lr, double rho, double eps,
                                  double weight_decay) noexcept nogil:
    if floating is float:
        fa_adadelta_element_f(p, g, sq, acc, e, lr, rho, eps, weight_decay)
    else:
        fa_adadelta_element_d(p, g, sq, acc, e, lr, rho, eps, weight_decay)


cdef inline void adamax_element(floating* p, const floating* g, floating* m, floating* u,
                                Py_ssize_t e, double step_size, double beta1, double beta2,
                                double eps, double weight_decay) noexcept nogil:
    if floating is float:
        fa_adamax_element_f(p, g, m, u, e, step_size, beta1, beta2, eps, weight_decay)
    else:
        fa_adamax_element_d(p, g, m, u, e, step_size, beta1, beta2, eps, weight_decay)


cdef inline void radam_element(floating* p, const floating* g, floating* m, floating* v,
                               Py_ssize_t e, const FaRAdamStep* c, double lr, double beta1,
                               double beta2, double eps) noexcept nogil:
    if floating is float:
        fa_radam_element_f(p, g, m, v, e, c, lr, beta1, beta2, eps)
    else:
        fa_radam_element_d(p, g, m, v, e, c, lr, beta1, beta2, eps)


cdef inline void nadam_element(floating* p, const floating* g, floating* m, floating* v,
                               Py_ssize_t e, const FaNAdamStep* c, double beta1, double beta2,
                               double eps) noexcept nogil:
    if floating is float:
        fa_nadam_element_f(p, g, m, v, e, c, beta1, beta2, eps)
    else:
        fa_nadam_element_d(p, g, m, v, e, c, beta1, beta2, eps)

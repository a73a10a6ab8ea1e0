# Optimizer declarations: compiled code cimports these and calls step() and
# zero_grad() with no Python in between.
cimport numpy as cnp
from cpython.ref cimport PyObject
from libc.stdint cimport int64_t

from fastad._engine.graph cimport Parameter, RowStep
from fastad.ops.scalar cimport FaAdamStep, FaRAdamStep, FaNAdamStep

cdef extern from "rule_rows.h":
    # A step's arguments of the element rules (rule_rows.h): lr, the hyperparameters and
    # flag, and the step's coefficients.
    ctypedef struct FaRuleArgs:
        double lr
        double h[4]
        int flag, first
        double step_size
        FaAdamStep adam
        FaRAdamStep radam
        FaNAdamStep nadam

# An optimizer's rule over rows of a Parameter (rule_rows.h, see optimizers.pyx's
# update_values), per precision.
ctypedef void (*RowsF)(float* p, const float* g, float* s0, float* s1, const int64_t* rows,
                       Py_ssize_t n_rows, Py_ssize_t len, const FaRuleArgs* a) noexcept nogil
ctypedef void (*RowsD)(double* p, const double* g, double* s0, double* s1, const int64_t* rows,
                       Py_ssize_t n_rows, Py_ssize_t len, const FaRuleArgs* a) noexcept nogil

cdef class Optimizer:
    cdef list _params                # the Parameters, in order
    cdef PyObject** param_ptrs       # the same, borrowed, for step and zero_grad without the GIL
    cdef Py_ssize_t n_params
    cdef double _lr
    cdef tuple slot_names            # names of the per-Parameter state arrays
    cdef int n_slots
    cdef int kernel                  # the element rule of update_values (its class's _kernel_spec)
    cdef FaRuleArgs args             # what the rule takes: the hyperparameters h and the flag
                                     # (set by init_state, as the device kernels take them), lr
                                     # and the step's coefficients (set by begin)
    cdef RowsF rows_f                # the rule's float and double row loops (update_values')
    cdef RowsD rows_d
    cdef list _state                 # _state[i]: tuple of Parameter i's state arrays
    cdef char** state_ptrs           # n_params * n_slots raw pointers into _state
    cdef cnp.ndarray _steps          # int64 step count per Parameter (per process)
    cdef int64_t* steps
    cdef object _device_state        # the device optimizer state when the Parameters are
                                     # on a GPU (step() then runs its kernels), else None
    cdef list _row_steps             # Parameter i's RowStep, once row_step made it, else None
    cdef bint* row_applied           # per Parameter: its row step moved rows since the last step
    cdef object hook                 # the worker's runner's StepHook (see set_step_hooks), or None
    cdef bint has_hook               # hook is not None
    cdef bint hook_needs_gradients   # the hook reads every step's gradients: no row step offered
    cdef Py_ssize_t hook_period, hook_countdown

    cdef int init_state(self, object params, tuple slot_names, double fill=*) except -1
    # The update of p's rows that this optimizer applies as a row gather's backward sends
    # them (fastad.train routes them there, see graph.RowGather), or None when it offers
    # none: made once per Parameter (by new_row_step) and kept.
    cpdef RowStep row_step(self, Parameter p)
    cdef RowStep new_row_step(self, Py_ssize_t i)   # a subclass's RowStep for Parameter i, or None
    cdef int begin(self, int64_t step, bint sparse) except -1 nogil
    cdef int call_hook(self) except -1
    cdef tuple device_kernel(self)   # (kernel name, (h0, h1, h2, h3), flag[, running kernel,
                                     # extra doubles]) for the GPU
    cdef void update_rows(self, char* value, const char* grads, char** state, const int64_t* rows,
                          Py_ssize_t n_rows, Py_ssize_t row_len, bint f64) noexcept nogil
    cpdef int step(self) except -1
    cdef int mark_stepped(self) except -1   # graphs over the Parameters are stale until a forward
    cdef int step_cpu(self, bint clear) except -1 nogil   # step() for Parameters on the CPU
                                                          # (clear: and zero_grad())
    cdef int update(self, bint clear) except -1 nogil    # the update itself, without the hook
    cpdef zero_grad(self)
    cdef int clear_grads(self) except -1 nogil   # zero_grad() without the GIL
    cdef int require_unclaimed(self, str who) except -1   # see graph.claim_parameters


cdef class SGD(Optimizer):
    cdef readonly double momentum, dampening, weight_decay
    cdef readonly bint nesterov
    cdef bint plain(self) noexcept nogil     # no momentum, no weight decay


cdef class SGDRowStep(RowStep):
    cdef SGD optimizer


cdef class RuleRowStep(RowStep):
    cdef Optimizer optimizer
    cdef Py_ssize_t index            # its Parameter's index in the optimizer
    cdef int update(self, const int64_t* ids, Py_ssize_t n, const char* grads,
                    Py_ssize_t row_len) except -1 nogil


cdef class Adagrad(Optimizer):
    cdef readonly double eps, weight_decay, initial_accumulator_value


cdef class _MomentOptimizer(Optimizer):
    cdef readonly double beta1, beta2, eps, weight_decay
    cdef int set_moments(self, object lr, object betas, object eps,
                         object weight_decay) except -1   # checked, named after the class


cdef class Adam(_MomentOptimizer):
    cdef readonly bint decoupled     # AdamW's decoupled weight decay


cdef class AdamW(Adam):
    pass


cdef class RMSprop(Optimizer):
    cdef readonly double alpha, eps, weight_decay, momentum


cdef class Adadelta(Optimizer):
    cdef readonly double rho, eps, weight_decay


cdef class FTRL(Optimizer):
    cdef readonly double beta, l1, l2


cdef class Adamax(_MomentOptimizer):
    pass


cdef class RAdam(_MomentOptimizer):
    cdef readonly bint decoupled_weight_decay


cdef class NAdam(_MomentOptimizer):
    cdef readonly double momentum_decay
    cdef readonly bint decoupled_weight_decay
    cdef object mu_products          # float64: [t] = mu_1 * ... * mu_t, grown as steps come
    cdef double* products            # its data, read and filled without the GIL
    cdef Py_ssize_t capacity         # its length
    cdef Py_ssize_t n_products       # the entries filled (index 0 holds 1.0)
    cdef double mu_product(self, long long t) except -1.0 nogil

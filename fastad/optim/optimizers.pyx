"""Optimizers (SGD, Adagrad, Adam, AdamW, RMSprop, Adadelta, Adamax, NAdam, RAdam) and
gradient clipping.

`step()` walks the Parameters in a C loop and updates each value in place
with a typed kernel on raw buffers:

* a dense gradient updates every element with torch.optim's rule for that
  optimizer (same formulas, same order of operations);
* a sparse gradient (from a gather such as `p[ix]`) updates only the touched
  rows, in time proportional to them, with lazy per-row state: the state
  rows of untouched rows neither decay nor move their parameter rows
  (torch.optim.SparseAdam's rule); weight decay, too, applies to the touched
  rows only. Each class states its exact rule;
* a Parameter with no gradient since its last `zero_grad()` is skipped, and
  its step count does not advance.

State arrays (moments, accumulators, momentum buffers) have the Parameter's
shape and dtype. A Parameter made from a shared handle (an object with
`trainable_array()`, as `fa.hogwild.share` makes) keeps them in shared memory as well
(`p.shared.state_array(key, fill)`, with keys such as "Adam.exp_avg"), so
Hogwild workers update one copy without locks. Step counts (Adam's bias
correction, SGD's first momentum step) stay per process. The runner of a
worker may hook into the optimizers' steps (`set_step_hooks`: fa.distributed
syncs a worker's replicas every so many steps; a synchronized Hogwild run
exchanges every step's gradients): `step()`, and `fastad.train`'s loop, then
hand those steps to the hook.

Every built-in optimizer offers fused training a row step (`row_step(p)`, a
`graph.RowStep`): its update of p's rows, applied as a row gather's backward
sends them, when p is read only by row gathers (`fastad.train` routes them).
Plain SGD's (SGDRowStep) steps each gather's rows; the others' (RuleRowStep)
apply the optimizer's sparse rule at the step the example's step() counts, and,
exact only when an example sends each row once, take a Parameter that one
gather reads by one ids leaf and sends in one call, without a dense gradient: fastad.train's weights,
step counts and state are then those of backward, step() and zero_grad() after
each example, bit for bit (see RuleRowStep).

Parameters on a GPU (all on one device: an optimizer never mixes devices, nor
CPU and GPU) keep their state, step counts and the lr on that device, and
`step()` hands over to the registered device optimizer state (see
graph.register_backend), whose kernels apply the same element rules
(rules.h), sparse rows included.
`state_dict()` still returns host numpy arrays.
"""
from collections.abc import MutableMapping

import numpy as np
cimport numpy as cnp
from libc.math cimport sqrt, pow, fabs, isinf, INFINITY
from libc.stdint cimport int32_t, int64_t
from libc.stdlib cimport calloc, malloc, free
from libc.string cimport memset
from cpython.ref cimport PyObject
from cython cimport floating

from fastad._engine.graph cimport (Variable, Parameter, RowStep, GRAD_NONE, GRAD_SPARSE, GRAD_DENSE,
                                   check_unclaimed, claimed_elsewhere, mark_changed, device_backend, device_of,
                                   check_flag, check_number)
from fastad._engine.loops cimport element_size, row_axpy, row_scale, scale_rows_of
from fastad.ops.scalar cimport (fa_adam_step, fa_radam_step, fa_nadam_mu, fa_nadam_step,
                               fa_adamax_step_size)

cnp.import_array()

__all__ = ["Optimizer", "SGD", "Adagrad", "Adam", "AdamW", "RMSprop", "Adadelta", "Adamax",
           "NAdam", "RAdam", "FTRL", "clip_grad_norm", "clip_grad_value", "set_step_hooks"]

cdef extern from "sgd_rows.h":
    void fa_sgd_rows_f(float* p, const float* g, const int64_t* rows, Py_ssize_t n_rows,
                       Py_ssize_t len, float a) noexcept nogil
    void fa_sgd_rows_d(double* p, const double* g, const int64_t* rows, Py_ssize_t n_rows,
                       Py_ssize_t len, double a) noexcept nogil
    void fa_sgd_scaled_rows_f(float* p, const float* x, const float* coefs, const int64_t* rows,
                              Py_ssize_t n_rows, Py_ssize_t len, Py_ssize_t per_x,
                              const int32_t* marks, float a) noexcept nogil
    void fa_sgd_scaled_rows_d(double* p, const double* x, const double* coefs, const int64_t* rows,
                              Py_ssize_t n_rows, Py_ssize_t len, Py_ssize_t per_x,
                              const int32_t* marks, double a) noexcept nogil
    const int32_t FA_NAMED_ONCE


# ------------------------------------------------------------ argument checks

cdef double _in_range(str who, str name, object value, double low, double high,
                      bint high_open) except? -1.0:
    """`value` as a float in [low, high) (or [low, high] when not high_open); NaN fails."""
    cdef double v = check_number(who, name, value)
    if not (v >= low and (v < high if high_open else v <= high)):
        interval = f"[{low:g}, {high:g})" if high_open else f"[{low:g}, {high:g}]"
        raise ValueError(f"{who}: {name} must be in {interval}, got {value!r}")
    return v


cdef double _non_negative(str who, str name, object value) except? -1.0:
    return _in_range(who, name, value, 0.0, INFINITY, True)


cdef double _check_eps(str who, object eps) except? -1.0:
    cdef double v = check_number(who, "eps", eps)
    if not (0 < v < INFINITY):
        raise ValueError(f"{who}: eps must be > 0 and finite, got {eps!r}")
    return v


cdef tuple _check_betas(str who, object betas):
    try:
        beta1, beta2 = betas
    except (TypeError, ValueError):
        raise TypeError(f"{who}: betas must be a pair (beta1, beta2), got {betas!r}") from None
    return (_in_range(who, "betas[0]", beta1, 0.0, 1.0, True),
            _in_range(who, "betas[1]", beta2, 0.0, 1.0, True))


cdef list _param_list(object params, str who, bint allow_single, bint allow_empty):
    """The Parameters in `params` as a list, or a clear TypeError/ValueError."""
    if isinstance(params, Variable):
        if allow_single and isinstance(params, Parameter):
            return [params]
        raise TypeError(f"{who}: params must be an iterable of Parameters "
                        f"(e.g. model.parameters() or [w, b]), got a single {type(params).__name__}")
    if isinstance(params, (str, bytes, dict)):
        raise TypeError(f"{who}: params must be an iterable of Parameters, got a {type(params).__name__}")
    try:
        plist = list(params)
    except TypeError:
        raise TypeError(f"{who}: params must be an iterable of Parameters, "
                        f"got {type(params).__name__}") from None
    seen = {}
    for i, p in enumerate(plist):
        if not isinstance(p, Parameter):
            raise TypeError(f"{who}: params[{i}] is a {type(p).__name__}, not a fastad Parameter")
        if id(p) in seen:
            raise ValueError(f"{who}: params[{i}] is the same Parameter as params[{seen[id(p)]}]; "
                             f"list each Parameter once")
        seen[id(p)] = i
    if not plist and not allow_empty:
        raise ValueError(f"{who}: got an empty list of parameters")
    return plist


cdef object _one_group(object params, str who):
    """`params`, or, given as PyTorch's parameter groups (a list of dicts), the Parameters of
    its one group: a clear ValueError for more groups, or a group with hyper-parameters."""
    if not isinstance(params, (list, tuple)) or not params or not isinstance(params[0], dict):
        return params
    if len(params) > 1:
        raise ValueError(f"{who}: got {len(params)} parameter groups; a fastad optimizer takes "
                         f"one (its compiled step applies one set of hyper-parameters to all "
                         f"its Parameters): make one optimizer per group")
    group = params[0]
    if "params" not in group:
        raise ValueError(f"{who}: the parameter group has no 'params' key (keys: {sorted(group)})")
    extra = sorted(set(group) - {"params"})
    if extra:
        raise ValueError(f"{who}: the parameter group sets {extra}; give the hyper-parameters "
                         f"as arguments, {who}(params, lr=...)")
    return group["params"]


class _ParamGroup(MutableMapping):
    """`optimizer.param_groups[0]`: torch's parameter group, a live view of the optimizer:
    "params" (its Parameters) and its hyper-parameters (`hyperparameters()`). Setting "lr"
    sets the lr of the next step (as torch's schedulers do); the others are fixed when the
    optimizer is made (ValueError), and keys cannot be added or removed.

    >>> opt.param_groups[0]["lr"] *= 0.5
    """

    def __init__(self, optimizer):
        self._optimizer = optimizer

    def _keys(self):
        return ["params", *self._optimizer.hyperparameters()]

    def __getitem__(self, key):
        if key == "params":
            return self._optimizer.params
        return self._optimizer.hyperparameters()[key]

    def __setitem__(self, key, value):
        who = f"{type(self._optimizer).__name__}.param_groups"
        if key == "lr":
            self._optimizer.lr = value
        elif key in self._keys():
            raise ValueError(f"{who}: {key!r} is fixed when the optimizer is made; only 'lr' "
                             f"changes between steps (make a new optimizer for "
                             f"{key}={value!r})")
        else:
            raise KeyError(f"{who}: no key {key!r}; the group has {self._keys()}")

    def __delitem__(self, key):
        raise TypeError(f"{type(self._optimizer).__name__}.param_groups: the keys of a group "
                        f"cannot be removed")

    def __iter__(self):
        return iter(self._keys())

    def __len__(self):
        return len(self._keys())

    def __repr__(self):
        return repr(dict(self))


cdef object _params_device(list plist, str who):
    """None when every Parameter of `plist` is on the CPU, else the device they all
    share ("cuda:0"); a ValueError naming both devices when they differ."""
    cdef Py_ssize_t i
    cdef object first, device
    if not plist:
        return None
    first = device_of(<Parameter>plist[0])
    for i in range(1, len(plist)):
        device = device_of(<Parameter>plist[i])
        if device != first:
            raise ValueError(
                f"{who}: params[0] is on {first or 'cpu'} but params[{i}] is on "
                f"{device or 'cpu'}; all Parameters must be on one device (move them "
                f"with .to(device))")
    return first


cdef inline Py_ssize_t grad_spans(Parameter p, const int64_t** rows, Py_ssize_t* span_len) noexcept nogil:
    """Where p's gradient holds values: returns the number of spans of `span_len`
    elements. Span k covers the value (and state) from element rows[k] * span_len,
    or from 0 when rows is NULL (one dense span); its gradient is at span_grad(p, k).
    Zero spans when p has no gradient."""
    if p.grad_mode == GRAD_SPARSE:
        rows[0] = p.touched_ptr
        span_len[0] = p.row_len
        return p.n_touched
    rows[0] = NULL
    span_len[0] = p.size
    return 1 if p.grad_mode == GRAD_DENSE else 0


cdef inline char* span_grad(Parameter p, Py_ssize_t k) noexcept nogil:
    """The gradient of span k: a packed row of the sparse slab, or the dense buffer."""
    if p.grad_mode == GRAD_SPARSE:
        return p.slab_ptr + k * p.row_len * element_size(p.f64)
    return p.grad_ptr


cdef cnp.ndarray _state_array(Parameter p, str key, double fill):
    """A state array of p's shape and dtype filled with `fill`: in p's shared
    segment when p is shared (filled once across processes), else private."""
    if p.shared is None:
        return np.full(p._shape, fill, dtype=p._value.dtype)
    arr = p.shared.state_array(key, fill)
    if (not isinstance(arr, np.ndarray) or arr.shape != p._shape or arr.dtype != p._value.dtype
            or not arr.flags.c_contiguous or not arr.flags.writeable):
        raise RuntimeError(
            f"state_array({key!r}) of the shared handle returned "
            f"{type(arr).__name__} {getattr(arr, 'shape', '')} {getattr(arr, 'dtype', '')}; "
            f"expected a writeable C-contiguous array of shape {p._shape} and dtype {p._value.dtype}")
    return <cnp.ndarray>arr


_hook_for = None      # the running worker's runner: hook_for(optimizer) -> its StepHook or None


def set_step_hooks(hook_for):
    """Install (or, with None, remove) the step hooks of the runner of a worker: the code
    that runs a worker function and takes part in its optimizers' steps
    (fa.distributed syncs replicas every so many steps; a synchronized Hogwild run
    exchanges every step's gradients). An Optimizer made meanwhile asks
    `hook_for(optimizer)` for its hook, or None for none.

    A hook is a callable `hook(optimizer, steps)` that takes over every so many steps:
    `step()` (and `fastad.train`'s loop) calls it in place of the step's update, `steps`
    being the steps since its previous call (1 the first time); it applies the update
    itself with `optimizer.apply_update()` (before or after what it does around it) and
    returns how many steps to take before its next call (an int >= 1). A hook whose
    attribute `needs_gradients` is true reads every step's gradients: the optimizer then
    offers no row step, so that no update happens inside backward."""
    global _hook_for
    if hook_for is not None and not callable(hook_for):
        raise TypeError(f"set_step_hooks: expected a callable hook_for(optimizer) or None, "
                        f"got {type(hook_for).__name__}")
    _hook_for = hook_for


# ------------------------------------------------------------------ kernels
# One call updates rows of a Parameter (a sparse gradient's touched rows) or all of it
# (a dense gradient), by the optimizer's element rule of rules.h (torch.optim's
# single-tensor order of operations), in one loop function per rule and precision
# (rule_rows.h: its row loop runs in vector registers). As the device kernels of
# cuda/optim.cu, a rule takes the optimizer's hyperparameters h0..h3 and flag (named by
# its class's _kernel_spec) and the step's coefficients (begin()'s), all in the
# optimizer's `args`; an optimizer keeps its rule's float and double loops (rows_f,
# rows_d, from ROWS_F and ROWS_D).

cdef extern from "rule_rows.h":
    # fa_<rule>_rule_rows_<f|d>(p, g, s0, s1, rows, n_rows, len, args), as RowsF and RowsD
    void fa_sgd_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                           Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_sgd_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                           Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adagrad_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                               Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adagrad_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                               Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adam_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                            Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adam_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                            Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_rmsprop_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                               Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_rmsprop_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                               Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adadelta_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                                Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adadelta_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                                Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adamax_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                              Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_adamax_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                              Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_radam_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                             Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_radam_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                             Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_nadam_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                             Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_nadam_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                             Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_ftrl_rule_rows_f(float*, const float*, float*, float*, const int64_t*, Py_ssize_t,
                            Py_ssize_t, const FaRuleArgs*) noexcept nogil
    void fa_ftrl_rule_rows_d(double*, const double*, double*, double*, const int64_t*, Py_ssize_t,
                            Py_ssize_t, const FaRuleArgs*) noexcept nogil

cdef enum Kernel:
    NO_KERNEL, SGD_KERNEL, ADAGRAD_KERNEL, ADAM_KERNEL, RMSPROP_KERNEL, ADADELTA_KERNEL,
    ADAMAX_KERNEL, RADAM_KERNEL, NADAM_KERNEL, FTRL_KERNEL, N_KERNELS

# The kernel of each name of cuda/optim.cu (a _kernel_spec's first entry).
_KERNELS = {"sgd": SGD_KERNEL, "adagrad": ADAGRAD_KERNEL, "adam": ADAM_KERNEL,
            "rmsprop": RMSPROP_KERNEL, "adadelta": ADADELTA_KERNEL, "adamax": ADAMAX_KERNEL,
            "radam": RADAM_KERNEL, "nadam": NADAM_KERNEL, "ftrl": FTRL_KERNEL}

# Each Kernel's row loops, in the Kernel's order (none for NO_KERNEL: begin() raises).
cdef RowsF ROWS_F[N_KERNELS]
cdef RowsD ROWS_D[N_KERNELS]
ROWS_F[:] = [NULL, fa_sgd_rule_rows_f, fa_adagrad_rule_rows_f, fa_adam_rule_rows_f,
             fa_rmsprop_rule_rows_f, fa_adadelta_rule_rows_f, fa_adamax_rule_rows_f,
             fa_radam_rule_rows_f, fa_nadam_rule_rows_f, fa_ftrl_rule_rows_f]
ROWS_D[:] = [NULL, fa_sgd_rule_rows_d, fa_adagrad_rule_rows_d, fa_adam_rule_rows_d,
             fa_rmsprop_rule_rows_d, fa_adadelta_rule_rows_d, fa_adamax_rule_rows_d,
             fa_radam_rule_rows_d, fa_nadam_rule_rows_d, fa_ftrl_rule_rows_d]


cdef inline void update_values(Optimizer opt, char* value, const char* grads, char** state,
                               const int64_t* rows, Py_ssize_t n_rows, Py_ssize_t row_len,
                               bint f64) noexcept nogil:
    """The optimizer's rule, in the buffers' precision, on the rows rows[k] (row_len elements
    each) of the value and state from the gradient rows packed in `grads`, or with rows
    NULL on the n_rows * row_len elements from 0 (a state slot the optimizer does not keep
    is NULL)."""
    cdef char* s0 = state[0] if opt.n_slots > 0 else NULL
    cdef char* s1 = state[1] if opt.n_slots > 1 else NULL
    if f64:
        opt.rows_d(<double*>value, <const double*>grads, <double*>s0, <double*>s1, rows, n_rows,
                   row_len, &opt.args)
    else:
        opt.rows_f(<float*>value, <const float*>grads, <float*>s0, <float*>s1, rows, n_rows,
                   row_len, &opt.args)


# --------------------------------------------------------------- Optimizer

cdef extern from "<stdlib.h>" nogil:
    int posix_memalign(void** memptr, size_t alignment, size_t size)


cdef bint* _own_cache_lines(size_t nbytes) noexcept:
    """nbytes of zeros in cache lines of their own, or NULL: flags written on every example
    stay out of the lines another thread's optimizer writes (false sharing halves the rate
    of two Hogwild threads)."""
    cdef void* block = NULL
    cdef size_t size = (nbytes // 64 + 1) * 64
    if posix_memalign(&block, 64, size) != 0:
        return NULL
    memset(block, 0, size)
    return <bint*>block


cdef int _missing_state(str who) except -1:
    raise RuntimeError(
        f"{who}.step(): the optimizer's state was never set up; a subclass's __init__ "
        f"must call its base class's __init__ (e.g. super().__init__(params, lr=...)), "
        f"not Optimizer.__init__ alone")


cdef class Optimizer:
    """Base class of the optimizers: `Optimizer(params)` (not used directly).

    `params` is an iterable of Parameters (each listed once, at least one), or
    PyTorch's parameter groups with one group, `[{"params": [...]}]`.
    `lr` is a plain attribute that schedulers may change between steps, as is
    `param_groups[0]["lr"]` (torch's form of it).
    A built-in subclass names its kernel (`_kernel_spec`): the element rule of rules.h
    that updates one span of a Parameter (the whole buffer, or one touched row), on a
    GPU its kernel in cuda/optim.cu, and the hyperparameters both take; the C method
    `begin(step, sparse)` computes the kernel's per-step coefficients of one Parameter.

    Example::

        opt = fa.optim.Adam(model.parameters(), lr=1e-3)
        loss.backward(); opt.step(); opt.zero_grad()
        fa.save({"optimizer": opt.state_dict()}, "opt.npz")
    """

    _kernel_spec = None             # a built-in's kernel: (its name in cuda/optim.cu, the attributes
                                    # that are its h0.., the attribute that is its flag, or None)
    _hyperparameter_names = ()      # the attributes hyperparameters() gives after lr

    def __cinit__(self):
        self.state_ptrs = NULL
        self.param_ptrs = NULL
        self.row_applied = NULL
        spec = type(self)._kernel_spec
        self.kernel = NO_KERNEL if spec is None else _KERNELS[spec[0]]
        self.rows_f, self.rows_d = ROWS_F[self.kernel], ROWS_D[self.kernel]

    def __dealloc__(self):
        free(self.state_ptrs)
        free(self.param_ptrs)
        free(self.row_applied)

    def __init__(self, params):
        if type(self) is Optimizer:
            raise TypeError("Optimizer is the base class; use SGD, Adagrad, Adam, AdamW, RMSprop, "
                            "Adadelta, Adamax, NAdam or RAdam, or subclass it")
        self._params = _param_list(_one_group(params, type(self).__name__), type(self).__name__,
                                   False, False)
        # A second __init__ must not leave pointers into the state arrays it drops below.
        free(self.state_ptrs)
        self.state_ptrs = NULL
        self.n_params = len(self._params)
        free(self.param_ptrs)
        self.param_ptrs = <PyObject**>malloc(max(1, self.n_params) * sizeof(PyObject*))
        free(self.row_applied)
        self.row_applied = _own_cache_lines(self.n_params * sizeof(bint))
        if self.param_ptrs == NULL or self.row_applied == NULL:
            raise MemoryError()
        self._row_steps = [None] * self.n_params
        for i, p in enumerate(self._params):
            self.param_ptrs[i] = <PyObject*>p
        self._device_state = None
        device = _params_device(self._params, type(self).__name__)
        if device is not None:
            self._device_state = device_backend().DeviceState(self._params, device, self._lr)
        self._steps = np.zeros(self.n_params, dtype=np.int64)
        self.steps = <int64_t*>cnp.PyArray_DATA(self._steps)
        self.hook = _hook_for(self) if _hook_for is not None else None
        self.has_hook = self.hook is not None
        self.hook_needs_gradients = bool(getattr(self.hook, "needs_gradients", False))
        self.hook_period = self.hook_countdown = 1
        self.slot_names = ()
        self.n_slots = 0
        self._state = [() for _ in range(self.n_params)]

    cdef int init_state(self, object params, tuple slot_names, double fill=0.0) except -1:
        """The rest of a built-in's __init__, once its hyperparameters are set:
        Optimizer.__init__, its kernel's h and flag (from _kernel_spec), and for every
        Parameter one state array per slot name, filled with `fill`."""
        cdef Py_ssize_t i, s
        cdef str prefix = type(self).__name__ + "."
        Optimizer.__init__(self, params)
        _, hyper, flag = self._kernel_spec
        for i, name in enumerate(hyper):
            self.args.h[i] = getattr(self, name)
        self.args.flag = flag is not None and getattr(self, flag)
        self.slot_names = slot_names
        self.n_slots = len(slot_names)
        self.state_ptrs = <char**>calloc(max(1, self.n_params * self.n_slots), sizeof(char*))
        if self.state_ptrs == NULL:
            raise MemoryError()
        try:
            if self._device_state is not None:
                # Device state: the raw pointers stay NULL (step() hands over to the kernels).
                self._state = self._device_state.init_state(self.device_kernel(), self.n_slots, fill)
            else:
                for i in range(self.n_params):
                    arrays = tuple(_state_array(<Parameter>self._params[i], prefix + name, fill)
                                   for name in slot_names)
                    self._state[i] = arrays
                    for s in range(self.n_slots):
                        self.state_ptrs[i * self.n_slots + s] = <char*>cnp.PyArray_DATA(arrays[s])
        except BaseException:
            free(self.state_ptrs)      # step() then refuses to run on the missing state
            self.state_ptrs = NULL
            raise
        return 0

    cdef int begin(self, int64_t step, bint sparse) except -1 nogil:
        """The coefficients the kernel takes for a Parameter's step `step` (a sparse one or
        not), from lr, h and the flag as the Steps of cuda/optim.cu compute them."""
        if self.kernel == NO_KERNEL:
            with gil:
                raise NotImplementedError(f"{type(self).__name__} does not implement step()")
        self.args.lr = self._lr
        if self.kernel == SGD_KERNEL:
            self.args.first = step == 1 and not sparse
        elif self.kernel == ADAM_KERNEL:
            self.args.adam = fa_adam_step(self._lr, step, self.args.h[0], self.args.h[1],
                                          self.args.h[3], self.args.flag)
        elif self.kernel == ADAMAX_KERNEL:
            self.args.step_size = fa_adamax_step_size(self._lr, step, self.args.h[0])
        elif self.kernel == RADAM_KERNEL:
            self.args.radam = fa_radam_step(self._lr, step, self.args.h[0], self.args.h[1],
                                            self.args.h[3], self.args.flag)
        elif self.kernel == NADAM_KERNEL:
            self.args.nadam = fa_nadam_step(
                self._lr, step, self.args.h[0], self.args.h[1], self.args.h[3], self.args.flag,
                (<NAdam>self).momentum_decay, (<NAdam>self).mu_product(step))
        return 0

    cpdef RowStep row_step(self, Parameter p):
        """The RowStep that applies this optimizer's update of `p`'s rows as a row gather's
        backward sends them (fastad.train routes them to it), or None when the optimizer
        offers none (or a step hook reads every step's gradients); `p` must be one of its
        Parameters on the CPU. Made once per Parameter and kept: its steps count as the
        optimizer's (step() counts a Parameter's step when its row step moved a row)."""
        cdef Py_ssize_t i
        cdef RowStep step
        for i in range(self.n_params):
            if self._params[i] is p:
                break
        else:
            raise ValueError(f"{type(self).__name__}.row_step: the Parameter is not one of the "
                             f"optimizer's")
        if self._device_state is not None or self.hook_needs_gradients:
            return None
        if self._row_steps[i] is None:
            step = self.new_row_step(i)
            if step is None:
                return None
            step.param, step.owner, step.applied = p, self, &self.row_applied[i]
            self._row_steps[i] = step
        return self._row_steps[i]

    cdef RowStep new_row_step(self, Py_ssize_t i):
        """A built-in's RuleRowStep (the rule's sparse update of each row as it comes); None
        for an optimizer without a kernel (a subclass's own step())."""
        if self.kernel == NO_KERNEL or self.state_ptrs == NULL:
            return None
        cdef RuleRowStep step = RuleRowStep.__new__(RuleRowStep)
        step.optimizer, step.index, step.one_source = self, i, True
        return step

    cdef tuple device_kernel(self):
        """The GPU update: (kernel name in cuda/optim.cu without its _dense/_rows
        suffix, its four double hyperparameters h0..h3, its int flag), and for an
        update that keeps a running value per Parameter (in the device optimizer state),
        the kernel that advances it and the extra doubles both kernels take."""
        return (self._kernel_spec[0], (self.args.h[0], self.args.h[1], self.args.h[2], self.args.h[3]),
                int(self.args.flag))

    cdef void update_rows(self, char* value, const char* grads, char** state, const int64_t* rows,
                          Py_ssize_t n_rows, Py_ssize_t row_len, bint f64) noexcept nogil:
        """Update the rows rows[k] of a sparse gradient, whose row k is packed at
        grads + k * row_len elements, in one call of the rule's row loop."""
        update_values(self, value, grads, state, rows, n_rows, row_len, f64)

    cpdef int step(self) except -1:
        """Update every Parameter that holds a gradient (dense: all of it; sparse:
        its touched rows). Gradients are left as they are: call zero_grad().

        >>> loss.backward(); opt.step(); opt.zero_grad()
        """
        self.require_unclaimed("step()")
        if self._device_state is not None:
            if self.state_ptrs == NULL:
                _missing_state(type(self).__name__)
            self._device_state.step()
        else:
            self.step_cpu(False)
        self.mark_stepped()
        return 0

    cdef int mark_stepped(self) except -1:
        """Record that the Parameters' values changed: a graph over them is stale until its
        next forward (backward() refuses it until then)."""
        cdef Py_ssize_t i
        for i in range(self.n_params):
            mark_changed(<Parameter>self.param_ptrs[i])
        return 0

    cdef int step_cpu(self, bint clear) except -1 nogil:
        """step() on the CPU: the update (or the step hook's call in its place, when due);
        with `clear`, also zero_grad(), each gradient as soon as its Parameter has stepped
        (one pass, and none over the Parameters that hold no gradient: those whose rows
        their row step moved)."""
        if self.has_hook:
            self.hook_countdown -= 1
            if self.hook_countdown == 0:
                with gil:
                    self.call_hook()
                if clear:
                    self.clear_grads()
                return 0
        return self.update(clear)

    cdef int update(self, bint clear) except -1 nogil:
        """This step's update of every Parameter that holds a gradient (dense: all of it;
        sparse: its touched rows), each gradient cleared after it with `clear`; a
        Parameter whose row step moved rows since the last step counts the step."""
        cdef Py_ssize_t i, n_spans, span_len
        cdef const int64_t* rows
        cdef PyObject* p
        cdef int64_t t
        cdef char** state
        for i in range(self.n_params):
            p = self.param_ptrs[i]
            if (<Parameter>p).grad_mode == GRAD_NONE:
                if self.row_applied[i]:
                    self.row_applied[i] = False
                    self.steps[i] += 1
                continue
            t = self.steps[i] + 1
            self.begin(t, (<Parameter>p).grad_mode == GRAD_SPARSE)
            if self.state_ptrs == NULL:
                with gil:
                    _missing_state(type(self).__name__)
            self.steps[i] = t
            state = self.state_ptrs + i * self.n_slots
            n_spans = grad_spans(<Parameter>p, &rows, &span_len)
            if rows != NULL:
                self.update_rows((<Parameter>p).val_ptr, span_grad(<Parameter>p, 0), state, rows,
                                 n_spans, span_len, (<Parameter>p).f64)
            elif n_spans:
                update_values(self, (<Parameter>p).val_ptr, span_grad(<Parameter>p, 0), state, NULL,
                              1, span_len, (<Parameter>p).f64)
            if clear:
                (<Parameter>p).clear_grad()
        return 0

    def apply_update(self):
        """This step's update, without the step hook: what a step hook (see set_step_hooks)
        calls when it takes over a step. Gradients are left as they are."""
        if self._device_state is not None:
            self._device_state.step()
        else:
            self.update(False)
        self.mark_stepped()

    cdef int call_hook(self) except -1:
        period = self.hook(self, self.hook_period)
        if isinstance(period, bool) or not isinstance(period, int) or period < 1:
            raise TypeError(f"{type(self).__name__}.step: the step hook of the worker's runner "
                            f"(set_step_hooks) returned {period!r}; expected an int >= 1")
        self.hook_period = self.hook_countdown = period
        return 0

    cpdef zero_grad(self):
        """Clear every Parameter's gradient (a sparse one in time proportional to its rows).

        >>> opt.zero_grad()      # the next backward() writes fresh gradients
        """
        self.require_unclaimed("zero_grad()")
        self.clear_grads()

    cdef int require_unclaimed(self, str who) except -1:
        """RuntimeError if another thread's fa.train is using one of the Parameters."""
        cdef Py_ssize_t i
        for i in range(self.n_params):
            if claimed_elsewhere(<Parameter>self.param_ptrs[i]):      # the message only then
                check_unclaimed(f"{type(self).__name__}.{who}", <Parameter>self.param_ptrs[i])
        return 0

    cdef int clear_grads(self) except -1 nogil:
        cdef Py_ssize_t i
        for i in range(self.n_params):
            (<Parameter>self.param_ptrs[i]).clear_grad()
        return 0

    @property
    def lr(self):
        """The learning rate used by the next step() (settable, >= 0).

        >>> opt.lr = opt.lr * 0.5
        """
        return self._lr

    @lr.setter
    def lr(self, value):
        self._lr = _non_negative(type(self).__name__, "lr", value)
        if self._device_state is not None:
            self._device_state.set_lr(self._lr)

    @property
    def param_groups(self):
        """torch's `param_groups`: a list of one group, a dict-like live view of this optimizer
        ("params" and the hyper-parameters); `opt.param_groups[0]["lr"] = 0.01` sets the lr
        of the next step.

        >>> for group in opt.param_groups: group["lr"] = 1e-4
        """
        return [_ParamGroup(self)]

    @property
    def params(self):
        """The optimized Parameters, in order (a new list).

        >>> [p.shape for p in opt.params]
        """
        return list(self._params)

    def hyperparameters(self):
        """The hyperparameters as a dict of numbers (lr included).

        >>> fa.optim.Adam([w]).hyperparameters()["beta2"]
        0.999
        """
        return {"lr": self._lr, **{name: getattr(self, name) for name in self._hyperparameter_names}}

    def state_dict(self):
        """The optimizer's state as a flat dict of numbers and numpy arrays (copies).

        Keys: the hyperparameters ("lr", ...), and for Parameter i
        "state.{i}.step" (int) and "state.{i}.{slot}" (array of its shape).

        >>> fa.save({"model": model.state_dict(), "optimizer": opt.state_dict()}, "ckpt.npz")
        """
        d = dict(self.hyperparameters())
        if self._device_state is not None:
            steps, state = self._device_state.to_host()
        else:
            steps, state = self._steps, [[arr.copy() for arr in arrays] for arrays in self._state]
        for i in range(self.n_params):
            d[f"state.{i}.step"] = int(steps[i])
            for name, arr in zip(self.slot_names, state[i]):
                d[f"state.{i}.{name}"] = arr
        return d

    def load_state_dict(self, state):
        """Restore a state_dict() of the same kind of optimizer over Parameters of
        the same shapes. Restores lr; the other hyperparameters must match this
        optimizer's. Everything is checked before anything changes (ValueError
        naming the offending keys, shapes or values). Returns self.

        >>> opt.load_state_dict(fa.load("ckpt.npz")["optimizer"])
        """
        cdef Py_ssize_t i
        who = f"{type(self).__name__}.load_state_dict"
        if not hasattr(state, "keys"):
            raise TypeError(f"{who}: expected a dict from state_dict(), got {type(state).__name__}")
        hyper = self.hyperparameters()
        expected = set(hyper)
        for i in range(self.n_params):
            expected.add(f"state.{i}.step")
            expected.update(f"state.{i}.{name}" for name in self.slot_names)
        missing = sorted(expected - set(state.keys()))
        unexpected = sorted(set(state.keys()) - expected)
        if missing or unexpected:
            raise ValueError(
                f"{who}: the state dict does not fit this optimizer ({self.n_params} parameters, "
                f"state slots {list(self.slot_names)}): missing keys {missing}, unexpected keys "
                f"{unexpected}. Was it saved from another optimizer or another model?")
        lr = _non_negative(who, "lr", state["lr"])
        for name, value in hyper.items():
            if name != "lr" and check_number(who, name, state[name], bools=True) != value:
                raise ValueError(f"{who}: the state dict was saved with {name}={state[name]!r}, "
                                 f"this optimizer has {name}={value!r}; build the optimizer with "
                                 f"the saved hyperparameters")
        steps = np.empty(self.n_params, dtype=np.int64)
        arrays = []
        for i in range(self.n_params):
            key = f"state.{i}.step"
            step = check_number(who, key, state[key], bools=True)
            if not (0 <= step < 2.0 ** 63 and step == int(step)):   # NaN and inf fail before int()
                raise ValueError(f"{who}: {key} must be an integer in [0, 2**63), got {state[key]!r}")
            steps[i] = int(step)
            for name, current in zip(self.slot_names, self._state[i]):
                key = f"state.{i}.{name}"
                arr = np.asarray(state[key])
                if arr.dtype.kind != "f" or arr.shape != current.shape:
                    raise ValueError(f"{who}: {key} is a {arr.dtype} array of shape {arr.shape}; "
                                     f"expected a float array of shape {current.shape}")
                arrays.append((current, arr))
        if self._device_state is not None:
            self._device_state.load(steps, arrays, lr)
        else:
            for current, arr in arrays:
                np.copyto(current, arr, casting="same_kind")
            self._steps[:] = steps
        self._lr = lr
        return self

    def __repr__(self):
        args = ", ".join(f"{k}={v!r}" for k, v in self.hyperparameters().items())
        return f"{type(self).__name__}({args}; {self.n_params} parameters)"


cdef class SGD(Optimizer):
    """Stochastic gradient descent with optional momentum, Nesterov and weight decay.

    `SGD(params, lr, momentum=0, dampening=0, nesterov=False, weight_decay=0)`.
    Dense rule (torch.optim.SGD): d = g + weight_decay * p; with momentum,
    buf = d on the first step, else buf = momentum * buf + (1 - dampening) * d,
    and d = d + momentum * buf (nesterov) or d = buf; then p -= lr * d.

    Sparse rule: only the touched rows move. A momentum row starts at zero and
    follows buf = momentum * buf + (1 - dampening) * d on each step that touches
    it (so a row's first update is (1 - dampening) * d: torch's rule whenever
    dampening = 0); untouched rows keep their buffer unchanged and their value
    still. Weight decay applies to the touched rows only.

    >>> opt = fa.optim.SGD(model.parameters(), lr=0.1, momentum=0.9)
    >>> loss.backward(); opt.step(); opt.zero_grad()
    """
    _kernel_spec = "sgd", ("weight_decay", "momentum", "dampening"), "nesterov"
    _hyperparameter_names = ("momentum", "dampening", "nesterov", "weight_decay")

    def __init__(self, params, lr, momentum=0.0, dampening=0.0, nesterov=False, weight_decay=0.0):
        who = "SGD"
        self._lr = _non_negative(who, "lr", lr)
        self.momentum = _in_range(who, "momentum", momentum, 0.0, 1.0, True)
        self.dampening = _in_range(who, "dampening", dampening, 0.0, 1.0, False)
        self.weight_decay = _non_negative(who, "weight_decay", weight_decay)
        self.nesterov = check_flag(who, "nesterov", nesterov)
        if nesterov and (self.momentum == 0 or self.dampening != 0):
            raise ValueError(f"{who}: nesterov=True needs momentum > 0 and dampening = 0, got "
                             f"momentum={momentum!r}, dampening={dampening!r}")
        self.init_state(params, ("momentum_buffer",) if self.momentum != 0 else ())

    cdef void update_rows(self, char* value, const char* grads, char** state, const int64_t* rows,
                          Py_ssize_t n_rows, Py_ssize_t row_len, bint f64) noexcept nogil:
        if self.plain():        # the row kernel of its row step, in one call for all the rows
            sgd_row_values(value, grads, rows, n_rows, row_len, self._lr, f64)
        else:
            Optimizer.update_rows(self, value, grads, state, rows, n_rows, row_len, f64)

    cdef bint plain(self) noexcept nogil:
        """No momentum, no weight decay: a row's update needs its gradient alone."""
        return self.momentum == 0 and self.weight_decay == 0

    cdef RowStep new_row_step(self, Py_ssize_t i):
        """Plain SGD steps each row as it comes (SGDRowStep); with momentum or weight decay,
        the rule's RuleRowStep does."""
        if not self.plain():
            return Optimizer.new_row_step(self, i)
        cdef SGDRowStep step = SGDRowStep.__new__(SGDRowStep)
        step.optimizer = self
        return step


cdef inline void sgd_row_values(char* p, const char* g, const int64_t* rows, Py_ssize_t n_rows,
                                Py_ssize_t row_len, double lr, bint f64) noexcept nogil:
    """Plain SGD on rows rows[k] of p, their gradients packed row after row in g:
    p[r] = p[r] + (-lr) * g row k, in p's precision, in one call for all the rows."""
    if f64:
        fa_sgd_rows_d(<double*>p, <const double*>g, rows, n_rows, row_len, -lr)
    else:
        fa_sgd_rows_f(<float*>p, <const float*>g, rows, n_rows, row_len, <float>-lr)


cdef inline void sgd_scaled_rows(floating* p, const floating* x, const floating* coefs,
                                 const int64_t* rows, Py_ssize_t n_rows, Py_ssize_t row_len,
                                 Py_ssize_t per_x, double lr, const int32_t* marks=NULL) noexcept nogil:
    """sgd_row_values for the gradient rows coefs[k] * x row k // per_x (each x row serves
    per_x rows in turn), never stored: the same values. With `marks`, only the rows r
    whose marks[r] is FA_NAMED_ONCE take their step."""
    if floating is float:
        fa_sgd_scaled_rows_f(p, x, coefs, rows, n_rows, row_len, per_x, marks, <float>-lr)
    else:
        fa_sgd_scaled_rows_d(p, x, coefs, rows, n_rows, row_len, per_x, marks, -lr)


cdef void step_scaled_rows(floating* p, floating* slab, int32_t* slot_of, int64_t* touched,
                           const int64_t* ids, Py_ssize_t n, const floating* x,
                           const floating* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                           double lr, bint repeats) noexcept nogil:
    """Plain SGD of the gradient rows coefs[k] * x row k // per_x, each row stepped from x at
    once (sgd_scaled_rows) unless some ids repeat: then a row named once steps so, and a
    repeated row sums its scaled rows in order in a slab row first and takes one step of the
    sum. The values of scaling the rows, summing them in a sparse gradient and step(), bit
    for bit, with the slab holding only the repeated rows.
    slot_of holds -1 for every row on entry and on return; while it runs, FA_NAMED_ONCE
    (-2) marks a row named once, -3 - s a repeated row whose slab row s is not yet written, and s
    one whose slab row s holds its sum so far. The slab has room for n // 2 rows."""
    cdef Py_ssize_t k, left = per_x, repeated = 0
    cdef int64_t r
    cdef int32_t s
    cdef const floating* xk = x
    if not repeats:
        sgd_scaled_rows(p, x, coefs, ids, n, row_len, per_x, lr)
        return
    for k in range(n):
        r = ids[k]
        if slot_of[r] == -1:
            slot_of[r] = FA_NAMED_ONCE
        elif slot_of[r] == FA_NAMED_ONCE:
            touched[repeated] = r
            slot_of[r] = <int32_t>(-3 - repeated)
            repeated += 1
    sgd_scaled_rows(p, x, coefs, ids, n, row_len, per_x, lr, slot_of)
    for k in range(n):
        r = ids[k]
        s = slot_of[r]
        if s < FA_NAMED_ONCE:
            s = -3 - s
            row_scale(slab + s * row_len, xk, row_len, coefs[k])
            slot_of[r] = s
        elif s >= 0:
            row_axpy(slab + s * row_len, xk, row_len, coefs[k])
        left -= 1
        if left == 0:
            xk += row_len
            left = per_x
    sgd_row_values(<char*>p, <const char*>slab, touched, repeated, row_len, lr, floating is double)
    for k in range(n):
        slot_of[ids[k]] = -1


cdef class SGDRowStep(RowStep):
    """Plain SGD's row step (SGD.row_step): p[row] -= lr * g[row] as each row gather's
    backward sends the rows. When a row repeats among one call's ids, its contributions are
    summed first (in the Parameter's sparse gradient, or its slab for scaled rows) and each
    distinct row takes one step, as step() would take it: stepping a repeated row once per
    contribution would write the row again and again, which threads or processes sharing a
    frequent row pay for in cache traffic. The values are those of backward, step() and
    zero_grad() bit for bit, unless two gathers of one example send the same row: it then
    takes one step per gather instead of one step of their sum."""

    cdef const double* plain_sgd_rate(self) noexcept nogil:
        return &self.optimizer._lr

    cdef int add_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                      Py_ssize_t row_len) except -1 nogil:
        cdef Py_ssize_t distinct = self.param.sum_repeats(ids, n, rows, row_len) if n > 1 else 0
        if distinct:
            sgd_row_values(self.param.val_ptr, self.param.slab_ptr, self.param.touched_ptr, distinct,
                           row_len, self.optimizer._lr, self.param.f64)
            self.param.clear_grad()
        else:
            sgd_row_values(self.param.val_ptr, rows, ids, n, row_len, self.optimizer._lr, self.param.f64)
        self.applied[0] = True
        return 0

    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil:
        cdef bint repeats = n > 1 and self.param.repeats_among(ids, n)
        if repeats and (self.param.slot_of_ptr == NULL or self.param.slab_rows < n // 2):
            with gil:           # step_scaled_rows marks rows in slot_of; n // 2 rows can repeat
                if self.param.slot_of_ptr == NULL:
                    self.param.start_sparse()
                if self.param.slab_rows < n // 2:
                    self.param.grow_slab_to(n // 2)
        if self.param.f64:
            step_scaled_rows(<double*>self.param.val_ptr, <double*>self.param.slab_ptr, self.param.slot_of_ptr, self.param.touched_ptr,
                             ids, n, <const double*>x, <const double*>coefs, row_len, per_x,
                             self.optimizer._lr, repeats)
        else:
            step_scaled_rows(<float*>self.param.val_ptr, <float*>self.param.slab_ptr, self.param.slot_of_ptr, self.param.touched_ptr,
                             ids, n, <const float*>x, <const float*>coefs, row_len, per_x,
                             self.optimizer._lr, repeats)
        self.applied[0] = True
        return 0


cdef class RuleRowStep(RowStep):
    """The row step of an optimizer with state or step counts (every built-in but plain SGD,
    whose step is SGDRowStep): the optimizer's sparse rule, which step() applies to a
    sparse gradient's rows, applied to the gradient rows a row gather's backward sends, as
    they come. Its step t is the one the example's step() counts (the Parameter's steps
    advance only on the examples that moved its rows: Adam's lazy rule). Rows repeated
    among one send are summed first (Parameter.sum_repeats) and each takes one update.

    Exact only when each example sends a row once: so `one_source` (fastad.train routes
    a table here only when one source, one ids leaf of one row gather, reads it, and the
    gather sends it in one call). The values are then those of backward, step() and
    zero_grad() bit for bit."""

    cdef int add_rows(self, const int64_t* ids, Py_ssize_t n, const char* rows,
                      Py_ssize_t row_len) except -1 nogil:
        cdef Py_ssize_t distinct = self.param.sum_repeats(ids, n, rows, row_len) if n > 1 else 0
        if not distinct:
            return self.update(ids, n, rows, row_len)
        self.update(self.param.touched_ptr, distinct, self.param.slab_ptr, row_len)   # after
        return self.param.clear_grad()                          # sum_repeats, which may grow them

    cdef int add_scaled_rows(self, const int64_t* ids, Py_ssize_t n, const char* x,
                             const char* coefs, Py_ssize_t row_len, Py_ssize_t per_x,
                             char* scratch) except -1 nogil:
        """The gradient rows coefs[k] * x row k // per_x, written to scratch as the table's
        gradient would hold them, then add_rows."""
        scale_rows_of(scratch, x, coefs, n, row_len, per_x, self.param.f64)
        return self.add_rows(ids, n, scratch, row_len)

    cdef int update(self, const int64_t* ids, Py_ssize_t n, const char* grads,
                    Py_ssize_t row_len) except -1 nogil:
        """The rule's update of the distinct rows ids[k] from the gradient rows packed in
        grads, at the step the example's step() counts (marked in `applied`)."""
        self.optimizer.begin(self.optimizer.steps[self.index] + 1, True)
        self.optimizer.update_rows(self.param.val_ptr, grads,
                                   self.optimizer.state_ptrs + self.index * self.optimizer.n_slots,
                                   ids, n, row_len, self.param.f64)
        self.applied[0] = True
        return 0


cdef class Adagrad(Optimizer):
    """Adagrad: `Adagrad(params, lr=1e-2, eps=1e-10, weight_decay=0, initial_accumulator_value=0)`.

    Dense rule (torch.optim.Adagrad without lr_decay): d = g + weight_decay * p;
    sum += d * d; p -= lr * d / (sqrt(sum) + eps).

    Sparse rule: the same on the touched rows only; untouched rows keep their
    sum and value (exactly what the dense rule does with a zero gradient, and
    torch's sparse Adagrad). Weight decay applies to the touched rows only.

    >>> opt = fa.optim.Adagrad([emb.weight], lr=0.05)
    """
    _kernel_spec = "adagrad", ("weight_decay", "eps"), None
    _hyperparameter_names = ("eps", "weight_decay", "initial_accumulator_value")

    def __init__(self, params, lr=1e-2, eps=1e-10, weight_decay=0.0, initial_accumulator_value=0.0):
        who = "Adagrad"
        self._lr = _non_negative(who, "lr", lr)
        self.eps = _check_eps(who, eps)
        self.weight_decay = _non_negative(who, "weight_decay", weight_decay)
        self.initial_accumulator_value = _non_negative(who, "initial_accumulator_value",
                                                       initial_accumulator_value)
        self.init_state(params, ("sum",), self.initial_accumulator_value)


# The hyperparameters of the moment optimizers, in the order their kernels take them (h0..h3).
_MOMENTS = ("beta1", "beta2", "eps", "weight_decay")


cdef class _MomentOptimizer(Optimizer):
    """The hyperparameters that Adam, AdamW, Adamax, RAdam and NAdam share: the betas of
    their moment averages, eps and weight_decay (not used directly)."""
    _hyperparameter_names = _MOMENTS

    cdef int set_moments(self, object lr, object betas, object eps,
                         object weight_decay) except -1:
        who = type(self).__name__
        self._lr = _non_negative(who, "lr", lr)
        self.beta1, self.beta2 = _check_betas(who, betas)
        self.eps = _check_eps(who, eps)
        self.weight_decay = _non_negative(who, "weight_decay", weight_decay)
        return 0


cdef class Adam(_MomentOptimizer):
    """Adam: `Adam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)`.

    Dense rule (torch.optim.Adam): t += 1; d = g + weight_decay * p;
    m = beta1 * m + (1 - beta1) * d; v = beta2 * v + (1 - beta2) * d * d;
    p -= lr / (1 - beta1**t) * m / (sqrt(v) / sqrt(1 - beta2**t) + eps).

    Sparse rule (torch.optim.SparseAdam's): t counts the steps at which the
    Parameter had any gradient; only the touched rows update m, v and p, with
    the bias corrections of that shared t. Untouched rows' moments do not decay.
    Weight decay applies to the touched rows only. eps sits where the dense
    rule puts it (SparseAdam adds it before the bias correction of v instead).

    >>> opt = fa.optim.Adam(model.parameters(), lr=1e-3)
    """
    _kernel_spec = "adam", _MOMENTS, "decoupled"

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.set_moments(lr, betas, eps, weight_decay)
        self.decoupled = isinstance(self, AdamW)
        self.init_state(params, ("exp_avg", "exp_avg_sq"))


cdef class AdamW(Adam):
    """AdamW: `AdamW(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2)`.

    Adam with decoupled weight decay (torch.optim.AdamW): p *= 1 - lr * weight_decay
    before the Adam update, which then uses the plain gradient. Sparse rule:
    Adam's, and the decay too applies to the touched rows only.

    >>> opt = fa.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01)
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=1e-2):
        Adam.__init__(self, params, lr, betas, eps, weight_decay)


cdef class RMSprop(Optimizer):
    """RMSprop: `RMSprop(params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0)`.

    Dense rule (torch.optim.RMSprop, not centered): d = g + weight_decay * p;
    sq = alpha * sq + (1 - alpha) * d * d; u = d / (sqrt(sq) + eps); with
    momentum, buf = momentum * buf + u and u = buf; p -= lr * u.

    Sparse rule: the same on the touched rows only; untouched rows' square
    averages do not decay and their momentum rows do not move them. Weight
    decay applies to the touched rows only.

    >>> opt = fa.optim.RMSprop(model.parameters(), lr=1e-2, momentum=0.9)
    """
    _kernel_spec = "rmsprop", ("alpha", "eps", "weight_decay", "momentum"), None
    _hyperparameter_names = ("alpha", "eps", "weight_decay", "momentum")

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0.0, momentum=0.0):
        who = "RMSprop"
        self._lr = _non_negative(who, "lr", lr)
        self.alpha = _in_range(who, "alpha", alpha, 0.0, 1.0, True)
        self.eps = _check_eps(who, eps)
        self.weight_decay = _non_negative(who, "weight_decay", weight_decay)
        self.momentum = _in_range(who, "momentum", momentum, 0.0, 1.0, True)
        self.init_state(params, ("square_avg", "momentum_buffer") if self.momentum != 0
                        else ("square_avg",))


cdef class Adadelta(Optimizer):
    """Adadelta: `Adadelta(params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0)`.

    Dense rule (torch.optim.Adadelta): d = g + weight_decay * p;
    sq = rho * sq + (1 - rho) * d * d; delta = sqrt(acc + eps) / sqrt(sq + eps) * d;
    acc = rho * acc + (1 - rho) * delta * delta; p -= lr * delta.

    Sparse rule: the same on the touched rows only (no step count is involved, so
    each row follows the dense rule on its own steps); untouched rows' averages do
    not decay. Weight decay applies to the touched rows only.

    >>> opt = fa.optim.Adadelta(model.parameters())
    """
    _kernel_spec = "adadelta", ("rho", "eps", "weight_decay"), None
    _hyperparameter_names = ("rho", "eps", "weight_decay")

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0.0):
        who = "Adadelta"
        self._lr = _non_negative(who, "lr", lr)
        self.rho = _in_range(who, "rho", rho, 0.0, 1.0, False)
        self.eps = _check_eps(who, eps)
        self.weight_decay = _non_negative(who, "weight_decay", weight_decay)
        self.init_state(params, ("square_avg", "acc_delta"))


cdef class FTRL(Optimizer):
    """FTRL-Proximal (McMahan et al. 2013, "Ad click prediction: a view from the trenches"):
    `FTRL(params, lr=0.1, beta=1.0, l1=0, l2=0)`, `lr` its alpha.

    Rule, per element, with the sums z and n (starting at 0): sigma = (sqrt(n + g^2) -
    sqrt(n)) / lr; z += g - sigma * p; n += g^2; then p = 0 where |z| <= l1, else
    p = -(z - sign(z) * l1) / ((beta + sqrt(n)) / lr + l2). An L1 term keeps rarely useful
    weights at exactly zero; the rate of each element falls as its gradients add up (as
    Adagrad's). A value is its own rule's output from the first step on: start the weights
    at zero (a linear model's), as the paper does.

    Sparse rule: the same on the touched rows only (no step count is involved).

    >>> opt = fa.optim.FTRL([W, b], lr=0.1, l1=1.0, l2=1.0)
    """
    _kernel_spec = "ftrl", ("beta", "l1", "l2"), None
    _hyperparameter_names = ("beta", "l1", "l2")

    def __init__(self, params, lr=0.1, beta=1.0, l1=0.0, l2=0.0):
        who = "FTRL"
        self._lr = _non_negative(who, "lr", lr)
        if self._lr == 0:
            raise ValueError("FTRL: lr (alpha) must be positive, got 0")
        self.beta = _non_negative(who, "beta", beta)
        self.l1 = _non_negative(who, "l1", l1)
        self.l2 = _non_negative(who, "l2", l2)
        self.init_state(params, ("z", "n"))


cdef class Adamax(_MomentOptimizer):
    """Adamax: `Adamax(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0)`.

    Dense rule (torch.optim.Adamax): t += 1; d = g + weight_decay * p;
    m = beta1 * m + (1 - beta1) * d; u = max(beta2 * u, |d| + eps);
    p -= lr / (1 - beta1**t) * m / u.

    Sparse rule (lazy, as Adam's): t counts the steps at which the Parameter had
    any gradient; only the touched rows update m, u and p, with the bias correction
    of that shared t; untouched rows' m and u do not decay. Weight decay applies to
    the touched rows only.

    >>> opt = fa.optim.Adamax(model.parameters(), lr=2e-3)
    """
    _kernel_spec = "adamax", _MOMENTS, None

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0):
        self.set_moments(lr, betas, eps, weight_decay)
        self.init_state(params, ("exp_avg", "exp_inf"))


cdef class RAdam(_MomentOptimizer):
    """RAdam: `RAdam(params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    decoupled_weight_decay=False)`.

    Dense rule (torch.optim.RAdam): t += 1; d = g + weight_decay * p (or, decoupled,
    p *= 1 - lr * weight_decay); m and v as Adam's; with rho_inf = 2 / (1 - beta2) - 1
    and rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t): where rho_t > 5,
    p -= m / (1 - beta1**t) * lr * sqrt(1 - beta2**t) / (sqrt(v) + eps) * r_t
    (r_t the rectification term), else p -= m / (1 - beta1**t) * lr.

    Sparse rule (lazy, as Adam's): the touched rows only, with the coefficients of
    the Parameter's shared step count t; untouched rows' moments do not decay.
    Weight decay applies to the touched rows only.

    >>> opt = fa.optim.RAdam(model.parameters(), lr=1e-3)
    """
    _kernel_spec = "radam", _MOMENTS, "decoupled_weight_decay"
    _hyperparameter_names = _MOMENTS + ("decoupled_weight_decay",)

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 decoupled_weight_decay=False):
        self.set_moments(lr, betas, eps, weight_decay)
        self.decoupled_weight_decay = check_flag("RAdam", "decoupled_weight_decay", decoupled_weight_decay)
        self.init_state(params, ("exp_avg", "exp_avg_sq"))


# Below this, 1 - x is 1.0 exactly in double: NAdam's running product stops mattering.
cdef double NADAM_NEGLIGIBLE_PRODUCT = 2.0 ** -60


cdef class NAdam(_MomentOptimizer):
    """NAdam: `NAdam(params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
    momentum_decay=4e-3, decoupled_weight_decay=False)`.

    Dense rule (torch.optim.NAdam): t += 1; mu_t = beta1 * (1 - 0.5 * 0.96**(t *
    momentum_decay)) and P_t = mu_1 * ... * mu_t; d = g + weight_decay * p (or,
    decoupled, p *= 1 - lr * weight_decay); m and v as Adam's; with
    denom = sqrt(v / (1 - beta2**t)) + eps:
    p -= lr * (1 - mu_t) / (1 - P_t) * d / denom + lr * mu_{t+1} / (1 - P_t mu_{t+1}) * m / denom.
    P_t is kept in float64 (torch keeps it in its default dtype) as one table per
    optimizer indexed by t, which stops growing once P_t is below 2**-60 (from then
    on 1 - P_t is 1.0 exactly): about 41.6 / -ln(beta1) entries of 8 bytes.

    Sparse rule (lazy, as Adam's): the touched rows only, with the coefficients of
    the Parameter's shared step count t; untouched rows' moments do not decay.
    Weight decay applies to the touched rows only. On a GPU, P_t is a running
    product on the device (one float64 per Parameter).

    >>> opt = fa.optim.NAdam(model.parameters(), lr=2e-3)
    """
    _kernel_spec = "nadam", _MOMENTS, "decoupled_weight_decay"
    _hyperparameter_names = _MOMENTS + ("momentum_decay", "decoupled_weight_decay")

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0.0,
                 momentum_decay=4e-3, decoupled_weight_decay=False):
        who = "NAdam"
        self.set_moments(lr, betas, eps, weight_decay)
        self.momentum_decay = _non_negative(who, "momentum_decay", momentum_decay)
        self.decoupled_weight_decay = check_flag(who, "decoupled_weight_decay", decoupled_weight_decay)
        self.mu_products = np.ones(64, dtype=np.float64)
        self.products = <double*>cnp.PyArray_DATA(self.mu_products)
        self.capacity = 64
        self.n_products = 1
        self.init_state(params, ("exp_avg", "exp_avg_sq"))

    cdef double mu_product(self, long long t) except -1.0 nogil:
        """P_t = mu_1 * ... * mu_t, multiplied in the order torch does; past the table's
        end (once negligible) its last entry."""
        cdef Py_ssize_t k
        while self.n_products <= t and self.products[self.n_products - 1] >= NADAM_NEGLIGIBLE_PRODUCT:
            if self.n_products == self.capacity:
                with gil:       # the table doubles (rarely: it stops at about 41.6 / -ln(beta1))
                    self.mu_products = np.concatenate([self.mu_products, np.ones(self.capacity)])
                    self.products = <double*>cnp.PyArray_DATA(self.mu_products)
                    self.capacity *= 2
            k = self.n_products
            self.products[k] = self.products[k - 1] * fa_nadam_mu(self.beta1, k, self.momentum_decay)
            self.n_products += 1
        return self.products[min(t, self.n_products - 1)]

    cdef tuple device_kernel(self):
        # The device keeps P_t as a running product that nadam_product_step advances.
        return Optimizer.device_kernel(self) + ("nadam_product_step", (self.momentum_decay,))

    def load_state_dict(self, state):
        Optimizer.load_state_dict(self, state)
        if self._device_state is not None:
            self._device_state.set_running([self.mu_product(int(state[f"state.{i}.step"]))
                                      for i in range(self.n_params)])
        return self


# ---------------------------------------------------------------- clipping

cdef double norm_accumulate(const floating* g, Py_ssize_t n, double q, double acc) noexcept nogil:
    """acc combined with the n values: max |g| for q = inf, else acc + sum |g|**q."""
    cdef Py_ssize_t i
    cdef double x
    if isinf(q):
        for i in range(n):
            x = fabs(g[i])
            if x > acc or x != x:
                acc = x
    elif q == 2:
        for i in range(n):
            acc += <double>g[i] * g[i]
    elif q == 1:
        for i in range(n):
            acc += fabs(g[i])
    else:
        for i in range(n):
            acc += pow(fabs(g[i]), q)
    return acc


cdef void change_values(floating* g, Py_ssize_t n, double x, bint clamp) noexcept nogil:
    """The n values multiplied by x, or with `clamp`, clamped into [-x, x]."""
    cdef floating f = x, lo = -x
    cdef Py_ssize_t i
    if not clamp:
        for i in range(n):
            g[i] = g[i] * f
        return
    for i in range(n):
        if g[i] > f:
            g[i] = f
        elif g[i] < lo:
            g[i] = lo


cdef int change_grads(list plist, double x, bint clamp) except -1:
    """change_values on every gradient of the Parameters of plist (sparse: its touched rows)."""
    cdef Py_ssize_t k, n_spans, span_len
    cdef const int64_t* rows
    cdef Parameter p
    for p in plist:
        n_spans = grad_spans(p, &rows, &span_len)
        for k in range(n_spans):
            if p.f64:
                change_values(<double*>span_grad(p, k), span_len, x, clamp)
            else:
                change_values(<float*>span_grad(p, k), span_len, x, clamp)
    return 0


def clip_grad_norm(params, max_norm, norm_type=2.0):
    """Scale the gradients of `params` in place so that their joint norm is at
    most `max_norm`; returns the norm before clipping as a float.

    As torch.nn.utils.clip_grad_norm_: the norm of all gradients seen as one
    vector (`norm_type` > 0, or float('inf') for the largest absolute value);
    when max_norm / (norm + 1e-6) < 1 every gradient is multiplied by it.
    Sparse gradients count and scale only their touched rows; Parameters
    without a gradient are skipped. `params`: a Parameter or an iterable of them.

    >>> loss.backward()
    >>> norm = fa.optim.clip_grad_norm(model.parameters(), max_norm=1.0)
    >>> opt.step()
    """
    cdef list plist = _param_list(params, "clip_grad_norm", True, True)
    cdef double limit = _in_range("clip_grad_norm", "max_norm", max_norm, 0.0, INFINITY, False)
    cdef double q = check_number("clip_grad_norm", "norm_type", norm_type)
    cdef double acc = 0, total, factor
    cdef Py_ssize_t k, n_spans, span_len
    cdef const int64_t* rows
    cdef Parameter p
    if not q > 0:
        raise ValueError(f"clip_grad_norm: norm_type must be > 0 (or float('inf')), got {norm_type!r}")
    if _params_device(plist, "clip_grad_norm") is not None:
        return device_backend().clip_grad_norm(plist, limit, q)
    for p in plist:
        n_spans = grad_spans(p, &rows, &span_len)
        for k in range(n_spans):
            acc = (norm_accumulate(<const double*>span_grad(p, k), span_len, q, acc) if p.f64
                   else norm_accumulate(<const float*>span_grad(p, k), span_len, q, acc))
    if isinf(q) or q == 1:
        total = acc
    elif q == 2:
        total = sqrt(acc)
    else:
        total = pow(acc, 1 / q)
    factor = limit / (total + 1e-6)
    if factor < 1:
        change_grads(plist, factor, False)
    return total


def clip_grad_value(params, clip_value):
    """Clamp every gradient element of `params` into [-clip_value, clip_value], in place.

    As torch.nn.utils.clip_grad_value_. Sparse gradients clamp their touched
    rows; Parameters without a gradient are skipped. `params`: a Parameter or
    an iterable of them; `clip_value` >= 0.

    >>> fa.optim.clip_grad_value(model.parameters(), 0.5)
    """
    cdef list plist = _param_list(params, "clip_grad_value", True, True)
    cdef double limit = _in_range("clip_grad_value", "clip_value", clip_value, 0.0, INFINITY, False)
    if _params_device(plist, "clip_grad_value") is not None:
        device_backend().clip_grad_value(plist, limit)
        return
    change_grads(plist, limit, True)

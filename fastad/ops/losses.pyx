"""Loss functions with PyTorch's semantics.

Every loss takes `reduction`: "mean" (the default), "sum" or "none" (one
loss per element or per row, no reduction).

- Class-target losses (`cross_entropy`, `nll_loss`) take (B, C) scores and B
  integer class ids: an int array, fixed at build, or an `IndexInput`, read
  again at every forward. Ids are checked at build and at every forward; a
  target equal to `ignore_index` contributes nothing and "mean" divides by
  the number of targets not ignored.
- Pairwise losses (the pointwise losses of fastad/ops/manifest.py: `mse`,
  `huber`, `kl_div`, ...) compare two arrays of one shape elementwise; gradients
  flow to both sides. Each one's value and
  its two partial derivatives stand side by side in `fa_loss_value`,
  `fa_loss_da`, `fa_loss_db` of rules.h, which the CUDA kernels share.
- Composed losses (`margin_ranking`, `hinge_embedding`, `cosine_embedding`,
  `triplet_margin`, `multi_margin`) are built of existing nodes.
"""
import operator

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from libc.math cimport INFINITY
from cython cimport floating

from fastad._engine.graph cimport (Variable, OneInput, TwoInputs, Input, IndexInput, empty_buffer,
                              init_node, init_node_like, finish, as_variable, same_dtype,
                              require_float, backend_of, check_flag, check_number, check_above,
                              keep_data)
from fastad._engine.loops cimport vec_zero, store_value
from fastad.ops.pointwise_loss cimport (RED_NONE, RED_MEAN, RED_SUM, reduction_code, reduction_name,
                                       reduction_scale, keeps_exp, loss_forward, loss_backward)
from fastad.ops.scalar cimport s_exp, s_log
from fastad.ops.op_codes cimport *
from fastad.ops.elementwise import add, sub, mul, relu, sqrt, square, abs as elementwise_abs
from fastad.ops.elementwise import pow as elementwise_pow
from fastad.ops.reduction import sum as reduce_sum, mean as reduce_mean
from fastad.ops.sparse import take

cnp.import_array()


# ------------------------------------------------------ class-target losses

cdef Py_ssize_t first_bad_target(const int64_t* t, Py_ssize_t n, Py_ssize_t classes,
                                 int64_t ignore) noexcept nogil:
    """The position of the first id outside [0, classes) that is not `ignore`, or -1."""
    cdef Py_ssize_t b
    for b in range(n):
        if (t[b] < 0 or t[b] >= classes) and t[b] != ignore:
            return b
    return -1


cdef Py_ssize_t count_kept(const int64_t* t, Py_ssize_t n, int64_t ignore) noexcept nogil:
    cdef Py_ssize_t b, kept = 0
    for b in range(n):
        kept += t[b] != ignore
    return kept


cdef object bad_target_error(str op, object target, Py_ssize_t position, Py_ssize_t classes,
                             int64_t ignore):
    return IndexError(f"{op}: target {target} at position {position} is out of range for "
                      f"{classes} classes (expected 0 <= target < {classes}, or "
                      f"ignore_index={ignore})")


def check_target_ids(str op, ids, Py_ssize_t classes, int64_t ignore):
    """Raise IndexError for the first id of the 1-D array `ids` outside [0, classes)
    that is not `ignore`."""
    bad = np.flatnonzero((ids != ignore) & ((ids < 0) | (ids >= classes)))
    if bad.size:
        raise bad_target_error(op, ids[bad[0]], bad[0], classes, ignore)


@cython.no_gc
cdef class ClassTargetLoss(OneInput):
    """Shared by cross_entropy and nll_loss: scores x (B, C) and B class ids."""
    cdef Variable source            # the IndexInput whose ids each forward reads, or None
    cdef cnp.ndarray targets        # int64 (B,): the ids of the last good forward
    cdef int64_t* tgt
    cdef Py_ssize_t batch, classes
    cdef int64_t ignore_index
    cdef int reduction
    cdef Py_ssize_t gy_step         # 1: one output gradient per row ("none"), 0: one in all
    cdef double scale               # the factor applied to the summed loss
    cdef bint failed                # the last forward stopped at a bad id: no backward

    cdef int load_targets(self) except -1 nogil:
        """Check the ids (an IndexInput's may have changed) and keep them for the backward."""
        cdef const int64_t* ids = self.tgt if self.source is None else <int64_t*>self.source.val_ptr
        cdef Py_ssize_t bad = first_bad_target(ids, self.batch, self.classes, self.ignore_index)
        if bad >= 0:
            self.failed = True
            with gil:
                raise bad_target_error(self.op_name, ids[bad], bad, self.classes, self.ignore_index)
        if self.source is not None:
            memcpy(self.tgt, ids, self.batch * sizeof(int64_t))
        self.failed = False
        if self.reduction == RED_MEAN:       # torch: the mean of nothing is NaN
            self.scale = reduction_scale(RED_MEAN,
                                         count_kept(self.tgt, self.batch, self.ignore_index))
        return 0

    cdef int store_total(self, double total) except -1 nogil:
        """A reduced loss's output: the summed losses of the kept rows times the scale."""
        if self.reduction != RED_NONE:
            store_value(self.val_ptr, total * self.scale, self.f64)
        return 0

    cdef int run_backward(self) except -1 nogil:
        """OneInput's, once the last forward is known to have got through."""
        if self.failed and self.x.requires_grad:
            with gil:
                raise RuntimeError(f"{self.op_name}: the last forward stopped at an out-of-range "
                                   f"target; set valid targets and call forward() before backward()")
        return OneInput.run_backward(self)


cdef class ClassTargets:
    """The checked arguments of cross_entropy or nll_loss (the CPU node and the
    device op, fastad/cuda/ops/losses.py, both start from these)."""
    cdef readonly Variable x
    cdef readonly int reduction
    cdef readonly int64_t ignore_index
    cdef readonly Py_ssize_t batch, classes
    cdef readonly tuple out_shape
    cdef readonly object source      # the IndexInput read at every forward, or None
    cdef readonly object ids         # else the fixed targets: flat int64, range-checked

    @property
    def reduction_name(self):
        return reduction_name(self.reduction)


cdef ClassTargets check_class_targets(str op, str argname, object scores, object targets,
                                      object reduction, object ignore_index):
    cdef ClassTargets c = ClassTargets.__new__(ClassTargets)
    c.x = require_float(op, scores, argname)
    c.reduction = reduction_code(op, reduction)
    try:
        c.ignore_index = operator.index(ignore_index)
    except TypeError:
        raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}") from None
    shape = c.x._shape
    if len(shape) == 2:
        c.batch, c.classes = shape
        target_shape = (c.batch,)
    elif len(shape) == 1:
        c.batch, c.classes = 1, shape[0]
        target_shape = ()
    else:
        raise ValueError(f"{op}: {argname} must have shape (batch, classes) or (classes,), "
                         f"got {shape}")
    if isinstance(targets, IndexInput):
        c.source = targets
        ids = None
        got_shape = targets.shape
    elif isinstance(targets, Variable):
        raise TypeError(f"{op}: targets must be integer class ids (an int array or an "
                        f"IndexInput), got a float Variable of shape {targets.shape}")
    else:
        ids = np.asarray(targets)
        if ids.dtype.kind not in "iu" and not (ids.size == 0 and ids.dtype.kind == "f"):
            raise TypeError(f"{op}: targets must be integer class ids, got dtype {ids.dtype}")
        got_shape = ids.shape
    if got_shape != target_shape:
        raise ValueError(f"{op}: targets have shape {got_shape}, expected {target_shape} "
                         f"for {argname} of shape {shape}")
    if ids is not None:
        ids = ids.reshape(-1)
        check_target_ids(op, ids, c.classes, c.ignore_index)   # before the cast, which wraps huge ids
        c.ids = ids.astype(np.int64)
    c.out_shape = target_shape if c.reduction == RED_NONE else ()
    return c


cdef int setup_class_targets(ClassTargetLoss node, str op, ClassTargets c) except -1:
    """Wire the node to the checked arguments and give it its target buffer."""
    node.x = c.x
    node.source = c.source
    node.reduction = c.reduction
    node.gy_step = 1 if c.reduction == RED_NONE else 0
    node.ignore_index = c.ignore_index
    node.batch, node.classes = c.batch, c.classes
    node.targets = empty_buffer((node.batch,), np.int64)
    node.tgt = <int64_t*>cnp.PyArray_DATA(node.targets)
    if c.ids is not None:
        node.targets[:] = c.ids
    init_node(node, op, (c.x,) if c.source is None else (c.x, c.source), c.out_shape, c.x.f64)
    node.scale = 1.0
    return 0


@cython.no_gc
cdef class CrossEntropy(ClassTargetLoss):
    cdef double smoothing
    cdef cnp.ndarray lse            # (B,) per-row log-sum-exp from the forward
    cdef char* lse_ptr

    cdef int run_forward(self) except -1 nogil:
        self.load_targets()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """The rows' losses (into y for reduction "none"; 0 for ignored rows), reduced.

        loss = lse - (1 - smoothing) * x[t] - smoothing * mean(x), lse the row's
        log-sum-exp (kept for the backward), computed after subtracting the row max.
        """
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef floating* lse = <floating*>self.lse_ptr
        cdef floating* losses = y if self.reduction == RED_NONE else NULL
        cdef const int64_t* t = self.tgt
        cdef int64_t ignore = self.ignore_index
        cdef Py_ssize_t b, c, classes = self.classes
        cdef double total = 0
        cdef floating m, s, loss, row_sum, smoothing = <floating>self.smoothing
        cdef const floating* xr
        for b in range(self.batch):
            if t[b] == ignore:
                if losses != NULL:
                    losses[b] = 0
                continue
            xr = x + b * classes
            m = -INFINITY
            for c in range(classes):
                if xr[c] > m or xr[c] != xr[c]:
                    m = xr[c]
            s = 0
            for c in range(classes):
                s += s_exp(xr[c] - m)
            lse[b] = m + s_log(s)
            loss = lse[b] - (1 - smoothing) * xr[t[b]]
            if smoothing != 0:
                row_sum = 0
                for c in range(classes):
                    row_sum += xr[c]
                loss -= smoothing * row_sum / classes
            total += loss
            if losses != NULL:
                losses[b] = loss
        return self.store_total(total)

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        """gx row b = (softmax(x_b) - target distribution) * gy[b * gy_step] * scale."""
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef const floating* lse = <floating*>self.lse_ptr
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef const int64_t* t = self.tgt
        cdef int64_t ignore = self.ignore_index
        cdef Py_ssize_t b, c, classes = self.classes, gy_step = self.gy_step
        cdef floating smoothing = <floating>self.smoothing, scale = <floating>self.scale
        cdef floating g, off = smoothing / classes if classes else 0
        cdef const floating* xr
        cdef floating* gr
        for b in range(self.batch):
            gr = gx + b * classes
            if t[b] == ignore:
                if not add:
                    vec_zero(gr, classes)
                continue
            xr = x + b * classes
            g = gy[b * gy_step] * scale
            if add:
                for c in range(classes):
                    gr[c] += g * (s_exp(xr[c] - lse[b]) - off)
            else:
                for c in range(classes):
                    gr[c] = g * (s_exp(xr[c] - lse[b]) - off)
            gr[t[b]] -= g * (1 - smoothing)
        return 0


def cross_entropy(logits, targets, reduction="mean", ignore_index=-100, label_smoothing=0.0):
    """Softmax cross-entropy of `logits` (B, C) against integer class ids `targets` (B,).

    As torch.nn.functional.cross_entropy: fused and stable (log-softmax inside).
    `targets` is an int array-like (fixed at build) or an `IndexInput` (read at
    every forward); an id outside [0, C) that is not `ignore_index` raises
    IndexError, at build or at forward. Rows whose target is `ignore_index`
    add nothing, and "mean" divides by the rows not ignored (NaN if none).
    `label_smoothing` in [0, 1] mixes the one-hot target with the uniform
    distribution. Logits of shape (C,) take a 0-d target. Output: () for
    "mean"/"sum", the targets' shape for "none".

    >>> logits = fa.Parameter(np.zeros((2, 3)))
    >>> fa.nn.cross_entropy(logits, [0, 2]).item()       # log(3)
    1.0986...
    """
    cdef double smoothing = check_number("cross_entropy", "label_smoothing", label_smoothing)
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    cdef ClassTargets checked = check_class_targets("cross_entropy", "logits", logits, targets,
                                                    reduction, ignore_index)
    if (dev := backend_of(checked.x)) is not None:
        return dev.cross_entropy(checked, smoothing)
    cdef CrossEntropy node = CrossEntropy.__new__(CrossEntropy)
    node.smoothing = smoothing
    setup_class_targets(node, "cross_entropy", checked)
    node.lse = keep_data(empty_buffer((node.batch,), np.float64 if node.x.f64 else np.float32), &node.lse_ptr)
    return finish(node)


@cython.no_gc
cdef class NLLLoss(ClassTargetLoss):

    cdef int run_forward(self) except -1 nogil:
        self.load_targets()
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """-x[b, t[b]] for each row not ignored (into y for reduction "none"), reduced."""
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef floating* losses = y if self.reduction == RED_NONE else NULL
        cdef const int64_t* t = self.tgt
        cdef int64_t ignore = self.ignore_index
        cdef Py_ssize_t b, classes = self.classes
        cdef double total = 0
        cdef floating loss
        for b in range(self.batch):
            loss = 0 if t[b] == ignore else -x[b * classes + t[b]]
            total += loss
            if losses != NULL:
                losses[b] = loss
        return self.store_total(total)

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef const int64_t* t = self.tgt
        cdef int64_t ignore = self.ignore_index
        cdef Py_ssize_t b, classes = self.classes, gy_step = self.gy_step
        cdef floating scale = <floating>self.scale
        if not add:
            vec_zero(gx, self.batch * classes)
        for b in range(self.batch):
            if t[b] != ignore:
                gx[b * classes + t[b]] -= gy[b * gy_step] * scale
        return 0


def nll_loss(log_probs, targets, reduction="mean", ignore_index=-100):
    """Negative log-likelihood: -log_probs[b, targets[b]], as torch.nn.functional.nll_loss.

    `log_probs` (B, C) (typically a `log_softmax`) or (C,) with a 0-d target;
    `targets`, `ignore_index` and the output shape as in `cross_entropy`.

    >>> lp = fa.log_softmax(fa.Parameter(np.zeros((2, 4))))
    >>> fa.nn.nll_loss(lp, fa.IndexInput([1, 3])).item()    # log(4)
    1.3862...
    """
    cdef ClassTargets checked = check_class_targets("nll_loss", "log_probs", log_probs, targets,
                                                    reduction, ignore_index)
    if (dev := backend_of(checked.x)) is not None:
        return dev.nll_loss(checked)
    cdef NLLLoss node = NLLLoss.__new__(NLLLoss)
    setup_class_targets(node, "nll_loss", checked)
    return finish(node)


# ------------------------------------------------------------ pairwise losses

@cython.no_gc
cdef class PairLoss(TwoInputs):
    cdef int code, reduction
    cdef double delta, scale
    cdef object exp_array         # P_BCE: exp(-|a|) from the forward, which the backward reuses
    cdef char* exp_of_a

    cdef int run_forward(self) except -1 nogil:
        cdef bint each = self.reduction == RED_NONE
        cdef double total = loss_forward(self.code, self.a.val_ptr, self.b.val_ptr, self.a.size,
                                         self.delta, self.exp_of_a, self.val_ptr if each else NULL,
                                         self.f64)
        if not each:
            store_value(self.val_ptr, total * self.scale, self.f64)
        return 0

    cdef int _gradient(self, char* g, bint to_a, bint add) except -1 nogil:
        cdef Py_ssize_t gy_step = 1 if self.reduction == RED_NONE else 0
        loss_backward(self.code, to_a, self.a.val_ptr, self.b.val_ptr, self.exp_of_a, self.a.size,
                      self.delta, self.grad_ptr, gy_step, self.scale, g, add, self.f64)
        return 0


cdef Variable _spread(Variable x, tuple shape):
    """x broadcast to `shape`: itself, or x plus zeros of that shape (whose gradient
    sums back over the broadcast axes)."""
    return x if x._shape == shape else add(x, np.zeros(shape))


cdef Variable _pair_loss(int code, str aname, object a, str bname, object b, object reduction,
                         double delta=0, str who=None, bint broadcast=False):
    """The pointwise loss `code` of a and b, reduced; errors name `who` (else the loss).
    With `broadcast`, operands of different shapes are spread to their broadcast shape
    first (as PyTorch broadcasts that loss's operands); else they must be equal."""
    cdef str name = who or _PAIR_NAMES[code]
    cdef Variable va = require_float(name, a, aname)
    cdef Variable vb = require_float(name, as_variable(b, va), bname)
    same_dtype(name, va, vb)
    if va._shape != vb._shape:
        try:
            shape = np.broadcast_shapes(va._shape, vb._shape) if broadcast else None
        except ValueError:
            shape = None
        if shape is None:
            raise ValueError(f"{name}: {aname} has shape {va._shape} but {bname} has shape "
                             f"{vb._shape}; they must {'broadcast' if broadcast else 'be equal'}")
        va, vb = _spread(va, shape), _spread(vb, shape)
    cdef int red = reduction_code(name, reduction)
    if (dev := backend_of(va, vb)) is not None:
        return dev.pair_loss(_PAIR_NAMES[code], va, vb, reduction, delta)
    name = _PAIR_NAMES[code]
    cdef PairLoss node = PairLoss.__new__(PairLoss)
    node.code = code
    node.reduction = red
    node.a = va
    node.b = vb
    node.delta = delta
    node.scale = reduction_scale(red, va.size)
    if keeps_exp(code):
        node.exp_array = empty_buffer((va.size,), np.float64 if va.f64 else np.float32)
        node.exp_of_a = <char*>cnp.PyArray_DATA(node.exp_array)
    if node.reduction == RED_NONE:
        init_node_like(node, name, (va, vb), va)
    else:
        init_node(node, name, (va, vb), (), va.f64)
    return finish(node)


def bce_with_logits(logits, targets, reduction="mean"):
    """Binary cross-entropy of sigmoid(logits) against `targets` in [0, 1], elementwise.

    As torch.nn.functional.binary_cross_entropy_with_logits: computed stably
    as max(x, 0) - x*t + log1p(exp(-|x|)). `targets` is a Variable (it gets a
    gradient when it needs one) or an array, of the same shape as `logits`.
    Output: () for "mean"/"sum", the logits' shape for "none".

    >>> fa.nn.bce_with_logits(fa.Parameter([0.0, 0.0]), [1.0, 0.0]).item()    # log(2)
    0.6931...
    """
    return _pair_loss(P_BCE, "logits", logits, "targets", targets, reduction)


# The functions of the op manifest's plain pointwise losses, and `_PAIR_NAMES` (code ->
# name, the device path's name): written by fastad/ops/generate.py.
include "losses_ops.pxi"


def huber(pred, target, reduction="mean", delta=1.0):
    """Huber loss, elementwise; as torch.nn.functional.huber_loss.

    With d = pred - target: 0.5 * d**2 where |d| < delta, else
    delta * (|d| - 0.5 * delta). `delta` must be > 0; shapes and output as in
    `mse`.

    >>> fa.nn.huber(fa.Parameter([0.5, 3.0]), [0.0, 0.0], reduction="none").value
    array([0.125, 2.5  ], dtype=float32)
    """
    cdef double d = check_above("huber", "delta", delta, 0)
    return _pair_loss(P_HUBER, "pred", pred, "target", target, reduction, d)


# ------------------------------------------------ more losses, PyTorch's semantics
# The pointwise ones are entries of the pointwise-loss table of rules.h (one PairLoss
# node, and on a GPU the pointwise-loss kernels); the others are composed of existing
# nodes (each one pass over its operands), so replay, broadcasting and the GPU come
# with them.

cdef object _host_values(object x):
    """The values of a Variable or an array-like, as a host numpy array (for checks at build)."""
    return x.numpy() if isinstance(x, Variable) else np.asarray(x)


cdef int _check_signs(str op, str argname, object y) except -1:
    """The targets of the embedding losses: every value must be 1 or -1."""
    values = _host_values(y)
    bad = np.flatnonzero((values != 1) & (values != -1))
    if bad.size:
        raise ValueError(f"{op}: {argname} must hold only 1 and -1, got {values.reshape(-1)[bad[0]].item()!r} "
                         f"at flat position {bad[0]}")
    return 0


cdef object _reduced(str op, object losses, object reduction):
    """A composed loss's per-element `losses`, reduced as `reduction` says (as PyTorch,
    the mean of nothing is NaN)."""
    cdef int red = reduction_code(op, reduction)
    if red == RED_MEAN:
        return reduce_mean(losses)
    if red == RED_SUM:
        return reduce_sum(losses)
    return losses


cdef object _signed_weights(object y):
    """(1 + y) / 2 and (1 - y) / 2: the masks of the targets 1 and -1 (y holds only +-1)."""
    if isinstance(y, Variable):
        return mul(add(y, 1.0), 0.5), mul(sub(1.0, y), 0.5)
    values = np.asarray(y, dtype=np.float64)
    return (1 + values) / 2, (1 - values) / 2


def kl_div(input, target, reduction="mean", log_target=False):
    """Kullback-Leibler divergence, as torch.nn.functional.kl_div: `input` holds
    log-probabilities, `target` probabilities (or log-probabilities with `log_target=True`).

    Elementwise target * (log(target) - input) (0 where target is 0), or
    exp(target) * (target - input) for log targets. `reduction`: "mean" (over all
    elements, as PyTorch), "batchmean" (the sum divided by the first axis, the
    mathematically right KL), "sum" or "none". Gradients flow to both sides; `target`
    is a Variable or an array; input and target broadcast, as in PyTorch.

    >>> lp = fa.log_softmax(fa.Parameter(np.zeros((2, 4))))
    >>> fa.nn.kl_div(lp, np.full((2, 4), 0.25), reduction="batchmean").item()
    0.0
    """
    code = P_KL_DIV_LOG_TARGET if check_flag("kl_div", "log_target", log_target) else P_KL_DIV
    if reduction != "batchmean":
        return _pair_loss(code, "input", input, "target", target, reduction, 0.0, "kl_div", True)
    total = _pair_loss(code, "input", input, "target", target, "sum", 0.0, "kl_div", True)
    shape = (<Variable>input)._shape
    return mul(total, 1.0 / shape[0]) if shape else total


def smooth_l1(input, target, reduction="mean", beta=1.0):
    """Smooth L1 loss, elementwise, as torch.nn.functional.smooth_l1_loss.

    With d = |input - target|: 0.5 * d**2 / beta where d < beta, else d - 0.5 * beta;
    `beta` >= 0 (0 gives the L1 loss). input and target broadcast (PyTorch warns
    and broadcasts); output: () for "mean"/"sum", the broadcast shape for "none".

    >>> fa.nn.smooth_l1(fa.Parameter([0.5, 3.0]), [0.0, 0.0], reduction="none").value
    array([0.125, 2.5  ], dtype=float32)
    """
    cdef double b = check_above("smooth_l1", "beta", beta, 0, or_equal=True)
    return _pair_loss(P_SMOOTH_L1, "input", input, "target", target, reduction, b, None, True)


def binary_cross_entropy(input, target, weight=None, reduction="mean"):
    """Binary cross-entropy of probabilities `input` against `target`, both in [0, 1],
    as torch.nn.functional.binary_cross_entropy.

    Elementwise -weight * (target * log(input) + (1 - target) * log(1 - input)), each
    log floored at -100 as PyTorch does (so input 0 or 1 gives a finite loss). The
    gradient with respect to input is (input - target) / max(input * (1 - input), 1e-12).
    `target` is a Variable or an array of input's shape; `weight` (optional) an array
    or Variable that broadcasts to input's shape. The values of input and target are
    checked at build (a ValueError outside [0, 1]); values that leave [0, 1] later give
    NaN. For logits use `bce_with_logits`, which is stabler.

    >>> fa.nn.binary_cross_entropy(fa.Parameter([0.5, 0.5]), [1.0, 0.0]).item()    # log(2)
    0.6931...
    """
    cdef str op = "binary_cross_entropy"
    require_float(op, input, "input")
    for argname, values in (("input", _host_values(input)), ("target", _host_values(target))):
        if values.dtype.kind in "biuf" and not np.all((values >= 0) & (values <= 1)):
            raise ValueError(f"{op}: every element of {argname} must be in [0, 1], got values "
                             f"from {values.min()!r} to {values.max()!r}")
    if weight is None:
        return _pair_loss(P_BINARY_CROSS_ENTROPY, "input", input, "target", target, reduction)
    reduction_code(op, reduction)
    shape = (<Variable>input)._shape
    weight_shape = weight.shape if isinstance(weight, Variable) else np.shape(weight)
    try:
        fits = np.broadcast_shapes(shape, weight_shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{op}: weight has shape {weight_shape}, which does not broadcast to "
                         f"input's shape {shape}")
    losses = _pair_loss(P_BINARY_CROSS_ENTROPY, "input", input, "target", target, "none")
    return _reduced(op, mul(losses, weight), reduction)


def poisson_nll(input, target, log_input=True, full=False, eps=1e-8, reduction="mean"):
    """Poisson negative log-likelihood, as torch.nn.functional.poisson_nll_loss.

    With `log_input` (the default) `input` is the log-rate: exp(input) - target * input;
    else the rate: input - target * log(input + eps). `full=True` adds Stirling's
    approximation of log(target!) where target > 1. `eps` > 0. input and target
    broadcast; output: () for "mean"/"sum", the broadcast shape for "none".

    >>> fa.nn.poisson_nll(fa.Parameter([0.0, 0.0]), [1.0, 2.0]).item()     # exp(0) - 0
    1.0
    """
    cdef str op = "poisson_nll"
    cdef double e = check_above(op, "eps", eps, 0)
    full = check_flag(op, "full", full)
    if check_flag(op, "log_input", log_input):
        code = P_POISSON_NLL_FULL if full else P_POISSON_NLL
    else:
        code = P_POISSON_NLL_RATE_FULL if full else P_POISSON_NLL_RATE
    return _pair_loss(code, "input", input, "target", target, reduction, e, op, True)


def gaussian_nll(input, target, var, full=False, eps=1e-6, reduction="mean"):
    """Gaussian negative log-likelihood, as torch.nn.functional.gaussian_nll_loss.

    Elementwise 0.5 * (log(v) + (input - target)**2 / v), v = max(var, eps) (the
    gradient with respect to var passes that floor unchanged, as PyTorch's), plus
    0.5 * log(2 pi) with `full=True`. `input` and `target` broadcast; `var` has
    input's shape, or input's shape without its last axis, or with a last axis of 1
    (one variance per row). var must be >= 0 (checked at build); `eps` > 0. Output:
    () for "mean"/"sum", the broadcast shape of input and target for "none".

    >>> fa.nn.gaussian_nll(fa.Parameter([1.0, 2.0]), [1.0, 2.0], [1.0, 1.0]).item()
    0.0
    """
    cdef str op = "gaussian_nll"
    cdef Variable x = require_float(op, input, "input")
    cdef double e = check_above(op, "eps", eps, 0)
    check_flag(op, "full", full)
    reduction_code(op, reduction)
    cdef Variable v = require_float(op, as_variable(var, x), "var")
    shape, var_shape = x._shape, v._shape
    row_shape = shape[:len(shape) - 1] if shape else None     # input's shape without its last axis
    if var_shape != shape:
        if var_shape == row_shape:
            v = v.reshape(var_shape + (1,))
        elif row_shape is None or var_shape != row_shape + (1,):
            raise ValueError(f"{op}: var has shape {var_shape}; expected input's shape {shape}"
                             + (f", {row_shape} or {row_shape + (1,)}" if row_shape is not None else ""))
    if np.any(_host_values(v) < 0):
        raise ValueError(f"{op}: var has negative entries")
    diff = sub(x, target)
    v = _spread(v, diff.shape)                  # one variance per row: spread along it
    loss = _pair_loss(P_GAUSSIAN_NLL, "input - target", diff, "var", v, reduction, e, op)
    if full:
        constant = 0.5 * np.log(2 * np.pi)
        loss = add(loss, constant * diff.size if reduction == "sum" else constant)
    return loss


def margin_ranking(input1, input2, target, margin=0.0, reduction="mean"):
    """Margin ranking loss max(0, -target * (input1 - input2) + margin), as
    torch.nn.functional.margin_ranking_loss.

    `target` (a Variable or an array; 1 ranks input1 higher, -1 input2) and the
    inputs broadcast; the inputs must have one number of axes, as PyTorch requires.
    Output: () for "mean"/"sum", the broadcast shape for "none".

    >>> fa.nn.margin_ranking(fa.Parameter([1.0, 0.0]), fa.Parameter([0.0, 1.0]), [1, 1], margin=0.5).item()
    0.75
    """
    cdef str op = "margin_ranking"
    require_float(op, input1, "input1")
    require_float(op, input2, "input2")
    cdef double m = check_number(op, "margin", margin)
    reduction_code(op, reduction)
    if len(input1.shape) != len(input2.shape):
        raise ValueError(f"{op}: input1 has shape {input1.shape} and input2 {input2.shape}; "
                         f"they must have the same number of axes")
    losses = relu(sub(m, mul(sub(input1, input2), target)))
    return _reduced(op, losses, reduction)


def hinge_embedding(input, target, margin=1.0, reduction="mean"):
    """Hinge embedding loss, as torch.nn.functional.hinge_embedding_loss: input where
    target is 1, max(0, margin - input) where target is -1.

    `input` (typically distances) and `target` (a Variable or an array holding only
    1 and -1, checked at build) broadcast. Output: () for "mean"/"sum", the broadcast
    shape for "none".

    >>> fa.nn.hinge_embedding(fa.Parameter([0.3, 0.2]), [1, -1]).item()    # (0.3 + 0.8) / 2
    0.55...
    """
    cdef str op = "hinge_embedding"
    require_float(op, input, "input")
    cdef double m = check_number(op, "margin", margin)
    reduction_code(op, reduction)
    _check_signs(op, "target", target)
    positive, negative = _signed_weights(target)
    losses = add(mul(input, positive), mul(relu(sub(m, input)), negative))
    return _reduced(op, losses, reduction)


def cosine_embedding(input1, input2, target, margin=0.0, reduction="mean"):
    """Cosine embedding loss, as torch.nn.functional.cosine_embedding_loss: 1 - cos(x1, x2)
    where target is 1, max(0, cos(x1, x2) - margin) where target is -1.

    `input1`, `input2`: (B, D) (or (D,) with a 0-d target); the cosine is taken along
    the last axis as PyTorch does (each squared norm plus 1e-12). `target`: B values,
    each 1 or -1 (a Variable or an array, checked at build); `margin` in [-1, 1].
    Output: () for "mean"/"sum", (B,) for "none".

    >>> a = fa.Parameter([[1.0, 0.0]])
    >>> fa.nn.cosine_embedding(a, fa.Parameter([[0.0, 1.0]]), [1]).item()     # 1 - cos(90 deg)
    1.0
    """
    cdef str op = "cosine_embedding"
    require_float(op, input1, "input1")
    require_float(op, input2, "input2")
    cdef double m = check_number(op, "margin", margin)
    if not -1 <= m <= 1:
        raise ValueError(f"{op}: margin must be in [-1, 1], got {margin!r}")
    reduction_code(op, reduction)
    shape = input1.shape
    if shape != input2.shape or len(shape) not in (1, 2):
        raise ValueError(f"{op}: input1 and input2 must share a shape (B, D) or (D,), got "
                         f"{shape} and {input2.shape}")
    target_shape = target.shape if isinstance(target, Variable) else np.shape(target)
    if target_shape != shape[:len(shape) - 1]:
        raise ValueError(f"{op}: target has shape {target_shape}, expected "
                         f"{shape[:len(shape) - 1]} for inputs of shape {shape}")
    _check_signs(op, "target", target)
    dot = reduce_sum(mul(input1, input2), axis=-1)
    norms = mul(add(reduce_sum(square(input1), axis=-1), 1e-12),
                add(reduce_sum(square(input2), axis=-1), 1e-12))
    cos = mul(dot, elementwise_pow(norms, -0.5))
    positive, negative = _signed_weights(target)
    losses = add(mul(sub(1.0, cos), positive), mul(relu(sub(cos, m)), negative))
    return _reduced(op, losses, reduction)


cdef object _pairwise_distance(object a, object b, double p, double eps):
    """||a - b + eps||_p along the last axis (torch.nn.functional.pairwise_distance)."""
    diff = add(sub(a, b), eps)
    if p == 2:
        return sqrt(reduce_sum(square(diff), axis=-1))
    if p == 1:
        return reduce_sum(elementwise_abs(diff), axis=-1)
    return elementwise_pow(reduce_sum(elementwise_pow(elementwise_abs(diff), p), axis=-1), 1.0 / p)


def triplet_margin(anchor, positive, negative, margin=1.0, p=2.0, eps=1e-6, swap=False,
                   reduction="mean"):
    """Triplet margin loss max(0, d(anchor, positive) - d(anchor, negative) + margin), as
    torch.nn.functional.triplet_margin_loss.

    d(x, y) = ||x - y + eps||_p along the last axis (p > 0; 2 by default). With
    `swap`, d(anchor, negative) is replaced by d(positive, negative) where that is
    smaller. The three inputs have one number of axes (1 or 2) and broadcast;
    `margin` > 0. Output: () for "mean"/"sum", the batch shape for "none".

    >>> a = fa.Parameter([[0.0, 0.0]])
    >>> fa.nn.triplet_margin(a, fa.Parameter([[0.0, 1.0]]), fa.Parameter([[0.0, 3.0]])).item()
    0.0
    """
    cdef str op = "triplet_margin"
    for argname, x in (("anchor", anchor), ("positive", positive), ("negative", negative)):
        require_float(op, x, argname)
    cdef double m = check_above(op, "margin", margin, 0)
    cdef double q = check_number(op, "p", p)
    cdef double e = check_number(op, "eps", eps)
    if not 0 < q < INFINITY:
        raise ValueError(f"{op}: p must be > 0 and finite, got {p!r}")
    check_flag(op, "swap", swap)
    reduction_code(op, reduction)
    dims = {len(anchor.shape), len(positive.shape), len(negative.shape)}
    if len(dims) != 1 or dims.pop() not in (1, 2):
        raise ValueError(f"{op}: anchor, positive and negative must all be 1-D or all 2-D, got "
                         f"shapes {anchor.shape}, {positive.shape} and {negative.shape}")
    d_pos = _pairwise_distance(anchor, positive, q, e)
    d_neg = _pairwise_distance(anchor, negative, q, e)
    if swap:
        d_swap = _pairwise_distance(positive, negative, q, e)
        d_neg = sub(d_neg, relu(sub(d_neg, d_swap)))         # min(d_neg, d_swap)
    return _reduced(op, relu(add(sub(d_pos, d_neg), m)), reduction)


def multi_margin(input, target, p=1, margin=1.0, weight=None, reduction="mean"):
    """Multi-class hinge loss, as torch.nn.functional.multi_margin_loss: for each row,
    sum over the classes j != target of max(0, margin - x[target] + x[j])**p, divided
    by the number of classes C.

    `input` (B, C) (or (C,) with a 0-d target); `target`: B class ids, an int array
    or an `IndexInput` (checked at every forward, IndexError outside [0, C)); `p` 1
    or 2; `weight` (optional, C numbers) scales each row's terms by weight[target].
    Output: () for "mean"/"sum", (B,) for "none".

    >>> fa.nn.multi_margin(fa.Parameter([[0.1, 0.2, 0.4]]), [2]).item()   # (0.7 + 0.8) / 3
    0.5
    """
    cdef str op = "multi_margin"
    cdef ClassTargets c = check_class_targets(op, "input", input, target, reduction, -100)
    if c.ignore_index == -100 and c.ids is not None and np.any(c.ids == -100):
        raise IndexError(f"{op}: target -100 is out of range for {c.classes} classes")
    if isinstance(p, bool) or p not in (1, 2):
        raise ValueError(f"{op}: p must be 1 or 2, got {p!r}")
    cdef double m = check_number(op, "margin", margin)
    x = c.x
    dtype, device = x.dtype, x.device
    ids = c.source if c.source is not None else IndexInput(c.ids, device=device)
    identity = np.eye(c.classes)
    one_hot = take(Input(identity, dtype=dtype, device=device), ids)    # (B, C), or (C,)
    others = take(Input(1 - identity, dtype=dtype, device=device), ids)
    chosen = reduce_sum(mul(x, one_hot), axis=-1, keepdims=True)
    terms = mul(relu(add(sub(x, chosen), m)), others)
    if p == 2:
        terms = square(terms)
    if weight is not None:
        w = np.asarray(_host_values(weight), dtype=np.float64)
        if w.shape != (c.classes,):
            raise ValueError(f"{op}: weight has shape {w.shape}, expected ({c.classes},)")
        terms = mul(terms, take(Input(w.reshape(c.classes, 1), dtype=dtype, device=device), ids))
    losses = mul(reduce_sum(terms, axis=-1), 1.0 / c.classes)
    if c.reduction == RED_NONE and losses.shape != c.out_shape:
        losses = losses.reshape(c.out_shape)        # a (C,) input with a 0-d array target
    return _reduced(op, losses, reduction)

"""Loss functions with PyTorch's semantics.

Every loss takes `reduction`: "mean" (the default), "sum" or "none" (one
loss per element or per row, no reduction).

- Class-target losses (`cross_entropy`, `nll_loss`) take (B, C) scores and B
  integer class ids: an int array, fixed at build, or an `IndexInput`, read
  again at every forward. Ids are checked at build and at every forward; a
  target equal to `ignore_index` contributes nothing and "mean" divides by
  the number of targets not ignored.
- Pairwise losses (`bce_with_logits`, `mse`, `huber`) compare two arrays of
  one shape elementwise; gradients flow to both sides. Each one's value and
  its two partial derivatives stand side by side in `fa_loss_value`,
  `fa_loss_da`, `fa_loss_db` of rules.h, which the CUDA kernels share.
"""
import operator

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from libc.math cimport INFINITY, NAN
from cython cimport floating

from fastad_cy.graph cimport (Variable, IndexInput, init_node, init_node_like, finish,
                              as_variable, same_dtype, require_float, on_device, device_ops)
from fastad_cy.loops cimport vec_zero
from fastad_cy.scalar cimport (s_exp, s_log, P_BCE, P_MSE, P_HUBER, loss_value, loss_da,
                               loss_db)

cnp.import_array()


cdef enum Reduction:
    RED_NONE, RED_MEAN, RED_SUM


cdef int reduction_code(str op, object reduction) except -1:
    if isinstance(reduction, str):
        if reduction == "mean":
            return RED_MEAN
        if reduction == "sum":
            return RED_SUM
        if reduction == "none":
            return RED_NONE
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


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
cdef class ClassTargetLoss(Variable):
    """Shared by cross_entropy and nll_loss: scores x (B, C) and B class ids."""
    cdef Variable x
    cdef Variable source            # the IndexInput whose ids each forward reads, or None
    cdef cnp.ndarray targets        # int64 (B,): the ids of the last good forward
    cdef int64_t* tgt
    cdef Py_ssize_t batch, classes
    cdef int64_t ignore_index
    cdef int reduction
    cdef Py_ssize_t gy_step         # 1: one output gradient per row ("none"), 0: one in all
    cdef double scale               # the factor applied to the summed loss
    cdef bint failed                # the last forward stopped at a bad id: no backward

    cdef int load_targets(self) except -1:
        """Check the ids (an IndexInput's may have changed) and keep them for the backward."""
        cdef const int64_t* ids = self.tgt if self.source is None else <int64_t*>self.source.val_ptr
        cdef Py_ssize_t bad = first_bad_target(ids, self.batch, self.classes, self.ignore_index)
        if bad >= 0:
            self.failed = True
            raise bad_target_error(self.op_name, ids[bad], bad, self.classes, self.ignore_index)
        if self.source is not None:
            memcpy(self.tgt, ids, self.batch * sizeof(int64_t))
        self.failed = False
        cdef Py_ssize_t kept
        if self.reduction == RED_MEAN:
            kept = count_kept(self.tgt, self.batch, self.ignore_index)
            self.scale = 1.0 / kept if kept else NAN       # torch: the mean of nothing is NaN
        return 0

    cdef int store_total(self, double total) except -1 nogil:
        """A reduced loss's output: the summed losses of the kept rows times the scale."""
        if self.reduction == RED_NONE:
            return 0
        if self.f64:
            (<double*>self.val_ptr)[0] = total * self.scale
        else:
            (<float*>self.val_ptr)[0] = <float>(total * self.scale)
        return 0

    cdef int start_backward(self) except -2 nogil:
        """-1 when x needs no gradient; else x's gradient is ready: 1 to add into it, 0 to write."""
        if not self.x.requires_grad:
            return -1
        if self.failed:
            with gil:
                raise RuntimeError(f"{self.op_name}: the last forward stopped at an out-of-range "
                                   f"target; set valid targets and call forward() before backward()")
        return self.x.prepare_grad()


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
        return {RED_NONE: "none", RED_MEAN: "mean", RED_SUM: "sum"}[self.reduction]


cdef ClassTargets check_class_targets(str op, str argname, object scores, object targets,
                                      object reduction, object ignore_index):
    require_float(op, scores, argname)
    cdef ClassTargets c = ClassTargets.__new__(ClassTargets)
    c.x = <Variable>scores
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
    node.targets = np.empty(node.batch, dtype=np.int64)
    node.tgt = <int64_t*>cnp.PyArray_DATA(node.targets)
    if c.ids is not None:
        node.targets[:] = c.ids
    init_node(node, op, (c.x,) if c.source is None else (c.x, c.source), c.out_shape, c.x.f64)
    node.scale = 1.0
    return 0


cdef double ce_forward(const floating* x, const int64_t* t, Py_ssize_t rows, Py_ssize_t classes,
                       int64_t ignore, floating smoothing, floating* lse,
                       floating* losses) noexcept nogil:
    """Sum of the rows' losses (each also into `losses` unless NULL; 0 for ignored rows).

    loss = lse - (1 - smoothing) * x[t] - smoothing * mean(x), lse the row's
    log-sum-exp (kept for the backward), computed after subtracting the row max.
    """
    cdef Py_ssize_t b, c
    cdef double total = 0
    cdef floating m, s, loss, row_sum
    cdef const floating* xr
    for b in range(rows):
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
    return total


cdef void ce_backward(const floating* x, const int64_t* t, Py_ssize_t rows, Py_ssize_t classes,
                      int64_t ignore, floating smoothing, const floating* lse, const floating* gy,
                      Py_ssize_t gy_step, floating scale, floating* gx, bint add) noexcept nogil:
    """gx row b = (softmax(x_b) - target distribution) * gy[b * gy_step] * scale."""
    cdef Py_ssize_t b, c
    cdef floating g, off = smoothing / classes if classes else 0
    cdef const floating* xr
    cdef floating* gr
    for b in range(rows):
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


@cython.no_gc
cdef class CrossEntropy(ClassTargetLoss):
    cdef double smoothing
    cdef cnp.ndarray lse            # (B,) per-row log-sum-exp from the forward
    cdef char* lse_ptr

    cdef int run_forward(self) except -1 nogil:
        with gil:       # the targets are read through Python objects
            self.load_targets()
        cdef bint each = self.reduction == RED_NONE
        cdef double total
        if self.f64:
            total = ce_forward(<double*>self.x.val_ptr, self.tgt, self.batch, self.classes,
                               self.ignore_index, self.smoothing, <double*>self.lse_ptr,
                               <double*>self.val_ptr if each else NULL)
        else:
            total = ce_forward(<float*>self.x.val_ptr, self.tgt, self.batch, self.classes,
                               self.ignore_index, <float>self.smoothing, <float*>self.lse_ptr,
                               <float*>self.val_ptr if each else NULL)
        return self.store_total(total)

    cdef int run_backward(self) except -1 nogil:
        cdef int add = self.start_backward()
        if add < 0:
            return 0
        if self.f64:
            ce_backward(<double*>self.x.val_ptr, self.tgt, self.batch, self.classes, self.ignore_index,
                        self.smoothing, <double*>self.lse_ptr, <double*>self.grad_ptr, self.gy_step,
                        self.scale, <double*>self.x.grad_ptr, add)
        else:
            ce_backward(<float*>self.x.val_ptr, self.tgt, self.batch, self.classes, self.ignore_index,
                        <float>self.smoothing, <float*>self.lse_ptr, <float*>self.grad_ptr,
                        self.gy_step, <float>self.scale, <float*>self.x.grad_ptr, add)
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
    try:
        smoothing = float(label_smoothing)
    except (TypeError, ValueError):
        raise TypeError(f"cross_entropy: label_smoothing must be a number, "
                        f"got {label_smoothing!r}") from None
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    cdef ClassTargets checked = check_class_targets("cross_entropy", "logits", logits, targets,
                                                    reduction, ignore_index)
    if on_device(checked.x):
        return device_ops().cross_entropy(checked, smoothing)
    cdef CrossEntropy node = CrossEntropy.__new__(CrossEntropy)
    node.smoothing = smoothing
    setup_class_targets(node, "cross_entropy", checked)
    node.lse = np.empty(node.batch, dtype=node.x.dtype)
    node.lse_ptr = <char*>cnp.PyArray_DATA(node.lse)
    return finish(node)


cdef double nll_forward(const floating* x, const int64_t* t, Py_ssize_t rows, Py_ssize_t classes,
                        int64_t ignore, floating* losses) noexcept nogil:
    """Sum of -x[b, t[b]] over the rows not ignored (each also into `losses` unless NULL)."""
    cdef Py_ssize_t b
    cdef double total = 0
    cdef floating loss
    for b in range(rows):
        loss = 0 if t[b] == ignore else -x[b * classes + t[b]]
        total += loss
        if losses != NULL:
            losses[b] = loss
    return total


cdef void nll_backward(const int64_t* t, Py_ssize_t rows, Py_ssize_t classes, int64_t ignore,
                       const floating* gy, Py_ssize_t gy_step, floating scale, floating* gx,
                       bint add) noexcept nogil:
    cdef Py_ssize_t b
    if not add:
        vec_zero(gx, rows * classes)
    for b in range(rows):
        if t[b] != ignore:
            gx[b * classes + t[b]] -= gy[b * gy_step] * scale


@cython.no_gc
cdef class NLLLoss(ClassTargetLoss):

    cdef int run_forward(self) except -1 nogil:
        with gil:       # the targets are read through Python objects
            self.load_targets()
        cdef bint each = self.reduction == RED_NONE
        cdef double total
        if self.f64:
            total = nll_forward(<double*>self.x.val_ptr, self.tgt, self.batch, self.classes,
                                self.ignore_index, <double*>self.val_ptr if each else NULL)
        else:
            total = nll_forward(<float*>self.x.val_ptr, self.tgt, self.batch, self.classes,
                                self.ignore_index, <float*>self.val_ptr if each else NULL)
        return self.store_total(total)

    cdef int run_backward(self) except -1 nogil:
        cdef int add = self.start_backward()
        if add < 0:
            return 0
        if self.f64:
            nll_backward(self.tgt, self.batch, self.classes, self.ignore_index,
                         <double*>self.grad_ptr, self.gy_step, self.scale,
                         <double*>self.x.grad_ptr, add)
        else:
            nll_backward(self.tgt, self.batch, self.classes, self.ignore_index,
                         <float*>self.grad_ptr, self.gy_step, <float>self.scale,
                         <float*>self.x.grad_ptr, add)
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
    if on_device(checked.x):
        return device_ops().nll_loss(checked)
    cdef NLLLoss node = NLLLoss.__new__(NLLLoss)
    setup_class_targets(node, "nll_loss", checked)
    return finish(node)


# ------------------------------------------------------------ pairwise losses

cdef dict _PAIR_NAMES = {P_BCE: "bce_with_logits", P_MSE: "mse", P_HUBER: "huber"}


cdef double pair_forward(int op, const floating* a, const floating* b, Py_ssize_t n,
                         floating delta, floating* losses) noexcept nogil:
    """Sum of the elements' losses; each also into `losses` unless NULL."""
    cdef Py_ssize_t i
    cdef double total = 0
    cdef floating v
    for i in range(n):
        v = loss_value(op, a[i], b[i], delta)
        total += v
        if losses != NULL:
            losses[i] = v
    return total


cdef void pair_backward(int op, bint to_a, const floating* a, const floating* b, Py_ssize_t n,
                        floating delta, const floating* gy, Py_ssize_t gy_step, floating scale,
                        floating* g, bint add) noexcept nogil:
    """g = (or +=) d(loss)/da (to_a) or d(loss)/db, times gy[i * gy_step] * scale."""
    cdef Py_ssize_t i
    cdef floating v
    for i in range(n):
        v = gy[i * gy_step] * scale
        v *= loss_da(op, a[i], b[i], delta) if to_a else loss_db(op, a[i], b[i], delta)
        if add:
            g[i] += v
        else:
            g[i] = v


@cython.no_gc
cdef class PairLoss(Variable):
    cdef int code, reduction
    cdef Variable a, b
    cdef double delta, scale

    cdef int run_forward(self) except -1 nogil:
        cdef bint each = self.reduction == RED_NONE
        cdef Py_ssize_t n = self.a.size
        cdef double total
        if self.f64:
            total = pair_forward(self.code, <double*>self.a.val_ptr, <double*>self.b.val_ptr, n,
                                 self.delta, <double*>self.val_ptr if each else NULL)
            if not each:
                (<double*>self.val_ptr)[0] = total * self.scale
        else:
            total = pair_forward(self.code, <float*>self.a.val_ptr, <float*>self.b.val_ptr, n,
                                 <float>self.delta, <float*>self.val_ptr if each else NULL)
            if not each:
                (<float*>self.val_ptr)[0] = <float>(total * self.scale)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if self.a.requires_grad:
            self._backward_into(self.a, True)
        if self.b.requires_grad:
            self._backward_into(self.b, False)
        return 0

    cdef int _backward_into(self, Variable side, bint to_a) except -1 nogil:
        cdef bint add = side.prepare_grad()
        cdef Py_ssize_t gy_step = 1 if self.reduction == RED_NONE else 0
        if self.f64:
            pair_backward(self.code, to_a, <double*>self.a.val_ptr, <double*>self.b.val_ptr,
                          self.a.size, self.delta, <double*>self.grad_ptr, gy_step, self.scale,
                          <double*>side.grad_ptr, add)
        else:
            pair_backward(self.code, to_a, <float*>self.a.val_ptr, <float*>self.b.val_ptr,
                          self.a.size, <float>self.delta, <float*>self.grad_ptr, gy_step,
                          <float>self.scale, <float*>side.grad_ptr, add)
        return 0


cdef Variable _pair_loss(int code, str aname, object a, str bname, object b, object reduction,
                         double delta=0):
    cdef str name = _PAIR_NAMES[code]
    require_float(name, a, aname)
    cdef Variable va = <Variable>a
    cdef Variable vb = as_variable(b, va)
    require_float(name, vb, bname)
    same_dtype(name, va, vb)
    if va._shape != vb._shape:
        raise ValueError(f"{name}: {aname} has shape {va._shape} but {bname} has shape "
                         f"{vb._shape}; they must be equal")
    cdef int red = reduction_code(name, reduction)
    if on_device(va) or on_device(vb):
        return device_ops().pair_loss(name, va, vb, reduction, delta)
    cdef PairLoss node = PairLoss.__new__(PairLoss)
    node.code = code
    node.reduction = red
    node.a = va
    node.b = vb
    node.delta = delta
    if node.reduction == RED_MEAN:
        node.scale = 1.0 / va.size if va.size else NAN
    else:
        node.scale = 1.0
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


def mse(pred, target, reduction="mean"):
    """Squared error (pred - target)**2, elementwise; as torch.nn.functional.mse_loss.

    `target` is a Variable or an array of pred's shape; gradients go to both.
    Output: () for "mean"/"sum", pred's shape for "none".

    >>> fa.nn.mse(fa.Parameter([1.0, 2.0]), [0.0, 0.0]).item()     # (1 + 4) / 2
    2.5
    """
    return _pair_loss(P_MSE, "pred", pred, "target", target, reduction)


def huber(pred, target, reduction="mean", delta=1.0):
    """Huber loss, elementwise; as torch.nn.functional.huber_loss.

    With d = pred - target: 0.5 * d**2 where |d| < delta, else
    delta * (|d| - 0.5 * delta). `delta` must be > 0; shapes and output as in
    `mse`.

    >>> fa.nn.huber(fa.Parameter([0.5, 3.0]), [0.0, 0.0], reduction="none").value
    array([0.125, 2.5  ], dtype=float32)
    """
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise TypeError(f"huber: delta must be a number, got {delta!r}") from None
    if not d > 0:
        raise ValueError(f"huber: delta must be > 0, got {d}")
    return _pair_loss(P_HUBER, "pred", pred, "target", target, reduction, d)

"""Losses on a GPU (cuda/softmax.cu), with the semantics of fastad_cy/losses.pyx.

fastad_cy/losses.pyx sends a call here when an argument lives on a GPU.

- cross_entropy and nll_loss take (B, C) scores (or (C,) with a 0-d target)
  and class ids: an int array, checked on the host and uploaded once at
  build, or a device `IndexInput`, read by every forward. An IndexInput's ids
  are checked at build, and every later `set_value` refuses ids >= the bound
  set here (`bound_ids`): C, or ignore_index + 1 when ignore_index >= C so that
  ignored rows stay possible. An id in [C, ignore_index) that gets past that
  bound is never used as an index: its row's loss and gradient are NaN (the
  CPU raises IndexError at that forward; a GPU cannot without a host sync).
- bce_with_logits, mse and huber compare two arrays of one shape elementwise.

A "mean" or "sum" loss sums on the device into three doubles owned by the op
(see cuda/softmax.cu): the sum, the count of kept elements (which changes with
an IndexInput's ignored rows), and the scale its backward applies.
"""
import operator

import numpy as np

from fastad_cy.graph import Variable, IndexInput, device_grad_slot, bound_ids
from fastad.cuda.kernels import POINTWISE_LOSSES
from fastad.cuda.ops.common import (I32, I64, backend, launch, scalar, make_node, require_float,
                                    same_device, same_dtype, constant, to_host, from_host)

_REDUCTIONS = ("none", "mean", "sum")


def _reduction(op, reduction):
    if isinstance(reduction, str) and reduction in _REDUCTIONS:
        return reduction
    raise ValueError(f"{op}: reduction must be 'mean', 'sum' or 'none', got {reduction!r}")


def _accumulator():
    """The op's [sum, count, scale] doubles; the scale stays 1 for "none"."""
    return from_host(np.array([0.0, 0.0, 1.0]))


def _reduce(node, fn, kernel, n, *args):
    """Run a loss's forward kernel over n items, then, for "mean"/"sum", loss_finish."""
    each = fn.reduction == "none"
    if not each:
        launch("fill", np.float64, 2, fn.acc, I64(2), np.float64(0))
    launch(kernel, node.dtype, n, *args, I32(each), fn.acc)
    if not each:
        launch("loss_finish", node.dtype, 1, fn.acc, node.value, I32(fn.reduction == "mean"))


# ------------------------------------------------------ class-target losses

def _bad_target(op, target, position, classes, ignore):
    return IndexError(f"{op}: target {target} at position {position} is out of range for "
                      f"{classes} classes (expected 0 <= target < {classes}, or "
                      f"ignore_index={ignore})")


def _check_ids(op, ids, classes, ignore):
    """Raise the CPU's IndexError for the first id outside [0, classes) that is not `ignore`."""
    ids = ids.reshape(-1)
    bad = np.flatnonzero((ids != ignore) & ((ids < 0) | (ids >= classes)))
    if bad.size:
        raise _bad_target(op, ids[bad[0]], bad[0], classes, ignore)


class ClassTargets:
    """What cross_entropy and nll_loss share: the scores' (batch, classes), the ids and
    the reduction. `ids` is the uploaded fixed targets, or the buffer each forward copies
    an IndexInput's ids into (for the backward, as the CPU keeps the ids it used)."""

    def __init__(self, op, scores, argname, targets, reduction, ignore_index):
        require_float(op, scores, argname)
        same_device(op, scores, targets)
        self.reduction = _reduction(op, reduction)
        try:
            self.ignore = operator.index(ignore_index)
        except TypeError:
            raise TypeError(f"{op}: ignore_index must be an int, got {ignore_index!r}") from None
        shape = scores.shape
        if len(shape) == 2:
            self.batch, self.classes = shape
            target_shape = (self.batch,)
        elif len(shape) == 1:
            self.batch, self.classes = 1, shape[0]
            target_shape = ()
        else:
            raise ValueError(f"{op}: {argname} must have shape (batch, classes) or (classes,), "
                             f"got {shape}")
        self.source = None
        if isinstance(targets, IndexInput):
            self.source = targets
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
        if self.source is None:
            # range-check before the int64 cast, which would wrap huge unsigned ids
            _check_ids(op, ids, self.classes, self.ignore)
            self.ids = from_host(ids.reshape(-1).astype(np.int64))
        else:
            _check_ids(op, to_host(targets.value), self.classes, self.ignore)
            bound_ids(targets, max(self.classes, self.ignore + 1), op)
            self.ids = backend().empty((self.batch,), np.int64)
        self.inputs = (scores,) if self.source is None else (scores, self.source)
        self.out_shape = target_shape if self.reduction == "none" else ()
        self.acc = _accumulator()

    def read_ids(self):
        """The ids the forward reads: the IndexInput's current ones, or the fixed ones."""
        return self.ids if self.source is None else self.source.value

    def gy_step(self):
        return I64(1 if self.reduction == "none" else 0)


class CrossEntropy(ClassTargets):
    def __init__(self, logits, targets, reduction, ignore_index, smoothing):
        super().__init__("cross_entropy", logits, "logits", targets, reduction, ignore_index)
        self.smoothing = smoothing
        self.lse = backend().empty((self.batch,), logits.dtype)     # each row's log-sum-exp

    def forward(self, node):
        x = node.parents[0]
        _reduce(node, self, "cross_entropy_forward", self.batch, x.value, self.read_ids(),
                self.ids, self.lse, node.value, I64(self.batch), I64(self.classes),
                I64(self.ignore), scalar(node.dtype, self.smoothing))

    def backward(self, node):
        x = node.parents[0]
        if not x.requires_grad:
            return
        grad, accumulate = device_grad_slot(x)
        launch("cross_entropy_backward", node.dtype, x.size, x.value, self.ids, self.lse,
               node.grad, self.gy_step(), self.acc, grad, I64(self.batch), I64(self.classes),
               I64(self.ignore), scalar(node.dtype, self.smoothing), I32(accumulate))


def cross_entropy(logits, targets, reduction, ignore_index, label_smoothing):
    """fastad_cy/losses.pyx's `cross_entropy` for device arguments."""
    try:
        smoothing = float(label_smoothing)
    except (TypeError, ValueError):
        raise TypeError(f"cross_entropy: label_smoothing must be a number, "
                        f"got {label_smoothing!r}") from None
    if not 0.0 <= smoothing <= 1.0:
        raise ValueError(f"cross_entropy: label_smoothing must be in [0, 1], got {smoothing}")
    fn = CrossEntropy(logits, targets, reduction, ignore_index, smoothing)
    return make_node("cross_entropy", fn.inputs, fn.out_shape, logits.dtype, fn)


class NLLLoss(ClassTargets):
    def __init__(self, log_probs, targets, reduction, ignore_index):
        super().__init__("nll_loss", log_probs, "log_probs", targets, reduction, ignore_index)

    def forward(self, node):
        x = node.parents[0]
        _reduce(node, self, "nll_forward", self.batch, x.value, self.read_ids(), self.ids,
                node.value, I64(self.batch), I64(self.classes), I64(self.ignore))

    def backward(self, node):
        x = node.parents[0]
        if not x.requires_grad:
            return
        grad, accumulate = device_grad_slot(x)
        launch("nll_backward", node.dtype, x.size, self.ids, node.grad, self.gy_step(), self.acc,
               grad, I64(self.batch), I64(self.classes), I64(self.ignore), I32(accumulate))


def nll_loss(log_probs, targets, reduction, ignore_index):
    """fastad_cy/losses.pyx's `nll_loss` for device arguments."""
    fn = NLLLoss(log_probs, targets, reduction, ignore_index)
    return make_node("nll_loss", fn.inputs, fn.out_shape, log_probs.dtype, fn)


# ------------------------------------------------------------ pairwise losses

class PairLoss:
    """One of kernels.POINTWISE_LOSSES of a and b (one shape), elementwise, then reduced."""

    def __init__(self, name, reduction, delta):
        self.code = I32(POINTWISE_LOSSES.index(name))
        self.reduction = reduction
        self.delta = delta
        self.acc = _accumulator()

    def forward(self, node):
        a, b = node.parents
        _reduce(node, self, "pointwise_loss_forward", a.size, self.code, a.value, b.value,
                node.value, I64(a.size), scalar(node.dtype, self.delta))

    def backward(self, node):
        a, b = node.parents
        step = I64(1 if self.reduction == "none" else 0)
        for side, to_a in ((a, 1), (b, 0)):
            if side.requires_grad:
                grad, accumulate = device_grad_slot(side)
                launch("pointwise_loss_backward", node.dtype, a.size, self.code, I32(to_a),
                       a.value, b.value, node.grad, step, self.acc, grad, I64(a.size),
                       scalar(node.dtype, self.delta), I32(accumulate))


def _pair_loss(name, aname, a, bname, b, reduction, delta=0.0):
    same_device(name, a, b)
    require_float(name, a, aname)
    b = constant(name, bname, b, a)
    require_float(name, b, bname)
    same_dtype(name, a, b)
    if a.shape != b.shape:
        raise ValueError(f"{name}: {aname} has shape {a.shape} but {bname} has shape "
                         f"{b.shape}; they must be equal")
    reduction = _reduction(name, reduction)
    fn = PairLoss(name, reduction, delta)
    return make_node(name, (a, b), a.shape if reduction == "none" else (), a.dtype, fn)


def bce_with_logits(logits, targets, reduction):
    """fastad_cy/losses.pyx's `bce_with_logits` for device arguments."""
    return _pair_loss("bce_with_logits", "logits", logits, "targets", targets, reduction)


def mse(pred, target, reduction):
    """fastad_cy/losses.pyx's `mse` for device arguments."""
    return _pair_loss("mse", "pred", pred, "target", target, reduction)


def huber(pred, target, reduction, delta):
    """fastad_cy/losses.pyx's `huber` for device arguments."""
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise TypeError(f"huber: delta must be a number, got {delta!r}") from None
    if not d > 0:
        raise ValueError(f"huber: delta must be > 0, got {d}")
    return _pair_loss("huber", "pred", pred, "target", target, reduction, d)

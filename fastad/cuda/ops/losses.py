"""Losses on a GPU (cuda/losses.cu), with the semantics of fastad/ops/losses.pyx.

fastad/ops/losses.pyx checks the arguments, then sends a call here when the
scores (or either side of a pairwise loss) live on a GPU.

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
(see cuda/losses.cu): the sum, the count of kept elements (which changes with
an IndexInput's ignored rows), and the scale its backward applies.
"""
import numpy as np

from fastad.ops.losses import check_target_ids
from fastad.cuda.kernels import POINTWISE_LOSSES
from fastad.cuda.ops.common import (I32, I64, InputGrads, backend, bound_ids, launch, scalar, make_node,
                                    same_device, to_host, from_host)

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

class ClassTargets(InputGrads):
    """What cross_entropy and nll_loss share, from fastad/ops/losses.pyx's checked
    arguments (`checked`): the scores' (batch, classes), the ids and the reduction.
    `ids` is the uploaded fixed targets, or the buffer each forward copies an
    IndexInput's ids into (for the backward, as the CPU keeps the ids it used)."""

    def __init__(self, op, checked):
        scores, self.source = checked.x, checked.source
        same_device(op, scores, self.source)
        self.reduction = checked.reduction_name
        self.ignore, self.batch, self.classes = checked.ignore_index, checked.batch, checked.classes
        if self.source is None:
            self.ids = from_host(checked.ids)
        else:
            check_target_ids(op, to_host(self.source.storage.value).reshape(-1), self.classes, self.ignore)
            bound_ids(self.source, max(self.classes, self.ignore + 1), op)
            self.ids = backend().empty((self.batch,), np.int64)
        self.inputs = (scores,) if self.source is None else (scores, self.source)
        self.out_shape = checked.out_shape
        self.acc = _accumulator()

    def read_ids(self):
        """The ids the forward reads: the IndexInput's current ones, or the fixed ones."""
        return self.ids if self.source is None else self.source.storage.value

    def gy_step(self):
        return I64(1 if self.reduction == "none" else 0)


class CrossEntropy(ClassTargets):
    def __init__(self, checked, smoothing):
        super().__init__("cross_entropy", checked)
        self.smoothing = smoothing
        self.lse = backend().empty((self.batch,), checked.x.dtype)  # each row's log-sum-exp

    def forward(self, node):
        x = node.parents[0]
        _reduce(node, self, "cross_entropy_forward", self.batch, x.value, self.read_ids(),
                self.ids, self.lse, node.value, I64(self.batch), I64(self.classes),
                I64(self.ignore), scalar(node.dtype, self.smoothing))

    def backward_into(self, node, k, x, grad, accumulate):
        launch("cross_entropy_backward", node.dtype, x.size, x.value, self.ids, self.lse,
               node.grad, self.gy_step(), self.acc, grad, I64(self.batch), I64(self.classes),
               I64(self.ignore), scalar(node.dtype, self.smoothing), I32(accumulate))


def cross_entropy(checked, smoothing):
    """fastad/ops/losses.pyx's `cross_entropy` for device scores, after its checks."""
    fn = CrossEntropy(checked, smoothing)
    return make_node("cross_entropy", fn.inputs, fn.out_shape, checked.x.dtype, fn)


class NLLLoss(ClassTargets):
    def forward(self, node):
        x = node.parents[0]
        _reduce(node, self, "nll_forward", self.batch, x.value, self.read_ids(), self.ids,
                node.value, I64(self.batch), I64(self.classes), I64(self.ignore))

    def backward_into(self, node, k, x, grad, accumulate):
        launch("nll_backward", node.dtype, x.size, self.ids, node.grad, self.gy_step(), self.acc,
               grad, I64(self.batch), I64(self.classes), I64(self.ignore), I32(accumulate))


def nll_loss(checked):
    """fastad/ops/losses.pyx's `nll_loss` for device scores, after its checks."""
    fn = NLLLoss("nll_loss", checked)
    return make_node("nll_loss", fn.inputs, fn.out_shape, checked.x.dtype, fn)


# ------------------------------------------------------------ pairwise losses

class PairLoss(InputGrads):
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

    def backward_into(self, node, k, x, grad, accumulate):
        a, b = node.parents
        launch("pointwise_loss_backward", node.dtype, a.size, self.code, I32(k == 0), a.value,
               b.value, node.grad, I64(1 if self.reduction == "none" else 0), self.acc, grad,
               I64(a.size), scalar(node.dtype, self.delta), I32(accumulate))


def pair_loss(name, a, b, reduction, delta):
    """fastad/ops/losses.pyx's `_pair_loss` for device arguments, after its checks:
    bce_with_logits, mse or huber of a and b (one shape and dtype)."""
    same_device(name, a, b)
    fn = PairLoss(name, reduction, delta)
    return make_node(name, (a, b), a.shape if reduction == "none" else (), a.dtype, fn)

"""Elementwise ops on a GPU (cuda/elementwise.cu): unary functions, broadcasting binary ops
(+ - * / pow maximum minimum, and the comparisons) and where.

As in fastad/ops/elementwise.pyx, a Python number operand becomes a unary
*scalar op, chosen there before a device operand is sent here.
"""
from fastad.cuda.kernels import BINARY_OPS, COMPARISONS
from fastad.cuda.ops.common import (I32, I64, InputGrads, launch, scalar, meta_array, make_node,
                                    backend, same_device)
from fastad.cuda.ops.reduction import Fold


# ------------------------------------------------------------------ unary

class Unary(InputGrads):
    """y = f(x) elementwise; `p` is pow's exponent or a *scalar op's number."""

    def __init__(self, code, p):
        self.code, self.p = I32(code), p

    def forward(self, node):
        x = node.parents[0]
        launch("unary_forward", node.dtype, node.size, x.value, node.value, I64(node.size),
                self.code, scalar(node.dtype, self.p))

    def backward_into(self, node, k, x, grad, accumulate):
        launch("unary_backward", node.dtype, node.size, x.value, node.value, node.grad, grad,
                I64(node.size), self.code, scalar(node.dtype, self.p), I32(accumulate))


def unary(op, code, x, p):
    """Build unary op number `code` (kernels.UNARY_OPS) on x; fastad/ops/elementwise.pyx's
    `_unary` sends device operands here, after choosing the code as on the CPU."""
    return make_node(op, (x,), x.shape, x.dtype, Unary(code, p))


# ----------------------------------------------------------------- binary

def broadcast_meta(op, out_shape, *shapes):
    """[out dims, then each operand's element strides (0 along broadcast axes)]."""
    nd = len(out_shape)
    if nd > 8:
        raise ValueError(f"{op}: on a GPU, broadcasting supports at most 8 dimensions, "
                         f"got {nd}")
    meta = list(out_shape)
    for shape in shapes:
        padded = (1,) * (nd - len(shape)) + tuple(shape)
        strides, step = [0] * nd, 1
        for k in range(nd - 1, -1, -1):
            strides[k] = step if padded[k] != 1 else 0
            step *= padded[k]
        meta += strides
    return meta


def broadcast_folds(op, meta, shape, operands):
    """For each operand number in `operands` (their order in broadcast_meta's `meta`,
    from 0): a Fold that sums an array of the output's shape onto that operand's shape
    when it was broadcast, else None (also when `meta` is None: one shape for all)."""
    nd = len(shape)
    folds = [None] * len(operands)
    if meta is not None:
        for j, k in enumerate(operands):
            strides = meta[(k + 1) * nd:(k + 2) * nd]
            if any(st == 0 and d != 1 for d, st in zip(shape, strides)):   # broadcast
                folds[j] = Fold(shape, strides, op)
    return folds


class Binary(InputGrads):
    """a op b with numpy broadcasting; `meta` is None when a, b and the output share a shape.

    An operand of the output's shape gets its gradient from binary_backward
    directly. A broadcast operand's gradient is a sum over the axes it was
    broadcast along, done by the chunked reduce_sum (`folds[k]`): of the output's
    gradient itself for + and - (a bias's gradient), of binary_backward's terms,
    written into `scratch`, for the others. Comparisons have no backward."""

    def __init__(self, code, meta, shape, dtype):
        self.code = I32(code)
        self.nd = I32(0 if meta is None else len(shape))
        self.meta = meta_array(meta or ())
        name = BINARY_OPS[code]
        self.folds = ([None, None] if name in COMPARISONS
                      else broadcast_folds(name, meta, shape, (0, 1)))
        self.scratch = (backend().empty(shape, dtype)
                        if any(self.folds) and name not in ("add", "sub") else None)

    def forward(self, node):
        a, b = node.parents
        launch("binary_forward", node.dtype, node.size, a.value, b.value, node.value,
               I64(node.size), self.code, self.meta, self.nd)

    def backward_into(self, node, k, x, grad, accumulate):
        a, b = node.parents
        fold = self.folds[k]
        if fold is not None and self.scratch is None:       # + or -: sum the output's gradient
            sign = -1 if k == 1 and BINARY_OPS[self.code] == "sub" else 1
            fold.sum(node.grad, grad, sign, accumulate)
            return
        terms = grad if fold is None else self.scratch
        launch("binary_backward", node.dtype, node.size, a.value, b.value, node.value,
               node.grad, terms, I64(node.size), self.code, I32(k == 0), self.meta, self.nd,
               I32(accumulate if fold is None else 0))
        if fold is not None:
            fold.sum(self.scratch, grad, 1, accumulate)


def binary(name, a, b, shape):
    """Build a op b (name in kernels.BINARY_OPS) of the broadcast `shape`;
    fastad/ops/elementwise.pyx checks the operands and works out the shape first
    (a Python number operand of + - * / becomes a unary *_scalar op there instead)."""
    same_device(name, a, b)
    meta = None if a.shape == b.shape else broadcast_meta(name, shape, a.shape, b.shape)
    return make_node(name, (a, b), shape, a.dtype, Binary(BINARY_OPS.index(name), meta, shape,
                                                           a.dtype))


# ------------------------------------------------------------------ where

class Where(InputGrads):
    """a where cond is nonzero, else b, broadcasting all three; `meta` is None when they
    share the output's shape. A broadcast a or b sums where_backward's terms, written
    into `scratch`, with its Fold (as Binary does)."""

    first = 1

    def __init__(self, meta, shape, dtype):
        self.nd = I32(0 if meta is None else len(shape))
        self.meta = meta_array(meta or ())
        self.folds = broadcast_folds("where", meta, shape, (1, 2))
        self.scratch = backend().empty(shape, dtype) if any(self.folds) else None

    def forward(self, node):
        cond, a, b = node.parents
        launch("where_forward", node.dtype, node.size, cond.value, a.value, b.value, node.value,
               I64(node.size), self.meta, self.nd)

    def backward_into(self, node, k, x, grad, accumulate):
        fold = self.folds[k - 1]
        terms = grad if fold is None else self.scratch
        launch("where_backward", node.dtype, node.size, node.parents[0].value, node.grad, terms,
               I64(node.size), I32(k == 1), self.meta, self.nd,
               I32(accumulate if fold is None else 0))
        if fold is not None:
            fold.sum(self.scratch, grad, 1, accumulate)


def where(cond, a, b, shape):
    """Build where(cond, a, b) of the broadcast `shape`; fastad/ops/elementwise.pyx checks
    the operands (one dtype) and works out the shape first."""
    same_device("where", cond, a, b)
    meta = (None if cond.shape == a.shape == b.shape
            else broadcast_meta("where", shape, cond.shape, a.shape, b.shape))
    return make_node("where", (cond, a, b), shape, a.dtype, Where(meta, shape, a.dtype))

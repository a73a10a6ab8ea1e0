"""Reductions over any axes (sum, mean, max, min, logsumexp, norm, var, std), argmax/argmin
and cumsum along one axis, and softmax/log_softmax over one axis.

A reduction walks its input row by row with a Bcast whose second operand has
the keepdims shape of the output: that operand's element stride is 0 along
every reduced axis, so one walk serves every choice of axes, in the forward
(fold each input element into its output slot) and in the backward (spread
each output slot's gradient over its input elements).

softmax/log_softmax, argmax/argmin and cumsum view their input as (outer, n,
inner) and work along n, one (n, inner) block at a time, vectorised over the
inner columns where they can be.
"""
import operator

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdlib cimport free
from libc.math cimport INFINITY, NAN, isfinite, sqrt, sqrtf
from libc.stdint cimport int64_t
from cython cimport floating

from fastad._engine.graph cimport (Variable, OneInput, IndexInput, init_node, init_node_like, finish,
                              require_float, backend_of, set_storage, new_storage, check_number,
                              keep_data)
from fastad._engine.graph import register_methods
from fastad._engine.broadcast cimport Bcast, BcastPos, bcast_setup, bcast_start, bcast_next_row
from fastad._engine.loops cimport vec_fill, vec_zero
from fastad.ops.scalar cimport s_exp, s_log

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["sum", "mean", "max", "min", "logsumexp", "norm", "var", "std", "argmax", "argmin",
           "cumsum", "softmax", "log_softmax"]

from fastad.ops import elementwise as _elementwise

AxisError = np.exceptions.AxisError      # a ValueError (and IndexError), as numpy raises


cpdef tuple _normalize_axes(str op, object axis, Py_ssize_t ndim):
    """`axis` (None, an int or a tuple of ints, negatives allowed) as sorted axes in [0, ndim);
    the other op modules (shape.pyx, sparse.pyx) check their axes with it too."""
    if axis is None:
        return tuple(range(ndim))
    cdef list seen = []
    for a in (axis if isinstance(axis, tuple) else (axis,)):
        try:
            k = operator.index(a)
        except TypeError:
            raise TypeError(f"{op}: axis must be None, an int or a tuple of ints, "
                            f"got {axis!r}") from None
        if not -ndim <= k < ndim:
            valid = f"from {-ndim} to {ndim - 1}" if ndim else "none: a 0-d input has no axes"
            raise AxisError(f"{op}: axis {k} is out of range for an input with {ndim} "
                            f"dimensions (valid axes: {valid})")
        k = k % ndim
        if k in seen:
            raise ValueError(f"{op}: axis {a} repeats axis {k} in axis={axis!r} "
                             f"(input with {ndim} dimensions)")
        seen.append(k)
    return tuple(sorted(seen))


# -------------------------------------------------------------- reductions

cdef enum ReduceOp:
    R_SUM, R_MEAN, R_MAX, R_LOGSUMEXP, R_MIN, R_NORM2

cdef enum FoldStep:
    FOLD_MAX, FOLD_COUNT_EQUAL, FOLD_SUM_EXP, FOLD_MIN, FOLD_SUM_SQUARES   # sum: sum_walk


cdef inline floating fold_step(int step, floating acc, floating v, floating ref) noexcept nogil:
    """Fold input element v into its output slot's accumulator; `ref` is the slot's
    value that FOLD_COUNT_EQUAL compares with and FOLD_SUM_EXP subtracts."""
    if step == FOLD_MAX: return v if (v > acc) | (v != v) else acc    # NaN sticks, as numpy
    if step == FOLD_MIN: return v if (v < acc) | (v != v) else acc
    if step == FOLD_COUNT_EQUAL: return acc + (v == ref)
    if step == FOLD_SUM_SQUARES: return acc + v * v
    return acc + s_exp(v - ref)


cdef enum:
    LANES = 8          # independent partial accumulators for a long folded row (FA_SUM_LANES)

cdef extern from "reduction_loops.h":
    void fa_sum_rows_f(const float* x, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t x_step,
                       float* acc, Py_ssize_t acc_step, int folds) noexcept nogil
    void fa_sum_rows_d(const double* x, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t x_step,
                       double* acc, Py_ssize_t acc_step, int folds) noexcept nogil
    void fa_spread_rows_f(float* g, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t g_step,
                          const float* gy, Py_ssize_t gy_step, float scale, int folds,
                          int add) noexcept nogil
    void fa_spread_rows_d(double* g, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t g_step,
                          const double* gy, Py_ssize_t gy_step, double scale, int folds,
                          int add) noexcept nogil


cdef inline void sum_rows(const floating* x, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t x_step,
                          floating* acc, Py_ssize_t acc_step, bint folds) noexcept nogil:
    if floating is float:
        fa_sum_rows_f(x, rows, n, x_step, acc, acc_step, folds)
    else:
        fa_sum_rows_d(x, rows, n, x_step, acc, acc_step, folds)


cdef inline void spread_rows(floating* g, Py_ssize_t rows, Py_ssize_t n, Py_ssize_t g_step,
                             const floating* gy, Py_ssize_t gy_step, floating scale, bint folds,
                             bint add) noexcept nogil:
    if floating is float:
        fa_spread_rows_f(g, rows, n, g_step, gy, gy_step, scale, folds, add)
    else:
        fa_spread_rows_d(g, rows, n, g_step, gy, gy_step, scale, folds, add)


cdef void sum_walk(const Bcast* it, const floating* x, floating* acc) noexcept nogil:
    """acc[slot] += every input element of the slot: fold_walk's additions for a sum, in its
    order, in the loops of reduction_loops.h (AVX2 clones): one call for a walk of one or
    two axes (the input's rows against the output's), a call a row beyond."""
    cdef BcastPos pos
    cdef Py_ssize_t r, last = it.nd - 1
    cdef bint folds = it.sb[last] == 0
    if it.nd <= 2:
        sum_rows(x, it.rows, it.shape[last], it.sa[0], acc, it.sb[0], folds)
        return
    bcast_start(it, &pos)
    for r in range(it.rows):
        sum_rows(x + pos.oa, 1, it.shape[last], 0, acc + pos.ob, 0, folds)
        bcast_next_row(it, &pos)


cdef inline floating fold_merge(int step, floating a, floating b) noexcept nogil:
    """Combine two partial accumulators of one output slot."""
    if step == FOLD_MAX or step == FOLD_MIN:
        return fold_step(step, a, b, 0)
    return a + b


cdef void fold_walk(int step, const Bcast* it, const floating* x, floating* acc,
                    const floating* ref) noexcept nogil:
    """acc[slot] = fold_step(acc[slot], x, ref[slot]) for every input element x.

    The input is contiguous, so a row's stride in it is 1; the output row's
    stride is 0 (the row folds into one slot) or 1 (the row's last axis is
    kept), because the output shape only replaces input lengths by 1. A long
    folded row runs LANES partial accumulators, which breaks the serial
    dependency on one and lets gcc vectorise the sum.
    """
    cdef BcastPos pos
    cdef Py_ssize_t r, i, l, inner = it.shape[it.nd - 1]
    cdef bint folds = it.sb[it.nd - 1] == 0
    cdef floating a, rv
    cdef floating lanes[LANES]
    cdef const floating* xr
    cdef floating* ar
    cdef const floating* rr
    bcast_start(it, &pos)
    for r in range(it.rows):
        xr = x + pos.oa
        if folds:
            a = acc[pos.ob]
            rv = ref[pos.ob]
            i = 0
            if inner >= 2 * LANES:
                for l in range(LANES):
                    lanes[l] = -INFINITY if step == FOLD_MAX else (
                        INFINITY if step == FOLD_MIN else 0)
                while i + LANES <= inner:
                    for l in range(LANES):
                        lanes[l] = fold_step(step, lanes[l], xr[i + l], rv)
                    i += LANES
                for l in range(LANES):
                    a = fold_merge(step, a, lanes[l])
            while i < inner:
                a = fold_step(step, a, xr[i], rv)
                i += 1
            acc[pos.ob] = a
        else:
            ar = acc + pos.ob
            rr = ref + pos.ob
            for i in range(inner):
                ar[i] = fold_step(step, ar[i], xr[i], rr[i])
        bcast_next_row(it, &pos)


cdef inline floating spread_step(int code, floating x, floating y, floating gy,
                                 floating aux) noexcept nogil:
    """The gradient of input element x from its output slot (value y, gradient gy) of max,
    min, logsumexp and norm (sum and mean: spread_sum)."""
    if code == R_MAX or code == R_MIN:
        return gy / aux if x == y else 0                    # aux: how many elements tie at y
    if code == R_LOGSUMEXP: return gy * s_exp(x - y)
    return gy * x / y if y != 0 else 0                      # norm: 0 at a zero norm, as torch


cdef void spread_sum(const Bcast* it, const floating* gy, floating* gx, floating scale,
                     bint add) noexcept nogil:
    """gx = (or +=) gy[slot] * scale for every input element: the backward of sum (scale 1)
    and mean, in the loops of reduction_loops.h (AVX2 clones), one call for a walk of one or
    two axes, a call a row beyond."""
    cdef BcastPos pos
    cdef Py_ssize_t r, last = it.nd - 1
    cdef bint folds = it.sb[last] == 0
    if it.nd <= 2:
        spread_rows(gx, it.rows, it.shape[last], it.sa[0], gy, it.sb[0], scale, folds, add)
        return
    bcast_start(it, &pos)
    for r in range(it.rows):
        spread_rows(gx + pos.oa, 1, it.shape[last], 0, gy + pos.ob, 0, scale, folds, add)
        bcast_next_row(it, &pos)


@cython.no_gc
cdef class Reduce(OneInput):
    """sum/mean/max/min/logsumexp/norm of x over some axes; `it` walks x against the keepdims
    output."""
    cdef int code
    cdef Bcast* it
    cdef double scale               # mean: 1 / (elements per slot), NaN when that is 0
    cdef cnp.ndarray aux            # output-sized scratch: max/min tie counts, logsumexp shifts
    cdef char* aux_ptr

    def __dealloc__(self):
        free(self.it)

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """y (n output slots) = the reduction of x; logsumexp keeps its per-slot shift in aux."""
        cdef int code = self.code
        cdef const Bcast* it = self.it
        cdef floating* x = <floating*>self.x.val_ptr
        cdef floating* aux = <floating*>self.aux_ptr
        cdef floating scale = <floating>self.scale
        cdef Py_ssize_t k, n = self.size
        if code == R_MAX:
            vec_fill(y, <floating>-INFINITY, n)
            fold_walk(FOLD_MAX, it, x, y, y)
        elif code == R_MIN:
            vec_fill(y, <floating>INFINITY, n)
            fold_walk(FOLD_MIN, it, x, y, y)
        elif code == R_NORM2:
            vec_zero(y, n)
            fold_walk(FOLD_SUM_SQUARES, it, x, y, y)
            for k in range(n):
                y[k] = sqrtf(y[k]) if floating is float else sqrt(y[k])
        elif code == R_LOGSUMEXP:
            vec_fill(aux, <floating>-INFINITY, n)
            fold_walk(FOLD_MAX, it, x, aux, aux)
            for k in range(n):
                if not isfinite(aux[k]):   # all -inf, or an inf/NaN: shifting would make NaN
                    aux[k] = 0
            vec_zero(y, n)
            fold_walk(FOLD_SUM_EXP, it, x, y, aux)
            for k in range(n):
                y[k] = aux[k] + s_log(y[k])
        else:
            vec_zero(y, n)
            sum_walk(it, x, y)
            if code == R_MEAN:
                for k in range(n):
                    y[k] *= scale
        return 0

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        """gx = (or +=) spread_sum(...) or spread_step(...) for every input element: each is
        visited once."""
        # norm reads no scratch: pass the value buffer (same size) in its place
        cdef floating* aux = <floating*>(self.aux_ptr if self.aux_ptr != NULL else self.val_ptr)
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef const floating* y = <floating*>self.val_ptr
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef floating yv, gv, av, scale = <floating>self.scale
        cdef int code = self.code
        cdef const Bcast* it = self.it
        cdef BcastPos pos
        cdef Py_ssize_t r, i, inner = it.shape[it.nd - 1]
        cdef bint folds = it.sb[it.nd - 1] == 0
        cdef const floating* xr
        cdef floating* gr
        cdef const floating* yr
        cdef const floating* gyr
        cdef const floating* ar
        if code == R_SUM or code == R_MEAN:
            spread_sum(it, gy, gx, scale, add)
            return 0
        if code == R_MAX or code == R_MIN:
            vec_zero(aux, self.size)
            fold_walk(FOLD_COUNT_EQUAL, it, x, aux, y)
        bcast_start(it, &pos)
        for r in range(it.rows):
            xr = x + pos.oa
            gr = gx + pos.oa
            if folds:
                yv = y[pos.ob]
                gv = gy[pos.ob]
                av = aux[pos.ob]
                if add:
                    for i in range(inner):
                        gr[i] += spread_step(code, xr[i], yv, gv, av)
                else:
                    for i in range(inner):
                        gr[i] = spread_step(code, xr[i], yv, gv, av)
            else:
                yr = y + pos.ob
                gyr = gy + pos.ob
                ar = aux + pos.ob
                if add:
                    for i in range(inner):
                        gr[i] += spread_step(code, xr[i], yr[i], gyr[i], ar[i])
                else:
                    for i in range(inner):
                        gr[i] = spread_step(code, xr[i], yr[i], gyr[i], ar[i])
            bcast_next_row(it, &pos)
        return 0


cdef Variable _reduce(str name, int code, object x, object axis, object keepdims):
    cdef Variable v = require_float(name, x, "x")
    cdef tuple shape = v._shape
    cdef tuple axes = _normalize_axes(name, axis, len(shape))
    cdef Py_ssize_t count = 1
    for a in axes:
        count *= shape[a]
    if count == 0 and (code == R_MAX or code == R_MIN or code == R_LOGSUMEXP):
        raise ValueError(f"{name}: cannot reduce over zero elements (input shape {shape}, "
                         f"axis={axis!r}); the result of an empty {name} is undefined")
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = kept if keepdims else tuple(d for i, d in enumerate(shape) if i not in axes)
    cdef double scale = (1.0 / count if count else NAN) if code == R_MEAN else 1.0
    if (dev := backend_of(v)) is not None:
        return dev.reduce(name, code, v, kept, out, scale)
    cdef Reduce node = Reduce.__new__(Reduce)
    node.code = code
    node.x = v
    node.scale = scale
    init_node(node, name, (v,), out, v.f64)
    bcast_setup(&node.it, shape, shape, kept, ())
    if code == R_MAX or code == R_MIN or code == R_LOGSUMEXP:
        node.aux = keep_data(np.empty(out, dtype=v.dtype), &node.aux_ptr)
    return finish(node)


def sum(x, axis=None, keepdims=False):
    """Sum of x over `axis` (None: all axes; an int or a tuple of ints, negatives allowed).

    The output shape is numpy's: the reduced axes are dropped, or kept with
    length 1 when `keepdims`. The sum of no elements is 0.

    >>> fa.sum(fa.Input(np.ones((2, 3))), axis=1).value      # shape (2,)
    array([3., 3.], dtype=float32)
    """
    return _reduce("sum", R_SUM, x, axis, keepdims)


def mean(x, axis=None, keepdims=False):
    """Mean of x over `axis` (as in `sum`); the mean of no elements is NaN, as numpy's.

    >>> fa.mean(fa.Input([[1.0, 3.0]]), axis=-1, keepdims=True).value    # shape (1, 1)
    array([[2.]], dtype=float32)
    """
    return _reduce("mean", R_MEAN, x, axis, keepdims)


def max(x, axis=None, keepdims=False):
    """Maximum of x over `axis` (as in `sum`); NaN if a NaN is among the elements.

    The gradient is split evenly among the elements tied at the maximum (as
    torch.amax). Reducing over zero elements raises ValueError.

    >>> fa.max(fa.Input([[1.0, 5.0], [7.0, 2.0]]), axis=0).value      # shape (2,)
    array([7., 5.], dtype=float32)
    """
    return _reduce("max", R_MAX, x, axis, keepdims)


def logsumexp(x, axis=None, keepdims=False):
    """log(sum(exp(x))) over `axis` (as in `sum`), computed without overflow.

    The maximum is subtracted before exponentiating; the gradient is the
    softmax of x over the reduced axes. Reducing over zero elements raises
    ValueError.

    >>> fa.logsumexp(fa.Input([1000.0, 1000.0])).item()     # 1000 + log(2)
    1000.693...
    """
    return _reduce("logsumexp", R_LOGSUMEXP, x, axis, keepdims)


def min(x, axis=None, keepdims=False):
    """Minimum of x over `axis`; as `max` otherwise (ties share the gradient, as torch.amin).

    >>> fa.min(fa.Input([[1.0, 5.0], [7.0, 2.0]]), axis=0).value      # shape (2,)
    array([1., 2.], dtype=float32)
    """
    return _reduce("min", R_MIN, x, axis, keepdims)


def norm(x, ord=2, axis=None, keepdims=False):
    """The vector norm of x over `axis` (as in `sum`; several axes count as one flat
    vector, as torch.linalg.vector_norm): `ord=2`, sqrt(sum(x**2)), or `ord=1`,
    sum(abs(x)).

    As in PyTorch, the gradient at a zero vector is 0 (for ord 2 as for ord 1).
    The norm of no elements is 0. Any other `ord` raises ValueError.

    >>> fa.norm(fa.Input([3.0, -4.0])).item(), fa.norm(fa.Input([3.0, -4.0]), ord=1).item()
    (5.0, 7.0)
    """
    if isinstance(ord, (bool, np.bool_)) or ord not in (1, 2):
        raise ValueError(f"norm: ord must be 1 or 2 (vector norms), got {ord!r}")
    if ord == 1:                       # sum(abs(x)): abs's slope at 0 is 0, as torch's
        _normalize_axes("norm", axis, len(require_float("norm", x, "x")._shape))
        return sum(_elementwise.abs(x), axis, keepdims)
    return _reduce("norm", R_NORM2, x, axis, keepdims)


cdef tuple _centered(str name, object x, object axis, object ddof):
    """(x - mean(x) over `axis`, 1 / max(count - ddof, 0)): the parts of var and std."""
    cdef Variable v = require_float(name, x, "x")
    ddof = check_number(name, "ddof", ddof)
    cdef Py_ssize_t count = 1
    for a in _normalize_axes(name, axis, len(v._shape)):
        count *= v._shape[a]
    dof = count - ddof
    scale = 1.0 / dof if dof > 0 else INFINITY        # as numpy: inf (nan for zero spread)
    return _elementwise.sub(v, mean(v, axis, True)), scale


def var(x, axis=None, ddof=0, keepdims=False):
    """Variance of x over `axis` (as in `sum`): sum((x - mean)**2) / (count - ddof).

    `ddof=1` gives the unbiased estimate (torch.var's default correction).
    count - ddof <= 0 gives inf, or NaN where x does not vary, as numpy.

    >>> fa.var(fa.Input([1.0, 2.0, 3.0, 4.0])).item(), fa.var(fa.Input([1.0, 3.0]), ddof=1).item()
    (1.25, 2.0)
    """
    centered, scale = _centered("var", x, axis, ddof)
    return _elementwise.mul(sum(_elementwise.square(centered), axis, keepdims), scale)


def std(x, axis=None, ddof=0, keepdims=False):
    """Standard deviation of x over `axis`: sqrt(var(x, axis, ddof, keepdims)).

    Where x does not vary the gradient is 0, as in PyTorch (not sqrt's infinite slope).

    >>> fa.std(fa.Input([1.0, 3.0])).item()
    1.0
    """
    centered, scale = _centered("std", x, axis, ddof)
    return _elementwise.mul(_reduce("std", R_NORM2, centered, axis, keepdims), sqrt(scale))


# ------------------------------------------------------------ argmax, argmin

@cython.no_gc
cdef class ArgReduce(IndexInput):
    """argmax/argmin of x along the middle axis of its (outer, n, inner) view: integer ids
    (use them as an IndexInput), recomputed on every forward; no gradient flows through."""
    cdef Variable x
    cdef bint lowest
    cdef Py_ssize_t outer, n, inner
    cdef object fn                  # on a device: its forward (fastad/cuda/ops/reduction.py)

    cdef int run_forward(self) except -1 nogil:
        if self.on_device:
            with gil:
                self.fn.forward(self)
            return 0
        return self._forward(<double*>self.x.val_ptr) if self.x.f64 else self._forward(<float*>self.x.val_ptr)

    cdef int _forward(self, const floating* x) except -1 nogil:
        """ids[o, j] = the first k with x[o, k, j] largest (smallest when `lowest`); a NaN
        wins, as numpy."""
        cdef bint lowest = self.lowest
        cdef int64_t* ids = <int64_t*>self.val_ptr
        cdef Py_ssize_t o, j, k, best_k, outer = self.outer, n = self.n, inner = self.inner
        cdef floating best, v
        cdef const floating* line
        for o in range(outer):
            for j in range(inner):
                line = x + o * n * inner + j
                best = line[0]
                best_k = 0
                if best == best:
                    for k in range(1, n):
                        v = line[k * inner]
                        if v != v:
                            best_k = k
                            break
                        if (v < best) if lowest else (v > best):
                            best = v
                            best_k = k
                ids[o * inner + j] = best_k
        return 0

    def set_value(self, ids):
        raise TypeError(f"{self.op_name}: its ids are computed from its input on every "
                        f"forward(); set the input's value instead")

    def __repr__(self):
        return f"Variable(op={self.op_name!r}, shape={self._shape}, dtype=int64)"


cdef Variable _arg_reduce(str name, bint lowest, object x, object axis, object keepdims):
    cdef Variable v = require_float(name, x, "x")
    if isinstance(axis, tuple):
        raise TypeError(f"{name}: axis must be None or one int, got {axis!r}")
    cdef tuple shape = v._shape, out
    cdef Py_ssize_t k, outer = 1, n = v.size, inner = 1
    if axis is None:
        out = (1,) * len(shape) if keepdims else ()
    else:
        k = _normalize_axes(name, axis, len(shape))[0]
        outer = int(np.prod(shape[:k]))
        n = shape[k]
        inner = int(np.prod(shape[k + 1:]))
        out = shape[:k] + ((1,) if keepdims else ()) + shape[k + 1:]
    if n == 0:
        raise ValueError(f"{name}: cannot take the {name} of zero elements (input shape {shape}, "
                         f"axis={axis!r})")
    cdef ArgReduce node = ArgReduce.__new__(ArgReduce)
    node.x = v
    node.lowest = lowest
    node.outer, node.n, node.inner = outer, n, inner
    # storage first: init_node checks that node and v share a device
    if (dev := backend_of(v)) is not None:
        set_storage(node, new_storage(v.device, out, np.int64))
        node._storage.id_bound = n     # the ids are always below n (a device consumer's check)
    init_node(node, name, (v,), out, v.f64)
    node.requires_grad = False
    if dev is not None:
        node.fn = dev.arg_reduce(lowest, outer, n, inner)
        node._value = None
        node.val_ptr = NULL
    else:
        node._value = keep_data(np.empty(out, dtype=np.int64), &node.val_ptr)
    node._value_block = None      # init_node's float slot, replaced: its block not kept alive
    return finish(node)


def argmax(x, axis=None, keepdims=False):
    """Index of the largest element of x along `axis` (None: of the flattened x, a 0-d
    result); `keepdims` keeps the axis with length 1, as numpy.

    The result is an integer node: index a Parameter with it (`E[fa.argmax(scores)]`),
    pass it as targets, or, with keepdims, to `take_along_axis` along the same axis.
    It is recomputed on every `forward()`, and no gradient flows through it. Ties
    give the first index; a NaN counts as the largest, as numpy. Zero elements
    along `axis` raise ValueError.

    >>> fa.argmax(fa.Input([[1.0, 5.0], [7.0, 2.0]]), axis=1).value
    array([1, 0])
    >>> x = fa.Parameter([[1.0, 5.0], [7.0, 2.0]])
    >>> fa.take_along_axis(x, fa.argmax(x, axis=1, keepdims=True), axis=1).shape    # the maxima
    (2, 1)
    """
    return _arg_reduce("argmax", False, x, axis, keepdims)


def argmin(x, axis=None, keepdims=False):
    """Index of the smallest element of x along `axis`; as `argmax` otherwise.

    >>> fa.argmin(fa.Input([[1.0, 5.0], [7.0, 2.0]])).item()     # of the flattened x
    0.0
    """
    return _arg_reduce("argmin", True, x, axis, keepdims)


# ------------------------------------------------------------------ cumsum

@cython.no_gc
cdef class Cumsum(OneInput):
    """The running sum of x along the middle axis of its (outer, n, inner) view."""
    cdef Py_ssize_t outer, n, inner
    cdef cnp.ndarray running        # inner values: the backward's running sums
    cdef char* running_ptr

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """y[o, k, :] = x[o, 0, :] + ... + x[o, k, :]: one row after another, vectorised along inner."""
        cdef const floating* x = <floating*>self.x.val_ptr
        cdef Py_ssize_t o, k, j, row, outer = self.outer, n = self.n, inner = self.inner
        for o in range(outer):
            row = o * n * inner
            for j in range(inner):
                y[row + j] = x[row + j] if n else 0
            for k in range(1, n):
                row += inner
                for j in range(inner):
                    y[row + j] = y[row - inner + j] + x[row + j]
        return 0

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        """gx[o, k, :] (+)= gy[o, k, :] + ... + gy[o, n-1, :], the cumsum taken backwards."""
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef floating* running = <floating*>self.running_ptr
        cdef Py_ssize_t o, k, j, row, outer = self.outer, n = self.n, inner = self.inner
        for o in range(outer):
            vec_zero(running, inner)
            for k in range(n - 1, -1, -1):
                row = (o * n + k) * inner
                for j in range(inner):
                    running[j] += gy[row + j]
                if add:             # plain loops: with a short inner row a memcpy call would dominate
                    for j in range(inner):
                        gx[row + j] += running[j]
                else:
                    for j in range(inner):
                        gx[row + j] = running[j]
        return 0


def cumsum(x, axis=None):
    """Running sum of x along `axis` (one int; None: along the flattened x), as numpy.cumsum.

    The output has x's shape (None: shape (x.size,)); a 0-d x gives shape (1,).
    The gradient is the running sum of the output's gradient taken from the end.

    >>> fa.cumsum(fa.Input([[1.0, 2.0], [3.0, 4.0]]), axis=0).value
    array([[1., 2.],
           [4., 6.]], dtype=float32)
    """
    cdef Variable v = require_float("cumsum", x, "x")
    if isinstance(axis, tuple):
        raise TypeError(f"cumsum: axis must be None or one int, got {axis!r}")
    cdef tuple dims = (v.size,) if axis is None or not v._shape else v._shape
    cdef Py_ssize_t k = 0 if axis is None else _normalize_axes("cumsum", axis, len(dims))[0]
    cdef Py_ssize_t outer = int(np.prod(dims[:k])), inner = int(np.prod(dims[k + 1:]))
    if (dev := backend_of(v)) is not None:
        return dev.cumsum(v, outer, dims[k], inner, dims)
    cdef Cumsum node = Cumsum.__new__(Cumsum)
    node.x = v
    node.outer, node.n, node.inner = outer, dims[k], inner
    node.running = keep_data(np.empty(inner, dtype=v.dtype), &node.running_ptr)
    init_node(node, "cumsum", (v,), dims, v.f64)
    return finish(node)


# ------------------------------------------------------- softmax, log_softmax

cdef inline void softmax_block(bint log, const floating* x, floating* y, Py_ssize_t n,
                               Py_ssize_t inner, floating* m, floating* s) noexcept nogil:
    """y = softmax (or log_softmax) of an (n, inner) block along n; m and s hold `inner` values."""
    cdef Py_ssize_t k, j
    cdef floating v
    for j in range(inner):
        m[j] = -INFINITY
        s[j] = 0
    for k in range(n):
        for j in range(inner):
            v = x[k * inner + j]
            if (v > m[j]) | (v != v):
                m[j] = v
    # exponentiate, then sum in a loop of its own: each loop stores to one array only
    for k in range(n):
        for j in range(inner):
            y[k * inner + j] = s_exp(x[k * inner + j] - m[j])
    for k in range(n):
        for j in range(inner):
            s[j] += y[k * inner + j]
    if log:
        for j in range(inner):
            m[j] += s_log(s[j])                  # m is now the log-sum-exp
        for k in range(n):
            for j in range(inner):
                y[k * inner + j] = x[k * inner + j] - m[j]
    else:
        for j in range(inner):
            s[j] = 1 / s[j]
        for k in range(n):
            for j in range(inner):
                y[k * inner + j] *= s[j]


cdef inline void softmax_block_backward(bint log, const floating* y, const floating* gy,
                                        floating* gx, Py_ssize_t n, Py_ssize_t inner,
                                        floating* d, bint add) noexcept nogil:
    """softmax: gx = y * (gy - sum(gy * y)); log_softmax: gx = gy - exp(y) * sum(gy)."""
    cdef Py_ssize_t k, j, o
    cdef floating g
    for j in range(inner):
        d[j] = 0
    for k in range(n):
        for j in range(inner):
            o = k * inner + j
            d[j] += gy[o] if log else gy[o] * y[o]
    for k in range(n):
        for j in range(inner):
            o = k * inner + j
            g = gy[o] - s_exp(y[o]) * d[j] if log else y[o] * (gy[o] - d[j])
            if add:
                gx[o] += g
            else:
                gx[o] = g


@cython.no_gc
cdef class Softmax(OneInput):
    """softmax or log_softmax of x along the middle axis of its (outer, n, inner) view."""
    cdef bint log
    cdef Py_ssize_t outer, n, inner
    cdef cnp.ndarray scratch        # 2 * inner values: column maxima and sums
    cdef char* scratch_ptr

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        cdef bint log = self.log
        cdef floating* x = <floating*>self.x.val_ptr
        cdef floating* scratch = <floating*>self.scratch_ptr
        cdef Py_ssize_t o, n = self.n, inner = self.inner, block = n * inner
        if inner == 1:      # the common last-axis case: the constant lets gcc drop the inner loops
            for o in range(self.outer):
                softmax_block(log, x + o * block, y + o * block, n, 1, scratch, scratch + 1)
        else:
            for o in range(self.outer):
                softmax_block(log, x + o * block, y + o * block, n, inner, scratch, scratch + inner)
        return 0

    cdef int _gradient(self, bint add) except -1 nogil:
        return (self._backward(<double*>self.grad_ptr, add) if self.f64
                else self._backward(<float*>self.grad_ptr, add))

    cdef int _backward(self, const floating* gy, bint add) except -1 nogil:
        cdef bint log = self.log
        cdef floating* y = <floating*>self.val_ptr
        cdef floating* gx = <floating*>self.x.grad_ptr
        cdef floating* scratch = <floating*>self.scratch_ptr
        cdef Py_ssize_t o, n = self.n, inner = self.inner, block = n * inner
        if inner == 1:
            for o in range(self.outer):
                softmax_block_backward(log, y + o * block, gy + o * block, gx + o * block, n, 1,
                                       scratch, add)
        else:
            for o in range(self.outer):
                softmax_block_backward(log, y + o * block, gy + o * block, gx + o * block, n, inner,
                                       scratch, add)
        return 0


cdef Variable _softmax(str name, bint log, object x, object axis):
    cdef Variable v = require_float(name, x, "x")
    if axis is None or isinstance(axis, tuple):
        raise TypeError(f"{name}: axis must be one int, got {axis!r}")
    dims = v._shape or (1,)          # a 0-d input is one element along one axis, as in torch
    cdef Py_ssize_t k = _normalize_axes(name, axis, len(dims))[0]
    cdef Py_ssize_t outer = int(np.prod(dims[:k])), inner = int(np.prod(dims[k + 1:]))
    if (dev := backend_of(v)) is not None:
        return dev.softmax(v, log, outer, dims[k], inner)
    cdef Softmax node = Softmax.__new__(Softmax)
    node.x = v
    node.log = log
    node.outer, node.n, node.inner = outer, dims[k], inner
    node.scratch = keep_data(np.empty(2 * node.inner, dtype=v.dtype), &node.scratch_ptr)
    init_node_like(node, name, (v,), v)
    return finish(node)


def softmax(x, axis=-1):
    """exp(x) / sum(exp(x)) along one axis (default the last), computed without overflow.

    Any number of dimensions; the output has x's shape. A 0-d x counts as one
    element along axis 0 (or -1).

    >>> fa.softmax(fa.Input([[1.0, 1.0], [0.0, 1000.0]])).value
    array([[0.5, 0.5],
           [0. , 1. ]], dtype=float32)
    """
    return _softmax("softmax", False, x, axis)


def log_softmax(x, axis=-1):
    """x - logsumexp(x) along one axis (default the last), computed without overflow.

    >>> fa.log_softmax(fa.Input([0.0, 0.0])).value
    array([-0.6931472, -0.6931472], dtype=float32)
    """
    return _softmax("log_softmax", True, x, axis)


register_methods(sum=sum, mean=mean, max=max)   # Variable's operators and methods

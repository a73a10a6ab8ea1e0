"""Reductions over any axes (sum, mean, max, logsumexp) and softmax/log_softmax over one axis.

A reduction walks its input row by row with a Bcast whose second operand has
the keepdims shape of the output: that operand's element stride is 0 along
every reduced axis, so one walk serves every choice of axes, in the forward
(fold each input element into its output slot) and in the backward (spread
each output slot's gradient over its input elements).

softmax/log_softmax view their input as (outer, n, inner) and normalise
along n, one (n, inner) block at a time, vectorised over the inner columns.
"""
import operator

import numpy as np
cimport cython
cimport numpy as cnp
from libc.stdlib cimport malloc, free
from libc.math cimport INFINITY, NAN, isfinite
from cython cimport floating

from fastad_cy.graph cimport (Variable, init_node, init_node_like, finish, require_float,
                              on_device, device_ops)
from fastad_cy.broadcast cimport Bcast, BcastPos, bcast_setup, bcast_start, bcast_next_row
from fastad_cy.loops cimport vec_fill, vec_zero
from fastad_cy.scalar cimport s_exp, s_log

cnp.import_array()

AxisError = np.exceptions.AxisError      # a ValueError (and IndexError), as numpy raises


cdef tuple normalize_axes(str op, object axis, Py_ssize_t ndim):
    """`axis` (None, an int or a tuple of ints, negatives allowed) as sorted axes in [0, ndim)."""
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
    R_SUM, R_MEAN, R_MAX, R_LOGSUMEXP

cdef enum FoldStep:
    FOLD_SUM, FOLD_MAX, FOLD_COUNT_EQUAL, FOLD_SUM_EXP


cdef inline floating fold_step(int step, floating acc, floating v, floating ref) noexcept nogil:
    """Fold input element v into its output slot's accumulator; `ref` is the slot's
    value that FOLD_COUNT_EQUAL compares with and FOLD_SUM_EXP subtracts."""
    if step == FOLD_SUM: return acc + v
    if step == FOLD_MAX: return v if (v > acc) | (v != v) else acc    # NaN sticks, as numpy
    if step == FOLD_COUNT_EQUAL: return acc + (v == ref)
    return acc + s_exp(v - ref)


cdef enum:
    LANES = 8          # independent partial accumulators for a long folded row


cdef inline floating fold_merge(int step, floating a, floating b) noexcept nogil:
    """Combine two partial accumulators of one output slot."""
    return fold_step(FOLD_MAX, a, b, 0) if step == FOLD_MAX else a + b


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
                    lanes[l] = -INFINITY if step == FOLD_MAX else 0
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


cdef inline floating spread_step(int code, floating x, floating y, floating gy, floating aux,
                                 floating scale) noexcept nogil:
    """The gradient of input element x from its output slot (value y, gradient gy)."""
    if code == R_MAX: return gy / aux if x == y else 0      # aux: how many elements tie at y
    if code == R_LOGSUMEXP: return gy * s_exp(x - y)
    return gy * scale                                        # sum (scale 1), mean (1 / count)


cdef void spread_walk(int code, const Bcast* it, const floating* x, const floating* y,
                      const floating* gy, const floating* aux, floating scale, floating* gx,
                      bint add) noexcept nogil:
    """gx = (or +=) spread_step(...) for every input element: each is visited once."""
    cdef BcastPos pos
    cdef Py_ssize_t r, i, inner = it.shape[it.nd - 1]
    cdef bint folds = it.sb[it.nd - 1] == 0
    cdef floating yv, gv, av
    cdef const floating* xr
    cdef floating* gr
    cdef const floating* yr
    cdef const floating* gyr
    cdef const floating* ar
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
                    gr[i] += spread_step(code, xr[i], yv, gv, av, scale)
            else:
                for i in range(inner):
                    gr[i] = spread_step(code, xr[i], yv, gv, av, scale)
        else:
            yr = y + pos.ob
            gyr = gy + pos.ob
            ar = aux + pos.ob
            if add:
                for i in range(inner):
                    gr[i] += spread_step(code, xr[i], yr[i], gyr[i], ar[i], scale)
            else:
                for i in range(inner):
                    gr[i] = spread_step(code, xr[i], yr[i], gyr[i], ar[i], scale)
        bcast_next_row(it, &pos)


cdef void reduce_forward(int code, const Bcast* it, const floating* x, floating* y,
                         floating* aux, Py_ssize_t n, floating scale) noexcept nogil:
    """y (n output slots) = the reduction of x; logsumexp keeps its per-slot shift in aux."""
    cdef Py_ssize_t k
    if code == R_MAX:
        vec_fill(y, <floating>-INFINITY, n)
        fold_walk(FOLD_MAX, it, x, y, y)
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
        fold_walk(FOLD_SUM, it, x, y, y)
        if code == R_MEAN:
            for k in range(n):
                y[k] *= scale


@cython.no_gc
cdef class Reduce(Variable):
    """sum/mean/max/logsumexp of x over some axes; `it` walks x against the keepdims output."""
    cdef int code
    cdef Variable x
    cdef Bcast* it
    cdef double scale               # mean: 1 / (elements per slot), NaN when that is 0
    cdef cnp.ndarray aux            # output-sized scratch: max tie counts, logsumexp shifts
    cdef char* aux_ptr

    def __dealloc__(self):
        free(self.it)

    cdef int run_forward(self) except -1 nogil:
        if self.f64:
            reduce_forward(self.code, self.it, <double*>self.x.val_ptr, <double*>self.val_ptr,
                           <double*>self.aux_ptr, self.size, self.scale)
        else:
            reduce_forward(self.code, self.it, <float*>self.x.val_ptr, <float*>self.val_ptr,
                           <float*>self.aux_ptr, self.size, <float>self.scale)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        cdef bint add = self.x.prepare_grad()
        # sum and mean read no scratch: pass the value buffer (same size) in its place
        cdef char* aux = self.aux_ptr if self.aux_ptr != NULL else self.val_ptr
        if self.f64:
            if self.code == R_MAX:
                vec_zero(<double*>aux, self.size)
                fold_walk(FOLD_COUNT_EQUAL, self.it, <double*>self.x.val_ptr, <double*>aux,
                          <double*>self.val_ptr)
            spread_walk(self.code, self.it, <double*>self.x.val_ptr, <double*>self.val_ptr,
                        <double*>self.grad_ptr, <double*>aux, self.scale, <double*>self.x.grad_ptr, add)
        else:
            if self.code == R_MAX:
                vec_zero(<float*>aux, self.size)
                fold_walk(FOLD_COUNT_EQUAL, self.it, <float*>self.x.val_ptr, <float*>aux,
                          <float*>self.val_ptr)
            spread_walk(self.code, self.it, <float*>self.x.val_ptr, <float*>self.val_ptr,
                        <float*>self.grad_ptr, <float*>aux, <float>self.scale, <float*>self.x.grad_ptr,
                        add)
        return 0


cdef Variable _reduce(str name, int code, object x, object axis, object keepdims):
    require_float(name, x, "x")
    cdef Variable v = <Variable>x
    cdef tuple shape = v._shape
    cdef tuple axes = normalize_axes(name, axis, len(shape))
    cdef Py_ssize_t count = 1
    for a in axes:
        count *= shape[a]
    if count == 0 and (code == R_MAX or code == R_LOGSUMEXP):
        raise ValueError(f"{name}: cannot reduce over zero elements (input shape {shape}, "
                         f"axis={axis!r}); the result of an empty {name} is undefined")
    kept = tuple(1 if i in axes else d for i, d in enumerate(shape))
    out = kept if keepdims else tuple(d for i, d in enumerate(shape) if i not in axes)
    if on_device(v):
        return device_ops().reduce(name, code, v, kept, out,
                                   (1.0 / count if count else NAN) if code == R_MEAN else 1.0)
    cdef Reduce node = Reduce.__new__(Reduce)
    node.code = code
    node.x = v
    node.scale = (1.0 / count if count else NAN) if code == R_MEAN else 1.0
    init_node(node, name, (v,), out, v.f64)
    node.it = <Bcast*>malloc(sizeof(Bcast))
    if node.it == NULL:
        raise MemoryError()
    bcast_setup(node.it, shape, shape, kept)
    if code == R_MAX or code == R_LOGSUMEXP:
        node.aux = np.empty(out, dtype=v.dtype)
        node.aux_ptr = <char*>cnp.PyArray_DATA(node.aux)
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


cdef void softmax_forward(bint log, const floating* x, floating* y, Py_ssize_t outer,
                          Py_ssize_t n, Py_ssize_t inner, floating* scratch) noexcept nogil:
    cdef Py_ssize_t o, block = n * inner
    if inner == 1:      # the common last-axis case: the constant lets gcc drop the inner loops
        for o in range(outer):
            softmax_block(log, x + o * block, y + o * block, n, 1, scratch, scratch + 1)
    else:
        for o in range(outer):
            softmax_block(log, x + o * block, y + o * block, n, inner, scratch, scratch + inner)


cdef void softmax_backward(bint log, const floating* y, const floating* gy, floating* gx,
                           Py_ssize_t outer, Py_ssize_t n, Py_ssize_t inner, floating* scratch,
                           bint add) noexcept nogil:
    cdef Py_ssize_t o, block = n * inner
    if inner == 1:
        for o in range(outer):
            softmax_block_backward(log, y + o * block, gy + o * block, gx + o * block, n, 1,
                                   scratch, add)
    else:
        for o in range(outer):
            softmax_block_backward(log, y + o * block, gy + o * block, gx + o * block, n, inner,
                                   scratch, add)


@cython.no_gc
cdef class Softmax(Variable):
    """softmax or log_softmax of x along the middle axis of its (outer, n, inner) view."""
    cdef Variable x
    cdef bint log
    cdef Py_ssize_t outer, n, inner
    cdef cnp.ndarray scratch        # 2 * inner values: column maxima and sums
    cdef char* scratch_ptr

    cdef int run_forward(self) except -1 nogil:
        if self.f64:
            softmax_forward(self.log, <double*>self.x.val_ptr, <double*>self.val_ptr, self.outer,
                            self.n, self.inner, <double*>self.scratch_ptr)
        else:
            softmax_forward(self.log, <float*>self.x.val_ptr, <float*>self.val_ptr, self.outer,
                            self.n, self.inner, <float*>self.scratch_ptr)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.x.requires_grad:
            return 0
        cdef bint add = self.x.prepare_grad()
        if self.f64:
            softmax_backward(self.log, <double*>self.val_ptr, <double*>self.grad_ptr,
                             <double*>self.x.grad_ptr, self.outer, self.n, self.inner,
                             <double*>self.scratch_ptr, add)
        else:
            softmax_backward(self.log, <float*>self.val_ptr, <float*>self.grad_ptr,
                             <float*>self.x.grad_ptr, self.outer, self.n, self.inner,
                             <float*>self.scratch_ptr, add)
        return 0


cdef Variable _softmax(str name, bint log, object x, object axis):
    require_float(name, x, "x")
    if axis is None or isinstance(axis, tuple):
        raise TypeError(f"{name}: axis must be one int, got {axis!r}")
    cdef Variable v = <Variable>x
    dims = v._shape or (1,)          # a 0-d input is one element along one axis, as in torch
    cdef Py_ssize_t k = normalize_axes(name, axis, len(dims))[0]
    if on_device(v):
        return device_ops().softmax(v, log, int(np.prod(dims[:k])), dims[k],
                                    int(np.prod(dims[k + 1:])))
    cdef Softmax node = Softmax.__new__(Softmax)
    node.x = v
    node.log = log
    node.outer = int(np.prod(dims[:k]))
    node.n = dims[k]
    node.inner = int(np.prod(dims[k + 1:]))
    node.scratch = np.empty(2 * node.inner, dtype=v.dtype)
    node.scratch_ptr = <char*>cnp.PyArray_DATA(node.scratch)
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

"""Fused recurrent-cell ops: a whole LSTM step as one node.

Built from separate ops, one LSTM step is about seventeen nodes (two matmuls,
adds, four gate slices, five nonlinearities, products); with a batch above
one the gate slices are gathers. `lstm_cell` computes the step in one node:
two GEMMs into a gate buffer, then one pass over it for the gates, the new
cell state and the new hidden state. Its backward stands beside the forward
and keeps the activations of the forward, so nothing is recomputed.

All buffers are row-major (C order); the GEMMs call BLAS the way
fastad_cy/linalg.pyx does (a row-major matrix is its own transpose in
column-major order).
"""
import numpy as np
cimport numpy as cnp
from libc.limits cimport INT_MAX
from cython cimport floating
from scipy.linalg.cython_blas cimport sgemm, dgemm

from fastad_cy.graph cimport Variable, init_node, finish, same_dtype, require_float
from fastad_cy.loops cimport vec_zero
from fastad_cy.scalar cimport s_tanh, s_sigmoid

cnp.import_array()


cdef void gemm(bint trans_a, bint trans_b, int M, int N, int K, const floating* A, int lda,
               const floating* B, int ldb, floating* C, int ldc, bint add) noexcept nogil:
    """Row-major C (M x N) = op(A) @ op(B), or C += ... when `add`; M, N, K > 0."""
    cdef char ta = b'T' if trans_a else b'N'
    cdef char tb = b'T' if trans_b else b'N'
    cdef floating one = 1
    cdef floating beta = 1 if add else 0
    if floating is double:
        dgemm(&tb, &ta, &N, &M, &K, &one, <double*>B, &ldb, <double*>A, &lda, &beta, C, &ldc)
    else:
        sgemm(&tb, &ta, &N, &M, &K, &one, <float*>B, &ldb, <float*>A, &lda, &beta, C, &ldc)


cdef void lstm_pointwise(const floating* bias, const floating* c_prev, floating* act,
                         floating* tanh_c, floating* h, floating* c, Py_ssize_t batch,
                         Py_ssize_t H) noexcept nogil:
    """act holds the pre-activations (batch, 4H); add the bias and apply the gates in place.

    Row r: act = [i f g o] after sigmoid/sigmoid/tanh/sigmoid;
    c = f * c_prev + i * g (i * g without c_prev); h = o * tanh(c).
    """
    cdef Py_ssize_t r, j
    cdef floating* a
    cdef floating ig
    for r in range(batch):
        a = act + r * 4 * H
        for j in range(4 * H):
            a[j] = a[j] + bias[j]
        for j in range(H):
            a[j] = s_sigmoid(a[j])
            a[H + j] = s_sigmoid(a[H + j])
            a[2 * H + j] = s_tanh(a[2 * H + j])
            a[3 * H + j] = s_sigmoid(a[3 * H + j])
        for j in range(H):
            ig = a[j] * a[2 * H + j]
            c[r * H + j] = a[H + j] * c_prev[r * H + j] + ig if c_prev != NULL else ig
            tanh_c[r * H + j] = s_tanh(c[r * H + j])
            h[r * H + j] = a[3 * H + j] * tanh_c[r * H + j]


cdef void lstm_pointwise_backward(const floating* act, const floating* tanh_c,
                                  const floating* c_prev, const floating* gh, const floating* gc,
                                  floating* dgates, floating* gc_prev, bint add_c_prev,
                                  Py_ssize_t batch, Py_ssize_t H) noexcept nogil:
    """dgates (batch, 4H): the gradient of the pre-activations; gc_prev (if not NULL) gets
    the gradient of c_prev, written or added (`add_c_prev`)."""
    cdef Py_ssize_t r, j, k
    cdef const floating* a
    cdef floating* d
    cdef floating i, f, g, o, tc, dc
    for r in range(batch):
        a = act + r * 4 * H
        d = dgates + r * 4 * H
        for j in range(H):
            k = r * H + j
            i, f, g, o, tc = a[j], a[H + j], a[2 * H + j], a[3 * H + j], tanh_c[k]
            dc = gc[k] + gh[k] * o * (1 - tc * tc)
            d[j] = dc * g * i * (1 - i)
            d[H + j] = dc * c_prev[k] * f * (1 - f) if c_prev != NULL else 0
            d[2 * H + j] = dc * i * (1 - g * g)
            d[3 * H + j] = gh[k] * tc * o * (1 - o)
            if gc_prev != NULL:
                if add_c_prev:
                    gc_prev[k] += dc * f
                else:
                    gc_prev[k] = dc * f


cdef void column_sums(const floating* m, floating* out, Py_ssize_t rows, Py_ssize_t cols,
                      bint add) noexcept nogil:
    cdef Py_ssize_t r, j
    if not add:
        vec_zero(out, cols)
    for r in range(rows):
        for j in range(cols):
            out[j] += m[r * cols + j]


cdef class LSTMCell(Variable):
    """Value (2, batch, H): [h', c'] of one LSTM step from x, optional (h, c) and the weights."""
    cdef Variable x, h, c, w_ih, w_hh, bias     # h and c are None for a zero state
    cdef Py_ssize_t batch, n_in, H
    cdef cnp.ndarray act, tanh_c, dgates        # scratch made at build: (B, 4H), (B, H), (B, 4H)

    cdef int run_forward(self) except -1:
        if self.batch == 0:
            return 0
        if self.f64:
            self._forward(<double*>self.x.val_ptr, <double*>self.w_ih.val_ptr)
        else:
            self._forward(<float*>self.x.val_ptr, <float*>self.w_ih.val_ptr)
        return 0

    cdef void _forward(self, const floating* x, const floating* w_ih) noexcept:
        cdef int B = self.batch, I = self.n_in, H = self.H
        cdef floating* act = <floating*>cnp.PyArray_DATA(self.act)
        cdef floating* out = <floating*>self.val_ptr
        gemm(False, False, B, 4 * H, I, x, I, w_ih, 4 * H, act, 4 * H, False)
        if self.h is not None:
            gemm(False, False, B, 4 * H, H, <floating*>self.h.val_ptr, H,
                 <floating*>self.w_hh.val_ptr, 4 * H, act, 4 * H, True)
        lstm_pointwise(<floating*>self.bias.val_ptr,
                       <floating*>self.c.val_ptr if self.c is not None else NULL,
                       act, <floating*>cnp.PyArray_DATA(self.tanh_c), out, out + B * H, B, H)

    cdef int run_backward(self) except -1:
        if self.f64:
            self._backward(<double*>self.grad_ptr)
        else:
            self._backward(<float*>self.grad_ptr)
        return 0

    cdef int _backward(self, const floating* grad) except -1:
        cdef int B = self.batch, I = self.n_in, H = self.H
        cdef floating* dgates = <floating*>cnp.PyArray_DATA(self.dgates)
        cdef floating* gc_prev = NULL
        cdef bint add_c_prev = False, add
        cdef Variable v
        if B == 0:                 # nothing flows back, but every gradient must be written
            for v in self.inputs:
                if v.needs_grad and not v.grad_slot():
                    vec_zero(<floating*>v.grad_ptr, v.size)
            return 0
        if self.c is not None and self.c.needs_grad:
            add_c_prev = self.c.grad_slot()
            gc_prev = <floating*>self.c.grad_ptr
        lstm_pointwise_backward(<floating*>cnp.PyArray_DATA(self.act),
                                <floating*>cnp.PyArray_DATA(self.tanh_c),
                                <floating*>self.c.val_ptr if self.c is not None else NULL,
                                grad, grad + B * H, dgates, gc_prev, add_c_prev, B, H)
        # grad_slot() makes the buffer that grad_ptr points to: call it first
        if self.x.needs_grad:                                        # dx = dgates @ W_ih^T
            add = self.x.grad_slot()
            gemm(False, True, B, I, 4 * H, dgates, 4 * H, <floating*>self.w_ih.val_ptr, 4 * H,
                 <floating*>self.x.grad_ptr, I, add)
        if self.w_ih.needs_grad:                                     # dW_ih = x^T @ dgates
            add = self.w_ih.grad_slot()
            gemm(True, False, I, 4 * H, B, <floating*>self.x.val_ptr, I, dgates, 4 * H,
                 <floating*>self.w_ih.grad_ptr, 4 * H, add)
        if self.bias.needs_grad:
            add = self.bias.grad_slot()
            column_sums(dgates, <floating*>self.bias.grad_ptr, B, 4 * H, add)
        if self.h is None:
            return 0
        if self.h.needs_grad:                                        # dh = dgates @ W_hh^T
            add = self.h.grad_slot()
            gemm(False, True, B, H, 4 * H, dgates, 4 * H, <floating*>self.w_hh.val_ptr, 4 * H,
                 <floating*>self.h.grad_ptr, H, add)
        if self.w_hh.needs_grad:                                     # dW_hh = h^T @ dgates
            add = self.w_hh.grad_slot()
            gemm(True, False, H, 4 * H, B, <floating*>self.h.val_ptr, H, dgates, 4 * H,
                 <floating*>self.w_hh.grad_ptr, 4 * H, add)
        return 0


cdef int _check(str what, object v, tuple shape, Variable like) except -1:
    require_float("lstm_cell", v, what)
    if (<Variable>v)._shape != shape:
        raise ValueError(f"lstm_cell: {what} must have shape {shape}, got {(<Variable>v)._shape}")
    same_dtype("lstm_cell", like, <Variable>v)
    return 0


def lstm_cell(x, h, c, weight_ih, weight_hh, bias):
    """One LSTM step in one node; returns hc of shape (2, batch, H): h' = hc[0], c' = hc[1].

    x (batch, I); h and c (batch, H), or both None for a zero state;
    weight_ih (I, 4H), weight_hh (H, 4H), bias (4H,), gates in PyTorch's order
    i, f, g, o: gates = x @ weight_ih + h @ weight_hh + bias,
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c').
    All float Variables of one dtype. fa.nn.LSTMCell calls it.

    >>> hc = lstm_cell(x, None, None, w_ih, w_hh, b)       # x (1, 16), H = 32
    >>> h, c = hc[0], hc[1]                                 # each (1, 32)
    """
    require_float("lstm_cell", x, "x")
    cdef Variable vx = <Variable>x
    if len(vx._shape) != 2:
        raise ValueError(f"lstm_cell: x must have shape (batch, input_size), got {vx._shape}")
    require_float("lstm_cell", bias, "bias")
    cdef Variable vb = <Variable>bias
    if len(vb._shape) != 1 or vb._shape[0] % 4 or vb._shape[0] == 0:
        raise ValueError(f"lstm_cell: bias must have shape (4 * hidden_size,), got {vb._shape}")
    cdef Py_ssize_t B = vx._shape[0], I = vx._shape[1], H = vb._shape[0] // 4
    _check("weight_ih", weight_ih, (I, 4 * H), vx)
    _check("weight_hh", weight_hh, (H, 4 * H), vx)
    _check("bias", bias, (4 * H,), vx)
    if (h is None) != (c is None):
        raise ValueError("lstm_cell: give both h and c, or neither (a zero state)")
    if h is not None:
        _check("h", h, (B, H), vx)
        _check("c", c, (B, H), vx)
    if I == 0:
        raise ValueError(f"lstm_cell: x has no features (shape {vx._shape})")
    if B > INT_MAX or I > INT_MAX or 4 * H > INT_MAX:
        raise ValueError(f"lstm_cell: x {vx._shape} and bias {vb._shape} exceed BLAS's 32-bit "
                         f"dimension limit")
    cdef LSTMCell node = LSTMCell.__new__(LSTMCell)
    node.x, node.w_ih, node.w_hh, node.bias = vx, weight_ih, weight_hh, vb
    node.h, node.c = h, c
    node.batch, node.n_in, node.H = B, I, H
    dtype = np.float64 if vx.f64 else np.float32
    node.act = np.zeros((B, 4 * H), dtype=dtype)
    node.tanh_c = np.zeros((B, H), dtype=dtype)
    node.dgates = np.zeros((B, 4 * H), dtype=dtype)
    # without a state, weight_hh takes no part (and receives no gradient)
    inputs = (vx, weight_ih, vb) + ((weight_hh, h, c) if h is not None else ())
    init_node(node, "lstm_cell", inputs, (2, B, H), vx.f64)
    return finish(node)

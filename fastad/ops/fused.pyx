"""Fused recurrent-cell ops: a whole LSTM or GRU step as one node.

Built from separate ops, one LSTM step is about seventeen nodes (two matmuls,
adds, four gate slices, five nonlinearities, products) and a GRU step about
twenty; with a batch above one the gate slices are gathers. `lstm_cell` and
`gru_cell` compute the step in one node: GEMMs into gate buffers, then one
pass over them for the gates and the new state. `lstm_sequence` runs a whole
LSTM sequence in one node: the input products of every step as one GEMM, then
per step only the recurrent product and the cell's own gate pass. Each
backward stands beside its forward and reads the activations the forward
kept, so nothing is recomputed.

All buffers are row-major (C order); the GEMMs call BLAS the way
fastad/ops/linalg.pyx does (a row-major matrix is its own transpose in
column-major order).
"""
import numpy as np
cimport cython
cimport numpy as cnp
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from cython cimport floating
from fastad._engine.blas cimport gemm

from fastad._engine.graph cimport (Variable, init_node, finish, same_dtype, require_float, backend_of, same_device,
                              val_ptr_or_null, check_flag, keep_data, CACHE_LINE)
from fastad._engine.loops cimport vec_zero, vec_put, zero_values, put_values, element_size
from fastad.ops.shape import getitem
from fastad.ops.op_codes cimport U_TANH
from fastad.ops.scalar cimport s_tanh, s_sigmoid

cdef extern from "elementwise_loops.h":
    # elementwise's loop for one unary op over a row (float's tanh and sigmoid vectorise there)
    void fa_unary_forward_f(int op, const float* x, float* y, Py_ssize_t n, float p) noexcept nogil
    void fa_unary_forward_d(int op, const double* x, double* y, Py_ssize_t n, double p) noexcept nogil

cnp.import_array()


cdef inline void unary_each(int op, const floating* x, floating* y, Py_ssize_t n) noexcept nogil:
    """y = op(x) over n elements (y may be x)."""
    if floating is float:
        fa_unary_forward_f(op, x, y, n, 0)
    else:
        fa_unary_forward_d(op, x, y, n, 0)


cdef inline void halve_each(floating* x, Py_ssize_t n) noexcept nogil:
    cdef Py_ssize_t j
    for j in range(n):
        x[j] = x[j] * <floating>0.5


cdef inline void tanh_to_sigmoid_each(floating* x, Py_ssize_t n) noexcept nogil:
    """x = tanh(v / 2) becomes sigmoid(v) = (1 + x) / 2."""
    cdef Py_ssize_t j
    for j in range(n):
        x[j] = <floating>0.5 + <floating>0.5 * x[j]


cdef void lstm_pointwise(const floating* b_ih, const floating* b_hh, const floating* c_prev,
                         floating* act, floating* tanh_c, floating* h, floating* c,
                         Py_ssize_t batch, Py_ssize_t H) noexcept nogil:
    """act holds the pre-activations (batch, 4H); add the biases and apply the gates in place.

    Row r: act = [i f g o] after sigmoid/sigmoid/tanh/sigmoid;
    c = f * c_prev + i * g (i * g without c_prev); h = o * tanh(c).

    A sigmoid gate is taken as (1 + tanh(x / 2)) / 2, so that all four gates are one pass of
    the vectorised tanh loop: float's sigmoid calls the C library's expf element by element,
    and this made the forward of an LSTM step at hidden 64 about 15% faster. The absolute error
    stays within an ulp of 1 (a gate below about 1e-8 in float reads as 0).
    """
    cdef Py_ssize_t r, j
    cdef floating* a
    cdef floating ig
    for r in range(batch):
        a = act + r * 4 * H
        for j in range(4 * H):
            a[j] = a[j] + b_ih[j] + b_hh[j]
        halve_each(a, 2 * H)
        halve_each(a + 3 * H, H)
        unary_each(U_TANH, a, a, 4 * H)
        tanh_to_sigmoid_each(a, 2 * H)
        tanh_to_sigmoid_each(a + 3 * H, H)
        for j in range(H):
            ig = a[j] * a[2 * H + j]
            c[r * H + j] = a[H + j] * c_prev[r * H + j] + ig if c_prev != NULL else ig
        unary_each(U_TANH, c + r * H, tanh_c + r * H, H)
        for j in range(H):
            h[r * H + j] = a[3 * H + j] * tanh_c[r * H + j]


cdef extern from *:
    """
    #include <stddef.h>
    #include "clones.h"
    /* The gate gradients of one row of an LSTM cell (lstm_pointwise_backward's loop), with
     * every pointer restrict so that the compiler vectorises it: the cell state's gradient
     * carried to the step before is either written to its own buffer (gc_prev: written, or
     * added into with `add`), or over gc itself (`in_place`, where each element is read
     * before it is written), or dropped (neither). The expressions are the Cython loop's
     * (its 1.0 is a double, in float too), so the values are the same bits. */
    #define FA_LSTM_GATE_GRADS(T, S)                                                           \
    FA_CLONED_WIDE void fa_lstm_gate_grads_##S(const T* __restrict a, const T* __restrict tanh_c, \
            const T* __restrict c_prev, const T* __restrict gh, T* __restrict gc,             \
            T* __restrict d, T* __restrict gc_prev, int add, int in_place, ptrdiff_t H) {     \
        ptrdiff_t j;                                                                           \
        for (j = 0; j < H; j++) {                                                              \
            T i = a[j], f = a[H + j], g = a[2 * H + j], o = a[3 * H + j], tc = tanh_c[j];     \
            T dc = gc[j] + gh[j] * o * (1.0 - tc * tc);                                        \
            d[j] = dc * g * i * (1.0 - i);                                                     \
            d[H + j] = c_prev != NULL ? (T)(dc * c_prev[j] * f * (1.0 - f)) : (T)0;            \
            d[2 * H + j] = dc * i * (1.0 - g * g);                                             \
            d[3 * H + j] = gh[j] * tc * o * (1.0 - o);                                         \
            if (in_place) gc[j] = dc * f;                                                      \
            else if (gc_prev != NULL && add) gc_prev[j] = gc_prev[j] + dc * f;                 \
            else if (gc_prev != NULL) gc_prev[j] = dc * f;                                     \
        }                                                                                      \
    }
    FA_LSTM_GATE_GRADS(float, f)
    FA_LSTM_GATE_GRADS(double, d)
    """
    void fa_lstm_gate_grads_f(const float* a, const float* tanh_c, const float* c_prev,
                              const float* gh, float* gc, float* d, float* gc_prev, int add,
                              int in_place, Py_ssize_t H) noexcept nogil
    void fa_lstm_gate_grads_d(const double* a, const double* tanh_c, const double* c_prev,
                              const double* gh, double* gc, double* d, double* gc_prev, int add,
                              int in_place, Py_ssize_t H) noexcept nogil


cdef void lstm_pointwise_backward(const floating* act, const floating* tanh_c,
                                  const floating* c_prev, const floating* gh, const floating* gc,
                                  floating* dgates, floating* gc_prev, bint add_c_prev,
                                  Py_ssize_t batch, Py_ssize_t H) noexcept nogil:
    """dgates (batch, 4H): the gradient of the pre-activations; gc_prev (if not NULL) gets
    the gradient of c_prev, written or added (`add_c_prev`). gc_prev may be gc itself: each
    element of gc is read before its own is written."""
    cdef Py_ssize_t r
    cdef bint in_place = gc_prev == gc
    for r in range(batch):
        if floating is float:
            fa_lstm_gate_grads_f(act + r * 4 * H, tanh_c + r * H,
                                 c_prev + r * H if c_prev != NULL else NULL, gh + r * H,
                                 <float*>gc + r * H, dgates + r * 4 * H,
                                 NULL if in_place or gc_prev == NULL else gc_prev + r * H,
                                 add_c_prev, in_place, H)
        else:
            fa_lstm_gate_grads_d(act + r * 4 * H, tanh_c + r * H,
                                 c_prev + r * H if c_prev != NULL else NULL, gh + r * H,
                                 <double*>gc + r * H, dgates + r * 4 * H,
                                 NULL if in_place or gc_prev == NULL else gc_prev + r * H,
                                 add_c_prev, in_place, H)


cdef int product_backward(Variable x, Variable w, const floating* dout, int B, int n_in,
                          int n_out) except -1 nogil:
    """The gradients of x (B, n_in) @ w^T, w (n_out, n_in), from dout (B, n_out), for the
    inputs that take one: dx = dout @ w, dw = dout^T @ x. prepare_grad() makes the buffer
    that grad_ptr points to: it is called first."""
    cdef bint add
    if x.requires_grad:
        add = x.prepare_grad()
        gemm(False, False, B, n_in, n_out, dout, n_out, <floating*>w.val_ptr, n_in,
             <floating*>x.grad_ptr, n_in, add)
    if w.requires_grad:
        add = w.prepare_grad()
        gemm(True, False, n_out, n_in, B, dout, n_out, <floating*>x.val_ptr, n_in,
             <floating*>w.grad_ptr, n_in, add)
    return 0


cdef int bias_backward(Variable bias, const floating* dout, Py_ssize_t B,
                       Py_ssize_t n_out) except -1 nogil:
    """The gradient of a bias (n_out,) added to each row of a (B, n_out) result: dout's
    column sums, when the bias takes one. Returns 1 when they were written (its first
    gradient of the pass), else 0 (added, or none taken)."""
    cdef Py_ssize_t r, j
    if not bias.requires_grad:
        return 0
    cdef bint add = bias.prepare_grad()
    cdef floating* out = <floating*>bias.grad_ptr
    if not add:
        vec_zero(out, n_out)
    for r in range(B):
        for j in range(n_out):
            out[j] += dout[r * n_out + j]
    return not add


cdef bint copy_bias_grad(Variable written, Variable bias) except -1 nogil:
    """The second of two biases added to the same rows (an LSTM's b_ih and b_hh) takes the
    column sums bias_backward has just written into the first's gradient, when this is its
    first gradient of the pass too (a copy instead of a second pass over the rows). Returns
    whether it did (or takes none); else the caller sums for it."""
    if not bias.requires_grad:
        return True
    if bias is written or bias.prepare_grad():
        return False
    memcpy(bias.grad_ptr, written.grad_ptr, written.size * element_size(written.f64))
    return True


cdef void transpose_into(const floating* w, floating* out, Py_ssize_t rows,
                         Py_ssize_t cols) noexcept nogil:
    """out (cols, rows) = w (rows, cols) transposed."""
    cdef Py_ssize_t r, k
    for r in range(rows):
        for k in range(cols):
            out[k * rows + r] = w[r * cols + k]


@cython.no_gc
cdef class SequenceWeights:
    """The weights of the steps of one sequence, copied transposed for their forward products.

    One `SequenceWeights()` is given to every step of one sequence (fa.nn.LSTM and GRU make
    one per call). The first step built with it adopts its weight_ih and weight_hh (G, in),
    in PyTorch's layout, and on every forward pass copies them as (in, G); the steps'
    products x @ W^T then read that copy, whose columns BLAS walks contiguously: at a small
    batch and input size, much faster than the short rows of W itself, for one copy a pass
    (measured on an LSTM of 20 steps, batch 1, input 16, hidden 32: the forward pass 40%
    slower than with the old (in, G) weights without the copy, 15% with it). The backward
    reads the weights themselves. On a device it is not used.
    """
    cdef Variable w_ih, w_hh                # None until a step adopts them
    cdef cnp.ndarray ih, hh                 # (in, G) and (H, G)
    cdef char* ih_ptr
    cdef char* hh_ptr

    cdef int adopt(self, str op, Variable w_ih, Variable w_hh) except -1:
        """1 when this step is the sequence's first (it refreshes the copy), else 0; ValueError
        when a step brings other weights."""
        if self.w_ih is not None:
            if self.w_ih is not w_ih or self.w_hh is not w_hh:
                raise ValueError(f"{op}: the SequenceWeights belongs to the steps of other "
                                 f"weights; make one per sequence of one layer")
            return 0
        self.w_ih, self.w_hh = w_ih, w_hh
        self.ih = keep_data(np.ascontiguousarray(w_ih.value.T), &self.ih_ptr)
        self.hh = keep_data(np.ascontiguousarray(w_hh.value.T), &self.hh_ptr)
        return 1


@cython.no_gc
cdef class Cell(Variable):
    """The base of LSTMCell and GRUCell: one step's input, state and weights."""
    cdef Variable x, h, w_ih, w_hh, b_ih, b_hh    # h is None for a zero state
    cdef SequenceWeights cols                     # the weights' transposed copy, or None
    cdef bint refresh                             # this step makes that copy
    cdef Py_ssize_t batch, n_in, H


cdef int cell_products(Cell cell, floating* gi, floating* gh, int G) except -1 nogil:
    """gi = x @ w_ih^T and, unless h is None (a zero state), gh = h @ w_hh^T, each (B, G), of the
    cell's operands, the weights in PyTorch's layout, w_ih (G, I) and w_hh (G, H): read
    transposed in place, or from the copy in `cols` (made now when `refresh`); when gh is gi
    the second product is added into it."""
    cdef int B = cell.batch, I = cell.n_in, H = cell.H
    if cell.cols is None:
        gemm(False, True, B, G, I, <floating*>cell.x.val_ptr, I, <floating*>cell.w_ih.val_ptr, I, gi,
             G, False)
        if cell.h is not None:
            gemm(False, True, B, G, H, <floating*>cell.h.val_ptr, H, <floating*>cell.w_hh.val_ptr, H,
                 gh, G, gh == gi)
        return 0
    if cell.refresh:
        transpose_into(<floating*>cell.w_ih.val_ptr, <floating*>cell.cols.ih_ptr, G, I)
        transpose_into(<floating*>cell.w_hh.val_ptr, <floating*>cell.cols.hh_ptr, G, H)
    gemm(False, False, B, G, I, <floating*>cell.x.val_ptr, I, <floating*>cell.cols.ih_ptr, G, gi,
         G, False)
    if cell.h is not None:
        gemm(False, False, B, G, H, <floating*>cell.h.val_ptr, H, <floating*>cell.cols.hh_ptr, G,
             gh, G, gh == gi)
    return 0


cdef int cell_backward(Cell cell, const floating* dgi, const floating* dgh, int G) except -1 nogil:
    """The gradients of cell_products' inputs and of the biases (added to gi and gh) from
    those of gi (dgi) and gh (dgh)."""
    product_backward(cell.x, cell.w_ih, dgi, cell.batch, cell.n_in, G)
    if cell.h is not None:
        product_backward(cell.h, cell.w_hh, dgh, cell.batch, cell.H, G)
    bias_backward(cell.b_ih, dgi, cell.batch, G)
    bias_backward(cell.b_hh, dgh, cell.batch, G)
    return 0


cdef int zero_unwritten_grads(Variable node) except -1 with gil:
    """A zero gradient for each input of a cell of batch 0 (nothing flows back) that takes one
    and that nothing wrote in this pass: every gradient must be written."""
    cdef Variable v
    for v in node.parents:
        if v.requires_grad and not v.prepare_grad():
            zero_values(v.grad_ptr, v.size, v.f64)
    return 0


@cython.no_gc
cdef class LSTMCell(Cell):
    """Value (2, batch, H): [h', c'] of one LSTM step from x, optional (h, c) and the weights."""
    cdef Variable c                             # None for a zero state, as h
    cdef cnp.ndarray act, tanh_c, dgates        # scratch made at build: (B, 4H), (B, H), (B, 4H)
    cdef char* act_ptr                          # their data, for the passes
    cdef char* tanh_c_ptr
    cdef char* dgates_ptr

    cdef int run_forward(self) except -1 nogil:
        if self.batch == 0:
            return 0
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef int B = self.batch, H = self.H
        cdef floating* act = <floating*>self.act_ptr
        cell_products(self, act, act, 4 * H)
        lstm_pointwise(<floating*>self.b_ih.val_ptr, <floating*>self.b_hh.val_ptr,
                       <floating*>val_ptr_or_null(self.c), act, <floating*>self.tanh_c_ptr, out,
                       out + B * H, B, H)
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* grad) except -1 nogil:
        cdef int B = self.batch, H = self.H
        cdef floating* dgates = <floating*>self.dgates_ptr
        cdef floating* gc_prev = NULL
        cdef bint add_c_prev = False
        if B == 0:
            return zero_unwritten_grads(self)
        if self.c is not None and self.c.requires_grad:
            add_c_prev = self.c.prepare_grad()
            gc_prev = <floating*>self.c.grad_ptr
        lstm_pointwise_backward(<floating*>self.act_ptr, <floating*>self.tanh_c_ptr,
                                <floating*>val_ptr_or_null(self.c), grad, grad + B * H, dgates,
                                gc_prev, add_c_prev, B, H)
        cell_backward(self, dgates, dgates, 4 * H)
        return 0


# ------------------------------------------------------------ LSTM sequence

# From this batch on (the rows of the first step), an LSTM sequence's recurrent products read
# a transposed copy of weight_hh made once a forward pass: BLAS reads the rows of a (4H, H)
# weight transposed in place 2-4x slower than the copy's at 8 or 16 rows a step (hidden 64,
# one thread; about the same at one row, where the copy would not pay).
cdef Py_ssize_t TRANSPOSED_FROM = 8

# Up to this many multiply-adds an input product over several rows reads a transposed copy of
# x (see LSTMSequence._forward): BLAS's small-matrix kernels serve products up to about 100^3;
# above, both forms pack their operands and x @ W_ih^T read in place is a few percent faster
# (480 rows of 32 into 256 gates, one thread)
cdef Py_ssize_t SMALL_PRODUCT = 1000000

@cython.no_gc
cdef class LSTMSequence(Variable):
    """Value (T, batch, H): the hidden states of an LSTM over x (T, batch, I), each at its own
    time position; the steps run from t = 0 up, or from t = T - 1 down when `reverse`. In the
    packed form (`step_rows` set), x is (N, I): the rows of step 0, then those of step 1, ...,
    step k's the first step_rows[k] of step k - 1's (sequences sorted longest first), and the
    value is (N, H), row for row.

    The forward makes every step's input product x_t @ W_ih^T in one GEMM over all the rows,
    then per step adds h_prev @ W_hh^T and runs the cell's gate pass (lstm_pointwise),
    keeping each step's activations and cell state. The backward walks the steps back for
    the gate gradients and dh_prev, then makes the weights' gradients, the biases' and dx in
    one product (or column sum) each over all the steps.
    """
    cdef Variable x, h0, c0, w_ih, w_hh, b_ih, b_hh   # h0 and c0 are None for a zero state
    cdef bint reverse
    cdef Py_ssize_t steps, batch, n_in, H
    cdef Py_ssize_t n_rows                            # all the steps' rows (T * batch unpacked)
    # the packed form (else None and NULL): per step, its rows and its first row; and per
    # sequence (a row of the batch), the row of its last step
    cdef cnp.ndarray packing
    cdef int64_t* step_rows
    cdef int64_t* step_start
    cdef int64_t* last_row
    # slots of one block (`work`, made at build, not zeroed: each pass writes a slot before
    # it reads it), reused by every pass: act and dgates (rows, 4H): the gates after their
    # nonlinearities and their gradients; cells and tanh_c (rows, H): c_t and tanh(c_t);
    # dh and dc (B, H): the gradients flowing back into the previous step's h and c;
    # dc_final (B, H): the final c's gradient from its LSTMFinalCell, valid when
    # dc_final_pass == grad_pass (the node's own pass stamp); packed, h_prev (rows - B, H):
    # for the backward, each step's previous hidden state rows; w_hh_t (H, 4H), or NULL: a
    # batch of at least TRANSPOSED_FROM rows reads weight_hh through this transposed copy;
    # x_t (I, rows), or NULL: the input product over more than one row reads x through this
    # transposed copy (see _forward)
    cdef cnp.ndarray work
    cdef char* act_ptr
    cdef char* dgates_ptr
    cdef char* cells_ptr
    cdef char* tanh_c_ptr
    cdef char* dh_ptr
    cdef char* dc_ptr
    cdef char* dc_final_ptr
    cdef char* h_prev_ptr
    cdef char* w_hh_t_ptr
    cdef char* x_t_ptr
    cdef unsigned long dc_final_pass

    cdef inline Py_ssize_t time_of(self, Py_ssize_t k) noexcept nogil:
        """The time position of the k-th step run."""
        return self.steps - 1 - k if self.reverse else k

    cdef inline Py_ssize_t first_row(self, Py_ssize_t k) noexcept nogil:
        """The first row (of x, of the value and of the scratch buffers) of the k-th step run."""
        return self.step_start[k] if self.step_rows != NULL else self.time_of(k) * self.batch

    cdef inline Py_ssize_t rows_of(self, Py_ssize_t k) noexcept nogil:
        """The rows of the k-th step run: the first that many of the batch."""
        return self.step_rows[k] if self.step_rows != NULL else self.batch

    cdef int run_forward(self) except -1 nogil:
        if self.batch == 0:
            return 0
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef int T = self.steps, I = self.n_in, H = self.H, G = 4 * H
        cdef floating* act = <floating*>self.act_ptr
        cdef floating* cells = <floating*>self.cells_ptr
        cdef floating* tanh_c = <floating*>self.tanh_c_ptr
        cdef const floating* b_ih = <floating*>self.b_ih.val_ptr
        cdef const floating* b_hh = <floating*>self.b_hh.val_ptr
        cdef const floating* w_hh = <floating*>val_ptr_or_null(self.w_hh)
        cdef floating* w_hh_t = <floating*>self.w_hh_t_ptr
        cdef const floating* h_prev = <floating*>val_ptr_or_null(self.h0)
        cdef const floating* c_prev = <floating*>val_ptr_or_null(self.c0)
        cdef floating* x_t = <floating*>self.x_t_ptr
        cdef Py_ssize_t k, r, n
        # BLAS takes x @ W_ih^T, each output a dot product of two rows, by packing both
        # operands first; from a transposed copy of x it runs its small-matrix kernel instead
        # (a sentence of 30 rows, I 32, 4H 256: about 1.5x faster, the copy included)
        if x_t != NULL:
            transpose_into(<floating*>self.x.val_ptr, x_t, self.n_rows, I)
            gemm(True, True, self.n_rows, G, I, x_t, self.n_rows, <floating*>self.w_ih.val_ptr, I,
                 act, G, False)
        else:
            gemm(False, True, self.n_rows, G, I, <floating*>self.x.val_ptr, I,
                 <floating*>self.w_ih.val_ptr, I, act, G, False)
        if w_hh_t != NULL:
            transpose_into(w_hh, w_hh_t, G, H)
        for k in range(T):
            r, n = self.first_row(k), self.rows_of(k)
            if h_prev == NULL:
                pass
            elif w_hh_t != NULL:
                gemm(False, False, n, G, H, h_prev, H, w_hh_t, G, act + r * G, G, True)
            else:
                gemm(False, True, n, G, H, h_prev, H, w_hh, H, act + r * G, G, True)
            lstm_pointwise(b_ih, b_hh, c_prev, act + r * G, tanh_c + r * H, out + r * H,
                           cells + r * H, n, H)
            h_prev, c_prev = out + r * H, cells + r * H
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* grad) except -1 nogil:
        cdef int T = self.steps, B = self.batch, I = self.n_in, H = self.H, G = 4 * H
        cdef const floating* act = <floating*>self.act_ptr
        cdef const floating* cells = <floating*>self.cells_ptr
        cdef const floating* tanh_c = <floating*>self.tanh_c_ptr
        cdef const floating* hs = <floating*>self.val_ptr
        cdef floating* dgates = <floating*>self.dgates_ptr
        cdef floating* dh = <floating*>self.dh_ptr
        cdef floating* dc = <floating*>self.dc_ptr
        cdef const floating* dc_final = <floating*>self.dc_final_ptr
        cdef const floating* w_hh = <floating*>val_ptr_or_null(self.w_hh)
        cdef floating* h_prev = <floating*>self.h_prev_ptr
        cdef const floating* c_prev
        cdef floating* dc_prev
        cdef bint add, final = self.dc_final_pass == self.grad_pass
        cdef Py_ssize_t k, r, n, m = 0
        if B == 0:
            return zero_unwritten_grads(self)
        for k in range(T - 1, -1, -1):
            # dh and dc hold the gradients of step k's h and c: rows [0, m) carried from the
            # step after, rows [m, n) those of the sequences whose last step this is
            r, n = self.first_row(k), self.rows_of(k)
            vec_put(dh + m * H, grad + (r + m) * H, (n - m) * H, False)
            if final:
                vec_put(dc + m * H, dc_final + m * H, (n - m) * H, False)
            else:
                vec_zero(dc + m * H, (n - m) * H)
            add = False
            if k > 0:
                c_prev, dc_prev = cells + self.first_row(k - 1) * H, dc
            elif self.c0 is not None:
                c_prev, dc_prev = <floating*>self.c0.val_ptr, NULL
                if self.c0.requires_grad:
                    add = self.c0.prepare_grad()
                    dc_prev = <floating*>self.c0.grad_ptr
            else:
                c_prev, dc_prev = NULL, NULL
            lstm_pointwise_backward(act + r * G, tanh_c + r * H, c_prev, dh, dc, dgates + r * G,
                                    dc_prev, add, n, H)
            if k > 0:
                vec_put(dh, grad + self.first_row(k - 1) * H, n * H, False)
                gemm(False, False, n, H, G, dgates + r * G, G, w_hh, H, dh, H, True)
            elif self.h0 is not None and self.h0.requires_grad:
                add = self.h0.prepare_grad()
                gemm(False, False, n, H, G, dgates + r * G, G, w_hh, H,
                     <floating*>self.h0.grad_ptr, H, add)
            m = n
        product_backward(self.x, self.w_ih, dgates, self.n_rows, I, G)
        if self.w_hh is not None and self.w_hh.requires_grad:
            add = self.w_hh.prepare_grad()
            if T > 1:       # every step after the first, against the hidden state before it
                if self.step_rows != NULL:      # packed: those rows of each step's previous one
                    for k in range(1, T):
                        vec_put(h_prev + (self.step_start[k] - B) * H,
                                hs + self.step_start[k - 1] * H, self.step_rows[k] * H, False)
                    gemm(True, False, G, H, self.n_rows - B, dgates + B * G, G, h_prev, H,
                         <floating*>self.w_hh.grad_ptr, H, add)
                else:
                    gemm(True, False, G, H, (T - 1) * B, dgates + (0 if self.reverse else B * G), G,
                         hs + (B * H if self.reverse else 0), H, <floating*>self.w_hh.grad_ptr, H, add)
                add = True
            if self.h0 is not None:
                gemm(True, False, G, H, B, dgates + self.first_row(0) * G, G,
                     <floating*>self.h0.val_ptr, H, <floating*>self.w_hh.grad_ptr, H, add)
        if not bias_backward(self.b_ih, dgates, self.n_rows, G) or not copy_bias_grad(self.b_ih, self.b_hh):
            bias_backward(self.b_hh, dgates, self.n_rows, G)
        return 0


@cython.no_gc
cdef class LSTMFinalCell(Variable):
    """Value (batch, H): the cell state after the last step of its input, an LSTMSequence
    (packed: each sequence's after its own last step). Its gradient goes to the sequence's
    dc_final, which the sequence's backward starts from."""
    cdef LSTMSequence seq
    cdef Py_ssize_t offset          # unpacked: the last step's cell state in seq.cells, in elements

    cdef int run_forward(self) except -1 nogil:
        cdef Py_ssize_t r, H = self.seq.H, size = element_size(self.f64)
        if self.seq.last_row == NULL:
            put_values(self.val_ptr, self.seq.cells_ptr + self.offset * size, self.size, False,
                       self.f64)
            return 0
        for r in range(self.seq.batch):
            put_values(self.val_ptr + r * H * size, self.seq.cells_ptr + self.seq.last_row[r] * H * size,
                       H, False, self.f64)
        return 0

    cdef int run_backward(self) except -1 nogil:
        if not self.seq.prepare_grad():     # its hidden states may take no gradient of their own
            zero_values(self.seq.grad_ptr, self.seq.size, self.f64)
        put_values(self.seq.dc_final_ptr, self.grad_ptr, self.size,
                   self.seq.dc_final_pass == self.seq.grad_pass, self.f64)
        self.seq.dc_final_pass = self.seq.grad_pass
        return 0


# --------------------------------------------------------------------- GRU

cdef void gru_pointwise(const floating* b_ih, const floating* b_hh, const floating* h_prev,
                        floating* gi, floating* gh, floating* h, Py_ssize_t batch,
                        Py_ssize_t H) noexcept nogil:
    """gi = x @ W_ih^T and gh = h @ W_hh^T (batch, 3H), without biases; gh is ignored when
    h_prev is NULL (a zero state). Computes h and leaves in place what the backward
    needs: gi = [r z n] after the nonlinearities, gh[2H:] = h @ W_hn + b_hn.

    r = sigmoid(gi_r + b_ir + gh_r + b_hr), z likewise,
    n = tanh(gi_n + b_in + r * (gh_n + b_hn)), h = (1 - z) * n + z * h_prev.
    """
    cdef Py_ssize_t r, j
    cdef floating* a
    cdef floating* e
    cdef floating rr, z, n, ghn
    for r in range(batch):
        a = gi + r * 3 * H
        e = gh + r * 3 * H
        for j in range(H):
            if h_prev != NULL:
                rr = s_sigmoid(a[j] + b_ih[j] + e[j] + b_hh[j])
                z = s_sigmoid(a[H + j] + b_ih[H + j] + e[H + j] + b_hh[H + j])
                ghn = e[2 * H + j] + b_hh[2 * H + j]
            else:
                rr = s_sigmoid(a[j] + b_ih[j] + b_hh[j])
                z = s_sigmoid(a[H + j] + b_ih[H + j] + b_hh[H + j])
                ghn = b_hh[2 * H + j]
            n = s_tanh(a[2 * H + j] + b_ih[2 * H + j] + rr * ghn)
            a[j], a[H + j], a[2 * H + j], e[2 * H + j] = rr, z, n, ghn
            h[r * H + j] = (1 - z) * n + (z * h_prev[r * H + j] if h_prev != NULL else 0)


cdef void gru_pointwise_backward(const floating* act, const floating* gh, const floating* h_prev,
                                 const floating* g, floating* dgi, floating* dgh,
                                 Py_ssize_t batch, Py_ssize_t H) noexcept nogil:
    """dgi, dgh (batch, 3H): the gradients of x @ W_ih + b_ih and of h @ W_hh + b_hh."""
    cdef Py_ssize_t r, j, k
    cdef const floating* a
    cdef floating rr, z, n, dn, dr, dz
    for r in range(batch):
        a = act + r * 3 * H
        for j in range(H):
            k = r * 3 * H + j
            rr, z, n = a[j], a[H + j], a[2 * H + j]
            dn = g[r * H + j] * (1 - z) * (1 - n * n)
            dr = dn * gh[k + 2 * H] * rr * (1 - rr)
            dz = g[r * H + j] * ((h_prev[r * H + j] if h_prev != NULL else 0) - n) * z * (1 - z)
            dgi[k], dgi[k + H], dgi[k + 2 * H] = dr, dz, dn
            dgh[k], dgh[k + H], dgh[k + 2 * H] = dr, dz, dn * rr


cdef void add_scaled_product(floating* out, const floating* a, const floating* b, Py_ssize_t batch,
                             Py_ssize_t H, Py_ssize_t b_stride, Py_ssize_t b_offset) noexcept nogil:
    """out[r, j] += a[r, j] * b[r * b_stride + b_offset + j]."""
    cdef Py_ssize_t r, j
    for r in range(batch):
        for j in range(H):
            out[r * H + j] += a[r * H + j] * b[r * b_stride + b_offset + j]


@cython.no_gc
cdef class GRUCell(Cell):
    """Value (batch, H): h' of one GRU step from x, optional h and the weights."""
    cdef cnp.ndarray gi, gh, dgi, dgh             # scratch made at build, each (B, 3H)
    cdef char* gi_ptr                             # their data, for the passes
    cdef char* gh_ptr
    cdef char* dgi_ptr
    cdef char* dgh_ptr

    cdef int run_forward(self) except -1 nogil:
        if self.batch == 0:
            return 0
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* out) except -1 nogil:
        cdef int B = self.batch, H = self.H
        cdef floating* gi = <floating*>self.gi_ptr
        cdef floating* gh = <floating*>self.gh_ptr
        cell_products(self, gi, gh, 3 * H)
        gru_pointwise(<floating*>self.b_ih.val_ptr, <floating*>self.b_hh.val_ptr,
                      <floating*>val_ptr_or_null(self.h), gi, gh, out, B, H)
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* grad) except -1 nogil:
        cdef int B = self.batch, H = self.H
        cdef floating* dgi = <floating*>self.dgi_ptr
        cdef floating* dgh = <floating*>self.dgh_ptr
        if B == 0:
            return zero_unwritten_grads(self)
        gru_pointwise_backward(<floating*>self.gi_ptr, <floating*>self.gh_ptr,
                               <floating*>val_ptr_or_null(self.h), grad, dgi, dgh, B, H)
        cell_backward(self, dgi, dgh, 3 * H)
        if self.h is not None and self.h.requires_grad:                 # dh += g * z
            add_scaled_product(<floating*>self.h.grad_ptr, grad, <floating*>self.gi_ptr, B, H,
                               3 * H, H)
        return 0


cdef int _check(str op, str what, object v, tuple shape, Variable like) except -1:
    cdef Variable checked = require_float(op, v, what)
    if checked._shape != shape:
        raise ValueError(f"{op}: {what} must have shape {shape}, got {checked._shape}")
    same_dtype(op, like, checked)
    same_device(op, like, checked)
    return 0


cdef int _wire_cell(str op, Cell node, Variable x, object h, object weight_ih, object weight_hh,
                    object bias_ih, object bias_hh, object sequence, Py_ssize_t B, Py_ssize_t I,
                    Py_ssize_t H) except -1:
    """Give a CPU cell node its operands, its (batch, input_size, hidden_size) and the
    sequence's transposed weights (None: it reads the weights)."""
    node.x, node.h, node.w_ih, node.w_hh, node.b_ih, node.b_hh = (x, h, weight_ih, weight_hh,
                                                                  bias_ih, bias_hh)
    node.batch, node.n_in, node.H = B, I, H
    if sequence is None:
        return 0
    if not isinstance(sequence, SequenceWeights):
        raise TypeError(f"{op}: sequence must be a SequenceWeights or None, got "
                        f"{type(sequence).__name__}")
    node.refresh = (<SequenceWeights>sequence).adopt(op, node.w_ih, node.w_hh)
    node.cols = sequence
    return 0


cdef tuple _input_sizes(str op, object x, tuple axes, object bias, str bias_name, int gates):
    """x's shape, named by `axes` (its last "input_size"), and hidden_size, from a bias of
    shape (gates * H,): (..., input_size, hidden_size)."""
    cdef Variable vx = require_float(op, x, "x")
    if len(vx._shape) != len(axes):
        raise ValueError(f"{op}: x must have shape ({', '.join(axes)}), got {vx._shape}")
    cdef tuple bshape = require_float(op, bias, bias_name)._shape
    if len(bshape) != 1 or bshape[0] % gates or bshape[0] == 0:
        raise ValueError(f"{op}: {bias_name} must have shape ({gates} * hidden_size,), got {bshape}")
    cdef Py_ssize_t I = vx._shape[len(axes) - 1], H = bshape[0] // gates
    if I == 0:
        raise ValueError(f"{op}: x has no features (shape {vx._shape})")
    if vx.size // I > INT_MAX or I > INT_MAX or gates * H > INT_MAX:
        raise ValueError(f"{op}: x {vx._shape} and {bias_name} {bshape} exceed BLAS's 32-bit "
                         f"dimension limit")
    return vx._shape + (H,)


cdef int _check_operands(str op, Variable x, int gates, object weight_ih, object weight_hh,
                         object bias_ih, object bias_hh, Py_ssize_t B, Py_ssize_t I, Py_ssize_t H,
                         str h_name, object h, str c_name=None, object c=None) except -1:
    """The weights of a cell of `gates` gates, input_size I and hidden_size H, in PyTorch's
    layout, and its state of batch B, each Variable or None: GRU's h, or LSTM's h and c (with
    c_name; both given, or neither)."""
    _check(op, "weight_ih", weight_ih, (gates * H, I), x)
    _check(op, "weight_hh", weight_hh, (gates * H, H), x)
    _check(op, "bias_ih", bias_ih, (gates * H,), x)
    _check(op, "bias_hh", bias_hh, (gates * H,), x)
    if c_name is not None and (h is None) != (c is None):
        raise ValueError(f"{op}: give both {h_name} and {c_name}, or neither (a zero state)")
    if h is not None:
        _check(op, h_name, h, (B, H), x)
    if c is not None:
        _check(op, c_name, c, (B, H), x)
    return 0


cdef cnp.ndarray _work_block(const Py_ssize_t* sizes, char*** slots, int n, bint f64):
    """One uninitialised allocation for a fused node's `n` work buffers: buffer k, of sizes[k]
    elements, at *slots[k] (NULL when sizes[k] is 0), each from a cache line of its own on.
    Returns the array that holds them."""
    cdef Py_ssize_t k, total = CACHE_LINE
    for k in range(n):
        total += _whole_lines(sizes[k] * element_size(f64))
    cdef cnp.npy_intp dims[1]
    dims[0] = total
    cdef char* data
    cdef cnp.ndarray block = keep_data(<cnp.ndarray>cnp.PyArray_EMPTY(1, dims, cnp.NPY_UINT8, 0), &data)
    data += _whole_lines(<size_t>data) - <size_t>data
    for k in range(n):
        slots[k][0] = data if sizes[k] else NULL
        data += _whole_lines(sizes[k] * element_size(f64))
    return block


cdef inline Py_ssize_t _whole_lines(Py_ssize_t nbytes) noexcept nogil:
    return (nbytes + CACHE_LINE - 1) // CACHE_LINE * CACHE_LINE


cdef cnp.ndarray _zeros(Py_ssize_t rows, Py_ssize_t cols, bint f64, char** data):
    """A zeroed (rows, cols) buffer of a fused node, its data pointer in *data (np.zeros
    without parsing a shape and a dtype: a cell or sequence node makes up to nine)."""
    cdef cnp.npy_intp dims[2]
    dims[0], dims[1] = rows, cols
    return keep_data(<cnp.ndarray>cnp.PyArray_ZEROS(2, dims, cnp.NPY_FLOAT64 if f64 else cnp.NPY_FLOAT32, 0),
                     data)


def lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh, sequence=None):
    """One LSTM step in one node; returns hc of shape (2, batch, H): h' = hc[0], c' = hc[1].

    x (batch, I); h and c (batch, H), or both None for a zero state; the
    weights in PyTorch's layout, weight_ih (4H, I), weight_hh (4H, H), bias_ih
    and bias_hh (4H,), gates in PyTorch's order i, f, g, o:
    gates = x @ weight_ih.T + bias_ih + h @ weight_hh.T + bias_hh,
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g), h' = sigmoid(o) * tanh(c').
    All float Variables of one dtype. `sequence`: a SequenceWeights shared by
    the steps of one sequence (fa.nn.LSTM passes one), or None. fa.nn.LSTMCell
    calls it.

    >>> hc = lstm_cell(x, None, None, w_ih, w_hh, b_ih, b_hh)   # x (1, 16), H = 32
    >>> h, c = hc[0], hc[1]                                     # each (1, 32)
    """
    cdef str op = "lstm_cell"
    B, I, H = _input_sizes(op, x, ("batch", "input_size"), bias_ih, "bias_ih", 4)
    cdef Variable vx = <Variable>x
    _check_operands(op, vx, 4, weight_ih, weight_hh, bias_ih, bias_hh, B, I, H, "h", h, "c", c)
    if (dev := backend_of(vx)) is not None:
        return dev.lstm_cell(vx, h, c, weight_ih, weight_hh, bias_ih, bias_hh, H)
    cdef LSTMCell node = LSTMCell.__new__(LSTMCell)
    _wire_cell(op, node, vx, h, weight_ih, weight_hh, bias_ih, bias_hh, sequence, B, I, H)
    node.c = c
    cdef bint f64 = vx.f64
    node.act = _zeros(B, 4 * H, f64, &node.act_ptr)
    node.tanh_c = _zeros(B, H, f64, &node.tanh_c_ptr)
    node.dgates = _zeros(B, 4 * H, f64, &node.dgates_ptr)
    # without a state, weight_hh takes no part (and receives no gradient)
    inputs = (vx, weight_ih, bias_ih, bias_hh) + ((weight_hh, h, c) if h is not None else ())
    init_node(node, op, inputs, (2, B, H), vx.f64)
    return finish(node)


def lstm_sequence(x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh, reverse=False,
                  return_state=False, batch_sizes=None):
    """An LSTM over a whole sequence in one node; returns its hidden states hs of shape
    (T, batch, H), hs[t] the state after the step at time t, or with return_state
    (hs, (h, c)): also the state after the last step run, each (batch, H).

    x (T, batch, I); h0 and c0 (batch, H), the state before the first step, or both None
    for a zero state; the weights as lstm_cell's (PyTorch's layout and gate order). The
    steps run t = 0, 1, ..., T - 1, or with `reverse` t = T - 1 down to 0 (the backward
    direction of a bidirectional LSTM: hs[t] is still the state at time t, and the last
    step run is t = 0). The same values as lstm_cell stepped over x[0], x[1], ... (or
    reversed), computed with the input products of all the steps as one GEMM.
    fa.nn.LSTM calls it on a 3-D input. On a device, the steps are its lstm_cell's.

    The packed form (PyTorch's PackedSequence's layout) runs sequences of different lengths
    in one call: `batch_sizes` lists, per time step, how many sequences have a step there
    (each at least 1 and none above the one before: the sequences sorted longest first), x
    is (N, I), N = sum(batch_sizes): the rows of time 0, one a sequence, then those of time
    1 (of the first batch_sizes[1] sequences), ...; hs is (N, H), row for row, and the final
    h and c (batch_sizes[0], H) each sequence's after its own last step. It takes no
    `reverse` (reverse each sequence's rows instead) and runs on the CPU.

    >>> hs = lstm_sequence(x, None, None, w_ih, w_hh, b_ih, b_hh)   # x (20, 1, 16): hs (20, 1, 32)
    >>> hs, (h, c) = lstm_sequence(x, h0, c0, w_ih, w_hh, b_ih, b_hh, reverse=True,
    ...                            return_state=True)               # h is hs[0]
    >>> hs = lstm_sequence(x, None, None, w_ih, w_hh, b_ih, b_hh,
    ...                    batch_sizes=[2, 2, 1])                   # x (5, 16): hs (5, 32)
    """
    cdef str op = "lstm_sequence"
    cdef cnp.ndarray packing = None
    cdef Py_ssize_t T, B, I, H, N
    if batch_sizes is None:
        T, B, I, H = _input_sizes(op, x, ("T", "batch", "input_size"), bias_ih, "bias_ih", 4)
        if T == 0:
            raise ValueError(f"{op}: x has no time steps (shape {(<Variable>x)._shape})")
        N = T * B
    else:
        N, I, H = _input_sizes(op, x, ("rows", "input_size"), bias_ih, "bias_ih", 4)
        packing = _packing(op, batch_sizes, N)
        T, B = len(batch_sizes), packing[0]
    cdef Variable vx = <Variable>x
    _check_operands(op, vx, 4, weight_ih, weight_hh, bias_ih, bias_hh, B, I, H, "h0", h0, "c0", c0)
    reverse = check_flag(op, "reverse", reverse)
    return_state = check_flag(op, "return_state", return_state)
    if packing is not None and reverse:
        raise ValueError(f"{op}: the packed form (batch_sizes) takes no reverse; reverse the "
                         f"rows of each sequence instead")
    if (dev := backend_of(vx)) is not None:
        if packing is not None:
            raise NotImplementedError(f"{op}: the packed form (batch_sizes) runs on the CPU; x "
                                      f"is not a CPU Variable ({vx!r})")
        hs, h, c = dev.lstm_sequence(vx, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh, H, reverse)
        return (hs, (h, c)) if return_state else hs
    cdef LSTMSequence node = LSTMSequence.__new__(LSTMSequence)
    # from a zero state, one step takes no part of weight_hh (and gives it no gradient)
    cdef bint recurrent = T > 1 or h0 is not None
    cdef char* packed
    node.x, node.w_ih, node.b_ih, node.b_hh = vx, weight_ih, bias_ih, bias_hh
    node.w_hh = weight_hh if recurrent else None
    node.h0, node.c0 = h0, c0
    node.reverse = reverse
    node.steps, node.batch, node.n_in, node.H, node.n_rows = T, B, I, H, N
    cdef bint f64 = vx.f64
    if packing is not None:
        node.packing = keep_data(packing, &packed)
        node.step_rows = <int64_t*>packed
        node.step_start = node.step_rows + T
        node.last_row = node.step_rows + 2 * T
    cdef Py_ssize_t[10] slot_sizes = [N * 4 * H, N * 4 * H, N * H, N * H, B * H, B * H, B * H,
                                      (N - B) * H if packing is not None and T > 1 else 0,
                                      H * 4 * H if recurrent and B >= TRANSPOSED_FROM else 0,
                                      I * N if 1 < N and N * 4 * H * I <= SMALL_PRODUCT else 0]
    cdef char** slots[10]
    slots[:] = [&node.act_ptr, &node.dgates_ptr, &node.cells_ptr, &node.tanh_c_ptr, &node.dh_ptr,
                &node.dc_ptr, &node.dc_final_ptr, &node.h_prev_ptr, &node.w_hh_t_ptr, &node.x_t_ptr]
    node.work = _work_block(slot_sizes, slots, 10, f64)
    inputs = (vx, weight_ih, bias_ih, bias_hh) + ((weight_hh,) if recurrent else ()) \
        + ((h0, c0) if h0 is not None else ())
    init_node(node, op, inputs, vx._shape[:len(vx._shape) - 1] + (H,), vx.f64)
    finish(node)
    if not return_state:
        return node
    last = node.time_of(T - 1) if packing is None else packing[2 * T:]
    return node, (getitem(node, last), _final_cell(node))


cdef cnp.ndarray _packing(str op, object batch_sizes, Py_ssize_t rows):
    """The packed form's int64 [step rows (T), step first rows (T), each sequence's last row
    (batch)] from batch_sizes, checked against x's rows."""
    sizes = np.asarray(batch_sizes)
    if sizes.ndim != 1 or sizes.size == 0 or sizes.dtype.kind not in "iu":
        raise TypeError(f"{op}: batch_sizes must be a non-empty 1-D sequence of integers, got "
                        f"{batch_sizes!r}")
    sizes = sizes.astype(np.int64)
    if sizes[sizes.size - 1] < 1 or (sizes.size > 1 and (np.diff(sizes) > 0).any()):
        raise ValueError(f"{op}: batch_sizes must be at least 1 and non-increasing (the "
                         f"sequences sorted longest first), got {sizes.tolist()}")
    if sizes.sum() != rows:
        raise ValueError(f"{op}: batch_sizes add up to {sizes.sum()}, but x has {rows} rows")
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    # sequence r's last step is the last whose rows include it
    lengths = (sizes[None, :] > np.arange(sizes[0])[:, None]).sum(axis=1)
    return np.concatenate([sizes, starts, starts[lengths - 1] + np.arange(sizes[0])]).astype(np.int64)


cdef Variable _final_cell(LSTMSequence seq):
    """The node of seq's cell state after its last step (LSTMFinalCell)."""
    cdef LSTMFinalCell node = LSTMFinalCell.__new__(LSTMFinalCell)
    node.seq = seq
    node.offset = seq.time_of(seq.steps - 1) * seq.batch * seq.H
    init_node(node, "lstm_sequence", (seq,), (seq.batch, seq.H), seq.f64)
    return finish(node)


def gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh, sequence=None):
    """One GRU step in one node; returns h' of shape (batch, H).

    x (batch, I); h (batch, H), or None for a zero state; the weights in
    PyTorch's layout, weight_ih (3H, I), weight_hh (3H, H), bias_ih and bias_hh
    (3H,), gates in PyTorch's order r, z, n (W_ir: rows 0..H of weight_ih):
    r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr), z likewise,
    n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)), h' = (1 - z) * n + z * h.
    All float Variables of one dtype. `sequence`: a SequenceWeights shared by
    the steps of one sequence (fa.nn.GRU passes one), or None. fa.nn.GRUCell
    calls it.

    >>> h = gru_cell(x, None, w_ih, w_hh, b_ih, b_hh)       # x (1, 16), H = 32: h (1, 32)
    >>> h = gru_cell(x, h, w_ih, w_hh, b_ih, b_hh)
    """
    cdef str op = "gru_cell"
    B, I, H = _input_sizes(op, x, ("batch", "input_size"), bias_ih, "bias_ih", 3)
    cdef Variable vx = <Variable>x
    _check_operands(op, vx, 3, weight_ih, weight_hh, bias_ih, bias_hh, B, I, H, "h", h)
    if (dev := backend_of(vx)) is not None:
        return dev.gru_cell(vx, h, weight_ih, weight_hh, bias_ih, bias_hh, H)
    cdef GRUCell node = GRUCell.__new__(GRUCell)
    _wire_cell(op, node, vx, h, weight_ih, weight_hh, bias_ih, bias_hh, sequence, B, I, H)
    cdef bint f64 = vx.f64
    node.gi = _zeros(B, 3 * H, f64, &node.gi_ptr)
    node.gh = _zeros(B, 3 * H, f64, &node.gh_ptr)
    node.dgi = _zeros(B, 3 * H, f64, &node.dgi_ptr)
    node.dgh = _zeros(B, 3 * H, f64, &node.dgh_ptr)
    # without a state, weight_hh takes no part (and receives no gradient)
    inputs = (vx, weight_ih, bias_ih, bias_hh) + ((weight_hh, h) if h is not None else ())
    init_node(node, op, inputs, (B, H), vx.f64)
    return finish(node)

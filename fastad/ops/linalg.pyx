"""Matrix products: matmul and linear (BLAS for large products, C loops for tiny ones), vector_dot.

All buffers are row-major (C order). BLAS is column-major, and a row-major
matrix is its own transpose in column-major order, so the row-major product
C = op(A) @ op(B) is computed as the column-major C^T = op(B)^T @ op(A)^T.
"""
from math import prod

cimport cython
import numpy as np
cimport numpy as cnp
from libc.limits cimport INT_MAX
from libc.stdint cimport int64_t
from cython cimport floating
from fastad._engine.blas cimport gemm

from fastad._engine.graph cimport (Variable, TwoInputs, init_node, finish, require_float, backend_of,
                              float_operands)
from fastad._engine.graph import register_methods
from fastad._engine.loops cimport vec_zero, row_axpy, row_scale, row_dot
from fastad._engine.broadcast cimport broadcast_shapes
from fastad.ops.reduction import sum as _sum
from fastad.ops.shape import getitem as _getitem, reshape as _reshape, transpose as _transpose

cnp.import_array()

#: Its ops in the `fa.` namespace.
__all__ = ["matmul", "linear", "vector_dot", "einsum"]

# Products with fewer multiply-adds (m*n*k) than this run in the C loops below;
# larger ones call BLAS, whose per-call overhead the loops beat on tiny shapes.
# Measured with bench/matmul_crossover.py (one matmul, forward + backward
# replay; time with the loops / time with BLAS, float64 and float32, 2-core
# x86-64 development machine, OpenBLAS 0.3.31): work <= 125 (2^3..5^3, 1x8x8,
# 16x2x2, 8x4x4): 0.7-1.0; work 216-512: 0.8-1.3, BLAS ahead unless m == 1
# (6^3 1.09, 16x4x4 1.20, 8^3 1.26, 1x16x16 0.86, 1x24x24 0.9); tall thin
# products lose in the loops from 128 on (32x2x2 1.2-1.5); 16^3 2.5-2.9,
# 32^3 5-6. The loops' gain is at most ~0.15 us per replay, so BLAS takes
# everything from 128 on.
BLAS_MIN_WORK = 128

cdef Py_ssize_t blas_min_work = BLAS_MIN_WORK


def _set_blas_min_work(Py_ssize_t work):
    """Set the BLAS crossover for matmuls built from now on; returns the old one.

    For tests and benchmarks that force one path (0: always BLAS; a huge
    number: always the C loops).
    """
    global blas_min_work
    old = blas_min_work
    blas_min_work = work
    return old


# ------------------------------------------------------------ GEMM kernel
# Row-major C (M x N) = op(A) @ op(B), or C += ... when `add`. M, N, K > 0. BLAS, or (`blas`
# false: a small product) plain loops.

cdef void mm(bint ta, bint tb, int M, int N, int K, const floating* A, const floating* B,
            floating* C, bint add, bint blas) noexcept nogil:
    """C = op(A) @ op(B), op transposing its matrix when its flag is set (one at most): A is
    M x K (K x M with ta), B is K x N (N x K with tb)."""
    cdef Py_ssize_t i, j, p
    cdef floating a
    cdef floating* c
    if blas:
        gemm(ta, tb, M, N, K, A, M if ta else K, B, K if tb else N, C, N, add)
        return
    if tb:                                  # C[i, j] = A row i . B row j
        for i in range(M):
            for j in range(N):
                a = row_dot(A + i * K, B + j * K, K)
                C[i * N + j] = C[i * N + j] + a if add else a
        return
    if not add:
        vec_zero(C, <Py_ssize_t>M * N)
    for i in range(M):                      # C row i += op(A)[i, p] * B row p
        c = C + i * N
        for p in range(K):
            a = A[p * M + i] if ta else A[i * K + p]
            for j in range(N):
                c[j] += a * B[p * N + j]


# ------------------------------------------------------------------ matmul

@cython.no_gc
cdef class Matmul(TwoInputs):
    """`batch` products C_t (m x n) = A_t (m x k) @ op(B_t), op(B_t) (k x n): B_t itself, or
    with `tb` the transpose of a B_t stored (n x k) (fa.linear's (out, in) weight).

    A_t starts at a + t * a_step and B_t at b + t * b_step. An a_step of 0
    means one left matrix shared by every product: its gradient sums over them.
    A shared right matrix never needs that: its batch is folded into m.
    """
    cdef int m, n, k
    cdef Py_ssize_t batch, a_step, b_step
    cdef bint blas
    cdef bint tb                    # B_t is stored (n x k) and used transposed
    cdef bint empty                 # some dimension is 0: no product to compute

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* C) except -1 nogil:
        cdef Py_ssize_t t, c_step = <Py_ssize_t>self.m * self.n
        if self.empty:
            vec_zero(C, self.size)      # k == 0: a sum of nothing (else the output is empty)
            return 0
        for t in range(self.batch):
            mm(False, self.tb, self.m, self.n, self.k, <floating*>self.a.val_ptr + t * self.a_step,
               <floating*>self.b.val_ptr + t * self.b_step, C + t * c_step, False, self.blas)
        return 0

    cdef int _gradient(self, char* g, bint to_a, bint add) except -1 nogil:
        return (self._gradient_into(<double*>g, to_a, add) if self.f64
                else self._gradient_into(<float*>g, to_a, add))

    cdef int _gradient_into(self, floating* g, bint to_a, bint add) except -1 nogil:
        """dA_t = dC_t @ op(B_t)^T into a (to_a; a shared by the batch sums them), or
        d op(B_t) = A_t^T @ dC_t into b (a b shared by a batch was folded into one product);
        with tb, dB_t = dC_t^T @ A_t, op(B_t)^T being B_t itself."""
        cdef const floating* G = <floating*>self.grad_ptr
        cdef Py_ssize_t t, c_step = <Py_ssize_t>self.m * self.n
        if self.empty:
            if not add:
                vec_zero(g, self.a.size if to_a else self.b.size)
            return 0
        for t in range(self.batch):
            if to_a:
                mm(False, not self.tb, self.m, self.k, self.n, G + t * c_step,
                   <floating*>self.b.val_ptr + t * self.b_step, g + t * self.a_step,
                   add or (self.a_step == 0 and t > 0), self.blas)
            elif self.tb:
                mm(True, False, self.n, self.k, self.m, G + t * c_step,
                   <floating*>self.a.val_ptr + t * self.a_step, g + t * self.b_step, add, self.blas)
            else:
                mm(True, False, self.k, self.n, self.m, <floating*>self.a.val_ptr + t * self.a_step,
                   G + t * c_step, g + t * self.b_step, add, self.blas)
        return 0


def matmul(a, b):
    """Matrix product a @ b with numpy's rules for these shapes.

    - (m, k) @ (k, n) -> (m, n)
    - (..., m, k) @ (..., k, n) -> (..., m, n), equal leading (batch) axes
    - (..., m, k) @ (k, n) or (m, k) @ (..., k, n): the 2-D side is shared by
      the whole batch and its gradient sums over it
    - a 1-D operand is a row vector on the left, a column vector on the right,
      and that axis is dropped from the result: (k,) @ (k,) -> ()

    Either side may be a numpy array or number (a constant in the other's
    dtype). Large products use BLAS, tiny ones C loops (see BLAS_MIN_WORK).

    >>> x = fa.Input(np.ones((2, 3))); w = fa.Parameter(np.ones((3, 4)))
    >>> fa.matmul(x, w).shape
    (2, 4)
    """
    cdef Variable va, vb
    va, vb = float_operands("matmul", a, b)
    cdef tuple sa = va._shape, sb = vb._shape
    if not sa or not sb:
        raise ValueError(f"matmul: operands need at least 1 axis, got shapes {sa} and {sb} "
                         f"(multiply by a scalar with *)")
    cdef tuple a_mat = sa if len(sa) >= 2 else (1,) + sa       # (..., m, k)
    cdef tuple b_mat = sb if len(sb) >= 2 else sb + (1,)       # (..., k, n)
    cdef Py_ssize_t na = len(a_mat), nb = len(b_mat)
    cdef Py_ssize_t m = a_mat[na - 2], k = a_mat[na - 1], n = b_mat[nb - 1]
    if b_mat[nb - 2] != k:
        raise ValueError(f"matmul: shapes {sa} and {sb} do not match: the inner dimensions "
                         f"differ ({k}, the last axis of a, vs {b_mat[nb - 2]}, "
                         f"{'the only' if len(sb) == 1 else 'the second-to-last'} axis of b)")
    cdef tuple a_batch = a_mat[:na - 2], b_batch = b_mat[:nb - 2]
    if a_batch and b_batch and a_batch != b_batch:
        raise ValueError(f"matmul: shapes {sa} and {sb} have different batch axes {a_batch} and "
                         f"{b_batch}; they must be equal, or one operand 1-D or 2-D")
    cdef tuple out_shape = ((a_batch or b_batch) + ((m,) if len(sa) >= 2 else ())
                            + ((n,) if len(sb) >= 2 else ()))
    cdef Py_ssize_t batch
    if a_batch and not b_batch:
        # A batch times one matrix is a single product: stack the batch's rows.
        m *= prod(a_batch)
        batch = 1
    else:
        batch = prod(a_batch or b_batch)
    cdef Py_ssize_t a_step = m * k if a_batch and b_batch else 0
    cdef Py_ssize_t b_step = k * n if b_batch else 0
    if (dev := backend_of(va)) is not None:
        return dev.matmul(va, vb, out_shape, m, k, n, batch, a_step, b_step)
    return _product("matmul", va, vb, out_shape, m, k, n, batch, a_step, b_step, False)


cdef Variable _product(str op, Variable a, Variable b, tuple out_shape, Py_ssize_t m, Py_ssize_t k,
                       Py_ssize_t n, Py_ssize_t batch, Py_ssize_t a_step, Py_ssize_t b_step, bint tb):
    """The Matmul node of `op` (matmul or linear) on the CPU: `batch` products of (m x k)
    by (k x n), B read transposed when `tb`."""
    if m > INT_MAX or n > INT_MAX or k > INT_MAX:
        raise ValueError(f"{op}: shapes {a._shape} and {b._shape} exceed BLAS's 32-bit dimension limit")
    cdef Matmul node = Matmul.__new__(Matmul)
    node.a, node.b = a, b
    node.batch, node.a_step, node.b_step = batch, a_step, b_step
    node.m, node.n, node.k = m, n, k
    node.tb = tb
    node.empty = m == 0 or n == 0 or k == 0 or batch == 0
    node.blas = m * n * k >= blas_min_work
    init_node(node, op, (a, b), out_shape, a.f64)
    return finish(node)


def linear(x, weight, bias=None):
    """x @ weight.T + bias, as torch.nn.functional.linear: weight is (out_features,
    in_features), x is (..., in_features), the result (..., out_features).

    One product node reads the weight transposed in place (a BLAS flag, or the C
    loops' row-by-row dot), so no transposed copy is made, at the build or at a
    replay; bias (out_features,), if given, is added after it. Either of x and
    weight may be a numpy array (a constant).

    >>> x = fa.Input(np.ones((2, 3))); w = fa.Parameter(np.ones((4, 3)))
    >>> fa.linear(x, w).shape
    (2, 4)
    """
    cdef Variable vx, vw
    vx, vw = float_operands("linear", x, weight)
    cdef tuple sx = vx._shape, sw = vw._shape
    if len(sw) != 2:
        raise ValueError(f"linear: weight must have shape (out_features, in_features), got {sw}")
    if not sx or sx[len(sx) - 1] != sw[1]:
        raise ValueError(f"linear: the last axis of x must have size in_features = {sw[1]} "
                         f"(weight {sw} is (out_features, in_features)), got x of shape {sx}")
    if bias is not None and require_float("linear", bias, "bias")._shape != (sw[0],):
        raise ValueError(f"linear: bias must have shape (out_features,) = ({sw[0]},), got "
                         f"{(<Variable>bias)._shape}")
    if backend_of(vx) is not None:
        y = matmul(vx, _transpose(vw))
    else:
        y = _product("linear", vx, vw, sx[:len(sx) - 1] + (sw[0],), prod(sx[:len(sx) - 1]), sw[1],
                     sw[0], 1, 0, 0, True)
    return y if bias is None else y + bias


# -------------------------------------------------------------- vector_dot

cdef inline Py_ssize_t row_of(const int64_t* rows, Py_ssize_t r) noexcept nogil:
    """Row r of an operand: rows[r] through a row map, r itself without one (NULL)."""
    return rows[r] if rows != NULL else r


@cython.no_gc
cdef class VectorDot(Variable):
    """y[r] = sum_j a[r, j] * b[r, j] over the last axis (length d). When the leading
    axes broadcast, output r reads row rows_a[r] of a and rows_b[r] of b; an operand
    whose rows are the output's own (one row each, in order) has no map (None)."""
    cdef Variable a, b
    cdef Py_ssize_t d
    cdef cnp.ndarray rows_a, rows_b          # int64 row maps, or None for an operand whose rows are the output's
    cdef const int64_t* ra
    cdef const int64_t* rb

    cdef int run_forward(self) except -1 nogil:
        return self._forward(<double*>self.val_ptr) if self.f64 else self._forward(<float*>self.val_ptr)

    cdef int _forward(self, floating* y) except -1 nogil:
        """y[r] = a row . b row: rows ra[r] of a and rb[r] of b (row r where a map is NULL)."""
        cdef const floating* a = <floating*>self.a.val_ptr
        cdef const floating* b = <floating*>self.b.val_ptr
        cdef const int64_t* ra = self.ra
        cdef const int64_t* rb = self.rb
        cdef Py_ssize_t r, d = self.d
        for r in range(self.size):
            y[r] = row_dot(a + row_of(ra, r) * d, b + row_of(rb, r) * d, d)
        return 0

    cdef int run_backward(self) except -1 nogil:
        return self._backward(<double*>self.grad_ptr) if self.f64 else self._backward(<float*>self.grad_ptr)

    cdef int _backward(self, const floating* g) except -1 nogil:
        if self.a.requires_grad:
            self._grad_into(g, self.a, self.b, self.ra, self.rb)
        if self.b.requires_grad:
            self._grad_into(g, self.b, self.a, self.rb, self.ra)
        return 0

    cdef int _grad_into(self, const floating* g, Variable x, Variable other, const int64_t* rx,
                        const int64_t* ro) except -1 nogil:
        """gx[r, :] = g[r] * other row (or += when adding), the other row being ro[r] (r when
        ro is NULL); with a row map rx, gx[rx[r], :] += g[r] * other row (rows shared by
        several outputs add up, into zeros)."""
        cdef bint add = x.prepare_grad()
        cdef const floating* other_rows = <floating*>other.val_ptr
        cdef floating* gx = <floating*>x.grad_ptr
        cdef Py_ssize_t r, d = self.d
        if rx != NULL and not add:
            vec_zero(gx, x.size)
        for r in range(self.size):
            if rx != NULL or add:
                row_axpy(gx + row_of(rx, r) * d, other_rows + row_of(ro, r) * d, d, g[r])
            else:
                row_scale(gx + row_of(rx, r) * d, other_rows + row_of(ro, r) * d, d, g[r])
        return 0


cdef cnp.ndarray _row_map(tuple lead, tuple out_lead):
    """For each output row, the row of an operand whose leading axes `lead` broadcast to
    `out_lead` (int64, C order)."""
    rows = np.arange(prod(lead), dtype=np.int64).reshape(lead)
    return np.ascontiguousarray(np.broadcast_to(rows, out_lead).ravel())


def vector_dot(a, b):
    """Row-wise dot product over the last axis: out[...] = sum(a[..., j] * b[..., j]).

    a and b have at least one axis and last axes of one length d; the leading
    axes broadcast as in `a * b`, and the result drops the last axis:
    (n, d), (n, d) -> (n,); (d,), (d,) -> (); (1, d), (k, d) -> (k,) (one centre
    against k context rows). Either side may be a numpy array (a constant).

    >>> u = fa.Parameter(np.ones((5, 3))); v = fa.Parameter(np.ones((5, 3)))
    >>> fa.vector_dot(u, v).shape
    (5,)
    """
    cdef Variable va, vb
    va, vb = float_operands("vector_dot", a, b)
    if not va._shape or not vb._shape:
        raise ValueError(f"vector_dot: operands of shapes {va._shape} and {vb._shape}; both need "
                         f"a last axis to sum over (use * for scalars)")
    cdef Py_ssize_t na = len(va._shape), nb = len(vb._shape)
    cdef tuple out_shape = va._shape[:na - 1]
    if va._shape != vb._shape:
        if va._shape[na - 1] != vb._shape[nb - 1]:    # no wraparound here
            raise ValueError(f"vector_dot: the last axes must have one length, got shapes "
                             f"{va._shape} and {vb._shape}")
        out_shape = broadcast_shapes("vector_dot", va._shape, vb._shape)   # names both if they clash
        out_shape = out_shape[:len(out_shape) - 1]
    if (dev := backend_of(va)) is not None:
        if va._shape != vb._shape:
            return dev.broadcast_vector_dot(va, vb)
        return dev.vector_dot(va, vb, va._shape[na - 1])
    cdef VectorDot node = VectorDot.__new__(VectorDot)
    node.a = va
    node.b = vb
    node.d = va._shape[na - 1]
    if va._shape[:na - 1] != out_shape:
        node.rows_a = _row_map(va._shape[:na - 1], out_shape)
        node.ra = <const int64_t*>cnp.PyArray_DATA(node.rows_a)
    if vb._shape[:nb - 1] != out_shape:
        node.rows_b = _row_map(vb._shape[:nb - 1], out_shape)
        node.rb = <const int64_t*>cnp.PyArray_DATA(node.rows_b)
    init_node(node, "vector_dot", (va, vb), out_shape, va.f64)
    return finish(node)


# ------------------------------------------------------------------ einsum
# Planned onto existing nodes: a repeated letter in one operand takes its diagonal
# (a gather), a letter in one operand only and not in the output is summed out,
# and two operands become one (batched) matmul between transposes and reshapes.

_EINSUM_FORMS = ("one or two operands; subscripts of letters a-z, A-Z, one per axis, with an "
                "explicit output ('ij,jk->ik') or numpy's implicit one ('ij,jk'); a letter "
                "repeated in one operand takes its diagonal ('ii->i', 'ii->'); no '...' and no "
                "broadcasting of length-1 axes")


cdef object _einsum_error(str subscripts, str problem):
    return ValueError(f"einsum: subscripts {subscripts!r}: {problem} (supported: {_EINSUM_FORMS})")


cdef tuple _einsum_parse(str subscripts, tuple operands):
    """(input terms, output term, letter -> length), every check done."""
    text = subscripts.replace(" ", "")
    if "." in text:
        raise _einsum_error(subscripts, "'...' (ellipsis) is not supported")
    if text.count("->") > 1 or ("-" in text.replace("->", "")) or (">" in text.replace("->", "")):
        raise _einsum_error(subscripts, "'->' must appear at most once, between the inputs "
                                        "and the output")
    lhs, arrow, out = text.partition("->")
    terms = lhs.split(",")
    if len(terms) != len(operands):
        raise _einsum_error(subscripts, f"{len(terms)} input term(s) for {len(operands)} "
                                        f"operand(s)")
    sizes = {}
    for i, (term, v) in enumerate(zip(terms, operands)):
        bad = [c for c in term if not (c.isascii() and c.isalpha())]
        if bad:
            raise _einsum_error(subscripts, f"{bad[0]!r} in input term {i} is not a letter")
        shape = (<Variable>v)._shape
        if len(term) != len(shape):
            raise _einsum_error(subscripts, f"input term {i} {term!r} names {len(term)} axes, "
                                            f"but operand {i} has shape {shape}")
        for c, d in zip(term, shape):
            if sizes.setdefault(c, d) != d:
                raise _einsum_error(subscripts, f"letter {c!r} has length {sizes[c]} in one place "
                                                f"and {d} in operand {i} (shape {shape})")
    if not arrow:
        letters = "".join(terms)
        out = "".join(sorted(c for c in set(letters) if letters.count(c) == 1))
    for c in out:
        if not (c.isascii() and c.isalpha()):
            raise _einsum_error(subscripts, f"{c!r} in the output is not a letter")
        if c not in sizes:
            raise _einsum_error(subscripts, f"output letter {c!r} is in no input term")
        if out.count(c) > 1:
            raise _einsum_error(subscripts, f"output letter {c!r} appears more than once")
    return terms, out, sizes


cdef tuple _einsum_prepare(Variable v, str term, str keep):
    """v with each letter once (diagonals taken) and the letters not in `keep` summed out."""
    letters = "".join(dict.fromkeys(term))
    if len(letters) < len(term):
        # the diagonal's flat positions, picked by numpy's einsum from an arange of v's shape
        positions = np.einsum(f"{term}->{letters}",
                              np.arange(v.size, dtype=np.int64).reshape(v._shape))
        v = _getitem(_reshape(v, -1), np.ascontiguousarray(positions))
    summed = tuple(i for i, c in enumerate(letters) if c not in keep)
    if summed:
        v = _sum(v, summed)
        letters = "".join(c for c in letters if c in keep)
    return v, letters


cdef Variable _arranged(Variable v, str letters, str order, tuple shape):
    """v (axes named by `letters`) transposed into `order`, then reshaped to `shape`."""
    axes = tuple(letters.index(c) for c in order)
    if axes != tuple(range(len(axes))):
        v = _transpose(v, axes)
    return v if v._shape == shape else _reshape(v, shape)


def einsum(subscripts, a, b=None):
    """Einstein summation over one or two operands, as numpy.einsum / torch.einsum.

    'ij,jk->ik' (matmul), 'bij,bjk->bik' (batched), 'i,i->' (dot), 'i,j->ij'
    (outer), 'ij->ji' (transpose), 'ii->' (trace), 'ii->i' (diagonal),
    'ij->j' (sum), and any mix of these; without '->' the output is numpy's
    (the letters seen once, in alphabetical order). Two operands become one
    (batched) matmul, which uses BLAS, between transposes and reshapes; no
    new kernel. Subscripts that do not parse or fit the operands raise
    ValueError naming what is wrong and the supported forms.

    >>> a = fa.Parameter(np.ones((2, 3))); b = fa.Parameter(np.ones((3, 4)))
    >>> fa.einsum("ij,jk->ki", a, b).shape
    (4, 2)
    """
    if not isinstance(subscripts, str):
        raise TypeError(f"einsum: subscripts must be a str, got {type(subscripts).__name__}")
    cdef tuple operands
    if b is None:
        operands = (require_float("einsum", a, "a"),)
    else:
        operands = float_operands("einsum", a, b)
    terms, out, sizes = _einsum_parse(subscripts, operands)
    if len(operands) == 1:
        v, letters = _einsum_prepare(<Variable>operands[0], terms[0], out)
        return _arranged(v, letters, out, tuple(sizes[c] for c in out))
    va, la = _einsum_prepare(<Variable>operands[0], terms[0], out + terms[1])
    vb, lb = _einsum_prepare(<Variable>operands[1], terms[1], out + terms[0])
    batch = "".join(c for c in la if c in lb and c in out)
    summed = "".join(c for c in la if c in lb and c not in out)
    a_only = "".join(c for c in la if c not in lb)
    b_only = "".join(c for c in lb if c not in la)
    nb, m, k, n = (prod(sizes[c] for c in part) for part in (batch, a_only, summed, b_only))
    lead = (nb,) if batch else ()
    product = matmul(_arranged(va, la, batch + a_only + summed, lead + (m, k)),
                     _arranged(vb, lb, batch + summed + b_only, lead + (k, n)))
    letters = batch + a_only + b_only
    product = _arranged(product, "", "", tuple(sizes[c] for c in letters))   # a reshape only
    return _arranged(product, letters, out, tuple(sizes[c] for c in out))


register_methods(matmul=matmul)   # Variable's operators and methods

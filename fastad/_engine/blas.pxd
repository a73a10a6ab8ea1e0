# Row-major GEMM through SciPy's BLAS, shared by linalg and the fused layers.
from cython cimport floating
from scipy.linalg.cython_blas cimport sgemm, dgemm, sgemv, dgemv
from fastad._engine.loops cimport outer


cdef inline void gemv(char trans, int m, int n, const floating* A, int lda, const floating* x,
                      int incx, floating beta, floating* y, int incy) noexcept nogil:
    """Column-major y = op(A) x + beta y, A stored m x n."""
    cdef floating one = 1
    if floating is double:
        dgemv(&trans, &m, &n, &one, <double*>A, &lda, <double*>x, &incx, &beta, y, &incy)
    else:
        sgemv(&trans, &m, &n, &one, <float*>A, &lda, <float*>x, &incx, &beta, y, &incy)


cdef inline void gemm(bint trans_a, bint trans_b, int M, int N, int K, const floating* A, int lda,
                      const floating* B, int ldb, floating* C, int ldc, bint add) noexcept nogil:
    """Row-major C (M x N) = op(A) @ op(B), or C += ... when `add`. M, N, K > 0;
    ld* are the row lengths of the stored matrices. BLAS is column-major, so this
    computes C^T = op(B)^T op(A)^T. A product with one row or one column is a
    matrix-vector product (GEMM would first copy the whole matrix into its
    packed layout, which at batch 1 costs more than the product), and a product over one
    inner index (K == 1, as a weight's gradient from one example) an outer product: row i
    of C is op(A)[i, 0] times B's row, in one C loop (GEMM would pack both first)."""
    cdef char ta = b'T' if trans_a else b'N'
    cdef char tb = b'T' if trans_b else b'N'
    cdef char transpose = b'T', keep = b'N'
    cdef floating one = 1
    cdef floating beta = 1 if add else 0
    if M == 1:      # c = op(B)^T a: B's memory is column-major N x K ('N') or K x N ('T')
        if trans_b:
            gemv(transpose, K, N, B, ldb, A, lda if trans_a else 1, beta, C, 1)
        else:
            gemv(keep, N, K, B, ldb, A, lda if trans_a else 1, beta, C, 1)
        return
    if N == 1:      # c = op(A) b, written down C's column (stride ldc)
        if trans_a:
            gemv(keep, M, K, A, lda, B, 1 if trans_b else ldb, beta, C, ldc)
        else:
            gemv(transpose, K, M, A, lda, B, 1 if trans_b else ldb, beta, C, ldc)
        return
    if K == 1 and not trans_b:
        outer(C, ldc, A, 1 if trans_a else lda, B, M, N, add)
        return
    if floating is double:
        dgemm(&tb, &ta, &N, &M, &K, &one, <double*>B, &ldb, <double*>A, &lda, &beta, C, &ldc)
    else:
        sgemm(&tb, &ta, &N, &M, &K, &one, <float*>B, &ldb, <float*>A, &lda, &beta, C, &ldc)

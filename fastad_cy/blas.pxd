# Row-major GEMM through SciPy's BLAS, shared by linalg and the fused layers.
from cython cimport floating
from scipy.linalg.cython_blas cimport sgemm, dgemm


cdef inline void gemm(bint trans_a, bint trans_b, int M, int N, int K, const floating* A, int lda,
                      const floating* B, int ldb, floating* C, int ldc, bint add) noexcept nogil:
    """Row-major C (M x N) = op(A) @ op(B), or C += ... when `add`. M, N, K > 0;
    ld* are the row lengths of the stored matrices. BLAS is column-major, so this
    computes C^T = op(B)^T op(A)^T."""
    cdef char ta = b'T' if trans_a else b'N'
    cdef char tb = b'T' if trans_b else b'N'
    cdef floating one = 1
    cdef floating beta = 1 if add else 0
    if floating is double:
        dgemm(&tb, &ta, &N, &M, &K, &one, <double*>B, &ldb, <double*>A, &lda, &beta, C, &ldc)
    else:
        sgemm(&tb, &ta, &N, &M, &K, &one, <float*>B, &ldb, <float*>A, &lda, &beta, C, &ldc)

"""Matrix products on a GPU: matmul through cuBLAS, vector_dot in cuda/linalg.cu.

fastad/ops/linalg.pyx checks the shapes and works out the product's layout
(m, k, n, the batch, and which operand the batch shares), then sends device
operands here.
"""
from fastad.cuda.ops.common import I32, I64, InputGrads, cleared, launch, make_node, backend, fill


class Matmul(InputGrads):
    """C_t = A_t @ B_t for t in the batch; a_step/b_step 0 mean one matrix shared by all t."""

    def __init__(self, m, k, n, batch, a_step, b_step):
        self.m, self.k, self.n, self.batch = m, k, n, batch
        self.a_shared, self.b_shared = a_step == 0, b_step == 0
        self.empty = m == 0 or n == 0 or k == 0 or batch == 0

    def _mats(self, node):
        a, b = node.parents
        A = a.value.reshape((1 if self.a_shared else self.batch, self.m, self.k))
        B = b.value.reshape((1 if self.b_shared else self.batch, self.k, self.n))
        return A, B

    def forward(self, node):
        if self.empty:
            fill(node.value, 0)
            return
        A, B = self._mats(node)
        C = node.value.reshape((self.batch, self.m, self.n))
        gemm = backend().gemm
        for t in range(self.batch):
            gemm(A[0 if self.a_shared else t], B[0 if self.b_shared else t], C[t])

    def backward_into(self, node, k, x, grad, accumulate):
        if self.empty:
            cleared(grad, accumulate)
            return
        A, B = self._mats(node)
        G = node.grad.reshape((self.batch, self.m, self.n))
        gemm = backend().gemm
        if k == 0:                                # (a and b may be one leaf: a @ a)
            shared, target = self.a_shared, grad.reshape(A.shape)
            for t in range(self.batch):           # dA_t = dC_t @ B_t^T; a shared batch sums
                gemm(G[t], B[0 if self.b_shared else t], target[0 if shared else t],
                     trans_b=True, beta=1.0 if accumulate or (shared and t) else 0.0)
        else:
            shared, target = self.b_shared, grad.reshape(B.shape)
            for t in range(self.batch):           # dB_t = A_t^T @ dC_t
                gemm(A[0 if self.a_shared else t], G[t], target[0 if shared else t],
                     trans_a=True, beta=1.0 if accumulate or (shared and t) else 0.0)


def matmul(a, b, out_shape, m, k, n, batch, a_step, b_step):
    """The product node; the arguments are fastad/ops/linalg.pyx's checked layout."""
    return make_node("matmul", (a, b), out_shape, a.dtype, Matmul(m, k, n, batch, a_step, b_step))


class VectorDot(InputGrads):
    """y[r] = sum_j a[r, j] * b[r, j] over the last axis, of length d."""

    def __init__(self, d):
        self.d = I64(d)

    def forward(self, node):
        a, b = node.parents
        launch("row_dot_forward", node.dtype, node.size, a.value, b.value, node.value,
               I64(node.size), self.d)

    def backward_into(self, node, k, x, grad, accumulate):
        other = node.parents[1 - k]
        launch("row_dot_backward", node.dtype, x.size, other.value, node.grad, grad,
               I64(node.size), self.d, I32(accumulate))


def vector_dot(a, b, d):
    return make_node("vector_dot", (a, b), a.shape[:-1], a.dtype, VectorDot(d))

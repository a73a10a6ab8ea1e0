"""Every op on a GPU, one module per family as on the CPU (fastad/ops/<family>.pyx):
each op's forward and backward stand side by side and launch the kernels of
`cuda/<family>.cu` (GEMM goes to cuBLAS).

The public functions (`fa.exp`, `fa.matmul`, ...) come here when an operand
lives on a GPU. Each builds a `FunctionNode` (its value in a `DeviceStorage`,
fastad/cuda/storage.py) whose `fn` is one of the op classes:
`forward(node)` writes `node.value` in place from the inputs' values, and
`backward(node)` pushes `node.grad` into each input that needs a gradient,
writing the first contribution of a pass and adding the later ones (the
`accumulate` flag every backward kernel takes). The public function has
checked its arguments before it sends device operands here; what only a device
needs checking (ids a later `set_value` must keep in range) is checked here,
on the host, before any kernel.

fastad.cuda's backend (registered with the engine, `register_backend`) is made
of these functions: the engine hands the public ops here by their names in
`fastad.ops.backend.Backend.PRIMITIVES`, and calls `to_host` for a device array given
as data. The fused recurrent cells have no function here: they are composed of these
ops by the backend base.
"""
from fastad.cuda.ops.common import to_host
from fastad.cuda.ops.elementwise import unary, binary, where
from fastad.cuda.ops.reduction import reduce, softmax, arg_reduce, cumsum
from fastad.cuda.ops.shape import reshape, transpose, gather, join
from fastad.cuda.ops.linalg import matmul, vector_dot
from fastad.cuda.ops.conv import conv, pool, batch_norm
from fastad.cuda.ops.sparse import take, take_along_axis, embedding_bag
from fastad.cuda.ops.losses import cross_entropy, nll_loss, pair_loss
from fastad.cuda.ops.dropout import dropout_mask

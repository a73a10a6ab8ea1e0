"""Shape ops on a GPU (cuda/shape.cu): reshape, transpose, indexing, concat and stack.

reshape aliases its input's buffer (the value is a view; the input's buffer
never moves). transpose and indexing gather by flat input position, computed
once on the host at build (by fastad/ops/shape.pyx for indexing); their backward
scatter-adds (an integer-array index may repeat a position). concat and stack
put each input at its positions in the output.
"""
import numpy as np

from fastad.cuda.ops.common import I32, I64, InputGrads, cleared, launch, make_node, from_host


class View(InputGrads):
    """The output is the input's buffer with another shape."""

    def forward(self, node):
        pass                      # the value aliases the input's buffer

    def backward_into(self, node, k, x, grad, accumulate):
        launch("copy_or_add", node.dtype, node.size, node.grad, grad, I64(node.size), I32(accumulate))


def reshape(x, shape):
    """x's buffer viewed as `shape` (checked by fastad/ops/shape.pyx's reshape)."""
    return make_node("reshape", (x,), shape, x.dtype, View(), value=x.value.reshape(shape))


class Gather(InputGrads):
    """out[i] = x[positions[i]]; the backward scatter-adds."""

    def __init__(self, positions):
        self.positions = from_host(positions.reshape(-1))

    def forward(self, node):
        x = node.parents[0]
        launch("gather_positions", node.dtype, node.size, x.value, self.positions, node.value,
               I64(node.size), I32(0))

    def backward_into(self, node, k, x, grad, accumulate):
        launch("scatter_add_positions", node.dtype, node.size, node.grad, self.positions,
               cleared(grad, accumulate), I64(node.size))


def gather(op, x, positions):
    """The op node whose element i is x's element positions[i] (positions: host int64,
    every value in [0, x.size), of the output's shape)."""
    return make_node(op, (x,), positions.shape, x.dtype, Gather(positions))


def transpose(x, axes):
    """x with axes permuted (`axes` already checked by fastad/ops/shape.pyx)."""
    positions = np.arange(x.size, dtype=np.int64).reshape(x.shape).transpose(axes)
    return gather("transpose", x, np.asarray(positions, order="C"))


class Join(InputGrads):
    """Input k's elements go to output positions `positions[k]`."""

    def __init__(self, positions):
        self.positions = [from_host(p) for p in positions]

    def forward(self, node):
        for x, positions in zip(node.parents, self.positions):
            launch("put_positions", node.dtype, x.size, x.value, positions, node.value, I64(x.size))

    def backward_into(self, node, k, x, grad, accumulate):
        launch("gather_positions", node.dtype, x.size, node.grad, self.positions[k], grad,
               I64(x.size), I32(accumulate))


def join(op, xs, out_shape, axis):
    """concat/stack of xs (checked by fastad/ops/shape.pyx) into out_shape: input i
    fills a block of width prod(xs[i].shape[axis:]) in every row of the outer axes."""
    outer = int(np.prod(out_shape[:axis], dtype=np.int64))
    widths = [int(np.prod(x.shape[axis:], dtype=np.int64)) for x in xs]
    row = sum(widths)
    positions, start = [], 0
    for width in widths:
        block = np.arange(outer, dtype=np.int64)[:, None] * row + start + np.arange(width)
        positions.append(np.ascontiguousarray(block.reshape(-1)))
        start += width
    return make_node(op, xs, out_shape, xs[0].dtype, Join(positions))

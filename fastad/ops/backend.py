"""The device backend interface: what the engine asks of a device package.

The CPU backend is the compiled path of each op (its node in fastad/ops/<family>.pyx).
A device package subclasses `Backend` and registers ONE instance with the engine
(`fastad._engine.graph.register_backend`); each public op, when an operand lives on that
device, hands its checked arguments to the method of the same family. A backend
implements what it speeds up: every name in `Backend.PRIMITIVES`. The fused CPU nodes
(`lstm_cell`, `lstm_sequence`, `gru_cell`, `ranking`, `gather_dot`, and vector_dot's
broadcasting node) are methods here, composed of the ops they are made of, so any device runs them with
its primitives (on a GPU the cost is a launch per op, which a captured graph replays at
once); a backend may override them.
"""
from functools import reduce

from fastad.ops.elementwise import add, mul, sigmoid, sub, tanh
from fastad.ops.linalg import linear, vector_dot
from fastad.ops.reduction import sum as reduce_sum
from fastad.ops.ranking import margin_loss
from fastad.ops.shape import getitem, reshape, stack
from fastad.ops.sparse import take


class Backend:
    """A device backend. Storage (a device Variable's value and gradient):
    `canonical_device(name)` checks a device name and returns its canonical form;
    `from_host(device, array)` and `empty(device, shape, dtype)` make a storage (its
    type documents what the engine calls on it); `to_host(array)` copies a device
    array to numpy. Optimizers: `DeviceState(params, device, lr)`, `clip_grad_norm`,
    `clip_grad_value`. Ops: the PRIMITIVES, each building a node on the device."""

    STORAGE = ("canonical_device", "from_host", "empty", "to_host")
    OPTIMIZERS = ("DeviceState", "clip_grad_norm", "clip_grad_value")
    PRIMITIVES = ("unary", "binary", "where", "reduce", "softmax", "arg_reduce", "cumsum",
                  "reshape", "transpose", "gather", "join", "matmul", "vector_dot", "conv", "pool",
                  "batch_norm", "take", "take_along_axis", "embedding_bag", "cross_entropy",
                  "nll_loss", "pair_loss", "dropout_mask")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        missing = [name for name in cls.STORAGE + cls.OPTIMIZERS + cls.PRIMITIVES
                   if not hasattr(cls, name)]
        if missing:
            raise TypeError(f"{cls.__name__}: a device backend needs {', '.join(missing)}")

    def detach(self, x):
        """A view of x's buffer, the node `fa.detach` stops the gradient at (shape.pyx)."""
        return self.reshape(x, x.shape)

    @staticmethod
    def lstm_cell(x, h, c, weight_ih, weight_hh, bias_ih, bias_hh, H):
        """hc (2, batch, H) = [h', c'] with PyTorch's gate order i, f, g, o and weight layout
        (4H, in); the shapes are checked (fastad.ops.fused.lstm_cell)."""
        gates = add(linear(x, weight_ih, bias_ih), bias_hh)
        if h is not None:
            gates = add(gates, linear(h, weight_hh))
        i, f, g, o = (_gate(gates, k, H) for k in range(4))
        c_new = mul(sigmoid(i), tanh(g))
        if c is not None:
            c_new = add(mul(sigmoid(f), c), c_new)
        h_new = mul(sigmoid(o), tanh(c_new))
        return stack([h_new, c_new], 0)

    def lstm_sequence(self, x, h0, c0, weight_ih, weight_hh, bias_ih, bias_hh, H, reverse):
        """(hs, h, c): the hidden states (T, batch, H) of an LSTM over x (T, batch, in), at their
        own time positions, and the state after the last step run, stepping this backend's
        lstm_cell from t = 0 up, or from T - 1 down when `reverse`; the shapes are checked
        (fastad.ops.fused.lstm_sequence)."""
        T = x.shape[0]
        h, c, hs = h0, c0, [None] * T
        for t in (range(T - 1, -1, -1) if reverse else range(T)):
            hc = self.lstm_cell(getitem(x, t), h, c, weight_ih, weight_hh, bias_ih, bias_hh, H)
            h, c = getitem(hc, 0), getitem(hc, 1)
            hs[t] = h
        return stack(hs, 0), h, c

    @staticmethod
    def gru_cell(x, h, weight_ih, weight_hh, bias_ih, bias_hh, H):
        """h' (batch, H) with PyTorch's gate order r, z, n and weight layout (3H, in); the
        shapes are checked (fastad.ops.fused.gru_cell)."""
        gi = linear(x, weight_ih, bias_ih)
        gh = bias_hh if h is None else linear(h, weight_hh, bias_hh)
        r = sigmoid(add(_gate(gi, 0, H), _gate(gh, 0, H)))
        z = sigmoid(add(_gate(gi, 1, H), _gate(gh, 1, H)))
        n = tanh(add(_gate(gi, 2, H), mul(r, _gate(gh, 2, H))))
        h_new = mul(sub(1.0, z), n)
        if h is not None:
            h_new = add(h_new, mul(z, h))
        return h_new

    @staticmethod
    def broadcast_vector_dot(a, b):
        """vector_dot of operands whose leading axes broadcast (checked by
        fastad.ops.linalg.vector_dot): the product, then a sum over the last axis."""
        return reduce_sum(mul(a, b), axis=-1)

    @staticmethod
    def ranking(user_table, users, item_table, pos, neg, item_bias, reduction, regularization=0.0,
                loss="bpr", weights=None):
        """ranking_margin's margins (reduction None), or ranking_loss's `loss` of them with
        that reduction, L2 term and weights (margin_loss, the same pointwise loss); the
        arguments are checked (fastad.ops.ranking)."""
        margin = vector_dot(take(user_table, users), sub(take(item_table, pos), take(item_table, neg)))
        if item_bias is not None:
            margin = add(margin, reshape(sub(take(item_bias, pos), take(item_bias, neg)), margin.shape))
        if reduction is None:
            return margin
        if regularization == 0 and weights is None:
            return margin_loss(margin, loss, reduction)
        # the L2 term joins each triple's loss, and the weight scales it, before the reduction,
        # as the CPU node's do
        losses = margin_loss(margin, loss, "none")
        if regularization != 0:
            rows = [take(user_table, users), take(item_table, pos), take(item_table, neg)]
            squares = [vector_dot(row, row) for row in rows]
            if item_bias is not None:
                squares += [reshape(mul(take(item_bias, ids), take(item_bias, ids)), margin.shape)
                            for ids in (pos, neg)]
            losses = add(losses, mul(reduce(add, squares), 0.5 * regularization))
        if weights is not None:
            losses = mul(losses, weights)
        total = losses if reduction == "none" else reduce_sum(losses)
        return mul(total, 1.0 / losses.size) if reduction == "mean" else total

    @staticmethod
    def gather_dot(a_table, a_ids, b_table, b_ids):
        """gather_dot's scores: each B row of b_ids dotted with its A row of a_ids; the
        arguments are checked (fastad.ops.gather_dot)."""
        a_rows = reshape(take(a_table, a_ids), a_ids.shape + (1, a_table.shape[1]))
        return vector_dot(take(b_table, b_ids), a_rows)


def _gate(gates, k, H):
    """Gate k (columns k*H to (k+1)*H) along the last axis."""
    return getitem(gates, (Ellipsis, slice(k * H, (k + 1) * H)))

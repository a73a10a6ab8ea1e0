"""Layers: Linear, Embedding, LSTMCell/GRUCell, LSTM/GRU, LayerNorm.

Weights are Parameters initialised as PyTorch does by default; a `generator`
(numpy Generator) makes the initialisation reproducible. Linear and the
recurrent cells store weights as (in, out) so that `x @ W` needs no transpose.
"""
import math

import numpy as np

import fastad as fa
from fastad.nn.module import Module


def _uniform(shape, bound, generator, dtype):
    rng = generator if generator is not None else np.random.default_rng()
    return fa.Parameter(rng.uniform(-bound, bound, size=shape), dtype=dtype)


def _check_sizes(who, **sizes):
    for name, value in sizes.items():
        if not isinstance(value, (int, np.integer)) or value <= 0:
            raise ValueError(f"{who}: {name} must be a positive integer, got {value!r}")


class Linear(Module):
    """y = x @ weight + bias, for x of shape (..., in_features).

    weight: (in_features, out_features); bias: (out_features,). Both start
    uniform in +-1/sqrt(in_features), as in PyTorch.

    >>> layer = fa.nn.Linear(784, 128)
    >>> h = layer(fa.Input(np.zeros((32, 784))))       # shape (32, 128)
    """

    def __init__(self, in_features, out_features, bias=True, dtype=None, generator=None):
        super().__init__()
        _check_sizes("Linear", in_features=in_features, out_features=out_features)
        bound = 1 / math.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((in_features, out_features), bound, generator, dtype)
        self.bias = _uniform((out_features,), bound, generator, dtype) if bias else None

    def forward(self, x):
        y = x @ self.weight
        return y + self.bias if self.bias is not None else y


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table, with a sparse gradient.

    Call it on an IndexInput (or integer ids) of any shape; the result has
    shape ids.shape + (embedding_dim,). Starts N(0, 1), as in PyTorch.

    >>> emb = fa.nn.Embedding(10_000, 32)
    >>> vectors = emb(fa.IndexInput([5, 42]))          # shape (2, 32)
    """

    def __init__(self, num_embeddings, embedding_dim, dtype=None, generator=None):
        super().__init__()
        _check_sizes("Embedding", num_embeddings=num_embeddings, embedding_dim=embedding_dim)
        rng = generator if generator is not None else np.random.default_rng()
        self.weight = fa.Parameter(rng.standard_normal((num_embeddings, embedding_dim)), dtype=dtype)

    def forward(self, ids):
        return fa.take(self.weight, ids)


def _zeros_state(batch, hidden, like):
    return fa.Input(np.zeros((batch, hidden)), dtype=like.dtype)


class LSTMCell(Module):
    """One LSTM step: `(h, c) = cell(x, (h, c))`; x (batch, input_size).

    Gates in the order input, forget, cell, output, as in PyTorch; a missing
    state starts at zeros. Weights start uniform in +-1/sqrt(hidden_size).

    >>> cell = fa.nn.LSTMCell(16, 32)
    >>> h, c = cell(fa.Input(np.zeros((1, 16))))
    """

    def __init__(self, input_size, hidden_size, dtype=None, generator=None):
        super().__init__()
        _check_sizes("LSTMCell", input_size=input_size, hidden_size=hidden_size)
        bound = 1 / math.sqrt(hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = _uniform((input_size, 4 * hidden_size), bound, generator, dtype)
        self.weight_hh = _uniform((hidden_size, 4 * hidden_size), bound, generator, dtype)
        self.bias = _uniform((4 * hidden_size,), bound, generator, dtype)

    def forward(self, x, state=None):
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"LSTMCell: x must have shape (batch, {self.input_size}), got {x.shape}")
        H = self.hidden_size
        if state is None:
            h = c = _zeros_state(x.shape[0], H, self.bias)
        else:
            h, c = state
        gates = x @ self.weight_ih + h @ self.weight_hh + self.bias
        i = fa.sigmoid(gates[:, :H])
        f = fa.sigmoid(gates[:, H:2 * H])
        g = fa.tanh(gates[:, 2 * H:3 * H])
        o = fa.sigmoid(gates[:, 3 * H:])
        c = f * c + i * g
        return o * fa.tanh(c), c


class GRUCell(Module):
    """One GRU step: `h = cell(x, h)`; x (batch, input_size), PyTorch's equations.

    r = sigmoid(x W_ir + b_ir + h W_hr + b_hr), z likewise,
    n = tanh(x W_in + b_in + r * (h W_hn + b_hn)), h' = (1 - z) * n + z * h.
    """

    def __init__(self, input_size, hidden_size, dtype=None, generator=None):
        super().__init__()
        _check_sizes("GRUCell", input_size=input_size, hidden_size=hidden_size)
        bound = 1 / math.sqrt(hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        self.weight_ih = _uniform((input_size, 3 * hidden_size), bound, generator, dtype)
        self.weight_hh = _uniform((hidden_size, 3 * hidden_size), bound, generator, dtype)
        self.bias_ih = _uniform((3 * hidden_size,), bound, generator, dtype)
        self.bias_hh = _uniform((3 * hidden_size,), bound, generator, dtype)

    def forward(self, x, state=None):
        if x.ndim != 2 or x.shape[1] != self.input_size:
            raise ValueError(f"GRUCell: x must have shape (batch, {self.input_size}), got {x.shape}")
        H = self.hidden_size
        h = _zeros_state(x.shape[0], H, self.bias_ih) if state is None else state
        gi = x @ self.weight_ih + self.bias_ih
        gh = h @ self.weight_hh + self.bias_hh
        r = fa.sigmoid(gi[:, :H] + gh[:, :H])
        z = fa.sigmoid(gi[:, H:2 * H] + gh[:, H:2 * H])
        n = fa.tanh(gi[:, 2 * H:] + r * gh[:, 2 * H:])
        return (1.0 - z) * n + z * h


class _Recurrent(Module):
    """Runs a cell over a list of (batch, input_size) Variables."""

    def forward(self, xs, state=None, return_state=False):
        if isinstance(xs, fa.Variable) or not len(xs):
            raise ValueError(f"{type(self).__name__}: expected a non-empty list of (batch, features) Variables")
        outputs = []
        for x in xs:
            state = self.cell(x, state)
            outputs.append(self._hidden(state))
        return (outputs, state) if return_state else outputs


class LSTM(_Recurrent):
    """An LSTM over a sequence: `hs = layer(xs)`, xs a list of (batch, input_size).

    Returns the list of hidden states; `layer(xs, state, return_state=True)`
    also returns the final (h, c) so a caller can carry it on.
    """

    def __init__(self, input_size, hidden_size, dtype=None, generator=None):
        super().__init__()
        self.cell = LSTMCell(input_size, hidden_size, dtype, generator)

    @staticmethod
    def _hidden(state):
        return state[0]


class GRU(_Recurrent):
    """A GRU over a sequence: `hs = layer(xs)`, xs a list of (batch, input_size)."""

    def __init__(self, input_size, hidden_size, dtype=None, generator=None):
        super().__init__()
        self.cell = GRUCell(input_size, hidden_size, dtype, generator)

    @staticmethod
    def _hidden(state):
        return state


class LayerNorm(Module):
    """Normalise over the last axis: (x - mean) / sqrt(var + eps) * weight + bias."""

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=None):
        super().__init__()
        _check_sizes("LayerNorm", normalized_shape=normalized_shape)
        if eps <= 0:
            raise ValueError(f"LayerNorm: eps must be > 0, got {eps}")
        self.normalized_shape, self.eps = normalized_shape, eps
        self.weight = fa.Parameter(np.ones(normalized_shape), dtype=dtype) if elementwise_affine else None
        self.bias = fa.Parameter(np.zeros(normalized_shape), dtype=dtype) if elementwise_affine else None

    def forward(self, x):
        if not x.shape or x.shape[-1] != self.normalized_shape:
            raise ValueError(f"LayerNorm: the last axis must have size {self.normalized_shape}, got shape {x.shape}")
        centred = x - fa.mean(x, axis=-1, keepdims=True)
        var = fa.mean(fa.square(centred), axis=-1, keepdims=True)
        y = centred / fa.sqrt(var + self.eps)
        return y * self.weight + self.bias if self.weight is not None else y

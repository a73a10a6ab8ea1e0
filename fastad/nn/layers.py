"""Layers: Linear, Embedding, EmbeddingBag, LSTMCell/GRUCell, LSTM/GRU, LayerNorm.

Weights are Parameters with PyTorch's names, layouts and default
initialisation, so `load_state_dict(torch_module.state_dict())` loads a
PyTorch layer; a `generator` (numpy Generator) makes the initialisation
reproducible. Linear and the recurrent cells keep their weights as
(out, in), as PyTorch does; Linear and a cell read them transposed in place
(a BLAS flag), and the steps of an LSTM/GRU sequence share one transposed
copy made once a forward pass (fastad.ops.fused.SequenceWeights), which their
small products read faster. A recurrent step is one fused node
(fastad.ops.fused.lstm_cell / gru_cell), not a dozen small ones, and an LSTM
over a (T, batch, input_size) Variable is one node a direction
(fastad.ops.fused.lstm_sequence).
"""
import math

import numpy as np

from fastad.ops.elementwise import sqrt, square
from fastad._engine.graph import IndexInput, Parameter, Variable
from fastad.ops.reduction import mean
from fastad.ops.linalg import linear
from fastad.ops.fused import SequenceWeights, gru_cell, lstm_cell, lstm_sequence
from fastad.ops.shape import concat, stack
from fastad.ops.sparse import check_positive, embedding, embedding_bag, padding_row, take
from fastad.checks import check_choice, check_flag, check_int, check_number, check_sizes
from fastad.nn.module import Module
from fastad.nn.init import normal_
from fastad import random as fastad_random


def _uniform(shape, bound, rng, dtype):
    return Parameter(rng.uniform(-bound, bound, size=shape), dtype=dtype)


def _check_input(who, x, width):
    """x must be a float Variable whose last axis has `width` elements."""
    if not isinstance(x, Variable) or isinstance(x, IndexInput):
        raise TypeError(f"{who}: expected a float fastad Variable, got {type(x).__name__}")
    if not x.shape or x.shape[-1] != width:
        raise ValueError(f"{who}: the last axis of the input must have size {width}, "
                         f"got shape {x.shape}")


def _check_batch_input(who, x, width):
    _check_input(who, x, width)
    if x.ndim != 2:
        raise ValueError(f"{who}: x must have shape (batch, {width}), got {x.shape}")


def _check_state(who, name, s, shape, axes="(batch, hidden_size)"):
    if not isinstance(s, Variable) or isinstance(s, IndexInput):
        raise TypeError(f"{who}: the state {name} must be a float fastad Variable, "
                        f"got {type(s).__name__}")
    if s.shape != shape:
        raise ValueError(f"{who}: the state {name} must have shape {shape} {axes}, got {s.shape}")


class Linear(Module):
    """y = x @ weight.T + bias, for x of shape (..., in_features) -> (..., out_features).

    weight: (out_features, in_features), as torch.nn.Linear's; bias:
    (out_features,), or none with bias=False. Both start uniform in
    +-1/sqrt(in_features), as in PyTorch. The forward is one `fa.linear`
    node, which reads the weight transposed in place (no copy).

    >>> layer = fa.nn.Linear(784, 128, generator=np.random.default_rng(0))
    >>> layer(fa.Input(np.zeros((32, 784)))).shape
    (32, 128)
    """

    def __init__(self, in_features, out_features, bias=True, dtype=None, generator=None):
        super().__init__()
        in_features, out_features = check_sizes("Linear", in_features=in_features,
                                                out_features=out_features)
        rng = fastad_random.generator("Linear", generator)
        bound = 1 / math.sqrt(in_features)
        self.in_features, self.out_features = in_features, out_features
        self.weight = _uniform((out_features, in_features), bound, rng, dtype)
        self.bias = _uniform((out_features,), bound, rng, dtype) \
            if check_flag("Linear", "bias", bias) else None

    def forward(self, x):
        _check_input("Linear", x, self.in_features)
        return linear(x, self.weight, self.bias)

    def extra_repr(self):
        return f"in_features={self.in_features}, out_features={self.out_features}, " \
               f"bias={self.bias is not None}"


def _given_table(who, weight, dtype):
    """The Parameter over a table given as `_weight=` or to `from_pretrained`, used itself:
    a Parameter as it is, a numpy array adopted without a copy (`Parameter(w, copy=False)`),
    a Hogwild shared handle adopted as `Parameter(handle)` adopts it; 2-D."""
    if isinstance(weight, Parameter):
        if dtype is not None and np.dtype(dtype) != weight.dtype:
            raise TypeError(f"{who}: the given weight is {weight.dtype}, not {np.dtype(dtype)}")
        table = weight
    else:
        try:
            table = Parameter(weight, dtype=dtype, copy=False)
        except (TypeError, ValueError) as err:
            raise type(err)(f"{who}: the given weight is used itself, without a copy, and "
                            f"cannot be: {err}. To train a copy, give "
                            f"np.ascontiguousarray(weight, dtype=np.float32)") from None
    if len(table.shape) != 2:
        raise ValueError(f"{who}: the weight must be 2-D (num_embeddings, embedding_dim), got "
                         f"shape {table.shape}")
    return table


def _table(who, num_embeddings, embedding_dim, weight, dtype, generator, threads):
    """An embedding module's table: `_weight` used itself (checked to be num_embeddings x
    embedding_dim), else a new one drawn N(0, 1) in its own dtype in place."""
    if weight is not None:
        table = _given_table(who, weight, dtype)
        if table.shape != (num_embeddings, embedding_dim):
            raise ValueError(f"{who}: _weight must have shape ({num_embeddings}, "
                             f"{embedding_dim}) (num_embeddings, embedding_dim), got {table.shape}")
        return table
    rng = fastad_random.generator(who, generator)
    # a buffer of the table's size (zeros broadcast: no temporary), then drawn in place
    table = Parameter(np.broadcast_to(np.zeros((), np.float32), (num_embeddings, embedding_dim)),
                      dtype=dtype)
    return normal_(table, generator=rng, threads=threads)


class Embedding(Module):
    """Rows of a (num_embeddings, embedding_dim) table, with a sparse gradient.

    Call it on an IndexInput (or integer ids) of any shape; the result has
    shape ids.shape + (embedding_dim,), and backward touches only the rows
    used. The table starts N(0, 1), as in PyTorch, drawn in its own dtype
    straight into its buffer (`fa.nn.init.normal_`; `threads=` draws a big
    table on that many threads, the same values whatever their number).
    Options as torch.nn.Embedding: `padding_idx` (that row starts at zero and
    gets no gradient), `max_norm` and `norm_type` (looked-up rows longer than
    max_norm are scaled back in place on every forward; see `fa.embedding`).

    `_weight=` (as PyTorch's) gives the table, which the module uses itself,
    without a copy (the zero-copy route for big tables): a C-contiguous,
    writeable float32 (or float64) numpy array, a Parameter, or a Hogwild
    shared handle (`fa.hogwild.share`); `_freeze=True` leaves it untrained.
    `Embedding.from_pretrained(table)` does the same from the table's shape.

    >>> emb = fa.nn.Embedding(10_000, 32, padding_idx=0)
    >>> emb(fa.IndexInput([5, 42])).shape
    (2, 32)
    >>> vectors = np.load("vectors.npy")          # float32 (rows, dim)
    >>> emb = fa.nn.Embedding.from_pretrained(vectors, freeze=False)   # emb.weight.value is vectors
    """

    def __init__(self, num_embeddings, embedding_dim, padding_idx=None, max_norm=None,
                 norm_type=2.0, dtype=None, generator=None, _weight=None, _freeze=False,
                 threads=None):
        super().__init__()
        num_embeddings, embedding_dim = check_sizes("Embedding", num_embeddings=num_embeddings,
                                                    embedding_dim=embedding_dim)
        if max_norm is not None:
            check_positive("Embedding", "max_norm", max_norm, False)
        check_positive("Embedding", "norm_type", norm_type, True)
        freeze = check_flag("Embedding", "_freeze", _freeze)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        if padding_idx is not None:
            padding_idx = padding_row("Embedding", padding_idx, num_embeddings)
        self.padding_idx, self.max_norm, self.norm_type = padding_idx, max_norm, norm_type
        table = _table("Embedding", num_embeddings, embedding_dim, _weight, dtype, generator,
                       threads)
        if _weight is None and padding_idx is not None:
            table.value[padding_idx] = 0.0      # a given table is used as it is, as PyTorch's
        if freeze:
            table.requires_grad = False
        self.weight = table

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, padding_idx=None, max_norm=None,
                        norm_type=2.0):
        """An Embedding over `embeddings` (rows, dim) itself, without a copy, as
        torch.nn.Embedding.from_pretrained: a C-contiguous writeable float32/float64
        numpy array, a Parameter or a Hogwild shared handle. `freeze` (default True)
        leaves it untrained (requires_grad False).

        >>> emb = fa.nn.Embedding.from_pretrained(np.eye(3, dtype=np.float32))
        """
        table = _given_table("Embedding.from_pretrained", embeddings, None)
        return cls(*table.shape, padding_idx=padding_idx, max_norm=max_norm,
                   norm_type=norm_type, _weight=table,
                   _freeze=check_flag("Embedding.from_pretrained", "freeze", freeze))

    def forward(self, ids):
        if self.padding_idx is None and self.max_norm is None:
            return take(self.weight, ids)
        return embedding(self.weight, ids, self.padding_idx, self.max_norm, self.norm_type)

    def extra_repr(self):
        options = "".join(f", {name}={getattr(self, name)}" for name in ("padding_idx", "max_norm")
                          if getattr(self, name) is not None)
        return f"{self.num_embeddings}, {self.embedding_dim}{options}"


class EmbeddingBag(Module):
    """Sums or means of bags of rows of a (num_embeddings, embedding_dim) table.

    `bag(ids, offsets=None, per_sample_weights=None)` as torch.nn.EmbeddingBag (see
    `fa.embedding_bag`):
    1-D ids with offsets where each bag starts (or, with
    include_last_offset=True, one more offset ending the last bag), or 2-D ids
    with one bag per row; the result is (bags, embedding_dim). `mode` is "sum"
    or "mean". The gradient is sparse (only the rows used) unless sparse=False;
    under plain SGD, `fa.train` steps the rows inside backward. The table starts
    N(0, 1), as in PyTorch, drawn in its own dtype straight into its buffer
    (`threads=`: on that many threads, the same values whatever their number).

    `_weight=` (as PyTorch's) gives the table, used itself without a copy: a
    C-contiguous writeable float32 (or float64) numpy array, a Parameter, or a
    Hogwild shared handle (`fa.hogwild.share`); see also `from_pretrained`.

    >>> bag = fa.nn.EmbeddingBag(1000, 16, mode="sum")
    >>> bag(fa.IndexInput([3, 9, 9, 4]), fa.IndexInput([0, 3])).shape
    (2, 16)
    >>> big = fa.nn.EmbeddingBag(2_050_000, 50, threads=4)   # float32, drawn on 4 threads
    """

    def __init__(self, num_embeddings, embedding_dim, mode="mean", sparse=True,
                 include_last_offset=False, dtype=None, generator=None, _weight=None,
                 threads=None):
        super().__init__()
        who = "EmbeddingBag"
        num_embeddings, embedding_dim = check_sizes(who, num_embeddings=num_embeddings,
                                                    embedding_dim=embedding_dim)
        self.num_embeddings, self.embedding_dim = num_embeddings, embedding_dim
        self.mode = check_choice(who, "mode", mode, ("sum", "mean"))
        self.sparse = check_flag(who, "sparse", sparse)
        self.include_last_offset = check_flag(who, "include_last_offset", include_last_offset)
        self.weight = _table(who, num_embeddings, embedding_dim, _weight, dtype, generator, threads)

    @classmethod
    def from_pretrained(cls, embeddings, freeze=True, mode="mean", sparse=True,
                        include_last_offset=False):
        """An EmbeddingBag over `embeddings` (rows, dim) itself, without a copy, as
        torch.nn.EmbeddingBag.from_pretrained (see `Embedding.from_pretrained`).

        >>> bag = fa.nn.EmbeddingBag.from_pretrained(vectors, freeze=False, mode="sum")
        """
        table = _given_table("EmbeddingBag.from_pretrained", embeddings, None)
        bag = cls(*table.shape, mode=mode, sparse=sparse, include_last_offset=include_last_offset,
                  _weight=table)
        if check_flag("EmbeddingBag.from_pretrained", "freeze", freeze):
            bag.weight.requires_grad = False
        return bag

    def forward(self, ids, offsets=None, per_sample_weights=None):
        return embedding_bag(self.weight, ids, offsets, self.mode, self.include_last_offset,
                             self.sparse, per_sample_weights)

    def extra_repr(self):
        return f"{self.num_embeddings}, {self.embedding_dim}, mode={self.mode!r}, " \
               f"sparse={self.sparse}"


class _Recurrent(Module):
    """What the LSTM and GRU cells and layers share: their sizes, the repr, and the
    Parameters, named as PyTorch's (`weight_ih`, `weight_hh`, `bias_ih`, `bias_hh`, with
    `_suffix` after each: "" for a cell, "_l0" for a layer, "_l0_reverse" for a layer's
    backward direction) and laid out as PyTorch's: weight_ih (gates * hidden_size,
    input_size), weight_hh (gates * hidden_size, hidden_size), the biases
    (gates * hidden_size,), all uniform in +-1/sqrt(hidden_size)."""

    _gates = None
    _suffix = ""

    def __init__(self, input_size, hidden_size, dtype=None, generator=None):
        super().__init__()
        self._draw(input_size, hidden_size, dtype, generator, (self._suffix,))

    def _draw(self, input_size, hidden_size, dtype, generator, suffixes):
        """Check the sizes and draw the Parameters of each suffix in turn, as PyTorch orders them."""
        who = type(self).__name__
        input_size, hidden_size = check_sizes(who, input_size=input_size, hidden_size=hidden_size)
        rng = fastad_random.generator(who, generator)
        bound = 1 / math.sqrt(hidden_size)
        self.input_size, self.hidden_size = input_size, hidden_size
        rows = self._gates * hidden_size
        for suffix in suffixes:
            for name, shape in (("weight_ih", (rows, input_size)), ("weight_hh", (rows, hidden_size)),
                                ("bias_ih", (rows,)), ("bias_hh", (rows,))):
                setattr(self, name + suffix, _uniform(shape, bound, rng, dtype))

    def _weights(self, suffix=None):
        """(weight_ih, weight_hh, bias_ih, bias_hh) of one direction (`suffix`, by default the
        first), as the fused nodes take them."""
        return tuple(getattr(self, name + (self._suffix if suffix is None else suffix))
                     for name in ("weight_ih", "weight_hh", "bias_ih", "bias_hh"))

    def extra_repr(self):
        return f"{self.input_size}, {self.hidden_size}"


def _lstm_step(who, module, x, state, sequence=None):
    """(h', c') of one LSTM step of `module`'s weights from x and state (h, c) or None
    (`sequence`: the SequenceWeights of the steps of one sequence, or None)."""
    _check_batch_input(who, x, module.input_size)
    h = c = None
    if state is not None:
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise TypeError(f"{who}: state must be a pair (h, c), got {type(state).__name__}")
        h, c = state
        _check_state(who, "h", h, (x.shape[0], module.hidden_size))
        _check_state(who, "c", c, (x.shape[0], module.hidden_size))
    hc = lstm_cell(x, h, c, *module._weights(), sequence)   # one fused node
    return hc[0], hc[1]


def _gru_step(who, module, x, state, sequence=None):
    """h' of one GRU step of `module`'s weights from x and state h or None (`sequence` as
    _lstm_step's)."""
    _check_batch_input(who, x, module.input_size)
    if state is not None:
        _check_state(who, "h", state, (x.shape[0], module.hidden_size))
    return gru_cell(x, state, *module._weights(), sequence)


class LSTMCell(_Recurrent):
    """One LSTM step: `h, c = cell(x, (h, c))`; x (batch, input_size), h and c (batch, hidden_size).

    torch.nn.LSTMCell's equations, Parameters and layout, gates in the order
    input, forget, cell, output: gates = x @ weight_ih.T + bias_ih +
    h @ weight_hh.T + bias_hh; c' = f * c + i * g; h' = o * tanh(c'). A
    missing state means zeros. weight_ih is (4 * hidden_size, input_size),
    weight_hh (4 * hidden_size, hidden_size), bias_ih and bias_hh
    (4 * hidden_size,); all start uniform in +-1/sqrt(hidden_size). h' and c'
    are two views of one fused node of shape (2, batch, hidden_size).

    >>> cell = fa.nn.LSTMCell(16, 32)
    >>> h, c = cell(fa.Input(np.zeros((1, 16))))
    >>> h, c = cell(fa.Input(np.ones((1, 16))), (h, c))
    """

    _gates = 4

    def forward(self, x, state=None):
        return _lstm_step("LSTMCell", self, x, state)


class GRUCell(_Recurrent):
    """One GRU step: `h = cell(x, h)`; x (batch, input_size), h (batch, hidden_size).

    torch.nn.GRUCell's equations, Parameters and layout, gates in the order
    reset, update, new (W_ir: the first hidden_size rows of weight_ih):
    r = sigmoid(x W_ir^T + b_ir + h W_hr^T + b_hr), z likewise,
    n = tanh(x W_in^T + b_in + r * (h W_hn^T + b_hn)), h' = (1 - z) * n + z * h.
    weight_ih is (3 * hidden_size, input_size), weight_hh (3 * hidden_size,
    hidden_size), bias_ih and bias_hh (3 * hidden_size,); all start uniform in
    +-1/sqrt(hidden_size). A missing h means zeros.

    >>> cell = fa.nn.GRUCell(16, 32)
    >>> h = cell(fa.Input(np.zeros((1, 16))))
    >>> h = cell(fa.Input(np.ones((1, 16))), h)
    """

    _gates = 3

    def forward(self, x, state=None):
        return _gru_step("GRUCell", self, x, state)


class _Sequence(_Recurrent):
    """A layer over a sequence, with the Parameters of torch's layer 0 ("weight_ih_l0", ...,
    and with bidirectional=True "weight_ih_l0_reverse", ...). A list of (batch, input_size)
    Variables runs `_step` over them; the steps share one SequenceWeights: one transposed copy
    of the weights a forward pass, which their products read faster than the weights' own
    layout. A (T, batch, input_size) Variable runs `_direction` once each way."""

    _suffix = "_l0"
    _step = None

    def __init__(self, input_size, hidden_size, dtype=None, generator=None, bidirectional=False):
        Module.__init__(self)
        self.bidirectional = check_flag(type(self).__name__, "bidirectional", bidirectional)
        self._draw(input_size, hidden_size, dtype, generator,
                   ("_l0", "_l0_reverse") if self.bidirectional else ("_l0",))

    def forward(self, xs, state=None, return_state=False):
        name = type(self).__name__
        if isinstance(xs, Variable) and not isinstance(xs, IndexInput):
            return self._over_tensor(name, xs, state, return_state)
        if self.bidirectional:
            raise TypeError(f"{name}: a bidirectional layer takes a (T, batch, input_size) "
                            f"Variable, got {type(xs).__name__}")
        if not isinstance(xs, (list, tuple)) or not xs:
            raise TypeError(f"{name}: expected a (T, batch, input_size) Variable or a non-empty "
                            f"list of (batch, input_size) Variables, got {type(xs).__name__}")
        outputs = []
        sequence = SequenceWeights() if len(xs) > 1 else None
        for t, x in enumerate(xs):
            state = type(self)._step(f"{name}: step {t}", self, x, state, sequence)
            outputs.append(self._hidden(state))
        return (outputs, state) if return_state else outputs

    def _over_tensor(self, name, x, state, return_state):
        """The output (T, batch, directions * hidden_size) over x (T, batch, input_size), and with
        return_state the final state, as torch's: each part (directions, batch, hidden_size)."""
        _check_input(name, x, self.input_size)
        if x.ndim != 3:
            raise ValueError(f"{name}: x must have shape (T, batch, {self.input_size}), got {x.shape}")
        directions = 2 if self.bidirectional else 1
        parts = self._state_parts(name, state)
        for part_name, part in zip(self._state_names, parts):
            if part is not None:
                _check_state(name, part_name, part, (directions, x.shape[1], self.hidden_size),
                             "(num_directions, batch, hidden_size)")
        outputs, finals = [], []
        for d, suffix in enumerate(("_l0", "_l0_reverse")[:directions]):
            initial = [None if part is None else part[d] for part in parts]
            hs, final = self._direction(x, initial, d == 1, suffix, return_state)
            outputs.append(hs)
            finals.append(final)
        out = outputs[0] if directions == 1 else concat(outputs, axis=2)
        if not return_state:
            return out
        stacked = tuple(stack(list(each), 0) for each in zip(*finals))
        return out, (stacked if len(stacked) > 1 else stacked[0])

    def extra_repr(self):
        return super().extra_repr() + (", bidirectional=True" if self.bidirectional else "")


class LSTM(_Sequence):
    """An LSTM over a sequence, as torch.nn.LSTM (one layer): `out = layer(x)`.

    x is a (T, batch, input_size) Variable (torch's layout without batch_first);
    out is (T, batch, hidden_size), the hidden state after each step, or with
    bidirectional=True (T, batch, 2 * hidden_size): the forward direction's
    states, then those of a second LSTM run from t = T - 1 down to 0, at their
    own time positions. `layer(x, state=(h0, c0), return_state=True)` starts
    from a given state and returns `(out, (h_n, c_n))`; h0, c0, h_n and c_n are
    (num_directions, batch, hidden_size), as torch's (h_n[1]: the backward
    direction's state after its last step, at t = 0). Each direction is one
    fused node (fastad.ops.fused.lstm_sequence).

    The older form takes a list of (batch, input_size) Variables (one
    direction only) and returns the list of hidden states h_t, each
    (batch, hidden_size); with `state=(h, c)` and `return_state=True`, each
    (batch, hidden_size), it also returns the final (h, c). Each step is then
    LSTMCell's fused node.

    Its Parameters are torch.nn.LSTM's: weight_ih_l0, weight_hh_l0, bias_ih_l0,
    bias_hh_l0, laid out as LSTMCell's, and with bidirectional=True
    weight_ih_l0_reverse, ... for the backward direction, so state dicts load
    both ways.

    >>> lstm = fa.nn.LSTM(16, 32, bidirectional=True)
    >>> out, (h_n, c_n) = lstm(fa.Input(np.zeros((20, 1, 16))), return_state=True)
    >>> out.shape, h_n.shape
    ((20, 1, 64), (2, 1, 32))
    >>> hs = fa.nn.LSTM(16, 32)([fa.Input(np.zeros((1, 16))) for _ in range(20)])
    """

    _gates = 4
    _step = _lstm_step
    _state_names = ("h0", "c0")

    @staticmethod
    def _hidden(state):
        return state[0]

    @staticmethod
    def _state_parts(who, state):
        if state is None:
            return [None, None]
        if not isinstance(state, (tuple, list)) or len(state) != 2:
            raise TypeError(f"{who}: state must be a pair (h0, c0), got {type(state).__name__}")
        return list(state)

    def _direction(self, x, initial, reverse, suffix, return_state):
        """(hs, (h, c) or None): one direction, one fused node."""
        result = lstm_sequence(x, *initial, *self._weights(suffix), reverse=reverse,
                               return_state=return_state)
        return result if return_state else (result, None)


class GRU(_Sequence):
    """A GRU over a sequence, as torch.nn.GRU (one layer): `out = layer(x)`.

    x is a (T, batch, input_size) Variable; out is (T, batch, hidden_size), or
    with bidirectional=True (T, batch, 2 * hidden_size), as LSTM's;
    `layer(x, state=h0, return_state=True)` returns `(out, h_n)`, h0 and h_n
    (num_directions, batch, hidden_size). The older form takes a list of
    (batch, input_size) Variables (one direction) and returns the list of
    hidden states; `layer(xs, state=h, return_state=True)` also returns the
    final h. Either way each step is GRUCell's fused node. Its Parameters are
    torch.nn.GRU's (weight_ih_l0, ..., and weight_ih_l0_reverse, ... with
    bidirectional=True), laid out as GRUCell's.

    >>> gru = fa.nn.GRU(16, 32)
    >>> out, h_n = gru(fa.Input(np.zeros((5, 1, 16))), return_state=True)   # (5, 1, 32), (1, 1, 32)
    >>> hs, h = gru([fa.Input(np.zeros((1, 16)))] * 5, return_state=True)
    """

    _gates = 3
    _step = _gru_step
    _state_names = ("h0",)

    @staticmethod
    def _hidden(state):
        return state

    @staticmethod
    def _state_parts(who, state):
        return [state]

    def _direction(self, x, initial, reverse, suffix, return_state):
        """(hs, (h,)): one direction, GRUCell's node a step."""
        weights = self._weights(suffix)
        steps = x.shape[0]
        h, hs = initial[0], [None] * steps
        sequence = SequenceWeights() if steps > 1 else None
        for t in (range(steps - 1, -1, -1) if reverse else range(steps)):
            h = hs[t] = gru_cell(x[t], h, *weights, sequence)   # a recorded x: a view at once
        return stack(hs, 0), (h,)


class LayerNorm(Module):
    """Normalise over the last axis: (x - mean) / sqrt(var + eps) * weight + bias.

    var is the biased variance, as in PyTorch; weight starts at ones and bias
    at zeros, both (normalized_shape,); elementwise_affine=False leaves them out.

    >>> norm = fa.nn.LayerNorm(64)
    >>> norm(fa.Input(np.random.randn(8, 64))).shape
    (8, 64)
    """

    def __init__(self, normalized_shape, eps=1e-5, elementwise_affine=True, dtype=None):
        super().__init__()
        self.normalized_shape = check_int("LayerNorm", "normalized_shape", normalized_shape)
        self.eps = check_number("LayerNorm", "eps", eps, above=0)
        affine = check_flag("LayerNorm", "elementwise_affine", elementwise_affine)
        self.weight = Parameter(np.ones(normalized_shape), dtype=dtype) if affine else None
        self.bias = Parameter(np.zeros(normalized_shape), dtype=dtype) if affine else None

    def forward(self, x):
        _check_input("LayerNorm", x, self.normalized_shape)
        centred = x - mean(x, axis=-1, keepdims=True)
        var = mean(square(centred), axis=-1, keepdims=True)
        y = centred / sqrt(var + self.eps)
        return y * self.weight + self.bias if self.weight is not None else y

    def extra_repr(self):
        return f"{self.normalized_shape}, eps={self.eps}, " \
               f"elementwise_affine={self.weight is not None}"

"""Attention: `fa.scaled_dot_product_attention` and `fa.nn.MultiheadAttention`.

Both are composed of existing ops (batched matmul, transpose, scalar multiply,
an additive mask, softmax), so they run on the CPU and on a GPU alike, replay
after `set_value`, and take their gradients from those ops' rules. A mask is
a constant of the graph: boolean masks become an additive Input of 0 and a
score low enough that its softmax weight is exactly 0 (PyTorch's math path
adds -inf), made once when the graph is built.
"""
import math

import numpy as np

from fastad._engine.graph import IndexInput, Input, Parameter, Variable
from fastad.ops.linalg import linear, matmul
from fastad.ops.reduction import mean, softmax
from fastad.ops.shape import reshape, transpose
from fastad import random as fastad_random
from fastad.checks import check_flag, check_sizes
from fastad.nn.functional import check_float_variable
from fastad.nn.layers import Linear
from fastad.nn.module import Module

__all__ = ["scaled_dot_product_attention", "MultiheadAttention"]

_MASKED_SCORE = -1e30     # what a masked-out score becomes (finite in float32 too)


def _swap_last_axes(x):
    axes = tuple(range(x.ndim - 2)) + (x.ndim - 1, x.ndim - 2)
    return transpose(x, axes)


def _additive_mask(who, mask, scores_shape, keep_when_true):
    """`mask` as something to add to the scores: a float Variable as it is, else a
    float64 array (a boolean mask: 0 where kept, -inf where masked out; True keeps
    when keep_when_true, else True masks out). Its shape must broadcast to the
    scores' shape (..., L, S) without changing it."""
    if isinstance(mask, IndexInput):
        raise TypeError(f"{who}: attn_mask must be a boolean or float array or a float "
                        f"Variable, got an IndexInput")
    if not isinstance(mask, Variable):
        mask = np.asarray(mask)
        if mask.dtype != np.bool_ and mask.dtype.kind not in "fiu":
            raise TypeError(f"{who}: attn_mask must be boolean or float, got dtype {mask.dtype}")
    try:
        fits = np.broadcast_shapes(mask.shape, scores_shape) == tuple(scores_shape)
    except ValueError:
        fits = False
    if not fits:
        raise ValueError(f"{who}: attn_mask has shape {tuple(mask.shape)}, which does not "
                         f"broadcast to the attention scores' shape {tuple(scores_shape)} (..., L, S)")
    if isinstance(mask, Variable):
        return mask
    if mask.dtype == np.bool_:
        return np.where(mask if keep_when_true else ~mask, 0.0, -np.inf)
    return mask.astype(np.float64)


def _check_operands(who, q, k, v):
    for name, x in (("query", q), ("key", k), ("value", v)):
        check_float_variable(who, x, name)
        if x.ndim < 2:
            raise ValueError(f"{who}: {name} must have shape (..., length, features), got {x.shape}")
    if k.shape[:-1] != v.shape[:-1] or q.shape[:-2] != k.shape[:-2] or q.shape[-1] != k.shape[-1]:
        raise ValueError(f"{who}: query {q.shape}, key {k.shape} and value {v.shape} do not fit: "
                         f"expected (..., L, E), (..., S, E) and (..., S, Ev) with the same "
                         f"leading axes")


def _causal_mask(length, source):
    """Position i attends to j <= i (top-left aligned, as PyTorch's is_causal)."""
    return np.where(np.tril(np.ones((length, source), dtype=bool)), 0.0, -np.inf)


def _attention(q, k, v, mask, scale, who):
    """(output, weights) of attention of q, k, v (checked by the caller) with an additive
    `mask` (None, a float array or a float Variable, already checked against the scores'
    shape): the output (..., L, Ev) and the softmax weights (..., L, S). Rows that an
    array mask masks out entirely give zero weights (PyTorch's choice), not the NaN of a
    softmax over nothing."""
    if scale is None:
        scale = 1.0 / math.sqrt(q.shape[-1]) if q.shape[-1] else 1.0
    elif isinstance(scale, bool) or not isinstance(scale, (int, float, np.integer, np.floating)):
        raise TypeError(f"{who}: scale must be a number or None, got {scale!r}")
    scores = matmul(q, _swap_last_axes(k)) * float(scale)
    dead_rows = None
    if isinstance(mask, np.ndarray):
        masked_out = np.isneginf(mask)
        dead_rows = masked_out.all(axis=-1, keepdims=True)
        # -1e30 instead of -inf keeps the scores finite (detect_anomaly would flag an inf);
        # exp underflows to exactly 0 from either.
        mask = np.where(dead_rows, 0.0, np.where(masked_out, _MASKED_SCORE, mask))
        dead_rows = dead_rows if dead_rows.any() else None
        mask = Input(mask, dtype=q.dtype, device=q.device)
    if mask is not None:
        scores = scores + mask
    weights = softmax(scores, axis=-1)
    if dead_rows is not None:
        weights = weights * Input(~dead_rows, dtype=q.dtype, device=q.device)
    return matmul(weights, v), weights


def scaled_dot_product_attention(query, key, value, attn_mask=None, is_causal=False, scale=None):
    """softmax(query @ key^T * scale + mask) @ value, with PyTorch's semantics.

    query (..., L, E), key (..., S, E), value (..., S, Ev) with equal leading
    axes; the result is (..., L, Ev). `scale` defaults to 1/sqrt(E).
    `attn_mask` broadcasts to (..., L, S): a boolean array keeps the positions
    where it is True (torch.nn.functional.scaled_dot_product_attention's
    convention), a float array or Variable is added to the scores.
    `is_causal=True` lets position i attend to positions j <= i (a top-left
    aligned lower triangle, as in PyTorch) and excludes attn_mask. A row that a
    mask array masks out entirely gets zero weights and a zero output, as in
    PyTorch (a float Variable mask of all -inf in a row gives NaN).

    >>> q = fa.Input(np.random.randn(2, 4, 5, 8))        # (batch, heads, L, E)
    >>> fa.scaled_dot_product_attention(q, q, q, is_causal=True).shape
    (2, 4, 5, 8)
    """
    who = "scaled_dot_product_attention"
    _check_operands(who, query, key, value)
    scores_shape = query.shape[:-1] + key.shape[-2:-1]
    if is_causal:
        if attn_mask is not None:
            raise ValueError(f"{who}: give attn_mask or is_causal=True, not both")
        attn_mask = _causal_mask(query.shape[-2], key.shape[-2])
    if attn_mask is not None:
        attn_mask = _additive_mask(who, attn_mask, scores_shape, keep_when_true=True)
    return _attention(query, key, value, attn_mask, scale, who)[0]


class MultiheadAttention(Module):
    """Multi-head attention as torch.nn.MultiheadAttention (no dropout, kdim = vdim = embed_dim).

    `attn(query, key, value, key_padding_mask=None, need_weights=True,
    attn_mask=None, average_attn_weights=True, is_causal=False)` returns
    `(output, weights)`: output (batch, L, embed_dim) with batch_first=True
    (else (L, batch, embed_dim)); weights (batch, L, S) averaged over the heads,
    (batch, num_heads, L, S) with average_attn_weights=False, or None when
    need_weights=False. Masks follow torch.nn.MultiheadAttention (the opposite
    of scaled_dot_product_attention's boolean convention): a boolean attn_mask
    (L, S) or (batch * num_heads, L, S) and key_padding_mask (batch, S) mask out
    the positions where they are True; float masks are added to the scores.
    is_causal=True without an attn_mask masks out the future (j > i); with one,
    it is only a hint, as in PyTorch, and attn_mask is used as given.

    Parameters, named and laid out as PyTorch's (so its state_dict loads):
    `in_proj_weight` (3 * embed_dim, embed_dim), the query, key and value rows
    in that order, `in_proj_bias` (3 * embed_dim,), and `out_proj`, a Linear.
    They start as in PyTorch: xavier-uniform projections, zero biases.

    >>> attn = fa.nn.MultiheadAttention(16, num_heads=4)
    >>> x = fa.Input(np.random.randn(2, 5, 16))
    >>> out, weights = attn(x, x, x)                      # (2, 5, 16), (2, 5, 5)
    """

    def __init__(self, embed_dim, num_heads, bias=True, batch_first=True, dtype=None,
                 generator=None):
        super().__init__()
        who = "MultiheadAttention"
        embed_dim, num_heads = check_sizes(who, embed_dim=embed_dim, num_heads=num_heads)
        bias = check_flag(who, "bias", bias)
        if embed_dim % num_heads:
            raise ValueError(f"MultiheadAttention: embed_dim ({embed_dim}) must be divisible by "
                             f"num_heads ({num_heads})")
        rng = fastad_random.generator(who, generator)
        self.embed_dim, self.num_heads = embed_dim, num_heads
        self.head_dim = self.embed_dim // self.num_heads
        self.batch_first = check_flag(who, "batch_first", batch_first)
        bound = math.sqrt(6.0 / (embed_dim + 3 * embed_dim))      # xavier_uniform of (3E, E)
        self.in_proj_weight = Parameter(rng.uniform(-bound, bound, (3 * embed_dim, embed_dim)),
                                        dtype=dtype)
        self.in_proj_bias = Parameter(np.zeros(3 * embed_dim), dtype=dtype) if bias else None
        self.out_proj = Linear(embed_dim, embed_dim, bias=bias, dtype=dtype, generator=rng)
        if bias:
            self.out_proj.bias.set_value(np.zeros(embed_dim))

    def _project(self, x, part):
        """fa.linear of x with the query, key or value rows of in_proj_weight and their bias."""
        rows = slice(part * self.embed_dim, (part + 1) * self.embed_dim)
        bias = self.in_proj_bias[rows] if self.in_proj_bias is not None else None
        return linear(x, self.in_proj_weight[rows], bias)

    def _heads(self, x, batch, length):
        """(batch, length, E) -> (batch, heads, length, head_dim)."""
        return transpose(reshape(x, (batch, length, self.num_heads, self.head_dim)),
                         (0, 2, 1, 3))

    def _mask(self, attn_mask, key_padding_mask, is_causal, batch, length, source):
        """The masks as one additive array or Variable that broadcasts to
        (batch, heads, L, S), or None."""
        who, heads = "MultiheadAttention", self.num_heads
        scores_shape = (batch, heads, length, source)
        parts = []
        if attn_mask is not None:
            shape = tuple(attn_mask.shape) if isinstance(attn_mask, Variable) \
                else np.shape(attn_mask)
            if shape not in ((length, source), (batch * heads, length, source)):
                raise ValueError(f"{who}: attn_mask has shape {shape}; expected {(length, source)} "
                                 f"(L, S) or {(batch * heads, length, source)} "
                                 f"(batch * num_heads, L, S)")
            if len(shape) == 3:
                attn_mask = attn_mask.reshape(scores_shape)
            parts.append(_additive_mask(who, attn_mask, scores_shape, keep_when_true=False))
        elif is_causal:                 # with an attn_mask, is_causal is PyTorch's hint only
            parts.append(_causal_mask(length, source))
        if key_padding_mask is not None:
            padding = np.asarray(key_padding_mask)
            if padding.shape != (batch, source):
                raise ValueError(f"{who}: key_padding_mask has shape {padding.shape}; expected "
                                 f"(batch, S) = {(batch, source)}")
            parts.append(_additive_mask(who, padding[:, None, None, :], scores_shape,
                                        keep_when_true=False))
        return sum(parts[1:], parts[0]) if parts else None

    def forward(self, query, key, value, key_padding_mask=None, need_weights=True, attn_mask=None,
                average_attn_weights=True, is_causal=False):
        who = "MultiheadAttention"
        for name, x in (("query", query), ("key", key), ("value", value)):
            check_float_variable(who, x, name)
            if x.ndim != 3 or x.shape[-1] != self.embed_dim:
                layout = "(batch, length, embed_dim)" if self.batch_first else \
                         "(length, batch, embed_dim)"
                raise ValueError(f"{who}: {name} must have shape {layout} with embed_dim "
                                 f"{self.embed_dim}, got {x.shape}")
        if not self.batch_first:
            query, key, value = (transpose(x, (1, 0, 2)) for x in (query, key, value))
        if key.shape != value.shape or query.shape[0] != key.shape[0]:
            raise ValueError(f"{who}: key {key.shape} and value {value.shape} must have one shape, "
                             f"and the batch of query {query.shape} (batch-first shapes)")
        batch, length, source = query.shape[0], query.shape[1], key.shape[1]
        mask = self._mask(attn_mask, key_padding_mask, is_causal, batch, length, source)
        q = self._heads(self._project(query, 0), batch, length)
        k = self._heads(self._project(key, 1), batch, source)
        v = self._heads(self._project(value, 2), batch, source)
        out, weights = _attention(q, k, v, mask, None, who)
        out = reshape(transpose(out, (0, 2, 1, 3)), (batch, length, self.embed_dim))
        out = self.out_proj(out)
        if not self.batch_first:
            out = transpose(out, (1, 0, 2))
        if not need_weights:
            return out, None
        return out, mean(weights, axis=1) if average_attn_weights else weights

    def extra_repr(self):
        return f"embed_dim={self.embed_dim}, num_heads={self.num_heads}, " \
               f"bias={self.in_proj_bias is not None}, batch_first={self.batch_first}"

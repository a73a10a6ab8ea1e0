"""The chains of ops that one fused node computes, recognised in a loss's graph so that
`fastad.train` replays the fused node in their place.

A user writes BPR's loss or skip-gram's negative-sampling loss from ops, as the guide
teaches; the ready models build the same loss as one or two fused nodes, which replay
for a fraction of the chain's cost (no node per op, no gradient buffer per op, and under
plain SGD the rows' steps taken inside the fused backward). `fused_loss(loss, fed)`
returns a graph of fused nodes over the same leaves and Parameters whose value is the
loss's (to rounding: the fused nodes compute the same formulas in another order), or None
when the graph is not one of these chains:

* BPR: `-sum(logsigmoid(vector_dot(U[u], V[i] - V[j])))` (or `mean`, or the dot's
  operands swapped) -> `ranking_loss(U, u, V, i, j, reduction="sum")` (or "mean");
* negative sampling: `-sum(logsigmoid(gather_dot(W, c, C, ctx) * signs) [* mask])` with
  constant signs of +-1 (+1 for the word, -1 for a noise word) -> `bce_with_logits(scores,
  signs > 0, "sum")`, or with the mask `sum(bce_with_logits(scores, signs > 0, "none") *
  mask)`: Word2Vec's own graph (`mean` likewise).

A chain is fused only when it is the loss's whole graph down to its leaves (so no other
node of the graph reads a value the fused nodes do not compute) and the constants it
reads (the signs) are not filled by the sampler.
"""
import numpy as np

from fastad._engine.graph import IndexInput, Input, Parameter, Variable
from fastad.ops.losses import bce_with_logits
from fastad.ops.ranking import ranking_loss
from fastad.ops.reduction import mean as fa_mean, sum as fa_sum

__all__ = ["fused_loss"]

_REDUCTIONS = ("sum", "mean")


def _op(node, name, n_parents):
    """node's parents when it is the op `name` with that many inputs, else None."""
    if isinstance(node, Variable) and node.op_name == name and len(node.parents) == n_parents:
        return node.parents
    return None


def _table(node):
    """(table, ids) of a plain row gather `table[ids]` of a 2-D table by 1-D ids, else None."""
    parents = _op(node, "take", 2)
    if parents is None:
        return None
    table, ids = parents
    if len(table.shape) != 2 or not isinstance(ids, IndexInput) or len(ids.shape) != 1:
        return None
    return table, ids


def _loss_terms(loss):
    """(reduction, the node under -reduce(logsigmoid(.)), or under its product by a mask, and
    that mask or None) of `-sum(...)`/`-mean(...)`, else None."""
    below = _op(loss, "neg", 1)
    if below is None or loss.shape != ():
        return None
    reduced = below[0]
    for reduction in _REDUCTIONS:
        parents = _op(reduced, reduction, 1)
        if parents is not None and reduced.shape == ():
            break
    else:
        return None
    term, mask = parents[0], None
    product = _op(term, "mul", 2)
    if product is not None:
        for logs, other in (product, product[::-1]):
            if _op(logs, "logsigmoid", 1) is not None and _constant(other) is not None:
                term, mask = logs, other
                break
        else:
            return None
    inner = _op(term, "logsigmoid", 1)
    if inner is None:
        return None
    return reduction, inner[0], mask


def _constant(node):
    """node when it is an Input that takes no gradient, else None."""
    return node if isinstance(node, Input) and not node.requires_grad else None


def _bpr(reduction, margins):
    """ranking_loss in place of -reduce(logsigmoid(vector_dot(U[u], V[i] - V[j]))), or None."""
    dot = _op(margins, "vector_dot", 2)
    if dot is None or len(margins.shape) != 1:
        return None
    for users, diff in (dot, dot[::-1]):
        user_rows, items = _table(users), _op(diff, "sub", 2)
        if user_rows is None or items is None:
            continue
        pos, neg = _table(items[0]), _table(items[1])
        if pos is None or neg is None or pos[0] is not neg[0]:
            continue
        (U, u), (V, i), (_, j) = user_rows, pos, neg
        if not (isinstance(U, Parameter) and isinstance(V, Parameter)) or U.dtype != V.dtype:
            continue
        if not (u.shape == i.shape == j.shape == margins.shape) or U.shape[1] != V.shape[1]:
            continue
        return ranking_loss(U, u, V, i, j, reduction=reduction)
    return None


def _negative_sampling(reduction, signed, mask, fed):
    """reduce(bce_with_logits(scores, signs > 0, "none") [* mask]) in place of
    -reduce(logsigmoid(scores * signs) [* mask]), scores a gather_dot, or None. `fed`: the
    ids of the leaves the sampler writes (the mask may be one; the signs, folded into
    constant labels, may not)."""
    product = _op(signed, "mul", 2)
    if product is None:
        return None
    for scores, signs in (product, product[::-1]):
        if _op(scores, "gather_dot", 4) is None or _constant(signs) is None or id(signs) in fed:
            continue
        values = np.asarray(signs.value)
        if not np.all(np.abs(values) == 1) or signed.shape != scores.shape:
            continue
        if not all(isinstance(p, (Parameter, IndexInput)) for p in scores.parents):
            continue
        labels = np.broadcast_to(values > 0, scores.shape).astype(scores.dtype)
        if mask is None:
            return bce_with_logits(scores, labels, reduction=reduction)
        reduce = fa_sum if reduction == "sum" else fa_mean
        return reduce(bce_with_logits(scores, labels, reduction="none") * mask)
    return None


def fused_loss(loss, fed=()):
    """A graph of fused nodes computing `loss` (to rounding) over the same leaves and
    Parameters, or None when `loss`'s graph is not one of the chains this module knows
    (see the module docstring). `fed`: the leaves a sampler writes (a constant among them
    cannot be folded into the fused graph)."""
    terms = _loss_terms(loss)
    if terms is None:
        return None
    reduction, below, mask = terms
    fed_ids = {id(leaf) for leaf in fed}
    if mask is None:
        fused = _bpr(reduction, below)
        if fused is not None:
            return fused
    return _negative_sampling(reduction, below, mask, fed_ids)

"""Ranking metrics of a recommender over a held-out split, vectorised in numpy.

Every metric takes `scores`, an (n, n_items) array of a model's scores for n
users, and `test`, the held-out user x item matrix (scipy sparse, as from
`fa.data.train_test_split` or `leave_k_out`); row r of `scores` belongs to
user `users[r]` (default: users 0..n-1). Items in `train` (optional, the
training matrix) are never ranked, as a recommender filters what a user
already liked, and do not count as held out. Each metric is the mean over the
users with at least one held-out item (users without are skipped); for AUC,
over those who also have an item neither held out nor in train.

Ranking: higher scores first; equal scores are ranked by the lower item id
first. `k` larger than the number of items is capped at it.

- precision@k: held-out items in the top k, divided by k
- recall@k: held-out items in the top k, divided by the user's held-out count
- ndcg@k: sum over top-k hits of 1/log2(rank + 1), divided by its best value
  (all min(k, held-out count) hits first)
- map@k: sum over top-k hits of precision@rank, divided by min(k, held-out count)
- auc: the share of (held-out item, other item) pairs scored in the right
  order, ties counting one half

>>> scores = model.scores(np.arange(model.n_users))
>>> fa.metrics.precision_at_k(scores, test, k=10, train=train)
>>> fa.metrics.evaluate(model, test, train=train, k=10)   # all five, in batches of users

Binary classification (click prediction, a `bce_with_logits` model), as scikit-learn's
`roc_auc_score` and `log_loss`, with sample weights:

- roc_auc(labels, scores): the area under the ROC curve, ties counting one half
- log_loss(labels, predictions, from_logits=False): the mean negative log-likelihood of
  probabilities (clipped to [eps, 1 - eps] of their float type), or of logits, computed
  stably without forming probabilities

>>> fa.metrics.roc_auc(y_test, logits), fa.metrics.log_loss(y_test, logits, from_logits=True)

LightFM's call forms (`lightfm.evaluation`), per-user arrays as LightFM returns them, for
any fastad recommender (a model with `scores(user_ids)`) or a model with LightFM's
`predict_rank` (LightFM's own, a hybrid model's):

- precision_at_k(model, test_interactions, train_interactions=None, k=10, ...) (the call
  form is told by the first argument: a model, not an array of scores)
- recall_at_k(model, test_interactions, train_interactions=None, k=10, ...)
- auc_score(model, test_interactions, train_interactions=None, ...)
- reciprocal_rank(model, test_interactions, train_interactions=None, ...)

with LightFM's `user_features=None, item_features=None, preserve_rows=False,
num_threads=1, check_intersections=True`. Each ranks the test items of every user among
all items but those of `train_interactions` (`predict_rank`'s rule: an item's rank counts
the other items scoring at least as high, ties against it) and returns one value per user
with a test item (every user with `preserve_rows=True`: 0, or AUC 0.5, for those without).

>>> fa.metrics.precision_at_k(model, test, train, k=10).mean()      # LightFM's quick start
"""
import numpy as np
import scipy.sparse as sp

from fastad.checks import check_ids, check_int
from fastad.models.recsys.interactions import check_interactions
from fastad.models.recsys.recommender import top_k

__all__ = ["precision_at_k", "recall_at_k", "ndcg_at_k", "mean_average_precision_at_k", "auc",
           "evaluate", "top_k", "roc_auc", "log_loss", "auc_score", "reciprocal_rank", "predict_rank"]


def _check_split(who, test, train):
    """`test` and `train` (or None) as canonical CSR matrices of one shape."""
    test = check_interactions(test, who, "test")
    if train is not None:
        train = check_interactions(train, who, "train", shape=test.shape)
    return test, train


def _masks(who, scores, test, train, users):
    """(scores with train items at -inf, held-out mask, train mask), rows for `users`."""
    scores = np.array(scores, dtype=np.float64)
    if scores.ndim != 2:
        raise ValueError(f"{who}: scores must be a 2-D (users, items) array, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError(f"{who}: scores holds non-finite values; expected finite scores")
    if scores.shape[1] != test.shape[1]:
        raise ValueError(f"{who}: scores has {scores.shape[1]} item columns but test has "
                         f"{test.shape[1]} items")
    if users is None:
        if scores.shape[0] != test.shape[0]:
            raise ValueError(f"{who}: scores has {scores.shape[0]} rows but test has {test.shape[0]} "
                             f"users; pass users= to say whose rows they are")
        users = np.arange(test.shape[0])
    else:
        users = check_ids(who, "users", users, test.shape[0], "users")
        if users.shape != (scores.shape[0],):
            raise ValueError(f"{who}: users has shape {users.shape}, expected ({scores.shape[0]},), "
                             f"one id per row of scores")
    excluded = (train[users].toarray() > 0 if train is not None
                else np.zeros(scores.shape, dtype=bool))
    scores[excluded] = -np.inf
    held = (test[users].toarray() > 0) & ~excluded
    return scores, held, excluded


def _top_k_hits(scores, held, k):
    """(hit matrix (n, k) of each user's top-k ranking, held-out count per user)."""
    return np.take_along_axis(held, top_k(scores, k), axis=1), held.sum(axis=1)


def _precision(hits, count):
    return hits.sum(axis=1) / hits.shape[1]


def _recall(hits, count):
    return hits.sum(axis=1) / np.maximum(count, 1)


def _ndcg(hits, count):
    discount = 1.0 / np.log2(np.arange(2, hits.shape[1] + 2))
    best = np.cumsum(discount)[np.clip(np.minimum(count, hits.shape[1]) - 1, 0, None)]
    return (hits * discount).sum(axis=1) / best


def _map(hits, count):
    precision_at_rank = np.cumsum(hits, axis=1) / np.arange(1, hits.shape[1] + 1)
    return (precision_at_rank * hits).sum(axis=1) / np.maximum(np.minimum(count, hits.shape[1]), 1)


TOP_K_METRICS = {"precision": _precision, "recall": _recall, "ndcg": _ndcg, "map": _map}


def _average_ranks(ordered):
    """1-based ranks of rows sorted ascending; equal values share their average rank."""
    n, m = ordered.shape
    starts = np.ones((n, m), dtype=bool)
    starts[:, 1:] = ordered[:, 1:] != ordered[:, :-1]
    ends = np.ones((n, m), dtype=bool)
    ends[:, :-1] = starts[:, 1:]
    position = np.arange(m)
    first = np.maximum.accumulate(np.where(starts, position, 0), axis=1)
    last = np.minimum.accumulate(np.where(ends, position, m)[:, ::-1], axis=1)[:, ::-1]
    return (first + last) / 2 + 1


def _auc(scores, held, excluded):
    """(AUC per user, counted): Mann-Whitney; excluded items (at -inf) rank below all others."""
    positives = held.sum(axis=1)
    n_excluded = excluded.sum(axis=1)
    negatives = scores.shape[1] - positives - n_excluded
    order = np.argsort(scores, axis=1)
    ranks = _average_ranks(np.take_along_axis(scores, order, axis=1)) - n_excluded[:, None]
    held_in_order = np.take_along_axis(held, order, axis=1)
    above_negatives = (ranks * held_in_order).sum(axis=1) - positives * (positives + 1) / 2
    return above_negatives / np.maximum(positives * negatives, 1), (positives > 0) & (negatives > 0)


def _mean_over_users(who, metric, scores, test, k, train, users):
    """The mean of a per-user metric ("auc" or a TOP_K_METRICS key) over the users it counts."""
    test, train = _check_split(who, test, train)
    scores, held, excluded = _masks(who, scores, test, train, users)
    if metric == "auc":
        values, counted = _auc(scores, held, excluded)
    else:
        hits, count = _top_k_hits(scores, held, check_int(who, "k", k))
        values, counted = TOP_K_METRICS[metric](hits, count), count > 0
    if not counted.any():
        raise ValueError(f"{who}: no user of these scores has a held-out item in test "
                         f"(and, for AUC, an item to rank below it)")
    return float(values[counted].mean())


def precision_at_k(scores, test, *args, **kwargs):
    """Precision@k, in two call forms told apart by the first argument.

    - `precision_at_k(scores, test, k=10, train=None, users=None)`: scores an array;
      the mean over users of (held-out items in the top k) / k (the module docstring).
    - `precision_at_k(model, test_interactions, train_interactions=None, k=10,
      user_features=None, item_features=None, preserve_rows=False, num_threads=1,
      check_intersections=True)`: LightFM's; each user's (test items ranked below k) / k,
      an array (see `predict_rank`).

    >>> fa.metrics.precision_at_k(np.array([[0.9, 0.1, 0.5]]), sp.csr_matrix([[1, 0, 0]]), k=2)
    0.5
    >>> fa.metrics.precision_at_k(model, test, train, k=10).mean()
    """
    if _is_model(scores):
        ranks, test, rows = _lightfm_ranks("precision_at_k", scores, test, args, kwargs)
        return _per_row(ranks.k_hits() / ranks.k, rows)
    return _mean_over_users("precision_at_k", "precision",
                            *_scores_form("precision_at_k", scores, test, args, kwargs))


def recall_at_k(scores, test, *args, **kwargs):
    """Recall@k, in precision_at_k's two call forms.

    - `recall_at_k(scores, test, k=10, train=None, users=None)`: the mean over users of
      (held-out items in the top k) / (the user's held-out items).
    - `recall_at_k(model, test_interactions, train_interactions=None, k=10, ...)`:
      LightFM's; each user's (test items ranked below k) / (their test items), an array.

    >>> fa.metrics.recall_at_k(scores, test, k=10, train=train)
    >>> fa.metrics.recall_at_k(model, test, train, k=10).mean()
    """
    if _is_model(scores):
        ranks, test, rows = _lightfm_ranks("recall_at_k", scores, test, args, kwargs)
        with np.errstate(invalid="ignore"):      # a user with no test item: nan, as LightFM's
            return _per_row(ranks.k_hits() / np.diff(test.indptr), rows)
    return _mean_over_users("recall_at_k", "recall", *_scores_form("recall_at_k", scores, test, args, kwargs))


def ndcg_at_k(scores, test, k=10, train=None, users=None):
    """Mean over users of the normalised discounted cumulative gain of the top k.

    >>> fa.metrics.ndcg_at_k(scores, test, k=10, train=train)
    """
    return _mean_over_users("ndcg_at_k", "ndcg", scores, test, k, train, users)


def mean_average_precision_at_k(scores, test, k=10, train=None, users=None):
    """Mean over users of the average precision of the top k (MAP@k).

    >>> fa.metrics.mean_average_precision_at_k(scores, test, k=10, train=train)
    """
    return _mean_over_users("mean_average_precision_at_k", "map", scores, test, k, train, users)


def auc(scores, test, train=None, users=None):
    """Mean over users of the share of (held-out, other) item pairs in the right order.

    Other items are those neither held out nor in `train`; ties count one half.

    >>> fa.metrics.auc(scores, test, train=train)      # 0.5 is chance
    """
    return _mean_over_users("auc", "auc", scores, test, None, train, users)


# ------------------------------------------------------------- LightFM's call forms

def _scores_form(who, scores, test, args, kwargs):
    """(scores, test, k, train, users) of the call `who(scores, test, k=10, train=None,
    users=None)`, bound as Python binds it."""
    def form(scores, test, k=10, train=None, users=None):
        return scores, test, k, train, users
    try:
        return form(scores, test, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{who}: {str(e).replace('form()', 'the call with scores')}; with an array "
                        f"of scores it takes (scores, test, k=10, train=None, users=None)") from None


def _lightfm_form(test_interactions, train_interactions=None, k=10, user_features=None,
                  item_features=None, preserve_rows=False, num_threads=1, check_intersections=True):
    return dict(locals())


def _is_model(obj):
    """Whether `obj` is a model (LightFM's call form): it has predict_rank or scores."""
    return not isinstance(obj, np.ndarray) and (hasattr(obj, "predict_rank") or hasattr(obj, "scores"))


class _Ranks:
    """The ranks of the test interactions (a CSR matrix of test's layout) and k."""

    def __init__(self, matrix, k):
        self.matrix, self.k = matrix, k

    def k_hits(self):
        """Each user's test items ranked below k, as a float array over the rows."""
        below = self.matrix.copy()
        below.data = (below.data < self.k).astype(np.float32)
        return np.asarray(below.sum(axis=1), dtype=np.float32).ravel()


def _per_row(values, rows):
    return values if rows is None else values[rows]


def _lightfm_ranks(who, model, test, args, kwargs, with_k=True):
    """(_Ranks, test as canonical CSR, the rows returned: those with a test item, or None
    with preserve_rows) of a LightFM-form call `who(model, test, *args, **kwargs)`."""
    try:
        call = _lightfm_form(test, *args, **kwargs)
    except TypeError as e:
        raise TypeError(f"{who}: {str(e).replace('_lightfm_form()', 'the call with a model')}; with "
                        f"a model it takes LightFM's (model, test_interactions, "
                        f"train_interactions=None, k=10, user_features=None, item_features=None, "
                        f"preserve_rows=False, num_threads=1, check_intersections=True)") from None
    k = check_int(who, "k", call["k"]) if with_k else None
    ranks = predict_rank(model, call["test_interactions"], call["train_interactions"],
                         user_features=call["user_features"], item_features=call["item_features"],
                         num_threads=call["num_threads"],
                         check_intersections=call["check_intersections"], who=who)
    test = sp.csr_matrix((np.ones_like(ranks.data), ranks.indices, ranks.indptr), shape=ranks.shape)
    rows = None if call["preserve_rows"] else np.diff(test.indptr) > 0
    return _Ranks(ranks, k), test, rows


def predict_rank(model, test_interactions, train_interactions=None, user_features=None,
                 item_features=None, num_threads=1, check_intersections=True, *, batch_size=1000,
                 who="predict_rank"):
    """The rank of each test interaction among all items for its user, LightFM's
    `predict_rank`: a float32 CSR matrix of test_interactions' layout, 0 the top.

    The rank of item i for user u counts the items j != i, not in u's train
    interactions, whose score is at least i's (ties rank i lower, as LightFM's). A
    model with its own `predict_rank` (LightFM's, a hybrid model's) is asked for it,
    with the features; one with `scores(user_ids)` (every fastad recommender) is
    scored `batch_size` users at a time, and takes no features (ValueError).
    `check_intersections` raises ValueError when test and train share an interaction.

    >>> ranks = fa.metrics.predict_rank(model, test, train)
    """
    test = check_interactions(test_interactions, who, "test_interactions")
    train = (None if train_interactions is None else
             check_interactions(train_interactions, who, "train_interactions", shape=test.shape))
    check_int(who, "num_threads", num_threads)
    batch_size = check_int(who, "batch_size", batch_size)
    if check_intersections and train is not None and test.multiply(train).nnz:
        raise ValueError(f"{who}: test_interactions and train_interactions share "
                         f"{test.multiply(train).nnz} interactions; a test item the user trained "
                         f"on ranks too well (split the data again, or check_intersections=False)")
    if hasattr(model, "predict_rank"):
        ranks = model.predict_rank(test, train_interactions=train, user_features=user_features,
                                   item_features=item_features, num_threads=num_threads,
                                   check_intersections=False)       # checked above
        return sp.csr_matrix(ranks, dtype=np.float32)
    if not hasattr(model, "scores"):
        raise TypeError(f"{who}: model must have predict_rank (LightFM's) or scores(user_ids) "
                        f"(fastad's recommenders), got {type(model).__name__}")
    for name, features in (("user_features", user_features), ("item_features", item_features)):
        if features is not None:
            raise ValueError(f"{who}: {name} given, but {type(model).__name__} scores users and "
                             f"items by their ids (it has scores(user_ids), no predict_rank)")
    ranks = np.zeros(test.nnz, dtype=np.float32)
    users = np.flatnonzero(np.diff(test.indptr))
    for start in range(0, len(users), batch_size):
        batch = users[start:start + batch_size]
        scores = np.asarray(model.scores(batch))
        if scores.shape != (len(batch), test.shape[1]):
            raise ValueError(f"{who}: {type(model).__name__}.scores gave shape {scores.shape} for "
                             f"{len(batch)} users, expected ({len(batch)}, {test.shape[1]}): the "
                             f"model's items must be test_interactions' columns")
        for row, user in zip(scores, batch):
            items = test.indices[test.indptr[user]:test.indptr[user + 1]]
            own = row[items]
            counted = row.copy()
            if train is not None:
                counted[train.indices[train.indptr[user]:train.indptr[user + 1]]] = -np.inf
            ordered = np.sort(counted)
            at_least = counted.size - np.searchsorted(ordered, own, side="left")
            ranks[test.indptr[user]:test.indptr[user + 1]] = at_least - (counted[items] >= own)
    return sp.csr_matrix((ranks, test.indices.copy(), test.indptr.copy()), shape=test.shape)


def auc_score(model, test_interactions, train_interactions=None, user_features=None,
              item_features=None, preserve_rows=False, num_threads=1, check_intersections=True):
    """LightFM's AUC per user: for each test item, the share of the user's negatives (the
    items neither in test nor in train) ranked below it, averaged over their test items
    (test items ranked above it do not count against it). A float32 array; 0.5 for a user
    with no test item (preserve_rows=True).

    >>> fa.metrics.auc_score(model, test, train).mean()
    """
    ranks, test, rows = _lightfm_ranks("auc_score", model, test_interactions,
                                       (train_interactions, 10, user_features, item_features,
                                        preserve_rows, num_threads, check_intersections), {},
                                       with_k=False)
    n_items = test.shape[1]
    positives = np.diff(test.indptr)
    trained = (np.zeros_like(positives) if train_interactions is None
               else np.diff(check_interactions(train_interactions, "auc_score", "train_interactions").indptr))
    negatives = n_items - (positives + trained)
    auc = np.full(test.shape[0], 0.5, dtype=np.float32)
    for user in np.flatnonzero(positives):
        own = np.sort(ranks.matrix.data[test.indptr[user]:test.indptr[user + 1]])
        above = np.maximum(own - np.arange(own.size, dtype=np.float32), 0)   # less the other test items
        with np.errstate(divide="ignore", invalid="ignore"):
            auc[user] = np.float32(np.mean(1 - above / np.float32(negatives[user])))
    return _per_row(auc, rows)


def reciprocal_rank(model, test_interactions, train_interactions=None, user_features=None,
                    item_features=None, preserve_rows=False, num_threads=1, check_intersections=True):
    """LightFM's reciprocal rank per user: 1 / (1 + the rank of their best-ranked test item);
    0 for a user with no test item (preserve_rows=True).

    >>> fa.metrics.reciprocal_rank(model, test, train).mean()
    """
    ranks, test, rows = _lightfm_ranks("reciprocal_rank", model, test_interactions,
                                       (train_interactions, 10, user_features, item_features,
                                        preserve_rows, num_threads, check_intersections), {},
                                       with_k=False)
    inverse = ranks.matrix.copy()
    inverse.data = 1 / (inverse.data + 1)
    return _per_row(np.asarray(inverse.max(axis=1).todense(), dtype=np.float32).ravel(), rows)


def evaluate(model, test, train=None, k=10, users=None, batch_size=1000):
    """All five metrics of `model` on `test`, scoring `batch_size` users at a time.

    `model` is any object with `scores(user_ids)` returning (len, n_items)
    (every `fa.models` recommender). Returns a dict with keys
    `precision@k`, `recall@k`, `ndcg@k`, `map@k` (k as given) and `auc`, each
    the mean over the users it counts, as the functions above (`users`
    defaults to those with a held-out item; AUC is nan if none of them has an
    item to rank below their held-out ones).

    >>> fa.metrics.evaluate(model, test, train=train, k=10)
    {'precision@10': 0.21, 'recall@10': 0.52, 'ndcg@10': 0.41, 'map@10': 0.30, 'auc': 0.93}
    """
    k = check_int("evaluate", "k", k)
    batch_size = check_int("evaluate", "batch_size", batch_size)
    test, train = _check_split("evaluate", test, train)
    users = (np.flatnonzero(np.diff(test.indptr)) if users is None
             else check_ids("evaluate", "users", users, test.shape[0], "users"))
    names = [f"{metric}@{k}" for metric in TOP_K_METRICS] + ["auc"]
    sums, counts = dict.fromkeys(names, 0.0), dict.fromkeys(names, 0)

    def add(name, values, counted):
        sums[name] += values[counted].sum()
        counts[name] += int(counted.sum())

    for start in range(0, len(users), batch_size):
        batch = users[start:start + batch_size]
        scores, held, excluded = _masks("evaluate", model.scores(batch), test, train, batch)
        hits, count = _top_k_hits(scores, held, k)
        for metric, per_user in TOP_K_METRICS.items():
            add(f"{metric}@{k}", per_user(hits, count), count > 0)
        add("auc", *_auc(scores, held, excluded))
    if not counts[f"precision@{k}"]:
        raise ValueError("evaluate: no user of `users` has a held-out item in test")
    return {name: float(sums[name] / counts[name]) if counts[name] else float("nan")
            for name in names}


# ------------------------------------------------------------- binary classification

def _binary_inputs(who, labels, predictions, sample_weight):
    """(labels as 0/1 float64, predictions as float64, weights or None), checked: 1-D, one
    length, labels 0 or 1 (or booleans), finite predictions, finite non-negative weights."""
    y = np.asarray(labels)
    p = np.asarray(predictions)
    if y.ndim != 1 or p.ndim != 1 or y.shape != p.shape:
        raise ValueError(f"{who}: labels and predictions must be 1-D of one length, got shapes "
                         f"{y.shape} and {p.shape}")
    if y.size == 0:
        raise ValueError(f"{who}: no examples (labels of shape {y.shape})")
    if y.dtype.kind not in "biuf" or not np.isin(y, (0, 1)).all():
        bad = y[~np.isin(y, (0, 1))][:3] if y.dtype.kind in "biuf" else y.dtype
        raise ValueError(f"{who}: labels must be 0 or 1, got {bad}")
    if p.dtype.kind not in "biuf" or not np.isfinite(p).all():
        raise ValueError(f"{who}: predictions must be finite numbers, got "
                         f"{p[~np.isfinite(p)][:3] if p.dtype.kind in 'biuf' else p.dtype}")
    w = None
    if sample_weight is not None:
        w = np.asarray(sample_weight, dtype=np.float64)
        if w.shape != y.shape:
            raise ValueError(f"{who}: sample_weight has shape {w.shape}, expected {y.shape}")
        if not np.isfinite(w).all() or (w < 0).any():
            raise ValueError(f"{who}: sample_weight must be finite and non-negative")
    return y.astype(np.float64), p.astype(np.float64), w


def roc_auc(labels, scores, sample_weight=None):
    """The area under the ROC curve of `scores` (any real numbers, higher meaning label 1)
    for the 0/1 `labels`: the (weighted) share of (positive, negative) pairs scored in the
    right order, ties counting one half; scikit-learn's roc_auc_score for binary labels.
    Both classes must be present (with positive weight).

    >>> fa.metrics.roc_auc([0, 0, 1, 1], [0.1, 0.4, 0.35, 0.8])
    0.75
    """
    y, s, w = _binary_inputs("roc_auc", labels, scores, sample_weight)
    w = np.ones_like(y) if w is None else w
    order = np.argsort(-s, kind="stable")
    s, y, w = s[order], y[order], w[order]
    last_of_tie = np.r_[np.flatnonzero(np.diff(s)), s.size - 1]
    tp = np.cumsum(w * y)[last_of_tie]
    fp = np.cumsum(w * (1 - y))[last_of_tie]
    if tp[-1] <= 0 or fp[-1] <= 0:
        raise ValueError(f"roc_auc: both classes must be present, got {tp[-1]:g} positive and "
                         f"{fp[-1]:g} negative (weighted) examples")
    tp, fp = np.r_[0.0, tp], np.r_[0.0, fp]
    return float(np.sum((fp[1:] - fp[:-1]) * (tp[1:] + tp[:-1])) / 2 / (tp[-1] * fp[-1]))


def log_loss(labels, predictions, sample_weight=None, from_logits=False):
    """The (weighted) mean of -log p(label) over the examples: `predictions` are
    probabilities of label 1, clipped to [eps, 1 - eps] (eps of their float type, as
    scikit-learn's log_loss), or logits with `from_logits=True` (softplus(-x) for a 1,
    softplus(x) for a 0, without rounding a probability first).

    >>> fa.metrics.log_loss([1, 0], [0.9, 0.2])
    0.16425203348601802
    """
    y, p, w = _binary_inputs("log_loss", labels, predictions, sample_weight)
    if from_logits:
        losses = np.logaddexp(0.0, np.where(y == 1, -p, p))
    else:
        if (p < 0).any() or (p > 1).any():
            raise ValueError(f"log_loss: probabilities must lie in [0, 1], got "
                             f"{p[(p < 0) | (p > 1)][:3]}; pass logits with from_logits=True")
        dtype = np.asarray(predictions).dtype
        eps = np.finfo(dtype if dtype.kind == "f" else np.float64).eps
        p = np.clip(p, eps, 1 - eps)
        losses = -np.where(y == 1, np.log(p), np.log1p(-p))
    return float(np.average(losses, weights=w))

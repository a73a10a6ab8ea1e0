"""`Recommender`, the base of the ranking models (`BPR`, `TwoTower`), and their shared helpers.

A `Recommender`'s `fit(interactions, epochs, workers, ...)` trains it on a scipy
user x item matrix with the model's ranking loss, on the examples its sampler draws,
through the models' `EpochRunner` (one worker: `fa.train`; several: Hogwild processes or
threads over shared memory; `device="cuda"`: batches on a GPU); `recommend`,
`similar_items`, `similar_users` and `scores` rank with one matrix product per batch of
users. It saves and loads as every `Model` does (`fastad.models.base`).
"""
from dataclasses import dataclass

import numpy as np
import scipy.sparse as sp

from fastad._engine.graph import Parameter
from fastad.ops.linalg import vector_dot
from fastad.ops.ranking import margin_loss as ranking_margin_loss
from fastad.ops.shape import reshape
from fastad import random as fastad_random
from fastad.checks import check_callable, check_choice, check_flag, check_ids, check_int, check_number
from fastad.models.base import Model
from fastad.models.recsys._pairs import Interactions
from fastad.models.recsys.interactions import check_interactions, require_negatives
from fastad.models.runner import OPTIMIZERS, EpochRunner, RunSettings, optimizer_options_of
from fastad.nn.module import Module

__all__ = ["Recommender", "bpr_loss", "margin_loss", "top_k"]


def bpr_loss(user, pos, neg, bias_difference=None):
    """-sum(log sigmoid(user . (pos - neg) + bias_difference)) over rows of (n, dim) Variables."""
    return margin_loss(vector_dot(user, pos - neg), bias_difference)


def margin_loss(margin, bias_difference=None, loss="bpr"):
    """`fa.margin_loss` of margin + bias_difference, summed: the ranking `loss` ("bpr":
    -log sigmoid of each, in one node) of margins a model computes itself."""
    if bias_difference is not None:
        margin = margin + reshape(bias_difference, margin.shape)
    return ranking_margin_loss(margin, loss, reduction="sum")


def top_k(scores, k):
    """The columns of the k highest scores of each row, best first; ties go to the lower column.

    `scores` is a 2-D float array (n, m); k (>= 0) is capped at m. Returns an
    (n, k) int64 array. Vectorised: one partition, then a sort of k per row.

    >>> top_k(np.array([[0.1, 0.9, 0.5, 0.9]]), 2)
    array([[1, 3]])
    """
    scores = np.asarray(scores)
    if scores.ndim != 2:
        raise ValueError(f"top_k: scores must be a 2-D (rows, columns) array, got shape {scores.shape}")
    if np.isnan(scores).any():
        raise ValueError("top_k: scores holds NaN (did training diverge? try a smaller lr)")
    n, m = scores.shape
    k = min(check_int("top_k", "k", k, minimum=0), m)
    if n == 0 or k == 0:
        return np.empty((n, k), dtype=np.int64)
    kth = -np.partition(-scores, k - 1, axis=1)[:, k - 1:k]     # the k-th highest score per row
    above = scores > kth
    tied = scores == kth
    room = k - above.sum(axis=1, keepdims=True)                  # slots left for scores == kth
    chosen = above | (tied & (np.cumsum(tied, axis=1) <= room))  # lower columns win ties
    columns = np.nonzero(chosen)[1].reshape(n, k)                # ascending within each row
    order = np.argsort(-np.take_along_axis(scores, columns, axis=1), axis=1, kind="stable")
    return np.take_along_axis(columns, order, axis=1)


def _top_k_in_batches(rows, k, score_rows, columns=None, batch_size=1000):
    """top_k of `score_rows(batch)` for batches of `rows`: (ids, scores), each (len(rows), k).

    `columns` maps a score column to its id (default: the column itself); a
    slot whose score is -inf (filtered out) gets id -1.
    """
    ids = np.empty((len(rows), k), dtype=np.int64)
    scores = np.empty((len(rows), k))
    for start in range(0, len(rows), batch_size):
        batch_scores = score_rows(rows[start:start + batch_size])
        top = top_k(batch_scores, k)
        best = np.take_along_axis(batch_scores, top, axis=1)
        found = top if columns is None else columns[top]
        ids[start:start + len(top)] = np.where(np.isneginf(best), -1, found)
        scores[start:start + len(top)] = best
    return ids, scores


class Recommender(Model, Module):
    """Base class of the ranking models: training on a user x item matrix, and ranking.

    A subclass sets `n_users` and `n_items`, and defines

    - `example_graph(batch, device)`: the ranking loss of the model over `batch`
      examples, a graph to replay with its leaves on `device`, and its feeds (a
      function from a batch of examples to `{leaf: ids}`);
    - how its examples are drawn: `epoch_sampler` (a compiled sampler drawing them in
      `fa.train`'s loop, or None), else `sample_examples` (drawn before each epoch);
      and for a fit on a device `host_sampler` and `drawn_examples` (`TripleSampling`
      draws (user, liked item, other item) triples, as `BPR` and `TwoTower` train on);
    - `user_vectors(user_ids)` and `item_vectors()` (numpy rows whose dot product is
      the score) and `item_biases()` (an (n_items,) array added to every score, or None);
    - `settings()` (the constructor's keyword arguments, as JSON values), and
      `_arrays()` for the arrays it is built from besides its weights (TwoTower's
      feature ids): each worker of `fit`, and `load`, rebuild the model from them
      around its weights (`_around`).

    `liked` holds the interactions of the last `fit` (canonical CSR), which
    `recommend` filters out by default; `save` keeps it.
    """

    liked = None
    iterations = 1          # fit's default epochs (BPR built implicit's way: its iterations)
    learning_rate = 0.05    # fit's default lr

    def _arrays(self):
        """{name: array, or a dict of arrays}: the arrays, besides the weights, that the
        constructor takes (TwoTower's feature ids); none by default."""
        return {}

    @classmethod
    def _around(cls, settings, arrays, weights):
        """The model of `settings` and `arrays` (as `_arrays()` gave them) over `weights`
        ({dotted name: array or Hogwild handle, adopted zero-copy}), as `load` and each
        worker of `fit` rebuild it. A subclass whose constructor takes its weights
        overrides this, so that no worker draws an initialisation only to throw it away."""
        return _share_parameters(cls(**settings, **arrays), weights)

    def epoch_sampler(self, feeds, interactions, n, seed, negatives="uniform"):
        """A sampler that draws an epoch's `n` examples of `interactions` (`fa.data.Interactions`)
        inside `fa.train`'s loop for the graph whose `feeds` `example_graph()` returned, its
        negatives drawn as `negatives` says, or None to train on examples drawn before the
        epoch (`sample_examples`)."""
        return None

    def sample_examples(self, interactions, n, seed, negatives="uniform"):
        """`n` examples of `interactions` drawn from `seed`, as the feeds of `example_graph()`
        take them: what an epoch trains on when `epoch_sampler` gives None."""
        raise NotImplementedError(f"{type(self).__name__} does not define sample_examples()")

    def host_sampler(self, interactions, batch, n, seed, negatives="uniform"):
        """A compiled sampler that draws an epoch's `n` batches of `batch` examples on the
        host, for a fit on a device: the stream of the CPU fit."""
        raise NotImplementedError(f"{type(self).__name__} does not define host_sampler()")

    def drawn_examples(self, drawn):
        """The examples of `drawn`, one batch that `host_sampler`'s sampler drew, as the feeds
        of `example_graph()` take them."""
        raise NotImplementedError(f"{type(self).__name__} does not define drawn_examples()")

    def epoch_samples(self, matrix):
        """fit's default examples an epoch for the checked user x item `matrix`: one per
        interaction."""
        return matrix.nnz

    def check_run(self, who, settings):
        """Raise what the model cannot train as `settings` (a `RunSettings`) ask, before fit
        changes anything; nothing by default."""

    def _optimizer_state(self, optimizer):
        """The state of `optimizer` (its name) that `fit` starts from and keeps, trained in place:
        {weight name: {slot: array}}, `EpochRunner`'s `state` (LightFM's Adagrad sums, carried
        from one `fit_partial` to the next); None by default: each fit's optimizer starts anew."""
        return None

    def _size_for(self, shape):
        """Make the weights for a user x item matrix of `shape`, if the model has none yet
        (a `BPR` built implicit's way, without sizes); `fit` calls it once the matrix is checked."""

    def fit(self, interactions, epochs=None, workers=1, lr=None, optimizer="sgd", seed=0, samples=None,
            callback=None, progress=None, start_method=None, device="cpu", batch_size=None,
            negatives="uniform", optimizer_options=None):
        """Train on a scipy user x item matrix (or a `fa.data.Interactions` made from one, read
        without a copy) with the model's ranking loss; returns the model (as
        implicit's, gensim's and scikit-learn's fit do), its `history` the mean loss per epoch.
        `epochs` and `lr` default to the model's `iterations` and `learning_rate` (1 and
        0.05, or implicit's 100 and 0.01 for a `BPR` built implicit's way). A model built
        without sizes is sized by its first fit, from the matrix's shape.

        Each epoch draws `samples` examples (default `epoch_samples(matrix)`: one per
        interaction; one per user for `BPR(loss="warp-kos")`)
        with the model's sampler (`BPR` and `TwoTower`: triples by
        `fa.data.sample_triples`' rule, users by interaction and negatives among
        the items the user did not like, `negatives="uniform"` over the items
        or `"popularity"` in proportion to their interactions, as implicit's
        BPR draws them; `BPR` draws them inside `fa.train`'s loop with
        `fa.data.PairwiseSampler`), and trains on them
        with `optimizer` ("sgd", "adagrad" or "adam") at rate `lr` (and the keyword
        arguments of `optimizer_options`, a dict: `{"initial_accumulator_value": 1.0}`
        gives Adagrad LightFM's schedule, its sums starting at 1): in this
        process with `fa.train` when `workers` is 1, else in `workers` Hogwild
        workers that each draw and train on their share of the examples:
        processes (`start_method` "fork" on Linux by default, else "spawn"),
        over a copy of the weights in shared memory that is copied back at the
        end, or after each epoch when there is a `callback`; or, with
        `start_method="threads"`, threads of this process that train the
        model's own arrays in place (no copy, no shared-memory segment).
        `seed` (an int >= 0, or None for a fresh one) fixes the sampling (and,
        with one worker, the whole run).

        Each step trains `batch_size` examples: one replay of the model's graph of
        that many examples, their losses summed and their gradients applied
        together (an item that recurs in a batch gets the sum of its gradients in
        one step); an epoch trains `samples` rounded up to whole batches. The
        default is 1 on the CPU (per-example SGD, as implicit's loop) and 1024 on
        a GPU. On the CPU a batch of 16 shares each replay's fixed cost among 16
        examples (docs/benchmarks.md gives speed and ranking quality at both
        sizes).

        `device="cuda"` (or "cuda:N") trains a copy of the model on that GPU,
        in one process: the host draws each batch with the model's
        `host_sampler` (`PairwiseSampler` for `BPR` and `TwoTower`: the same
        stream as the CPU fit, at one batch size the same examples in the same
        order), the device runs the model's graph and the optimizer step.
        The trained weights are copied back into the model (after each epoch
        when there is a `callback`), so `recommend` and the rest read numpy as
        after a CPU fit.

        `callback(epoch, loss)`, if given, runs after each epoch (numbered from
        1), with the epoch's mean loss per example and the model holding that
        epoch's weights; `progress(done, per_second)` is called during training
        with the examples trained so far in the fit, counting on across epochs
        (an epoch's `samples` rounded up to whole batches per worker), and the
        rate (e.g. `fa.progress_bar(epochs * samples)`): the protocol of
        `fa.train` and `fa.hogwild.run`. Every argument is checked before any
        weight changes.

        >>> likes = fa.data.planted_interactions(1000, 500, per_user=20)
        >>> train, test = fa.data.train_test_split(likes, 0.2)
        >>> model = fa.models.BPR(1000, 500, dim=32)
        >>> model.fit(train, epochs=5, workers=2, lr=0.1)
        """
        who = f"{type(self).__name__}.fit"
        shape = None if self.n_users is None else (self.n_users, self.n_items)
        if isinstance(interactions, Interactions):      # laid out by the caller: read without a copy
            data, matrix = interactions, interactions.matrix
            if shape is not None and matrix.shape != shape:
                raise ValueError(f"{who}: interactions has shape {matrix.shape}, expected {shape} "
                                 f"(users x items of the model)")
        else:
            data, matrix = None, check_interactions(interactions, who, shape=shape)
        require_negatives(matrix, who, negatives=negatives)
        epochs = check_int(who, "epochs", self.iterations if epochs is None else epochs)
        workers = check_int(who, "workers", workers)
        samples = self.epoch_samples(matrix) if samples is None else check_int(who, "samples", samples)
        if samples < workers:
            raise ValueError(f"{who}: samples ({samples}) must be >= workers ({workers}): every "
                             f"worker trains on its share of each epoch's examples")
        seed = fastad_random.seed_of(who, seed)
        lr = check_number(who, "lr", self.learning_rate if lr is None else lr, above=0)
        check_choice(who, "optimizer", optimizer, sorted(OPTIMIZERS))
        options = optimizer_options_of(who, optimizer, optimizer_options, lr)
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        settings = RunSettings.for_fit(who, workers, start_method, device, batch_size, samples=samples,
                                       optimizer=optimizer, lr=lr, optimizer_options=options, first_epoch=1)
        self.check_run(who, settings)
        self._size_for(matrix.shape)
        self.liked = matrix
        # the matrix laid out once for every epoch's and worker's sampler
        fitting = _Fitting(type(self), self.settings(), self._arrays(),
                           Interactions(matrix, copy=False) if data is None else data,
                           seed, negatives)
        weights = {name: p.value for name, p in self.named_parameters()}
        with EpochRunner(fitting, weights, settings, progress, state=self._optimizer_state(optimizer)) as runner:
            self.history = runner.train(range(1, epochs + 1), callback)
        return self

    def scores(self, user_ids):
        """The (len(user_ids), n_items) scores of the users for every item (one matrix product).

        >>> model.scores([0, 1]).shape
        (2, 500)
        """
        self._require_trained("scores")
        users = check_ids(f"{type(self).__name__}.scores", "user_ids", user_ids, self.n_users,
                          "users of the model")
        scores = self.user_vectors(users) @ self.item_vectors().T
        biases = self.item_biases()
        return scores if biases is None else scores + biases

    def recommend(self, user_ids, *args, **kwargs):
        """The top items for each user, `(ids, scores)`, best first; called fastad's way or
        implicit's (`recommend(userid, user_items, N=10, ...)`), told apart by the call.

        fastad's: `recommend(user_ids, k=10, filter_liked=True, items=None, liked=None,
        batch_size=1000)`. `user_ids` is one id (results are 1-D) or a sequence
        (results are (n, k)); users are scored `batch_size` at a time with one matrix
        product. `filter_liked` leaves out the items each user liked in `liked` (a user
        x item matrix, indexed by user id; default: the matrix of the last `fit`).
        `items` restricts the candidates to those item ids.

        implicit's (`MatrixFactorizationBase.recommend` of implicit 0.7), taken when the
        second argument is a scipy sparse matrix or a keyword is one of implicit's
        (`user_items`, `N`, `filter_already_liked_items`, `filter_items`,
        `recalculate_user`): `recommend(userid, user_items, N=10,
        filter_already_liked_items=True, filter_items=None, recalculate_user=False,
        items=None)`. `user_items` holds the rows of the users asked for, in their order
        (one row for one id; implicit's tutorial passes `user_items[userid]`), and its
        items are left out unless `filter_already_liked_items=False` (then it may be
        None); `filter_items` leaves those item ids out for everyone; `items` restricts
        the candidates (not with `filter_items`); `recalculate_user=True` raises
        NotImplementedError, as implicit's BPR does.

        Either way a user with fewer candidates than asked for gets id -1 (score -inf) in
        the slots left over (where implicit fills them with other ids), the count is
        capped at the candidates, and ties go to the lower item id. Ids are int64 and
        scores float64 (implicit: int32 and float32).

        >>> ids, scores = model.recommend([0, 1, 2], k=10)
        >>> ids, scores = model.recommend(7, k=5, items=np.arange(100))   # among items 0..99
        >>> ids, scores = model.recommend(7, likes[7], N=5)               # implicit's call
        """
        if (args and sp.issparse(args[0])) or not _IMPLICIT_RECOMMEND.isdisjoint(kwargs):
            fastads = sorted(_FASTAD_RECOMMEND.intersection(kwargs))
            if fastads:
                raise TypeError(f"{type(self).__name__}.recommend: {', '.join(fastads)} belong to fastad's "
                                f"call, recommend(user_ids, k=10, ...); implicit's (user_items given) "
                                f"takes N, filter_already_liked_items, filter_items and items")
            return self._recommend_as_implicit(user_ids, *args, **kwargs)
        return self._recommend(user_ids, *args, **kwargs)

    def _recommend(self, user_ids, k=10, filter_liked=True, items=None, liked=None, batch_size=1000):
        """`recommend` called fastad's way."""
        who = f"{type(self).__name__}.recommend"
        self._require_trained("recommend")
        k = check_int(who, "k", k)
        batch_size = check_int(who, "batch_size", batch_size)
        users = _queries(who, "user_ids", user_ids, self.n_users, "users")
        candidates = _candidates(who, "items", items, None, self.n_items, empty=False)
        if filter_liked:
            if liked is None and self.liked is None:
                raise ValueError(f"{who}: filter_liked=True needs the items each user liked: fit the "
                                 f"model first, pass liked= (a user x item matrix), or filter_liked=False")
            liked = self.liked if liked is None else check_interactions(
                liked, who, "liked", shape=(self.n_users, self.n_items))
        excluded = (lambda rows: liked[users[rows]]) if filter_liked else None
        ids, scores = self._rank(users, k, candidates, excluded, batch_size)
        return (ids[0], scores[0]) if np.ndim(user_ids) == 0 else (ids, scores)

    def _recommend_as_implicit(self, userid, user_items=None, N=10, filter_already_liked_items=True,
                               filter_items=None, recalculate_user=False, items=None):
        """`recommend` called implicit's way."""
        who = f"{type(self).__name__}.recommend"
        self._require_trained("recommend")
        N = check_int(who, "N", N)
        if check_flag(who, "recalculate_user", recalculate_user):
            raise NotImplementedError(f"{who}: recalculate_user is not supported with this model "
                                      f"(as with implicit's BPR)")
        users = _queries(who, "userid", userid, self.n_users, "users")
        excluded = None
        if check_flag(who, "filter_already_liked_items", filter_already_liked_items):
            if not sp.issparse(user_items):
                raise TypeError(f"{who}: user_items must be a scipy sparse matrix of the users' rows "
                                f"(or filter_already_liked_items=False), got {type(user_items).__name__}")
            rows = sp.csr_matrix(user_items)
            if rows.shape != (len(users), self.n_items):
                raise ValueError(f"{who}: user_items must hold one row per user asked for ({len(users)}) "
                                 f"and one column per item ({self.n_items}), got shape {rows.shape}")
            excluded = lambda batch: rows[batch]        # noqa: E731
        candidates = _candidates(who, "items", items, filter_items, self.n_items, empty=False)
        if items is not None:
            candidates = np.sort(candidates)        # ties go to the lower item id
        ids, scores = self._rank(users, N, candidates, excluded)
        return (ids[0], scores[0]) if np.ndim(userid) == 0 else (ids, scores)

    def _rank(self, users, k, candidates, excluded, batch_size=1000):
        """The top `k` of `candidates` (None: every item) for each of `users`: (ids, scores),
        each (len(users), k capped at the candidates); `excluded(positions)`, if given, is
        the user x item matrix of the items to leave out for the users at those positions."""
        vectors, biases = self.item_vectors(), self.item_biases()
        if candidates is not None:
            vectors = vectors[candidates]
            biases = None if biases is None else biases[candidates]

        def score_rows(positions):
            scores = self.user_vectors(users[positions]) @ vectors.T
            if biases is not None:
                scores += biases
            if excluded is not None:
                mask = excluded(positions).toarray() > 0
                scores[mask if candidates is None else mask[:, candidates]] = -np.inf
            return scores

        return _top_k_in_batches(np.arange(len(users)), min(k, len(vectors)), score_rows, candidates,
                                 batch_size)

    def similar_items(self, item_ids, N=10, filter_items=None, items=None, *, k=None):
        """The items most similar to each item by cosine of item vectors: `(ids, similarities)`,
        best first; one id gives 1-D results, a sequence (n, N).

        implicit's call and semantics (`similar_items(itemid, N=10, filter_items=None,
        items=None)`): the item itself is among them (first, at similarity 1, unless
        another has the same direction); `items` restricts the candidates and
        `filter_items` leaves some out (not both). fastad's older call, `k=` instead
        of `N`, leaves the item itself out and lists its `k` nearest others. implicit's
        BPR takes the cosine with its item bias appended to the factors; fastad's is of
        the factors alone. (`recalculate_item` is not supported.)

        >>> ids, sims = model.similar_items(42)          # ids[0] == 42
        >>> ids, sims = model.similar_items(42, k=5)     # 5 others
        """
        self._require_trained("similar_items")
        return _nearest(f"{type(self).__name__}.similar_items", "item_ids", item_ids, self.item_vectors(),
                        N, k, filter_items, items, "items")

    def similar_users(self, user_ids, N=10, filter_users=None, users=None, *, k=None):
        """The users most similar to each user by cosine of user vectors: `(ids, similarities)`,
        as `similar_items` ranks items (implicit's call `similar_users(userid, N=10,
        filter_users=None, users=None)`: the user itself included; `k=`: left out).

        >>> ids, sims = model.similar_users([0, 1], N=5)
        """
        self._require_trained("similar_users")
        return _nearest(f"{type(self).__name__}.similar_users", "user_ids", user_ids,
                        self.user_vectors(np.arange(self.n_users)), N, k, filter_users, users, "users")

    def _require_trained(self, method):
        """A ValueError naming `method` unless the model has its weights (a BPR built without
        sizes gets them from its first fit)."""
        if self.n_users is None:
            raise ValueError(f"{type(self).__name__}.{method}: the model has no factors yet: built "
                             f"without n_users and n_items, it is sized by its first fit(user_items)")

    @property
    def user_factors(self):
        """Every user's vector, (n_users, dim) (implicit's name; its BPR appends a column of
        ones where fastad keeps item biases apart, in `item_biases()`)."""
        return self.user_vectors(np.arange(self.n_users))

    @property
    def item_factors(self):
        """Every item's vector, (n_items, dim) (implicit's name)."""
        return self.item_vectors()

    def _state(self):
        """The weights, the arrays the model is built from (`_arrays`), and the interactions of
        its last fit, which `recommend` filters."""
        state = {"weights": self.state_dict(), "arrays": self._arrays()}
        if self.liked is not None:
            state["liked"] = {"indptr": self.liked.indptr, "indices": self.liked.indices,
                              "data": self.liked.data, "shape": np.array(self.liked.shape)}
        return state

    @classmethod
    def _from_state(cls, settings, state):
        """The model around its saved weights (`_around`), with the interactions of its last fit."""
        weights = {name: np.array(w) for name, w in state["weights"].items()}
        model = cls._around(settings, state["arrays"], weights)
        if "liked" in state:
            liked = state["liked"]
            model.liked = sp.csr_matrix((liked["data"], liked["indices"], liked["indptr"]),
                                        shape=tuple(liked["shape"]))
        return model

    @classmethod
    def _earlier_format(cls, saved):
        """(settings, state) of a file saved before the one format: `{"model", "config": the
        settings and the constructor's arrays (TwoTower's feature ids), "weights", "liked"}`."""
        config = saved["config"]
        arrays = {name: value for name, value in config.items() if isinstance(value, (dict, np.ndarray))}
        state = {"weights": saved["weights"], "arrays": arrays}
        if "liked" in saved:
            state["liked"] = saved["liked"]
        return {name: value for name, value in config.items() if name not in arrays}, state

    def auc(self, triples):
        """The share of triples (dict of `users`, `pos`, `neg` ids) whose `pos` scores above `neg`.

        For held-out interactions, see `fa.metrics.auc` and `fa.metrics.evaluate`.

        >>> model.auc(test_triples)      # 0.5 is chance
        """
        who = f"{type(self).__name__}.auc"
        self._require_trained("auc")
        users = check_ids(who, "triples['users']", triples["users"], self.n_users, "users of the model")
        pos = check_ids(who, "triples['pos']", triples["pos"], self.n_items, "items of the model")
        neg = check_ids(who, "triples['neg']", triples["neg"], self.n_items, "items of the model")
        items = self.item_vectors()
        margin = np.einsum("nk,nk->n", self.user_vectors(users), items[pos] - items[neg])
        biases = self.item_biases()
        if biases is not None:
            margin += biases[pos] - biases[neg]
        return float(np.mean(margin > 0))


def _nearest(who, name, ids, vectors, N, k, filter_ids, among, what):
    """similar_items' and similar_users' ranking of the rows of `vectors` by cosine to the
    rows `ids`: implicit's (`N`, the row itself included, `filter_ids` left out, `among` the
    candidates) or, with `k`, fastad's (the `k` nearest others)."""
    queries = _queries(who, name, ids, len(vectors), what)
    if k is not None and (N != 10 or filter_ids is not None or among is not None):
        raise TypeError(f"{who}: k= (the k nearest others) is fastad's older call; give N "
                        f"(implicit's, which counts the {what[:-1]} itself) and its filters, or k alone")
    count = check_int(who, "N", N) if k is None else min(check_int(who, "k", k), len(vectors) - 1)
    candidates = _candidates(who, what, among, filter_ids, len(vectors))    # None with k
    count = min(count, len(vectors) if candidates is None else len(candidates))
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    unit = vectors / np.where(norms > 0, norms, 1)
    pool = unit if candidates is None else unit[candidates]

    def score_rows(batch):
        similarities = unit[batch] @ pool.T
        if k is not None:
            similarities[np.arange(len(batch)), batch] = -np.inf        # not similar to itself
        return similarities

    found, similarities = _top_k_in_batches(queries, count, score_rows, candidates)
    return (found[0], similarities[0]) if np.ndim(ids) == 0 else (found, similarities)


def _queries(who, name, ids, limit, what):
    """The rows a query asks about: `ids`, one id or a 1-D sequence of ids of the model's `what`
    ("items", "users"), checked, as a 1-D array."""
    array = check_ids(who, name, ids, limit, f"{what} of the model")
    if array.ndim > 1:
        raise ValueError(f"{who}: {name} must be one id or a 1-D sequence, got shape {array.shape}")
    return np.atleast_1d(array)


def _candidates(who, what, among, left_out, limit, empty=True):
    """The ids of the model's `what` ("items", "users") a query ranks: the ids `among` (its
    `items`/`users`; non-empty unless `empty`), or all but those `left_out` (its
    `filter_items`/`filter_users`), not both; None for all of them."""
    if among is not None and left_out is not None:
        raise ValueError(f"{who}: give {what} (the candidates) or filter_{what} (left out), not both")
    if left_out is not None:
        return np.setdiff1d(np.arange(limit), _id_list(who, f"filter_{what}", left_out, limit, what))
    return None if among is None else _id_list(who, what, among, limit, what, empty)


def _id_list(who, name, ids, limit, what, empty=True):
    """`ids` checked as a 1-D sequence (non-empty unless `empty`) of ids of the model's `what`
    ("items", "users")."""
    array = check_ids(who, name, ids, limit, f"{what} of the model")
    if array.ndim != 1 or (array.size == 0 and not empty):
        raise ValueError(f"{who}: {name} must be a {'' if empty else 'non-empty '}1-D sequence of "
                         f"{what[:-1]} ids, got shape {array.shape}")
    return array


# the keywords only implicit's recommend call has, and only fastad's
_IMPLICIT_RECOMMEND = {"user_items", "N", "filter_already_liked_items", "filter_items", "recalculate_user"}
_FASTAD_RECOMMEND = {"k", "filter_liked", "liked", "batch_size"}


@dataclass(frozen=True)
class _Fitting:
    """What a worker of `Recommender.fit` rebuilds its model and draws its examples from
    (picklable: `EpochRunner` sends it to Hogwild processes): the `runner.ModelDescription`
    of a fit."""
    model_class: type
    model_settings: dict
    arrays: dict
    interactions: Interactions
    seed: int
    negatives: str

    def worker_graph(self, weights, settings: RunSettings, rank: int) -> "_FitGraph":
        model = self.model_class._around(self.model_settings, self.arrays, weights)
        if settings.device != "cpu":
            model.to(settings.device)
        return _FitGraph(model, self, settings, rank)


class _FitGraph:
    """The graph of `batch` examples that a worker of `Recommender.fit` replays, and the
    examples of its share of each epoch, drawn by the model's samplers from their own
    seeded stream: a `runner.DeviceWorkerGraph`."""

    def __init__(self, model, fitting, settings, rank):
        self.model, self.fitting, self.rank, self.batch = model, fitting, rank, settings.batch
        self.loss, self.feeds = model.example_graph(batch=settings.batch, device=settings.device)
        self.parameters = dict(model.named_parameters())
        self.share = settings.share(rank)
        self.steps = -(-self.share // self.batch)      # the share rounded up to whole batches

    def _stream(self, epoch):
        """The seed of this worker's examples of `epoch`."""
        return [self.fitting.seed, epoch, self.rank]

    def epoch_data(self, epoch):
        """What `fa.train` replays for the epoch: the model's `epoch_sampler` if it has one,
        else the feeds of the examples it draws here (`sample_examples`)."""
        fitting = self.fitting
        sampler = self.model.epoch_sampler(self.feeds, fitting.interactions, self.steps, self._stream(epoch),
                                           fitting.negatives)
        if sampler is not None:
            return sampler
        examples = self.model.sample_examples(fitting.interactions, self.steps * self.batch,
                                              self._stream(epoch), fitting.negatives)
        return {leaf: ids.reshape(self.steps, -1) for leaf, ids in self.feeds(examples).items()}

    def epoch_loss(self, mean, data):
        return mean / self.batch, self.share

    def device_sampler(self, epoch):
        """The model's `host_sampler` drawing the epoch's batches on the host: the CPU fit's stream."""
        return self.model.host_sampler(self.fitting.interactions, self.batch, self.steps, self._stream(epoch),
                                       self.fitting.negatives)

    def device_feeds(self, drawn):
        return self.feeds(self.model.drawn_examples(drawn))


def _share_parameters(model, shared):
    """Replace every Parameter of `model` by a zero-copy Parameter over `shared[its dotted name]`."""
    modules = dict(model.named_modules())
    for name, _ in model.named_parameters():
        owner, _, attribute = name.rpartition(".")
        setattr(modules[owner], attribute, Parameter(shared[name]))
    return model


def _check_scale(who, scale):
    """The standard deviation of the initial weights: > 0, for weights that all start at
    zero get no gradient from a ranking loss of their dot products, and train to nothing
    (every score 0)."""
    return check_number(who, "scale", scale, above=0)



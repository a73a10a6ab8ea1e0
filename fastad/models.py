"""Ready-made ranking models: BPR matrix factorisation and a two-tower model over feature fields.

Both are `Recommender`s: `fit(interactions, epochs, workers, ...)` trains them
on a scipy user x item matrix with the BPR loss (one worker: `fa.train`;
several: Hogwild processes over shared memory; `device="cuda"`: batches on a
GPU); `recommend`, `similar_items`, `similar_users` and `scores` rank with one
matrix product per batch of users.
"""
import sys
import time

import numpy as np

from fastad_cy.graph import IndexInput, Parameter
from fastad_cy.linalg import vector_dot
from fastad_cy.losses import bce_with_logits
from fastad_cy.shape import reshape
from fastad_cy.model_losses import ranking_loss
from fastad_cy.sparse import take
from fastad_cy.samplers import PairwiseSampler
from fastad_cy.train import train
from fastad import hogwild
from fastad import random as fastad_random
from fastad.cuda import check_device
from fastad.checks import (check_callable, check_choice, check_flag, check_int, check_number,
                           check_seed, check_sizes)
from fastad.data import Interactions, _draw_triples, check_interactions, require_negatives
from fastad.metrics import check_ids, top_k
from fastad.optim import SGD, Adagrad, Adam
from fastad.nn.module import Module
from fastad.word2vec import Word2Vec

__all__ = ["Recommender", "BPR", "TwoTower", "Word2Vec", "bpr_hogwild_worker"]

OPTIMIZERS = {"sgd": SGD, "adagrad": Adagrad, "adam": Adam}


def make_optimizer(who, name, parameters, lr):
    """The fastad optimizer called `name` ("sgd", "adagrad" or "adam") over `parameters`."""
    return OPTIMIZERS[check_choice(who, "optimizer", name, sorted(OPTIMIZERS))](parameters, lr=lr)


def bpr_loss(user, pos, neg, bias_difference=None):
    """-sum(log sigmoid(user . (pos - neg) + bias_difference)) over rows of (n, dim) Variables."""
    return margin_loss(vector_dot(user, pos - neg), bias_difference)


def margin_loss(margin, bias_difference=None):
    """-sum(log sigmoid(margin + bias_difference)): the binary cross-entropy of
    sigmoid(margin) against 1, one node in place of a log-sigmoid, a sum and a negation."""
    if bias_difference is not None:
        margin = margin + reshape(bias_difference, margin.shape)
    return bce_with_logits(margin, np.ones(margin.shape, dtype=margin.dtype), reduction="sum")


def _unit_rows(vectors):
    norms = np.linalg.norm(vectors, axis=1, keepdims=True)
    return vectors / np.where(norms > 0, norms, 1)


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


class Recommender(Module):
    """Base class of the ranking models: training on a user x item matrix, and ranking.

    A subclass sets `n_users` and `n_items`, and defines `example_graph(batch,
    device)` (a BPR loss over `batch` triples to replay, its leaves on `device`,
    and its feeds), `user_vectors(user_ids)`
    and `item_vectors()` (numpy rows whose dot product is the score),
    `item_biases()` (an (n_items,) array added to every score, or None) and
    `config()` (the constructor's keyword arguments, without weights, for
    Hogwild workers to rebuild the model around shared arrays).

    `liked` holds the interactions of the last `fit` (canonical CSR), which
    `recommend` filters out by default.
    """

    liked = None

    @classmethod
    def _around(cls, config, weights):
        """The model of `config` over `weights` ({dotted name: array}, shared zero-copy), as a
        Hogwild worker rebuilds it. A subclass whose constructor takes its weights overrides
        this, so that no worker draws an initialisation only to throw it away."""
        return _share_parameters(cls(**config), weights)

    def epoch_sampler(self, feeds, interactions, n, seed, negatives="uniform"):
        """A sampler that draws an epoch's `n` triples of `interactions` (`fa.data.Interactions`)
        inside `fa.train`'s loop for the graph whose `feeds` `example_graph()` returned, its
        negatives drawn as `negatives` says, or None to train on precomputed triples."""
        return None

    def fit(self, interactions, epochs=1, workers=1, lr=0.05, optimizer="sgd", seed=0, samples=None,
            callback=None, progress=None, start_method=None, device="cpu", batch_size=None,
            negatives="uniform"):
        """Train on a scipy user x item matrix with the BPR loss; returns the mean loss per epoch.

        Each epoch draws `samples` triples (default: one per interaction) by
        `fa.data.sample_triples`' rule (users by interaction; negatives among
        the items the user did not like, `negatives="uniform"` over the items
        or `"popularity"` in proportion to their interactions, as implicit's
        BPR draws them; `BPR` draws them inside `fa.train`'s loop with
        `fa.data.PairwiseSampler`), and trains on them
        with `optimizer` ("sgd", "adagrad" or "adam") at rate `lr`: in this
        process with `fa.train` when `workers` is 1, else in `workers` Hogwild
        workers that each draw and train on their share of the triples:
        processes (`start_method` "fork" on Linux by default, else "spawn"),
        over a copy of the weights in shared memory that is copied back at the
        end, or after each epoch when there is a `callback`; or, with
        `start_method="threads"`, threads of this process that train the
        model's own arrays in place (no copy, no shared-memory segment).
        `seed` (an int >= 0, or None for a fresh one) fixes the sampling (and,
        with one worker, the whole run).

        Each step trains `batch_size` triples: one replay of the model's graph of
        that many triples, their losses summed and their gradients applied
        together (an item that recurs in a batch gets the sum of its gradients in
        one step); an epoch trains `samples` rounded up to whole batches. The
        default is 1 on the CPU (per-example SGD, as implicit's loop) and 1024 on
        a GPU. On the CPU a batch of 16 shares each replay's fixed cost among 16
        triples (the README's benchmarks give speed and ranking quality at both
        sizes).

        `device="cuda"` (or "cuda:N") trains a copy of the model on that GPU,
        in one process: the host draws each batch with `PairwiseSampler` (the
        same stream as the CPU fit: at one batch size, the same triples in the
        same order), the device runs the model's graph and the optimizer step.
        The trained weights are copied back into the model (after each epoch
        when there is a `callback`), so `recommend` and the rest read numpy as
        after a CPU fit.

        `callback(epoch, loss)`, if given, runs after each epoch (1-based),
        with the model holding that epoch's weights; `progress(examples_done,
        examples_per_second)` is called during training (e.g.
        `fa.hogwild.progress_bar(epochs * samples)`). Every argument is
        checked before any weight changes.

        >>> likes = fa.data.planted_interactions(1000, 500, per_user=20)
        >>> train, test = fa.data.train_test_split(likes, 0.2)
        >>> model = fa.models.BPR(1000, 500, dim=32)
        >>> model.fit(train, epochs=5, workers=2, lr=0.1)
        """
        who = f"{type(self).__name__}.fit"
        matrix = check_interactions(interactions, who, shape=(self.n_users, self.n_items))
        require_negatives(matrix, who, negatives=negatives)
        epochs = check_int(who, "epochs", epochs)
        workers = check_int(who, "workers", workers)
        samples = matrix.nnz if samples is None else check_int(who, "samples", samples)
        if samples < workers:
            raise ValueError(f"{who}: samples ({samples}) must be >= workers ({workers}): every "
                             f"worker trains on its share of each epoch's triples")
        seed = check_seed(who, seed)
        if seed is None:
            seed = fastad_random.generator(who).integers(2**63)
        lr = check_number(who, "lr", lr, above=0)
        check_choice(who, "optimizer", optimizer, sorted(OPTIMIZERS))
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        check_choice(who, "start_method", start_method, [None] + hogwild.start_methods())
        if start_method is None:
            start_method = "fork" if sys.platform.startswith("linux") else "spawn"
        device = check_device(who, device)
        if batch_size is None:
            batch_size = 1 if device == "cpu" else 1024
        batch_size = min(check_int(who, "batch_size", batch_size), samples // workers)
        if device != "cpu" and workers != 1:
            raise ValueError(f"{who}: a fit on {device} runs in one process; workers must be 1, "
                             f"got {workers}")
        self.liked = matrix
        data = Interactions(matrix)      # laid out once for every epoch's and worker's sampler
        if device != "cpu":
            epoch_runner = _DeviceEpochs(self, data, samples, seed, device, batch_size,
                                         optimizer, lr, progress, negatives)
        elif workers == 1:
            epoch_runner = _LocalEpochs(self, data, samples, seed, batch_size,
                                        make_optimizer(who, optimizer, self.parameters(), lr), progress,
                                        negatives)
        else:
            epoch_runner = _HogwildEpochs(self, data, samples, seed, batch_size, workers, optimizer,
                                          lr, progress, start_method, negatives)
        # without a callback, Hogwild workers run every epoch in one go (no process start per epoch),
        # and a device copies the weights back once
        runs = ([range(1, epochs + 1)] if callback is None else
                [range(epoch, epoch + 1) for epoch in range(1, epochs + 1)])
        losses = []
        with epoch_runner as run_epochs:
            for epoch_range in runs:
                for epoch, loss in zip(epoch_range, run_epochs(epoch_range)):
                    losses.append(loss)
                    if callback is not None:
                        callback(epoch, loss)
        return losses

    def scores(self, user_ids):
        """The (len(user_ids), n_items) scores of the users for every item (one matrix product).

        >>> model.scores([0, 1]).shape
        (2, 500)
        """
        users = check_ids(f"{type(self).__name__}.scores", "user_ids", user_ids, self.n_users,
                          "users of the model")
        scores = self.user_vectors(users) @ self.item_vectors().T
        biases = self.item_biases()
        return scores if biases is None else scores + biases

    def recommend(self, user_ids, k=10, filter_liked=True, items=None, liked=None, batch_size=1000):
        """The top `k` items for each user: `(ids, scores)`, best first.

        `user_ids` is one id (results are 1-D) or a sequence (results are
        (n, k)); users are scored `batch_size` at a time with one matrix
        product. `filter_liked` leaves out the items each user liked in `liked`
        (a user x item matrix; default: the matrix of the last `fit`).
        `items` restricts the candidates to those item ids. A user with fewer
        than k candidates gets id -1 (score -inf) in the slots left over; k is
        capped at the number of candidates. Ties go to the lower item id.

        >>> ids, scores = model.recommend([0, 1, 2], k=10)
        >>> ids, scores = model.recommend(7, k=5, items=np.arange(100))   # among items 0..99
        """
        who = f"{type(self).__name__}.recommend"
        k = check_int(who, "k", k)
        batch_size = check_int(who, "batch_size", batch_size)
        users = check_ids(who, "user_ids", user_ids, self.n_users, "users of the model")
        if users.ndim > 1:
            raise ValueError(f"{who}: user_ids must be one id or a 1-D sequence, got shape {users.shape}")
        candidates = None
        vectors, biases = self.item_vectors(), self.item_biases()
        if items is not None:
            candidates = check_ids(who, "items", items, self.n_items, "items of the model")
            if candidates.ndim != 1 or candidates.size == 0:
                raise ValueError(f"{who}: items must be a non-empty 1-D sequence of item ids, "
                                 f"got shape {candidates.shape}")
            vectors = vectors[candidates]
            biases = None if biases is None else biases[candidates]
        if filter_liked:
            if liked is None and self.liked is None:
                raise ValueError(f"{who}: filter_liked=True needs the items each user liked: fit the "
                                 f"model first, pass liked= (a user x item matrix), or filter_liked=False")
            liked = self.liked if liked is None else check_interactions(
                liked, who, "liked", shape=(self.n_users, self.n_items))

        def score_rows(batch):
            scores = self.user_vectors(batch) @ vectors.T
            if biases is not None:
                scores += biases
            if filter_liked:
                mask = liked[batch].toarray() > 0
                scores[mask if candidates is None else mask[:, candidates]] = -np.inf
            return scores

        ids, scores = _top_k_in_batches(np.atleast_1d(users), min(k, len(vectors)), score_rows,
                                        candidates, batch_size)
        return (ids[0], scores[0]) if users.ndim == 0 else (ids, scores)

    def similar_items(self, item_ids, k=10):
        """The `k` items most similar to each item by cosine of item vectors: `(ids, similarities)`.

        An item is not listed as similar to itself. One id gives 1-D results,
        a sequence (n, k).

        >>> ids, sims = model.similar_items(42, k=5)
        """
        return _nearest(f"{type(self).__name__}.similar_items", "item_ids", item_ids,
                        self.item_vectors(), k, "items of the model")

    def similar_users(self, user_ids, k=10):
        """The `k` users most similar to each user by cosine of user vectors: `(ids, similarities)`.

        >>> ids, sims = model.similar_users([0, 1], k=5)
        """
        return _nearest(f"{type(self).__name__}.similar_users", "user_ids", user_ids,
                        self.user_vectors(np.arange(self.n_users)), k, "users of the model")

    def auc(self, triples):
        """The share of triples (dict of `users`, `pos`, `neg` ids) whose `pos` scores above `neg`.

        For held-out interactions, see `fa.metrics.auc` and `fa.metrics.evaluate`.

        >>> model.auc(test_triples)      # 0.5 is chance
        """
        who = f"{type(self).__name__}.auc"
        users = check_ids(who, "triples['users']", triples["users"], self.n_users, "users of the model")
        pos = check_ids(who, "triples['pos']", triples["pos"], self.n_items, "items of the model")
        neg = check_ids(who, "triples['neg']", triples["neg"], self.n_items, "items of the model")
        items = self.item_vectors()
        margin = np.einsum("nk,nk->n", self.user_vectors(users), items[pos] - items[neg])
        biases = self.item_biases()
        if biases is not None:
            margin += biases[pos] - biases[neg]
        return float(np.mean(margin > 0))


def _nearest(who, name, ids, vectors, k, what):
    k = check_int(who, "k", k)
    queries = check_ids(who, name, ids, len(vectors), what)
    if queries.ndim > 1:
        raise ValueError(f"{who}: {name} must be one id or a 1-D sequence, got shape {queries.shape}")
    unit = _unit_rows(vectors)

    def score_rows(batch):
        similarities = unit[batch] @ unit.T
        similarities[np.arange(len(batch)), batch] = -np.inf        # not similar to itself
        return similarities

    ids, similarities = _top_k_in_batches(np.atleast_1d(queries), min(k, len(vectors) - 1), score_rows)
    return (ids[0], similarities[0]) if queries.ndim == 0 else (ids, similarities)


def _share(samples, workers, rank):
    """The triples of an epoch that Hogwild worker `rank` draws."""
    return samples // workers + (rank < samples % workers)


def _trained_per_epoch(samples, batch, workers):
    """The triples an epoch trains: each worker's share rounded up to whole batches."""
    return sum(-(-_share(samples, workers, rank) // batch) * batch for rank in range(workers))


def _epoch_data(model, feeds, interactions, n, batch, seed, negatives, epoch, rank=0):
    """What `fa.train` replays for the `n` triples of one epoch (of one Hogwild rank), in
    examples of `batch` triples (n rounded up to whole batches), from their own seeded
    stream: the model's `epoch_sampler` if it has one, else the triples' feeds."""
    stream, examples = [seed, epoch, rank], -(-n // batch)
    sampler = model.epoch_sampler(feeds, interactions, examples, stream, negatives)
    if sampler is not None:
        return sampler
    triples = _draw_triples(interactions, examples * batch, stream, negatives)
    return {leaf: ids.reshape(examples, -1) for leaf, ids in feeds(triples).items()}


class _LocalEpochs:
    """Epochs in this process: one graph and one optimizer, replayed by `fa.train`."""

    def __init__(self, model, interactions, samples, seed, batch, optimizer, progress, negatives):
        self.model, self.batch = model, batch
        self.loss, self.feeds = model.example_graph(batch=batch)
        self.interactions, self.samples, self.seed = interactions, samples, seed
        self.negatives = negatives
        self.optimizer = optimizer
        self.progress = progress

    def __enter__(self):
        return self.run

    def __exit__(self, *exc):
        return False

    def run(self, epochs):
        return [self.run_epoch(epoch) for epoch in epochs]

    def run_epoch(self, epoch):
        report = None
        if self.progress is not None:
            done_before = (epoch - 1) * _trained_per_epoch(self.samples, self.batch, 1)
            clock = [time.perf_counter(), 0]

            def report(steps):
                now, done = time.perf_counter(), steps * self.batch
                self.progress(done_before + done, (done - clock[1]) / max(now - clock[0], 1e-9))
                clock[:] = [now, done]

        data = _epoch_data(self.model, self.feeds, self.interactions, self.samples, self.batch,
                           self.seed, self.negatives, epoch)
        return train(self.loss, self.optimizer, data, progress=report,
                     report_every=max(1, 10_000 // self.batch))[0] / self.batch


class _DeviceEpochs:
    """Epochs on a GPU: a copy of the model there, trained on batches of triples that
    `PairwiseSampler` draws on the host (the CPU fit's stream), the weights copied back
    into the model after each run of epochs."""

    def __init__(self, model, interactions, samples, seed, device, batch_size, optimizer, lr, progress,
                 negatives):
        self.model, self.interactions, self.seed, self.device = model, interactions, seed, device
        self.negatives = negatives
        self.batch_size, self.batches = batch_size, -(-samples // batch_size)
        self.optimizer, self.lr, self.progress = optimizer, lr, progress

    def __enter__(self):
        copy = type(self.model)(**self.model.config())
        copy.load_state_dict(self.model.state_dict())
        self.device_model = copy.to(self.device)
        self.loss, self.feeds = copy.example_graph(batch=self.batch_size, device=self.device)
        self.device_optimizer = make_optimizer(f"{type(self.model).__name__}.fit", self.optimizer,
                                               copy.parameters(), self.lr)
        self.drawn = [IndexInput(np.zeros(self.batch_size, dtype=np.int64)) for _ in range(3)]
        return self.run

    def __exit__(self, *exc):
        return False

    def run(self, epochs):
        losses = [self.run_epoch(epoch) for epoch in epochs]
        self.model.load_state_dict(self.device_model.state_dict())
        return losses

    def run_epoch(self, epoch):
        sampler = PairwiseSampler(self.interactions, *self.drawn, examples=self.batches,
                                  seed=[self.seed, epoch, 0], negatives=self.negatives)
        report_every = max(1, 10_000 // self.batch_size)
        clock = [time.perf_counter(), 0]
        total = None
        for done, (users, pos, neg) in enumerate(sampler.epoch(), 1):
            for leaf, ids in self.feeds({"users": users, "pos": pos, "neg": neg}).items():
                leaf.set_value(ids)
            self.loss.forward()
            self.device_optimizer.zero_grad()
            self.loss.backward()
            self.device_optimizer.step()
            # summed on the device: no copy to the host per batch
            total = self.loss.value.astype(np.float64) if total is None else total + self.loss.value
            if self.progress is not None and (done % report_every == 0 or done == self.batches):
                now, examples = time.perf_counter(), done * self.batch_size
                self.progress((epoch - 1) * self.batches * self.batch_size + examples,
                              (examples - clock[1]) / max(now - clock[0], 1e-9))
                clock[:] = [now, examples]
        return float(total) / (self.batches * self.batch_size)


class _HogwildEpochs:
    """Epochs in Hogwild workers over the model's weights: in shared memory, copied back after
    each run of epochs, for processes; for threads, the model's own arrays, trained in place."""

    def __init__(self, model, interactions, samples, seed, batch, workers, optimizer, lr, progress,
                 start_method, negatives):
        self.model, self.interactions, self.samples, self.seed = model, interactions, samples, seed
        self.negatives = negatives
        self.batch = batch
        self.workers, self.optimizer, self.lr = workers, optimizer, lr
        self.progress, self.start_method = progress, start_method
        self.shared = None

    def __enter__(self):
        self.shared = hogwild.share_for(self.start_method, {name: p.value for name, p in
                                                            self.model.named_parameters()})
        return self.run

    def __exit__(self, *exc):
        self.shared.close()
        return False

    def run(self, epochs):
        progress = None
        if self.progress is not None:
            done_before = (epochs[0] - 1) * _trained_per_epoch(self.samples, self.batch, self.workers)

            def progress(done, per_second):
                self.progress(done_before + done, per_second)

        results = hogwild.run(_fit_worker, workers=self.workers, start_method=self.start_method,
                              args=(self.shared, type(self.model), self.model.config(),
                                    self.interactions, self.samples, self.batch, self.workers,
                                    self.optimizer, self.lr, self.seed, self.negatives, epochs),
                              progress=progress)
        if not hogwild.in_place(self.shared):
            self.model.load_state_dict({name: handle.numpy() for name, handle in self.shared.items()})
        examples = [r["examples"] / len(epochs) for r in results]
        return [sum(r["loss"][i] * n for r, n in zip(results, examples)) / sum(examples)
                for i in range(len(epochs))]


def _share_parameters(model, shared):
    """Replace every Parameter of `model` by a zero-copy Parameter over `shared[its dotted name]`."""
    for name, _ in model.named_parameters():
        owner, _, attribute = name.rpartition(".")
        module = model
        for part in filter(None, owner.split(".")):
            module = module._modules[part]
        setattr(module, attribute, Parameter(shared[name]))
    return model


def _train_reporting(loss, optimizer, feeds, epochs=1, shuffle=False, seed=None):
    """`fa.train` in a Hogwild worker, adding its progress to `hogwild.report`."""
    return train(loss, optimizer, feeds, epochs=epochs, shuffle=shuffle, seed=seed,
                 progress=hogwild.train_progress(), report_every=10_000)


def _fit_worker(rank, shared, model_class, config, interactions, samples, batch, workers, optimizer,
                lr, seed, negatives, epochs):
    """A Hogwild worker of `Recommender.fit`: the model rebuilt around the shared weights, trained
    for `epochs` (a range) on this rank's share of each epoch's triples, which it draws itself
    `batch` triples a step."""
    model = model_class._around(config, shared)
    loss, feeds = model.example_graph(batch=batch)
    opt = make_optimizer(f"{model_class.__name__}.fit", optimizer, model.parameters(), lr)
    share = _share(samples, workers, rank)
    start = time.perf_counter()
    means = [train(loss, opt, _epoch_data(model, feeds, interactions, share, batch, seed, negatives,
                                          epoch, rank),
                   progress=hogwild.train_progress(per_example=batch),
                   report_every=max(1, 10_000 // batch))[0] / batch
             for epoch in epochs]
    return {"loss": means, "examples": share * len(epochs), "seconds": time.perf_counter() - start}


class TripleFeeds:
    """`feeds(triples)`: the `{leaf: ids}` of a graph over (users, pos, neg) IndexInputs, for
    triples as `fa.data.planted_preferences` and `sample_triples` make them."""

    def __init__(self, users, pos, neg):
        self.leaves = (users, pos, neg)

    def __call__(self, triples):
        users, pos, neg = self.leaves
        return {users: triples["users"], pos: triples["pos"], neg: triples["neg"]}


class BPR(Recommender):
    """Bayesian personalised ranking by matrix factorisation.

    Users and items get `dim`-dimensional factors U, V (N(0, scale)); a
    triple (u, i, j) says u prefers i to j, and its loss is
    -log sigmoid(U[u].(V[i] - V[j]) + b[i] - b[j]), where the item biases b
    (an (n_items, 1) Parameter `item_bias`, from zero) exist only with
    `biases=True`. Gradients are sparse: a step touches three rows (and two
    biases).

    >>> model = BPR(1000, 500, dim=32)
    >>> model.fit(likes, epochs=5)                      # a scipy user x item matrix
    >>> ids, scores = model.recommend([0, 1], k=10)
    >>> loss, feeds = model.example_graph()             # or train on triples yourself
    >>> fa.train(loss, fa.optim.SGD(model.parameters(), lr=0.05), feeds(train), epochs=1)
    """

    def __init__(self, n_users, n_items, dim=32, scale=0.1, seed=0, dtype=None, U=None, V=None,
                 biases=False):
        super().__init__()
        n_users, n_items, dim = check_sizes("BPR", n_users=n_users, n_items=n_items, dim=dim)
        scale = _check_scale("BPR", scale)
        rng = np.random.default_rng(check_seed("BPR", seed))
        biases = check_flag("BPR", "biases", biases)
        self.U = Parameter(U if U is not None else rng.normal(0, scale, (n_users, dim)), dtype=dtype)
        self.V = Parameter(V if V is not None else rng.normal(0, scale, (n_items, dim)), dtype=dtype)
        if self.U.ndim != 2 or self.V.ndim != 2 or self.U.shape[1] != self.V.shape[1] or \
                0 in self.U.shape + self.V.shape:
            raise ValueError(f"BPR: U and V must be non-empty (users, dim) and (items, dim) arrays "
                             f"with one dim, got shapes {self.U.shape} and {self.V.shape}")
        if biases:
            self.item_bias = Parameter(np.zeros((self.V.shape[0], 1)), dtype=self.V.dtype)

    @property
    def n_users(self):
        return self.U.shape[0]

    @property
    def n_items(self):
        return self.V.shape[0]

    @property
    def biases(self):
        return "item_bias" in self._parameters

    def config(self):
        return {"n_users": self.n_users, "n_items": self.n_items, "dim": self.U.shape[1],
                "dtype": self.U.dtype, "biases": self.biases}

    @classmethod
    def _around(cls, config, weights):
        return _share_parameters(cls(**config, U=weights["U"], V=weights["V"]), weights)

    def forward(self, users, pos, neg):
        """The summed loss of the triples given as IndexInputs (or integer ids) of one shape."""
        bias = self.item_bias if self.biases else None
        return ranking_loss(self.U, users, self.V, pos, neg, item_bias=bias, reduction="sum")

    def example_graph(self, batch=1, device="cpu"):
        """A graph of `batch` triples (default one) to replay, and a function mapping
        triples to its feeds; its leaves are on `device` (where the model must be).

        Returns `(loss, feeds)`; `feeds(triples)` gives the `{leaf: ids}` dict
        that `fastad.train` takes, for triples as made by
        `fastad.data.planted_preferences` or `fastad.data.sample_triples`.
        """
        feeds = TripleFeeds(*(IndexInput(np.zeros(batch, dtype=np.int64), device=device) for _ in range(3)))
        return self(*feeds.leaves), feeds

    def epoch_sampler(self, feeds, interactions, n, seed, negatives="uniform"):
        """The compiled `PairwiseSampler` over the graph's leaves: triples drawn in the loop."""
        return PairwiseSampler(interactions, *feeds.leaves, examples=n, seed=seed, negatives=negatives)

    def user_vectors(self, user_ids):
        return self.U.value[user_ids]

    def item_vectors(self):
        return self.V.value

    def item_biases(self):
        return self.item_bias.value[:, 0] if self.biases else None


class TwoTower(Recommender):
    """Users and items as sums of feature embeddings (as LightFM does), trained with the BPR loss.

    `user_features` maps a field name to an int array with one id per user
    (e.g. `{"id": np.arange(n_users), "age": age_group}`); `item_features`
    likewise per item. Each field gets a table (Parameter `user_<name>` or
    `item_<name>`) of (largest id + 1) x dim rows, N(0, scale); a user's
    vector is the sum of its fields' rows (one `IndexInput` per field in the
    training graph), an item's likewise, and the score is their dot product.
    Users or items that share features share what is learned about them.

    >>> model = fa.models.TwoTower({"id": np.arange(n_users), "age": ages},
    ...                            {"id": np.arange(n_items), "genre": genres}, dim=16)
    >>> model.fit(likes, epochs=5)
    """

    def __init__(self, user_features, item_features, dim=32, scale=0.1, seed=0, dtype=None):
        super().__init__()
        self.user_features = _check_fields("TwoTower", "user_features", user_features)
        self.item_features = _check_fields("TwoTower", "item_features", item_features)
        self.dim = check_int("TwoTower", "dim", dim)
        scale = _check_scale("TwoTower", scale)
        rng = np.random.default_rng(check_seed("TwoTower", seed))
        for side, fields in (("user", self.user_features), ("item", self.item_features)):
            for name, ids in fields.items():
                rows = int(ids.max()) + 1
                setattr(self, f"{side}_{name}", Parameter(rng.normal(0, scale, (rows, dim)), dtype=dtype))

    @property
    def n_users(self):
        return len(next(iter(self.user_features.values())))

    @property
    def n_items(self):
        return len(next(iter(self.item_features.values())))

    def config(self):
        return {"user_features": self.user_features, "item_features": self.item_features,
                "dim": self.dim, "dtype": next(iter(self._parameters.values())).dtype}

    def _tower(self, side, leaves):
        """The sum of the rows of each field's table at the field's IndexInput."""
        total = None
        for name, ids in leaves.items():
            rows = take(self._parameters[f"{side}_{name}"], ids)
            total = rows if total is None else total + rows
        return total

    def example_graph(self, batch=1, device="cpu"):
        """A graph of `batch` triples (default one) to replay, and a function mapping
        triples to its feeds; its leaves are on `device` (where the model must be).

        Each field has an `IndexInput` (items have two: the preferred and the
        other item); `feeds(triples)` looks up each triple's field ids.
        """
        def leaves(fields):
            return {name: IndexInput(np.zeros(batch, dtype=np.int64), device=device) for name in fields}

        user, pos, neg = leaves(self.user_features), leaves(self.item_features), leaves(self.item_features)
        loss = bpr_loss(self._tower("user", user), self._tower("item", pos), self._tower("item", neg))

        def feeds(triples):
            fed = {user[name]: ids[triples["users"]] for name, ids in self.user_features.items()}
            for name, ids in self.item_features.items():
                fed[pos[name]] = ids[triples["pos"]]
                fed[neg[name]] = ids[triples["neg"]]
            return fed

        return loss, feeds

    def _vectors(self, side, fields, rows):
        return sum(self._parameters[f"{side}_{name}"].value[ids[rows]] for name, ids in fields.items())

    def user_vectors(self, user_ids):
        return self._vectors("user", self.user_features, user_ids)

    def item_vectors(self):
        return self._vectors("item", self.item_features, slice(None))

    def item_biases(self):
        return None


def _check_scale(who, scale):
    """The standard deviation of the initial weights: > 0, for weights that all start at
    zero get no gradient from the BPR loss, and train to nothing (every score 0)."""
    return check_number(who, "scale", scale, above=0)


def _check_fields(who, name, fields):
    """{field name: int64 ids} with one length and ids >= 0, or a clear error naming `name`."""
    if not hasattr(fields, "items") or not fields:
        raise TypeError(f"{who}: {name} must be a non-empty dict of field name -> int ids, "
                        f"got {fields!r:.60}")
    checked, length = {}, None
    for field, ids in fields.items():
        if not isinstance(field, str) or not field.isidentifier():
            raise ValueError(f"{who}: {name} field names must be identifiers, got {field!r}")
        array = np.asarray(ids)
        if array.ndim != 1 or array.size == 0 or array.dtype.kind not in "iu":
            raise ValueError(f"{who}: {name}[{field!r}] must be a non-empty 1-D int array, "
                             f"got shape {array.shape} and dtype {array.dtype}")
        if (array < 0).any():
            raise ValueError(f"{who}: {name}[{field!r}] holds a negative id ({array.min()})")
        if length is not None and len(array) != length:
            raise ValueError(f"{who}: the fields of {name} differ in length ({length} and "
                             f"{len(array)} for {field!r}); each needs one id per row")
        length = len(array)
        checked[field] = array.astype(np.int64)
    return checked


def bpr_hogwild_worker(rank, shared, triples, workers, optimizer="sgd", lr=0.05, epochs=1, seed=0):
    """One Hogwild worker of BPR training: `fastad.hogwild.run(bpr_hogwild_worker, ...)`.

    Trains `BPR` factors living in `shared["U"]`, `shared["V"]` (zero copy,
    no locks) on its shard of `triples` (every `workers`-th example from
    `rank`), with `optimizer` "sgd", "adagrad" or "adam" (whose state is
    shared too). Reports its examples to `fastad.hogwild.report` and returns
    `{"loss": mean loss per epoch, "examples": n, "seconds": training time}`.
    (`BPR.fit(..., workers=N)` does all of this from a user x item matrix.)

    >>> with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
    ...     fa.hogwild.run(bpr_hogwild_worker, workers=2, args=(shared, train, 2))
    """
    model = BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    opt = make_optimizer("bpr_hogwild_worker", optimizer, model.parameters(), lr)
    shard = {key: ids[rank::workers] for key, ids in triples.items()}
    start = time.perf_counter()
    means = _train_reporting(loss, opt, feeds(shard), epochs=epochs, shuffle=True, seed=seed + rank)
    return {"loss": means, "examples": epochs * len(shard["users"]),
            "seconds": time.perf_counter() - start}

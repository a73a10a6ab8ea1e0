"""`BPR`: Bayesian personalised ranking by matrix factorisation, and `bpr_hogwild_worker`,
its Hogwild worker on precomputed triples."""
from dataclasses import dataclass

import numpy as np

from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.training.feeds import FeedSampler
from fastad.models.recsys._pairs import RANK_ESTIMATES, PairwiseSampler, WarpSampler
from fastad.ops.ranking import RANKING_LOSSES, ranking_loss
from fastad.checks import check_choice, check_flag, check_int, check_number, either
from fastad.random import generator_of, seed_of
from fastad.models.recsys.recommender import Recommender, _check_scale, _share_parameters
from fastad.models.recsys.triples import TripleSampling
from fastad.models.runner import RunSettings, run_worker

__all__ = ["BPR", "TripleFeeds", "bpr_hogwild_worker"]

#: The losses whose negatives the loop draws against the current scores (`WarpSampler`): each
#: trains the pairwise hinge of `fa.ranking_loss`, weighted by the triple's rank weight.
WARP_LOSSES = ("warp", "warp-kos")


class TripleFeeds:
    """`feeds(triples)`: the `{leaf: ids}` of a graph over (users, pos, neg) IndexInputs, for
    triples as `fa.data.planted_preferences` and `sample_triples` make them; with a `weights`
    Input (a WARP graph's), the triples' `weights` too (ones when they have none)."""

    def __init__(self, users, pos, neg, weights=None):
        self.leaves = (users, pos, neg) if weights is None else (users, pos, neg, weights)
        self.rates = None       # the online rank estimate's, kept across a fit's epochs (WarpSampler)

    def __call__(self, triples):
        users, pos, neg = self.leaves[:3]
        feeds = {users: triples["users"], pos: triples["pos"], neg: triples["neg"]}
        if len(self.leaves) == 4:
            feeds[self.leaves[3]] = (triples["weights"] if "weights" in triples
                                     else np.ones(np.shape(triples["users"])))
        return feeds


class BPR(TripleSampling, Recommender):
    """Bayesian personalised ranking by matrix factorisation.

    Users and items get `dim`-dimensional factors U, V (N(0, scale)); a
    triple (u, i, j) says u prefers i to j, and its loss is
    -log sigmoid(U[u].(V[i] - V[j]) + b[i] - b[j]) + r/2 * (|U[u]|^2 + |V[i]|^2 +
    |V[j]|^2 + b[i]^2 + b[j]^2), where the item biases b (an (n_items, 1) Parameter
    `item_bias`, from zero) exist only with `biases=True`, and r is `regularization`
    (`fa.ranking_loss`'s: under per-example SGD, implicit's update exactly).
    Gradients are sparse: a step touches three rows (and two biases). `loss="hinge"`
    trains the same factors with the pairwise hinge max(0, 1 - margin) instead of BPR's
    -log sigmoid(margin) (`fa.ranking_loss`'s `loss`).

    `loss="warp"` (WARP, LightFM's rules) draws each positive's negative inside the loop
    against the current scores: up to `max_sampled` (>= 1, default 10) items until one
    outscores the positive minus 1, and trains that triple's hinge times its rank weight
    log(max(1, floor((n_items - 1) / draws))) (capped at 10); a positive that finds none takes no
    update. `loss="warp-kos"` (k-OS WARP) draws a user, `kos_n` of their items, and takes
    the `kos_k`-th best scored as the positive; an epoch is then one positive per user
    (`fit`'s default `samples`). `rank_estimate="online"` draws one candidate a positive
    instead, its weight from the user's running rate of violating draws (the online rank
    estimate, `fa.data.WarpSampler`'s). Both train on the CPU (`fa.data.WarpSampler`, in threads
    and Hogwild processes as BPR does); `regularization` is weighted as the triple is.

    Two ways to build one:

    - fastad's: `BPR(n_users, n_items, dim=32)`, sized now; its defaults are
      `regularization=0`, and `fit`'s `epochs=1`, `lr=0.05`, no biases;
    - implicit's (`BayesianPersonalizedRanking`'s keywords): `BPR(factors=100,
      learning_rate=0.01, regularization=0.01, iterations=100, random_state=None)`
      without sizes: the factors are made by the first `fit(user_items)`, from the
      matrix's shape, with implicit's defaults (those above, and item biases).
      implicit's arguments go by keyword (`BPR(64)` is 64 users).

    `dim` and `factors` are one setting, as are `seed` and `random_state`: give one
    name, not both (TypeError). `learning_rate` and `iterations` are the defaults of
    `fit`'s `lr` and `epochs`, which override them for one call.

    `U=` and `V=` start the factors from given arrays (their shapes size the model);
    a C-contiguous, aligned, writeable array of the model's dtype is adopted as it
    is, without a copy (training changes it), unless `copy=True`; any other array is
    copied. Drawn factors are drawn directly in the model's dtype.

    >>> model = BPR(1000, 500, dim=32)
    >>> model.fit(likes, epochs=5)                      # a scipy user x item matrix
    >>> ids, scores = model.recommend([0, 1], k=10)
    >>> model = BPR(factors=64).fit(likes)             # implicit's way
    >>> ids, scores = model.recommend(0, likes[0])
    >>> loss, feeds = model.example_graph()             # or train on triples yourself
    >>> fa.train(loss, fa.optim.SGD(model.parameters(), lr=0.05), feeds(train), epochs=1)
    """

    def __init__(self, n_users=None, n_items=None, dim=None, scale=0.1, seed=0, dtype=None, U=None,
                 V=None, biases=None, regularization=None, *, factors=None, learning_rate=None,
                 iterations=None, random_state=None, copy=False, loss="bpr", max_sampled=10, kos_k=5,
                 kos_n=10, rank_estimate="sampled"):
        super().__init__()
        who = "BPR"
        dim = either(who, "dim", dim, None, "implicit's factors", factors)
        seed = either(who, "seed", seed, 0, "implicit's random_state", random_state)
        sized = not (n_users is None and n_items is None and U is None and V is None)
        defaults = _FASTAD_DEFAULTS if sized else _IMPLICIT_DEFAULTS

        def setting(name, value):
            return defaults[name] if value is None else value
        self.dim = check_int(who, "dim", setting("dim", dim))
        self.scale = _check_scale(who, scale)
        self.seed = seed_of(who, seed)
        # the dtype a Parameter takes for `dtype` (the default one for None), checked by the engine
        self.dtype = Parameter(np.zeros(0), dtype=dtype).dtype
        self.regularization = check_number(who, "regularization", setting("regularization", regularization),
                                           at_least=0)
        self.learning_rate = check_number(who, "learning_rate", setting("learning_rate", learning_rate),
                                          above=0)
        self.iterations = check_int(who, "iterations", setting("iterations", iterations))
        self._with_biases = check_flag(who, "biases", setting("biases", biases))
        self._copy_given = check_flag(who, "copy", copy)
        self.loss = check_choice(who, "loss", loss, sorted(RANKING_LOSSES) + list(WARP_LOSSES))
        self.max_sampled = check_int(who, "max_sampled", max_sampled, minimum=1)
        self.kos_k = check_int(who, "kos_k", kos_k, minimum=1)
        self.kos_n = check_int(who, "kos_n", kos_n, minimum=self.kos_k)
        self.rank_estimate = check_choice(who, "rank_estimate", rank_estimate, list(RANK_ESTIMATES))
        if sized:
            if (n_users is None and U is None) or (n_items is None and V is None):
                raise TypeError(f"{who}: give both n_users and n_items (or U and V), or neither: "
                                f"then fit(user_items) sizes the model, as implicit's does")
            for name, size in (("n_users", n_users), ("n_items", n_items)):
                if size is not None:
                    check_int(who, name, size)
            self._make_factors(n_users, n_items, U, V, given_dtype=dtype)

    def _make_factors(self, n_users, n_items, U=None, V=None, given_dtype=None):
        """U, V (and item_bias): adopted or copied from the arrays given (a Hogwild handle
        keeps its dtype unless `given_dtype` says one), else drawn."""
        rng = generator_of("BPR", self.seed)
        self.U, self.V = (_drawn_table(rng, rows, self.dim, self.dtype, self.scale) if given is None
                          else _given_table(given, self.dtype, given_dtype, self._copy_given)
                          for rows, given in ((n_users, U), (n_items, V)))
        self.dtype = self.U.dtype
        if self.U.ndim != 2 or self.V.ndim != 2 or self.U.shape[1] != self.V.shape[1] or \
                0 in self.U.shape + self.V.shape:
            raise ValueError(f"BPR: U and V must be non-empty (users, dim) and (items, dim) arrays "
                             f"with one dim, got shapes {self.U.shape} and {self.V.shape}")
        self.dim = self.U.shape[1]
        if self._with_biases:
            self.item_bias = Parameter(np.broadcast_to(np.zeros((), self.V.dtype), (self.V.shape[0], 1)),
                                       dtype=self.V.dtype)

    def _size_for(self, shape):
        """Built implicit's way, the first fit makes the factors for its (users, items) `shape`."""
        if "U" not in self._parameters:
            self._make_factors(*shape)

    @property
    def n_users(self):
        """The users of the model; None before the first fit of a model built implicit's way."""
        return self.U.shape[0] if "U" in self._parameters else None

    @property
    def n_items(self):
        """The items of the model; None before the first fit of a model built implicit's way."""
        return self.V.shape[0] if "V" in self._parameters else None

    @property
    def biases(self):
        return "item_bias" in self._parameters

    def settings(self):
        """The constructor's keyword arguments (the factors left out: `save` keeps them)."""
        return {"n_users": self.n_users, "n_items": self.n_items, "dim": self.dim, "scale": self.scale,
                "seed": int(self.seed), "dtype": self.dtype.name, "biases": self.biases,
                "regularization": self.regularization, "learning_rate": self.learning_rate,
                "iterations": self.iterations, "loss": self.loss, "max_sampled": self.max_sampled,
                "kos_k": self.kos_k, "kos_n": self.kos_n, "rank_estimate": self.rank_estimate}

    @classmethod
    def _around(cls, settings, arrays, weights):
        return _share_parameters(cls(**settings, U=weights["U"], V=weights["V"]), weights)

    @property
    def warp(self):
        """Whether the loss is WARP's or k-OS WARP's (negatives drawn against the scores)."""
        return self.loss in WARP_LOSSES

    def forward(self, users, pos, neg, weights=None):
        """The summed loss of the triples given as IndexInputs (or integer ids) of one shape,
        each times its weight (a float Input) when `weights` is given: WARP's is the hinge."""
        bias = self.item_bias if self.biases else None
        return ranking_loss(self.U, users, self.V, pos, neg, item_bias=bias, reduction="sum",
                            regularization=self.regularization, loss="hinge" if self.warp else self.loss,
                            weights=weights)

    def example_graph(self, batch=1, device="cpu"):
        """A graph of `batch` triples (default one) to replay, and a function mapping
        triples to its feeds; its leaves are on `device` (where the model must be).

        Returns `(loss, feeds)`; `feeds(triples)` gives the `{leaf: ids}` dict
        that `fastad.train` takes, for triples as made by
        `fastad.data.planted_preferences` or `fastad.data.sample_triples`.
        With a WARP loss the graph has a fourth leaf, the triples' weights (an Input), which
        `feeds` fills from the triples' `weights` (ones when they have none).
        """
        ids = [IndexInput(np.zeros(batch, dtype=np.int64), device=device) for _ in range(3)]
        weights = Input(np.ones(batch), dtype=self.dtype, device=device) if self.warp else None
        feeds = TripleFeeds(*ids, weights)
        return self(*feeds.leaves), feeds

    def epoch_sampler(self, feeds, interactions, n, seed, negatives="uniform"):
        """The compiled sampler over the graph's leaves, drawing in the loop: `PairwiseSampler`'s
        triples, or with a WARP loss `WarpSampler`'s against the model's tables
        (`TripleSampling` gives the rest of BPR's sampling)."""
        if not self.warp:
            return PairwiseSampler(interactions, *feeds.leaves, examples=n, seed=seed, negatives=negatives)
        sampler = WarpSampler(interactions, *feeds.leaves, self.U, self.V, self.item_bias if self.biases else None,
                              max_sampled=self.max_sampled, kos_k=self.kos_k if self.loss == "warp-kos" else None,
                              kos_n=self.kos_n, examples=n, seed=seed, negatives=negatives,
                              rank_estimate=self.rank_estimate, rates=feeds.rates)
        feeds.rates = sampler.rates
        return sampler

    def epoch_samples(self, matrix):
        """fit's default examples an epoch: one per interaction, or with k-OS WARP one per user
        (LightFM's epoch of each)."""
        return matrix.shape[0] if self.loss == "warp-kos" else matrix.nnz

    def check_run(self, who, settings):
        """A WARP loss draws its negatives against the scores in the CPU loop: a fit on a device
        is a ValueError."""
        if self.warp and settings.device != "cpu":
            raise ValueError(f"{who}: loss={self.loss!r} draws its negatives against the current "
                             f"scores in the CPU loop; fit it with device='cpu' (got {settings.device!r})")

    def user_vectors(self, user_ids):
        return self.U.value[user_ids]

    def item_vectors(self):
        return self.V.value

    def item_biases(self):
        return self.item_bias.value[:, 0] if self.biases else None


# the defaults of the two ways to build a BPR (see its docstring)
_FASTAD_DEFAULTS = {"dim": 32, "regularization": 0.0, "learning_rate": 0.05, "iterations": 1,
                    "biases": False}
_IMPLICIT_DEFAULTS = {"dim": 100, "regularization": 0.01, "learning_rate": 0.01, "iterations": 100,
                      "biases": True}


def _drawn_table(rng, rows, dim, dtype, scale):
    """A (rows, dim) Parameter of N(0, scale) values drawn in `dtype` straight into its own
    buffer: no float64 draw and no second copy of the table."""
    table = Parameter(np.broadcast_to(np.zeros((), dtype), (rows, dim)), dtype=dtype)
    values = table.value
    rng.standard_normal(out=values, dtype=dtype)
    values *= dtype.type(scale)
    return table


def _given_table(given, dtype, given_dtype, copy):
    """The Parameter over a table given as U= or V=: the array itself when it is a numpy
    array that a Parameter can train in place (C-contiguous, aligned, writeable, `dtype`)
    and `copy` is False, else a copy in `dtype`; a Hogwild handle is adopted as Parameter
    adopts it (in its dtype, which must be `given_dtype` if that is given)."""
    if not isinstance(given, np.ndarray):
        return Parameter(given, dtype=given_dtype)
    if (not copy and given.dtype == dtype and given.flags.c_contiguous and given.flags.aligned
            and given.flags.writeable):
        return Parameter(given, copy=False)
    return Parameter(given, dtype=dtype)


def bpr_hogwild_worker(rank, shared, triples, workers, optimizer="sgd", lr=0.05, epochs=1, seed=0):
    """One Hogwild worker of BPR training: `fa.hogwild.run(bpr_hogwild_worker, ...)`.

    Trains `BPR` factors living in `shared["U"]`, `shared["V"]` (zero copy,
    no locks) on its shard of `triples` (every `workers`-th example from
    `rank`), with `optimizer` "sgd", "adagrad" or "adam" (whose state is
    shared too). Reports its examples to `fa.hogwild.report` and returns
    `{"loss": mean loss per epoch, "examples": n, "epoch_examples": n per epoch, "seconds":
    training time}`.
    (`BPR.fit(..., workers=N)` does all of this from a user x item matrix.)

    >>> with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
    ...     fa.hogwild.run(bpr_hogwild_worker, workers=2, args=(shared, train, 2))
    """
    who = "bpr_hogwild_worker"
    settings = RunSettings(who=who, batch=1, workers=workers, optimizer=optimizer, lr=lr)
    return run_worker(rank, shared, settings, _TripleShards(triples, seed),
                      range(check_int(who, "epochs", epochs, minimum=0)))


@dataclass(frozen=True)
class _TripleShards:
    """`bpr_hogwild_worker`'s model for `run_worker`: BPR factors over the shared "U" and
    "V", trained on rank's shard of `triples`, in an order shuffled each epoch from
    `seed` + rank: a `runner.ModelDescription`."""
    triples: dict
    seed: int

    def worker_graph(self, weights, settings: RunSettings, rank: int) -> "_ShardGraph":
        return _ShardGraph(self, weights, settings, rank)


class _ShardGraph:
    """The one-triple graph of `_TripleShards` and its shard's sampler, kept for every
    epoch (its generator draws each epoch's order): a `runner.WorkerGraph` (CPU only)."""

    def __init__(self, shards, weights, settings, rank):
        model = BPR(1, 1, U=weights["U"], V=weights["V"])
        self.loss, feeds = model.example_graph()
        self.parameters = dict(model.named_parameters())
        shard = {key: ids[rank::settings.workers] for key, ids in shards.triples.items()}
        self.examples = len(shard["users"])
        self.sampler = FeedSampler(feeds(shard), shuffle=True, seed=shards.seed + rank)

    def epoch_data(self, epoch):
        return self.sampler

    def epoch_loss(self, mean, data):
        return mean, self.examples

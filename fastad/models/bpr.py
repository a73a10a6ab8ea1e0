"""`BPR`: Bayesian personalised ranking by matrix factorisation, and `bpr_hogwild_worker`,
its Hogwild worker on precomputed triples."""
from dataclasses import dataclass

import numpy as np

from fastad_cy.graph import IndexInput, Parameter
from fastad_cy.feeds import FeedSampler
from fastad_cy.pairs import PairwiseSampler
from fastad_cy.model_losses import ranking_loss
from fastad.checks import check_flag, check_int, check_sizes
from fastad.random import generator_of
from fastad.models.recommender import Recommender, _check_scale, _share_parameters
from fastad.models.runner import RunSettings, run_worker

__all__ = ["BPR", "TripleFeeds", "bpr_hogwild_worker"]


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
        rng = generator_of("BPR", seed)
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


def bpr_hogwild_worker(rank, shared, triples, workers, optimizer="sgd", lr=0.05, epochs=1, seed=0):
    """One Hogwild worker of BPR training: `fastad.hogwild.run(bpr_hogwild_worker, ...)`.

    Trains `BPR` factors living in `shared["U"]`, `shared["V"]` (zero copy,
    no locks) on its shard of `triples` (every `workers`-th example from
    `rank`), with `optimizer` "sgd", "adagrad" or "adam" (whose state is
    shared too). Reports its examples to `fastad.hogwild.report` and returns
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
    `seed` + rank."""
    triples: dict
    seed: int

    def worker_graph(self, weights, settings, rank):
        return _ShardGraph(self, weights, settings, rank)


class _ShardGraph:
    """The one-triple graph of `_TripleShards` and its shard's sampler, kept for every
    epoch (its generator draws each epoch's order)."""

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

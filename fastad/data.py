"""Data for training: the samplers of `fastad.train`'s compiled loop, and built-in
data for examples and benchmarks (no downloads).

- `FeedSampler`, `PairwiseSampler`, `SkipGramSampler` (compiled, in
  fastad_cy/samplers.pyx) fill a graph's leaves with one example at a time
  inside `fastad.train`, with no Python between examples.
- `planted_preferences` makes implicit-feedback data with a known low-rank
  structure, so that a recommender's test AUC shows whether it learned anything.
"""
import numpy as np

from fastad_cy.samplers import AliasTable, FeedSampler, PairwiseSampler, Sampler, SkipGramSampler

__all__ = ["Sampler", "FeedSampler", "PairwiseSampler", "SkipGramSampler", "AliasTable",
           "planted_preferences", "pairwise_auc"]


def planted_preferences(n_users, n_items, n_train, n_test, rank=8, noise=0.0, seed=0):
    """BPR triples (user, preferred item, other item) from planted factors.

    Each user u and item i get hidden factors P[u], Q[i] ~ N(0, 1) of `rank`
    dimensions; u prefers i to j when P[u].Q[i] + e > P[u].Q[j] with
    e ~ N(0, noise). A triple draws u, i, j uniformly and orders i and j by
    that preference. Returns `(train, test)`, each a dict of int64 arrays
    `users`, `pos`, `neg`. A perfect model scores test AUC 1 (minus noise);
    chance is 0.5.

    >>> train, test = planted_preferences(1000, 500, n_train=100_000, n_test=10_000)
    """
    for name, value in (("n_users", n_users), ("n_items", n_items), ("rank", rank)):
        if int(value) < 1:
            raise ValueError(f"planted_preferences: {name} must be >= 1, got {value}")
    if n_items < 2:
        raise ValueError("planted_preferences: need at least 2 items to compare")
    rng = np.random.default_rng(seed)
    P = rng.standard_normal((n_users, rank))
    Q = rng.standard_normal((n_items, rank))

    def triples(n):
        users = rng.integers(0, n_users, size=n)
        a = rng.integers(0, n_items, size=n)
        b = (a + rng.integers(1, n_items, size=n)) % n_items        # b != a
        margin = np.einsum("nk,nk->n", P[users], Q[a] - Q[b]) + noise * rng.standard_normal(n)
        swap = margin < 0
        pos, neg = np.where(swap, b, a), np.where(swap, a, b)
        return {"users": users.astype(np.int64), "pos": pos.astype(np.int64), "neg": neg.astype(np.int64)}

    return triples(int(n_train)), triples(int(n_test))


def pairwise_auc(U, V, triples):
    """The share of triples whose preferred item scores higher: U[u].V[pos] > U[u].V[neg].

    U: (n_users, k) and V: (n_items, k) arrays (or Variables: their values);
    triples: a dict of int arrays `users`, `pos`, `neg` of one length.

    >>> pairwise_auc(model.U, model.V, test)      # 0.5 is chance, 1 is perfect
    """
    U = getattr(U, "value", U)
    V = getattr(V, "value", V)
    u, p, n = triples["users"], triples["pos"], triples["neg"]
    margin = np.einsum("nk,nk->n", U[u], V[p] - V[n])
    return float(np.mean(margin > 0))

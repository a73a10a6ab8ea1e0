"""User x item interactions for the recommenders: built-in data with a planted structure,
checks, held-out splits and BPR triples.

- `planted_preferences` (BPR triples) and `planted_interactions` (a user x item
  matrix) make implicit-feedback data with a known low-rank structure, so that a
  recommender's test metrics show whether it learned anything.
- `train_test_split` and `leave_k_out` hold out some of each user's
  interactions; `sample_triples` draws BPR training triples from a matrix by the rule of
  `PairwiseSampler` (`_pairs.pyx`), the sampler `fa.train` runs in its loop.
"""
import numpy as np
import scipy.sparse as sp

from fastad.checks import check_choice, check_ids, check_int, check_number, check_seed, check_sizes
from fastad.models.recsys.triples import TripleSampling
from fastad.random import generator_of

__all__ = ["planted_preferences", "pairwise_auc", "planted_interactions", "check_interactions",
           "train_test_split", "leave_k_out", "require_negatives", "sample_triples", "partition_triples"]


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
    who = "planted_preferences"
    n_users, rank, n_train, n_test = check_sizes(who, n_users=n_users, rank=rank, n_train=n_train,
                                                 n_test=n_test)
    n_items = check_int(who, "n_items", n_items, minimum=2)      # a triple compares two items
    noise = check_number(who, "noise", noise, at_least=0)
    rng = generator_of(who, seed)
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

    return triples(n_train), triples(n_test)


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


def planted_interactions(n_users, n_items, per_user=20, rank=8, noise=0.5, seed=0,
                         user_groups=None, item_groups=None):
    """A CSR user x item matrix of 1s: each user liked `per_user` items drawn by planted taste.

    Users and items get hidden factors P[u], Q[i] ~ N(0, 1) of `rank`
    dimensions; user u likes the `per_user` items of highest
    P[u].Q[i] / sqrt(rank) + noise * Gumbel noise (a draw without replacement,
    with probabilities rising with the planted score). A model that recovers
    the factors ranks held-out likes far above chance. `user_groups` (an int
    array, one group id per user) makes users of one group share their
    factors, and `item_groups` likewise for items: taste that features explain
    (see `fa.models.TwoTower`).

    >>> likes = planted_interactions(1000, 500, per_user=20)     # 1000 x 500, 20 per row
    """
    who = "planted_interactions"
    n_users, n_items, per_user, rank = check_sizes(who, n_users=n_users, n_items=n_items,
                                                   per_user=per_user, rank=rank)
    if not per_user < n_items:
        raise ValueError(f"{who}: per_user must be < n_items (every user needs an item "
                         f"it did not like), got per_user={per_user}, n_items={n_items}")
    noise = check_number(who, "noise", noise, at_least=0)
    rng = generator_of(who, seed)
    P = _planted_factors("user_groups", user_groups, n_users, rank, rng)
    Q = _planted_factors("item_groups", item_groups, n_items, rank, rng)
    taste = P @ Q.T / np.sqrt(rank) + noise * rng.gumbel(size=(n_users, n_items))
    liked = np.argpartition(-taste, per_user - 1, axis=1)[:, :per_user]
    indptr = np.arange(0, n_users * per_user + 1, per_user)
    matrix = sp.csr_matrix((np.ones(liked.size, dtype=np.float32), liked.ravel(), indptr),
                           shape=(n_users, n_items))
    matrix.sort_indices()
    return matrix


def _planted_factors(name, groups, n, rank, rng):
    """(n, rank) N(0, 1) factors, equal within each group when `groups` (n group ids) is given."""
    if groups is None:
        return rng.standard_normal((n, rank))
    groups = np.asarray(groups)
    if groups.shape != (n,) or groups.dtype.kind not in "iu" or (groups < 0).any():
        raise ValueError(f"planted_interactions: {name} must hold {n} non-negative int group ids, "
                         f"got shape {groups.shape} and dtype {groups.dtype}")
    return rng.standard_normal((int(groups.max()) + 1, rank))[groups]


def check_interactions(interactions, who, name="interactions", shape=None, signed=False):
    """`interactions` as a canonical CSR copy (sorted, summed, no stored zeros), or a clear error.

    A user x item scipy sparse matrix of non-negative finite values: a stored
    positive value is an interaction (its size is ignored by the ranking
    models). Raises TypeError or ValueError naming `who` (the caller) and
    `name` for another type, negative or non-finite values, an empty matrix, or
    a shape other than `shape` (when given). `signed` (LightFM's logistic loss):
    any finite values, stored zeros kept, each stored value an example (> 0 a
    positive, <= 0 a negative).

    >>> train = check_interactions(train, "fit")
    """
    if not sp.issparse(interactions):
        raise TypeError(f"{who}: {name} must be a scipy sparse user x item matrix "
                        f"(e.g. scipy.sparse.csr_matrix), got {type(interactions).__name__}")
    matrix = sp.csr_matrix(interactions, dtype=np.float64, copy=True)
    if matrix.ndim != 2 or 0 in matrix.shape:
        raise ValueError(f"{who}: {name} has shape {matrix.shape}; expected users x items, both >= 1")
    if shape is not None and matrix.shape != tuple(shape):
        raise ValueError(f"{who}: {name} has shape {matrix.shape}, expected {tuple(shape)} "
                         f"(users x items of the model)")
    matrix.sum_duplicates()
    bad = ~np.isfinite(matrix.data) | (not signed and matrix.data < 0)
    if bad.any():
        first = np.flatnonzero(bad)[0]
        user = np.searchsorted(matrix.indptr, first, side="right") - 1
        raise ValueError(f"{who}: {name} must hold {'' if signed else 'non-negative '}finite values; it holds "
                         f"{matrix.data[first]} at user {user}, item {matrix.indices[first]} "
                         f"({int(bad.sum())} such value(s) in all)")
    if not signed:
        matrix.eliminate_zeros()
    if matrix.nnz == 0 or not (matrix.data > 0).any():
        raise ValueError(f"{who}: {name} is empty: shape {matrix.shape} with no positive value")
    return matrix


def _split_by_user(matrix, held_per_user, rng):
    """(train, test): in each row u, `held_per_user[u]` interactions chosen at random go to test."""
    users = np.repeat(np.arange(matrix.shape[0]), np.diff(matrix.indptr))
    order = np.lexsort((rng.random(matrix.nnz), users))       # within each user, a random order
    position = np.empty(matrix.nnz, dtype=np.int64)
    position[order] = np.arange(matrix.nnz) - matrix.indptr[users[order]]
    held = position < held_per_user[users]

    def part(mask):
        result = sp.csr_matrix((matrix.data[mask], (users[mask], matrix.indices[mask])),
                               shape=matrix.shape)
        result.sort_indices()
        return result

    return part(~held), part(held)


def train_test_split(interactions, test_fraction=0.2, seed=0):
    """Hold out `test_fraction` of each user's interactions: returns `(train, test)` CSR matrices.

    User u with n interactions puts round(test_fraction * n) of them, drawn
    at random (seeded), in `test` and the rest in `train`; both keep the
    shape and the values of `interactions`. A user with one interaction keeps
    it in train for any fraction below 0.5.

    >>> train, test = fa.data.train_test_split(likes, test_fraction=0.2, seed=0)
    """
    matrix = check_interactions(interactions, "train_test_split")
    test_fraction = check_number("train_test_split", "test_fraction", test_fraction, above=0, below=1)
    held = np.rint(test_fraction * np.diff(matrix.indptr)).astype(np.int64)
    return _split_by_user(matrix, held, generator_of("train_test_split", seed))


def leave_k_out(interactions, k=1, seed=0):
    """Hold out `k` random interactions of each user who has more than `k`: returns `(train, test)`.

    Users with `k` or fewer interactions keep them all in train (so every
    held-out user still has something to learn from). Seeded; both matrices
    keep the shape and the values of `interactions`.

    >>> train, test = fa.data.leave_k_out(likes, k=1, seed=0)
    """
    matrix = check_interactions(interactions, "leave_k_out")
    k = check_int("leave_k_out", "k", k)
    counts = np.diff(matrix.indptr)
    return _split_by_user(matrix, np.where(counts > k, k, 0), generator_of("leave_k_out", seed))


_NEGATIVE_RULES = ("uniform", "popularity")


def require_negatives(matrix, who, name="interactions", negatives="uniform"):
    """Raise ValueError naming the users of a checked CSR matrix for whom no negative item can
    be drawn: who liked every item (`negatives="uniform"`), or every item that has an
    interaction (`"popularity"`, which draws items in proportion to their interactions)."""
    check_choice(who, "negatives", negatives, _NEGATIVE_RULES)
    if negatives == "uniform":
        drawable, what = matrix.shape[1], "every item"
    else:
        drawable, what = np.count_nonzero(np.bincount(matrix.indices, minlength=matrix.shape[1])), \
            "every item that has an interaction (negatives='popularity' draws only those)"
    full = np.flatnonzero(np.diff(matrix.indptr) == drawable)
    if full.size:
        raise ValueError(f"{who}: {name} has users who liked {what}, so no negative item "
                         f"exists for them: users {full[:10].tolist()}{' ...' if full.size > 10 else ''}")


def sample_triples(interactions, n=None, seed=0, negatives="uniform"):
    """Draw `n` BPR triples (user, liked item, other item) from a user x item matrix.

    A triple picks a stored interaction uniformly (so users are drawn in
    proportion to their interactions) and an item the user did not like:
    uniformly over the items (`negatives="uniform"`) or in proportion to
    their interactions (`"popularity"`); a negative the user liked is redrawn. `n`
    defaults to the number of interactions (one epoch). Returns a dict of
    int64 arrays `users`, `pos`, `neg`, as `BPR.example_graph`'s feeds take.
    The triples come from `PairwiseSampler`, the sampler `fa.train` runs in its loop.

    >>> triples = fa.data.sample_triples(train, seed=0)
    """
    matrix = check_interactions(interactions, "sample_triples")
    require_negatives(matrix, "sample_triples", negatives=negatives)
    n = matrix.nnz if n is None else check_int("sample_triples", "n", n)
    return TripleSampling().sample_examples(matrix, n, check_seed("sample_triples", seed), negatives)



def partition_triples(triples, users, items, parts, seed=0):
    """BPR triples split into the buckets of `fa.distributed.buckets`: {(i, j): triples},
    or with `items=None` {(i,): triples}.

    User u is in partition i when it is among the rows that shard i of a
    `fa.distributed.share(..., shards=parts)` holds of a `users`-row table
    (rows users * i // parts up to users * (i + 1) // parts), and items
    likewise. A triple (u, pos, neg) goes to bucket (partition of u, partition
    of pos); its negative must lie in pos's partition too (a bucket holds only
    those rows), so one that does not is drawn again, uniformly among that
    partition's items (seeded by `seed`), as PyTorch-BigGraph draws its
    negatives within a partition. Every bucket is present, possibly empty.

    Negatives drawn within a partition never rank an item against the items of
    other partitions, and that costs BPR (bench/distributed_nodes.py, 4 item
    partitions: test AUC 0.78 against 0.90). Where the item table is small
    enough for every machine, keep it whole: `items=None` buckets by user
    partition alone (axes `[["U"]]`, V on no axis), the triples as they are.

    >>> parts = fa.data.partition_triples(train, 5_000, 1_000, parts=4)
    >>> parts[(0, 3)]["users"]          # users 0..1249 with liked items 750..999
    >>> by_user = fa.data.partition_triples(train, 5_000, None, parts=4)   # {(0,): ..., (3,): ...}
    """
    who = "partition_triples"
    users = check_int(who, "users", users)
    items = None if items is None else check_int(who, "items", items)
    parts = check_int(who, "parts", parts)
    smallest = users if items is None else min(users, items)
    if parts > smallest:
        raise ValueError(f"{who}: parts={parts} leaves a partition without rows: at most "
                         f"{smallest} (the rows of the smallest table)")
    if not isinstance(triples, dict) or set(triples) != {"users", "pos", "neg"}:
        raise TypeError(f"{who}: triples must be a dict of 'users', 'pos', 'neg' id arrays, got "
                        f"{type(triples).__name__}"
                        + (f" with keys {sorted(triples)}" if isinstance(triples, dict) else ""))
    u = check_ids(who, "triples['users']", triples["users"], users, "users")
    item_limit = np.iinfo(np.int64).max if items is None else items
    pos = check_ids(who, "triples['pos']", triples["pos"], item_limit, "items")
    neg = check_ids(who, "triples['neg']", triples["neg"], item_limit, "items").copy()
    if not u.shape == pos.shape == neg.shape or u.ndim != 1:
        raise ValueError(f"{who}: triples must be three 1-D arrays of one length, got shapes "
                         f"{u.shape}, {pos.shape}, {neg.shape}")
    user_bounds = np.arange(parts + 1) * users // parts
    user_part = np.searchsorted(user_bounds, u, side="right") - 1
    if items is None:
        order = np.argsort(user_part, kind="stable")
        starts = np.searchsorted(user_part[order], np.arange(parts + 1))
        return {(i,): {key: ids[order[starts[i]:starts[i + 1]]]
                       for key, ids in (("users", u), ("pos", pos), ("neg", neg))}
                for i in range(parts)}
    item_bounds = np.arange(parts + 1) * items // parts
    item_part = np.searchsorted(item_bounds, pos, side="right") - 1
    outside = np.flatnonzero(np.searchsorted(item_bounds, neg, side="right") - 1 != item_part)
    rng = generator_of(who, seed)
    lo, hi = item_bounds[item_part[outside]], item_bounds[item_part[outside] + 1]
    neg[outside] = lo + (rng.random(len(outside)) * (hi - lo)).astype(np.int64)
    bucket = user_part * parts + item_part
    order = np.argsort(bucket, kind="stable")
    starts = np.searchsorted(bucket[order], np.arange(parts * parts + 1))
    return {(b // parts, b % parts): {key: ids[order[starts[b]:starts[b + 1]]]
                                      for key, ids in (("users", u), ("pos", pos), ("neg", neg))}
            for b in range(parts * parts)}

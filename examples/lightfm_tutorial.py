"""LightFM's quick-start, run against fastad: only the import differs.

LightFM's README trains a WARP model on MovieLens (`fetch_movielens(min_rating=5.0)`, which
downloads it) and prints its test precision@5. Here the data is built in the same shape, with
no network: each item has one of 8 genres and each user likes 20 items, most of a favourite genre, split
into `data['train']` and `data['test']`, with `data['item_features']` as LightFM's datasets
give them (the identity beside the genres, each row normalised). The calls below are LightFM's,
unchanged: `LightFM(loss='warp')`, `fit(data['train'], epochs=30, num_threads=2)`,
`precision_at_k(model, data['test'], k=5).mean()`, with `fa.metrics.precision_at_k` in
LightFM's call form (a model first: per-user arrays, from `model.predict_rank`).

Then the hybrid model, LightFM's way: the items described by their features, and items that
no one has liked yet (the cold start) recommended by their genre alone.

Run: python examples/lightfm_tutorial.py [--users N] [--items N] [--epochs N]
"""
import argparse

import numpy as np
import scipy.sparse as sp

import fastad as fa
from fastad.metrics import precision_at_k    # LightFM: from lightfm.evaluation import precision_at_k
from fastad.models import LightFM            # LightFM: from lightfm import LightFM


def planted_movielens(n_users, n_items, genres=8, seed=0):
    """A dict as fetch_movielens gives it: 'train' and 'test' (COO users x items), and
    'item_features' (identity and genre, each row summing to 1) with 'item_feature_labels'.
    Each item has a genre; each user likes 20 items, 16 of a favourite genre and 4 others,
    of which a fifth go to 'test'."""
    rng = np.random.default_rng(seed)
    genre = rng.integers(genres, size=n_items)
    favourite = rng.integers(genres, size=n_users)
    rows, columns = [], []
    for user in range(n_users):
        own = np.flatnonzero(genre == favourite[user])
        picked = np.union1d(rng.choice(own, min(16, len(own)), replace=False), rng.choice(n_items, 4, replace=False))
        rows += [user] * len(picked)
        columns += picked.tolist()
    likes = sp.csr_matrix((np.ones(len(rows)), (rows, columns)), shape=(n_users, n_items))
    train, test = fa.data.train_test_split(likes, 0.2, seed=seed)
    tags = sp.csr_matrix((np.ones(n_items), (np.arange(n_items), genre)), shape=(n_items, genres))
    features = sp.hstack([sp.identity(n_items), tags]).tocsr() * 0.5      # each row sums to 1
    labels = np.array([f"item {i}" for i in range(n_items)] + [f"genre {g}" for g in range(genres)])
    return {"train": train.tocoo(), "test": test.tocoo(), "item_features": features.tocsr(),
            "item_feature_labels": labels}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=1_000)
    ap.add_argument("--items", type=int, default=400)
    ap.add_argument("--epochs", type=int, default=30, help="LightFM's quick-start: 30")
    args = ap.parse_args(argv)
    data = planted_movielens(args.users, args.items)

    # LightFM's quick-start, as it is written there
    model = LightFM(loss='warp')
    model.fit(data['train'], epochs=args.epochs, num_threads=2)
    test_precision = precision_at_k(model, data['test'], k=5).mean()

    chance = data['test'].nnz / data['test'].shape[0] / args.items
    print(f"{args.users:,} users x {args.items:,} items, {data['train'].nnz:,} training likes; "
          f"WARP, {args.epochs} epochs, 2 threads")
    print(f"test precision@5: {test_precision:.3f} (chance: {chance:.3f})")

    # the hybrid model: items by their features; the last tenth of the items never seen in training
    seen = args.items - args.items // 10
    train = data['train'].tocsr()[:, :seen]
    hybrid = LightFM(loss='warp', no_components=16)
    hybrid.fit(train, item_features=data['item_features'][:seen], epochs=args.epochs, num_threads=2)
    new_items = data['item_features'][seen:]
    ids, scores = hybrid.recommend(np.arange(args.users), k=1, item_features=new_items)
    test = data['test'].tocsr()[:, seen:] + data['train'].tocsr()[:, seen:]
    liked = np.asarray(test[np.arange(args.users), ids[:, 0]]).ravel() > 0
    held = np.diff(test.indptr) > 0
    base = (test.sum(axis=1).A1 / new_items.shape[0])[held].mean()
    print(f"cold start: {new_items.shape[0]} items never trained on, known by their genre; the best of "
          f"them for each user is one they like for {liked[held].mean():.2f} of the users (chance: {base:.2f})")
    return {"precision@5": test_precision, "chance": chance, "cold_hit": liked[held].mean(), "cold_chance": base}


if __name__ == "__main__":
    main()

"""implicit's README tutorial, run against fastad: only the import differs.

implicit's tutorial trains a model on a sparse user x item matrix, recommends items to a
user and finds items related to an item. Here `BayesianPersonalizedRanking` is fastad's
`BPR` under implicit's name; the calls below are implicit's, unchanged. The data is built
here: `fastad.data.planted_interactions` hides rank-4 user and item tastes and lets each
user like items drawn by theirs, so there is something to check: the script prints user
0's recommendations (none of them an item the user liked) and item 0's related items
(the item itself first, as implicit lists it), then trains the same model on 80% of each
user's likes and prints the share of the held-out likes that `recommend` ranks in the
users' top 10, beside chance.

Run: python examples/implicit_tutorial.py [--users N] [--items N] [--iterations N]
"""
import argparse

import numpy as np

import fastad as fa
from fastad.models import BPR as BayesianPersonalizedRanking    # implicit: from implicit.bpr import ...


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=2_000)
    ap.add_argument("--items", type=int, default=500)
    ap.add_argument("--iterations", type=int, default=100, help="implicit's default: 100")
    args = ap.parse_args(argv)
    user_item_data = fa.data.planted_interactions(args.users, args.items, per_user=20, rank=4, seed=0)

    # implicit's tutorial, as it is written there
    model = BayesianPersonalizedRanking(factors=50, iterations=args.iterations)
    model.fit(user_item_data)
    userid, itemid = 0, 0
    recommendations = model.recommend(userid, user_item_data[userid])
    related = model.similar_items(itemid)

    ids, scores = recommendations
    liked = set(user_item_data[userid].indices)
    print(f"{args.users:,} users x {args.items:,} items, {user_item_data.nnz:,} likes; "
          f"BPR with 50 factors, {args.iterations} iterations")
    print(f"user {userid} likes {len(liked)} items; recommended (none of them liked before): "
          f"{ids.tolist()}")
    print(f"  scores {np.round(scores, 3).tolist()}")
    hit_rate = held_out_hit_rate(user_item_data, args.iterations)
    print(f"held-out check: {hit_rate:.2f} of the users' held-out likes ranked in their top 10 "
          f"(chance: {10 / args.items:.2f})")
    related_ids, similarities = related
    print(f"items related to item {itemid}: {related_ids.tolist()} (the item itself first: "
          f"{related_ids[0] == itemid})")
    print(f"  cosine {np.round(similarities, 3).tolist()}")
    return {"recommended": ids, "liked": liked, "related": related_ids, "hit_rate": hit_rate}


def held_out_hit_rate(likes, iterations):
    """Train the tutorial's model on 80% of each user's likes; the share of the held-out likes
    of the first 300 users that their top 10 of `recommend` (implicit's call) holds."""
    train, test = fa.data.train_test_split(likes, test_fraction=0.2, seed=0)
    model = BayesianPersonalizedRanking(factors=50, iterations=iterations).fit(train)
    users = np.arange(300)
    ids, _ = model.recommend(users, train[users], N=10)
    hits = sum(len(set(row) & set(test[user].indices)) for user, row in zip(users, ids))
    return hits / max(1, sum(test[user].nnz for user in users))


if __name__ == "__main__":
    main()

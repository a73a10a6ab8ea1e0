"""`python -m fastad`: the main demo — a recommender trained lock-free on every core.

Makes built-in likes with a planted low-rank taste (a user x item matrix,
20% of each user's likes held out), trains a BPR matrix factorisation (k=32,
per-example sparse SGD) with one Hogwild worker process per core, and prints
the held-out precision@10 and AUC before and after, and throughput.
"""
import argparse
import os
import sys
import time

import numpy as np

import fastad as fa

def parse(argv):
    ap = argparse.ArgumentParser(prog="python -m fastad", description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="Hogwild processes (default: all cores)")
    ap.add_argument("--examples", type=int, default=2_000_000, help="training triples (default 2,000,000)")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.examples < args.workers:
        ap.error("--workers must be >= 1 and --examples >= --workers")
    return args


def main(argv=None):
    args = parse(argv)
    users, items = 5_000, 2_000
    print(f"fastad {fa.__version__}: BPR recommender, {users:,} users x {items:,} items, k=32, "
          f"{args.examples:,} examples, {args.workers} Hogwild worker(s)")
    likes = fa.data.planted_interactions(users, items, per_user=40, rank=8, seed=0)
    train, test = fa.data.train_test_split(likes, test_fraction=0.2, seed=0)
    ranked_users = np.random.default_rng(0).choice(users, size=1_000, replace=False)
    model = fa.models.BPR(users, items, dim=32, seed=1)
    before = fa.metrics.evaluate(model, test, train=train, k=10, users=ranked_users)
    start = time.perf_counter()
    model.fit(train, epochs=1, samples=args.examples, workers=args.workers, lr=0.1, seed=0,
              progress=fa.progress_bar(args.examples, stream=sys.stdout))
    rate = args.examples / (time.perf_counter() - start)
    after = fa.metrics.evaluate(model, test, train=train, k=10, users=ranked_users)
    print(f"test AUC      {before['auc']:.3f} -> {after['auc']:.3f}   (0.5 is chance)")
    print(f"precision@10  {before['precision@10']:.3f} -> {after['precision@10']:.3f}   "
          f"(held-out likes among each user's top 10, for {len(ranked_users):,} users)")
    print(f"throughput    {rate:,.0f} examples/s across {args.workers} worker(s) "
          f"(sampling and process start-up included)")


if __name__ == "__main__":
    main()

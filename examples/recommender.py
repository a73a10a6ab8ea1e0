"""BPR recommender trained lock-free (Hogwild) across processes, with ranking metrics per epoch.

Data: `fastad.data.planted_interactions` hides rank-8 user and item factors and
lets each user like `--per-user` items drawn by that hidden taste;
`fastad.data.train_test_split` holds out 20% of each user's likes. Each epoch,
`BPR.fit` draws one (user, liked item, other item) triple per training
interaction and `--workers` processes train 32-dimensional factors in shared
memory with per-example sparse updates. After each epoch the held-out likes of
`--eval-users` users are ranked against every item they did not train on:
precision@10, recall@10, NDCG@10, MAP@10 and AUC (0.5 is chance). The factors
are saved with `fastad.save` at the end, and user 0's top 5 printed.

Run: python examples/recommender.py [--workers N] [--epochs E] [--checkpoint PATH]
"""
import argparse
import os
import time

import numpy as np

import fastad as fa


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--epochs", type=int, default=10)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--items", type=int, default=2_000)
    ap.add_argument("--per-user", type=int, default=40, help="likes per user (before the split)")
    ap.add_argument("--eval-users", type=int, default=1_000, help="users whose held-out likes are ranked")
    ap.add_argument("--optimizer", choices=sorted(fa.models.OPTIMIZERS), default="sgd")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--biases", action="store_true", help="learn a bias per item")
    ap.add_argument("--start-method", choices=("fork", "spawn"), help="default: fork on Linux, else spawn")
    ap.add_argument("--checkpoint", default="recommender.npz")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.epochs < 1 or args.eval_users < 1:
        ap.error("--workers, --epochs and --eval-users must be >= 1")

    likes = fa.data.planted_interactions(args.users, args.items, per_user=args.per_user, rank=8, seed=0)
    train, test = fa.data.train_test_split(likes, test_fraction=0.2, seed=0)
    held_users = np.flatnonzero(np.diff(test.indptr))
    eval_users = np.random.default_rng(0).permutation(held_users)[:args.eval_users]
    model = fa.models.BPR(args.users, args.items, dim=32, seed=1, biases=args.biases)
    print(f"{args.users:,} users x {args.items:,} items, {train.nnz:,} training likes "
          f"({test.nnz:,} held out), {args.workers} worker(s), {args.optimizer}")
    history = []
    clock = [time.perf_counter()]

    def report(epoch, loss):
        seconds = time.perf_counter() - clock[0]
        metrics = fa.metrics.evaluate(model, test, train=train, k=10, users=eval_users)
        history.append(metrics)
        training = f"  train loss {loss:.4f}  {train.nnz / seconds:,.0f} examples/s" if epoch else ""
        print(f"epoch {epoch:2d}  precision@10 {metrics['precision@10']:.4f}  "
              f"recall@10 {metrics['recall@10']:.4f}  ndcg@10 {metrics['ndcg@10']:.4f}  "
              f"map@10 {metrics['map@10']:.4f}  test AUC {metrics['auc']:.4f}{training}")
        clock[0] = time.perf_counter()

    report(0, None)
    model.fit(train, epochs=args.epochs, workers=args.workers, lr=args.lr, optimizer=args.optimizer,
              seed=0, callback=report, start_method=args.start_method)
    fa.save(model.state_dict(), args.checkpoint)
    print(f"saved the factors to {args.checkpoint}")
    ids, scores = model.recommend(0, k=5)
    print("user 0's top 5 (not yet liked): " + ", ".join(f"item {i} ({s:.2f})" for i, s in zip(ids, scores)))
    return history


if __name__ == "__main__":
    main()

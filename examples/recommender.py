"""BPR recommender trained lock-free (Hogwild) across processes.

Data: `fastad.data.planted_preferences` hides rank-8 user and item factors and
derives "u prefers i to j" triples from them, so test AUC (the share of
held-out triples ranked correctly) climbs from 0.5 (chance) towards 1 as the
model recovers the structure. Each epoch, `--workers` processes train
32-dimensional factors in shared memory with per-example sparse updates; the
factors are saved with `fastad.save` at the end.

Run: python examples/recommender.py [--workers N] [--epochs E] [--checkpoint PATH]
"""
import argparse
import os
import sys
import time

import fastad as fa


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    ap.add_argument("--epochs", type=int, default=5)
    ap.add_argument("--users", type=int, default=5_000)
    ap.add_argument("--items", type=int, default=2_000)
    ap.add_argument("--examples", type=int, default=1_000_000, help="training triples per epoch")
    ap.add_argument("--optimizer", choices=("sgd", "adagrad"), default="sgd")
    ap.add_argument("--lr", type=float, default=0.1)
    ap.add_argument("--start-method", choices=("fork", "spawn"),
                    default="fork" if sys.platform.startswith("linux") else "spawn")
    ap.add_argument("--checkpoint", default="recommender.npz")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.epochs < 1:
        ap.error("--workers and --epochs must be >= 1")

    train, test = fa.data.planted_preferences(args.users, args.items, n_train=args.examples,
                                              n_test=50_000, rank=8, noise=0.5, seed=0)
    model = fa.models.BPR(args.users, args.items, dim=32, seed=1)
    print(f"{args.users:,} users x {args.items:,} items, {args.examples:,} triples per epoch, "
          f"{args.workers} worker(s), {args.optimizer}")
    print(f"epoch 0  test AUC {model.auc(test):.4f}")
    aucs = []
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        for epoch in range(1, args.epochs + 1):
            start = time.perf_counter()
            results = fa.hogwild.run(
                fa.models.bpr_hogwild_worker, workers=args.workers,
                args=(shared, train, args.workers, args.optimizer, args.lr, 1, epoch),
                start_method=args.start_method, progress=fa.hogwild.progress_bar(args.examples, sys.stdout))
            seconds = time.perf_counter() - start
            inside = sum(r["examples"] for r in results) / max(r["seconds"] for r in results)
            aucs.append(fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test))
            loss = sum(r["loss"][0] * r["examples"] for r in results) / sum(r["examples"] for r in results)
            print(f"epoch {epoch}  test AUC {aucs[-1]:.4f}  train loss {loss:.4f}  "
                  f"{inside:,.0f} examples/s ({seconds:.2f} s with start-up)")
        model.U.set_value(shared["U"].numpy())
        model.V.set_value(shared["V"].numpy())
    fa.save(model.state_dict(), args.checkpoint)
    print(f"saved the factors to {args.checkpoint}")
    return aucs


if __name__ == "__main__":
    main()

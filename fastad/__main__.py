"""`python -m fastad`: the main demo — a recommender trained lock-free on every core.

Makes built-in preference data with a planted low-rank structure, trains a
BPR matrix factorisation (k=32, per-example sparse SGD) with one Hogwild
worker process per core, and prints test AUC before and after, throughput,
and the same model's speed in PyTorch when it is installed.
"""
import argparse
import os
import sys
import time

import fastad as fa

EXAMPLES = {
    "examples/quickstart.py": "learn y = 3x + 5 by replaying one graph",
    "examples/recommender.py": "BPR recommender with Hogwild workers, test AUC per epoch, checkpoint",
    "examples/char_lstm.py": "character-level LSTM language model on the standard library's source",
    "examples/mlp.py": "MLP classifier on a small bundled dataset, held-out accuracy",
    "bench/run.py": "every benchmark beside PyTorch, written to bench/results.md",
    "bench/gpu.py": "the GPU benchmarks beside PyTorch CUDA (needs a GPU and CuPy)",
}


def parse(argv):
    epilog = "other demos (run from a clone of the repository):\n" + "\n".join(
        f"  python {path:28s} {what}" for path, what in EXAMPLES.items())
    ap = argparse.ArgumentParser(prog="python -m fastad", description=__doc__, epilog=epilog,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workers", type=int, default=os.cpu_count() or 1, help="Hogwild processes (default: all cores)")
    ap.add_argument("--examples", type=int, default=2_000_000, help="training triples (default 2,000,000)")
    ap.add_argument("--no-torch", action="store_true", help="skip the PyTorch comparison")
    args = ap.parse_args(argv)
    if args.workers < 1 or args.examples < args.workers:
        ap.error("--workers must be >= 1 and --examples >= --workers")
    return args


def main(argv=None):
    args = parse(argv)
    users, items = 5_000, 2_000
    print(f"fastad {fa.__version__}: BPR recommender, {users:,} users x {items:,} items, k=32, "
          f"{args.examples:,} examples, {args.workers} Hogwild worker(s)")
    train, test = fa.data.planted_preferences(users, items, n_train=args.examples, n_test=50_000,
                                              rank=8, noise=0.5, seed=0)
    model = fa.models.BPR(users, items, dim=32, seed=1)
    auc_before = model.auc(test)
    start_method = "fork" if sys.platform.startswith("linux") else "spawn"
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        start = time.perf_counter()
        results = fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=args.workers,
                                 args=(shared, train, args.workers, "sgd", 0.1),
                                 start_method=start_method,
                                 progress=fa.hogwild.progress_bar(args.examples, sys.stdout))
        wall = time.perf_counter() - start
        auc_after = fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test)
    rate = sum(r["examples"] for r in results) / max(r["seconds"] for r in results)
    print(f"test AUC      {auc_before:.3f} -> {auc_after:.3f}   (0.5 is chance)")
    print(f"throughput    {rate:,.0f} examples/s across {args.workers} worker(s) "
          f"({wall:.2f} s including process start-up)")
    if args.no_torch:
        return
    try:
        torch_rate = fa.compare.torch_examples_per_second(train, users, items, n=1000)
    except ImportError:
        print("PyTorch       not installed: `pip install torch` to compare")
        return
    print(f"PyTorch       {torch_rate:,.0f} examples/s (same model, per-example loop, one process)")
    print(f"speed-up      {rate / torch_rate:,.0f}x")


if __name__ == "__main__":
    main()

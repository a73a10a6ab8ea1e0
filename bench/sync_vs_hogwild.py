"""Synchronised parallel training beside Hogwild, on minibatch BPR and an MLP.

The same worker function runs under `fa.hogwild.run(mode="hogwild")` (each
worker steps the shared Parameters whenever it likes) and
`mode="synchronized"` (gradients averaged across workers, one update per step,
two barriers per step), alternately, several rounds. Examples per second are
measured inside the workers (start-up excluded); the ratio is the median of the
per-round ratios. Workloads: BPR k=32 on 50,000 x 20,000, minibatches of 256
triples per worker (sparse gradients: only touched rows are exchanged), SGD;
an MLP 784-128-10 on random data, minibatches of 32 per worker, Adam.
Run: python bench/sync_vs_hogwild.py [--quick] [--workers N]
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402

import fastad as fa  # noqa: E402

USERS, ITEMS, DIM = 50_000, 20_000, 32
BPR_BATCH, MLP_BATCH = 256, 32


def bpr_worker(rank, shared, triples, workers, steps):
    U, V = fa.Parameter(shared["U"]), fa.Parameter(shared["V"])
    u, i, j = (fa.IndexInput(np.zeros(BPR_BATCH, np.int64)) for _ in range(3))
    loss = -fa.mean(fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])))
    opt = fa.optim.SGD([U, V], lr=0.5)
    start = time.perf_counter()
    for s in range(steps):
        lo = (s * workers + rank) * BPR_BATCH
        for ix, key in ((u, "users"), (i, "pos"), (j, "neg")):
            ix.set_value(triples[key][lo:lo + BPR_BATCH])
        loss.forward()
        loss.backward()
        fa.hogwild.sync_step(opt)
    return steps * BPR_BATCH, time.perf_counter() - start


def mlp_worker(rank, shared, X, labels, workers, steps):
    W1, b1, W2, b2 = (fa.Parameter(shared[k]) for k in ("W1", "b1", "W2", "b2"))
    x = fa.Input(np.zeros((MLP_BATCH, 784), np.float32))
    y = fa.IndexInput(np.zeros(MLP_BATCH, np.int64))
    loss = fa.nn.cross_entropy(fa.relu(x @ W1 + b1) @ W2 + b2, y)
    opt = fa.optim.Adam([W1, b1, W2, b2], lr=1e-3)
    start = time.perf_counter()
    for s in range(steps):
        lo = ((s * workers + rank) * MLP_BATCH) % (len(X) - MLP_BATCH)
        x.set_value(X[lo:lo + MLP_BATCH])
        y.set_value(labels[lo:lo + MLP_BATCH])
        loss.forward()
        loss.backward()
        fa.hogwild.sync_step(opt)
    return steps * MLP_BATCH, time.perf_counter() - start


def one_round(worker, arrays, data, workers, steps, mode):
    with fa.hogwild.share(arrays) as shared:
        results = fa.hogwild.run(worker, workers=workers, args=(shared, *data, workers, steps),
                                 start_method="fork", mode=mode)
    return sum(n for n, _ in results) / max(t for _, t in results)


def workloads(quick):
    rng = np.random.default_rng(0)
    bpr_steps = 100 if quick else 400
    triples, _ = fa.data.planted_preferences(USERS, ITEMS, n_train=BPR_BATCH * bpr_steps * 8,
                                             n_test=1, seed=0)
    bpr_arrays = {"U": rng.normal(0, 0.1, (USERS, DIM)).astype(np.float32),
                  "V": rng.normal(0, 0.1, (ITEMS, DIM)).astype(np.float32)}
    mlp_arrays = {"W1": rng.normal(0, 0.05, (784, 128)).astype(np.float32),
                  "b1": np.zeros(128, np.float32),
                  "W2": rng.normal(0, 0.1, (128, 10)).astype(np.float32),
                  "b2": np.zeros(10, np.float32)}
    X = rng.random((4096, 784), dtype=np.float32)
    labels = rng.integers(0, 10, 4096)
    return [(f"BPR k={DIM}, batch {BPR_BATCH}/worker, SGD", bpr_worker, bpr_arrays, (triples,),
             bpr_steps),
            (f"MLP 784-128-10, batch {MLP_BATCH}/worker, Adam", mlp_worker, mlp_arrays,
             (X, labels), 300 if quick else 1500)]


def run(quick=False, workers=2):
    rows = []
    for name, worker, arrays, data, steps in workloads(quick):
        speeds = {"hogwild": [], "synchronized": []}
        for _ in range(2 if quick else 4):
            for mode in speeds:
                speeds[mode].append(one_round(worker, arrays, data, workers, steps, mode))
        ratio = statistics.median(s / h for s, h in zip(speeds["synchronized"], speeds["hogwild"]))
        rows.append({"workload": f"{name}, {workers} workers",
                     "hogwild": statistics.median(speeds["hogwild"]),
                     "synchronized": statistics.median(speeds["synchronized"]), "ratio": ratio})
    return rows


def report(rows):
    for r in rows:
        print(f"{r['workload']}: Hogwild {r['hogwild']:11,.0f} examples/s | synchronized "
              f"{r['synchronized']:11,.0f} examples/s ({r['ratio']:.2f}x Hogwild)")


if __name__ == "__main__":
    cli(run, __doc__, report, workers="the workers of each run (default 2)")

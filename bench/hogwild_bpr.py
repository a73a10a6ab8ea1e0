"""Hogwild scaling of BPR (k=32, 50,000 users x 20,000 items, per-example sparse SGD).

Runs the same number of examples with 1, 2, ... worker processes (alternating
the counts, several rounds) and reports examples per second measured inside
the workers (start-up excluded) and the scaling over one worker (the median of
the per-round ratios), beside PyTorch's Hogwild recipe
(`share_memory()` + processes, sparse embeddings) on the same data.
Run: python bench/hogwild_bpr.py [--quick] [--max-workers N]
"""
import multiprocessing
import os
import statistics
import sys
import time


sys.path.insert(0, os.path.dirname(__file__))
from common import cli, torch_or_none  # noqa: E402
from torch_bpr import torch_bpr_trainer  # noqa: E402

import fastad as fa  # noqa: E402

USERS, ITEMS, DIM, LR = 50_000, 20_000, 32, 0.05


def fastad_round(triples, model, workers):
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        results = fa.hogwild.run(fa.models.bpr_hogwild_worker, workers=workers,
                                 args=(shared, triples, workers), start_method="fork")
    return sum(r["examples"] for r in results) / max(r["seconds"] for r in results)


def _torch_worker(rank, workers, U, V, triples, n, out):
    step = torch_bpr_trainer(USERS, ITEMS, DIM, LR, embeddings=(U, V))
    shard = {k: triples[k][rank::workers][:n] for k in ("users", "pos", "neg")}
    start = time.perf_counter()
    step(shard, 0, n)
    out[rank] = time.perf_counter() - start


def torch_round(torch, triples, workers, n_per_worker):
    U = torch.nn.Embedding(USERS, DIM, sparse=True)
    V = torch.nn.Embedding(ITEMS, DIM, sparse=True)
    U.share_memory()
    V.share_memory()
    ctx = multiprocessing.get_context("fork")
    out = ctx.Array("d", workers)
    procs = [ctx.Process(target=_torch_worker, args=(r, workers, U, V, triples, n_per_worker, out))
             for r in range(workers)]
    for p in procs:
        p.start()
    for p in procs:
        p.join()
    return workers * n_per_worker / max(out[:])


def run(quick=False, max_workers=None):
    max_workers = max_workers or min(os.cpu_count() or 1, 8)
    counts = list(range(1, max_workers + 1))
    triples, _ = fa.data.planted_preferences(USERS, ITEMS, n_train=400_000 if quick else 2_000_000,
                                             n_test=1, seed=0)
    model = fa.models.BPR(USERS, ITEMS, dim=DIM, seed=1)
    speeds = {w: [] for w in counts}
    for _ in range(2 if quick else 5):
        for w in counts:
            speeds[w].append(fastad_round(triples, model, w))
    rows = []
    torch = torch_or_none()
    for w in counts:
        s = statistics.median(speeds[w])
        # scaling: the median over rounds of w workers' speed over one worker's in the same
        # round, so that drift in the machine's load between rounds cancels out
        scaling = statistics.median(sw / s1 for sw, s1 in zip(speeds[w], speeds[1]))
        row = {"workload": f"BPR Hogwild, {w} worker{'s' if w > 1 else ''}", "unit": "example",
               "fastad": 1 / s, "scaling": scaling,
               "target": ">= 1,000,000/s" if w == 1 else (">= 1.8x one worker" if w == 2 else "-")}
        if torch is not None:
            row["torch"] = 1 / torch_round(torch, triples, w, 300 if quick else 1000)
        rows.append(row)
    return rows


def report(rows):
    for r in rows:
        line = (f"{r['workload']}: fastad {1 / r['fastad']:12,.0f} examples/s"
                f" ({r['scaling']:.2f}x one worker)")
        if r.get("torch"):
            line += f" | torch {1 / r['torch']:10,.0f} examples/s | speed-up {r['torch'] / r['fastad']:6.1f}x"
        print(line + f"   [target: {r['target']}]")


if __name__ == "__main__":
    cli(run, __doc__, report, max_workers="the most workers (default: the cores, at most 8)")

"""Parameter-server BPR on Ray (fa.distributed) beside local Hogwild (fa.hogwild).

BPR, k=32, 5,000 users x 1,000 items of planted rank-8 preferences, one epoch
of per-example SGD from the same start, on a local Ray instance (one node: its
workers train one replica, as Hogwild's processes do). Part 1 runs
the same examples with 1 and 2 Ray workers (at the default sync interval, which
follows the work done) and 1 and 2 Hogwild processes, alternating them over
several rounds, with two workers: `fa.models.bpr_hogwild_worker` (fa.train, which
reports its progress) and the Hogwild loop as a user writes it (a Python loop of
set_value/forward/backward/step that calls neither `report` nor `sync`), both
unchanged; in a Ray worker their optimizer's steps pace the syncs; then the
fa.train worker on small tables (1,000 x 500, 2,000,000 examples) the same way.
Part 2 varies a fixed `sync_every` (the push/pull interval, in examples per
worker) with 2 Ray workers. Part 3 times one sync of 1,000 changed rows x 64
float32 with the shard on the worker's node (shared memory, no Ray call).
Each row gives
examples per second measured inside the workers (start-up excluded; for Ray the
syncs made during training are included), end to end (the whole `run` call:
process or task start, the first pull, the final push) and the test AUC after
the epoch (0.5 is chance). Other tenants of a machine move examples/s a lot
between runs, so Ray rows also give the median of each round's ratio to the
Hogwild run just before it. The rounds follow one unmeasured run of each
configuration: the first run in a fresh Ray instance starts Ray's worker
processes, which import fastad while the first worker already trains (a
Hogwild process is forked, with everything imported); that cold run is its
own row.
Run: python bench/distributed_bpr.py [--quick] [--rounds N]
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402

import fastad as fa  # noqa: E402
from fastad import distributed  # noqa: E402

USERS, ITEMS, DIM, LR = 5_000, 1_000, 32, 0.1
SMALL_USERS, SMALL_ITEMS, SMALL_EXAMPLES = 1_000, 500, 2_000_000


def bpr_loop_worker(rank, shared, triples, workers, lr):
    """The Hogwild BPR worker as a user writes it: a Python loop of set_value, forward,
    backward, step and zero_grad over Parameter(shared[...]), calling neither report nor sync."""
    model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
    users, pos, neg = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    loss = model(users, pos, neg)
    opt = fa.optim.SGD(model.parameters(), lr=lr)
    mine = range(rank, len(triples["users"]), workers)
    start = time.perf_counter()
    for e in mine:
        users.set_value(triples["users"][e:e + 1])
        pos.set_value(triples["pos"][e:e + 1])
        neg.set_value(triples["neg"][e:e + 1])
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return {"examples": len(mine), "seconds": time.perf_counter() - start}


WORKERS = {"fa.train": (fa.models.bpr_hogwild_worker, ("sgd", LR)),
           "Python loop": (bpr_loop_worker, (LR,))}


def time_syncs(rank, shared, rounds):
    """The median seconds of `rounds` syncs that each push every row of shared["V"] changed
    (after a few unmeasured ones)."""
    V = fa.Parameter(shared["V"])
    times = []
    for _ in range(rounds + 5):
        V.value[...] += np.float32(1e-3)
        start = time.perf_counter()
        distributed.sync()
        times.append(time.perf_counter() - start)
    return statistics.median(times[5:])


def _measure(results, seconds, shared, test):
    inside = sum(r["examples"] for r in results) / max(r["seconds"] for r in results)
    return {"inside": inside, "end_to_end": sum(r["examples"] for r in results) / seconds,
            "auc": fa.data.pairwise_auc(shared["U"].numpy(), shared["V"].numpy(), test)}


def hogwild_round(train, test, model, workers, worker="fa.train"):
    fn, extra = WORKERS[worker]
    with fa.hogwild.share({"U": model.U.value, "V": model.V.value}) as shared:
        start = time.perf_counter()
        results = fa.hogwild.run(fn, workers=workers, args=(shared, train, workers) + extra,
                                 start_method="fork")
        return _measure(results, time.perf_counter() - start, shared, test)


def ray_round(train, test, model, workers, sync_every=None, worker="fa.train"):
    fn, extra = WORKERS[worker]
    with distributed.share({"U": model.U.value, "V": model.V.value}) as shared:
        start = time.perf_counter()
        results = distributed.run(fn, workers=workers, args=(shared, train, workers) + extra,
                                  sync_every=sync_every)
        return _measure(results, time.perf_counter() - start, shared, test)


def _row(workload, samples, base=None, target="-"):
    inside = statistics.median(s["inside"] for s in samples)
    row = {"workload": workload, "unit": "example", "fastad": 1 / inside,
           "inside": [s["inside"] for s in samples],
           "end_to_end": [s["end_to_end"] for s in samples],
           "auc": statistics.median(s["auc"] for s in samples), "target": target}
    if base is not None:
        row["vs"] = base["fastad"] / row["fastad"]
        row["vs_rounds"] = statistics.median(r / b for r, b in zip(row["inside"], base["inside"]))
        row["auc_vs"] = row["auc"] - base["auc"]
    return row


def run(quick=False, rounds=None):
    """Rows: Ray and Hogwild with 1 and 2 workers (`rounds` rounds, default 2 quick, else 3,
    after one unmeasured run of each), the cold first run of 2 Ray workers, then 2 Ray
    workers per sync interval."""
    distributed._connect(None)                # start Ray before timing anything
    if __name__ != "__main__":            # imported by run.py: Ray's workers cannot import
        from ray import cloudpickle       # this module, so its worker function goes by value
        cloudpickle.register_pickle_by_value(sys.modules[__name__])
    train, test = fa.data.planted_preferences(USERS, ITEMS, n_train=500_000 if quick else 1_000_000,
                                              n_test=20_000, rank=8, noise=0.5, seed=0)
    model = fa.models.BPR(USERS, ITEMS, dim=DIM, seed=1)
    small_train, small_test = fa.data.planted_preferences(
        SMALL_USERS, SMALL_ITEMS, n_train=SMALL_EXAMPLES // (2 if quick else 1), n_test=20_000,
        rank=8, noise=0.5, seed=0)
    small_model = fa.models.BPR(SMALL_USERS, SMALL_ITEMS, dim=DIM, seed=1)
    cpus = min(os.cpu_count() or 1, 2)
    configs = {}
    for w in range(1, cpus + 1):
        configs[("hogwild", w)] = lambda w=w: hogwild_round(train, test, model, w)
        configs[("ray", w)] = lambda w=w: ray_round(train, test, model, w)
    configs[("hogwild small", cpus)] = lambda: hogwild_round(small_train, small_test, small_model, cpus)
    configs[("ray small", cpus)] = lambda: ray_round(small_train, small_test, small_model, cpus)
    configs[("hogwild loop", cpus)] = lambda: hogwild_round(train, test, model, cpus, "Python loop")
    configs[("ray loop", cpus)] = lambda: ray_round(train, test, model, cpus, None, "Python loop")
    cold = {key: fn() for key, fn in configs.items()}       # warms Ray's worker pool
    samples = {key: [] for key in configs}
    for _ in range(rounds or (2 if quick else 3)):
        for key, fn in configs.items():
            samples[key].append(fn())
    rows = []
    for w in range(1, cpus + 1):
        hog = _row(f"BPR Hogwild, {w} process{'es' if w > 1 else ''}", samples[("hogwild", w)])
        rows.append(hog)
        rows.append(_row(f"BPR Ray, {w} worker{'s' if w > 1 else ''}, default sync",
                         samples[("ray", w)], base=hog,
                         target=">= 0.8x Hogwild's examples/s, test AUC within 0.02"))
    hog = _row(f"BPR Hogwild, {cpus} processes, the Python-loop worker", samples[("hogwild loop", cpus)])
    rows.append(hog)
    rows.append(_row(f"BPR Ray, {cpus} workers, the Python-loop worker unchanged (no report), "
                     f"default sync", samples[("ray loop", cpus)], base=hog,
                     target=">= 0.8x Hogwild's examples/s, test AUC within 0.02"))
    hog = _row(f"BPR Hogwild, {cpus} processes, small tables ({SMALL_USERS:,} x {SMALL_ITEMS:,})",
               samples[("hogwild small", cpus)])
    rows.append(hog)
    rows.append(_row(f"BPR Ray, {cpus} workers, default sync, small tables", samples[("ray small", cpus)],
                     base=hog, target=">= 0.8x Hogwild's examples/s, test AUC within 0.02"))
    rows.append(_row(f"BPR Ray, {cpus} workers, default sync, the first run in a fresh "
                     f"Ray instance (cold worker processes)", [cold[("ray", cpus)]],
                     base=_row("", [cold[("hogwild", cpus)]])))
    intervals = [2_500, 10_000, 50_000, len(train["users"])]
    sweep = {k: [] for k in intervals}
    for _ in range(1 if quick else 2):
        for k in intervals:
            sweep[k].append(ray_round(train, test, model, cpus, k))
    for k in intervals:
        label = "once, at the end" if k == len(train["users"]) else f"{k:,}"
        rows.append(_row(f"BPR Ray, {cpus} workers, sync_every={label}", sweep[k]))
    with distributed.share({"V": np.zeros((1_000, 64), np.float32)}) as shared:
        seconds = distributed.run(time_syncs, workers=1, args=(shared, 50 if quick else 200))[0]
    rows.append({"workload": "one sync of 1,000 changed rows x 64 float32, the shard on the "
                             "worker's node", "unit": "sync", "fastad": seconds,
                 "target": "well under a millisecond"})
    return rows


def report(rows):
    for r in rows:
        if r["unit"] == "sync":
            print(f"{r['workload']}: {r['fastad'] * 1e6:,.0f} us")
            continue
        low, high = min(r["inside"]), max(r["inside"])
        e2e = statistics.median(r["end_to_end"])
        line = (f"{r['workload']}: {1 / r['fastad']:11,.0f} examples/s inside "
                f"[{low:,.0f} .. {high:,.0f}], {e2e:11,.0f} end to end, test AUC {r['auc']:.4f}")
        if "vs" in r:
            line += (f" | {r['vs']:.2f}x Hogwild's examples/s (per round: {r['vs_rounds']:.2f}x), "
                     f"AUC {r['auc_vs']:+.4f}")
        print(line)


if __name__ == "__main__":
    cli(run, __doc__, report, rounds="rounds of part 1 (default 2 with --quick, else 3)")

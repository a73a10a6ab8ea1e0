"""What a second core gives on this machine, beside what fastad's threads get from it.

Two Hogwild threads of `BPR.fit` can gain at most what the machine gives two
copies of the same loop that share nothing. This measures both, alternated in
rounds, each fit in a fresh child process (the same data, k=32, 10 epochs, the
settings of bench/implicit_bpr.py):

- alone: one fit in one process, one thread;
- ceiling: two such fits at once in two processes (no GIL, no shared weights,
  nothing in common but the machine), started together; the ceiling is
  2 x alone / (the time until both are done);
- threads: one fit with `workers=2, start_method="threads"` (one model, its
  weights shared lock-free by two threads), against one fit with one thread.

implicit's BPR (when installed) is measured the same way (`num_threads=1` and 2),
for reading beside fastad's figures.

A threads figure close to the ceiling says the engine costs nothing of its own
when it runs in two threads (no lock, no GIL, no engine global written by both);
what is left below 2x is the machine's (two vCPUs that slow each other down:
shared execution units, a lower clock with both busy, other tenants).

Run: python bench/two_cores.py [--quick]
"""
import multiprocessing
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import cli  # noqa: E402

BATCHES = (1, 16)       # triples a step, as bench/implicit_bpr.py runs BPR.fit


def _fit(train, workers, epochs, seed, batch):
    """One fit: fastad's BPR.fit at `batch` triples a step, or implicit's (batch None)."""
    import implicit_bpr
    if batch is None:
        return implicit_bpr.fit_implicit(train, workers, epochs, seed)
    return implicit_bpr.fit_fastad(train, workers, epochs, seed, batch_size=batch)


def _fit_seconds(train, epochs, batch, workers, barrier, results):
    """In a child: wait for the others, then time one fit."""
    from blas_threads import pin_blas_to_one_thread
    pin_blas_to_one_thread()
    _fit(train, workers, 1, 1, batch)           # first-call costs
    barrier.wait()
    start = time.perf_counter()
    _fit(train, workers, epochs, 0, batch)
    results.put(time.perf_counter() - start)


def _at_once(train, epochs, batch, workers, copies):
    """Seconds until `copies` child processes, started together, have each done one fit with
    `workers` threads."""
    # spawn, not fork: a child forked after this process ran implicit's OpenMP threads
    # (bench/run.py runs peers.py first) would hang in its first parallel region.
    context = multiprocessing.get_context("spawn")
    barrier, results = context.Barrier(copies), context.Queue()
    children = [context.Process(target=_fit_seconds, args=(train, epochs, batch, workers, barrier, results))
                for _ in range(copies)]
    for child in children:
        child.start()
    seconds = max(results.get() for _ in children)
    for child in children:
        child.join()
        if child.exitcode:
            raise RuntimeError(f"a benchmark child exited with code {child.exitcode}")
    return seconds


def measure(quick=False, rounds=None):
    """{batch: median seconds of one fit "alone", of "two_processes" at once, and of one fit
    with "one_thread" and "two_threads", and the fit's "samples"}, the four alternated; batch
    None is implicit's fit, when implicit is installed."""
    import implicit_bpr
    users, items, per_user, epochs = implicit_bpr.sizes()   # full size even when quick: the quick
    #                                                         data's fits are too short to show what a
    #                                                         second core gives
    train, _ = implicit_bpr.training_likes(users, items, per_user)
    rounds = rounds or (2 if quick else 5)
    out = {}
    for batch in BATCHES + ((None,) if implicit_bpr.skip_reason() is None else ()):
        runs = {"alone": (1, 1), "two_processes": (1, 2), "one_thread": (1, 1), "two_threads": (2, 1)}
        times = {name: [] for name in runs}
        for _ in range(rounds):
            for name, (workers, copies) in runs.items():
                times[name].append(_at_once(train, epochs, batch, workers, copies))
        out[batch] = {name: statistics.median(t) for name, t in times.items()}
        out[batch]["samples"] = epochs * train.nnz
    return out


def run(quick=False):
    import implicit_bpr
    reason = implicit_bpr.skip_reason()
    if reason:
        print(f"implicit's side skipped: {reason}")
    rows = []
    for batch, m in measure(quick).items():
        ceiling = 2 * m["alone"] / m["two_processes"]
        threads = m["one_thread"] / m["two_threads"]
        fit = f"BPR.fit, {batch} triple(s) a step" if batch else "implicit's BPR"
        print(f"{fit}: two processes at once {ceiling:.2f}x one (the machine's ceiling), two "
              f"threads on one model {threads:.2f}x one thread ({threads / ceiling:.0%} of the ceiling)")
        if batch is None:       # the peer's figures are for reading beside fastad's, not rows
            continue
        rows += [
            {"workload": f"BPR.fit k=32, {batch} triple(s) a step: two fits at once in two processes "
                         f"(nothing shared), the machine's two-core ceiling",
             "unit": "sample", "fastad": m["two_processes"] / (2 * m["samples"]), "scaling": ceiling,
             "target": "- (what the machine gives)"},
            {"workload": f"BPR.fit k=32, {batch} triple(s) a step: two Hogwild threads on one model "
                         f"({threads / ceiling:.0%} of the two-core ceiling)",
             "unit": "sample", "fastad": m["two_threads"] / m["samples"], "scaling": threads,
             "target": ">= 1.9x one thread"}]
    return rows


if __name__ == "__main__":
    cli(run, __doc__)

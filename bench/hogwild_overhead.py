"""Fixed costs of fa.hogwild (fastad.parallel): segment create/attach, optimizer state, run() start-up, report().

    python bench/hogwild_overhead.py

Prints the median of several repeats for each cost. These are one-off costs
per training run (per worker for attach), to weigh against its length.
"""
import os
import pickle
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))   # spawned workers import this file

from fastad import hogwild  # noqa: E402


def median_time(fn, repeats):
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def noop(rank):
    return rank


def attach_time(rank, blob):
    start = time.perf_counter()
    handle = pickle.loads(blob)          # first unpickle in this process: maps the segment
    handle.numpy()[0]
    return time.perf_counter() - start


def state_time(rank, blob):
    handle = pickle.loads(blob)
    start = time.perf_counter()
    handle.state_array("bench_state", 0.0)       # made by the parent: an attach here
    return time.perf_counter() - start


def report_time(rank, calls):
    start = time.perf_counter()
    for _ in range(calls):
        hogwild.report(1)
    return (time.perf_counter() - start) / calls


def main():
    hogwild.share({}).close()                     # start the resource tracker once
    for label, array in [("tiny (8 floats)", np.zeros(8, np.float32)),
                         ("4 MB (1M float32)", np.zeros(1_000_000, np.float32)),
                         ("400 MB (100M float32)", np.zeros(100_000_000, np.float32))]:
        repeats = 3 if array.nbytes > 1e8 else 20
        make = median_time(lambda: hogwild.share({"w": array}).close(), repeats)
        with hogwild.share({"w": array}) as shared:
            blob = pickle.dumps(shared["w"])
            attach = statistics.median(hogwild.run(attach_time, workers=2, args=(blob,)))
            keys = iter(range(repeats))
            state_make = median_time(lambda: shared["w"].state_array(f"s{next(keys)}", 0.0),
                                     repeats)
            shared["w"].state_array("bench_state", 0.0)
            state_attach = statistics.median(hogwild.run(state_time, workers=2, args=(blob,)))
        print(f"{label:>22}: share+close {make * 1e3:8.3f} ms | attach in a worker "
              f"{attach * 1e6:8.1f} us | state_array make {state_make * 1e3:8.3f} ms, "
              f"attach {state_attach * 1e6:8.1f} us | pickled handle {len(blob)} bytes")
    for method in ("spawn", "fork"):
        for workers in (1, 2):
            hogwild.run(noop, workers=workers, start_method=method)       # warm caches
            cost = median_time(lambda: hogwild.run(noop, workers=workers, start_method=method), 5)
            print(f"run() start-up + join, {method:>5}, {workers} worker(s): {cost * 1e3:8.1f} ms")
    per_call = hogwild.run(report_time, workers=1, args=(1_000_000,), start_method="fork",
                           progress=lambda done, rate: None)[0]
    print(f"report(1) in a worker: {per_call * 1e9:.0f} ns per call")


if __name__ == "__main__":
    main()

"""Peak memory of a fit beside its peer's: a table of workloads, each library's fit run in a
fresh subprocess.

A run builds the workload's data first (not counted), resets the process's peak resident
set (Linux: writing 5 to /proc/self/clear_refs), notes the resident set just before the
fit, fits, and reports the peak minus that (MB), and the fit's seconds. What a fit makes
(its model's weights included: implicit's models make their factors in fit, and so does
a `BPR` built implicit's way) counts; the data given to it does not.

Workloads (`WORKLOADS`, one row each per size and thread count):

- "bpr": BPR, 64 factors with item biases, one epoch, on a users x items matrix with
  power-law item popularity (about 1 M and 5 M interactions): fastad's
  `BPR(factors=64, iterations=1)` (workers in Hogwild threads) beside implicit's
  `BayesianPersonalizedRanking(factors=64, iterations=1, num_threads=...)`.

A peer that is not installed is skipped, with the reason. Linux only (it reads /proc).
Run: python bench/memory.py [--quick] [--workload NAME]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
SIZES = {"1M": (100_000, 20_000, 1_000_000), "5M": (500_000, 100_000, 5_000_000)}


def power_law_likes(users, items, interactions, seed=0):
    """A users x items CSR matrix of about `interactions` likes (float32 ones): users drawn
    uniformly, items with probability falling as rank^-0.9 (a few items hold most likes)."""
    import scipy.sparse as sp
    rng = np.random.default_rng(seed)
    weights = 1.0 / np.arange(1, items + 1) ** 0.9
    item_ids = rng.choice(items, size=interactions, p=weights / weights.sum()).astype(np.int32)
    user_ids = rng.integers(0, users, interactions, dtype=np.int32)
    matrix = sp.csr_matrix((np.ones(interactions, np.float32), (user_ids, item_ids)), shape=(users, items))
    matrix.sum_duplicates()
    matrix.data[:] = 1
    return matrix


def _resident_mb(field):
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def _fastad_bpr(likes, threads):
    import fastad as fa
    model = fa.models.BPR(factors=64, iterations=1)
    return lambda: model.fit(likes, workers=threads, start_method="threads")


def _implicit_bpr(likes, threads):
    from implicit.cpu.bpr import BayesianPersonalizedRanking
    model = BayesianPersonalizedRanking(factors=64, iterations=1, num_threads=threads, random_state=0)
    return lambda: model.fit(likes, show_progress=False)


#: workload -> {library: (module it needs, the fit's maker (data, threads) -> fit())}
WORKLOADS = {"bpr": {"fastad": (None, _fastad_bpr), "implicit": ("implicit", _implicit_bpr)}}
DATA = {"bpr": power_law_likes}


def measure(workload, library, size, threads):
    """In this process: (peak resident MB over the fit minus the resident MB before it, seconds)."""
    likes = DATA[workload](*SIZES[size])
    fit = WORKLOADS[workload][library][1](likes, threads)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")                 # the peak resident set (VmHWM) starts again from now
    before = _resident_mb("VmRSS")
    start = time.perf_counter()
    fit()
    seconds = time.perf_counter() - start
    return _resident_mb("VmHWM") - before, seconds


def skip_reason(module):
    if module is None:
        return None
    try:
        __import__(module)
    except ImportError:
        return f"{module} is not installed"
    return None


def run(quick=False, workloads=None):
    rows = []
    for workload in workloads or WORKLOADS:
        for size in (["1M"] if quick else list(SIZES)):
            for threads in (1, 2):
                for library, (module, _) in WORKLOADS[workload].items():
                    reason = skip_reason(module)
                    if reason:
                        rows.append({"workload": workload, "library": library, "size": size,
                                     "threads": threads, "skipped": reason})
                        continue
                    out = subprocess.run(
                        [sys.executable, __file__, "--one", workload, library, size, str(threads)],
                        capture_output=True, text=True, check=True,
                        env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS=str(threads)))
                    peak, seconds = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.append({"workload": workload, "library": library, "size": size,
                                 "threads": threads, "peak_mb": peak, "seconds": seconds})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the smaller size only")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    ap.add_argument("--one", nargs=4, metavar=("WORKLOAD", "LIBRARY", "SIZE", "THREADS"),
                    help=argparse.SUPPRESS)       # the subprocess of one measurement
    args = ap.parse_args()
    if args.one:
        workload, library, size, threads = args.one
        print(json.dumps(measure(workload, library, size, int(threads))))
        return None
    rows = run(args.quick, args.workload)
    print(f"{'workload':10s} {'size':5s} {'threads':>7s} {'library':10s} {'peak - before (MB)':>19s} "
          f"{'fit (s)':>8s}")
    for row in rows:
        if "skipped" in row:
            print(f"{row['workload']:10s} {row['size']:5s} {row['threads']:7d} {row['library']:10s} "
                  f"skipped: {row['skipped']}")
        else:
            print(f"{row['workload']:10s} {row['size']:5s} {row['threads']:7d} {row['library']:10s} "
                  f"{row['peak_mb']:19.0f} {row['seconds']:8.2f}")
    return rows


if __name__ == "__main__":
    main()

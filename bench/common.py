"""Shared benchmark plumbing: alternate timings of competitors in one process."""
import argparse
import os
import platform
import statistics
import time


def torch_or_none():
    """PyTorch if installed (the comparator is optional), pinned to one thread."""
    try:
        import torch
    except ImportError:
        return None
    torch.set_num_threads(1)
    return torch


def alternate(candidates, repeats, min_time=0.05):
    """Time each candidate `repeats` times, alternating A, B, A, B ... in this process.

    `candidates` maps a name to a zero-argument function that performs the
    workload once and returns how many units of work it did (examples, nodes
    ...). Each timing runs the function enough times to last `min_time`.
    Returns {name: median seconds per unit}.
    """
    loops = {}
    for name, fn in candidates.items():
        fn()                                      # warm up
        n, t0 = 0, time.perf_counter()
        while time.perf_counter() - t0 < min_time / 4:
            fn()
            n += 1
        loops[name] = max(1, int(n * 4 * min_time / max(time.perf_counter() - t0, 1e-9) / 4))
    samples = {name: [] for name in candidates}
    for _ in range(repeats):
        for name, fn in candidates.items():
            units = 0
            t0 = time.perf_counter()
            for _ in range(loops[name]):
                units += fn()
            samples[name].append((time.perf_counter() - t0) / units)
    return {name: statistics.median(s) for name, s in samples.items()}


def machine():
    """One line describing where the figures were measured."""
    return f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}"


def report(rows):
    """Print one line per row: fastad's time per unit, PyTorch's, and the speed-up."""
    for r in rows:
        line = f"{r['workload']}: fastad {r['fastad'] * 1e9:10.1f} ns/{r['unit']} ({1 / r['fastad']:,.0f}/s)"
        if r.get("peer"):
            line += (f" | {r['peer_name']} {r['peer'] * 1e9:10.1f} ns/{r['unit']}"
                     f" | speed-up {r['peer'] / r['fastad']:6.2f}x")
        if r.get("torch"):
            line += (f" | torch {r['torch'] * 1e9:10.1f} ns/{r['unit']}"
                     f" | speed-up {r['torch'] / r['fastad']:6.1f}x")
        print(line + f"   [target: {r['target']}]")


def cli(run, doc):
    """The command line of one benchmark module: `python bench/NAME.py [--quick]`."""
    from blas_threads import pin_blas_to_one_thread

    ap = argparse.ArgumentParser(description=doc)
    ap.add_argument("--quick", action="store_true", help="fewer repeats, smaller data")
    args = ap.parse_args()
    print(machine())
    print("BLAS:", pin_blas_to_one_thread())
    report(run(args.quick))

"""Run every benchmark beside PyTorch and write a report.

Each benchmark module times fastad and PyTorch (when installed) alternately
in this one process and returns rows; this script prints them as one table
and writes bench/results.md and bench/results.json.
Run: python bench/run.py [--quick] [--only NAME ...]
"""
import argparse
import importlib
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import machine  # noqa: E402

BENCHMARKS = ["scalar_graph", "bpr", "hogwild_bpr", "char_lstm", "mlp", "distributed_bpr"]


def fmt_time(seconds, unit):
    if seconds is None:
        return "-"
    for scale, name in ((1e-6, "ns"), (1e-3, "µs"), (1, "ms")):
        if seconds < scale:
            return f"{seconds / scale * 1e3:,.1f} {name}/{unit} ({1 / seconds:,.0f}/s)"
    return f"{seconds:,.2f} s/{unit}"


def table(rows):
    lines = ["| workload | fastad | PyTorch | speed-up | target |", "| --- | --- | --- | --- | --- |"]
    for r in rows:
        speedup = f"{r['torch'] / r['fastad']:,.1f}x" if r.get("torch") else "-"
        extra = f" ({r['scaling']:.2f}x one worker)" if "scaling" in r else ""
        lines.append(f"| {r['workload']} | {fmt_time(r['fastad'], r['unit'])}{extra} | "
                     f"{fmt_time(r.get('torch'), r['unit'])} | {speedup} | {r['target']} |")
    return "\n".join(lines)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer repeats and smaller data (about 2 minutes)")
    ap.add_argument("--only", nargs="*", choices=BENCHMARKS, help="run only these benchmarks")
    args = ap.parse_args(argv)
    print(machine())
    print("BLAS:", pin_blas_to_one_thread())
    rows, skipped = [], []
    for name in args.only or BENCHMARKS:
        try:
            module = importlib.import_module(name)
        except ImportError as exc:           # an optional extra (e.g. ray) that is not installed
            skipped.append(f"{name}: {exc}")
            continue
        start = time.perf_counter()
        print(f"running {name} ...", flush=True)
        new = module.run(quick=args.quick)
        print(table(new) + f"\n({time.perf_counter() - start:.0f} s)\n", flush=True)
        rows.extend(new)
    where = machine()
    report = f"Measured on {where}; each fastad/PyTorch pair alternated in one process.\n\n" + table(rows)
    if skipped:
        report += "\n\nSkipped: " + "; ".join(skipped)
    print(report)
    with open(os.path.join(HERE, "results.md"), "w") as f:
        f.write(report + "\n")
    with open(os.path.join(HERE, "results.json"), "w") as f:
        json.dump({"machine": where, "quick": args.quick, "rows": rows}, f, indent=2)
    return rows


if __name__ == "__main__":
    main()

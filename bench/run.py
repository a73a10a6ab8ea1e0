"""Run every benchmark beside PyTorch and write a report.

Each benchmark module times fastad and PyTorch (when installed) alternately
in this one process and returns rows (the GPU ones run where a GPU is present); this script prints them as one table
and writes bench/results.md, bench/results.json and, when matplotlib is
installed, a chart of the speed-ups over PyTorch in bench/speedups.png.
Run: python bench/run.py [--quick] [--only NAME ...]
"""
import argparse
import importlib
import json
import os
import re
import sys
import textwrap
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import machine  # noqa: E402

BENCHMARKS = ["scalar_graph", "bpr", "hogwild_bpr", "peers", "lightfm_warp", "lightfm_features", "own_models", "text_classifier",
              "fasttext_subword", "featurise", "sparse_models", "two_cores", "optim_step", "char_lstm", "tree_rnn",
              "bilstm_tagger", "mlp", "cnn", "distributed_bpr", "gpu"]


def fmt_time(seconds, unit):
    if seconds is None:
        return "-"
    for scale, name in ((1e-6, "ns"), (1e-3, "µs"), (1, "ms")):
        if seconds < scale:
            return f"{seconds / scale * 1e3:,.1f} {name}/{unit} ({1 / seconds:,.0f}/s)"
    return f"{seconds:,.2f} s/{unit}"


def comparator(row):
    """(name, seconds per unit) of a row's comparator: PyTorch, or a peer (implicit, gensim)."""
    if row.get("peer"):
        return row["peer_name"], row["peer"]
    return "PyTorch", row.get("torch")


def speedup(row):
    """The comparator's time over fastad's for one row, or None without a comparator figure."""
    _, seconds = comparator(row)
    return seconds / row["fastad"] if seconds else None


# Targets that are a speed-up over PyTorch: ">= 50x torch eager", ">= 5x faster than PyTorch",
# "no slower than PyTorch (speed-up >= 1)". Others (">= 1,000,000/s", ">= 1.8x one worker") are not.
_SPEEDUP_TARGET = re.compile(
    r">=\s*([\d.]+)x\s+(?:faster than\s+)?(?:PyTorch|torch)|speed-up\s*>=\s*([\d.]+)", re.I)


def speedup_target(target):
    """The speed-up over PyTorch that a row's target asks for, or None if it asks for something else."""
    match = _SPEEDUP_TARGET.search(target)
    return float(match.group(1) or match.group(2)) if match else None


def table(rows):
    lines = ["| workload | fastad | comparator (PyTorch unless named) | speed-up | target |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        ratio = speedup(r)
        shown = "-" if ratio is None else f"{ratio:,.2f}x" if ratio < 10 else f"{ratio:,.1f}x"
        extra = f" ({r['scaling']:.2f}x one worker)" if "scaling" in r else ""
        name, seconds = comparator(r)
        named = f"{name}: " if name != "PyTorch" and seconds else ""
        lines.append(f"| {r['workload']} | {fmt_time(r['fastad'], r['unit'])}{extra} | "
                     f"{named}{fmt_time(seconds, r['unit'])} | {shown} | {r['target']} |")
    return "\n".join(lines)


def write_chart(rows, path):
    """Draw fastad's speed-up over PyTorch as a PNG at `path`; return a line saying what happened.

    One horizontal bar per row with a PyTorch figure, growing from parity (1x)
    on a log-scale x axis; a diamond marks the target where the target is a
    speed-up over PyTorch. Without matplotlib (optional) nothing is written.
    """
    try:
        from matplotlib.figure import Figure
        from matplotlib.ticker import FuncFormatter
    except ImportError:
        return f"No chart: matplotlib is not installed (pip install matplotlib to get {path})."
    shown = [r for r in rows if speedup(r) is not None]
    if not shown:
        return "No chart: no workload has a PyTorch or peer figure (is PyTorch installed?)."
    ratios = [speedup(r) for r in shown]
    targets = [speedup_target(r["target"]) for r in shown]
    ys = range(len(shown))
    # long workload names (the peers' rows) wrapped, or they squeeze the axes to nothing
    labels = [textwrap.fill(r["workload"], 60) for r in shown]
    fig = Figure(figsize=(12, 1.5 + 0.3 * sum(label.count("\n") + 2 for label in labels)),
                 layout="constrained")
    ax = fig.add_subplot()
    ax.barh(ys, [s - 1 for s in ratios], left=1,
            color=["tab:green" if s >= 1 else "tab:red" for s in ratios])
    for y, s in zip(ys, ratios):
        ax.annotate(f"{s:,.1f}x", (s, y), xytext=(4 if s >= 1 else -4, 0), textcoords="offset points",
                    ha="left" if s >= 1 else "right", va="center")
    marked = [(t, y) for t, y in zip(targets, ys) if t is not None]
    if marked:
        ax.scatter([t for t, _ in marked], [y for _, y in marked], marker="D", color="black",
                   zorder=3, label="target")
        ax.legend(loc="lower right")
    ax.axvline(1, color="gray", linewidth=1)
    ax.set_xscale("log")
    values = ratios + [t for t, _ in marked] + [1]
    ax.set_xlim(min(values) / 2, max(values) * 2)
    ax.xaxis.set_major_formatter(FuncFormatter(lambda x, _: f"{x:g}x"))
    ax.set_yticks(list(ys), labels)
    ax.invert_yaxis()
    ax.set_xlabel("speed-up: comparator time / fastad time (log scale)")
    ax.set_title("fastad vs PyTorch and the peers, measured in one process")
    fig.savefig(path, dpi=100, bbox_inches="tight")
    return f"Chart: {path}"


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
        reason = getattr(module, "skip_reason", lambda: None)()
        if reason:                           # e.g. the GPU benchmarks on a machine without a GPU
            skipped.append(f"{name}: {reason}")
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
    print(write_chart(rows, os.path.join(HERE, "speedups.png")))
    return rows


if __name__ == "__main__":
    main()

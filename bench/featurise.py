"""fa.features' parser beside Vowpal Wabbit's own, on the same file.

The file: LINES examples of a click-like task, about 28 features a line: 20 words of a
Zipf vocabulary (|w), the character 3-grams of a name written out (|n <jo joh ohn hn>),
and a categorical field (|c site=123), a binary label and, on a tenth of the lines, an
importance weight; hashed into 2^21 slots.

fastad: `fa.features.read_vw(path, Hasher(bits=21))`, from the path to the arrays (ids,
offsets, values, labels, weights), on one thread. VW: its own C++ driver over the file,
parsing only as near as it goes: `--noop` (no learner) `-t` (no training) `--quiet`,
`-b 21`, the workspace made, its parser run and finished; the same with an empty file (made
and finished: the 2^21 weights allocated) is timed too and taken off, so the row is VW's
parse alone. VW parses in a thread of its own beside its no-op learner's: the CPU seconds
of both libraries are printed beside their wall times.

Each library is timed in a fresh process of its own (this file run with --child), which
imports only that library: what ran before in the calling process cannot change either
figure, so bench/run.py's row measures what this file measures alone. Timed in the calling
process, bench/run.py's row (1.13x) and this file's (1.70x-2.08x) had disagreed: both
libraries' times depend on the process's history. After large arrays have been freed
(bench/run.py's earlier benchmarks), glibc's malloc serves large buffers from its heap, its
pages already mapped, instead of fresh mmaps whose pages fault in: in one such test, on a
shared machine, fastad's parse of the quick file took 11.5 ms of CPU against 15.5 ms in a
process that had freed none, and VW's setup (taken off its run) 3.4 ms against 6.7 ms. The
two libraries are alternated, each child run once untimed first; the figures are medians.

Run: python bench/featurise.py [--quick]
"""
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, cpu_seconds, not_installed  # noqa: E402

LINES = 60_000
BITS = 21


def write_file(path, lines, seed=0):
    """The benchmark's VW file: words, a name's character 3-grams, a categorical field."""
    rng = np.random.default_rng(seed)
    vocabulary = np.array([f"word{i}" for i in range(20_000)])
    zipf = 1.0 / np.arange(1, len(vocabulary) + 1)
    words = rng.choice(len(vocabulary), size=(lines, 20), p=zipf / zipf.sum())
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    with open(path, "w") as f:
        for r in range(lines):
            name = "".join(letters[rng.integers(0, 26, size=rng.integers(4, 8))])
            padded = f"<{name}>"
            grams = " ".join(padded[k:k + 3] for k in range(len(padded) - 2))
            label = int(rng.random() < 0.3)
            weight = f" {rng.integers(2, 5)}" if r % 10 == 0 else ""
            f.write(f"{label}{weight} |w {' '.join(vocabulary[words[r]])} |n {grams} "
                    f"|c site={rng.integers(0, 500)}\n")


def _clock():
    """(wall, CPU) seconds: the CPU of every thread of this process."""
    return np.array([time.perf_counter(), cpu_seconds()])


def _vw_run(path):
    from vowpalwabbit import pyvw
    workspace = pyvw.Workspace(f"--quiet --noop -t -b {BITS} -d {path}")
    workspace.run_parser()
    workspace.finish()


def _fastad_run(path):
    import fastad as fa
    return fa.features.read_vw(path, fa.features.Hasher(bits=BITS))


def child(library, path, empty, repeats):
    """In a fresh process: one warm-up, then `repeats` runs of `library` over `path` (VW's
    alternated with its setup over `empty`); prints {what: [(wall, CPU) seconds, ...]}."""
    runs = {"fastad": {"parse": path}, "vw": {"run": path, "setup": empty}}[library]
    work = _fastad_run if library == "fastad" else _vw_run
    for source in runs.values():
        work(source)
    times = {name: [] for name in runs}
    for _ in range(int(repeats)):
        for name, source in runs.items():
            start = _clock()
            work(source)
            times[name].append((_clock() - start).tolist())
    print(json.dumps(times))


def measured(library, path, empty, repeats):
    """{what: [(wall, CPU) seconds, ...]} of `child` run in a fresh process."""
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", library, path, empty, str(repeats)],
                         capture_output=True, text=True, check=True)
    return json.loads(out.stdout.splitlines()[-1])


def rows(quick):
    lines = LINES // 4 if quick else LINES
    rounds, repeats = (3, 3) if quick else (3, 5)
    with tempfile.TemporaryDirectory() as folder:
        path, empty = os.path.join(folder, "clicks.vw"), os.path.join(folder, "empty.vw")
        write_file(path, lines)
        open(empty, "w").close()
        size = os.path.getsize(path)
        features = _fastad_run(path)
        times = {"parse": [], "run": [], "setup": []}
        for _ in range(rounds):
            for library in ("fastad", "vw"):
                for name, runs in measured(library, path, empty, repeats).items():
                    times[name].extend(runs)
    wall, cpu = ({name: statistics.median(t[k] for t in runs) for name, runs in times.items()} for k in (0, 1))
    fastad, vw = wall["parse"], wall["run"] - wall["setup"]
    per_line = (len(features.ids) - len(features)) / len(features)      # without the constant
    print(f"{lines:,} lines, {size / 1e6:.1f} MB, {per_line:.1f} features a line, each library in fresh "
          f"processes, median of {rounds * repeats}: fastad {fastad * 1e3:.1f} ms ({lines / fastad:,.0f} lines/s, "
          f"CPU {cpu['parse'] * 1e3:.1f} ms) | VW parse {vw * 1e3:.1f} ms ({lines / vw:,.0f} lines/s, CPU "
          f"{(cpu['run'] - cpu['setup']) * 1e3:.1f} ms; its run {wall['run'] * 1e3:.1f} ms less its setup "
          f"{wall['setup'] * 1e3:.1f} ms) | {vw / fastad:.2f}x ({wall['run'] / fastad:.2f}x VW's whole run)")
    return [{"workload": f"featurising VW text, {lines:,} lines of {per_line:.0f} features, 2^{BITS} slots, "
                         f"1 thread, vs VW's parser (--noop -t, its setup taken off; each in a fresh process)",
             "unit": "line", "fastad": fastad / lines, "peer": vw / lines, "peer_name": "VW",
             "target": ">= 1.5x VW's parser"}]


def skip_reason():
    return not_installed("vowpalwabbit", "vowpalwabbit")


def run(quick=False):
    return rows(quick)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--child"]:
        child(*sys.argv[2:])
    else:
        cli(run, __doc__)

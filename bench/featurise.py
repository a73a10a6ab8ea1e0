"""fa.features' parser beside Vowpal Wabbit's own, on the same file.

The file: LINES examples of a click-like task, about 28 features a line: 20 words of a
Zipf vocabulary (|w), the character 3-grams of a name written out (|n <jo joh ohn hn>),
and a categorical field (|c site=123), a binary label and, on a tenth of the lines, an
importance weight; hashed into 2^21 slots.

fastad: `fa.features.read_vw(path, Hasher(bits=21))`, from the path to the arrays (ids,
offsets, values, labels, weights). VW: its own C++ driver over the file, parsing only as
near as it goes: `--noop` (no learner) `-t` (no training) `--quiet`, `-b 21`, the workspace
made, its parser run and finished; the same with an empty file (made and finished: the 2^21
weights allocated) is timed too and taken off, so the row is VW's parse alone (VW parses in
a thread of its own beside its no-op learner: a second thread fastad does not use). The two
are alternated in this process; the figures are medians.

Run: python bench/featurise.py [--quick]
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, not_installed  # noqa: E402

import fastad as fa  # noqa: E402

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


def vw_seconds(path):
    from vowpalwabbit import pyvw
    start = time.perf_counter()
    workspace = pyvw.Workspace(f"--quiet --noop -t -b {BITS} -d {path}")
    workspace.run_parser()
    workspace.finish()
    return time.perf_counter() - start


def fastad_seconds(path, hasher):
    start = time.perf_counter()
    features = fa.features.read_vw(path, hasher)
    seconds = time.perf_counter() - start
    return seconds, features


def rows(quick):
    lines = LINES // 4 if quick else LINES
    repeats = 3 if quick else 7
    with tempfile.TemporaryDirectory() as folder:
        path, empty = os.path.join(folder, "clicks.vw"), os.path.join(folder, "empty.vw")
        write_file(path, lines)
        open(empty, "w").close()
        size = os.path.getsize(path)
        hasher = fa.features.Hasher(bits=BITS)
        times = {"fastad": [], "vw": [], "vw_setup": []}
        for _ in range(repeats):
            seconds, features = fastad_seconds(path, hasher)
            times["fastad"].append(seconds)
            times["vw"].append(vw_seconds(path))
            times["vw_setup"].append(vw_seconds(empty))
        median = {name: statistics.median(t) for name, t in times.items()}
    vw_parse = median["vw"] - median["vw_setup"]
    per_line = (len(features.ids) - len(features)) / len(features)      # without the constant
    print(f"{lines:,} lines, {size / 1e6:.1f} MB, {per_line:.1f} features a line, median of {repeats}: "
          f"fastad {median['fastad'] * 1e3:.1f} ms ({lines / median['fastad']:,.0f} lines/s) | VW parse "
          f"{vw_parse * 1e3:.1f} ms ({lines / vw_parse:,.0f} lines/s; its run {median['vw'] * 1e3:.1f} ms less "
          f"its setup {median['vw_setup'] * 1e3:.1f} ms) | {vw_parse / median['fastad']:.2f}x "
          f"({median['vw'] / median['fastad']:.2f}x VW's whole run)")
    return [{"workload": f"featurising VW text, {lines:,} lines of {per_line:.0f} features, 2^{BITS} slots, "
                         f"1 thread, vs VW's parser (--noop -t, its setup taken off)",
             "unit": "line", "fastad": median["fastad"] / lines, "peer": vw_parse / lines, "peer_name": "VW",
             "target": ">= 1.5x VW's parser"}]


def skip_reason():
    return not_installed("vowpalwabbit", "vowpalwabbit")


def run(quick=False):
    return rows(quick)


if __name__ == "__main__":
    cli(run, __doc__)

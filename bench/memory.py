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
- "bpr-stream": issue 53's settings, as a user streams a fit: BPR, 64 factors with item
  biases, popularity negatives, 20 epochs, on the 5 M-interaction matrix (500,000 users x
  100,000 items): fastad's `BPR(factors=64, iterations=20, biases=True)` fitted with
  `negatives="popularity"` beside implicit's `BayesianPersonalizedRanking(factors=64,
  iterations=20)` (whose negatives are the items of interactions drawn uniformly: by
  popularity too).
- "warp" and "lightfm": issue 53's WARP models beside LightFM 1.17's `LightFM(no_components=64,
  loss="warp")` (`fit(likes, epochs=2, num_threads=...)`; it runs in the Python that
  FASTAD_LIGHTFM_PYTHON names when it does not import here, as in bench/lightfm_warp.py), on
  the 1 M-interaction matrix, 2 epochs: fastad's `BPR(factors=64, iterations=2, biases=True,
  loss="warp")` fitted with Adagrad, and fastad's `LightFM(no_components=64, loss="warp")`
  (identity features), in Hogwild threads.
- "word2vec": skip-gram, dim 100, window 5, negative 5, one epoch, on 100-token
  sentences of words drawn from a Zipf(1.1) law (1 M and 10 M tokens: about 9,000 and
  76,000 words of count >= 5 kept), given as a list of token lists: fastad's
  `Word2Vec` (workers in Hogwild threads) beside gensim's `Word2Vec(sg=1)`; with
  `--large`, also the 10 M corpus streamed 10 times from a restartable iterable (100 M
  tokens, min_count 50: the same vocabulary), where memory must not grow with the tokens.
- "word2vec-stream": the streaming setting of issue 55: 10 M tokens of 100-word sentences
  drawn by a Zipf(1.1) law over a 200,000-word vocabulary, given as lists of strings from
  a restartable iterable that makes each pass's lists anew, streamed once and three times
  over (one epoch, skip-gram dim 100 in both forms: pairs and `shared_negatives=True`).
  min_count is 5 a pass (5, then 15), so that both keep the same vocabulary (99,139
  words): a fixed min_count keeps more words as the stream grows (172,738 words at 30 M
  tokens), and the tables grow with them, which is no growth per token. `--quick` runs
  1 M tokens once and three times over. Rows: the library "fastad" (pairs) and
  "fastad shared" (shared negatives); each row's vocabulary is printed beside it.

A peer that is not installed is skipped, with the reason. Linux only (it reads /proc).
Run: python bench/memory.py [--quick] [--large] [--workload NAME]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
#: workload -> {size: the arguments of its data maker}; --quick runs each workload's first
SIZES = {"bpr": {"1M": (100_000, 20_000, 1_000_000), "5M": (500_000, 100_000, 5_000_000)},
         "bpr-stream": {"5M": (500_000, 100_000, 5_000_000)},
         "warp": {"1M": (100_000, 20_000, 1_000_000)},
         "lightfm": {"1M": (100_000, 20_000, 1_000_000)},
         "word2vec": {"1M": (1_000_000, 1), "10M": (10_000_000, 1)}}
LARGE_SIZES = {"word2vec": {"10M x 10": (10_000_000, 10)}}
#: the streaming setting: {size: (tokens a pass, passes)}; --quick runs the 1 M sizes
STREAM_SIZES = {"1M x 1": (1_000_000, 1), "1M x 3": (1_000_000, 3),
                "10M x 1": (10_000_000, 1), "10M x 3": (10_000_000, 3)}
#: the sizes --quick runs of a workload, when not only its first
QUICK_SIZES = {"word2vec-stream": 2}


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


class Repeated:
    """A restartable corpus: `sentences` over and over, `passes` times a pass."""

    def __init__(self, sentences, passes):
        self.sentences, self.passes = sentences, passes

    def __iter__(self):
        for _ in range(self.passes):
            yield from self.sentences


def zipf_corpus(tokens, passes, seed=0):
    """(sentences of 100 words drawn by a Zipf(1.1) law over "w0", "w1", ..., the min_count
    that keeps the vocabulary of one pass): a list, or `Repeated` when passes > 1."""
    rng = np.random.default_rng(seed)
    ids = rng.zipf(1.1, tokens) - 1
    ids = ids[ids < 2_000_000]
    words = np.array([f"w{i}" for i in range(int(ids.max()) + 1)], dtype=object)
    flat = words[ids].tolist()
    sentences = [flat[k:k + 100] for k in range(0, len(flat), 100)]
    return (sentences if passes == 1 else Repeated(sentences, passes)), 5 * passes


class ZipfStream:
    """A restartable corpus of 100-word sentences drawn by a Zipf(1.1) law over a vocabulary
    of `vocabulary` words ("w0", "w1", ...), `passes` times over the same draw: each pass
    makes its sentences anew as lists of strings (a reader of a file would), so nothing a
    fit keeps of a sentence outlives it unseen."""

    def __init__(self, tokens, passes, vocabulary=200_000, seed=0):
        rng = np.random.default_rng(seed)
        weights = 1.0 / np.arange(1, vocabulary + 1) ** 1.1
        self.ids = rng.choice(vocabulary, size=tokens, p=weights / weights.sum()).astype(np.int32)
        self.words = [f"w{i}" for i in range(vocabulary)]
        self.passes = passes

    def __iter__(self):
        for _ in range(self.passes):
            for k in range(0, self.ids.size, 100):
                yield [self.words[i] for i in self.ids[k:k + 100].tolist()]


def zipf_stream(tokens, passes):
    """(the ZipfStream, min_count 5 a pass: the vocabulary of one pass at min_count 5)."""
    return ZipfStream(tokens, passes), 5 * passes


def _fastad_word2vec_shared(data, threads):
    import fastad as fa
    corpus, min_count = data
    model = fa.models.Word2Vec(dim=100, window=5, negative=5, min_count=min_count, epochs=1, workers=threads,
                               shared_negatives=True)
    return lambda: model.fit(corpus, start_method="threads")


def stream_growth(rows):
    """The lines of the streaming setting: each library's peak at three passes over its
    peak at one, per pass size and threads (flat: under 10% more)."""
    peaks = {(r["library"], r["size"], r["threads"]): r["peak_mb"] for r in rows
             if r["workload"] == "word2vec-stream" and "peak_mb" in r}
    lines = []
    for (library, size, threads), once in sorted(peaks.items()):
        thrice = peaks.get((library, size.replace("x 1", "x 3"), threads))
        if size.endswith("x 1") and thrice is not None:
            lines.append(f"word2vec-stream {library}, {threads} thread(s): {size} {once:.0f} MB -> "
                         f"{size.replace('x 1', 'x 3')} {thrice:.0f} MB ({100 * (thrice / once - 1):+.1f}%)")
    return lines


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


def _fastad_bpr_stream(likes, threads):
    import fastad as fa
    model = fa.models.BPR(factors=64, iterations=20, biases=True)
    return lambda: model.fit(likes, workers=threads, start_method="threads", negatives="popularity")


def _implicit_bpr_stream(likes, threads):
    from implicit.cpu.bpr import BayesianPersonalizedRanking
    model = BayesianPersonalizedRanking(factors=64, iterations=20, num_threads=threads, random_state=0)
    return lambda: model.fit(likes, show_progress=False)


def _fastad_bpr_warp(likes, threads):
    import fastad as fa
    model = fa.models.BPR(factors=64, iterations=2, biases=True, loss="warp")
    return lambda: model.fit(likes, workers=threads, start_method="threads", optimizer="adagrad")


def _fastad_lightfm(likes, threads):
    import fastad as fa
    model = fa.models.LightFM(no_components=64, loss="warp")
    return lambda: model.fit(likes, epochs=2, num_threads=threads)


def _lightfm_warp(likes, threads):
    from lightfm import LightFM
    model = LightFM(no_components=64, loss="warp")
    likes = likes.tocoo()
    return lambda: model.fit(likes, epochs=2, num_threads=threads)


def _fastad_word2vec(data, threads):
    import fastad as fa
    corpus, min_count = data
    model = fa.models.Word2Vec(dim=100, window=5, negative=5, min_count=min_count, epochs=1, workers=threads)
    return lambda: model.fit(corpus, start_method="threads")


def _gensim_word2vec(data, threads):
    from gensim.models import Word2Vec
    corpus, min_count = data
    return lambda: Word2Vec(sentences=corpus, vector_size=100, window=5, negative=5, min_count=min_count,
                            epochs=1, workers=threads, sg=1)


#: workload -> {library: (module it needs, the fit's maker (data, threads) -> fit())}
WORKLOADS = {"bpr": {"fastad": (None, _fastad_bpr), "implicit": ("implicit", _implicit_bpr)},
             "bpr-stream": {"fastad": (None, _fastad_bpr_stream),
                            "implicit": ("implicit", _implicit_bpr_stream)},
             "warp": {"fastad": (None, _fastad_bpr_warp), "LightFM": ("lightfm", _lightfm_warp)},
             "lightfm": {"fastad": (None, _fastad_lightfm), "LightFM": ("lightfm", _lightfm_warp)},
             "word2vec": {"fastad": (None, _fastad_word2vec), "gensim": ("gensim", _gensim_word2vec)},
             "word2vec-stream": {"fastad": (None, _fastad_word2vec),
                                 "fastad shared": (None, _fastad_word2vec_shared)}}
DATA = {"bpr": power_law_likes, "bpr-stream": power_law_likes, "warp": power_law_likes,
        "lightfm": power_law_likes, "word2vec": zipf_corpus, "word2vec-stream": zipf_stream}
SIZES["word2vec-stream"] = STREAM_SIZES
#: a peer's module -> the environment variable naming another Python that has it (when this one does not)
OTHER_PYTHON = {"lightfm": "FASTAD_LIGHTFM_PYTHON"}


def measure(workload, library, size, threads):
    """In this process: (peak resident MB over the fit minus the resident MB before it, seconds)."""
    data = DATA[workload](*{**SIZES[workload], **LARGE_SIZES.get(workload, {})}[size])
    fit = WORKLOADS[workload][library][1](data, threads)
    with open("/proc/self/clear_refs", "w") as refs:
        refs.write("5")                 # the peak resident set (VmHWM) starts again from now
    before = _resident_mb("VmRSS")
    start = time.perf_counter()
    fit()
    seconds = time.perf_counter() - start
    return _resident_mb("VmHWM") - before, seconds


def python_for(module):
    """The Python that runs a fit needing `module` (None: none here): this one when it imports
    `module`, else the one OTHER_PYTHON's variable names."""
    if module is None:
        return sys.executable
    try:
        __import__(module)
    except ImportError:
        return os.environ.get(OTHER_PYTHON.get(module, ""))
    return sys.executable


def skip_reason(module):
    if python_for(module) is None:
        extra = f" (nor is {OTHER_PYTHON[module]} set)" if module in OTHER_PYTHON else ""
        return f"{module} is not installed{extra}"
    return None


def run(quick=False, workloads=None, large=False):
    rows = []
    for workload in workloads or WORKLOADS:
        sizes = list(SIZES[workload]) + (list(LARGE_SIZES.get(workload, {})) if large else [])
        for size in (sizes[:QUICK_SIZES.get(workload, 1)] if quick else sizes):
            for threads in (1, 2):
                for library, (module, _) in WORKLOADS[workload].items():
                    reason = skip_reason(module)
                    if reason:
                        rows.append({"workload": workload, "library": library, "size": size,
                                     "threads": threads, "skipped": reason})
                        continue
                    out = subprocess.run(
                        [python_for(module), __file__, "--one", workload, library, size, str(threads)],
                        capture_output=True, text=True, check=True,
                        env=dict(os.environ, OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS=str(threads)))
                    peak, seconds = json.loads(out.stdout.strip().splitlines()[-1])
                    rows.append({"workload": workload, "library": library, "size": size,
                                 "threads": threads, "peak_mb": peak, "seconds": seconds})
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="the smaller size only")
    ap.add_argument("--large", action="store_true", help="also the large sizes (word2vec: 100 M tokens streamed)")
    ap.add_argument("--workload", choices=sorted(WORKLOADS), action="append")
    ap.add_argument("--one", nargs=4, metavar=("WORKLOAD", "LIBRARY", "SIZE", "THREADS"),
                    help=argparse.SUPPRESS)       # the subprocess of one measurement
    args = ap.parse_args()
    if args.one:
        workload, library, size, threads = args.one
        print(json.dumps(measure(workload, library, size, int(threads))))
        return None
    rows = run(args.quick, args.workload, args.large)
    print(f"{'workload':10s} {'size':8s} {'threads':>7s} {'library':10s} {'peak - before (MB)':>19s} "
          f"{'fit (s)':>8s}")
    for row in rows:
        if "skipped" in row:
            print(f"{row['workload']:10s} {row['size']:8s} {row['threads']:7d} {row['library']:10s} "
                  f"skipped: {row['skipped']}")
        else:
            print(f"{row['workload']:10s} {row['size']:8s} {row['threads']:7d} {row['library']:10s} "
                  f"{row['peak_mb']:19.0f} {row['seconds']:8.2f}")
    for key in sorted({(r["workload"], r["size"]) for r in rows if "peak_mb" in r}):
        measured = {(r["library"], r["threads"]): r for r in rows
                    if (r["workload"], r["size"]) == key and "peak_mb" in r}
        libraries = sorted({library for library, _ in measured}, key=lambda name: name != "fastad")
        parts = [f"{library} 1->2 threads {measured[library, 1]['seconds'] / measured[library, 2]['seconds']:.2f}x"
                 for library in libraries if (library, 1) in measured and (library, 2) in measured]
        if len(libraries) == 2:
            peer = libraries[1]
            for threads in (1, 2):
                if ("fastad", threads) in measured and (peer, threads) in measured:
                    mine, theirs = measured["fastad", threads], measured[peer, threads]
                    parts.append(f"{threads} thread(s): memory {mine['peak_mb'] / theirs['peak_mb']:.2f}x "
                                 f"{peer}'s, speed {theirs['seconds'] / mine['seconds']:.2f}x")
        print(f"{key[0]} {key[1]}: " + "; ".join(parts))
    print("\n".join(stream_growth(rows)))
    return rows


if __name__ == "__main__":
    main()

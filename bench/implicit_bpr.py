"""BPR.fit beside implicit's BPR (an optional peer): speed and ranking quality on the same data.

Both train k=32 factors with per-example SGD on the same planted user x item
matrix (`fa.data.planted_interactions`, 20% of each user's likes held out):
the same learning rate, epochs, one sampled triple per training interaction
per epoch, no regularisation, 1 and 2 threads (fastad: `workers=` Hogwild
threads, `start_method="threads"`; implicit: `num_threads=`), and implicit's
sampling rule and starting point: negatives drawn in proportion to their
interactions (implicit takes the item of a random interaction;
`negatives="popularity"`), factors and item biases drawn uniformly in
[-0.5, 0.5) / dim (from N(0, 1 / (dim sqrt 12)) factors and zero biases,
fastad's test AUC came out about 0.001 below implicit's over three seeds on 10,000 x 3,000).
implicit skips a negative the user liked, fastad
draws another (skipping instead, in a numpy-sampled run over four seeds, moved the AUC by
at most 0.0003). Fits are alternated in one process;
the figures are the median of the repeats. Quality is precision@10 and AUC
of `fa.metrics.evaluate` on the held-out likes of the same users (implicit's
factors scored the same way). implicit adds an item-bias column to its
factors; fastad runs with `biases=True` to match, and also (one triple a step) without,
as `BPR` does by default and as the five-line model `-logsigmoid(U[u] . (V[i] - V[j]))`
is written: on this planted data the item biases raise precision@10 and lower the AUC
(at 20,000 x 5,000: precision@10 0.108-0.112 with them on both sides, 0.090-0.092
without; AUC 0.853 with them, 0.871 without).

A second comparison (`defaults_rows`) runs both libraries at implicit's defaults (100
factors, learning rate 0.01, regularization 0.01, 100 iterations; fastad's `BPR` built
implicit's way, `BPR(factors=100, ...)`, takes the same defaults) on real sparse data
available offline: documents x words of the standard library's docstrings and comments
(a sentence is a document, a word of five documents or more an item: power-law
popularity), 20% of each document's words held out, test AUC of `fa.metrics.evaluate`
(against uniformly drawn items). fastad draws negatives uniformly by default, implicit
in proportion to their popularity; fastad's `negatives="popularity"` fit is the matched
one. One run (80,824 documents x 7,052 words, 571,709 training likes, 2 shared cores, so
its seconds are rough): test AUC implicit 0.688, fastad 0.927, fastad with popularity
negatives 0.711 (precision@10 0.019, 0.033, 0.020): at implicit's defaults the rule that
draws the negatives, not the library, decides the AUC.

Not a test: the comparison is skipped, with the reason, when implicit is not
installed (`pip install implicit`).
Run: python bench/implicit_bpr.py [--quick] [--defaults-only]
"""
import argparse
import functools
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from blas_threads import pin_blas_to_one_thread  # noqa: E402
from common import machine  # noqa: E402

import fastad as fa  # noqa: E402

DIM, LR, BATCH = 32, 0.05, 16
REPEATS = 5     # alternated fits of each library in the full run; the figures are medians


def skip_reason():
    """Why this machine cannot run the comparison, or None."""
    try:
        import implicit  # noqa: F401
    except ImportError:
        return "implicit is not installed (pip install implicit)"
    return None


class FactorScores:
    """`scores(user_ids)` over fixed factor arrays, as `fa.metrics.evaluate` takes."""

    def __init__(self, user_factors, item_factors):
        self.user_factors, self.item_factors = user_factors, item_factors

    def scores(self, user_ids):
        return self.user_factors[user_ids] @ self.item_factors.T


def implicit_start(rng, rows, columns=DIM):
    """Starting values drawn as implicit draws its factors (and item biases): uniform in
    [-0.5, 0.5) / dim."""
    return ((rng.random((rows, columns)) - 0.5) / DIM).astype(np.float32)


def fit_fastad(train, threads, epochs, seed, batch_size=1, biases=True):
    rng = np.random.default_rng(seed)
    users, items = train.shape
    model = fa.models.BPR(users, items, dim=DIM, U=implicit_start(rng, users), V=implicit_start(rng, items),
                          biases=biases)
    if biases:
        model.item_bias.set_value(implicit_start(rng, items, 1))
    model.fit(train, epochs=epochs, workers=threads, lr=LR, seed=seed, start_method="threads",
              batch_size=batch_size, negatives="popularity")
    return model


#: fastad's fits: implicit's model (item biases) with per-example SGD and at 16 triples a step
#: (one replay of a 16-triple graph), and the five-line model of the issue that set the
#: targets (`-logsigmoid(U[u] . (V[i] - V[j]))`, BPR's default: no item biases) per example.
FASTAD_FITS = {"fastad": {"batch_size": 1, "biases": True},
               f"fastad, {BATCH} a step": {"batch_size": BATCH, "biases": True},
               "fastad, no biases": {"batch_size": 1, "biases": False}}


def describe(name):
    """A fastad fit's settings in words, for report rows."""
    fit = FASTAD_FITS[name]
    return f"{fit['batch_size']} triple(s) a step{'' if fit['biases'] else ', no item biases'}"


def fit_implicit(train, threads, epochs, seed):
    from implicit.cpu.bpr import BayesianPersonalizedRanking

    model = BayesianPersonalizedRanking(factors=DIM, learning_rate=LR, regularization=0.0,
                                        iterations=epochs, num_threads=threads, random_state=seed)
    model.fit(train.astype(np.float32), show_progress=False)
    return FactorScores(model.user_factors, model.item_factors)


def sizes():
    """(users, items, likes per user, epochs): the set the targets name (about 20,000 users x
    5,000 items, 1 M interactions), also for --quick, which runs fewer repeats. On a smaller
    set the tables sit in the caches and a fit lasts a tenth of a second, so the VM's noise
    and each fit's fixed cost decide the ratio (three quick runs on 4,000 x 1,500, 5 epochs,
    gave fastad 0.68-1.13x implicit at one triple a step)."""
    return 20_000, 5_000, 50, 10


def training_likes(users, items, per_user):
    """The planted matrix's (train, test) split: 20% of each user's likes held out."""
    likes = fa.data.planted_interactions(users, items, per_user=per_user, rank=8, seed=0)
    return fa.data.train_test_split(likes, test_fraction=0.2, seed=0)


def run(quick=False):
    users, items, per_user, epochs = sizes()
    repeats = 2 if quick else REPEATS
    train, test = training_likes(users, items, per_user)
    ranked = np.random.default_rng(0).choice(users, size=2_000, replace=False)
    fits = {name: functools.partial(fit_fastad, **settings) for name, settings in FASTAD_FITS.items()}
    fits["implicit"] = fit_implicit
    rows = []
    for threads in (1, 2):
        seconds = {name: [] for name in fits}
        quality = {name: [] for name in fits}
        for repeat in range(repeats):
            for name, fit in fits.items():
                start = time.perf_counter()
                model = fit(train, threads, epochs, seed=repeat)
                seconds[name].append(time.perf_counter() - start)
                quality[name].append(fa.metrics.evaluate(model, test, train=train, k=10, users=ranked))
        for name in fits:
            rows.append({"library": name, "threads": threads,
                         "samples_per_second": epochs * train.nnz / statistics.median(seconds[name]),
                         "precision@10": statistics.median(q["precision@10"] for q in quality[name]),
                         "auc": statistics.median(q["auc"] for q in quality[name])})
    return {"users": users, "items": items, "train": train.nnz, "epochs": epochs, "rows": rows}


def stdlib_documents(limit_tokens, with_words=False):
    """A documents x words CSR matrix from the standard library's docstrings and comments
    (bench/peers.py's sentences): a sentence of five kept words or more is a document, a
    word found in five documents or more an item; with `with_words`, (the matrix, the word
    of each item)."""
    import scipy.sparse as sp
    from peers import stdlib_text

    documents = [set(sentence) for sentence in stdlib_text(limit_tokens)]
    frequency = {}
    for words in documents:
        for word in words:
            frequency[word] = frequency.get(word, 0) + 1
    vocabulary = {word: i for i, word in enumerate(sorted(w for w, n in frequency.items() if n >= 5))}
    rows, columns = [], []
    for words in documents:
        kept = sorted(vocabulary[word] for word in words if word in vocabulary)
        if len(kept) >= 5:
            rows.extend([rows[-1] + 1 if rows else 0] * len(kept))
            columns.extend(kept)
    matrix = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, columns)), shape=(rows[-1] + 1, len(vocabulary)))
    return (matrix, sorted(vocabulary, key=vocabulary.get)) if with_words else matrix


def defaults_rows(quick=False):
    """fastad's BPR and implicit's at implicit's defaults on the standard library's documents x
    words, one thread: (rows, what the data is)."""
    from implicit.cpu.bpr import BayesianPersonalizedRanking

    likes = stdlib_documents(300_000 if quick else 1_000_000)
    train, test = fa.data.train_test_split(likes, 0.2, seed=0)
    users = np.random.default_rng(0).choice(likes.shape[0], min(3_000, likes.shape[0]), replace=False)
    iterations = 20 if quick else 100
    fits = {
        "implicit": lambda: FactorScores(*_implicit_factors(
            BayesianPersonalizedRanking(iterations=iterations, num_threads=1, random_state=0), train)),
        "fastad": lambda: fa.models.BPR(iterations=iterations).fit(train),
        "fastad, popularity negatives": lambda: fa.models.BPR(iterations=iterations).fit(
            train, negatives="popularity"),
    }
    rows = []
    for name, fit in fits.items():
        start = time.perf_counter()
        model = fit()
        seconds = time.perf_counter() - start
        quality = fa.metrics.evaluate(model, test, train=train, k=10, users=users)
        rows.append({"library": name, "seconds": seconds, "auc": quality["auc"],
                     "precision@10": quality["precision@10"]})
    data = (f"{likes.shape[0]:,} documents x {likes.shape[1]:,} words, {train.nnz:,} training "
            f"interactions, {iterations} iterations")
    return rows, data


def _implicit_factors(model, train):
    model.fit(train, show_progress=False)
    return model.user_factors, model.item_factors


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="fewer repeats (the same data)")
    ap.add_argument("--defaults-only", action="store_true",
                    help="only the comparison at implicit's defaults on real data")
    args = ap.parse_args()
    reason = skip_reason()
    if reason:
        print(f"skipped: {reason}")
        return None
    print(machine())
    print("BLAS:", pin_blas_to_one_thread())
    rows, data = defaults_rows(args.quick)
    print(f"BPR at implicit's defaults (100 factors, lr 0.01, regularization 0.01), one thread, on the "
          f"standard library's {data}:")
    for row in rows:
        print(f"  {row['library']:30s} {row['seconds']:7.1f} s   test AUC {row['auc']:.4f}   "
              f"precision@10 {row['precision@10']:.4f}")
    if args.defaults_only:
        return rows
    result = run(args.quick)
    print(f"BPR k={DIM}, lr={LR}, {result['epochs']} epochs over {result['train']:,} training likes "
          f"({result['users']:,} users x {result['items']:,} items), sampling included")
    by_threads = {}
    for row in result["rows"]:
        by_threads.setdefault(row["threads"], {})[row["library"]] = row
        print(f"  {row['library']:8s} {row['threads']} thread(s): {row['samples_per_second']:>12,.0f} "
              f"samples/s   precision@10 {row['precision@10']:.4f}   AUC {row['auc']:.4f}")
    for threads, pair in by_threads.items():
        for name in FASTAD_FITS:
            ratio = pair[name]["samples_per_second"] / pair["implicit"]["samples_per_second"]
            print(f"  {threads} thread(s): {name} / implicit speed {ratio:.2f}x")
    print(scaling_line(result))
    return result


def scaling_line(result):
    """How each library's speed grows from 1 thread to 2."""
    speed = {(row["library"], row["threads"]): row["samples_per_second"] for row in result["rows"]}
    return "  2 threads / 1 thread: " + ", ".join(
        f"{name} {speed[(name, 2)] / speed[(name, 1)]:.2f}x" for name in (*FASTAD_FITS, "implicit"))


if __name__ == "__main__":
    main()

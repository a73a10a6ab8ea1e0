"""fa.models.LightFM with item features beside LightFM's own (an optional peer), cold-start items
held out: precision@10 among the items never trained on, and speed, the target of issue 53
(precision@10 within 0.01 of LightFM's, >= 5x its speed).

Data: the standard library's documents x words (implicit_bpr.py's `stdlib_documents`, 300,000
tokens: about 23,000 documents x 4,000 words), a fifth of the words (drawn once) held out as
cold-start items: training sees only the likes of the other words, the test is every like of a
held-out word. Each word is described by its character 3-grams (of "<word>", fastText's
boundaries), each row normalised to sum 1 (as LightFM's users normalise theirs), and by nothing
else: no identity feature, so a held-out word is known only by its 3-grams, shared with the
trained words. Both libraries take the same matrices: `LightFM(no_components=64, loss=...,
learning_rate=0.05, max_sampled=10)`, Adagrad (LightFM's default schedule), identity user
features, the same epochs, one thread.

Quality: precision@10 (and AUC) of `fa.metrics.evaluate` over the documents with a held-out like,
each ranking the held-out words alone by score (user representation . item representation +
item bias: `get_item_representations(item_features)` of both). Speed: epochs x training likes /
the fit's seconds (LightFM timed around its `fit` alone). Fits alternate; medians of the repeats.

LightFM runs as bench/lightfm_warp.py runs it (here, or in FASTAD_LIGHTFM_PYTHON's Python).
Run: python bench/lightfm_features.py [--quick]
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np
import scipy.sparse as sp

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cli  # noqa: E402
from implicit_bpr import stdlib_documents  # noqa: E402
from lightfm_warp import LightFM as LightFMPeer, _Scores, skip_reason  # noqa: E402,F401
import lightfm_fit  # noqa: E402

import fastad as fa  # noqa: E402


def trigram_features(words):
    """(words, 3-grams) CSR matrix: each word's character 3-grams of "<word>", its row summing to 1."""
    grams, rows, columns = {}, [], []
    for row, word in enumerate(words):
        marked = f"<{word}>"
        for gram in {marked[k:k + 3] for k in range(len(marked) - 2)}:
            rows.append(row)
            columns.append(grams.setdefault(gram, len(grams)))
    matrix = sp.csr_matrix((np.ones(len(rows), np.float32), (rows, columns)), shape=(len(words), len(grams)))
    return sp.csr_matrix(sp.diags(1 / np.asarray(matrix.sum(axis=1)).ravel()) @ matrix, dtype=np.float32)


def cold_start_split(likes, words, seed=0):
    """(train over the warm words, test over the cold ones, item features of the warm words then
    the cold ones): a fifth of the words are cold."""
    order = np.random.default_rng(seed).permutation(likes.shape[1])
    cold = np.sort(order[:likes.shape[1] // 5])
    warm = np.sort(order[likes.shape[1] // 5:])
    features = trigram_features([words[i] for i in np.concatenate([warm, cold])])
    return sp.csr_matrix(likes[:, warm]), sp.csr_matrix(likes[:, cold]), features


def fit_fastad(train, features, loss, epochs, threads, seed):
    """fastad's LightFM as the module's docstring says: (scores of the cold items, seconds)."""
    model = fa.models.LightFM(no_components=lightfm_fit.DIM, loss=loss, learning_rate=lightfm_fit.LR,
                              max_sampled=lightfm_fit.MAX_SAMPLED, random_state=seed)
    start = time.perf_counter()
    model.fit(train, item_features=features[:train.shape[1]], epochs=epochs, num_threads=threads)
    seconds = time.perf_counter() - start
    biases, items = model.get_item_representations(features)
    return _cold(model.get_user_representations()[1], items, biases, train.shape[1]), seconds


def _cold(users, items, biases, n_warm):
    """Scores of the cold items alone (the rows past the warm ones)."""
    return _Scores(users, items[n_warm:], biases[n_warm:])


def run(quick=False):
    likes, words = stdlib_documents(300_000, with_words=True)
    train, test, features = cold_start_split(likes, words)
    epochs, repeats = (5, 1) if quick else (30, 3)
    losses = ("warp",) if quick else ("warp", "bpr")
    print(f"LightFM with item features beside fastad's: {likes.shape[0]:,} documents x {train.shape[1]:,} "
          f"warm words ({test.shape[1]:,} cold, {test.nnz:,} test likes), {features.shape[1]:,} 3-grams, "
          f"{train.nnz:,} training likes, {epochs} epochs, 1 thread, median of {repeats}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fastad-lightfm-") as folder:
        peer = LightFMPeer(train, folder)
        for loss in losses:
            figures = {}
            for repeat in range(repeats):
                fits = {"fastad": lambda: fit_fastad(train, features, loss, epochs, 1, repeat),
                        "LightFM": lambda: peer.fit(loss, epochs, 1, repeat, features)}
                for name, fit in fits.items():
                    scores, seconds = fit()
                    if name == "LightFM":
                        scores = _cold(scores.user_factors, scores.item_factors, scores.item_biases,
                                       train.shape[1])
                    quality = fa.metrics.evaluate(scores, test, k=10)
                    figures.setdefault(name, []).append((epochs * train.nnz / seconds, quality["precision@10"],
                                                         quality["auc"]))
            median = {name: [statistics.median(column) for column in zip(*runs)] for name, runs in figures.items()}
            for name, (rate, precision, auc) in median.items():
                print(f"  {loss:5s} {name:8s} {rate:>12,.0f} examples/s   precision@10 {precision:.4f}   "
                      f"AUC {auc:.4f} (cold items)")
            ours, theirs = median["fastad"], median["LightFM"]
            rows.append({"workload": f"LightFM(loss={loss!r}).fit dim {lightfm_fit.DIM}, item features "
                                     f"(3-grams), cold-start items held out, 1 thread, vs LightFM "
                                     f"(precision@10 {ours[1]:.3f} vs {theirs[1]:.3f}, AUC {ours[2]:.3f} vs "
                                     f"{theirs[2]:.3f})",
                         "unit": "example", "fastad": 1 / ours[0], "peer": 1 / theirs[0], "peer_name": "LightFM",
                         "threads": 1, "loss": loss,
                         "target": ">= 5x LightFM, precision@10 within 0.01"})
    return rows


if __name__ == "__main__":
    cli(run, __doc__, skip_reason=skip_reason)

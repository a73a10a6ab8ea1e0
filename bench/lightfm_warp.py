"""BPR(loss="warp") beside LightFM's WARP (an optional peer): speed and ranking quality on the
same data, the targets of issue 53 (hit rate@10 and AUC within 0.01 of LightFM's WARP, at >= 5x
its examples/s at 1 thread; 2 threads scaling as LightFM's do).

Data: the standard library's documents x words (implicit_bpr.py's `stdlib_documents`: real
text, power-law popularity; 300,000 tokens give about 23,000 documents x 4,000 words and
220,000 likes, the shape of the issue's 29k x 7k, 173k set), one like of each document held out
(`fa.data.leave_k_out`). Both libraries train 64 factors and item biases (LightFM's user biases
do not change a ranking), learning rate 0.05 with Adagrad whose sums start at 1 (LightFM's
default schedule; fastad's `optimizer_options={"initial_accumulator_value": 1.0}`), up to 10
uniform negatives a positive, each training like once an epoch, the same epochs, factors drawn
as LightFM draws them (uniform in [-0.5, 0.5) / 64, biases 0), on 1 and 2 threads (fastad's
`workers=` Hogwild threads, LightFM's `num_threads=`). fastad's BPR (its defaults: SGD, uniform
negatives, N(0, 0.1) factors) is fitted too, for its quality beside WARP's, and so is each WARP
loss with `rank_estimate="online"` (one candidate a positive, weighted by the user's running
violation rate: the online rank estimate), beside the sampled estimate and LightFM's.

Quality: hit rate @10 (with one held-out like, recall@10) and AUC of `fa.metrics.evaluate` over
every document with a held-out like, LightFM's factors scored the same way. Speed: epochs x
training likes / the fit's seconds (LightFM's timed around its `fit` alone). Fits alternate;
the figures are medians of the repeats.

LightFM runs in this process when it imports here; else in the Python that
FASTAD_LIGHTFM_PYTHON names (bench/lightfm_fit.py, which needs only numpy, scipy and lightfm:
lightfm 1.17 builds only with setuptools < 70, e.g. `pip wheel --no-build-isolation
--no-use-pep517 lightfm==1.17` in a venv with `setuptools<70`, wheel, numpy and scipy). Without
either the comparison is skipped, with the reason.
Run: python bench/lightfm_warp.py [--quick]
"""
import os
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from common import cli  # noqa: E402
from implicit_bpr import FactorScores, stdlib_documents  # noqa: E402
import lightfm_fit  # noqa: E402

import fastad as fa  # noqa: E402

LIGHTFM_PYTHON = "FASTAD_LIGHTFM_PYTHON"


def _lightfm_here():
    try:
        import lightfm  # noqa: F401
    except ImportError:
        return False
    return True


def skip_reason():
    """Why this machine cannot run the comparison, or None."""
    if _lightfm_here():
        return None
    python = os.environ.get(LIGHTFM_PYTHON)
    if not python:
        return (f"lightfm is not installed (pip install lightfm, or set {LIGHTFM_PYTHON} to a Python "
                f"that has lightfm 1.17)")
    found = subprocess.run([python, "-c", "import lightfm"], capture_output=True, text=True)
    if found.returncode:
        return f"{LIGHTFM_PYTHON}={python} cannot import lightfm: {found.stderr.strip().splitlines()[-1]}"
    return None


class LightFM:
    """LightFM's fits of the benchmark: here, or in the Python of FASTAD_LIGHTFM_PYTHON on the
    training matrix saved once."""

    def __init__(self, train, folder):
        self.train, self.folder = train, folder
        self.python = None if _lightfm_here() else os.environ[LIGHTFM_PYTHON]
        if self.python:
            self.source = os.path.join(folder, "train.npz")
            np.savez(self.source, indptr=train.indptr, indices=train.indices, shape=np.array(train.shape))

    def fit(self, loss, epochs, threads, seed, item_features=None):
        """(a model to score with, seconds of the fit); with `item_features` (CSR, as
        lightfm_fit.fit takes them), the scores of every row of it."""
        if self.python is None:
            users, items, biases, seconds = lightfm_fit.fit(self.train, loss, epochs, threads, seed, item_features)
        else:
            target = os.path.join(self.folder, "factors.npz")
            features = []
            if item_features is not None:
                features = [os.path.join(self.folder, "item_features.npz")]
                np.savez(features[0], indptr=item_features.indptr, indices=item_features.indices,
                         data=item_features.data, shape=np.array(item_features.shape))
            subprocess.run([self.python, lightfm_fit.__file__, self.source, target, loss, str(epochs),
                            str(threads), str(seed)] + features, check=True)
            saved = np.load(target)
            users, items, biases, seconds = (saved["user_factors"], saved["item_factors"],
                                             saved["item_biases"], float(saved["seconds"]))
        return _Scores(users, items, biases), seconds


class _Scores(FactorScores):
    """Factor scores plus item biases."""

    def __init__(self, user_factors, item_factors, item_biases):
        super().__init__(user_factors, item_factors)
        self.item_biases = item_biases

    def scores(self, user_ids):
        return super().scores(user_ids) + self.item_biases


def lightfm_start(rng, rows):
    """Factors drawn as LightFM draws them: uniform in [-0.5, 0.5) / dim."""
    return ((rng.random((rows, lightfm_fit.DIM)) - 0.5) / lightfm_fit.DIM).astype(np.float32)


def fit_fastad(train, loss, epochs, threads, seed, rank_estimate="sampled"):
    """fastad's BPR with `loss` (and a WARP loss's `rank_estimate`) as the module's docstring
    says: (model, seconds of the fit)."""
    rng = np.random.default_rng(seed)
    users, items = train.shape
    if loss == "bpr":
        model = fa.models.BPR(users, items, dim=lightfm_fit.DIM, biases=True, seed=seed)
        options = {"optimizer": "sgd"}
    else:
        model = fa.models.BPR(users, items, U=lightfm_start(rng, users), V=lightfm_start(rng, items),
                              biases=True, loss=loss, max_sampled=lightfm_fit.MAX_SAMPLED,
                              rank_estimate=rank_estimate)
        options = {"optimizer": "adagrad", "optimizer_options": {"initial_accumulator_value": 1.0}}
    start = time.perf_counter()
    model.fit(train, epochs=epochs, lr=lightfm_fit.LR, seed=seed, workers=threads, start_method="threads",
              **options)
    return model, time.perf_counter() - start


def run(quick=False):
    likes = stdlib_documents(300_000)
    train, test = fa.data.leave_k_out(likes, 1, seed=0)
    epochs, repeats = (10, 1) if quick else (100, 3)
    losses = ("warp",) if quick else ("warp", "warp-kos")
    print(f"LightFM beside fastad: {likes.shape[0]:,} documents x {likes.shape[1]:,} words, "
          f"{train.nnz:,} training likes, {epochs} epochs, median of {repeats}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="fastad-lightfm-") as folder:
        peer = LightFM(train, folder)
        for threads in (1, 2):
            for loss in losses:
                # k-OS WARP's epoch is one positive per user, in both libraries
                examples = epochs * (train.shape[0] if loss == "warp-kos" else train.nnz)
                figures = {}
                for repeat in range(repeats):
                    fits = {"fastad": lambda: fit_fastad(train, loss, epochs, threads, repeat),
                            "LightFM": lambda: peer.fit(loss, epochs, threads, repeat),
                            "fastad online": lambda: fit_fastad(train, loss, epochs, threads, repeat, "online")}
                    if loss == "warp":
                        fits["fastad BPR"] = lambda: fit_fastad(train, "bpr", epochs, threads, repeat)
                    for name, fit in fits.items():
                        model, seconds = fit()
                        quality = fa.metrics.evaluate(model, test, train=train, k=10)
                        figures.setdefault(name, []).append((examples / seconds, quality["recall@10"],
                                                             quality["auc"]))
                median = {name: [statistics.median(column) for column in zip(*runs)]
                          for name, runs in figures.items()}
                for name, (rate, hit, auc) in median.items():
                    print(f"  {loss:8s} {threads} thread(s) {name:13s} {rate:>12,.0f} examples/s   "
                          f"hit rate@10 {hit:.4f}   AUC {auc:.4f}")
                ours, theirs = median["fastad"], median["LightFM"]
                bpr = (f"; fastad BPR: hit rate@10 {median['fastad BPR'][1]:.3f}, AUC {median['fastad BPR'][2]:.3f}"
                       if "fastad BPR" in median else "")
                rows.append({"workload": f"BPR(loss={loss!r}).fit dim {lightfm_fit.DIM}, {threads} thread(s), "
                                         f"sampling included, vs LightFM (hit rate@10 {ours[1]:.3f} vs "
                                         f"{theirs[1]:.3f}, AUC {ours[2]:.3f} vs {theirs[2]:.3f}{bpr})",
                             "unit": "example", "fastad": 1 / ours[0], "peer": 1 / theirs[0],
                             "peer_name": "LightFM", "threads": threads, "loss": loss,
                             "target": ">= 5x LightFM at 1 thread, hit rate@10 and AUC within 0.01"})
                online = median["fastad online"]
                rows.append({"workload": f"BPR(loss={loss!r}, rank_estimate='online').fit dim {lightfm_fit.DIM}, "
                                         f"{threads} thread(s), sampling included, vs LightFM (hit rate@10 "
                                         f"{online[1]:.3f} vs {theirs[1]:.3f}, AUC {online[2]:.3f} vs {theirs[2]:.3f})",
                             "unit": "example", "fastad": 1 / online[0], "peer": 1 / theirs[0],
                             "peer_name": "LightFM", "threads": threads, "loss": f"{loss} online",
                             "target": "the online rank estimate: >= 5x LightFM at 1 thread, hit rate@10 and "
                                       "AUC within 0.01"})
    for loss in dict.fromkeys(row["loss"] for row in rows):
        rate = {row["threads"]: (1 / row["fastad"], 1 / row["peer"]) for row in rows if row["loss"] == loss}
        print(f"  {loss}: 2 threads / 1 thread: fastad {rate[2][0] / rate[1][0]:.2f}x, "
              f"LightFM {rate[2][1] / rate[1][1]:.2f}x")
    return rows


if __name__ == "__main__":
    cli(run, __doc__, skip_reason=skip_reason)

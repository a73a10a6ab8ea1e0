"""fastad's LinearModel and FactorizationMachine beside Vowpal Wabbit, from a text file to a
model: featurising included, one pass, held-out AUC and log loss.

The files: TRAIN + TEST examples of a click-like task in VW's format, about 28 features a
line: 20 words of a Zipf vocabulary (|w), the character 3-grams of a name (|n), a site
(|c site=123) and, on a tenth of the lines, an importance weight; the label is drawn from
planted weights of the words and sites and of their pairs (a word group against a site
group: what a factorization machine, or VW's crosses of w and c, can learn), hashed into
2^BITS slots.

- logistic regression: fastad `LinearModel(loss="logistic")` (its default update, VW's:
  adaptive, normalised, invariant) fitted from the file's path (fa.features.read_vw inside)
  against VW `--loss_function logistic -b BITS` (the same update) over the file; then the
  test log loss of both at 1 and 5 passes (fastad's Adagrad beside). The labels are written
  -1/+1, as VW's logistic loss expects them (fed 0/1 labels, its test log loss on this data
  was 0.84 against 0.62 with -1/+1);
- factorization machine, k = 8: fastad `FactorizationMachine(k=8, interactions="cw")` (the
  pairs of a site and a word only, as VW's `--lrq cw8`; at its defaults: libffm's AdaGrad
  at lr 0.5 in ffm.h's compiled loop, factors from normal(0, 0.1), each example's values
  normalised)
  against VW with `-q cw` (the sites crossed with the words, hashed, beside the linear
  terms); then the test AUC and speed of both, and of VW's `--lrq cw8`, at 1 and 5 passes
  (one run each; VW's passes through its cache file, -c, made in its first pass). (Every pair
  of the features, interactions=None, learns this data worse: the word x word and 3-gram
  pairs are noise here.)
- field-aware factorization machine, k = 4 (`field_aware=True`, the namespaces its fields):
  one run, printed beside the rows.

Both models run at their defaults (no tuning to this data).

One test set's AUC moves with the draw of the data by more than the two libraries' AUCs
differ, so quality is also measured over SEEDS draws of the files (the same sizes, seeds 0
to SEEDS - 1; seed 0 is the timed rows' data): each library's test AUC and log loss at 1
pass, for logistic regression (fastad against VW) and the factorization machine (fastad
against VW -q cw and VW --lrq cw8), printed per seed with the mean difference and on how
many seeds fastad is ahead; the rows name the mean difference.

Both learn on 1 thread (VW has no Hogwild threads: its 2-thread figure is its 1-thread one;
fastad's 2-worker run is printed beside, with its own 1->2 scaling), and both parse the file
in a second thread beside the learning one: VW's parser thread fills its ring of examples
while its learner trains them; fastad's LinearModel (optimizer "vw") parses the file in a
thread of its own, 4,096 examples a chunk, one or two chunks ahead of the training. (The
factorization machine reads the whole file first, then trains.) The CPU seconds of each
library (every thread of this process while it runs) are printed beside. The libraries
alternate in this process; each row's seconds are the median of the rounds; quality is
measured on TEST by each library's own predictions. Each library runs once untimed first.
Run: python bench/sparse_models.py [--quick]
"""
import os
import statistics
import sys
import tempfile
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, cpu_seconds, not_installed  # noqa: E402

import fastad as fa  # noqa: E402

TRAIN, TEST, BITS = 60_000, 15_000, 21
#: The draws of the files whose test quality is compared (seed 0 is the timed rows').
SEEDS = 5


def write_files(folder, train, test, seed=0):
    """The train and test files (VW format) of one planted task; returns their paths."""
    rng = np.random.default_rng(seed)
    vocabulary, sites = 20_000, 500
    zipf = 1.0 / np.arange(1, vocabulary + 1)
    word_weight = rng.normal(0, 0.4, vocabulary)
    site_weight = rng.normal(0, 0.5, sites)
    word_group, site_group = rng.integers(0, 8, vocabulary), rng.integers(0, 8, sites)
    pair_weight = rng.normal(0, 0.25, (8, 8))
    letters = np.array(list("abcdefghijklmnopqrstuvwxyz"))
    paths = []
    for name, lines in (("train", train), ("test", test)):
        words = rng.choice(vocabulary, size=(lines, 20), p=zipf / zipf.sum())
        site = rng.integers(0, sites, lines)
        logit = (word_weight[words].sum(axis=1) / 3 + site_weight[site]
                 + pair_weight[word_group[words], site_group[site][:, None]].sum(axis=1) / 2 - 0.5)
        labels = rng.random(lines) < 1 / (1 + np.exp(-logit))
        path = os.path.join(folder, f"{name}.vw")
        with open(path, "w") as f:
            for r in range(lines):
                person = "".join(letters[rng.integers(0, 26, size=rng.integers(4, 8))])
                padded = f"<{person}>"
                grams = " ".join(padded[k:k + 3] for k in range(len(padded) - 2))
                weight = f" {rng.integers(2, 5)}" if r % 10 == 0 else ""
                f.write(f"{1 if labels[r] else -1}{weight} |w {' '.join(f'word{w}' for w in words[r])} "
                        f"|n {grams} |c site={site[r]}\n")
        paths.append(path)
    return paths


def labels_of(path):
    """The 0/1 labels of a file (written -1/+1, as VW's logistic loss reads them)."""
    with open(path) as f:
        return np.array([float(line.split(" ", 1)[0]) > 0 for line in f], dtype=np.int64)


def fastad_fit(kind, train, test, workers, passes=1, optimizer=None):
    """(seconds from the path to a trained model, test scores, CPU seconds); optimizer None:
    the model's default."""
    hasher = fa.features.Hasher(bits=BITS)
    chosen = {} if optimizer is None else {"optimizer": optimizer}
    if kind == "linear":
        model = fa.models.LinearModel(hasher=hasher, workers=workers, passes=passes, **chosen)
    elif kind == "fm":
        model = fa.models.FactorizationMachine(k=8, interactions="cw", hasher=hasher, workers=workers,
                                               passes=passes, **chosen)
    else:                                                           # "ffm"
        model = fa.models.FactorizationMachine(k=4, field_aware=True, hasher=hasher, workers=workers,
                                               passes=passes)
    cpu, start = cpu_seconds(), time.perf_counter()
    model.fit(train, start_method="threads")
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    return seconds, model.decision_function(test), cpu


def vw_fit(kind, train, test, folder, passes=1):
    """(VW's seconds over the train file, its raw test scores, its CPU seconds); passes > 1
    through VW's cache (-c -k), every line trained (--holdout_off)."""
    from vowpalwabbit import pyvw
    model, predictions = os.path.join(folder, "vw.model"), os.path.join(folder, "vw.preds")
    extra = {"fm": " -q cw", "lrq": " --lrq cw8"}.get(kind, "")
    if passes > 1:
        extra += f" --passes {passes} -c -k --holdout_off"
    cpu, start = cpu_seconds(), time.perf_counter()
    workspace = pyvw.Workspace(f"--quiet --loss_function logistic -b {BITS}{extra} -d {train} -f {model}")
    workspace.run_parser()
    workspace.finish()
    seconds, cpu = time.perf_counter() - start, cpu_seconds() - cpu
    scorer = pyvw.Workspace(f"--quiet -t -i {model} -d {test} -r {predictions}")
    scorer.run_parser()
    scorer.finish()
    with open(predictions) as f:
        return seconds, np.array([float(line.split()[0]) for line in f]), cpu


def quality(labels, scores):
    return fa.metrics.roc_auc(labels, scores), fa.metrics.log_loss(labels, scores, from_logits=True)


def seed_quality(train_lines, test_lines):
    """Over SEEDS draws of the files: {kind: (mean AUC difference fastad - VW, seeds where
    fastad's AUC is the higher, mean log loss difference, seeds where fastad's is the lower)}
    for "linear" (VW's logistic regression) and "fm" and "lrq" (fastad's factorization
    machine against VW -q cw and --lrq cw8); each seed's figures printed."""
    differences = {"linear": [], "fm": [], "lrq": []}
    for seed in range(SEEDS):
        with tempfile.TemporaryDirectory() as folder:
            train, test = write_files(folder, train_lines, test_lines, seed=seed)
            truth = labels_of(test)
            fastad = {kind: quality(truth, fastad_fit(kind, train, test, 1)[1]) for kind in ("linear", "fm")}
            line = [f"data seed {seed}, test AUC / log loss at 1 pass:"]
            for kind, ours, title in (("linear", "linear", "logistic regression"), ("fm", "fm", "FM vs VW -q cw"),
                                      ("lrq", "fm", "FM vs VW --lrq cw8")):
                vw = quality(truth, vw_fit(kind, train, test, folder)[1])
                differences[kind].append((fastad[ours][0] - vw[0], fastad[ours][1] - vw[1]))
                line.append(f"{title}: fastad {fastad[ours][0]:.4f} / {fastad[ours][1]:.4f}, VW {vw[0]:.4f} / "
                            f"{vw[1]:.4f}")
            print(" | ".join(line))
    summary = {}
    for kind, pairs in differences.items():
        auc, loss = np.array(pairs).T
        summary[kind] = (auc.mean(), int((auc >= 0).sum()), loss.mean(), int((loss <= 0).sum()))
        print(f"{kind} over {SEEDS} data seeds: AUC fastad - VW mean {auc.mean():+.4f} (fastad ahead on "
              f"{summary[kind][1]}), log loss mean {loss.mean():+.4f} (fastad lower on {summary[kind][3]})")
    return summary


def rows(quick):
    train_lines, test_lines = (TRAIN // 4, TEST // 4) if quick else (TRAIN, TEST)
    rounds = 2 if quick else 3
    out = []
    seeds = seed_quality(train_lines, test_lines)

    def over_seeds(kind):
        auc, ahead, loss, lower = seeds[kind]
        return (f"over {SEEDS} data seeds AUC {auc:+.4f} mean, ahead on {ahead}; log loss {loss:+.4f}, "
                f"lower on {lower}")
    with tempfile.TemporaryDirectory() as folder:
        train, test = write_files(folder, train_lines, test_lines)
        truth = labels_of(test)
        for kind, title in (("linear", "logistic regression"), ("fm", "factorization machine, k = 8")):
            times = {"fastad": [], "fastad2": [], "vw": []}
            cpu = {name: [] for name in times}
            fastad_fit(kind, train, test, 1)                # a warm-up run of each, not timed
            vw_fit(kind, train, test, folder)
            for _ in range(rounds):
                seconds, fa_scores, used = fastad_fit(kind, train, test, 1)
                times["fastad"].append(seconds)
                cpu["fastad"].append(used)
                seconds, _, used = fastad_fit(kind, train, test, 2)
                times["fastad2"].append(seconds)
                cpu["fastad2"].append(used)
                seconds, vw_scores, used = vw_fit(kind, train, test, folder)
                times["vw"].append(seconds)
                cpu["vw"].append(used)
            median = {name: statistics.median(t) for name, t in times.items()}
            cpu = {name: statistics.median(t) for name, t in cpu.items()}
            fa_auc, fa_loss = quality(truth, fa_scores)
            vw_auc, vw_loss = quality(truth, vw_scores)
            print(f"{title}: {train_lines:,} lines from the file, 1 pass | fastad "
                  f"{train_lines / median['fastad']:,.0f}/s (AUC {fa_auc:.4f}, log loss {fa_loss:.4f}; "
                  f"CPU {cpu['fastad'] * 1e3:.0f} ms; 2 workers {train_lines / median['fastad2']:,.0f}/s, "
                  f"CPU {cpu['fastad2'] * 1e3:.0f} ms, {median['fastad'] / median['fastad2']:.2f}x its 1) | VW "
                  f"{train_lines / median['vw']:,.0f}/s (AUC {vw_auc:.4f}, log loss {vw_loss:.4f}; CPU "
                  f"{cpu['vw'] * 1e3:.0f} ms) | {median['vw'] / median['fastad']:.2f}x VW at 1 thread, "
                  f"{median['vw'] / median['fastad2']:.2f}x at 2 (in CPU seconds {cpu['vw'] / cpu['fastad']:.2f}x)")
            what = "VW -q cw" if kind == "fm" else "VW --loss_function logistic"

            def row(fastad, how, target):
                return {"workload": f"{title} from a VW file ({train_lines:,} lines, 2^{BITS} slots), "
                                    f"featurising included, 1 pass, {how}",
                        "unit": "example", "fastad": median[fastad] / train_lines,
                        "peer": median["vw"] / train_lines, "peer_name": "VW", "target": target}

            out.append(row("fastad", f"1 thread, vs {what} (AUC {fa_auc:.3f} vs {vw_auc:.3f}; {over_seeds(kind)}"
                                     + (f"; vs VW --lrq cw8 {over_seeds('lrq')}" if kind == "fm" else "") + ")",
                           ">= 1.5x VW, AUC equal or better"))
            if kind == "linear":
                out.append(row("fastad2", f"2 Hogwild threads (and the parsing one), vs {what} at 1 (it has "
                                          f"no Hogwild threads)", ">= 1.8x VW at 2 threads"))
                for passes in (1, 5):
                    scores = {name: fastad_fit(kind, train, test, 1, passes, name)[1] for name in ("vw", "adagrad")}
                    vw_loss = quality(truth, vw_fit(kind, train, test, folder, passes)[1])[1]
                    print(f"{title}, {passes} pass(es), test log loss: fastad optimizer='vw' "
                          f"{quality(truth, scores['vw'])[1]:.4f}, optimizer='adagrad' "
                          f"{quality(truth, scores['adagrad'])[1]:.4f} | VW {vw_loss:.4f}")
            else:
                for passes in (1, 5):
                    runs = {"fastad": fastad_fit(kind, train, test, 1, passes),
                            **{name: vw_fit(name, train, test, folder, passes) for name in ("fm", "lrq")}}
                    auc = {name: quality(truth, scores)[0] for name, (_, scores, _) in runs.items()}
                    rate = {name: train_lines / seconds for name, (seconds, _, _) in runs.items()}
                    print(f"{title}, {passes} pass(es), one run each, test AUC (examples/s a pass): fastad "
                          f"{auc['fastad']:.4f} ({passes * rate['fastad']:,.0f}) | VW -q cw {auc['fm']:.4f} "
                          f"({passes * rate['fm']:,.0f}), VW --lrq cw8 {auc['lrq']:.4f} ({passes * rate['lrq']:,.0f})")
        seconds, ffm_scores, _ = fastad_fit("ffm", train, test, 1)
        ffm_auc, ffm_loss = quality(truth, ffm_scores)
        print(f"field-aware factorization machine, k = 4 (libffm's form, the namespaces its fields), "
              f"1 pass, one run: fastad {train_lines / seconds:,.0f}/s (AUC {ffm_auc:.4f}, log loss "
              f"{ffm_loss:.4f}), beside VW -q cw above")
    return out


def skip_reason():
    return not_installed("vowpalwabbit", "vowpalwabbit")


def run(quick=False):
    return rows(quick)


if __name__ == "__main__":
    cli(run, __doc__)

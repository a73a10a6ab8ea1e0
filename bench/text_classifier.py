"""fastad's TextClassifier beside fastText's supervised model.

Data: real labelled text found on every machine that runs the benchmarks: the
first paragraph of every function's and class's docstring in the installed Python
packages (the standard library's and site-packages'), labelled by the top-level
package it comes from; the 20 packages with the most docstrings, at most 3,000 texts
each, lower-cased and split into words and punctuation. An 80/20 split by a seeded
shuffle. The texts are extracted once and cached (`FASTAD_BENCH_CACHE`, default
~/.cache/fastad-bench), since parsing every module takes minutes.

Both sides train from the same fastText-format file with the same settings: dim 50,
5 epochs, lr 0.1 decayed linearly to 0, word bigrams hashed into 2,000,000 buckets,
softmax, min_count 1, at 1 and 2 threads. The time is the whole `fit` from the file:
the dictionary, featurising and filling the tables included on both sides. Quality:
precision at 1 on the held-out texts, both sides measured by their own `test`. The
libraries alternate in this process; each figure is the median of the repeats.

Run: python bench/text_classifier.py [--quick]
"""
import ast
import os
import random
import re
import statistics
import sys
import sysconfig
import tempfile
import time

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, not_installed  # noqa: E402

import fastad as fa  # noqa: E402

SETTINGS = {"dim": 50, "epochs": 5, "lr": 0.1, "word_ngrams": 2, "bucket": 2_000_000, "loss": "softmax"}
CLASSES, PER_CLASS = 20, 3000
_WORDS = re.compile(r"[a-z0-9_]+|[^\sa-z0-9_]")


def _docstrings(root, skip=()):
    """(top-level package, first paragraph) of each function and class docstring under `root`."""
    for folder, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(d for d in dirs if d not in skip and not d.startswith("."))
        relative = os.path.relpath(folder, root)
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            package = relative.split(os.sep)[0] if relative != "." else name[:-3]
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    tree = ast.parse(f.read())
            except (SyntaxError, UnicodeDecodeError, ValueError, RecursionError):
                continue
            for node in ast.walk(tree):
                if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                    doc = ast.get_docstring(node)
                    if doc:
                        first = " ".join(_WORDS.findall(doc.split("\n\n")[0].lower()))
                        if first:
                            yield package.lstrip("_").lower(), first


def labelled_texts():
    """[(label, text)] of the 20 packages with the most docstrings, 3,000 texts at most each."""
    cache = os.path.join(os.environ.get("FASTAD_BENCH_CACHE", os.path.expanduser("~/.cache/fastad-bench")),
                         "docstrings.tsv")
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            return [tuple(line.rstrip("\n").split("\t", 1)) for line in f]
    paths = sysconfig.get_paths()
    found = list(_docstrings(paths["stdlib"], skip=("site-packages",)))
    if paths["purelib"] != paths["stdlib"]:
        found += list(_docstrings(paths["purelib"]))
    by_label = {}
    for label, text in found:
        by_label.setdefault(label, []).append(text)
    largest = sorted(by_label, key=lambda k: (-len(by_label[k]), k))[:CLASSES]
    rng = random.Random(0)
    kept = []
    for label in largest:
        texts = by_label[label]
        rng.shuffle(texts)
        kept += [(label, text) for text in texts[:PER_CLASS]]
    rng.shuffle(kept)
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in kept)
    os.replace(cache + ".tmp", cache)
    return kept


def write_split(folder, texts):
    """The 80/20 split as fastText-format files: (train path, test path)."""
    cut = len(texts) * 4 // 5
    paths = []
    for name, part in (("train.txt", texts[:cut]), ("test.txt", texts[cut:])):
        path = os.path.join(folder, name)
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(f"__label__{label} {text}\n" for label, text in part)
        paths.append(path)
    return paths


def fastad_fit(train, threads):
    return fa.models.TextClassifier(**SETTINGS, workers=threads, seed=0).fit(train, start_method="threads")


def fasttext_fit(train, threads):
    import fasttext
    return fasttext.train_supervised(input=train, dim=SETTINGS["dim"], epoch=SETTINGS["epochs"],
                                     lr=SETTINGS["lr"], wordNgrams=SETTINGS["word_ngrams"],
                                     bucket=SETTINGS["bucket"], loss=SETTINGS["loss"], minCount=1,
                                     thread=threads, verbose=0)


def skip_reason():
    return not_installed("fasttext", "fasttext-wheel")


def run(quick=False):
    reason = skip_reason()
    if reason:
        print(f"text classification vs fastText skipped: {reason}")
        return []
    texts = labelled_texts()
    if quick:
        texts = texts[:len(texts) // 2]
    repeats = 2 if quick else 3
    rows, scaling = [], {}
    with tempfile.TemporaryDirectory() as folder:
        train, test = write_split(folder, texts)
        with open(train, encoding="utf-8") as f:
            n_train = sum(1 for _ in f)
        for threads in (1, 2):
            seconds, precision = {"fastad": [], "fastText": []}, {"fastad": [], "fastText": []}
            for _ in range(repeats):        # the libraries alternated; medians
                start = time.perf_counter()
                peer = fasttext_fit(train, threads)
                seconds["fastText"].append(time.perf_counter() - start)
                precision["fastText"].append(peer.test(test)[1])
                start = time.perf_counter()
                model = fastad_fit(train, threads)
                seconds["fastad"].append(time.perf_counter() - start)
                precision["fastad"].append(model.test(test)[1])
            t = {name: statistics.median(s) for name, s in seconds.items()}
            p = {name: statistics.median(s) for name, s in precision.items()}
            scaling.setdefault("fastad", []).append(t["fastad"])
            scaling.setdefault("fastText", []).append(t["fastText"])
            print(f"TextClassifier, {n_train:,} texts x {SETTINGS['epochs']} epochs, {threads} thread(s), "
                  f"median of {repeats}: fastad {t['fastad']:.3f} s P@1 {p['fastad']:.4f} | fastText "
                  f"{t['fastText']:.3f} s P@1 {p['fastText']:.4f} | {t['fastText'] / t['fastad']:.2f}x")
            examples = n_train * SETTINGS["epochs"]
            rows.append({"workload": f"TextClassifier (fastText supervised) dim 50, bigrams, {threads} "
                                     f"thread(s), featurising included, vs fastText (P@1 "
                                     f"{p['fastad']:.3f} vs {p['fastText']:.3f})",
                         "unit": "text", "fastad": t["fastad"] / examples,
                         "peer": t["fastText"] / examples, "peer_name": "fastText",
                         "target": ">= 1.5x fastText, accuracy within 0.005"})
    for name, (one, two) in scaling.items():
        print(f"{name}: 1 -> 2 threads {one / two:.2f}x")
    return rows


if __name__ == "__main__":
    cli(run, __doc__)

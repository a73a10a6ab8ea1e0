"""fastad's TextClassifier beside fastText's supervised model.

Data: real labelled text found on every machine that runs the benchmarks: the
first paragraph of every function's and class's docstring in the installed Python
packages (the standard library's and site-packages'), labelled by the top-level
package it comes from; the 20 packages with the most docstrings, at most 3,000 texts
each, lower-cased and split into words and punctuation. An 80/20 split by a seeded
shuffle. The texts are extracted once and cached (`FASTAD_BENCH_CACHE`, default
~/.cache/fastad-bench), since parsing every module takes minutes.

Long documents: the man pages installed on the machine (/usr/share/man, sections 1, 2,
3, 5, 7 and 8 as the 6 labels, at most 2,000 pages a section, the groff requests
dropped, lower-cased and split as above): whole pages of 20 to 117,000 tokens, median
about 450 (4,162 pages where the benchmarks ran). Skipped, with the reason, where
no man pages are installed.

Both sides train from the same fastText-format file with the same settings: dim 50,
5 epochs, lr 0.1 (0.5 on the man pages, as the issue that asked for them) decayed
linearly to 0, word bigrams hashed into 2,000,000 buckets, softmax, min_count 1, at 1
and 2 threads. The time is the whole `fit` from the file:
the dictionary, featurising and filling the tables included on both sides. Quality:
precision at 1 on the held-out texts, both sides measured by their own `test`. The
libraries alternate in this process; each figure is the median of the repeats.

Run: python bench/text_classifier.py [--quick]
"""
import ast
import gzip
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
LONG_SETTINGS = {**SETTINGS, "lr": 0.5}
CLASSES, PER_CLASS = 20, 3000
MAN_ROOT, MAN_SECTIONS, PER_SECTION = "/usr/share/man", ("1", "2", "3", "5", "7", "8"), 2000
_GROFF_ESCAPES = re.compile(r"\\f[BIRP]|\\\(..|\\[-&e]")
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
    def make():
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
        return kept
    return _cached("docstrings.tsv", make)


def _cached(name, make):
    """The [(label, text)] of `make()`, cached as a TSV file under FASTAD_BENCH_CACHE."""
    cache = os.path.join(os.environ.get("FASTAD_BENCH_CACHE", os.path.expanduser("~/.cache/fastad-bench")), name)
    if os.path.exists(cache):
        with open(cache, encoding="utf-8") as f:
            return [tuple(line.rstrip("\n").split("\t", 1)) for line in f]
    kept = make()
    os.makedirs(os.path.dirname(cache), exist_ok=True)
    with open(cache + ".tmp", "w", encoding="utf-8") as f:
        f.writelines(f"{label}\t{text}\n" for label, text in kept)
    os.replace(cache + ".tmp", cache)
    return kept


def _man_page_text(path):
    """The words of a man page (gzipped or not): its groff requests and font escapes
    dropped, lower-cased, split as the docstrings are; None for a page that only sources
    another (".so")."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        raw = f.read().decode("utf-8", "replace")
    if raw.lstrip().startswith(".so "):
        return None
    text = " ".join(line for line in raw.splitlines() if not line.startswith((".", "'")))
    return " ".join(_WORDS.findall(_GROFF_ESCAPES.sub(" ", text).lower()))


def man_pages():
    """[(section, page text)]: whole man pages of sections 1, 2, 3, 5, 7 and 8, at most 2,000
    a section (a seeded draw), pages of fewer than 20 tokens left out; [] without man pages."""
    def make():
        rng = random.Random(0)
        kept = []
        for section in MAN_SECTIONS:
            folder = os.path.join(MAN_ROOT, "man" + section)
            pages = []
            for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else ():
                path = os.path.join(folder, name)
                text = None if os.path.islink(path) else _man_page_text(path)
                if text and text.count(" ") >= 19:
                    pages.append(text)
            rng.shuffle(pages)
            kept += [("man" + section, text) for text in pages[:PER_SECTION]]
        rng.shuffle(kept)
        return kept
    return _cached("man_pages.tsv", make) if os.path.isdir(MAN_ROOT) else []


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


def fastad_fit(train, threads, settings=SETTINGS):
    return fa.models.TextClassifier(**settings, workers=threads, seed=0).fit(train, start_method="threads")


def fasttext_fit(train, threads, settings=SETTINGS):
    import fasttext
    return fasttext.train_supervised(input=train, dim=settings["dim"], epoch=settings["epochs"],
                                     lr=settings["lr"], wordNgrams=settings["word_ngrams"],
                                     bucket=settings["bucket"], loss=settings["loss"], minCount=1,
                                     thread=threads, verbose=0)


def skip_reason():
    return not_installed("fasttext", "fasttext-wheel")


def compare(name, texts, settings, repeats):
    """Both libraries on the 80/20 split of `texts`, alternated, at 1 and 2 threads: the
    rows of the report, one per thread count."""
    rows, scaling = [], {}
    with tempfile.TemporaryDirectory() as folder:
        train, test = write_split(folder, texts)
        with open(train, encoding="utf-8") as f:
            n_train = sum(1 for _ in f)
        for threads in (1, 2):
            seconds, precision = {"fastad": [], "fastText": []}, {"fastad": [], "fastText": []}
            for _ in range(repeats):        # the libraries alternated; medians
                start = time.perf_counter()
                peer = fasttext_fit(train, threads, settings)
                seconds["fastText"].append(time.perf_counter() - start)
                precision["fastText"].append(peer.test(test)[1])
                start = time.perf_counter()
                model = fastad_fit(train, threads, settings)
                seconds["fastad"].append(time.perf_counter() - start)
                precision["fastad"].append(model.test(test)[1])
            t = {library: statistics.median(s) for library, s in seconds.items()}
            p = {library: statistics.median(s) for library, s in precision.items()}
            scaling.setdefault("fastad", []).append(t["fastad"])
            scaling.setdefault("fastText", []).append(t["fastText"])
            print(f"TextClassifier on {name}, {n_train:,} texts x {settings['epochs']} epochs, {threads} "
                  f"thread(s), median of {repeats}: fastad {t['fastad']:.3f} s P@1 {p['fastad']:.4f} | "
                  f"fastText {t['fastText']:.3f} s P@1 {p['fastText']:.4f} | {t['fastText'] / t['fastad']:.2f}x")
            examples = n_train * settings["epochs"]
            rows.append({"workload": f"TextClassifier (fastText supervised) on {name}, dim 50, bigrams, "
                                     f"{threads} thread(s), featurising included, vs fastText (P@1 "
                                     f"{p['fastad']:.3f} vs {p['fastText']:.3f})",
                         "unit": "text", "fastad": t["fastad"] / examples,
                         "peer": t["fastText"] / examples, "peer_name": "fastText",
                         "target": ">= 1.5x fastText, accuracy within 0.005"})
    for library, (one, two) in scaling.items():
        print(f"{name}, {library}: 1 -> 2 threads {one / two:.2f}x")
    return rows


def run(quick=False):
    reason = skip_reason()
    if reason:
        print(f"text classification vs fastText skipped: {reason}")
        return []
    texts = labelled_texts()
    if quick:
        texts = texts[:len(texts) // 2]
    repeats = 2 if quick else 3
    rows = compare("docstrings", texts, SETTINGS, repeats)
    pages = man_pages()
    if not pages:
        print(f"TextClassifier on man pages skipped: no man pages under {MAN_ROOT}")
        return rows
    return rows + compare("man pages (long documents)", pages[:len(pages) // 2] if quick else pages,
                          LONG_SETTINGS, repeats)


if __name__ == "__main__":
    cli(run, __doc__)

"""Click prediction from a TSV file: hashed features, a factorization machine, AUC.

The data: `write_clicks` writes a TSV of ad impressions (a query's words, a site, a device,
a price and a click), the clicks drawn from planted weights of the words and sites and of
word-site pairs. The model, in the lines of `main` between the two comments: the columns
hashed as Vowpal Wabbit hashes them (`fa.features.read_csv`: words as a text namespace,
site and device as categorical ones, the price a valued feature, site x words crossed),
`fa.models.FactorizationMachine` (or `LinearModel`) trained per example in compiled code,
and the held-out AUC and log loss.

Run: python examples/click_prediction.py [--rows N] [--model fm|linear] [--passes P]
"""
import argparse
import os
import tempfile

import numpy as np

import fastad as fa


def write_clicks(path, rows, seed=0):
    """A TSV of `rows` impressions with a header: query, site, device, price, click (the
    planted weights the same for every file, the impressions drawn by `seed`)."""
    truth = np.random.default_rng(2024)
    words = np.array([f"w{k}" for k in range(2000)])
    popularity = 1.0 / np.arange(1, words.size + 1)
    word_weight, site_weight = truth.normal(0, 0.5, words.size), truth.normal(0, 0.7, 300)
    pair_weight = truth.normal(0, 0.6, (4, 4))
    rng = np.random.default_rng(seed)
    with open(path, "w") as f:
        f.write("query\tsite\tdevice\tprice\tclick\n")
        for _ in range(rows):
            query = rng.choice(words.size, rng.integers(1, 6), p=popularity / popularity.sum())
            site, device, price = rng.integers(0, 300), rng.choice(["phone", "desktop"]), rng.gamma(2.0)
            logit = (word_weight[query].mean() + site_weight[site] - 0.3 * price
                     + pair_weight[query % 4, site % 4].mean() - 1.0)
            click = int(rng.random() < 1 / (1 + np.exp(-logit)))
            f.write(f"{' '.join(words[query])}\tsite{site}\t{device}\t{price:.2f}\t{click}\n")


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rows", type=int, default=200_000)
    ap.add_argument("--model", choices=["fm", "linear"], default="fm")
    ap.add_argument("--passes", type=int, default=2)
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as folder:
        train_path, test_path = os.path.join(folder, "train.tsv"), os.path.join(folder, "test.tsv")
        write_clicks(train_path, args.rows, seed=0)
        write_clicks(test_path, args.rows // 4, seed=1)
        # ---- the user's part: from a TSV file to a model and its held-out quality
        hasher = fa.features.Hasher(bits=20, quadratic=["sq"])
        columns = dict(label="click", delimiter="\t", text={"query": "q"},
                       categorical={"site": "s", "device": "d"}, numeric={"price": "p"})
        train, test = (fa.features.read_csv(path, hasher, **columns) for path in (train_path, test_path))
        model = (fa.models.FactorizationMachine(k=8, lr=0.05, passes=args.passes, hasher=hasher)
                 if args.model == "fm" else fa.models.LinearModel(passes=args.passes, hasher=hasher))
        model.fit(train, progress=fa.progress_bar(len(train) * args.passes, desc="training"))
        scores = model.decision_function(test)
        auc = fa.metrics.roc_auc(test.labels, scores)
        loss = fa.metrics.log_loss(test.labels, scores, from_logits=True)
        # ----
    print(f"{type(model).__name__}: {len(train):,} training rows, {np.diff(train.offsets).mean():.1f} "
          f"features a row, held-out AUC {auc:.4f}, log loss {loss:.4f}")
    return {"auc": auc, "log_loss": loss, "history": model.history}


if __name__ == "__main__":
    main()

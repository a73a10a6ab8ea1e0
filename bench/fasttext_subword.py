"""fastad's FastText beside gensim's: subword skip-gram with negative sampling.

The text, settings and measures of bench/peers.py's skip-gram rows: the docstrings and
comments of Python's standard library, dim 64, window 5, 5 negatives, min_count 5, no
subsampling, lr 0.025 decayed linearly to 1e-4, one epoch, and character n-grams of
lengths 3..6 hashed into BUCKET rows (gensim's default). `fa.models.FastText` vs
`gensim.models.FastText(sg=1)`, both from the raw sentences (vocabulary, n-gram
tables and the drawing of the input table included: gensim's holds every bucket,
fastad's the vocabulary's rows and the buckets its words use, about 29,000 on the quick
text), at 1 and 2 threads, the libraries alternated in this process; the figures are medians. fastad's FastText runs in
both forms: one pair a step, and `shared_negatives=True` (one window a step, the centre's
bag against its window and k negatives drawn once for it).

Quality: the held-out SGNS loss (peers.heldout_sgns_loss) of the last 10% of the text,
each centre word's vector composed of its subword rows as each library trains it
(fastad: the mean of its own row and its n-gram rows; gensim: its row plus its n-gram
rows, over the n-gram count, as its skip-gram computes it, and also its `wv.vectors`,
the mean; the better of gensim's two is compared). Fit r of the repeats has seed r on
both sides, so the medians are over seeds (one seed's loss varies by about 0.001).

Run: python bench/fasttext_subword.py [--quick]
"""
import os
import statistics
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, not_installed  # noqa: E402
from peers import SGNS, gensim_missing, heldout_sgns_loss, sgns_data  # noqa: E402

import fastad as fa  # noqa: E402

BUCKET = 2_000_000
SUBWORDS = dict(min_n=3, max_n=6, bucket=BUCKET)


def fastad_fasttext(threads, seed, shared=False):
    return fa.models.FastText(dim=64, workers=threads, lr=0.025, min_lr=1e-4, **dict(SGNS, seed=seed),
                              shared_negatives=shared, **SUBWORDS)


#: fastad's two forms: one pair a step, and one window a step with shared negatives
FORMS = {"fastad": False, "fastad shared": True}


def gensim_fasttext(threads, sentences, seed):
    from gensim.models import FastText as GensimFastText
    return GensimFastText(sentences, vector_size=64, sg=1, workers=threads, alpha=0.025, min_alpha=1e-4,
                          **dict(SGNS, seed=seed), **SUBWORDS)


def gensim_centres(model, order):
    """gensim's centre vectors as it trains them, in fastad's word order: (its own row + its
    n-gram rows) / the n-gram count (its row alone when it has no n-gram)."""
    wv = model.wv
    rows = []
    for i in order:
        buckets = wv.buckets_word[i]
        total = wv.vectors_vocab[i] + wv.vectors_ngrams[buckets].sum(axis=0)
        rows.append(total / len(buckets) if len(buckets) else total)
    return np.array(rows)


def rows(quick):
    if gensim_missing("FastText"):
        return []
    train, vocabulary, tokens, held_tokens, held_ends, pairs = sgns_data(quick)
    repeats = 2 if quick else 3
    result, rates = [], {}
    for threads in (1, 2):
        seconds, losses = {}, {}
        for seed in range(repeats):
            start = time.perf_counter()
            peer = gensim_fasttext(threads, train, seed)
            seconds.setdefault("gensim", []).append(time.perf_counter() - start)
            order = np.array([peer.wv.key_to_index[w] for w in vocabulary.words])
            output = peer.syn1neg[order]
            losses.setdefault("gensim", []).append(min(
                heldout_sgns_loss(gensim_centres(peer, order), output, held_tokens, held_ends),
                heldout_sgns_loss(peer.wv.vectors[order], output, held_tokens, held_ends)))
            del peer
            for name, shared in FORMS.items():
                model = fastad_fasttext(threads, seed, shared)
                start = time.perf_counter()
                model.fit(train, start_method="threads")
                seconds.setdefault(name, []).append(time.perf_counter() - start)
                assert model.words == vocabulary.words
                losses.setdefault(name, []).append(
                    heldout_sgns_loss(model.word_vectors(), model.output, held_tokens, held_ends))
                del model
        rate = {name: pairs * SGNS["epochs"] / statistics.median(s) for name, s in seconds.items()}
        loss = {name: statistics.median(v) for name, v in losses.items()}
        rates[threads] = rate
        for name, shared in FORMS.items():
            form = ", shared negatives (one window a step)" if shared else ""
            print(f"FastText skip-gram dim 64{form}, n-grams 3..6 in {BUCKET:,} buckets, {threads} thread(s), "
                  f"{tokens.size:,} tokens, median of {repeats} (seeds 0-{repeats - 1}): fastad "
                  f"{rate[name]:,.0f} pairs/s loss {loss[name]:.3f} | gensim {rate['gensim']:,.0f} pairs/s "
                  f"loss {loss['gensim']:.3f} | {rate[name] / rate['gensim']:.2f}x")
            result.append({"workload": f"FastText skip-gram dim 64{form}, n-grams 3..6, {threads} thread(s), "
                                       f"vocabulary, tables and sampling included, vs gensim (held-out loss "
                                       f"{loss[name]:.3f} vs {loss['gensim']:.3f})",
                           "unit": "pair", "fastad": 1 / rate[name], "peer": 1 / rate["gensim"],
                           "peer_name": "gensim",
                           "target": (">= 2.0x gensim, held-out loss within 0.02" if shared
                                      else ">= 1.0x gensim, held-out loss no worse")})
    for name in (*FORMS, "gensim"):
        print(f"{name}: 1 -> 2 threads {rates[2][name] / rates[1][name]:.2f}x")
    return result


def skip_reason():
    return not_installed("gensim", "gensim")


def run(quick=False):
    return rows(quick)


if __name__ == "__main__":
    cli(run, __doc__)

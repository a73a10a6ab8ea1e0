"""fastad beside the hand-written peers: implicit's BPR and gensim's word2vec.

Both sides sample inside their loops, on the same data with the same settings,
at 1 and 2 threads/workers (fastad: Hogwild threads of one process, each with
its own sampler stream, the compiled loop running without the GIL). The peers are optional: a missing one is skipped with the
reason. Speeds are examples per second including sampling; quality is held-out
(test AUC for BPR, held-out SGNS loss for skip-gram), computed the same way for
both sides from their learned vectors.

- BPR: `fa.models.BPR.fit` vs `implicit.cpu.bpr.BayesianPersonalizedRanking`
  (bench/implicit_bpr.py: a planted user x item matrix, k=32, SGD).
- Skip-gram with negative sampling: the docstrings and comments of Python's
  standard library (on every machine), dim 64, window 5, 5 negatives,
  min_count 5, no subsampling, lr 0.025 decayed linearly to 1e-4, one epoch;
  `fa.models.Word2Vec` vs `gensim.models.Word2Vec(sg=1)`, both from the raw
  sentences (vocabulary included).
- Skip-gram's two forms beside gensim (issue 55): words/s of `train` alone (the vocabulary
  built untimed) of the pair form and of `shared_negatives=True` (one window a step, its
  negatives shared: pWord2Vec's form) against gensim's, dim 100, window 5, 5 negatives,
  min_count 5, no subsampling, one epoch, at 1 and 2 threads, on a Zipf(1.1) corpus
  (bench/memory.py's) and on the standard library's text, where the held-out SGNS loss
  and the overlap of the 10 nearest words of the 500 most frequent with gensim's are
  measured too (medians over seeds; gensim's overlap with itself across seeds beside).

fastad runs each model twice: one example a step (per-example SGD, as the
peers do) and BATCH examples a step (one replay of a graph of BATCH triples or
pairs, their gradients applied together); both rows show their quality. Every
fit runs several times, the libraries alternated in this process; the figures
are medians.

Run: python bench/peers.py [--quick]
"""
import io
import os
import re
import statistics
import sys
import sysconfig
import time
import tokenize

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from common import cli, not_installed  # noqa: E402

import fastad as fa  # noqa: E402

BATCH = 16      # the pairs (skip-gram) or triples (BPR) of one step in the batched rows

# ---------------------------------------------------------------- data

def stdlib_text(limit_tokens):
    """Lower-cased words of the standard library's docstrings and comments, by sentence."""
    words = re.compile(r"[a-z]+")
    sentences, total = [], 0
    root = sysconfig.get_paths()["stdlib"]
    for folder, dirs, files in sorted(os.walk(root)):
        dirs[:] = sorted(d for d in dirs if d not in ("test", "tests", "idlelib", "site-packages"))
        for name in sorted(files):
            if not name.endswith(".py"):
                continue
            try:
                with open(os.path.join(folder, name), encoding="utf-8") as f:
                    source = f.read()
                tokens = list(tokenize.generate_tokens(io.StringIO(source).readline))
            except (SyntaxError, UnicodeDecodeError, tokenize.TokenError, IndentationError):
                continue
            for tok in tokens:
                if tok.type in (tokenize.COMMENT, tokenize.STRING):
                    for line in tok.string.lower().split("."):
                        sentence = words.findall(line)
                        if len(sentence) > 1:
                            sentences.append(sentence)
                            total += len(sentence)
            if total >= limit_tokens:
                return sentences
    return sentences


def encode(sentences, vocab):
    ids, ends = [], []
    for s in sentences:
        kept = [vocab[w] for w in s if w in vocab]
        if kept:
            ids.extend(kept)
            ends.append(len(ids))
    return np.array(ids, dtype=np.int64), np.array(ends, dtype=np.int64)


def heldout_sgns_loss(W, C, tokens, ends, negatives=5, window=5, seed=2, pairs=50_000):
    """Mean SGNS loss of held-out (centre, context) pairs with unigram^0.75 negatives."""
    rng = np.random.default_rng(seed)
    noise = np.bincount(tokens, minlength=W.shape[0]) ** 0.75
    noise = noise / noise.sum()
    starts = np.concatenate(([0], ends[:-1]))
    sentence_of = np.repeat(np.arange(ends.size), ends - starts)
    centre = rng.integers(0, tokens.size, pairs * 2)
    offset = rng.integers(1, window + 1, centre.size) * rng.choice([-1, 1], centre.size)
    other = centre + offset
    ok = (other >= 0) & (other < tokens.size)
    centre, other = centre[ok], other[ok]
    ok = sentence_of[centre] == sentence_of[other]
    centre, other = tokens[centre[ok]][:pairs], tokens[other[ok]][:pairs]
    neg = rng.choice(W.shape[0], size=(centre.size, negatives), p=noise)
    logsig = lambda x: -np.logaddexp(0, -x)
    pos_score = np.einsum("nk,nk->n", W[centre], C[other])
    neg_score = np.einsum("nk,njk->nj", W[centre], C[neg])
    return float(np.mean(-logsig(pos_score) - logsig(-neg_score).sum(axis=1)))


# ---------------------------------------------------------------- fastad sides

# ---------------------------------------------------------------- the runs

def bpr_rows(quick):
    """implicit_bpr.py's model-vs-model comparison, as report rows."""
    import implicit_bpr
    reason = implicit_bpr.skip_reason()
    if reason:
        print(f"BPR vs implicit skipped: {reason}")
        return []
    result = implicit_bpr.run(quick)
    print(implicit_bpr.scaling_line(result))
    by_threads = {}
    for row in result["rows"]:
        by_threads.setdefault(row["threads"], {})[row["library"]] = row
    return [{"workload": f"BPR.fit k={implicit_bpr.DIM}, {implicit_bpr.describe(name)}, "
                         f"{threads} thread(s), sampling included, vs implicit "
                         f"(precision@10 {pair[name]['precision@10']:.3f} vs "
                         f"{pair['implicit']['precision@10']:.3f}, AUC {pair[name]['auc']:.3f} vs "
                         f"{pair['implicit']['auc']:.3f})",
             "unit": "sample", "fastad": 1 / pair[name]["samples_per_second"],
             "peer": 1 / pair["implicit"]["samples_per_second"], "peer_name": "implicit",
             "target": ">= 1.0x implicit, quality no worse"}
            for threads, pair in sorted(by_threads.items()) for name in implicit_bpr.FASTAD_FITS]


def pairs_per_epoch(tokens, ends):
    """The (centre, context) pairs of one epoch over the encoded text (window 5, its reduced
    windows drawn as fastad's seed 0 draws them): every fit's figures are per pair of it."""
    counting = fa.data.SkipGramSampler(tokens, fa.IndexInput([0]), fa.IndexInput([0] * 6),
                                       sentence_ends=ends, window=5, seed=0)
    return sum(1 for _ in counting.epoch())


#: the skip-gram settings both libraries take under these names
SGNS = dict(window=5, negative=5, min_count=5, sample=0, epochs=1, seed=0)


def fastad_sgns(threads):
    """fastad's skip-gram model with the settings of these benchmarks (dim 64, lr 0.025 to 1e-4)."""
    return fa.models.Word2Vec(dim=64, workers=threads, lr=0.025, min_lr=1e-4, **SGNS)


def gensim_sgns(threads, sentences=None):
    """gensim's with the same settings; given `sentences`, it builds its vocabulary and trains."""
    from gensim.models import Word2Vec as GensimWord2Vec
    return GensimWord2Vec(sentences, vector_size=64, sg=1, workers=threads, alpha=0.025,
                          min_alpha=1e-4, **SGNS)


def split_text(sentences):
    """(training sentences, held-out sentences): the first 90% and the rest."""
    split = int(len(sentences) * 0.9)
    return sentences[:split], sentences[split:]


def sgns_data(quick):
    """What the skip-gram rows (here and in fasttext_subword.py) share: (training sentences,
    their vocabulary (a Word2Vec's), training tokens, held-out tokens and sentence ends, the
    pairs of an epoch). The vocabulary is the same for every fit (the same sentences and
    min_count), so the held-out text is encoded and an epoch's pairs counted once."""
    train, held = split_text(stdlib_text(300_000 if quick else 1_000_000))
    vocabulary = fa.models.Word2Vec(min_count=SGNS["min_count"]).build_vocab(train)
    tokens, ends = encode(train, vocabulary.index)
    held_tokens, held_ends = encode(held, vocabulary.index)
    return train, vocabulary, tokens, held_tokens, held_ends, pairs_per_epoch(tokens, ends)


def gensim_missing(rows):
    """Whether gensim cannot be imported; if so, says that the `rows` (their name) are skipped."""
    try:
        import gensim  # noqa: F401
    except ImportError as e:
        print(f"{rows} vs gensim skipped: gensim is not installed ({e})")
        return True
    return False


def sgns_rows(quick):
    if gensim_missing("skip-gram"):
        return []
    train, vocabulary, tokens, held_tokens, held_ends, pairs = sgns_data(quick)
    repeats = 2 if quick else 3
    rows = []
    for threads in (1, 2):
        # every fit `repeats` times, the libraries alternated: each figure is a median
        seconds, losses = {}, {}
        for _ in range(repeats):
            start = time.perf_counter()
            peer = gensim_sgns(threads, train)
            seconds.setdefault("gensim", []).append(time.perf_counter() - start)
            order = np.array([peer.wv.key_to_index[w] for w in vocabulary.words])   # fastad's order
            losses.setdefault("gensim", []).append(
                heldout_sgns_loss(peer.wv.vectors[order], peer.syn1neg[order], held_tokens, held_ends))
            for batch in (1, BATCH):
                model = fastad_sgns(threads)
                start = time.perf_counter()
                model.fit(train, start_method="threads", batch_size=batch)
                seconds.setdefault(batch, []).append(time.perf_counter() - start)
                assert model.words == vocabulary.words
                losses.setdefault(batch, []).append(
                    heldout_sgns_loss(model.vectors, model.output, held_tokens, held_ends))
        peer_rate = pairs * SGNS["epochs"] / statistics.median(seconds["gensim"])
        peer_loss = statistics.median(losses["gensim"])
        for batch in (1, BATCH):
            rate = pairs * SGNS["epochs"] / statistics.median(seconds[batch])
            loss = statistics.median(losses[batch])
            print(f"SGNS dim 64, {batch} pair(s) a step, {threads} thread(s), {tokens.size:,} tokens, "
                  f"median of {repeats}: fastad {rate:,.0f} pairs/s loss {loss:.3f} | gensim "
                  f"{peer_rate:,.0f} pairs/s loss {peer_loss:.3f} | {rate / peer_rate:.2f}x")
            rows.append({"workload": f"Word2Vec skip-gram dim 64, {batch} pair(s) a step, {threads} "
                                     f"thread(s), vocabulary and sampling included, vs gensim (held-out "
                                     f"loss {loss:.3f} vs {peer_loss:.3f})",
                         "unit": "pair", "fastad": 1 / rate, "peer": 1 / peer_rate, "peer_name": "gensim",
                         "target": ">= 1.0x gensim, held-out loss no worse"})
    return rows


# ---------------------------------------------------------------- shared negatives (issue 55)

#: skip-gram with shared negatives beside the pair form and gensim: dim 100, window 5, 5
#: negatives, min_count 5, no subsampling, one epoch, lr 0.025 to 1e-4 (both libraries' defaults)
SHARED = dict(window=5, negative=5, min_count=5, sample=0, epochs=1)
SHARED_DIM = 100
NEIGHBOURS, QUERIES = 10, 500     # the overlap of the 10 nearest words of the 500 most frequent


def neighbours(vectors, queries=QUERIES, k=NEIGHBOURS):
    """The k nearest words (by cosine, the word itself left out) of each of the first `queries`
    rows (the most frequent words: both libraries order their vocabulary by count)."""
    unit = vectors / np.maximum(np.linalg.norm(vectors, axis=1, keepdims=True), 1e-12)
    cosines = unit[:queries] @ unit.T
    cosines[np.arange(queries), np.arange(queries)] = -np.inf
    return np.argpartition(-cosines, k, axis=1)[:, :k]


def neighbour_overlap(a, b):
    """The mean share of the k nearest words that two neighbour lists hold in common."""
    return float(np.mean([len(set(x) & set(y)) / x.size for x, y in zip(a, b)]))


def shared_fits(sentences, threads, seed):
    """{name: fit(words) -> (seconds of `train`, W, C in the vocabulary's order)}: gensim's
    skip-gram and fastad's in both forms, each building its vocabulary untimed."""
    from gensim.models import Word2Vec as GensimWord2Vec

    def gensim():
        model = GensimWord2Vec(vector_size=SHARED_DIM, sg=1, workers=threads, seed=seed, **SHARED)
        model.build_vocab(sentences)
        start = time.perf_counter()
        model.train(sentences, total_examples=model.corpus_count, epochs=model.epochs)
        return time.perf_counter() - start, model.wv.vectors, model.syn1neg, model.wv.index_to_key

    def fastad(shared):
        def fit():
            model = fa.models.Word2Vec(dim=SHARED_DIM, workers=threads, seed=seed, shared_negatives=shared,
                                       **SHARED).build_vocab(sentences)
            start = time.perf_counter()
            model.train(sentences, total_words=model.corpus_total_words, start_method="threads")
            return time.perf_counter() - start, model.vectors, model.output, model.words
        return fit

    return {"gensim": gensim, "pairs": fastad(False), "shared": fastad(True)}


def shared_negative_rows(quick):
    """Words/s of skip-gram's two forms beside gensim at 1 and 2 threads, on a Zipf corpus
    and on the standard library's text (whose held-out SGNS loss and neighbour overlap with
    gensim are measured too, over seeds: each fastad form against gensim of the same seed,
    and gensim against gensim of the next seed, the overlap two gensim runs reach)."""
    if gensim_missing("shared-negative skip-gram"):
        return []
    import memory
    text_train, text_held = split_text(stdlib_text(300_000 if quick else 1_000_000))
    corpora = {"a Zipf(1.1) corpus": memory.zipf_corpus(300_000 if quick else 1_000_000, 1)[0],
               "the standard library's text": text_train}
    seeds = (0, 1) if quick else (0, 1, 2)
    rows = []
    for corpus_name, sentences in corpora.items():
        vocabulary = fa.models.Word2Vec(min_count=SHARED["min_count"]).build_vocab(sentences)
        words = int(vocabulary.counts.sum()) * SHARED["epochs"]      # the tokens an epoch trains
        real = sentences is text_train
        if real:
            held_tokens, held_ends = encode(text_held, vocabulary.index)
        for threads in (1, 2):
            seconds, losses, overlaps, found = {}, {}, {}, {}
            for seed in seeds:          # the libraries alternated, each seed once
                for name, fit in shared_fits(sentences, threads, seed).items():
                    elapsed, W, C, order = fit()
                    seconds.setdefault(name, []).append(elapsed)
                    if real:
                        if name == "gensim":       # in fastad's order (gensim breaks ties otherwise)
                            at = {w: k for k, w in enumerate(order)}
                            index = np.array([at[w] for w in vocabulary.words])
                            W, C = W[index], C[index]
                        losses.setdefault(name, []).append(heldout_sgns_loss(W, C, held_tokens, held_ends))
                        found[name, seed] = neighbours(W)
            if real:
                for name in ("pairs", "shared"):
                    overlaps[name] = statistics.median(neighbour_overlap(found[name, s], found["gensim", s])
                                                       for s in seeds)
                overlaps["gensim"] = statistics.median(
                    neighbour_overlap(found["gensim", s], found["gensim", t]) for s, t in zip(seeds, seeds[1:]))
            peer = words / statistics.median(seconds["gensim"])
            for name in ("pairs", "shared"):
                rate = words / statistics.median(seconds[name])
                quality = ""
                if real:
                    quality = (f", held-out loss {statistics.median(losses[name]):.3f} vs "
                               f"{statistics.median(losses['gensim']):.3f}, top-{NEIGHBOURS} overlap with "
                               f"gensim {overlaps[name]:.3f} (gensim's with itself {overlaps['gensim']:.3f})")
                form = "shared negatives (one window a step)" if name == "shared" else "pair form (one pair a step)"
                print(f"skip-gram dim {SHARED_DIM}, {form}, {threads} thread(s), {corpus_name} ({words:,} words), "
                      f"medians of {len(seeds)} seeds: fastad {rate:,.0f} words/s | gensim {peer:,.0f} words/s | "
                      f"{rate / peer:.2f}x{quality}")
                rows.append({"workload": f"Word2Vec skip-gram dim {SHARED_DIM}, {form}, {threads} thread(s), "
                                         f"{corpus_name}, training alone, vs gensim{quality}",
                             "unit": "word", "fastad": 1 / rate, "peer": 1 / peer, "peer_name": "gensim",
                             "target": (">= 2.5x gensim, held-out loss within 0.02, overlap within 0.05"
                                        if name == "shared" else ">= 1.0x gensim, held-out loss no worse")})
    return rows


def skip_reason():
    if not_installed("implicit", "implicit") and not_installed("gensim", "gensim"):
        return "neither implicit nor gensim is installed (pip install implicit gensim)"
    return None


def run(quick=False):
    return bpr_rows(quick) + sgns_rows(quick) + shared_negative_rows(quick)


if __name__ == "__main__":
    cli(run, __doc__)

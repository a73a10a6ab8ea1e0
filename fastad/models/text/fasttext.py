"""`fa.models.FastText`: word vectors composed of subword vectors (fastText's, and gensim's
`FastText`): each word reads its own row and the rows of its character n-grams, hashed
into `bucket` shared rows, so that words outside the vocabulary get vectors too. The
corpus walk, windows, negatives, Hogwild workers and files are `Word2Vec`'s; the
centre (skip-gram) or context (CBOW) is a bag of input rows, scored by `fa.bag_dot`."""
import json
from dataclasses import dataclass

import numpy as np

from fastad._engine.graph import IndexInput, Input
from fastad.ops.gather_dot import bag_dot
from fastad.ops.losses import bce_with_logits
from fastad.ops.reduction import sum as fa_sum
from fastad.models.text._dictionary import subword_table
from fastad.models.text._windows import SubwordCbowSampler, SubwordSharedNegativeSampler, SubwordSkipGramSampler
from fastad.checks import check_int, either
from fastad.models.text.keyed_vectors import KeyedVectors, _terms
from fastad.models.text.word2vec import Word2Vec, _Corpus, _initial_rows, _negative_sampling_loss

__all__ = ["FastText", "FastTextKeyedVectors"]


class FastText(Word2Vec):
    """Subword word vectors by skip-gram (`sg=True`) or CBOW with negative sampling, as
    gensim's `FastText` (and fastText's `skipgram` / `cbow`).

    >>> model = fa.models.FastText(vector_size=100, window=5, min_count=5, min_n=3, max_n=6, epochs=5)
    >>> model.fit(sentences)                 # token lists (str), or a path to a text file
    >>> model.wv["unseen-word"]              # the mean of its character n-gram vectors
    >>> model.wv.most_similar("king", topn=5)

    The arguments are `Word2Vec`'s (gensim's names taken too: `vector_size`, `alpha`,
    `min_alpha`, `sentences=`, `corpus_file=`), and:

    min_n, max_n  the lengths of the character n-grams of "<word>" (gensim's names;
                  fastText's `minn`, `maxn` are taken too); max_n 0: no n-grams.
    bucket        the rows the n-grams are hashed into (fastText's FNV-1a hash, as
                  gensim's: `len(vocabulary) + hash % bucket`), >= 1.

    The input table `model.vectors` holds the vocabulary's rows (gensim's
    `vectors_vocab`), then the rows of the n-gram buckets the vocabulary's words use,
    `model.ngram_buckets` (increasing), and no other: nothing in a fit is proportional to
    `bucket` (the buckets of 2,000,000 that a vocabulary of 4,000 words uses are some
    29,000). The rows start as those of a table of every bucket would, uniform in
    [-1, 1) / dim in float32 from `seed` (`_initial_rows`: the same values as before the
    table was cut, so a seed trains the same vectors). A bucket no word uses never trains
    and holds its starting values: `model.vectors_ngrams` (gensim's (bucket, dim) array)
    is made on first use from the trained rows and those, and an unseen word's n-grams
    read them too, as gensim's unused buckets hold their random start. A word's training vector (its hidden)
    is the mean of its rows: its own and its n-grams' (fastText's rule; gensim's
    skip-gram divides that sum by the n-gram count alone). CBOW's hidden is the mean
    of all the rows of the window's words, as fastText and gensim's cbow_mean=1 take it.

    The update: every row of the bag takes the whole gradient of the hidden (`bag_dot`
    with hidden_gradient=True), as fastText and gensim update their subword rows, and
    not the exact gradient of the mean (1/n of it). With the exact gradient a word of
    n rows would move its hidden n times less than gensim, and n runs from 2 (a
    one-letter word) to 30 and more, so no single lr scale (as Word2Vec's CBOW takes)
    matches it; the default lr is gensim's 0.025 for both skip-gram and CBOW.

    `model.wv` holds each vocabulary word's vector (the mean of its rows, gensim's
    `adjust_vectors`), and `wv[word]` of a word outside the vocabulary is the mean of
    its n-gram rows (a KeyError naming it when it has none). Training runs on the CPU
    (`bag_dot` has no GPU path yet).

    `shared_negatives=True` (skip-gram): one step is a centre's whole window, in
    fastText's direction: the centre's bag scored against each word of its window and
    against k negatives drawn once for the window, whose terms count once for each of the
    window's n pairs (`fa.data.SubwordSharedNegativeSampler`): the n pairs' loss, with
    one hidden (the bag's mean) a window instead of one a pair.
    """

    def __init__(self, dim=100, window=5, negative=5, min_count=5, sample=1e-3, epochs=5, lr=None,
                 min_lr=1e-4, sg=True, workers=1, seed=0, min_n=3, max_n=6, bucket=2_000_000,
                 shared_negatives=False, *,
                 vector_size=None, alpha=None, min_alpha=None, minn=None, maxn=None, sentences=None,
                 corpus_file=None):
        who = "FastText"
        self.min_n = check_int(who, "min_n", either(who, "min_n", min_n, 3, "fastText's minn", minn),
                               minimum=1)
        self.max_n = check_int(who, "max_n", either(who, "max_n", max_n, 6, "fastText's maxn", maxn),
                               minimum=0)
        if self.max_n and self.min_n > self.max_n:
            raise ValueError(f"{who}: min_n must be <= max_n (the n-gram lengths), got min_n="
                             f"{self.min_n}, max_n={self.max_n}")
        self.bucket = check_int(who, "bucket", bucket, minimum=1)
        self.subword_ids = self.subword_offsets = self.ngram_buckets = None
        self._wv_at = None
        self._trained = 0
        super().__init__(dim, window, negative, min_count, sample, epochs, lr, min_lr, sg, workers, seed,
                         shared_negatives, vector_size=vector_size, alpha=alpha, min_alpha=min_alpha, sentences=sentences,
                         corpus_file=corpus_file)

    def _default_lr(self):
        return 0.025

    def _input_rows(self, n_words):
        return n_words + self.ngram_buckets.size

    def _new_tables(self, who, words, rng):
        """The subword table of `words` (a TypeError naming a token that is not a str, before
        any table is drawn), the input table (the vocabulary's rows, drawn first, then those
        of the buckets its words use, as `_initial_rows` draws them) and the output table."""
        for k, word in enumerate(words):
            if not isinstance(word, str):
                raise TypeError(f"{who}: the tokens must be str (their characters make the n-grams), "
                                f"got {type(word).__name__} {word!r} (word {k} of the vocabulary)")
        subwords = self._subwords(words)
        tables = super()._new_tables(who, words, rng)
        ngrams = _initial_rows(rng, len(words) + subwords["ngram_buckets"], self.dim, drawn=len(words))
        return dict(tables, vectors=np.concatenate([tables["vectors"], ngrams]), **subwords)

    def _subwords(self, words):
        """{subword_ids, subword_offsets, ngram_buckets} of a vocabulary: its words' rows of
        the input table (`subword_table`'s, each bucket b of `ngram_buckets` at row
        len(words) + its place there) and the buckets they use, increasing."""
        ids, offsets = subword_table(words, self.min_n, self.max_n, self.bucket)
        grams = ids >= len(words)
        buckets, place = np.unique(ids[grams] - len(words), return_inverse=True)
        ids[grams] = len(words) + place
        return {"subword_ids": ids, "subword_offsets": offsets, "ngram_buckets": buckets}

    def fit(self, sentences=None, callback=None, progress=None, start_method=None, device="cpu",
            batch_size=None, *, corpus_file=None):
        """`Word2Vec.fit` (the same arguments), on the CPU only."""
        _require_cpu("FastText.fit", device)
        return super().fit(sentences, callback, progress, start_method, device, batch_size,
                           corpus_file=corpus_file)

    def train(self, corpus_iterable=None, corpus_file=None, total_examples=None, total_words=None,
              epochs=None, start_alpha=None, end_alpha=None, *, callback=None, progress=None,
              start_method=None, device="cpu", batch_size=None):
        """`Word2Vec.train` (the same arguments), on the CPU only."""
        _require_cpu("FastText.train", device)
        super().train(corpus_iterable, corpus_file, total_examples, total_words, epochs, start_alpha,
                      end_alpha, callback=callback, progress=progress, start_method=start_method,
                      batch_size=batch_size)
        self._trained += 1
        return self

    def _corpus(self, settings, source, total_words):
        longest = int(np.diff(self.subword_offsets).max())
        return _SubwordCorpus(dict(settings, bag_capacity=longest * (1 if self.sg else 2 * self.window)),
                              source, self.index, self.counts, total_words, self.subword_ids,
                              self.subword_offsets)

    # ------------------------------------------------------------ vectors

    @property
    def vectors_vocab(self):
        """The vocabulary's own rows of the input table (a view), gensim's `wv.vectors_vocab`."""
        self._require_trained("vectors_vocab")
        return self.vectors[:len(self.words)]

    @property
    def vectors_ngrams(self):
        """gensim's `wv.vectors_ngrams`, (bucket, dim) float32: the trained rows of the used
        buckets, the starting values of the others (`wv.vectors_ngrams`: made on first use,
        again after each training; a copy: writing to it does not change the model)."""
        self._require_trained("vectors_ngrams")
        return self.wv.vectors_ngrams

    def word_vectors(self):
        """Each vocabulary word's vector: the mean of its own row and its n-gram rows (float32),
        gathered a few thousand words at a time (the gathered rows of the whole vocabulary
        would take some 25 times the result)."""
        self._require_trained("word_vectors")
        offsets, out = self.subword_offsets, np.empty((len(self.words), self.dim), dtype=np.float32)
        for lo in range(0, len(self.words), 4096):
            hi = min(lo + 4096, len(self.words))
            rows = self.vectors[self.subword_ids[offsets[lo]:offsets[hi]]]
            sums = np.add.reduceat(rows, offsets[lo:hi] - offsets[lo], axis=0, dtype=np.float64)
            out[lo:hi] = sums / np.diff(offsets[lo:hi + 1])[:, None]
        return out

    @property
    def wv(self):
        """A `FastTextKeyedVectors` of the word vectors (`word_vectors`, computed again after
        each training), which also answers words outside the vocabulary."""
        self._require_trained("wv")
        at = (self._trained, id(self.vectors), id(self.words))
        if self._wv is None or self._wv_at != at:
            self._wv = FastTextKeyedVectors(self.words, self.word_vectors(), self.vectors[len(self.words):],
                                            self.ngram_buckets, self.min_n, self.max_n, self.bucket,
                                            self.seed, self.index, vocabulary=f"min_count={self.min_count}")
            self._wv_at = at
        return self._wv

    # ------------------------------------------------------------ files

    def _restore(self, state):
        """`Word2Vec._restore`, with the subword table of the saved vocabulary. A file saved
        before the table kept only the used buckets holds a row for every bucket: its
        vocabulary's and used buckets' rows are kept (the others hold their starting
        values, which `vectors_ngrams` draws again from the seed)."""
        words = json.loads(state["words"])
        self.__dict__.update(self._subwords(words))
        vectors = np.asarray(state["vectors"])
        if vectors.shape[0] == len(words) + self.bucket:
            vectors = vectors[np.r_[:len(words), len(words) + self.ngram_buckets]]
        super()._restore(dict(state, vectors=vectors))


def _shared_graph(W, C, settings):
    """(leaves, loss) of one window with shared negatives (SubwordSharedNegativeSampler's
    leaves): the centre's bag against the window's 2 * window slots (label 1) and the k
    negatives (label 0), each term times its weight (0 for an empty slot, n for a negative)."""
    slots, k = 2 * settings["window"], settings["negative"]
    bag = IndexInput(np.zeros(settings["bag_capacity"], dtype=np.int64))
    cuts = IndexInput(np.array([0, 1], dtype=np.int64))
    scored = IndexInput(np.zeros((1, slots + k), dtype=np.int64))
    weights = Input(np.zeros((1, slots + k)), dtype=W.dtype)
    labels = np.zeros((1, slots + k), dtype=W.dtype)
    labels[0, :slots] = 1
    scores = bag_dot(W, bag, cuts, C, scored, hidden_gradient=True)
    return (bag, cuts, scored, weights), fa_sum(bce_with_logits(scores, labels, reduction="none") * weights)


def _require_cpu(who, device):
    if device != "cpu":
        raise ValueError(f"{who}: device={device!r}: FastText trains on the CPU only (fa.bag_dot, its "
                         f"subword scores, has no GPU path yet)")


class FastTextKeyedVectors(KeyedVectors):
    """`KeyedVectors` of a FastText model's vocabulary words, which also gives a vector
    for a word outside it: the mean of its character n-gram rows (gensim's rule), a
    KeyError naming it when it has no n-gram. Queries (`most_similar`, `similarity`)
    take such words too; the answers are words of the vocabulary. `word in wv` is True
    for any word that has a vector (as gensim's).

    ngram_vectors  the trained rows of the buckets `ngram_buckets` (increasing), in order
    seed           the model's seed: a bucket outside `ngram_buckets` holds its starting
                   value, row len(vocabulary) + bucket of `_initial_vectors` from it"""

    def __init__(self, index_to_key, vectors, ngram_vectors, ngram_buckets, min_n, max_n, bucket, seed,
                 key_to_index=None, vocabulary=""):
        super().__init__(index_to_key, vectors, key_to_index, owner="FastText", vocabulary=vocabulary)
        self.ngram_vectors, self.ngram_buckets = ngram_vectors, ngram_buckets
        self.min_n, self.max_n, self.bucket, self.seed = min_n, max_n, bucket, seed
        self._vectors_ngrams = None

    def ngram_rows(self, word):
        """The rows of vectors_ngrams (the buckets) that word's character n-grams hash to."""
        ids, _ = subword_table([word], self.min_n, self.max_n, self.bucket)
        return ids[1:] - 1

    def bucket_vectors(self, buckets):
        """The rows of vectors_ngrams of `buckets` (a new array): a used bucket's trained row
        (`ngram_vectors`, in the order of `ngram_buckets`), another's starting values (the
        rows len(vocabulary) + bucket of the model's start from `seed`, `_initial_rows`)."""
        buckets = np.asarray(buckets, dtype=np.int64)
        if buckets.ndim != 1 or (buckets.size and (buckets.min() < 0 or buckets.max() >= self.bucket)):
            raise ValueError(f"FastText.bucket_vectors: buckets must be a 1-D array of buckets in "
                             f"[0, {self.bucket}), got shape {buckets.shape}"
                             + (f" holding {buckets.min()}..{buckets.max()}" if buckets.size else ""))
        place = np.searchsorted(self.ngram_buckets, buckets)
        used = place < self.ngram_buckets.size
        used[used] = self.ngram_buckets[place[used]] == buckets[used]
        out = np.empty((buckets.size, self.vector_size), dtype=np.float32)
        out[used] = self.ngram_vectors[place[used]]
        unused = np.unique(buckets[~used])
        start = _initial_rows(np.random.default_rng(self.seed), len(self) + unused, self.vector_size)
        out[~used] = start[np.searchsorted(unused, buckets[~used])]
        return out

    @property
    def vectors_ngrams(self):
        """gensim's (bucket, dim) array of every bucket's row (`bucket_vectors`), made on
        first use."""
        if self._vectors_ngrams is None:
            self._vectors_ngrams = self.bucket_vectors(np.arange(self.bucket))
        return self._vectors_ngrams

    def __contains__(self, key):
        return key in self.key_to_index or (isinstance(key, str) and self.ngram_rows(key).size > 0)

    def get_vector(self, key, norm=False):
        """The vector of `key` (a copy): a vocabulary word's, or the mean of an unknown
        word's n-gram rows; of length 1 with `norm`."""
        if key in self.key_to_index or not isinstance(key, str):
            return super().get_vector(key, norm)
        rows = self.ngram_rows(key)
        if rows.size == 0:
            raise KeyError(f"FastText.get_vector: {key!r} is not in the vocabulary and has no character "
                           f"n-gram of lengths {self.min_n}..{self.max_n}")
        vector = self.bucket_vectors(rows).mean(axis=0)
        return vector / max(np.linalg.norm(vector), 1e-12) if norm else vector

    def most_similar(self, positive=None, negative=None, topn=10, exclude=()):
        """`KeyedVectors.most_similar`; a word outside the vocabulary stands for its vector."""
        def known(terms):
            return [t if not isinstance(t, str) or t in self.key_to_index else self.get_vector(t)
                    for t in _terms(terms)]
        return super().most_similar(known(positive), known(negative), topn, exclude)


@dataclass(frozen=True)
class _SubwordCorpus(_Corpus):
    """A `_Corpus` whose examples are subword bags: the vocabulary's rows (CSR) and the
    capacity of an example's bag (`settings["bag_capacity"]`)."""
    subword_ids: np.ndarray
    subword_offsets: np.ndarray

    def example_graph(self, W, C, device):
        """(leaves, loss): bag ids, bag offsets, then the context words (skip-gram) or the
        centres (CBOW) with their negatives, scored by `bag_dot` (every bag row taking the
        hidden's gradient), then the mask when a step holds more than one example."""
        b, k = self.settings["batch"], self.settings["negative"]
        if self.settings.get("shared_negatives"):
            return _shared_graph(W, C, self.settings)
        bag = IndexInput(np.zeros(b * self.settings["bag_capacity"], dtype=np.int64))
        cuts = IndexInput(np.arange(b + 1, dtype=np.int64))
        words = IndexInput(np.zeros((b, k + 1), dtype=np.int64))
        scores = bag_dot(W, bag, cuts, C, words, hidden_gradient=True)
        return _negative_sampling_loss((bag, cuts, words), scores, b, device)

    def sampler(self, tokens, leaves, **walk):
        kind = SubwordSkipGramSampler if self.settings["sg"] else SubwordCbowSampler
        if self.settings.get("shared_negatives"):
            kind = SubwordSharedNegativeSampler
        return kind(tokens, *leaves, subword_ids=self.subword_ids, subword_offsets=self.subword_offsets,
                    **walk)

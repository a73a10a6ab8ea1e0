"""`fa.models.Word2Vec`: skip-gram and CBOW with negative sampling, on fastad's
graph and compiled loop (`fa.data.SkipGramSampler` / `CbowSampler` inside
`fa.train`, Hogwild processes for `workers` > 1), or in batches on a GPU. The corpus is
streamed: a vocabulary pass counts the words, and each epoch encodes it block by block
(`fa.data.TokenStream`) as it trains, so memory depends on the vocabulary, not the corpus."""
import json
import math
import os
import warnings
from dataclasses import dataclass

import numpy as np

from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.ops.reduction import sum as fa_sum
from fastad.models.text._shared import window_loss
from fastad.models.text._windows import (CbowSampler, SharedNegativeSampler, SkipGramSampler, TokenStream,
                                         check_restartable, count_words)
from fastad.ops.linalg import vector_dot
from fastad.ops.losses import bce_with_logits
from fastad.ops.shape import reshape
from fastad.ops.gather_dot import gather_dot
from fastad.ops.sparse import take
from fastad.checks import check_callable, check_flag, check_int, check_number, check_sizes, either
from fastad.models.base import Model
from fastad.models.text.keyed_vectors import KeyedVectors
from fastad.models.runner import EpochRunner, RunSettings

__all__ = ["Word2Vec", "EncodedCorpus", "LineSentences"]

BLOCK_TOKENS = 10_000      # the tokens a Hogwild worker claims at a time in the corpus walk (gensim's job size)


def _initial_vectors(rng, n, dim):
    """The input vectors before training, uniform in [-1, 1) / dim: gensim 4's start
    (word2vec.c and gensim 3 drew from [-0.5, 0.5) / dim), drawn in float32 in place (no
    float64 transient). The output vectors start at zero, so the first updates of W are
    scaled by C and those of C by W: with the narrower start one epoch on the standard
    library's text (bench/peers.py, one pair a step, eight seeds) ended at a held-out loss
    of 2.6462 against gensim's 2.6436, with this one at 2.6430."""
    return _initial_rows(rng, np.arange(n), dim)


def _initial_rows(rng, rows, dim, drawn=0):
    """Rows `rows` (increasing, each >= `drawn`) of `_initial_vectors(rng, n, dim)` for any n
    above them, drawn without the rows between: `rng` (a `default_rng`'s PCG64, which has
    drawn the first `drawn` rows of that stream) jumps over each gap with
    `bit_generator.advance`. A float32 takes one 32-bit half of a 64-bit output, the
    second half kept for the next one: value p of the stream is half p % 2 of output
    p // 2, and `advance` drops a kept half. FastText draws its vocabulary's rows and
    the n-gram buckets they use this way: the values a table of every bucket would start
    with, at a cost in the used rows alone (some 3 us a run of consecutive rows)."""
    rows = np.asarray(rows, dtype=np.int64)
    out = np.empty((rows.size, dim), dtype=np.float32)
    at = drawn * dim                          # the stream's values drawn so far
    starts = np.flatnonzero(np.diff(rows, prepend=-2) != 1)         # each run of consecutive rows
    for lo, hi, row in zip(starts.tolist(), starts[1:].tolist() + [rows.size], rows[starts].tolist()):
        target = row * dim
        if target != at:
            rng.bit_generator.advance(target // 2 - (at + 1) // 2)
            if target % 2:
                rng.random(dtype=np.float32)      # the first half of output target // 2
        rng.random(out=out[lo:hi], dtype=np.float32)
        at = target + (hi - lo) * dim
    out *= 2.0
    out -= 1.0
    out /= dim
    return out


class LineSentences:
    """The sentences of a text file, one a line, tokens split on white space (blank
    lines skipped): a restartable corpus, each pass reading the file anew (gensim's
    `LineSentence`). `Word2Vec` reads a path given as its corpus through one."""

    def __init__(self, path):
        self.path = os.fspath(path)
        if not os.path.isfile(self.path):
            raise FileNotFoundError(f"LineSentences: no file {self.path!r}")

    def __iter__(self):
        with open(self.path, encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if words:
                    yield words

    def __repr__(self):
        return f"LineSentences({self.path!r})"


class EncodedCorpus:
    """A corpus already encoded as word ids, which `Word2Vec` trains on without reading text.

    ids            a 1-D integer array of word ids in [0, len(words)): an int32 array (a
                   memory map from `np.load(path, mmap_mode="r")` included) is read in
                   place, never copied, so a corpus larger than memory trains
    words          the word of each id (`words[i]` is id i): the model's vocabulary, in
                   this order (min_count does not apply: the ids are the vocabulary)
    sentence_ends  the end offset of each sentence in `ids` (non-decreasing, the last
                   len(ids)); default: one sentence

    Workers in threads or forked processes read the same ids; processes started with
    "spawn" each receive a copy (arguments are pickled to them).

    >>> ids = np.load("corpus.ids.npy", mmap_mode="r")          # int32, written by your tokenizer
    >>> fa.models.Word2Vec(dim=100).fit(fa.models.EncodedCorpus(ids, words, ends))
    """

    def __init__(self, ids, words, sentence_ends=None):
        who = "EncodedCorpus"
        ids = np.asarray(ids)
        if ids.ndim != 1 or ids.dtype.kind not in "iu" or ids.size == 0:
            raise ValueError(f"{who}: ids must be a non-empty 1-D integer array, got shape {ids.shape} "
                             f"and dtype {ids.dtype}")
        words = list(words)
        if len(words) < 2 or len(set(words)) != len(words):
            raise ValueError(f"{who}: words must name at least 2 ids, each once, got {len(words)} "
                             f"words ({len(set(words))} distinct)")
        if sentence_ends is None:
            ends = np.array([ids.size], dtype=np.int64)
        else:
            ends = np.asarray(sentence_ends)
            if ends.ndim != 1 or ends.dtype.kind not in "iu" or ends.size == 0 \
                    or ends[-1] != ids.size or np.any(np.diff(ends) < 0) or ends[0] < 0:
                raise ValueError(f"{who}: sentence_ends must be non-decreasing offsets ending at "
                                 f"len(ids) = {ids.size}")
        self.ids, self.words, self.sentence_ends = ids, words, ends

    def counts(self):
        """Each id's count, read in chunks (bincount widens each to int64: a bounded
        transient, never a copy of the whole array)."""
        counts = np.zeros(len(self.words), dtype=np.int64)
        step = max(1 << 16, 4 * len(self.words))
        for lo in range(0, self.ids.size, step):
            chunk = self.ids[lo:lo + step]
            if chunk.min() < 0 or chunk.max() >= len(self.words):
                bad = int(chunk.max()) if chunk.max() >= len(self.words) else int(chunk.min())
                raise ValueError(f"EncodedCorpus: ids holds {bad}, outside [0, {len(self.words)}) "
                                 f"(one id per word of words)")
            counts += np.bincount(chunk, minlength=len(self.words))
        return counts


def _corpus(who, sentences, corpus_file):
    """The restartable corpus of a call given `sentences` (token lists, a path, or an
    EncodedCorpus) or gensim's `corpus_file` (a path), one of them."""
    if (sentences is None) == (corpus_file is None):
        raise TypeError(f"{who}: give the corpus as sentences (token lists, or a text file's "
                        f"path) or as corpus_file (a path), one of them")
    source = sentences if corpus_file is None else corpus_file
    if corpus_file is not None or isinstance(source, (str, os.PathLike)):
        return LineSentences(source)
    if isinstance(source, EncodedCorpus):
        return source
    return check_restartable(who, source)


class Word2Vec(Model):
    """Word vectors by skip-gram (`sg=True`) or CBOW with negative sampling.

    >>> model = fa.models.Word2Vec(dim=64, window=5, negative=5, min_count=5, epochs=5, workers=2)
    >>> model.fit(sentences)                 # token lists, or a path to a text file
    >>> model.most_similar("king", topn=5)           # or model.wv.most_similar, as in gensim
    >>> model.analogy("man", "king", "woman")        # man : king :: woman : ?

    gensim's argument names are taken too: `vector_size` (dim), `alpha` (lr),
    `min_alpha` (min_lr), and `sg` as 0 or 1; `model.wv` is a `KeyedVectors`
    with gensim's queries and word2vec's file formats.

    Training follows word2vec: a reduced window per centre, `negative` noise
    words from the unigram distribution ** 0.75, frequent words subsampled with
    `sample`, the lr falling linearly from `lr` to `min_lr` over all epochs
    (`lr` defaults to 0.025 for skip-gram, and 0.025 * (window + 1) for CBOW,
    whose update here is the exact gradient of the context words' mean). The
    input vectors start uniform in [-1, 1) / dim, as gensim 4's, the output
    vectors at zero.
    `shared_negatives=True` (skip-gram only) trains skip-gram with shared negatives, as
    pWord2Vec (Ji et al. 2016): one step is a centre's whole window, its context words
    scored against the centre and k negatives drawn once for it, as one small block of
    n x (1 + k) scores (`fa.data.SharedNegativeSampler` and its loss node): the same
    objective, n + 1 + k rows touched a centre where the pair form touches n (2 + k).
    It trains on the CPU, one window a step (batch_size 1). The centre's output row is
    stepped as the pair form steps it, after each context word in turn, each context word
    stepping against it as the words before left it (the scores are the block's, as the
    window found them): taken together from the row as the window found it, as pWord2Vec
    takes them, the neighbours drifted from gensim's (a top-10 overlap 0.06 below gensim's
    own on the standard library's text, against 0.03 so; docs/guide/models.md).
    `negative_groups` (default 1; shared negatives only) splits each window's context words
    in order into that many groups (its left and right halves at 2), each scored against
    the centre and k negatives of its own in the same step: the same n (1 + k) scores, k
    more output rows a group; at 2 the overlap gap halves again, at about a fifth more
    time a word.
    With `workers` > 1 the vectors train lock-free in Hogwild processes (or
    threads), which take the corpus in blocks of about 10,000 tokens in order from
    one shared counter, as gensim's threads take its jobs from one queue, the lr
    following the position in the corpus; with one worker the run is deterministic
    (the same seed gives the same vectors). `save` and `load` keep the settings, the
    vocabulary and both tables (`fastad.models.base`).
    """

    def __init__(self, dim=100, window=5, negative=5, min_count=5, sample=1e-3, epochs=5, lr=None,
                 min_lr=1e-4, sg=True, workers=1, seed=0, shared_negatives=False,
                 negative_groups=1, *, vector_size=None, alpha=None, min_alpha=None,
                 sentences=None, corpus_file=None):
        who = "Word2Vec"
        dim = either(who, "dim", dim, 100, "gensim's vector_size", vector_size)
        lr = either(who, "lr", lr, None, "gensim's alpha", alpha)
        min_lr = either(who, "min_lr", min_lr, 1e-4, "gensim's min_alpha", min_alpha)
        self.dim, self.window, self.negative, self.min_count, self.epochs, self.workers = check_sizes(
            who, dim=dim, window=window, negative=negative, min_count=min_count, epochs=epochs,
            workers=workers)
        self.sg = check_flag(who, "sg", sg)
        self.lr = check_number(who, "lr", self._default_lr() if lr is None else lr, above=0)
        self.min_lr = check_number(who, "min_lr", min_lr, at_least=0, at_most=self.lr)
        self.sample = check_number(who, "sample", sample, at_least=0)
        self.seed = check_int(who, "seed", seed, minimum=0)
        self.shared_negatives = check_flag(who, "shared_negatives", shared_negatives)
        self.negative_groups = check_int(who, "negative_groups (the groups of a window's context "
                                         "words, each with its own negatives)", negative_groups, minimum=1)
        self._check_shared(who, "cpu", None)
        self.words, self.index, self.counts = [], {}, np.zeros(0, dtype=np.int64)
        self.vectors = self.output = None
        self.corpus_count = self.corpus_total_words = 0
        self.history = []
        self._wv = None
        if sentences is not None or corpus_file is not None:     # gensim trains on construction
            self.fit(sentences, corpus_file=corpus_file)

    def _default_lr(self):
        # CBOW here takes the exact gradient of the context mean, so each context word gets
        # 1/n of word2vec's update (whose CBOW skips the mean's 1/n): scale lr to match.
        return 0.025 if self.sg else 0.025 * (self.window + 1)

    # ------------------------------------------------------------ vocabulary

    def build_vocab(self, corpus_iterable=None, corpus_file=None):
        """Count the words of the corpus in one pass (nothing kept per token), keep those
        seen at least `min_count` times (ids by falling count, ties in the order first
        seen), and draw the starting vectors; returns self. `train` then trains them.

        corpus_iterable  token lists: a list, or a restartable iterable (an object whose
                   __iter__ starts a new pass, as gensim's corpus readers), or a path to
                   a text file (one sentence a line), or an `EncodedCorpus` (word ids,
                   read in place: its words are the vocabulary, in their order)
        corpus_file  a path to such a file (gensim's name)

        Sets `corpus_count` (sentences) and `corpus_total_words` (tokens), as gensim does.
        """
        who = f"{type(self).__name__}.build_vocab"
        source = _corpus(who, corpus_iterable, corpus_file)
        if isinstance(source, EncodedCorpus):        # its words are the vocabulary, as they are
            words, counts = source.words, source.counts()
            n_tokens, n_sentences = source.ids.size, source.sentence_ends.size
            kept = np.arange(len(words))
        else:
            words, counts, n_tokens, n_sentences = count_words(source, who)
            kept = np.flatnonzero(counts >= self.min_count)
        if not n_tokens:
            raise ValueError(f"{who}: the corpus is empty (no sentence holds a token)")
        if kept.size < 2:
            raise ValueError(f"{who}: min_count={self.min_count} leaves {kept.size} word(s) of "
                             f"{len(words)}; at least 2 are needed (lower min_count)")
        order = kept if isinstance(source, EncodedCorpus) else kept[np.argsort(-counts[kept], kind="stable")]
        words = [words[k] for k in order]
        tables = self._new_tables(who, words, np.random.default_rng(self.seed))
        self.words, self.index, self.counts = words, {w: i for i, w in enumerate(words)}, counts[order]
        self.corpus_count, self.corpus_total_words = n_sentences, n_tokens
        self.__dict__.update(tables)
        self.history = []
        return self

    def _new_tables(self, who, words, rng):
        """{attribute: array} of the tables a vocabulary of `words` starts training with."""
        return {"vectors": _initial_vectors(rng, len(words), self.dim),
                "output": np.zeros((len(words), self.dim), dtype=np.float32)}

    # ------------------------------------------------------------ training

    def fit(self, sentences=None, callback=None, progress=None, start_method=None, device="cpu",
            batch_size=None, *, corpus_file=None):
        """Build the vocabulary from the corpus and train for `epochs`; returns self.

        sentences  token lists (a list, or a restartable iterable: an object whose
                   __iter__ starts a new pass; the corpus is read 1 + epochs times and
                   never held), or a path to a text file (one sentence a line, tokens
                   split on white space); or give the path as `corpus_file`.
        callback   callback(epoch, loss) after each epoch, epochs counted from 1, as
                   every fit and `fa.train` call it; loss is the epoch's mean loss per
                   example (accumulated in float64 by each worker, weighted by their
                   examples). Without a callback, Hogwild processes start once a fit.
        progress   progress(done, per_second), as `fa.progress_bar(total)`: the
                   examples (skip-gram pairs, CBOW centres, or with shared negatives
                   the windows) done so far, counting on across epochs, and the rate.
        start_method  how `workers` > 1 run (`fa.hogwild.run`): "threads" (threads of
                   this process, the compiled loop releasing the GIL), "fork" (the
                   default on Linux) or "spawn" (the default elsewhere). Each worker
                   reads the corpus itself and trains the blocks of about 10,000 tokens
                   it claims, passing over the others.
        device     "cpu" (the default), or "cuda" / "cuda:N": train on that GPU (with
                   `workers=1`); the host draws each batch with the same compiled
                   sampler as the CPU fit (the same stream: the same seed and
                   batch_size give the same examples), the lr falls per batch as
                   on the CPU, and the vectors come back as numpy arrays.
        batch_size the examples (skip-gram pairs or CBOW centres) of one step: their
                   losses summed, their gradients applied together (a word that
                   recurs in a batch gets the sum of its gradients in one step).
                   Default: 1 on the CPU (per-example SGD, as word2vec), 1024 on a
                   GPU. On the CPU a batch of 16 shares each replay's fixed cost
                   among 16 examples (docs/benchmarks.md gives speed and
                   held-out loss at both sizes).

        A failure leaves the model as it was before `fit` (nothing half-trained is kept).
        """
        who = f"{type(self).__name__}.fit"
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        source = _corpus(who, sentences, corpus_file)
        RunSettings.for_fit(who, self.workers, start_method, device, batch_size)    # bad settings: before any pass
        self._check_shared(who, device, batch_size)
        before = dict(self.__dict__)
        try:
            self.build_vocab(source)
            self.train(source, total_words=self.corpus_total_words, callback=callback, progress=progress,
                       start_method=start_method, device=device, batch_size=batch_size)
        except BaseException:
            self.__dict__.update(before)
            raise
        return self

    def train(self, corpus_iterable=None, corpus_file=None, total_examples=None, total_words=None,
              epochs=None, start_alpha=None, end_alpha=None, *, callback=None, progress=None,
              start_method=None, device="cpu", batch_size=None):
        """Train the vectors of the built vocabulary (`build_vocab`, `fit` or `load`) on a
        corpus, in place, for `epochs` (default: the model's); returns self. Words outside
        the vocabulary are skipped; the vocabulary does not change.

        The lr falls linearly from `start_alpha` to `end_alpha` (default: the model's lr and
        min_lr) over this call's epochs, following the position in the corpus counted in
        tokens: `total_words` (the tokens of one pass; `fit` gives the vocabulary pass's
        count), else counted by a pass before training. `total_examples` (sentences) is
        accepted for gensim's calls (`train(sentences, total_examples=model.corpus_count,
        epochs=model.epochs)`) but not used: the progress counts tokens. The other
        arguments are `fit`'s. A failure part way leaves the vectors part-trained (as
        gensim's); `fit` keeps the model as it was.
        """
        who = f"{type(self).__name__}.train"
        if self.vectors is None:
            raise RuntimeError(f"{who}: the model has no vocabulary; call build_vocab() (or fit) first")
        source = _corpus(who, corpus_iterable, corpus_file)
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        epochs = self.epochs if epochs is None else check_int(who, "epochs", epochs, minimum=1)
        lr = self.lr if start_alpha is None else check_number(who, "start_alpha", start_alpha, above=0)
        min_lr = self.min_lr if end_alpha is None else check_number(who, "end_alpha", end_alpha,
                                                                    at_least=0, at_most=lr)
        if total_examples is not None:
            check_int(who, "total_examples", total_examples, minimum=0)
        if total_words is None:
            total_words = source.ids.size if isinstance(source, EncodedCorpus) else count_words(source, who)[2]
        total_words = check_int(who, "total_words", total_words, minimum=0)
        settings = RunSettings.for_fit(who, self.workers, start_method, device, batch_size, lr=lr,
                                       min_lr=min_lr, epochs=epochs)
        self._check_shared(who, device, batch_size)
        corpus = self._corpus(dict(self.settings(), batch=settings.batch), source, total_words)
        weights = {"W": self.vectors, "C": self.output}
        if self.workers > 1:      # each epoch's claim counter: an int64 in a float64's place
            weights["claim"] = np.zeros(epochs, dtype=np.float64)
        with EpochRunner(corpus, weights, settings, progress) as runner:
            history = runner.train(range(epochs), callback)
        if all(math.isnan(loss) for loss in history):
            warnings.warn(f"{who}: nothing was trained: no sentence of the corpus kept two words of the "
                          f"vocabulary (after the subsampling of frequent words, sample={self.sample})",
                          RuntimeWarning, stacklevel=2)
        self.history = history
        return self

    def _check_shared(self, who, device, batch_size):
        """A ValueError when `shared_negatives` meets what it does not train: CBOW (whose
        centre already shares its negatives among its window), a GPU, or several windows a
        step. Checked on construction and by every fit and train (the attribute may be set
        between them: a loaded model trains on with either form)."""
        if not self.shared_negatives:
            return
        if not self.sg:
            raise ValueError(f"{who}: shared_negatives=True is a form of skip-gram (sg=True); CBOW "
                             f"already scores each centre's window against one draw of negatives")
        if device != "cpu":
            raise ValueError(f"{who}: shared_negatives=True trains on the CPU only, got device={device!r}")
        if batch_size not in (None, 1):
            raise ValueError(f"{who}: shared_negatives=True trains one window a step (its pairs share "
                             f"one update); batch_size must be 1 or None, got {batch_size!r}")

    def _corpus(self, settings, source, total_words):
        """The picklable description of a run that each worker builds its graph from."""
        return _Corpus(settings, source, self.index, self.counts, total_words)

    # ------------------------------------------------------------ queries

    def _is_trained(self):
        return self.vectors is not None

    def __contains__(self, word):
        return word in self.index

    def __len__(self):
        return len(self.words)

    @property
    def wv(self):
        """The input vectors as a `KeyedVectors` (gensim's `model.wv`), over this model's
        arrays (no copy)."""
        self._require_trained("wv")
        wv = self._wv
        if (wv is None or wv.vectors is not self.vectors or wv.index_to_key is not self.words
                or wv.key_to_index is not self.index):
            wv = self._wv = KeyedVectors(self.words, self.vectors, self.index, owner="Word2Vec",
                                         vocabulary=f"min_count={self.min_count}")
        return wv

    def vector(self, word):
        """The vector of `word` (a copy)."""
        return self.wv.get_vector(word)

    def most_similar(self, positive, negative=(), topn=10, exclude=()):
        """The `topn` words nearest by cosine to the mean of `positive` minus `negative`
        (`KeyedVectors.most_similar`): [(word, cosine), ...], most similar first."""
        return self.wv.most_similar(positive, negative, topn, exclude)

    def similarity(self, a, b):
        """The cosine of the vectors of words a and b."""
        return self.wv.similarity(a, b)

    def analogy(self, a, b, c, topn=1):
        """a is to b as c is to ?: the words nearest b - a + c (3CosAdd), as [(word, cosine)]."""
        return self.most_similar(positive=[b, c], negative=[a], topn=topn)

    def evaluate_analogies(self, path):
        """Accuracy on a `questions-words.txt`-style file: ": section" lines, then
        lines of four words "a b c d" (a : b :: c : d). Questions with a word
        outside the vocabulary are skipped and counted.

        Returns {"accuracy": float, "correct": int, "total": int, "skipped": int,
        "sections": {name: (correct, total)}}.
        """
        self._require_trained("evaluate_analogies")
        sections, section = {}, ""      # the questions before any ": section" line: section ""
        skipped = 0
        with open(path, encoding="utf-8") as f:
            for number, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                if line.startswith(":"):
                    section = line[1:].strip()
                    sections.setdefault(section, [0, 0])
                    continue
                words = line.split()
                if len(words) != 4:
                    raise ValueError(f"Word2Vec.evaluate_analogies: {path} line {number} holds "
                                     f"{len(words)} words, expected 4")
                sections.setdefault(section, [0, 0])
                if not all(w in self.index for w in words):
                    skipped += 1
                    continue
                a, b, c, d = words
                sections[section][0] += self.analogy(a, b, c, topn=1)[0][0] == d
                sections[section][1] += 1
        correct = sum(right for right, _ in sections.values())      # the sections' counts summed
        total = sum(asked for _, asked in sections.values())
        return {"accuracy": correct / total if total else math.nan, "correct": correct, "total": total,
                "skipped": skipped, "sections": {k: tuple(v) for k, v in sections.items()}}

    # ------------------------------------------------------------ files

    def _state(self):
        """The vocabulary (as JSON text), its counts, both tables and the corpus's sizes."""
        return {"words": json.dumps(self.words), "counts": self.counts, "vectors": self.vectors,
                "output": self.output,
                "corpus": {"count": self.corpus_count, "total_words": self.corpus_total_words}}

    def _restore(self, state):
        """The saved vocabulary and tables, checked to fit the settings."""
        words = json.loads(state["words"])
        vectors, output = np.asarray(state["vectors"]), np.asarray(state["output"])
        if vectors.shape != (self._input_rows(len(words)), self.dim) or output.shape != (len(words), self.dim):
            raise ValueError(f"it holds {len(words)} words but vectors of shape {vectors.shape} and output "
                             f"vectors of shape {output.shape}")
        self.words, self.index = words, {w: i for i, w in enumerate(words)}
        self.counts, self.vectors, self.output = np.asarray(state["counts"]), vectors, output
        self.corpus_count = int(state["corpus"]["count"])
        self.corpus_total_words = int(state["corpus"]["total_words"])

    def _input_rows(self, n_words):
        """The rows of the input table over a vocabulary of n_words."""
        return n_words

    def save_word2vec_format(self, path, binary=False):
        """`wv.save_word2vec_format`: word2vec's text (or `binary`) format, which gensim's
        KeyedVectors.load_word2vec_format reads; written atomically."""
        self.wv.save_word2vec_format(path, binary)


@dataclass(frozen=True)
class _Corpus:
    """What a worker of `Word2Vec.train` builds its graph and draws its examples from
    (picklable: `EpochRunner` sends it to Hogwild processes): the settings of its graph
    (`_example_graph`) and sampler, the restartable corpus each epoch streams, the
    vocabulary ({word: id}) that encodes it, the words' counts and the tokens of a pass: a
    `runner.ModelDescription`."""
    settings: dict
    sentences: object
    vocabulary: dict
    counts: np.ndarray
    total_tokens: int

    def worker_graph(self, weights, settings: RunSettings, rank: int) -> "_WindowGraph":
        return _WindowGraph(self, weights, settings.device, rank)

    def example_graph(self, W, C, device):
        """(leaves, loss) of one step over W and C (`_example_graph`)."""
        return _example_graph(W, C, self.settings, device)

    def sampler(self, tokens, leaves, **walk):
        """The compiled window sampler over `leaves` (the example graph's, the mask left out)."""
        if self.settings.get("shared_negatives"):
            return SharedNegativeSampler(tokens, *leaves, **walk)
        return (SkipGramSampler if self.settings["sg"] else CbowSampler)(tokens, *leaves, **walk)


class _WindowGraph:
    """The graph of one step of the window examples over W and C (`_example_graph`), and
    the epochs of rank's walk of the corpus: the whole corpus in order for one worker,
    else the blocks it claims from the epoch's shared counter (`weights["claim"]`); a
    `runner.DeviceWorkerGraph`.

    Claimed blocks keep the workers side by side in the corpus whatever their speeds,
    as gensim's threads take its jobs from one queue, and the lr follows the position
    in the corpus. Fixed shards (every other block to each of two workers, each worker
    following its own share) let a worker that a busy machine slows fall behind, and the
    run then ends on whichever worker lags: one epoch on the standard library's text
    (bench/peers.py's settings, two threads) ended at a held-out loss of
    2.6448 +- 0.0017 over twelve seeds (2.6457 when the worker without the corpus's
    last block finished last, 2.6436 otherwise), 2.6420 +- 0.0011 with claimed blocks
    (sixteen seeds; one worker: 2.6430, gensim with two: 2.6429 +- 0.0016)."""

    def __init__(self, corpus, weights, device, rank):
        W, C = Parameter(weights["W"], device=device), Parameter(weights["C"], device=device)
        self.parameters = {"W": W, "C": C}
        self.leaves, self.loss = corpus.example_graph(W, C, device)
        self.claims = weights["claim"].numpy().view(np.int64) if "claim" in weights else None
        self.corpus, self.rank = corpus, rank

    def _sampler(self, leaves, epoch):
        """The compiled window sampler over `leaves` (the graph's, or host ones like them) for
        this rank's epoch, over a stream of the corpus: the whole of it in order, or the
        blocks this rank claims."""
        corpus, settings = self.corpus, self.corpus.settings
        claim = None if self.claims is None else self.claims[epoch:epoch + 1]
        common = dict(window=settings["window"], sample=settings["sample"], counts=corpus.counts,
                      seed=[settings["seed"], epoch], rank=self.rank, workers=settings["workers"],
                      mask=leaves[-1] if settings["batch"] > 1 else None)
        if isinstance(corpus.sentences, EncodedCorpus):     # the ids in place, in claimed blocks
            tokens = corpus.sentences.ids
            common.update(sentence_ends=corpus.sentences.sentence_ends, claim=claim,
                          block_tokens=BLOCK_TOKENS)
        else:
            tokens = TokenStream(corpus.sentences, corpus.vocabulary, corpus.total_tokens, claim=claim,
                                 block_tokens=BLOCK_TOKENS)
        core = leaves[:-1] if settings["batch"] > 1 else leaves
        return corpus.sampler(tokens, core, **common)

    def epoch_data(self, epoch):
        return self._sampler(self.leaves, epoch)

    def epoch_loss(self, mean, sampler):
        # the skip-gram pairs (a shared-negative sampler's: its windows' pairs) or CBOW centres drawn
        items = (sampler.epoch_pairs if isinstance(sampler, (SkipGramSampler, SharedNegativeSampler))
                 else sampler.epoch_centres)
        return (mean * sampler.epoch_examples / items if items else math.nan), items

    def device_sampler(self, epoch):
        """The sampler over host leaves like the graph's: the CPU fit's stream."""
        host_leaves = tuple(IndexInput(np.zeros(leaf.shape, dtype=np.int64)) if isinstance(leaf, IndexInput)
                            else Input(np.zeros(leaf.shape, dtype=np.float32)) for leaf in self.leaves)
        return self._sampler(host_leaves, epoch)

    def device_feeds(self, drawn):
        return dict(zip(self.leaves, drawn))


def _example_graph(W, C, settings, device="cpu"):
    """(leaves, loss) of one step of `settings["batch"]` examples: the leaves in the
    order the window sampler takes them (skip-gram: centre ids, context ids; CBOW, and
    skip-gram with shared negatives: context ids, their weights, target ids; then the
    mask when the batch holds more than one example) and the summed negative-sampling
    loss (with shared negatives, one window's: `window_loss`), each example's
    -log sigmoid(±score) for its word and `negative` noise words, times its mask: the
    binary cross-entropy of sigmoid(score) against 1 for the word and 0 for the noise
    words, one node in place of a sign product, a log-sigmoid, a sum and a negation."""
    b, k, dim = settings["batch"], settings["negative"], W.shape[1]

    def ids(*shape):
        return IndexInput(np.zeros(shape, dtype=np.int64), device=device)

    if settings.get("shared_negatives"):        # one window a step (checked by Word2Vec._check_shared)
        groups = settings.get("negative_groups", 1)        # the groups of context words, k negatives each
        context, target = ids(2 * settings["window"]), ids(1 + groups * k)
        weights = Input(np.zeros(2 * settings["window"]), dtype=W.dtype, device=device)
        # the centre's row stepped after each context word, as the pair form steps it (Word2Vec's docstring)
        loss = window_loss(W, context, weights, C, target, groups, sequential_centre=True)
        return (context, weights, target), loss
    target = ids(b, k + 1)
    if settings["sg"]:
        centre = ids(b)
        leaves = (centre, target)
        scores = gather_dot(W, centre, C, target)
    else:
        slots = 2 * settings["window"]
        context = ids(b * slots)
        weights = Input(np.zeros((b, slots, 1), dtype=np.float32), device=device)
        leaves = (context, weights, target)
        hidden = fa_sum(reshape(take(W, context), (b, slots, dim)) * weights, axis=1, keepdims=True)
        scores = vector_dot(reshape(take(C, target), (b, k + 1, dim)), hidden)
    return _negative_sampling_loss(leaves, scores, b, device)


def _negative_sampling_loss(leaves, scores, b, device):
    """(leaves, loss) of the example graph whose `scores` (b, 1 + k) hold each example's word,
    then its k noise words: the summed loss, with the mask leaf after `leaves` when b > 1."""
    labels = np.zeros(scores.shape, dtype=scores.dtype)
    labels[:, 0] = 1
    if b == 1:
        return leaves, bce_with_logits(scores, labels, reduction="sum")
    mask = Input(np.ones((b, 1), dtype=np.float32), device=device)
    return leaves + (mask,), fa_sum(bce_with_logits(scores, labels, reduction="none") * mask)

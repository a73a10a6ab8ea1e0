"""`fa.models.Word2Vec`: skip-gram and CBOW with negative sampling, on fastad's
graph and compiled loop (`fa.data.SkipGramSampler` / `CbowSampler` inside
`fa.train`, Hogwild processes for `workers` > 1), or in batches on a GPU."""
import json
import math
import os
import time
from dataclasses import dataclass

import numpy as np

from fastad_cy.graph import IndexInput, Input, Parameter
from fastad_cy.reduction import sum as fa_sum
from fastad_cy.windows import CbowSampler, SkipGramSampler
from fastad_cy.linalg import vector_dot
from fastad_cy.losses import bce_with_logits
from fastad_cy.shape import reshape
from fastad_cy.model_losses import gather_dot
from fastad_cy.sparse import take
from fastad.checks import check_callable, check_flag, check_int, check_number, check_sizes, either, look_up
from fastad.io import load, save
from fastad.models.keyed_vectors import KeyedVectors
from fastad.models.runner import EpochRunner, RunSettings

__all__ = ["Word2Vec"]

BLOCK_TOKENS = 10_000      # the tokens a Hogwild worker claims at a time in the corpus walk (gensim's job size)
#: The constructor's arguments that `Word2Vec.save` writes and `load` passes back, with their types.
_SAVED_SETTINGS = {"dim": int, "window": int, "negative": int, "min_count": int, "sample": float,
                   "epochs": int, "lr": float, "min_lr": float, "sg": bool, "workers": int}


def _initial_vectors(rng, n, dim):
    """The input vectors before training, uniform in [-1, 1) / dim: gensim 4's start
    (word2vec.c and gensim 3 drew from [-0.5, 0.5) / dim). The output vectors start at
    zero, so the first updates of W are scaled by C and those of C by W: with the
    narrower start one epoch on the standard library's text (bench/peers.py, one pair
    a step, eight seeds) ended at a held-out loss of 2.6462 against gensim's 2.6436,
    with this one at 2.6430."""
    return ((rng.random((n, dim)) * 2.0 - 1.0) / dim).astype(np.float32)


def _sentences_of(source):
    """Token lists from an iterable of token lists, or from a text file (a sentence a line)."""
    if isinstance(source, (str, os.PathLike)):
        with open(source, encoding="utf-8") as f:
            for line in f:
                words = line.split()
                if words:
                    yield words
        return
    for k, sentence in enumerate(source):
        if isinstance(sentence, str):
            raise TypeError(f"Word2Vec.fit: sentence {k} is a string; give lists of tokens "
                            f"(or a path to a text file, one sentence a line)")
        yield list(sentence)


class Word2Vec:
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
    With `workers` > 1 the vectors train lock-free in Hogwild processes (or
    threads), which take the corpus in blocks of about 10,000 tokens in order from
    one shared counter, as gensim's threads take its jobs from one queue, the lr
    following the position in the corpus; with one worker the run is deterministic
    (the same seed gives the same vectors).
    """

    def __init__(self, dim=100, window=5, negative=5, min_count=5, sample=1e-3, epochs=5, lr=None,
                 min_lr=1e-4, sg=True, workers=1, seed=0, *, vector_size=None, alpha=None,
                 min_alpha=None):
        who = "Word2Vec"
        dim = either(who, "dim", dim, 100, "gensim's vector_size", vector_size)
        lr = either(who, "lr", lr, None, "gensim's alpha", alpha)
        min_lr = either(who, "min_lr", min_lr, 1e-4, "gensim's min_alpha", min_alpha)
        self.dim, self.window, self.negative, self.min_count, self.epochs, self.workers = check_sizes(
            who, dim=dim, window=window, negative=negative, min_count=min_count, epochs=epochs,
            workers=workers)
        self.sg = check_flag(who, "sg", sg)
        if lr is None:
            # CBOW here takes the exact gradient of the context mean, so each context word gets
            # 1/n of word2vec's update (whose CBOW skips the mean's 1/n): scale lr to match.
            lr = 0.025 if self.sg else 0.025 * (self.window + 1)
        self.lr = check_number(who, "lr", lr, above=0)
        self.min_lr = check_number(who, "min_lr", min_lr, at_least=0, at_most=self.lr)
        self.sample = check_number(who, "sample", sample, at_least=0)
        self.seed = check_int(who, "seed", seed, minimum=0)
        self.words, self.index, self.counts = [], {}, np.zeros(0, dtype=np.int64)
        self.vectors = self.output = None
        self.history = []
        self._wv = None

    # ------------------------------------------------------------ vocabulary

    def build_vocab(self, sentences):
        """Count the words in one pass and encode the corpus; returns (tokens, sentence_ends).

        Words seen fewer than `min_count` times are dropped; ids go by falling count.
        """
        provisional, flat, ends = {}, [], []
        for sentence in _sentences_of(sentences):
            for word in sentence:
                flat.append(provisional.setdefault(word, len(provisional)))
            ends.append(len(flat))
        if not flat:
            raise ValueError("Word2Vec.fit: the corpus is empty (no sentence holds a token)")
        flat = np.asarray(flat, dtype=np.int64)
        counts = np.bincount(flat, minlength=len(provisional))
        words = np.array(list(provisional), dtype=object)
        kept = np.flatnonzero(counts >= self.min_count)
        if kept.size < 2:
            raise ValueError(f"Word2Vec.fit: min_count={self.min_count} leaves {kept.size} word(s) of "
                             f"{len(provisional)}; at least 2 are needed (lower min_count)")
        order = kept[np.lexsort((np.arange(kept.size), -counts[kept]))]
        final = np.full(len(provisional), -1, dtype=np.int64)
        final[order] = np.arange(order.size)
        self.words = list(words[order])
        self.index = {w: i for i, w in enumerate(self.words)}
        self.counts = counts[order]
        mapped = final[flat]
        keep = mapped >= 0
        new_ends = np.cumsum(keep)[np.asarray(ends) - 1]
        return mapped[keep], new_ends.astype(np.int64)

    # ------------------------------------------------------------ training

    def fit(self, sentences, callback=None, progress=None, start_method=None, device="cpu",
            batch_size=None):
        """Build the vocabulary from `sentences` and train; returns self.

        sentences  an iterable of token lists, or a path to a text file (one
                   sentence a line, tokens split on white space).
        callback   callback(epoch, loss, words_per_second) after each epoch; loss
                   is the epoch's mean loss per example (accumulated in float64
                   by each worker, weighted by their examples). Without a
                   callback (and a progress), Hogwild processes start once a fit.
        progress   a `fa.hogwild.progress_bar(total)`-style callable(done, per_second)
                   fed with the examples done in each epoch.
        start_method  how `workers` > 1 run (`fa.hogwild.run`): "threads" (threads of
                   this process, the compiled loop releasing the GIL), "fork" (the
                   default on Linux) or "spawn" (the default elsewhere).
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
        who = "Word2Vec.fit"
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        settings = RunSettings.for_fit(who, self.workers, start_method, device, batch_size, lr=self.lr,
                                       min_lr=self.min_lr, epochs=self.epochs)
        vocabulary = self.words, self.index, self.counts
        try:
            tokens, ends = self.build_vocab(sentences)
            if tokens.size < 2 or np.count_nonzero(np.bincount(tokens)) < 2:
                raise ValueError("Word2Vec.fit: fewer than 2 distinct words survive min_count")
            rng = np.random.default_rng(self.seed)
            n = len(self.words)
            W = _initial_vectors(rng, n, self.dim)
            C = np.zeros((n, self.dim), dtype=np.float32)
            history = self._train(W, C, tokens, ends, settings, callback, progress)
        except BaseException:
            self.words, self.index, self.counts = vocabulary
            raise
        self.vectors, self.output, self.history = W, C, history
        return self

    def _train(self, W, C, tokens, ends, settings, callback, progress):
        """Train W and C in place for every epoch; returns the epochs' mean losses."""
        weights = {"W": W, "C": C}
        if self.workers > 1:      # each epoch's claim counter: an int64 in a float64's place
            weights["claim"] = np.zeros(self.epochs, dtype=np.float64)
        corpus = _Corpus(dict(self._settings(), batch=settings.batch), tokens, ends)
        history = []
        with EpochRunner(corpus, weights, settings, progress) as runner:
            start = time.perf_counter()
            # without a callback, every epoch in one run (Hogwild processes start once), unless
            # progress, which counts each epoch from 0, asks for a run per epoch
            together = callback is None and progress is None
            for epoch, loss in runner.each(range(self.epochs), together=together):
                history.append(loss)
                if callback is not None:
                    callback(epoch, loss, tokens.size / (time.perf_counter() - start))
                start = time.perf_counter()
        return history

    def _settings(self):
        return {"dim": self.dim, "window": self.window, "negative": self.negative, "sample": self.sample,
                "sg": self.sg, "seed": self.seed, "workers": self.workers}

    # ------------------------------------------------------------ queries

    def _require_trained(self, who):
        if self.vectors is None:
            raise RuntimeError(f"Word2Vec.{who}: the model is not trained; call fit() or load()")

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
        sections, section = {}, None
        correct = total = skipped = 0
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
                if section is None:
                    section = ""
                    sections.setdefault(section, [0, 0])
                if not all(w in self.index for w in words):
                    skipped += 1
                    continue
                a, b, c, d = words
                guess = self.analogy(a, b, c, topn=1)[0][0]
                hit = guess == d
                correct += hit
                total += 1
                sections[section][0] += hit
                sections[section][1] += 1
        return {"accuracy": correct / total if total else math.nan, "correct": correct, "total": total,
                "skipped": skipped, "sections": {k: tuple(v) for k, v in sections.items()}}

    # ------------------------------------------------------------ files

    def save(self, path):
        """Save the vocabulary (as JSON text), counts, vectors and settings with `fa.save` (a .npz, atomic)."""
        self._require_trained("save")
        save({"words": json.dumps(self.words), "counts": self.counts, "vectors": self.vectors,
              "output": self.output, "settings": {name: getattr(self, name) for name in _SAVED_SETTINGS}},
             path)

    @classmethod
    def load(cls, path):
        """A model saved with `save`."""
        state = load(path)
        try:
            settings = dict(state["settings"])
            model = cls(**{name: kind(settings[name]) for name, kind in _SAVED_SETTINGS.items()})
            words = json.loads(state["words"])
            vectors, output = np.asarray(state["vectors"]), np.asarray(state["output"])
            counts = np.asarray(state["counts"])
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"Word2Vec.load: {path} is not a saved Word2Vec ({e!r})") from None
        if vectors.shape != (len(words), model.dim) or output.shape != vectors.shape:
            raise ValueError(f"Word2Vec.load: {path} holds {len(words)} words but vectors of shape "
                             f"{vectors.shape}")
        model.words, model.index, model.counts = words, {w: i for i, w in enumerate(words)}, counts
        model.vectors, model.output = vectors, output
        return model

    def save_word2vec_format(self, path, binary=False):
        """`wv.save_word2vec_format`: word2vec's text (or `binary`) format, which gensim's
        KeyedVectors.load_word2vec_format reads; written atomically."""
        self.wv.save_word2vec_format(path, binary)


@dataclass(frozen=True)
class _Corpus:
    """What a worker of `Word2Vec.fit` builds its graph and draws its examples from
    (picklable: `EpochRunner` sends it to Hogwild processes): the settings of its graph
    (`_example_graph`) and sampler, and the encoded corpus."""
    settings: dict
    tokens: np.ndarray
    ends: np.ndarray

    def worker_graph(self, weights, settings, rank):
        return _WindowGraph(self, weights, settings.device, rank)


class _WindowGraph:
    """The graph of one step of the window examples over W and C (`_example_graph`), and
    the epochs of rank's walk of the corpus: the whole corpus in order for one worker,
    else the blocks it claims from the epoch's shared counter (`weights["claim"]`).

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
        self.leaves, self.loss = _example_graph(W, C, corpus.settings, device)
        self.claims = weights["claim"].numpy().view(np.int64) if "claim" in weights else None
        self.corpus, self.rank, self.vocab_size = corpus, rank, W.shape[0]

    def _sampler(self, leaves, epoch):
        """The compiled window sampler over `leaves` (the graph's, or host ones like them) for
        this rank's epoch: the whole corpus in order, or the blocks it claims."""
        settings = self.corpus.settings
        common = dict(sentence_ends=self.corpus.ends, window=settings["window"], sample=settings["sample"],
                      vocab_size=self.vocab_size, seed=[settings["seed"], epoch], rank=self.rank,
                      workers=settings["workers"], mask=leaves[-1] if settings["batch"] > 1 else None)
        if self.claims is not None:
            common.update(claim=self.claims[epoch:epoch + 1], block_tokens=BLOCK_TOKENS)
        core = leaves[:-1] if settings["batch"] > 1 else leaves
        return (SkipGramSampler if settings["sg"] else CbowSampler)(self.corpus.tokens, *core, **common)

    def epoch_data(self, epoch):
        return self._sampler(self.leaves, epoch)

    def epoch_loss(self, mean, sampler):
        # the skip-gram pairs or CBOW centres the sampler drew
        items = sampler.epoch_pairs if isinstance(sampler, SkipGramSampler) else sampler.epoch_centres
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
    order the window sampler takes them (skip-gram: centre ids, context ids; CBOW:
    context ids, their weights, target ids; then the mask when the batch holds more
    than one example) and the summed negative-sampling loss, each example's
    -log sigmoid(±score) for its word and `negative` noise words, times its mask: the
    binary cross-entropy of sigmoid(score) against 1 for the word and 0 for the noise
    words, one node in place of a sign product, a log-sigmoid, a sum and a negation."""
    b, k, dim = settings["batch"], settings["negative"], W.shape[1]

    def ids(*shape):
        return IndexInput(np.zeros(shape, dtype=np.int64), device=device)

    labels = np.zeros((b, k + 1), dtype=W.dtype)
    labels[:, 0] = 1                      # each example's word, then its k noise words
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
    if b == 1:
        return leaves, bce_with_logits(scores, labels, reduction="sum")
    mask = Input(np.ones((b, 1), dtype=np.float32), device=device)
    return leaves + (mask,), fa_sum(bce_with_logits(scores, labels, reduction="none") * mask)

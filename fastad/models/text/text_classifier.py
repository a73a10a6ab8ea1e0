"""`fa.models.TextClassifier`: fastText's supervised model on fastad's graph and compiled
loop. A text's input rows (its words, hashed word n-grams and character n-grams, from
`fa.text.Dictionary`) are averaged by `embedding_bag`, and a linear output layer scores
the labels under one of fastText's losses. Each example is one bag of any length
(`fa.data.BagSampler`): nothing is padded."""
import heapq
import json
import math
import os

import numpy as np

from fastad.training.feeds import BagSampler
from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.ops.linalg import linear, vector_dot
from fastad.ops.losses import bce_with_logits, cross_entropy
from fastad.ops.reduction import sum as fa_sum
from fastad.ops.sparse import embedding_bag, take
from fastad.models.text._dictionary import EOS, Dictionary, distinct_rows
from fastad.checks import (check_callable, check_choice, check_flag, check_int, check_number, check_sizes,
                           either)
from fastad.models.base import Model
from fastad.models.runner import EpochRunner, RunSettings

__all__ = ["TextClassifier"]

LOSSES = ("softmax", "ns", "hs", "ova")


class TextClassifier(Model):
    """fastText's supervised classifier (`fasttext.train_supervised`).

    dim            the size of the word vectors and of the text's mean vector
    epochs         passes over the training texts (fastText's `epoch`)
    lr             the learning rate, falling linearly to 0 over the run, as fastText's
    word_ngrams    word n-grams up to this length as features, hashed into `bucket`
                   rows (`wordNgrams`; 1: words alone)
    min_count, min_count_label   words and labels seen fewer times are left out
                   (`minCount`, `minCountLabel`)
    minn, maxn     character n-grams of these lengths as features (0, 0: none, as
                   fastText's supervised default)
    bucket         the rows the hashed n-grams share (2,000,000 as fastText's; none are
                   allocated when there are no n-grams)
    loss           "softmax"; "ns" (negative sampling: the label and `neg` other labels
                   drawn by count ** 0.5, each a binary logistic loss); "hs" (hierarchical
                   softmax over a Huffman tree of the labels by count); "ova" (one binary
                   logistic loss per label: multi-label)
    workers        Hogwild threads or processes (fastText's `thread`); 1 is
                   deterministic for a seed
    shuffle        visit the texts in a new random order each epoch (fastText reads
                   its file in order; a file sorted by label trains badly that way)
    label          the prefix that marks a label token ("__label__")

    fastText's own names are taken too: `epoch`, `wordNgrams`, `minCount`,
    `minCountLabel`, `thread`.

    >>> model = fa.models.TextClassifier(dim=50, epochs=5, word_ngrams=2).fit("train.txt")
    >>> model.predict("which baking dish is best for banana bread ?", k=2)
    (('__label__baking', '__label__bread'), array([0.81, 0.12]))
    >>> n, precision_at_1, recall_at_1 = model.test("valid.txt")

    Training data: a path to a file in fastText's format (one text a line, its labels as
    tokens with the `label` prefix), an iterable of such lines, or `fit(texts, labels)`
    with a label (or a list of labels) per text. The input rows start uniform in
    [-1/dim, 1/dim) and the output rows at zero, as fastText's; an example with several
    labels trains, under softmax, ns and hs, on one of them drawn anew each epoch (as
    fastText draws one each time), and under ova on all of them.

    The input table holds only the rows the training texts use (`input_rows`: their
    rows of fastText's nwords + bucket matrix, in order) and one row of zeros for the
    n-gram buckets no training text hashes to (fastText starts them random, though they
    never train; see `_input_table`): a few tens of MB where fastText fills 400 MB.
    """

    def __init__(self, dim=100, epochs=5, lr=0.1, word_ngrams=1, min_count=1, min_count_label=0,
                 minn=0, maxn=0, bucket=2_000_000, loss="softmax", neg=5, workers=1, seed=0,
                 shuffle=True, label="__label__", *, epoch=None, wordNgrams=None, minCount=None,
                 minCountLabel=None, thread=None):
        who = "TextClassifier"
        epochs = either(who, "epochs", epochs, 5, "fastText's epoch", epoch)
        word_ngrams = either(who, "word_ngrams", word_ngrams, 1, "fastText's wordNgrams", wordNgrams)
        min_count = either(who, "min_count", min_count, 1, "fastText's minCount", minCount)
        min_count_label = either(who, "min_count_label", min_count_label, 0, "fastText's minCountLabel",
                                 minCountLabel)
        workers = either(who, "workers", workers, 1, "fastText's thread", thread)
        self.dim, self.epochs, self.workers, self.neg = check_sizes(who, dim=dim, epochs=epochs,
                                                                    workers=workers, neg=neg)
        self.lr = check_number(who, "lr", lr, above=0)
        self.loss = check_choice(who, "loss", loss, LOSSES)
        self.seed = check_int(who, "seed", seed, minimum=0)
        self.shuffle = check_flag(who, "shuffle", shuffle)
        # the dictionary checks the featuriser's settings (n-gram lengths, bucket, label)
        Dictionary(min_count, min_count_label, word_ngrams, minn, maxn, bucket, label)
        self.word_ngrams, self.min_count, self.min_count_label = word_ngrams, min_count, min_count_label
        self.minn, self.maxn, self.bucket, self.label = minn, maxn, bucket, label
        self.dictionary = self.input = self.input_rows = self.output = self.tree = None
        self._table_row = None       # the input table's row of each dictionary row (_table_rows)
        self.history = []

    # ------------------------------------------------------------ data

    def _lines(self, who, data, labels):
        """The fastText-format lines of `data` (a path, or lines) or of texts with `labels`: a
        path or a list (both can be read twice)."""
        if labels is not None:
            return _labelled_lines(who, data, labels, self.label)
        if isinstance(data, (str, os.PathLike)):
            if not os.path.isfile(data):
                raise FileNotFoundError(f"{who}: no file {os.fspath(data)!r}")
            return os.fspath(data)
        if isinstance(data, (bytes, bytearray)) or not hasattr(data, "__iter__"):
            raise TypeError(f"{who}: give a path, an iterable of lines or texts with labels=, got "
                            f"{type(data).__name__}")
        return _checked_lines(who, data)

    def _encode(self, who, dictionary, lines, training):
        """(ids, offsets, labels, label_offsets) of `lines` by `dictionary` (the model's, or the
        one its fit builds), every line checked to have text the model can read and
        (training) a label it knows."""
        ids, offsets, labels, label_offsets = dictionary.encode(lines)
        n = offsets.shape[0] - 1
        if n == 0:
            raise ValueError(f"{who}: no lines were given")
        eos = dictionary.word_id(EOS)
        lengths = np.diff(offsets)
        # every line ends with EOS: a line whose rows are EOS alone had no readable text
        only_eos = (lengths == 0) | ((lengths == 1) & (ids[np.minimum(offsets[:-1], max(ids.size - 1, 0))] == eos))
        if only_eos.any():
            k = int(np.argmax(only_eos))
            raise ValueError(f"{who}: line {k} has no word the model knows and no n-gram (an empty "
                             f"text, or only words seen fewer than min_count={self.min_count} "
                             f"times); {int(only_eos.sum())} line(s) of {n} are so")
        if training:
            unlabelled = np.diff(label_offsets) == 0
            if unlabelled.any():
                k = int(np.argmax(unlabelled))
                raise ValueError(f"{who}: line {k} has no label (a token starting with "
                                 f"{self.label!r}, seen at least min_count_label="
                                 f"{self.min_count_label} times); {int(unlabelled.sum())} "
                                 f"line(s) of {n} are so")
        return ids, offsets, labels, label_offsets

    # ------------------------------------------------------------ training

    def fit(self, data, labels=None, callback=None, progress=None, start_method=None):
        """Build the dictionary from the training texts and train for `epochs`; returns self.

        data      a path to a fastText-format file, an iterable of such lines, or texts
                  (str) when `labels` is given
        labels    a label (str, without the prefix or with it) or a list of labels per text
        callback  `callback(epoch, loss)` after each epoch (epochs from 1)
        progress  `progress(done, per_second)` as examples are trained (`fa.progress_bar()`)
        start_method  how `workers` > 1 run: "threads", "fork" or "spawn"
        """
        who = "TextClassifier.fit"
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        settings = RunSettings.for_fit(who, self.workers, start_method, "cpu", None, lr=self.lr,
                                       min_lr=0.0, epochs=self.epochs, first_epoch=1)
        lines = self._lines(who, data, labels)
        dictionary = Dictionary(**_settings_of(self)).build(lines)
        if dictionary.nlabels < 2:
            raise ValueError(f"{who}: the texts hold {dictionary.nlabels} label(s) (tokens starting "
                             f"with {self.label!r}); a classifier needs at least 2")
        ids, offsets, labels, label_offsets = self._encode(who, dictionary, lines, True)
        used = np.zeros(dictionary.input_rows, dtype=bool)     # the dictionary's input rows the texts use
        used[ids] = True
        input_rows = np.flatnonzero(used)
        table_row = _table_rows(input_rows, dictionary.input_rows)
        examples = _Examples(self, dictionary.label_counts, table_row[ids], input_rows.size + 1,
                             offsets, labels, label_offsets)
        weights = {"E": _input_table(np.random.default_rng(self.seed), input_rows.size, self.dim),
                   "O": np.zeros((examples.output_rows, self.dim), dtype=np.float32)}
        with EpochRunner(examples, weights, settings, progress) as runner:
            history = runner.train(range(1, self.epochs + 1), callback)
        self.dictionary, self.input_rows, self._table_row = dictionary, input_rows, table_row
        self.input, self.output, self.history = weights["E"], weights["O"], history
        self.tree = examples.tree
        return self

    # ------------------------------------------------------------ prediction

    def _is_trained(self):
        return self.output is not None

    @property
    def labels(self):
        """The labels, by id (with their prefix, as fastText's `labels`)."""
        self._require_trained("labels")
        return self.dictionary.labels

    @property
    def words(self):
        """The words of the vocabulary, by id."""
        self._require_trained("words")
        return self.dictionary.words

    def _hidden(self, ids, offsets):
        """The mean input row of each text (float32, texts x dim), in compiled code."""
        table = Parameter(self.input, copy=False)
        table.requires_grad = False
        bags = embedding_bag(table, IndexInput(self._table_row[ids].astype(np.int64)), IndexInput(offsets),
                             mode="mean", include_last_offset=True)
        return bags.numpy()

    def _probabilities(self, hidden):
        """Each text's probability of each label (texts x labels), under the model's loss."""
        scores = hidden.astype(np.float64) @ self.output.T.astype(np.float64)
        if self.loss == "softmax":
            scores -= scores.max(axis=1, keepdims=True)
            np.exp(scores, out=scores)
            return scores / scores.sum(axis=1, keepdims=True)
        if self.loss in ("ns", "ova"):
            return 1.0 / (1.0 + np.exp(-scores))
        paths, codes, lengths = self.tree
        log_p = np.zeros((hidden.shape[0], paths.shape[0]))
        for label in range(paths.shape[0]):        # the product of its path's branch probabilities
            s = scores[:, paths[label, :lengths[label]]]
            signed = np.where(codes[label, :lengths[label]] > 0, s, -s)
            log_p[:, label] = -np.logaddexp(0.0, -signed).sum(axis=1)
        return np.exp(log_p)

    def predict_proba(self, texts):
        """The probability of every label for each text (texts x labels, label ids as in
        `labels`); a text given alone gives one row."""
        who = "TextClassifier.predict_proba"
        self._require_trained("predict_proba")
        ids, offsets, _, _ = self._encode(who, self.dictionary, _texts(who, texts), False)
        return self._probabilities(self._hidden(ids, offsets))

    def predict(self, text, k=1, threshold=0.0):
        """The `k` likeliest labels of a text and their probabilities, at least `threshold`
        each: (labels tuple, probabilities array) for one text, as fastText's predict, or a
        list of labels tuples and a list of arrays for a list of texts."""
        who = "TextClassifier.predict"
        self._require_trained("predict")
        k = check_int(who, "k", k)
        threshold = check_number(who, "threshold", threshold, at_least=0, at_most=1)
        probabilities = self.predict_proba(text)
        top = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
        names, chosen = self.dictionary.labels, []
        for row, best in zip(probabilities, top):
            kept = best[row[best] >= threshold]
            chosen.append((tuple(names[j] for j in kept), row[kept]))
        if isinstance(text, (str, bytes)):
            return chosen[0]
        return [c[0] for c in chosen], [c[1] for c in chosen]

    def test(self, data, labels=None, k=1, threshold=0.0):
        """(texts, precision at k, recall at k) over labelled texts (a path, lines, or
        texts with `labels`), as fastText's `test`: precision is the share of predicted
        labels that are right, recall the share of true labels predicted. A true label
        the model never saw is a ValueError naming it (fastText would skip it, and
        report a recall too high)."""
        who = "TextClassifier.test"
        self._require_trained("test")
        k = check_int(who, "k", k)
        threshold = check_number(who, "threshold", threshold, at_least=0, at_most=1)
        lines = self._lines(who, data, labels)
        _check_known_labels(who, lines, self.dictionary)
        ids, offsets, gold, gold_offsets = self._encode(who, self.dictionary, lines, True)
        probabilities = self._probabilities(self._hidden(ids, offsets))
        top = np.argsort(-probabilities, axis=1, kind="stable")[:, :k]
        predicted = right = 0
        for t, best in enumerate(top):
            kept = best[probabilities[t, best] >= threshold]
            truth = set(gold[gold_offsets[t]:gold_offsets[t + 1]].tolist())
            predicted += kept.size
            right += sum(int(j) in truth for j in kept)
        n = offsets.shape[0] - 1
        return n, (right / predicted if predicted else math.nan), right / gold.size

    def get_sentence_vector(self, text):
        """The mean input row of a text: what the output layer scores."""
        who = "TextClassifier.get_sentence_vector"
        self._require_trained("get_sentence_vector")
        ids, offsets, _, _ = self._encode(who, self.dictionary, _texts(who, [text]), False)
        return self._hidden(ids, offsets)[0]

    # ------------------------------------------------------------ files

    def _state(self):
        """The dictionary (its words and labels as JSON text, and their counts) and both matrices."""
        state = self.dictionary.state()
        return {"dictionary": json.dumps({key: state[key] for key in ("words", "labels", "ntokens")}),
                "word_counts": state["word_counts"], "label_counts": state["label_counts"],
                "input": self.input, "input_rows": self.input_rows, "output": self.output}

    def _restore(self, state):
        """The saved dictionary and matrices, checked to fit each other."""
        d = self.dictionary = Dictionary.from_state(dict(      # its words, labels and ntokens
            json.loads(state["dictionary"]), settings=_settings_of(self), word_counts=state["word_counts"],
            label_counts=state["label_counts"]))
        self.input = np.ascontiguousarray(state["input"], dtype=np.float32)
        self.input_rows = used = np.ascontiguousarray(state["input_rows"], dtype=np.int64)
        self.output = np.ascontiguousarray(state["output"], dtype=np.float32)
        rows = d.nlabels - 1 if self.loss == "hs" else d.nlabels
        if (self.input.shape != (used.size + 1, self.dim) or self.output.shape != (rows, self.dim)
                or used.ndim != 1 or (used.size and (used.min() < 0 or used.max() >= d.input_rows
                                                     or (np.diff(used) <= 0).any()))):
            raise ValueError(f"it holds matrices of shapes {self.input.shape} and {self.output.shape} "
                             f"over {used.size} input rows, not ({used.size + 1}, {self.dim}) and "
                             f"{(rows, self.dim)} over increasing rows below {d.input_rows}")
        self.tree = _huffman_paths(d.label_counts) if self.loss == "hs" else None
        self._table_row = _table_rows(used, d.input_rows)


def _settings_of(model):
    """The settings of the model's `Dictionary`: no n-gram rows when it has no n-grams."""
    grams = model.word_ngrams > 1 or model.maxn > 0
    return {"min_count": model.min_count, "min_count_label": model.min_count_label,
            "word_ngrams": model.word_ngrams, "minn": model.minn, "maxn": model.maxn,
            "bucket": model.bucket if grams else 0, "label": model.label}


def _table_rows(used, rows):
    """The model's input-table row of each of the dictionary's `rows` input rows (int32): the
    table holds the `used` rows, then one row of zeros for all the others."""
    of = np.full(rows, used.size, dtype=np.int32)
    of[used] = np.arange(used.size, dtype=np.int32)
    return of


def _input_table(rng, used, dim):
    """The input table at the start: one row for each of the `used` rows of the dictionary's
    input matrix, uniform in [-1/dim, 1/dim) as fastText's (drawn in float32), then one
    row of zeros that stands for every other row.

    The others are n-gram buckets that no training text hashes to. They never train, and
    fastText's random start in them only adds noise to the texts that hit them at
    prediction; a row of zeros adds nothing to a text's sum (and still counts in its
    mean, as fastText's rows do). Keeping the used rows alone spares the memory of the
    whole 2,000,000-bucket matrix (400 MB at dim 50, against the tens of MB a corpus
    of tens of thousands of texts uses) and the time to fill it."""
    table = np.empty((used + 1, dim), dtype=np.float32)
    rng.random(out=table[:used], dtype=np.float32)
    table[:used] *= 2.0 / dim
    table[:used] -= 1.0 / dim
    table[used] = 0.0
    return table


def _texts(who, texts):
    """One text, or a list of texts, as a list of lines (str or bytes), each checked."""
    if isinstance(texts, (str, bytes)):
        texts = [texts]
    if not hasattr(texts, "__iter__"):
        raise TypeError(f"{who}: give a text (str) or a list of texts, got {type(texts).__name__}")
    return _checked_lines(who, texts)


def _checked_lines(who, lines):
    """`lines` as a list, each a str or bytes without a line break inside."""
    out = list(lines)
    for k, line in enumerate(out):
        if not isinstance(line, (str, bytes)):
            raise TypeError(f"{who}: line {k} is a {type(line).__name__}, not a str")
    return out


def _labelled_lines(who, texts, labels, prefix):
    """fastText-format lines from texts and their labels (a label or a list of labels each)."""
    texts = _texts(who, texts)
    if isinstance(labels, (str, bytes)) or not hasattr(labels, "__len__"):
        raise TypeError(f"{who}: labels must be a list with a label (or a list of labels) per "
                        f"text, got {type(labels).__name__}")
    if len(labels) != len(texts):
        raise ValueError(f"{who}: {len(texts)} texts but {len(labels)} labels")
    lines = []
    for k, (text, given) in enumerate(zip(texts, labels)):
        names = [given] if isinstance(given, (str, np.str_)) or np.ndim(given) == 0 else list(given)
        if not names:
            raise ValueError(f"{who}: text {k} has no label")
        tokens = []
        for name in names:
            name = str(name)
            if not name or name != name.strip() or len(name.split()) != 1:
                raise ValueError(f"{who}: label {name!r} of text {k} must be one token without spaces")
            tokens.append(name if name.startswith(prefix) else prefix + name)
        text = text.decode("utf-8") if isinstance(text, bytes) else text
        lines.append(" ".join(tokens) + " " + text)
    return lines


def _check_known_labels(who, lines, dictionary):
    """A ValueError naming the first label token of `lines` that the dictionary lacks."""
    seen = Dictionary(1, 0, 1, 0, 0, 0, dictionary.label).build(lines)
    for name in seen.labels:
        if dictionary.label_id(name) < 0:
            raise ValueError(f"{who}: label {name!r} was never seen in training (the model knows "
                             f"{dictionary.nlabels} labels)")


def _huffman_paths(counts):
    """fastText's Huffman tree of the labels by count: (paths, codes, lengths), label c's
    path the output rows (internal nodes) from the root down to it, `codes` 1 where it
    goes to the node's second child, each padded to the deepest path."""
    n = len(counts)
    parent, branch = np.zeros(2 * n - 1, dtype=np.int64), np.zeros(2 * n - 1, dtype=np.int8)
    heap = [(int(c), k) for k, c in enumerate(counts)]
    heapq.heapify(heap)
    for node in range(n, 2 * n - 1):
        (c1, a), (c2, b) = heapq.heappop(heap), heapq.heappop(heap)
        parent[a], parent[b], branch[b] = node, node, 1
        heapq.heappush(heap, (c1 + c2, node))
    walks = []
    for label in range(n):
        steps, node = [], label
        while node != 2 * n - 2:
            steps.append((parent[node] - n, branch[node]))
            node = parent[node]
        walks.append(steps[::-1])
    depth = max(len(w) for w in walks)
    paths = np.zeros((n, depth), dtype=np.int64)
    codes = np.zeros((n, depth), dtype=np.float32)
    lengths = np.array([len(w) for w in walks], dtype=np.int64)
    for label, walk in enumerate(walks):
        for j, (node, code) in enumerate(walk):
            paths[label, j], codes[label, j] = node, code
    return paths, codes, lengths


class _Examples:
    """The encoded training texts and the loss's settings (picklable: `EpochRunner` sends
    it to Hogwild processes), each worker's graph (`worker_graph`): a
    `runner.ModelDescription`.

    Each text is its distinct input-table rows with their shares of the text
    (`distinct_rows`): its mean row a weighted sum, each row read and updated once an
    example however often the text repeats it. On long documents that halves the rows
    (a corpus of man pages: 6.3 M rows, 2.5 M distinct per page)."""

    def __init__(self, model, label_counts, ids, table_rows, offsets, labels, label_offsets):
        self.ids, self.offsets, self.shares = distinct_rows(ids, offsets, table_rows)
        self.labels, self.label_offsets = labels, label_offsets
        self.loss, self.neg, self.seed = model.loss, model.neg, model.seed
        self.shuffle, self.workers = model.shuffle, model.workers
        self.n_labels = label_counts.shape[0]
        self.longest = int(np.diff(self.offsets).max())
        self.single = bool((np.diff(label_offsets) == 1).all())
        self.tree = _huffman_paths(label_counts) if self.loss == "hs" else None
        self.noise = None
        if self.loss == "ns":      # fastText's negatives table: labels by count ** 0.5
            weights = np.sqrt(label_counts.astype(np.float64))
            self.noise = weights / weights.sum()
        self.output_rows = self.n_labels - 1 if self.loss == "hs" else self.n_labels

    def worker_graph(self, weights, settings: RunSettings, rank: int) -> "_ExampleGraph":
        return _ExampleGraph(self, weights, rank)

    def epoch_labels(self, rng):
        """One label per text: its only one, or one of its labels drawn."""
        if self.single:
            return self.labels
        starts, lengths = self.label_offsets[:-1], np.diff(self.label_offsets)
        return self.labels[starts + (rng.random(lengths.shape[0]) * lengths).astype(np.int64)]


class _ExampleGraph:
    """One worker's graph: the text's mean input row (the sum of its distinct rows times
    their shares), its output scores and the loss; a `runner.WorkerGraph` (CPU only)."""

    def __init__(self, examples, weights, rank):
        E, O = Parameter(weights["E"]), Parameter(weights["O"])
        self.parameters = {"E": E, "O": O}
        self.examples, self.rank = examples, rank
        self.bag = IndexInput(np.zeros(examples.longest, dtype=np.int64))
        self.bag_offsets = IndexInput(np.zeros(2, dtype=np.int64))
        self.shares = Input(np.zeros(examples.longest, dtype=np.float32))
        hidden = embedding_bag(E, self.bag, self.bag_offsets, mode="sum", include_last_offset=True,
                               per_sample_weights=self.shares)
        loss = examples.loss
        if loss == "softmax":
            self.target = IndexInput(np.zeros(1, dtype=np.int64))
            self.loss = cross_entropy(linear(hidden, O), self.target)
        elif loss == "ova":
            self.target = Input(np.zeros((1, examples.n_labels), dtype=np.float32))
            self.loss = bce_with_logits(linear(hidden, O), self.target, reduction="sum")
        elif loss == "ns":
            k = examples.neg + 1
            self.target = IndexInput(np.zeros(k, dtype=np.int64))
            truth = np.zeros(k, dtype=np.float32)
            truth[0] = 1            # the label, then `neg` others
            self.loss = bce_with_logits(vector_dot(take(O, self.target), hidden), truth, reduction="sum")
        else:
            depth = examples.tree[0].shape[1]
            self.target = IndexInput(np.zeros(depth, dtype=np.int64))
            self.codes = Input(np.zeros(depth, dtype=np.float32))
            self.mask = Input(np.zeros(depth, dtype=np.float32))
            scores = vector_dot(take(O, self.target), hidden)
            self.loss = fa_sum(bce_with_logits(scores, self.codes, reduction="none") * self.mask)

    def epoch_data(self, epoch):
        ex = self.examples
        rng = np.random.default_rng([ex.seed, epoch, self.rank])
        labels = ex.epoch_labels(rng)
        if ex.loss == "softmax":
            feeds = {self.target: labels}
        elif ex.loss == "ova":
            hot = np.zeros((ex.offsets.shape[0] - 1, ex.n_labels), dtype=np.float32)
            rows = np.repeat(np.arange(hot.shape[0]), np.diff(ex.label_offsets))
            hot[rows, ex.labels] = 1
            feeds = {self.target: hot[:, None, :]}
        elif ex.loss == "ns":
            feeds = {self.target: _with_negatives(rng, labels, ex.noise, ex.neg)}
        else:
            paths, codes, lengths = ex.tree
            mask = (np.arange(paths.shape[1]) < lengths[:, None]).astype(np.float32)
            feeds = {self.target: paths[labels], self.codes: codes[labels], self.mask: mask[labels]}
        return BagSampler(self.bag, self.bag_offsets, ex.ids, ex.offsets, feeds, shuffle=ex.shuffle,
                          seed=[ex.seed, epoch], rank=self.rank, workers=ex.workers,
                          weights_leaf=self.shares, weights=ex.shares)

    def epoch_loss(self, mean, sampler):
        return mean, sampler.epoch_examples


def _with_negatives(rng, labels, noise, neg):
    """Each text's label, then `neg` labels drawn from `noise`, never its own (fastText's
    getNegative draws again on its label)."""
    drawn = rng.choice(noise.shape[0], size=(labels.shape[0], neg), p=noise)
    clash = drawn == labels[:, None]
    while clash.any():
        drawn[clash] = rng.choice(noise.shape[0], size=int(clash.sum()), p=noise)
        clash = drawn == labels[:, None]
    return np.concatenate((labels[:, None].astype(np.int64), drawn), axis=1)

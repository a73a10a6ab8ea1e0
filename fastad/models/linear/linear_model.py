"""`fa.models.LinearModel`: a linear model over sparse features (hashed ones, as Vowpal
Wabbit's), and the data and worker graph it shares with `FactorizationMachine`.

An example is a row of a sparse matrix (or of `fa.features`' bags, from a VW file): its
features' ids and values, one bag of any length (`fa.data.BagSampler` with per-id values),
trained by `fa.train`'s compiled loop in this process or in Hogwild workers; predictions
are sparse products in numpy."""
import os
import queue
import threading
import time
from collections import namedtuple
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import scipy.sparse as sp

from fastad.training.feeds import BagSampler
from fastad.features import Features, Hasher, iter_vw, read_vw
from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.ops.elementwise import relu
from fastad.ops.losses import bce_with_logits, hinge, mse
from fastad.ops.reduction import sum as fa_sum
from fastad.ops.sparse import embedding_bag
from fastad.checks import check_callable, check_choice, check_flag, check_int, check_number, check_sizes
from fastad.models.base import Model
from fastad.models.runner import OPTIMIZERS, EpochRunner, RunSettings, optimizer_options_of
from fastad.models.linear._online import OnlineUpdate

__all__ = ["LinearModel"]

LOSSES = ("logistic", "squared", "hinge", "quantile")
#: The optimizers of `optimizer=`: fa.optim's (in fa.train's loop) and "vw", VW's update
#: (in a loop of its own, _online.pyx).
MODEL_OPTIMIZERS = sorted([*OPTIMIZERS, "vw"])
#: The learning rate of each optimizer when lr is None (VW's -l 0.5 for its update).
DEFAULT_LR = {"vw": 0.5}
#: Examples a chunk when optimizer="vw" trains from a VW file's path: the file is parsed in a
#: thread of its own, a chunk or two ahead of the training.
CHUNK = 4096


class LinearModel(Model):
    """A linear model over sparse features: logit = b + sum over the example's features of
    value * W[feature], trained per example (as Vowpal Wabbit trains).

    loss         "logistic" (binary labels, `predict_proba`), "hinge" (binary labels, a
                 linear SVM), "squared" (regression) or "quantile" (regression of the
                 quantile_tau quantile: VW's --loss_function quantile)
    optimizer    "vw" (the default: Vowpal Wabbit's own update, adaptive per feature,
                 normalised by each feature's scale, invariant to importance weights; in a
                 compiled loop of its own), "adagrad", "sgd", "adam" or "ftrl"
                 (FTRL-Proximal, `fa.optim.FTRL`, lr its alpha), fa.optim's, in fa.train's loop
    optimizer_options   the fa.optim optimizer's other keyword arguments: {"l1": 1.0, "l2":
                 1.0} for FTRL's terms, {"weight_decay": 1e-4}, ... ("vw" takes none)
    lr           the learning rate; None: 0.5 for "vw" (VW's -l), else 0.1
    passes       passes over the training examples (VW's `--passes`)
    workers      Hogwild threads or processes; 1 is deterministic for a seed
    shuffle      visit the examples in a new random order each pass (else in their order,
                 as VW reads its file)
    seed         the seed of the shuffle (and of a factorization machine's factors)
    hasher       how a VW-format file given to `fit` or a prediction is hashed: a
                 `fa.features.Hasher` or its settings (None: `Hasher()`, 18 bits)
    quantile_tau the quantile of the "quantile" loss (VW's --quantile_tau), in (0, 1)
    oaa          None (binary labels or regression), or K: multiclass one against all
                 (VW's --oaa K): labels 1..K, as VW's text format gives them; a column of
                 W and b per class, each class's binary problem trained on every example
                 (targets +1 for its class, -1 for the others); `predict` gives classes
                 1..K, `predict_proba` (logistic) each class's sigmoid normalised to sum 1
                 (VW's --probabilities)

    The examples X are a scipy sparse matrix (or a dense array) of examples x features
    (row r holds example r's feature values at the columns of its (hashed) feature ids;
    its number of columns is the model's number of features); or `fa.features.Features`
    (2**bits features; its labels and importance weights are y and sample_weight unless
    given); or the path of a file in VW's text format, read by `fa.features.read_vw` with
    the model's hasher (by optimizer "vw", without shuffle, y or sample_weight, streamed:
    parsed CHUNK examples at a time in a thread of its own beside the training, as VW's
    parser thread beside its learner). Binary labels are any two values (classes_, sorted;
    the second is the positive class).

    >>> model = fa.models.LinearModel(loss="logistic", passes=2).fit("train.vw")
    >>> fa.metrics.roc_auc(test_labels, model.decision_function("test.vw"))
    """

    def __init__(self, loss="logistic", optimizer="vw", lr=None, passes=1, workers=1,
                 shuffle=False, seed=0, hasher=None, optimizer_options=None, quantile_tau=0.5, oaa=None):
        who = type(self).__name__
        if isinstance(hasher, Hasher):
            hasher = hasher.settings()
        elif hasher is not None and not isinstance(hasher, dict):
            raise TypeError(f"{who}: hasher must be a fa.features.Hasher or its settings (a "
                            f"dict), got {type(hasher).__name__}")
        self.hasher = Hasher(**(hasher or {})).settings()      # checked by Hasher
        self.loss = check_choice(who, "loss", loss, LOSSES)
        self.optimizer = check_choice(who, "optimizer", optimizer, MODEL_OPTIMIZERS)
        self.lr = check_number(who, "lr", DEFAULT_LR.get(optimizer, 0.1) if lr is None else lr, above=0)
        if self.optimizer == "vw":
            if optimizer_options:
                raise TypeError(f"{who}: optimizer 'vw' takes no optimizer_options, got {optimizer_options!r}")
            self.optimizer_options = {}
        else:
            self.optimizer_options = dict(optimizer_options_of(who, self.optimizer, optimizer_options,
                                                               self.lr))
        self.passes, self.workers = check_sizes(who, passes=passes, workers=workers)
        self.shuffle = check_flag(who, "shuffle", shuffle)
        self.seed = check_int(who, "seed", seed, minimum=0)
        self.quantile_tau = check_number(who, "quantile_tau", quantile_tau, above=0, below=1)
        self.oaa = None if oaa is None else check_int(who, "oaa", oaa, minimum=2)
        self.weights = self.classes_ = None
        self.history = []

    # ------------------------------------------------------------ training

    def fit(self, X, y=None, sample_weight=None, callback=None, progress=None, start_method=None):
        """Train for `passes` from new weights; returns self.

        X              the examples: a scipy sparse matrix or a dense array (examples x
                       features), `fa.features.Features`, or a VW-format file's path
        y              a label per example: two values for "logistic" and "hinge", numbers
                       for "squared" and "quantile", 1..K with oaa=K (from the features or
                       the file when None)
        sample_weight  an importance weight per example (VW's importance), or None (the
                       features' or the file's)
        callback       `callback(pass, loss)` after each pass (from 1)
        progress       `progress(done, per_second)` as examples are trained
        start_method   how `workers` > 1 run: "threads", "fork" or "spawn" ("vw": threads,
                       None or "threads")
        """
        who = f"{type(self).__name__}.fit"
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        if self.optimizer == "vw":
            threads_only(who, start_method, "optimizer 'vw'")
            if isinstance(X, (str, os.PathLike)) and y is None and sample_weight is None and not self.shuffle:
                blocks = _FileBlocks(self, who, X)    # streamed: parsed beside the weights' making and training
                n_features = 2 ** self.hasher["bits"]
            else:
                X, y, sample_weight = self._examples(who, X, y, sample_weight)
                targets, classes = self._targets(who, y, X.shape[0])
                blocks = _Whole(classes, [_block(self, X.indices, X.indptr, X.data, targets,
                                                 _importance(who, sample_weight, X.shape[0]))])
                n_features = X.shape[1]
            try:
                weights, history = _fit_online(self, blocks, n_features, callback, progress)
            finally:
                blocks.close()
            self.weights, self.classes_, self.history = weights, blocks.classes, history
            return self
        X, y, sample_weight = self._examples(who, X, y, sample_weight)
        targets, classes = self._targets(who, y, X.shape[0])
        examples = _Examples(self, X, targets, _importance(who, sample_weight, X.shape[0]))
        weights = self._new_weights(X.shape[1], used_rows(X))
        history = self._fit_graph(who, examples, weights, start_method, callback, progress)
        self.weights, self.classes_, self.history = weights, classes, history
        return self

    def _fit_graph(self, who, examples, weights, start_method, callback, progress):
        """Train `weights` with a fa.optim optimizer in fa.train's loop (EpochRunner); returns
        the passes' losses."""
        settings = RunSettings.for_fit(who, self.workers, start_method, "cpu", None,
                                       optimizer=self.optimizer, lr=self.lr, epochs=self.passes,
                                       optimizer_options=tuple(sorted(self.optimizer_options.items())),
                                       first_epoch=1)
        with EpochRunner(examples, weights, settings, progress) as runner:
            return runner.train(range(1, self.passes + 1), callback)

    def _examples(self, who, X, y=None, sample_weight=None, n_features=None):
        """(X as a checked CSR matrix, y, sample_weight): a file is read with the model's
        hasher; Features give their labels and weights where y and sample_weight are None."""
        if isinstance(X, (str, os.PathLike)):
            X = read_vw(X, Hasher(**self.hasher))
        if isinstance(X, Features):
            if y is None and n_features is None:        # fit's labels
                y = _labelled(who, X.labels, 0)
            if sample_weight is None and (X.weights != 1).any():
                sample_weight = X.weights
            X = sp.csr_matrix((X.values, X.ids, X.offsets), shape=(len(X), 2 ** X.bits))
        elif y is None and n_features is None:
            raise ValueError(f"{who}: give y, the labels of X (a matrix has none)")
        return _rows(who, X, n_features), y, sample_weight

    def _targets(self, who, y, n, classes=None):
        """(the training targets as float32, the classes or None): 0/1 for "logistic", -1/+1
        for "hinge", the labels for "squared" and "quantile"; with oaa=K, (n, K) of each
        class's binary targets (for "logistic" 0/1, else -1/+1) and the classes 1..K. A
        binary loss's classes are y's two values, or `classes` when given (the first chunks'
        of a streamed file)."""
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"{who}: y must hold one label per example ({n}), got shape {y.shape}")
        if self.oaa is not None:
            classes = np.arange(1, self.oaa + 1)
            if y.dtype.kind not in "biuf" or not np.isin(y, classes).all():
                bad = (y[~np.isin(y, classes)][0] if y.dtype.kind in "biuf" else y[0]).item()
                raise ValueError(f"{who}: with oaa={self.oaa} the labels are the classes 1..{self.oaa} "
                                 f"(VW's --oaa), got {bad!r}")
            targets = (y.astype(np.int64)[:, None] == classes[None, :]).astype(np.float32)
            return (targets if self.loss == "logistic" else 2 * targets - 1), classes
        if self.loss in ("squared", "quantile"):
            if y.dtype.kind not in "biuf" or not np.isfinite(y.astype(np.float64)).all():
                raise ValueError(f"{who}: the {self.loss} loss takes finite numbers as labels")
            return y.astype(np.float32), None
        if classes is None:
            classes = np.unique(y)
        positive = y == classes[1] if classes.size == 2 else None
        if positive is None or not (positive | (y == classes[0])).all():
            found = np.unique(np.concatenate([classes, y]))
            raise ValueError(f"{who}: the {self.loss} loss needs two classes, y holds "
                             f"{found.size}: {found[:5]}")
        targets = positive.astype(np.float32)
        return (targets if self.loss == "logistic" else 2 * targets - 1), classes

    _extra_rows = 0      # the rows of W beyond the features (a factorization machine's padding)

    def _new_weights(self, n_features, used=()):
        """The weights a fit starts from, for the features `used` by its examples: W (a number
        a feature, or with oaa=K a row of K) and the bias b (1, or K), zero."""
        if self.oaa is not None:
            return {"W": np.zeros((n_features, self.oaa), np.float32), "b": np.zeros(self.oaa, np.float32)}
        return {"W": np.zeros(n_features, np.float32), "b": np.zeros(1, np.float32)}

    def _pad(self, n_features):
        """The id that BagSampler writes past each example's features (None: none)."""
        return None

    def _logit(self, parameters, ids, offsets, values):
        """The example's logit in the worker's graph (shape (1,), or (1, K) with oaa=K), over
        its leaves (values None: every value is 1, and multiplying by it is left out)."""
        return embedding_bag(parameters["W"], ids, offsets, mode="sum", include_last_offset=True,
                             per_sample_weights=values) + parameters["b"]

    # ------------------------------------------------------------ prediction

    def _is_trained(self):
        return self.weights is not None

    @property
    def n_features(self):
        """The features (columns of X) the model was trained on."""
        self._require_trained("n_features")
        return self.weights["W"].shape[0] - self._extra_rows

    def decision_function(self, X):
        """The logit (the prediction, for "squared" and "quantile") of each example of X (a
        matrix, Features or a VW file, as `fit` takes), float64; with oaa=K, (examples, K),
        each class's."""
        self._require_trained("decision_function")
        X = self._examples(f"{type(self).__name__}.decision_function", X,
                           n_features=self.n_features)[0]
        W = self.weights["W"][:self.n_features].astype(np.float64)
        b = self.weights["b"].astype(np.float64)
        return X @ W + (b if self.oaa is not None else b[0]) + self._pairs(X)

    def _pairs(self, X):
        """The interactions' part of each example's logit (none in a linear model)."""
        return 0.0

    def predict(self, X):
        """Each example's class (a label of y; with oaa=K, the class 1..K of the highest
        score) or, for "squared" and "quantile", its predicted value."""
        scores = self.decision_function(X)
        if self.oaa is not None:
            return self.classes_[np.argmax(scores, axis=1)]
        if self.classes_ is None:
            return scores
        return self.classes_[(scores > 0).astype(np.int64)]

    def predict_proba(self, X):
        """(examples, 2): the probabilities of classes_[0] and classes_[1]; with oaa=K,
        (examples, K): each class's sigmoid, normalised to sum 1 ("logistic" only)."""
        if self.loss != "logistic":
            raise ValueError(f"{type(self).__name__}.predict_proba: the {self.loss} loss gives "
                             f"no probabilities; use loss='logistic'")
        p = 1 / (1 + np.exp(-self.decision_function(X)))
        if self.oaa is not None:
            return p / p.sum(axis=1, keepdims=True)
        return np.stack([1 - p, p], axis=1)

    # ------------------------------------------------------------ files

    def _state(self):
        state = dict(self.weights)
        if self.classes_ is not None:
            state["classes"] = self.classes_
        return state

    def _restore(self, state):
        weights = {name: np.ascontiguousarray(state[name], dtype=np.float32)
                   for name in self._new_weights(1)}
        expected = self._new_weights(weights["W"].shape[0] - self._extra_rows)
        for name, array in weights.items():
            if array.shape != expected[name].shape:
                raise ValueError(f"it holds {name} of shape {array.shape}, expected "
                                 f"{expected[name].shape}")
        self.weights = weights
        self.classes_ = state.get("classes")
        regression = self.loss in ("squared", "quantile") and self.oaa is None
        if (self.classes_ is None) != regression:
            raise ValueError(f"the {self.loss} loss {'has no' if regression else 'needs'} classes")


def _rows(who, X, n_features=None):
    """X as a CSR matrix of float32 values (sorted or not: a row's order is its features'),
    checked: 2-D, finite, n_features columns when given."""
    if sp.issparse(X):
        X = sp.csr_matrix(X, dtype=np.float32)
    else:
        X = np.asarray(X)
        if X.ndim != 2 or X.dtype.kind not in "biuf":
            raise ValueError(f"{who}: X must be a 2-D array or a scipy sparse matrix of numbers "
                             f"(examples x features), got shape {X.shape} and dtype {X.dtype}")
        X = sp.csr_matrix(X.astype(np.float32))
    if X.shape[0] == 0:
        raise ValueError(f"{who}: X holds no examples (shape {X.shape})")
    if not np.isfinite(X.data).all():
        r = int(np.searchsorted(X.indptr, np.flatnonzero(~np.isfinite(X.data))[0], side="right")) - 1
        raise ValueError(f"{who}: example {r} of X holds a value that is not finite")
    if n_features is not None and X.shape[1] != n_features:
        raise ValueError(f"{who}: X has {X.shape[1]} features (columns), the model "
                         f"{n_features}")
    return X


def _importance(who, sample_weight, n):
    """The importance weight of each example as float32, or None."""
    if sample_weight is None:
        return None
    w = np.asarray(sample_weight, dtype=np.float64)
    if w.shape != (n,) or not np.isfinite(w).all() or (w < 0).any():
        raise ValueError(f"{who}: sample_weight must hold one finite, non-negative weight per "
                         f"example ({n}), got shape {w.shape}")
    return w.astype(np.float32)


class _Examples:
    """The training examples (CSR: each row a bag of feature ids and values), their targets
    and the model's graph settings: a picklable `runner.ModelDescription`."""

    def __init__(self, model, X, targets, importance):
        self.model = model
        self.ids, self.offsets = X.indices, X.indptr.astype(np.int64)
        self.values = None if (X.data == 1).all() else X.data      # None: binary features
        self.n_features = X.shape[1]
        self.targets, self.importance = targets, importance
        self.longest = max(1, int(np.diff(self.offsets).max()))

    def worker_graph(self, weights, settings: RunSettings, rank: int) -> "_ExampleGraph":
        return _ExampleGraph(self, weights, rank, settings.workers)


class _ExampleGraph:
    """One worker's graph: the example's logit and its loss; a `runner.WorkerGraph`."""

    def __init__(self, examples, weights, rank, workers):
        self.examples, self.rank, self.workers = examples, rank, workers
        self.parameters = {name: Parameter(array) for name, array in weights.items()}
        self.ids = IndexInput(np.zeros(examples.longest, dtype=np.int64))
        self.offsets = IndexInput(np.zeros(2, dtype=np.int64))
        self.values = (None if examples.values is None
                       else Input(np.zeros(examples.longest, dtype=np.float32)))
        model = examples.model
        self.target = Input(np.zeros((1, model.oaa) if model.oaa else 1, dtype=np.float32))
        logit = model._logit(self.parameters, self.ids, self.offsets, self.values)
        if model.loss == "quantile":
            error = self.target - logit
            loss = fa_sum(model.quantile_tau * relu(error) + (1 - model.quantile_tau) * relu(-error))
        else:
            loss = {"logistic": bce_with_logits, "squared": mse, "hinge": hinge}[model.loss](
                logit, self.target, reduction="sum")
        self.importance = None
        if examples.importance is not None:
            self.importance = Input(np.zeros(1, dtype=np.float32))
            loss = loss * self.importance
        self.loss = loss

    def epoch_data(self, epoch):
        ex = self.examples
        feeds = {self.target: ex.targets[:, None] if ex.targets.ndim == 1 else ex.targets[:, None, :]}
        if self.importance is not None:
            feeds[self.importance] = ex.importance[:, None]
        return BagSampler(self.ids, self.offsets, ex.ids, ex.offsets, feeds, shuffle=ex.model.shuffle,
                          seed=[ex.model.seed, epoch], rank=self.rank, workers=self.workers,
                          weights_leaf=self.values, weights=ex.values,
                          pad=ex.model._pad(ex.n_features))

    def epoch_loss(self, mean, sampler):
        return mean, sampler.epoch_examples


def used_rows(X):
    """The feature ids (columns) the examples of CSR X use, sorted."""
    return np.flatnonzero(np.bincount(X.indices, minlength=X.shape[1]))


def threads_only(who, start_method, what):
    """A compiled loop of its own runs its Hogwild workers as threads: start_method None or
    "threads"."""
    if start_method not in (None, "threads"):
        raise ValueError(f"{who}: {what} runs its workers as threads (start_method None or 'threads'), "
                         f"got {start_method!r}")


def _labelled(who, labels, start):
    """The labels of examples start, start + 1, ...; an unlabelled one (NaN) is an error."""
    if np.isnan(labels).any():
        raise ValueError(f"{who}: example {start + int(np.argmax(np.isnan(labels)))} has no label (NaN); "
                         f"give y or label every line")
    return labels


#: A block of examples that optimizer="vw" trains: CSR bags (ids int32, offsets int64, values
#: float32 or None for all ones), their targets (VW's: -1/+1 for "logistic") and importance
#: weights (or None).
_Block = namedtuple("_Block", "ids offsets values targets importance")


def _block(model, ids, offsets, values, targets, importance):
    """The _Block of CSR examples and their targets (as LinearModel._targets gives them)."""
    targets = 2 * targets - 1 if model.loss == "logistic" else targets       # VW's -1/+1
    return _Block(ids.astype(np.int32, copy=False), offsets.astype(np.int64, copy=False),
                  None if (values == 1).all() else values,
                  np.ascontiguousarray(targets, dtype=np.float32), importance)


class _Whole:
    """The examples in memory as one block, and their classes."""

    def __init__(self, classes, blocks):
        self.classes, self.blocks = classes, blocks

    def __iter__(self):
        return iter(self.blocks)

    def close(self):
        """Nothing to end (the _FileBlocks' counterpart)."""


class _FileBlocks:
    """The blocks of a VW file's examples, CHUNK at a time, parsed in a thread of their own
    (fa.features' parser runs without the GIL) a chunk or two ahead of the training: the file
    is never held whole. A binary loss's classes are those of the first chunks that hold two
    (those chunks held back until then); `classes` once read. The parser guarantees finite
    values and importance weights; a label is checked as it comes."""

    def __init__(self, model, who, path):
        self.model, self.who, self.path = model, who, path
        self.classes = None
        self.chunks = _Ahead(iter_vw(path, Hasher(**model.hasher), chunk=CHUNK))    # parsing from now

    def close(self):
        """End the parsing thread (`fit` closes the blocks when done, or on an error)."""
        self.chunks.close()

    def __iter__(self):
        model, who = self.model, self.who
        binary = model.loss in ("logistic", "hinge") and model.oaa is None
        held, seen, start = [], np.empty(0), 0
        for chunk in self.chunks:
            if not len(chunk):                 # an empty file's
                continue
            _labelled(who, chunk.labels, start)
            start += len(chunk)
            if binary and self.classes is None:
                held.append(chunk)
                seen = np.union1d(seen, chunk.labels)      # the held chunks' labels
                if seen.size < 2:
                    continue
                self.classes = model._targets(who, seen, seen.size)[1]     # two, or its error
                chunks, held = held, []
            else:
                chunks = [chunk]
            for c in chunks:
                targets, self.classes = model._targets(who, c.labels, len(c), self.classes)
                yield _block(model, c.ids, c.offsets, c.values, targets,
                             c.weights if (c.weights != 1).any() else None)
        if held:                               # one class in the whole file: _targets' error
            model._targets(who, np.concatenate([c.labels for c in held]), start)
        if start == 0:
            raise ValueError(f"{who}: {os.fspath(self.path)} holds no examples")


class _Ahead:
    """The items of iterator `items`, made in a thread of its own, started at once, up to
    `depth` ahead of their use (its compiled work, without the GIL, beside the caller's: a
    parser's first chunk beside the allocation of the weights); an error there is raised
    where its item would have come. `close()` (after iterating, or instead) ends the thread
    and closes `items`."""

    _END = object()

    def __init__(self, items, depth=2):
        self.items, self.made, self.stop = items, queue.Queue(depth), threading.Event()
        self.thread = threading.Thread(target=self._produce, name="fastad-parse", daemon=True)
        self.thread.start()

    def _produce(self):
        try:
            for item in self.items:
                if self.stop.is_set():
                    break
                self.made.put((item, None))
            self.made.put((self._END, None))
        except BaseException as exc:           # handed to the consumer
            self.made.put((self._END, exc))
        finally:
            self.items.close()

    def __iter__(self):
        while True:
            item, error = self.made.get()
            if error is not None:
                raise error
            if item is self._END:
                return
            yield item

    def close(self):
        self.stop.set()
        while self.thread.is_alive():          # unblock a producer waiting on a full queue
            try:
                self.made.get(timeout=0.01)
            except queue.Empty:
                pass
        self.thread.join()


def _fit_online(model, blocks, n_features, callback, progress):
    """(new weights trained with VW's update (_online.pyx) over `blocks`, each pass's
    progressive loss (VW's average loss) as `run_passes`)."""
    classes = model.oaa or 1
    update = OnlineUpdate(n_features, classes, model.loss, model.quantile_tau, model.lr)

    def train(block, parts, pool):
        args = (block.ids, block.offsets, block.values, block.targets.reshape(-1), block.importance)
        if len(parts) == 1:
            return update.train(*args, parts[0])
        workers = [update.worker() for _ in parts]
        total = sum(pool.map(lambda w, part: w.train(*args, part), workers, parts))
        update.merge(workers)
        return total

    history = run_passes(model, blocks, train, callback, progress)
    weights = model._new_weights(n_features)
    update.write_back(weights)          # nothing reads the model's arrays between passes
    return weights, history


def run_passes(model, blocks, train, callback, progress):
    """The passes of a compiled loop of its own (_online.pyx): each block's examples (a block
    has `targets`, examples or examples x classes, and `importance`, or None) in order or
    shuffled, split among `workers` Hogwild threads, `train(block, parts, pool)` training them
    and returning the sum of importance * loss; `blocks` is iterated once (a file's are made
    as they are trained) and kept for the passes after the first. Returns each pass's
    progressive loss (the mean importance-weighted loss of the examples before their
    updates, per class)."""
    history, done, kept = [], 0, []
    with ThreadPoolExecutor(model.workers) as pool:
        for epoch in range(1, model.passes + 1):
            started = time.perf_counter()
            total = weight = 0.0
            n = 0
            for block in (blocks if epoch == 1 else kept):
                if epoch == 1 and model.passes > 1:
                    kept.append(block)
                rows = block.targets.shape[0]
                order = (np.random.default_rng([model.seed, epoch]).permutation(rows) if model.shuffle
                         else np.arange(rows))
                total += train(block, [order] if model.workers == 1 else np.array_split(order, model.workers), pool)
                weight += rows if block.importance is None else float(block.importance.sum())
                n += rows
                classes = block.targets.shape[1] if block.targets.ndim == 2 else 1
            loss = total / max(weight * classes, 1e-300)
            history.append(loss)
            done += n
            if progress is not None:
                progress(done, n / max(time.perf_counter() - started, 1e-9))
            if callback is not None:
                callback(epoch, loss)
    return history

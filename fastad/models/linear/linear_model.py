"""`fa.models.LinearModel`: a linear model over sparse features (hashed ones, as Vowpal
Wabbit's), and the data and worker graph it shares with `FactorizationMachine`.

An example is a row of a sparse matrix (or of `fa.features`' bags, from a VW file): its
features' ids and values, one bag of any length (`fa.data.BagSampler` with per-id values),
trained by `fa.train`'s compiled loop in this process or in Hogwild workers; predictions
are sparse products in numpy."""
import os

import numpy as np
import scipy.sparse as sp

from fastad.training.feeds import BagSampler
from fastad.features import Features, Hasher, read_vw
from fastad._engine.graph import IndexInput, Input, Parameter
from fastad.ops.losses import bce_with_logits, hinge, mse
from fastad.ops.sparse import embedding_bag
from fastad.checks import check_callable, check_choice, check_flag, check_int, check_number, check_sizes
from fastad.models.base import Model
from fastad.models.runner import OPTIMIZERS, EpochRunner, RunSettings, optimizer_options_of

__all__ = ["LinearModel"]

LOSSES = ("logistic", "squared", "hinge")


class LinearModel(Model):
    """A linear model over sparse features: logit = b + sum over the example's features of
    value * W[feature], trained per example (as Vowpal Wabbit trains).

    loss         "logistic" (binary labels, `predict_proba`), "hinge" (binary labels, a
                 linear SVM) or "squared" (regression)
    optimizer    "adagrad" (the default: adaptive per feature, as VW's default update),
                 "sgd", "adam" or "ftrl" (FTRL-Proximal, `fa.optim.FTRL`, lr its alpha)
    optimizer_options   the optimizer's other keyword arguments: {"l1": 1.0, "l2": 1.0}
                 for FTRL's terms, {"weight_decay": 1e-4}, ...
    lr           the learning rate
    passes       passes over the training examples (VW's `--passes`)
    workers      Hogwild threads or processes; 1 is deterministic for a seed
    shuffle      visit the examples in a new random order each pass (else in their order,
                 as VW reads its file)
    seed         the seed of the shuffle (and of a factorization machine's factors)
    hasher       how a VW-format file given to `fit` or a prediction is hashed: a
                 `fa.features.Hasher` or its settings (None: `Hasher()`, 18 bits)

    The examples X are a scipy sparse matrix (or a dense array) of examples x features
    (row r holds example r's feature values at the columns of its (hashed) feature ids;
    its number of columns is the model's number of features); or `fa.features.Features`
    (2**bits features; its labels and importance weights are y and sample_weight unless
    given); or the path of a file in VW's text format, read by `fa.features.read_vw` with
    the model's hasher. Binary labels are any two values (classes_, sorted; the second is
    the positive class).

    >>> model = fa.models.LinearModel(loss="logistic", passes=2).fit("train.vw")
    >>> fa.metrics.roc_auc(test_labels, model.decision_function("test.vw"))

    Not yet: VW's normalised and invariant updates, the quantile loss, multiclass (one
    against all).
    """

    def __init__(self, loss="logistic", optimizer="adagrad", lr=0.1, passes=1, workers=1,
                 shuffle=False, seed=0, hasher=None, optimizer_options=None):
        who = type(self).__name__
        if isinstance(hasher, Hasher):
            hasher = hasher.settings()
        elif hasher is not None and not isinstance(hasher, dict):
            raise TypeError(f"{who}: hasher must be a fa.features.Hasher or its settings (a "
                            f"dict), got {type(hasher).__name__}")
        self.hasher = Hasher(**(hasher or {})).settings()      # checked by Hasher
        self.loss = check_choice(who, "loss", loss, LOSSES)
        self.optimizer = check_choice(who, "optimizer", optimizer, sorted(OPTIMIZERS))
        self.lr = check_number(who, "lr", lr, above=0)
        self.optimizer_options = dict(optimizer_options_of(who, self.optimizer, optimizer_options,
                                                           self.lr))
        self.passes, self.workers = check_sizes(who, passes=passes, workers=workers)
        self.shuffle = check_flag(who, "shuffle", shuffle)
        self.seed = check_int(who, "seed", seed, minimum=0)
        self.weights = self.classes_ = None
        self.history = []

    # ------------------------------------------------------------ training

    def fit(self, X, y=None, sample_weight=None, callback=None, progress=None, start_method=None):
        """Train for `passes` from new weights; returns self.

        X              the examples: a scipy sparse matrix or a dense array (examples x
                       features), `fa.features.Features`, or a VW-format file's path
        y              a label per example: two values for "logistic" and "hinge", numbers
                       for "squared" (from the features or the file when None)
        sample_weight  an importance weight per example (VW's importance), or None (the
                       features' or the file's)
        callback       `callback(pass, loss)` after each pass (from 1)
        progress       `progress(done, per_second)` as examples are trained
        start_method   how `workers` > 1 run: "threads", "fork" or "spawn"
        """
        who = f"{type(self).__name__}.fit"
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        X, y, sample_weight = self._examples(who, X, y, sample_weight)
        targets, classes = self._targets(who, y, X.shape[0])
        importance = _importance(who, sample_weight, X.shape[0])
        settings = RunSettings.for_fit(who, self.workers, start_method, "cpu", None,
                                       optimizer=self.optimizer, lr=self.lr, epochs=self.passes,
                                       optimizer_options=tuple(sorted(self.optimizer_options.items())),
                                       first_epoch=1)
        examples = _Examples(self, X, targets, importance)
        weights = self._new_weights(X.shape[1], np.unique(X.indices))
        with EpochRunner(examples, weights, settings, progress) as runner:
            history = runner.train(range(1, self.passes + 1), callback)
        self.weights, self.classes_, self.history = weights, classes, history
        return self

    def _examples(self, who, X, y=None, sample_weight=None, n_features=None):
        """(X as a checked CSR matrix, y, sample_weight): a file is read with the model's
        hasher; Features give their labels and weights where y and sample_weight are None."""
        if isinstance(X, (str, os.PathLike)):
            X = read_vw(X, Hasher(**self.hasher))
        if isinstance(X, Features):
            if y is None and n_features is None:        # fit's labels
                y = X.labels
                if np.isnan(y).any():
                    line = int(np.argmax(np.isnan(y)))
                    raise ValueError(f"{who}: example {line} has no label (NaN); give y or "
                                     f"label every line")
            if sample_weight is None and (X.weights != 1).any():
                sample_weight = X.weights
            X = sp.csr_matrix((X.values, X.ids, X.offsets), shape=(len(X), 2 ** X.bits))
        elif y is None and n_features is None:
            raise ValueError(f"{who}: give y, the labels of X (a matrix has none)")
        return _rows(who, X, n_features), y, sample_weight

    def _targets(self, who, y, n):
        """(the training targets as float32, the classes or None): 0/1 for "logistic", -1/+1
        for "hinge", the labels for "squared"."""
        y = np.asarray(y)
        if y.ndim != 1 or y.shape[0] != n:
            raise ValueError(f"{who}: y must hold one label per example ({n}), got shape {y.shape}")
        if self.loss == "squared":
            if y.dtype.kind not in "biuf" or not np.isfinite(y.astype(np.float64)).all():
                raise ValueError(f"{who}: the squared loss takes finite numbers as labels")
            return y.astype(np.float32), None
        classes, positive = np.unique(y, return_inverse=True)
        if classes.size != 2:
            raise ValueError(f"{who}: the {self.loss} loss needs two classes, y holds "
                             f"{classes.size}: {classes[:5]}")
        targets = positive.astype(np.float32)
        return (targets if self.loss == "logistic" else 2 * targets - 1), classes

    _extra_rows = 0      # the rows of W beyond the features (a factorization machine's padding)

    def _new_weights(self, n_features, used=()):
        """The weights a fit starts from, for the features `used` by its examples: W (a number
        a feature) and the bias b, zero."""
        return {"W": np.zeros(n_features, np.float32), "b": np.zeros(1, np.float32)}

    def _pad(self, n_features):
        """The id that BagSampler writes past each example's features (None: none)."""
        return None

    def _logit(self, parameters, ids, offsets, values):
        """The example's logit in the worker's graph (shape (1,)), over its leaves (values
        None: every value is 1, and multiplying by it is left out)."""
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
        """The logit (the prediction, for "squared") of each example of X (a matrix,
        Features or a VW file, as `fit` takes), float64."""
        self._require_trained("decision_function")
        X = self._examples(f"{type(self).__name__}.decision_function", X,
                           n_features=self.n_features)[0]
        W = self.weights["W"][:self.n_features].astype(np.float64)
        return X @ W + float(self.weights["b"][0]) + self._pairs(X)

    def _pairs(self, X):
        """The interactions' part of each example's logit (none in a linear model)."""
        return 0.0

    def predict(self, X):
        """Each example's class (a label of y) or, for "squared", its predicted value."""
        scores = self.decision_function(X)
        if self.loss == "squared":
            return scores
        return self.classes_[(scores > 0).astype(np.int64)]

    def predict_proba(self, X):
        """(examples, 2): the probabilities of classes_[0] and classes_[1] ("logistic" only)."""
        if self.loss != "logistic":
            raise ValueError(f"{type(self).__name__}.predict_proba: the {self.loss} loss gives "
                             f"no probabilities; use loss='logistic'")
        p = 1 / (1 + np.exp(-self.decision_function(X)))
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
        if (self.classes_ is None) != (self.loss == "squared"):
            raise ValueError(f"the {self.loss} loss {'has no' if self.loss == 'squared' else 'needs'} "
                             f"classes")


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
        self.target = Input(np.zeros(1, dtype=np.float32))
        model = examples.model
        logit = model._logit(self.parameters, self.ids, self.offsets, self.values)
        loss = {"logistic": bce_with_logits, "squared": mse, "hinge": hinge}[model.loss](
            logit, self.target)
        self.importance = None
        if examples.importance is not None:
            self.importance = Input(np.zeros(1, dtype=np.float32))
            loss = loss * self.importance
        self.loss = loss

    def epoch_data(self, epoch):
        ex = self.examples
        feeds = {self.target: ex.targets[:, None]}
        if self.importance is not None:
            feeds[self.importance] = ex.importance[:, None]
        return BagSampler(self.ids, self.offsets, ex.ids, ex.offsets, feeds, shuffle=ex.model.shuffle,
                          seed=[ex.model.seed, epoch], rank=self.rank, workers=self.workers,
                          weights_leaf=self.values, weights=ex.values,
                          pad=ex.model._pad(ex.n_features))

    def epoch_loss(self, mean, sampler):
        return mean, sampler.epoch_examples

"""`fa.models.FactorizationMachine`: Rendle's factorization machine over sparse features,
a `LinearModel` whose logit adds every pair of the example's features' interaction."""
import os

import numpy as np
import scipy.sparse as sp

from fastad.features import Features, Hasher, read_vw
from fastad.ops.reduction import sum as fa_sum
from fastad.ops.shape import reshape
from fastad.ops.sparse import embedding
from fastad.checks import check_callable, check_flag, check_number, check_sizes
from fastad.models.linear._online import FieldAwareUpdate, ffm_logits, renumber, unit_rows
from fastad.models.linear.linear_model import LinearModel, _Examples, _importance, run_passes, threads_only

__all__ = ["FactorizationMachine"]


class FactorizationMachine(LinearModel):
    """A factorization machine (Rendle 2010): logit = b + sum_i x_i W[i] + sum over pairs
    i < j of x_i x_j <V[i], V[j]>, computed as 1/2 (|sum_i x_i V[i]|^2 - sum_i x_i^2 |V[i]|^2)
    over the example's features i with their values x_i; trained per example, as libFM's
    SGD and VW's `--lrq`/quadratic interactions are.

    k         the factors of a feature (V's columns)
    init_std  the factors of the features the training examples use start normal(0,
              init_std), the others (a hashed table's unused rows) and W and b at zero
    optimizer "adagrad" (the default) on the logistic or squared loss: libffm's AdaGrad
              (each accumulator from 1), lr 0.5 when None (libffm's 0.2 learns slowly on
              small data: ADAGRAD_LR), in the compiled loop of
              ffm.h (no graph; Hogwild workers as threads; no optimizer_options), trained on
              tables of the used rows only; any other optimizer or loss: fa.optim's, in
              fa.train's loop (a graph per example, BagSampler)
    normalize libffm's instance-wise normalisation (the default): each example's values are
              divided by their norm, in training and in predictions (a feature met twice
              stays two positions); False takes the values as they are
    interactions  None (every pair of the example's features), or "ab", two namespaces'
              first letters: only the pairs of a feature of namespace a and one of b (VW's
              --lrq ab<k>), sum_f (sum_a x V[a, f]) (sum_b x V[b, f]), beside every feature's
              linear term; from Features or a VW file (namespaces), by "adagrad"

    oaa       None, or K: multiclass one against all (VW's --oaa K with --lrq), K factorization
              machines, one a class, each trained on every example towards its class's
              binary target (as LinearModel's oaa): V, W and b hold a class axis after the
              rows' ((rows, K, k), (rows, K), (K,)); class 1's factors start as a binary
              model's of the same seed (the classes' draws follow one another); by any
              optimizer and form, and `predict`, `predict_proba` and `decision_function`
              as LinearModel's

    The other arguments, `fit`, `predict`, `predict_proba` and `decision_function` are
    `LinearModel`'s, but the optimizer "vw": VW's normalised rule, given a
    factor's derivative of the logit as its input (as VW's --lrq features are), diverges on
    the bench's data, as VW's --lrq does there. V and W hold one row more than the features:
    the padding row that BagSampler writes past each example's features (`pad=`), which no
    example trains.

    field_aware  libffm's field-aware form (Juan et al. 2016): V holds a k-vector per feature
                 and field, (rows, fields, k), and a pair of features i, j of fields f, g adds
                 x_i x_j <V[i, g], V[j, f]>; trained by "adagrad" only, "logistic" or
                 "squared". The fields are the features' namespaces (`Features.fields`:
                 a VW file's, or the namespaces of CSV or JSON columns), or for a matrix
                 `fit(X, y, fields=...)`, each column's field (an int), which the model keeps
                 for its predictions on matrices. A field not seen in training takes no pair.

    >>> fm = fa.models.FactorizationMachine(k=8, passes=2).fit(X_train, y_train)
    >>> fa.metrics.roc_auc(y_test, fm.decision_function(X_test))
    >>> ffm = fa.models.FactorizationMachine(k=4, field_aware=True).fit("train.vw")
    """

    _extra_rows = 1

    def __init__(self, k=8, init_std=0.1, loss="logistic", optimizer="adagrad", lr=None,
                 passes=1, workers=1, shuffle=False, seed=0, hasher=None, optimizer_options=None,
                 quantile_tau=0.5, field_aware=False, interactions=None, normalize=True, oaa=None):
        if lr is None and _compiled(optimizer, loss):
            lr = ADAGRAD_LR
        super().__init__(loss=loss, optimizer=optimizer, lr=lr, passes=passes, workers=workers,
                         shuffle=shuffle, seed=seed, hasher=hasher, optimizer_options=optimizer_options,
                         quantile_tau=quantile_tau, oaa=oaa)
        (self.k,) = check_sizes(type(self).__name__, k=k)
        self.init_std = check_number(type(self).__name__, "init_std", init_std, at_least=0)
        self.field_aware = check_flag(type(self).__name__, "field_aware", field_aware)
        self.normalize = check_flag(type(self).__name__, "normalize", normalize)
        self.fields_ = self.column_fields_ = None
        self.interactions = interactions
        if interactions is not None and (not isinstance(interactions, str) or len(interactions) != 2
                                         or interactions[0] == interactions[1] or field_aware
                                         or not self._compiled() or not interactions.isascii()):
            raise ValueError(f"{type(self).__name__}: interactions takes two different namespaces' first "
                             f"letters (VW's --lrq ab: 'cw'), without field_aware, trained by 'adagrad' "
                             f"on the logistic or squared loss; got {interactions!r}")
        if self._compiled() and self.optimizer_options:
            raise ValueError(f"{type(self).__name__}: optimizer 'adagrad' trains as libffm (its "
                             f"accumulators from 1) and takes no optimizer_options, got "
                             f"{self.optimizer_options!r}")
        if self.field_aware and not self._compiled():
            raise ValueError(f"{type(self).__name__}: the field-aware form trains as libffm, by Adagrad "
                             f"without optimizer_options, on the logistic or squared loss; got optimizer "
                             f"{self.optimizer!r}, loss {self.loss!r}")
        if self.optimizer == "vw":
            raise ValueError(f"{type(self).__name__}: optimizer 'vw' is LinearModel's (its normalised "
                             f"rule diverges on a factorization machine's factors); use 'adagrad', "
                             f"'sgd', 'adam' or 'ftrl'")

    def _new_weights(self, n_features, used=()):
        """V's rows of the features used drawn normal(0, init_std) (in the order of their
        ids; with oaa=K, class by class), the others zero: a hashed table's unused rows cost
        no drawing and add nothing to a prediction; W and b zero."""
        rows, used = n_features + 1, np.asarray(used, dtype=np.int64)
        classes = () if self.oaa is None else (self.oaa,)
        shape = (len(self.fields_), self.k) if self.field_aware else (self.k,)
        V = np.zeros((rows, *classes, *shape), np.float32)
        draws = np.random.default_rng(self.seed).normal(0, self.init_std, (*classes, used.size, *shape))
        V[used] = np.moveaxis(draws, 0, 1) if classes else draws
        return {"V": V, **super()._new_weights(rows)}

    def _pad(self, n_features):
        return n_features

    def _logit(self, parameters, ids, offsets, values):
        rows = embedding(parameters["V"], ids, padding_idx=parameters["V"].shape[0] - 1)
        linear = super()._logit(parameters, ids, offsets, values)
        if self.oaa is None:        # rows: (positions, k)
            scaled = rows if values is None else rows * reshape(values, (ids.shape[0], 1))
            total = fa_sum(scaled, axis=0)
            return linear + 0.5 * (fa_sum(total * total) - fa_sum(scaled * scaled))
        # rows: (positions, K, k), each class's pairs summed over its k factors
        scaled = rows if values is None else rows * reshape(values, (ids.shape[0], 1, 1))
        total = fa_sum(scaled, axis=0)
        pairs = 0.5 * (fa_sum(total * total, axis=1) - fa_sum(fa_sum(scaled * scaled, axis=0), axis=1))
        return linear + reshape(pairs, (1, self.oaa))

    def _pairs(self, X):
        n = self.n_features
        V = self.weights["V"][:n].astype(np.float64).reshape(n, -1, self.k)     # (features, classes, k)
        XV = (X @ V.reshape(n, -1)).reshape(X.shape[0], -1, self.k)
        squares = X.copy()      # each position's value squared: a feature met twice counts twice
        squares.data = squares.data.astype(np.float64) ** 2
        pairs = 0.5 * ((XV * XV).sum(axis=2) - squares @ (V * V).sum(axis=2))
        return pairs if self.oaa is not None else pairs[:, 0]

    # ------------------------------------------------------------ the field-aware form

    def fit(self, X, y=None, sample_weight=None, callback=None, progress=None, start_method=None, fields=None):
        """`LinearModel.fit`; `fields` (field_aware=True, X a matrix): each column's field, ints."""
        who = f"{type(self).__name__}.fit"
        if not self.field_aware and fields is not None:
            raise ValueError(f"{who}: fields= is the field-aware form's (field_aware=True)")
        if not self._compiled():
            return super().fit(X, y, sample_weight, callback, progress, start_method)
        check_callable(who, "callback", callback)
        check_callable(who, "progress", progress)
        threads_only(who, start_method, "optimizer 'adagrad'")
        X = self._read(X)
        rows, y, sample_weight = self._examples(who, X, y, sample_weight)
        if self.field_aware:
            column_fields = None if isinstance(X, Features) else _column_fields(who, fields, rows.shape[1])
            raw = self._raw_fields(who, X, rows, column_fields)
            self.fields_, self.column_fields_ = np.unique(raw).astype(np.int64), column_fields
            positions = self._positions(raw)
        else:
            positions = self._sides(who, X, rows)
        targets, classes = self._targets(who, y, rows.shape[0])
        examples = _Examples(self, rows, targets, _importance(who, sample_weight, rows.shape[0]))
        # trained on tables of the used rows only (their ids renumbered in order): a hashed
        # table's few used rows then share cache lines and pages; the same draws as
        # _new_weights' over the whole table, which they are put back into
        used, ids = renumber(examples.ids.astype(np.int32, copy=False), rows.shape[1])
        compact = self._new_weights(used.size, np.arange(used.size))
        # one update a class (one in all without oaa), each over its views of the tables
        updates, class_targets = [], []
        for c, weights in enumerate(self._class_weights(compact)):
            updates.append(FieldAwareUpdate(weights, self.lr, self.loss == "logistic",
                                            self.interactions is not None))
            class_targets.append(np.ascontiguousarray(examples.targets.reshape(rows.shape[0], -1)[:, c],
                                                      dtype=np.float32))

        def train_part(block, part):
            return sum(update.train(ids, block.offsets, block.values, positions, targets, block.importance, part)
                       for update, targets in zip(updates, class_targets))

        def train(block, parts, pool):
            return sum(pool.map(lambda part: train_part(block, part), parts))

        history = run_passes(self, [examples], train, callback, progress)
        for update in updates:
            update.write_back()
        weights = self._new_weights(rows.shape[1])
        for name in ("V", "W"):
            weights[name][used] = compact[name][:used.size]
        weights["b"][:] = compact["b"]
        self.weights, self.classes_, self.history = weights, classes, history
        return self

    def _class_weights(self, weights):
        """Each class's tables as views of `weights` (one class without oaa), in the forms
        FieldAwareUpdate and ffm_logits take: W (rows), b (1), V (rows, fields, k)."""
        rows = weights["W"].shape[0]
        V = weights["V"].reshape(rows, self.oaa or 1, -1, self.k)      # a view
        if self.oaa is None:
            return [{"W": weights["W"], "b": weights["b"], "V": V[:, 0]}]
        return [{"W": weights["W"][:, c], "b": weights["b"][c:c + 1], "V": V[:, c]} for c in range(self.oaa)]

    def _compiled(self):
        """Whether fit trains in the compiled loop of ffm.h rather than in fa.train's."""
        return _compiled(self.optimizer, self.loss)

    def _examples(self, who, X, y=None, sample_weight=None, n_features=None):
        """LinearModel's, each example's values divided by their norm when normalize (libffm's
        instance-wise normalisation; an example without features as it is)."""
        rows, y, sample_weight = super()._examples(who, X, y, sample_weight, n_features)
        if self.normalize:         # in place of each position (a feature met twice stays two)
            data = unit_rows(np.ascontiguousarray(rows.data, dtype=np.float32), rows.indptr.astype(np.int64))
            rows = sp.csr_matrix((data, rows.indices, rows.indptr), shape=rows.shape)
        return rows, y, sample_weight

    def decision_function(self, X):
        if not self.field_aware and self.interactions is None:
            return super().decision_function(X)
        self._require_trained("decision_function")
        who = f"{type(self).__name__}.decision_function"
        X = self._read(X)
        rows = self._examples(who, X, n_features=self.n_features)[0]
        if self.field_aware:
            if not isinstance(X, Features) and self.column_fields_ is None:
                raise ValueError(f"{who}: this model learned its fields from Features (namespaces); give "
                                 f"Features or a VW file, not a matrix")
            positions = self._positions(self._raw_fields(who, X, rows, self.column_fields_))
        else:
            positions = self._sides(who, X, rows)
        values = None if (rows.data == 1).all() else rows.data
        ids, offsets = rows.indices.astype(np.int32, copy=False), rows.indptr.astype(np.int64)
        tables = self.weights
        if self.oaa is not None:    # a class's tables are strided: copy the rows used, not all
            used, ids = renumber(ids, self.n_features)
            tables = {"W": tables["W"][used], "V": tables["V"][used], "b": tables["b"]}
        logits = [ffm_logits({name: np.ascontiguousarray(array) for name, array in weights.items()},
                             ids, offsets, values, positions, self.interactions is not None)
                  for weights in self._class_weights(tables)]
        return np.stack(logits, axis=1) if self.oaa is not None else logits[0]

    decision_function.__doc__ = LinearModel.decision_function.__doc__

    def _read(self, X):
        """A VW file's path read as Features (which keep their fields)."""
        return read_vw(X, Hasher(**self.hasher)) if isinstance(X, (str, os.PathLike)) else X

    def _sides(self, who, X, rows):
        """The one-field model's field of each position (int32): 0 for every pair; with
        interactions "ab", 0 for namespace a, 1 for b, -1 for the others."""
        if self.interactions is None:
            return np.zeros(rows.nnz, np.int32)
        if not isinstance(X, Features):
            raise ValueError(f"{who}: interactions={self.interactions!r} pairs namespaces: give Features "
                             f"or a VW file, not a matrix")
        side = np.full(256, -1, np.int32)          # Features.fields are uint8
        side[[ord(name) for name in self.interactions]] = (0, 1)
        return side[self._raw_fields(who, X, rows, None)]

    def _raw_fields(self, who, X, rows, column_fields):
        """Each position's field as given (Features' namespace index, or its column's field)."""
        if isinstance(X, Features):
            if X.fields is None:
                raise ValueError(f"{who}: these Features hold no fields (Features.fields); read them with "
                                 f"fa.features' readers")
            return X.fields
        return column_fields[rows.indices]

    def _positions(self, raw):
        """Each position's field number (int32, the index in fields_), -1 for a field not seen
        in training."""
        at = np.minimum(np.searchsorted(self.fields_, raw), len(self.fields_) - 1)
        return np.where(self.fields_[at] == raw, at, -1).astype(np.int32)

    def _state(self):
        state = super()._state()
        if self.field_aware:
            state["fields"] = self.fields_
            if self.column_fields_ is not None:
                state["column_fields"] = self.column_fields_
        return state

    def _restore(self, state):
        if self.field_aware:
            if "fields" not in state:
                raise ValueError("a field-aware model's file holds its fields; this one has none")
            self.fields_ = np.asarray(state["fields"], dtype=np.int64)
            column = state.get("column_fields")
            self.column_fields_ = None if column is None else np.asarray(column, dtype=np.int64)
        super()._restore(state)


#: The compiled AdaGrad's learning rate when lr is None: above libffm's 0.2 (its -r), at
#: which normalised examples (each value about 1/sqrt(features)) learn slowly on small data:
#: on bench/sparse_models.py's files (interactions="cw", init_std 0.1) 0.5 gives test AUC
#: 0.694 at 1 pass on 15,000 lines (0.2: 0.636; VW -q cw 0.692) and 0.715 on 60,000 (0.2:
#: 0.714; VW 0.707); at 5 passes 0.697 and 0.701 (VW 0.679 and 0.691).
ADAGRAD_LR = 0.5


def _compiled(optimizer, loss):
    """Whether a factorization machine of this optimizer and loss trains in ffm.h's compiled
    loop ("adagrad" on the logistic or squared loss, as libffm)."""
    return optimizer == "adagrad" and loss in ("logistic", "squared")


def _column_fields(who, fields, n_features):
    """A matrix's column fields: ints >= 0, one per column."""
    if fields is None:
        raise ValueError(f"{who}: the field-aware form of a matrix needs fields=, each column's field "
                         f"({n_features} ints)")
    fields = np.asarray(fields)
    if fields.shape != (n_features,) or fields.dtype.kind not in "iu" or (fields < 0).any():
        raise ValueError(f"{who}: fields must hold one int >= 0 per column of X ({n_features}), got "
                         f"shape {fields.shape} and dtype {fields.dtype}")
    return fields.astype(np.int64)

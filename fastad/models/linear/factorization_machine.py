"""`fa.models.FactorizationMachine`: Rendle's factorization machine over sparse features,
a `LinearModel` whose logit adds every pair of the example's features' interaction."""
import numpy as np

from fastad.ops.reduction import sum as fa_sum
from fastad.ops.shape import reshape
from fastad.ops.sparse import embedding
from fastad.checks import check_number, check_sizes
from fastad.models.linear.linear_model import LinearModel

__all__ = ["FactorizationMachine"]


class FactorizationMachine(LinearModel):
    """A factorization machine (Rendle 2010): logit = b + sum_i x_i W[i] + sum over pairs
    i < j of x_i x_j <V[i], V[j]>, computed as 1/2 (|sum_i x_i V[i]|^2 - sum_i x_i^2 |V[i]|^2)
    over the example's features i with their values x_i; trained per example, as libFM's
    SGD and VW's `--lrq`/quadratic interactions are.

    k         the factors of a feature (V's columns)
    init_std  the factors of the features the training examples use start normal(0,
              init_std), the others (a hashed table's unused rows) and W and b at zero

    The other arguments, `fit`, `predict`, `predict_proba` and `decision_function` are
    `LinearModel`'s, but `oaa` and the optimizer "vw" (the default is "adagrad"): VW's
    normalised rule, given a factor's derivative of the logit as its input (as VW's --lrq
    features are), diverges on the bench's data, as VW's --lrq does there. V and W hold one row more than the features: the padding row that
    BagSampler writes past each example's features (`pad=`), which no example trains.

    >>> fm = fa.models.FactorizationMachine(k=8, passes=2).fit(X_train, y_train)
    >>> fa.metrics.roc_auc(y_test, fm.decision_function(X_test))

    Not yet: the field-aware form (libffm's).
    """

    _extra_rows = 1

    def __init__(self, k=8, init_std=0.01, loss="logistic", optimizer="adagrad", lr=None,
                 passes=1, workers=1, shuffle=False, seed=0, hasher=None, optimizer_options=None,
                 quantile_tau=0.5):
        super().__init__(loss=loss, optimizer=optimizer, lr=lr, passes=passes, workers=workers,
                         shuffle=shuffle, seed=seed, hasher=hasher, optimizer_options=optimizer_options,
                         quantile_tau=quantile_tau)
        (self.k,) = check_sizes(type(self).__name__, k=k)
        self.init_std = check_number(type(self).__name__, "init_std", init_std, at_least=0)
        if self.optimizer == "vw":
            raise ValueError(f"{type(self).__name__}: optimizer 'vw' is LinearModel's (its normalised "
                             f"rule diverges on a factorization machine's factors); use 'adagrad', "
                             f"'sgd', 'adam' or 'ftrl'")

    def _new_weights(self, n_features, used=()):
        """V's rows of the features used drawn normal(0, init_std) (in the order of their
        ids), the others zero: a hashed table's unused rows cost no drawing and add nothing
        to a prediction; W and b zero."""
        rows, used = n_features + 1, np.asarray(used, dtype=np.int64)
        V = np.zeros((rows, self.k), np.float32)
        V[used] = np.random.default_rng(self.seed).normal(0, self.init_std, (used.size, self.k))
        return {"V": V, "W": np.zeros(rows, np.float32), "b": np.zeros(1, np.float32)}

    def _pad(self, n_features):
        return n_features

    def _logit(self, parameters, ids, offsets, values):
        rows = embedding(parameters["V"], ids, padding_idx=parameters["V"].shape[0] - 1)
        scaled = rows if values is None else rows * reshape(values, (ids.shape[0], 1))
        total = fa_sum(scaled, axis=0)
        pairs = 0.5 * (fa_sum(total * total) - fa_sum(scaled * scaled))
        return super()._logit(parameters, ids, offsets, values) + pairs

    def _pairs(self, X):
        V = self.weights["V"][:self.n_features].astype(np.float64)
        XV = X @ V
        squares = X.copy()      # each position's value squared: a feature met twice counts twice
        squares.data = squares.data.astype(np.float64) ** 2
        return 0.5 * ((XV * XV).sum(axis=1) - squares @ (V * V).sum(axis=1))

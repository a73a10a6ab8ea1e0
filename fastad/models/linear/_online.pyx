"""The compiled loops of the linear models, one example at a time over CSR bags in C, without
the GIL: LinearModel's optimizer="vw", Vowpal Wabbit's adaptive, normalised and invariant
update (online.h), and the field-aware factorization machine's AdaGrad (ffm.h)."""
import numpy as np
cimport numpy as cnp
from libc.math cimport sqrt
from libc.stdint cimport int32_t, int64_t

cnp.import_array()

__all__ = ["LOSSES", "OnlineUpdate", "FieldAwareUpdate", "ffm_logits", "unit_rows", "renumber"]

cdef extern from "online.h" nogil:
    enum:
        FA_ONLINE_LOGISTIC
        FA_ONLINE_SQUARED
        FA_ONLINE_HINGE
        FA_ONLINE_QUANTILE
    ctypedef struct fa_online:
        int loss
        double tau, eta
        int64_t classes
        float *w
        float *b
        double total_weight, sum_norm_x
    double fa_online_pass(fa_online* m, const int32_t* ids, const int64_t* offsets, const float* values,
                          const float* targets, const float* weights, const int64_t* order, int64_t n,
                          double* scratch)

#: The losses of the update, by LinearModel's names.
LOSSES = {"logistic": FA_ONLINE_LOGISTIC, "squared": FA_ONLINE_SQUARED, "hinge": FA_ONLINE_HINGE,
          "quantile": FA_ONLINE_QUANTILE}


cdef float* _data(cnp.ndarray a):
    return <float*>cnp.PyArray_DATA(a)


cdef int64_t _longest(const int64_t[::1] offsets) noexcept:
    """The most positions of one example of CSR offsets (at least 1: a scratch's size)."""
    cdef int64_t r, longest = 1
    for r in range(offsets.shape[0] - 1):
        longest = max(longest, offsets[r + 1] - offsets[r])
    return longest


cdef const float* _values(values):
    """The data of a float32 array, or NULL for None or an empty one (all ones, no weights)."""
    cdef const float[::1] v
    if values is None or len(values) == 0:
        return NULL
    v = values
    return &v[0]


cdef class OnlineUpdate:
    """The update's state from zero: W (rows x classes) and b (classes), each weight held
    beside its adaptive sum and normaliser (interleaved, float32), and the normalised rule's
    running sums, which Hogwild workers each keep and `merge` after a pass; `write_back`
    copies the weights into a model's arrays. Made by LinearModel.fit, which checks every
    array it trains on."""
    cdef fa_online m
    cdef cnp.ndarray w_state, b_state

    def __init__(self, rows, classes, loss, tau, eta):
        self.w_state = np.zeros((rows * classes, 3), np.float32)    # untouched pages stay unmapped
        self.b_state = np.zeros((classes, 3), np.float32)
        self.m.loss = LOSSES[loss]
        self.m.tau, self.m.eta = tau, eta
        self.m.classes = classes
        self.m.w, self.m.b = _data(self.w_state), _data(self.b_state)
        self.m.total_weight = self.m.sum_norm_x = 0

    def worker(self):
        """An update over the same weights and statistics with running sums of its own (a
        Hogwild worker's, which `merge` adds back)."""
        cdef OnlineUpdate other = OnlineUpdate.__new__(OnlineUpdate)
        other.m = self.m
        other.w_state, other.b_state = self.w_state, self.b_state
        return other

    def merge(self, list workers):
        """Add the running sums the workers gathered since they were made to this one's."""
        cdef OnlineUpdate w
        base_weight, base_norm = self.m.total_weight, self.m.sum_norm_x
        for w in workers:
            self.m.total_weight += w.m.total_weight - base_weight
            self.m.sum_norm_x += w.m.sum_norm_x - base_norm

    def train(self, const int32_t[::1] ids, const int64_t[::1] offsets, values, const float[::1] targets,
              weights, const int64_t[::1] order):
        """One pass over the examples order (CSR bags: ids in [0, rows), offsets, values or
        None for all ones; targets, examples x classes; importance weights or None); returns
        the sum of importance * loss before each update. Runs without the GIL."""
        cdef const float* vp = _values(values)
        cdef const float* wp = _values(weights)
        cdef int64_t n = order.shape[0], longest = _longest(offsets)
        cdef double[::1] scratch = np.empty(longest + 1, np.float64)
        cdef double total
        cdef const int32_t* ip = &ids[0] if ids.shape[0] else NULL
        with nogil:
            total = fa_online_pass(&self.m, ip, &offsets[0], vp, &targets[0], wp,
                                   &order[0] if n else NULL, n, &scratch[0])
        return total

    def write_back(self, dict weights):
        """Copy the trained weights into a model's arrays W (rows, or rows x classes) and b
        (classes)."""
        weights["W"].reshape(-1)[:] = self.w_state[:, 0]
        weights["b"][:] = self.b_state[:, 0]


cdef extern from "ffm.h" nogil:
    ctypedef struct fa_ffm:
        int64_t fields, k
        float* w
        float* w_g
        float* b
        float* b_g
        float* v
        float* v_g
        double lr
        int logistic, crossed, interleaved
    double fa_ffm_logit(const fa_ffm* m, const int32_t* ids, const float* x, const int32_t* fields,
                        int64_t len, double* dv, double* sums)
    double fa_ffm_pass(fa_ffm* m, const int32_t* ids, const int64_t* offsets, const float* values,
                       const int32_t* fields, const float* targets, const float* weights, const int64_t* order,
                       int64_t n, double* scratch)
    void fa_ffm_logits(const fa_ffm* m, const int32_t* ids, const int64_t* offsets, const float* values,
                       const int32_t* fields, int64_t n, double* out, double* sums)


cdef class FieldAwareUpdate:
    """A field-aware factorization machine's training passes (ffm.h) over its weights (W
    (rows), b (1), V (rows x fields x k), float32), held interleaved with their AdaGrad sums
    (libffm's, less its initial 1: zeros) and copied back into those arrays by `write_back`.
    Made by FactorizationMachine, which checks every array; an example's fields are int32 in
    [-1, fields), -1 for none. One field is Rendle's factorization machine; crossed (one
    field), its pairs only across the sides 0 and 1 that the example's fields then give (VW's
    --lrq)."""
    cdef fa_ffm m
    cdef dict arrays

    def __init__(self, weights, lr, logistic, crossed=False):
        W, b, V = weights["W"], weights["b"], weights["V"]
        w_state = np.zeros((W.shape[0], 2), np.float32)
        w_state[:, 0] = W
        v_state = np.zeros((*V.shape[:2], 2 * V.shape[2]), np.float32)
        v_state[:, :, :V.shape[2]] = V
        self.arrays = {"W": W, "b": b, "V": V, "b_g": np.zeros_like(b), "w_state": w_state, "v_state": v_state}
        self.m.fields, self.m.k = V.shape[1], V.shape[2]
        self.m.interleaved = 1
        self.m.w, self.m.w_g = _data(w_state), _data(w_state) + 1
        self.m.b, self.m.b_g = _data(b), _data(self.arrays["b_g"])
        self.m.v, self.m.v_g = _data(v_state), _data(v_state) + self.m.k
        self.m.lr = lr
        self.m.logistic = bool(logistic)
        self.m.crossed = bool(crossed)

    def train(self, const int32_t[::1] ids, const int64_t[::1] offsets, values, const int32_t[::1] fields,
              const float[::1] targets, weights, const int64_t[::1] order):
        """One pass over the examples order (CSR bags with their fields; targets 0/1 for the
        logistic loss, values for the squared; importance weights or None); returns the sum
        of importance * loss before each step. Runs without the GIL."""
        cdef const float* vp = _values(values)
        cdef const float* wp = _values(weights)
        cdef int64_t n = order.shape[0], longest = _longest(offsets)
        cdef double[::1] scratch = np.empty((2 + longest * self.m.fields) * self.m.k, np.float64)
        cdef double total
        with nogil:
            total = fa_ffm_pass(&self.m, &ids[0] if ids.shape[0] else NULL, &offsets[0], vp,
                                &fields[0] if fields.shape[0] else NULL, &targets[0], wp,
                                &order[0] if n else NULL, n, &scratch[0])
        return total

    def write_back(self):
        """Copy the trained W and V into the arrays the update was made over."""
        self.arrays["W"][:] = self.arrays["w_state"][:, 0]
        self.arrays["V"][:] = self.arrays["v_state"][:, :, :self.m.k]

    def gradient(self, const int32_t[::1] ids, values, const int32_t[::1] fields):
        """(the logit of one example, its gradient in V at each position and field: (len,
        fields, k)), float64: what a training step uses."""
        cdef int64_t n = ids.shape[0]
        cdef double[::1] dv = np.zeros(max(n, 1) * self.m.fields * self.m.k, np.float64)
        cdef double[::1] sums = np.empty(2 * self.m.k, np.float64)
        cdef double logit = fa_ffm_logit(&self.m, &ids[0] if n else NULL, _values(values),
                                         &fields[0] if n else NULL, n, &dv[0], &sums[0])
        return logit, np.asarray(dv)[:n * self.m.fields * self.m.k].reshape(n, self.m.fields, self.m.k)


def ffm_logits(weights, const int32_t[::1] ids, const int64_t[::1] offsets, values, const int32_t[::1] fields,
               crossed=False):
    """Each example's logit under a field-aware factorization machine's weights (as
    FieldAwareUpdate takes them, with its crossed), float64."""
    cdef fa_ffm m
    cdef int64_t n = offsets.shape[0] - 1
    cdef double[::1] out = np.empty(max(n, 0), np.float64)
    cdef const float* vp = _values(values)
    V = weights["V"]
    m.fields, m.k = V.shape[1], V.shape[2]
    m.w, m.b, m.v = _data(weights["W"]), _data(weights["b"]), _data(V)
    m.interleaved = 0
    m.crossed = bool(crossed)
    cdef double[::1] sums = np.empty(2 * m.k, np.float64)
    with nogil:
        if n > 0:
            fa_ffm_logits(&m, &ids[0] if ids.shape[0] else NULL, &offsets[0], vp,
                          &fields[0] if fields.shape[0] else NULL, n, &out[0], &sums[0])
    return np.asarray(out)


def unit_rows(const float[::1] data, const int64_t[::1] offsets):
    """CSR values (data, offsets: examples + 1) with each example's divided by their norm
    (libffm's instance-wise normalisation), as a new float32 array; an example whose values
    are all zero (or that has none) as it is. The norm is summed in float64."""
    cdef int64_t n = offsets.shape[0] - 1, r, i
    cdef float[::1] out = np.empty(data.shape[0], np.float32)
    cdef double squares, scale
    with nogil:
        for r in range(n):
            squares = 0
            for i in range(offsets[r], offsets[r + 1]):
                squares += <double>data[i] * data[i]
            scale = 1 / sqrt(squares) if squares > 0 else 1
            for i in range(offsets[r], offsets[r + 1]):
                out[i] = <float>(data[i] * scale)
    return np.asarray(out)


def renumber(const int32_t[::1] ids, int64_t n_features):
    """(the ids used, sorted: int64; each id's number among them: int32) for ids in [0,
    n_features), checked by the caller: a hashed table's used rows, numbered in order."""
    cdef int32_t[::1] number = np.zeros(n_features, np.int32)
    cdef int32_t[::1] out = np.empty(ids.shape[0], np.int32)
    cdef int64_t i, count = 0, n = ids.shape[0]
    with nogil:
        for i in range(n):
            number[ids[i]] = 1
        for i in range(n_features):
            if number[i]:
                number[i] = <int32_t>count
                count += 1
            else:
                number[i] = -1
        for i in range(n):
            out[i] = number[ids[i]]
    used = np.flatnonzero(np.asarray(number) >= 0)
    return used, np.asarray(out)

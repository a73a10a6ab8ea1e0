"""`PairwiseSampler`: (user, liked item, other item) triples from implicit feedback,
for BPR-style ranking losses, drawn from `Interactions` (the user x item matrix,
laid out once for every sampler made from it); `WarpSampler`: WARP's and k-OS WARP's
triples, whose negatives are drawn against the model's current scores, with their rank
weights; `FeatureBags` and `FeatureSampler`: users and items described by weighted
features (LightFM's feature matrices), each sampled id written as its bag of features."""
import numpy as np
cimport cython
cimport numpy as cnp
from cython cimport floating
from libc.math cimport floor, log
from libc.stdint cimport int32_t, int64_t

from fastad._engine.graph cimport Variable, Input, empty_buffer, check_flag, check_int, require_float
from fastad._engine.rng cimport fa_rng, fa_rng_below
from fastad.training.sampler cimport (Sampler, RowPrefetch, MAX_ROW_PREFETCHES, fa_prefetch, fa_prefetch_span,
                                fa_prefetch_span_for_write, _share, _seed_stream, _index_leaf, _integer_array)

cnp.import_array()

cdef extern from *:
    """
    /* One interaction of PairwiseSampler: its user and item, one 8-byte load. */
    typedef struct { int32_t user, item; } fa_pair;
    """
    ctypedef struct fa_pair:
        int32_t user
        int32_t item

cdef int64_t INT32_LIMIT = 2147483647      # the largest user or item id count PairwiseSampler holds

__all__ = ["Interactions", "PairwiseSampler", "WarpSampler", "FeatureBags", "FeatureSampler"]

#: The largest rank weight of a WARP triple (LightFM's MAX_LOSS): log(floor((n_items - 1) /
#: tries)) is capped here.
WARP_MAX_WEIGHT = 10.0
cdef double MAX_WEIGHT = WARP_MAX_WEIGHT
#: How WarpSampler estimates a positive's rank: "sampled" (LightFM's: from the draws until a
#: violating negative) or "online" (from the user's running violation rate, one draw a positive).
RANK_ESTIMATES = ("sampled", "online")
#: The online rank estimate's running violation rate weighs each new draw by this much (an
#: exponential average over about the user's last 1 / ONLINE_RATE_STEP draws).
ONLINE_RATE_STEP = 0.1
cdef double RATE_STEP = ONLINE_RATE_STEP


cdef tuple _drawable_share(int64_t n, Py_ssize_t rank, Py_ssize_t workers):
    """(first, count) of worker `rank`'s share of n things to draw from, or all n when that
    share is empty (fewer things than workers)."""
    lo, hi = _share(n, rank, workers)
    return (lo, hi - lo) if hi > lo else (0, n)


cdef str _first_ids(object ids):
    shown = ", ".join(str(int(i)) for i in ids[:5])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")


# ---------------------------------------------------------------- ranking triples

cdef int _check_int32(str who, str name, object size) except -1:
    if size > INT32_LIMIT:
        raise ValueError(f"{who}: {name} is {size}, above 2**31 - 1 = {INT32_LIMIT}: the sampler "
                         f"holds user and item ids as int32")
    return 0


cdef object _interactions_csr(str who, object interactions, object n_users, object n_items,
                              bint copy=True):
    """The user x item matrix as canonical CSR (each row's items sorted and unique), its
    user and item counts checked to fit int32; a CSR matrix itself when not `copy`."""
    import scipy.sparse as sp
    if sp.issparse(interactions):
        _check_int32(who, "n_users (the matrix's rows)", interactions.shape[0])
        _check_int32(who, "n_items (the matrix's columns)", interactions.shape[1])
        matrix = sp.csr_matrix(interactions, copy=copy)
        if matrix.nnz and (not np.all(np.isfinite(matrix.data)) or matrix.data.min() < 0):
            raise ValueError(f"{who}: interactions must hold finite values >= 0 "
                             f"(a stored value is {'not finite' if not np.all(np.isfinite(matrix.data)) else 'negative'})")
        if n_users is not None or n_items is not None:
            raise ValueError(f"{who}: n_users and n_items come from the matrix's shape {matrix.shape}; "
                             f"give them only with (user_ids, item_ids) arrays")
    elif isinstance(interactions, tuple) and len(interactions) == 2:
        users = _integer_array(who, "the user ids", interactions[0]).ravel()
        items = _integer_array(who, "the item ids", interactions[1]).ravel()
        if users.size != items.size:
            raise ValueError(f"{who}: {users.size} user ids but {items.size} item ids")
        rows = check_int(who, "n_users", n_users, 1) if n_users is not None else (int(users.max()) + 1 if users.size else 0)
        cols = check_int(who, "n_items", n_items, 1) if n_items is not None else (int(items.max()) + 1 if items.size else 0)
        _check_int32(who, "n_users", rows)
        _check_int32(who, "n_items", cols)
        for name, ids, bound in (("user", users, rows), ("item", items, cols)):
            if ids.size and ids.max() >= bound:
                raise ValueError(f"{who}: {name} id {int(ids.max())} is out of range for {bound} {name}s")
        matrix = sp.csr_matrix((np.ones(users.size), (users, items)), shape=(rows, cols))
    else:
        raise TypeError(f"{who}: interactions must be a scipy sparse user x item matrix or a "
                        f"(user_ids, item_ids) tuple, got {type(interactions).__name__}")
    matrix.sum_duplicates()
    matrix.eliminate_zeros()
    matrix.sort_indices()
    if matrix.nnz == 0:
        raise ValueError(f"{who}: interactions hold no interaction (no stored value > 0)")
    return matrix


cdef int64_t _count_items(const int32_t* items, int64_t nnz, int64_t n_items) except -1:
    """How many of the n_items items occur among `items` (ids below n_items), with one byte
    an item."""
    seen_array = np.zeros(n_items, dtype=np.uint8)
    cdef unsigned char* seen = <unsigned char*>cnp.PyArray_DATA(seen_array)
    cdef int64_t k, count = 0
    with nogil:
        for k in range(nnz):
            count += seen[items[k]] == 0
            seen[items[k]] = 1
    return count


cdef class Interactions:
    """A user x item interaction matrix made ready for `PairwiseSampler`, once.

    `Interactions(interactions, n_users=None, n_items=None, copy=True)` takes what
    PairwiseSampler takes (a scipy matrix, or a (user_ids, item_ids) tuple) and
    holds it as canonical CSR (`matrix`), each interaction as one int32 (user,
    item) pair, and each user's sorted items. With `copy=False` a CSR matrix's
    arrays are held as they are, not copied: made canonical in place, and read-only
    through `matrix` (for a matrix the caller made for it, as `Recommender.fit` does). Samplers made from it (every
    epoch, every Hogwild thread) read these arrays without copying them; it is
    never modified after it is made. Pickled, it sends the matrix and is
    rebuilt on arrival.

    >>> data = fa.data.Interactions(csr)
    >>> samplers = [fa.data.PairwiseSampler(data, u, i, j, seed=0, rank=r, workers=2) for r in range(2)]
    """
    cdef readonly object matrix
    cdef object indptr_array, indices_array, pairs_array, degree
    cdef const int64_t* indptr        # each user's slice of indices (n_users + 1 offsets)
    cdef const int32_t* indices       # the items of each user, sorted: for liked() and unliked_item()
    cdef const fa_pair* pairs         # interaction k as (user, item): a draw reads one 8-byte pair
    cdef readonly int64_t n_users, n_items, nnz
    cdef int64_t liked_items          # the items with an interaction: those popularity draws

    def __init__(self, interactions, n_users=None, n_items=None, copy=True):
        self.prepare("Interactions", interactions, n_users, n_items, check_flag("Interactions", "copy", copy))

    cdef int prepare(self, str who, object interactions, object n_users, object n_items,
                     bint copy=True) except -1:
        """Check and lay out the interactions; errors name `who`, the caller made for them."""
        self.matrix = _interactions_csr(who, interactions, n_users, n_items, copy)
        self.n_users, self.n_items = self.matrix.shape
        self.nnz = self.matrix.nnz
        indptr = np.ascontiguousarray(self.matrix.indptr, dtype=np.int64)
        items = np.ascontiguousarray(self.matrix.indices, dtype=np.int32)
        self.degree = np.diff(indptr)
        pairs = np.empty((self.nnz, 2), dtype=np.int32)
        pairs[:, 0] = np.repeat(np.arange(self.n_users, dtype=np.int32), self.degree)
        pairs[:, 1] = items
        for arr in (indptr, items, pairs, self.degree, self.matrix.data, self.matrix.indices,
                    self.matrix.indptr):
            arr.flags.writeable = False
        self.indptr_array, self.indices_array, self.pairs_array = indptr, items, pairs
        self.indptr = <const int64_t*>cnp.PyArray_DATA(indptr)
        self.indices = <const int32_t*>cnp.PyArray_DATA(items)
        self.pairs = <const fa_pair*>cnp.PyArray_DATA(pairs)
        self.liked_items = _count_items(self.indices, self.nnz, self.n_items)
        return 0

    def __reduce__(self):
        return Interactions, (self.matrix,)

    def __repr__(self):
        return f"Interactions({self.n_users} users x {self.n_items} items, {self.nnz} interactions)"

    cdef object users_without_negative(self, bint by_popularity):
        """The users for whom no negative can be drawn: they liked every item (uniform
        negatives) or every item with an interaction (popularity)."""
        # A user's items are distinct items with an interaction: they are all of those items
        # when there are as many of them. (No array of the interactions' size is made here:
        # each epoch's sampler, in each thread, asks.)
        return np.flatnonzero(self.degree >= (self.liked_items if by_popularity else self.n_items))


cdef extern from *:
    """
    #include <string.h>
    #include "clones.h"
    #include "bag_sums.h"
    /* WarpSampler's scores, LightFM's way: a row's representation is made once and dotted with
     * the user's once (not one dot a feature), in lanes of 32 bytes (one AVX2 register in the
     * AVX2 clones, two SSE ones in the others, the same values in both) with two sums, each
     * lane's products added in one order, the rest one element at a time. A bag is summed a
     * tile of FA_BAG_TILE lanes at a time (dim 64 of floats in one tile), its sums held in
     * registers while its rows are read once each, then a pair of lanes at a time: the
     * same values, the lanes being independent (bag_sums.h's loops, which embedding_bag's forward
     * runs too, over feature ids of 32 bits and weights in double). The helpers the cloned scans call are always
     * inlined (FA_UNROLLED): a call out of an AVX2 clone would run the default code.
     * fa_bag_dot: user_row . (sum_p w_p V[rows[p]]) over a bag's `count` feature rows of V and
     * their weights; fa_row_dot: user_row . row, the same value as a bag of one row of weight 1
     * (an id is the identity's bag), without the multiplications by 1. fa_bag_sum_feature_<f|d>:
     * out = sum_p w_p V[rows[p]], each element's products added in the bag's order (a user's
     * representation). */
    FA_BAG_SUM_LOOPS(float, fa_bag_vec_f, int32_t, double, feature_f)
    FA_BAG_SUM_LOOPS(double, fa_bag_vec_d, int32_t, double, feature_d)
    #if defined(__GNUC__)
    #define FA_IN_LANES(T, i, n) for (; (i) + 2 * (Py_ssize_t)(32 / sizeof(T)) <= (n); (i) += 2 * 32 / sizeof(T))
    #define FA_IN_TILES(T, i, n) \
        for (; (i) + FA_BAG_TILE * (Py_ssize_t)(32 / sizeof(T)) <= (n); (i) += FA_BAG_TILE * 32 / sizeof(T))
    #define FA_UNROLLED FA_BAG_INLINE
    #else
    #define FA_IN_LANES(T, i, n) if (0)
    #define FA_IN_TILES(T, i, n) if (0)
    #define FA_UNROLLED FA_BAG_INLINE
    #endif
    #define FA_BAG_DOTS(T, S)                                                                      \
    /* the two sums' lanes added (halves folded), and the products of the elements past them */   \
    static inline double fa_lanes_total_##S(fa_bag_vec_##S low, fa_bag_vec_##S high) {                 \
        T lanes[sizeof(fa_bag_vec_##S) / sizeof(T)];                                                 \
        low += high;                                                                               \
        memcpy(lanes, &low, sizeof lanes);                                                         \
        for (size_t half = sizeof lanes / sizeof(T) / 2; half > 0; half /= 2)                      \
            for (size_t l = 0; l < half; l++) lanes[l] += lanes[l + half];                         \
        return lanes[0];                                                                           \
    }                                                                                              \
    static FA_UNROLLED double fa_bag_dot_##S(const T* user_row, const T* V, const int32_t* rows,   \
                                        const double* weights, int64_t count, Py_ssize_t dim) {    \
        const Py_ssize_t L = sizeof(fa_bag_vec_##S) / sizeof(T);                                     \
        fa_bag_vec_##S low = {0}, high = {0};                                                        \
        Py_ssize_t i = 0;                                                                          \
        FA_IN_TILES(T, i, dim) {                                                                   \
            fa_bag_vec_##S tile[FA_BAG_TILE];                                                      \
            fa_bag_sum_lanes_feature_##S(V, rows, weights, count, dim, i, tile, FA_BAG_TILE);     \
            for (int l = 0; l < FA_BAG_TILE; l += 2) {                                             \
                low += *(const fa_bag_vec_##S*)(user_row + i + l * L) * tile[l];                     \
                high += *(const fa_bag_vec_##S*)(user_row + i + (l + 1) * L) * tile[l + 1];          \
            }                                                                                      \
        }                                                                                          \
        FA_IN_LANES(T, i, dim) {                                                                   \
            fa_bag_vec_##S pair[2];                                                                  \
            fa_bag_sum_lanes_feature_##S(V, rows, weights, count, dim, i, pair, 2);               \
            low += *(const fa_bag_vec_##S*)(user_row + i) * pair[0];                                 \
            high += *(const fa_bag_vec_##S*)(user_row + i + L) * pair[1];                            \
        }                                                                                          \
        double total = fa_lanes_total_##S(low, high);                                              \
        for (; i < dim; i++) total += user_row[i] * fa_bag_sum_element_feature_##S(V, rows, weights, count, dim, i); \
        return total;                                                                              \
    }                                                                                              \
    static inline double fa_row_dot_##S(const T* user_row, const T* row, Py_ssize_t dim) {         \
        const Py_ssize_t L = sizeof(fa_bag_vec_##S) / sizeof(T);                                     \
        fa_bag_vec_##S low, high;                                                                    \
        memset(&low, 0, sizeof low);                                                               \
        memset(&high, 0, sizeof high);                                                             \
        Py_ssize_t i = 0;                                                                          \
        FA_IN_LANES(T, i, dim) {                                                                   \
            low += *(const fa_bag_vec_##S*)(user_row + i) * *(const fa_bag_vec_##S*)(row + i);         \
            high += *(const fa_bag_vec_##S*)(user_row + i + L) * *(const fa_bag_vec_##S*)(row + i + L); \
        }                                                                                          \
        double total = fa_lanes_total_##S(low, high);                                              \
        for (; i < dim; i++) total += user_row[i] * row[i];                                        \
        return total;                                                                              \
    }
    FA_BAG_DOTS(float, f)
    FA_BAG_DOTS(double, d)

    /* A bag's score for a user's representation (FeatureBags.score): fa_bag_dot over row
     * `row`'s features, plus sum_f w_f * bias[f] unless bias is NULL. fa_bag_first_above and
     * fa_first_above: WarpSampler's scans of its candidate negatives, with item features
     * (bags) or by ids (one row each, score fa_row_dot plus bias[item]): the first k in
     * [start, n) whose score is above `threshold`, else n; the bags' scan starts loading the
     * rows of candidate k + FA_BAG_AHEAD as it scores candidate k, and the feature ids and
     * weights of candidate k + 2 * FA_BAG_AHEAD (whose offsets the caller has loading). One
     * candidate ahead: a bag's rows are many cache lines, and loading two candidates' ahead
     * (more wasted when an early one violates) kept the scan about 4% slower. */
    #define FA_BAG_AHEAD 1
    #define FA_BAG_SCORE(T, S)                                                                     \
    static FA_UNROLLED double fa_bag_score_##S(const T* user_row, const T* V, const T* bias,       \
                                          const int64_t* indptr, const int32_t* indices,           \
                                          const double* values, int64_t row, Py_ssize_t dim) {     \
        int64_t start = indptr[row], count = indptr[row + 1] - start;                              \
        double total = fa_bag_dot_##S(user_row, V, indices + start, values + start, count, dim);   \
        if (bias != NULL)                                                                          \
            for (int64_t p = start; p < start + count; p++) total += values[p] * bias[indices[p]]; \
        return total;                                                                              \
    }                                                                                              \
    FA_CLONED double fa_bag_score_cloned_##S(const T* user_row, const T* V, const T* bias,         \
            const int64_t* indptr, const int32_t* indices, const double* values, int64_t row,      \
            Py_ssize_t dim) {                                                                      \
        return fa_bag_score_##S(user_row, V, bias, indptr, indices, values, row, dim);             \
    }                                                                                              \
    FA_CLONED Py_ssize_t fa_bag_first_above_##S(const T* user_row, const T* V, const T* bias,      \
            const int64_t* indptr, const int32_t* indices, const double* values,                   \
            const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,                  \
            double threshold) {                                                                    \
        for (Py_ssize_t k = start; k < n; k++) {                                                   \
            if (k + 2 * FA_BAG_AHEAD < n) {                                                        \
                int64_t later = items[k + 2 * FA_BAG_AHEAD];                                       \
                int64_t first = indptr[later], count = indptr[later + 1] - first;                  \
                if (count) {                                                                       \
                    fa_prefetch_span(indices + first, count * sizeof(int32_t));                    \
                    fa_prefetch_span(values + first, count * sizeof(double));                      \
                }                                                                                  \
            }                                                                                      \
            if (k + FA_BAG_AHEAD < n) {                                                            \
                int64_t ahead = items[k + FA_BAG_AHEAD];                                           \
                for (int64_t p = indptr[ahead]; p < indptr[ahead + 1]; p++)                        \
                    fa_prefetch_span(V + (int64_t)indices[p] * dim, dim * sizeof(T));              \
            }                                                                                      \
            if (fa_bag_score_##S(user_row, V, bias, indptr, indices, values, items[k], dim)        \
                    > threshold) return k;                                                         \
        }                                                                                          \
        return n;                                                                                  \
    }                                                                                              \
    static inline double fa_id_score_##S(const T* user_row, const T* V, const T* bias,             \
                                         int64_t item, Py_ssize_t dim) {                           \
        double total = fa_row_dot_##S(user_row, V + item * dim, dim);                              \
        return bias != NULL ? total + bias[item] : total;                                          \
    }                                                                                              \
    FA_CLONED double fa_id_score_cloned_##S(const T* user_row, const T* V, const T* bias,          \
                                            int64_t item, Py_ssize_t dim) {                        \
        return fa_id_score_##S(user_row, V, bias, item, dim);                                      \
    }                                                                                              \
    FA_CLONED Py_ssize_t fa_first_above_##S(const T* user_row, const T* V, const T* bias,          \
                                            const int64_t* items, Py_ssize_t start,                \
                                            Py_ssize_t n, Py_ssize_t dim, double threshold) {      \
        for (Py_ssize_t k = start; k < n; k++)                                                     \
            if (fa_id_score_##S(user_row, V, bias, items[k], dim) > threshold) return k;           \
        return n;                                                                                  \
    }
    FA_BAG_SCORE(float, f)
    FA_BAG_SCORE(double, d)
    """
    enum: FA_BAG_AHEAD
    void fa_bag_sum_feature_f(float* out, const float* V, const int32_t* rows, const double* weights, int64_t count,
                            Py_ssize_t dim) noexcept nogil
    void fa_bag_sum_feature_d(double* out, const double* V, const int32_t* rows, const double* weights,
                            int64_t count, Py_ssize_t dim) noexcept nogil
    double fa_bag_score_cloned_f(const float* user_row, const float* V, const float* bias, const int64_t* indptr,
                                 const int32_t* indices, const double* values, int64_t row,
                                 Py_ssize_t dim) noexcept nogil
    double fa_bag_score_cloned_d(const double* user_row, const double* V, const double* bias,
                                 const int64_t* indptr, const int32_t* indices, const double* values, int64_t row,
                                 Py_ssize_t dim) noexcept nogil
    Py_ssize_t fa_bag_first_above_f(const float* user_row, const float* V, const float* bias,
                                    const int64_t* indptr, const int32_t* indices, const double* values,
                                    const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                    double threshold) noexcept nogil
    Py_ssize_t fa_bag_first_above_d(const double* user_row, const double* V, const double* bias,
                                    const int64_t* indptr, const int32_t* indices, const double* values,
                                    const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                    double threshold) noexcept nogil
    double fa_id_score_cloned_f(const float* user_row, const float* V, const float* bias, int64_t item,
                                Py_ssize_t dim) noexcept nogil
    double fa_id_score_cloned_d(const double* user_row, const double* V, const double* bias, int64_t item,
                                Py_ssize_t dim) noexcept nogil
    Py_ssize_t fa_first_above_f(const float* user_row, const float* V, const float* bias,
                                const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                double threshold) noexcept nogil
    Py_ssize_t fa_first_above_d(const double* user_row, const double* V, const double* bias,
                                const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                double threshold) noexcept nogil


cdef class FeatureBags:
    """A feature matrix made ready for the samplers, once: row r (a user or an item) is the
    bag of its features, each with its weight (LightFM's `user_features`/`item_features`).

    `FeatureBags(features, rows, who="FeatureBags", name="features")` takes a scipy sparse
    (rows, n_features) matrix of finite weights >= 0 (a stored zero is left out) whose row
    count is `rows`, and holds it as canonical CSR: int32 feature ids, float64 weights. The
    representation of row r is sum_f w[r, f] * E[f] over a table E of n_features rows, its
    bias sum_f w[r, f] * b[f]. `identity`: whether it is the identity matrix (row r the
    feature r of weight 1, LightFM's features when none are given), whose bags the samplers
    read as the ids they are. Rows are taken as given: not normalised (normalise them
    yourself, as LightFM's users do, when a row should weigh 1 in all). Errors name `who`
    and `name`.

    >>> bags = fa.data.FeatureBags(sp.identity(1000, format="csr"), 1000)
    """
    cdef readonly object matrix
    cdef object indices_array, values_array, indptr_array
    cdef const int64_t* indptr
    cdef const int32_t* indices
    cdef const double* values
    cdef readonly int64_t n_rows, n_features, longest
    cdef readonly bint identity     # row r is feature r alone, of weight 1: the bags of ids

    def __init__(self, features, rows, who="FeatureBags", name="features"):
        import scipy.sparse as sp
        if not sp.issparse(features):
            raise TypeError(f"{who}: {name} must be a scipy sparse (rows, features) matrix, got "
                            f"{type(features).__name__}")
        if features.ndim != 2 or features.shape[0] != rows:
            raise ValueError(f"{who}: {name} has shape {features.shape}, expected {rows} rows (one "
                             f"per row of the interactions' {'users' if 'user' in name else 'items'})")
        if features.shape[1] == 0:
            raise ValueError(f"{who}: {name} has shape {features.shape}: no feature")
        _check_int32(who, f"{name}'s features", features.shape[1])
        matrix = sp.csr_matrix(features, dtype=np.float64, copy=True)
        matrix.sum_duplicates()
        bad = ~np.isfinite(matrix.data) | (matrix.data < 0)
        if bad.any():
            first = int(np.flatnonzero(bad)[0])
            row = int(np.searchsorted(matrix.indptr, first, side="right")) - 1
            raise ValueError(f"{who}: {name} must hold finite weights >= 0; it holds "
                             f"{matrix.data[first]} at row {row}, feature {matrix.indices[first]} "
                             f"({int(bad.sum())} such weight(s) in all)")
        matrix.eliminate_zeros()
        matrix.sort_indices()
        self.matrix = matrix
        self.n_rows, self.n_features = matrix.shape
        self.indptr_array = np.ascontiguousarray(matrix.indptr, dtype=np.int64)
        self.indices_array = np.ascontiguousarray(matrix.indices, dtype=np.int32)
        self.values_array = np.ascontiguousarray(matrix.data, dtype=np.float64)
        for arr in (self.indptr_array, self.indices_array, self.values_array):
            arr.flags.writeable = False
        self.longest = int(np.diff(self.indptr_array).max())
        self.identity = bool(self.n_rows == self.n_features and matrix.nnz == self.n_rows
                             and np.array_equal(self.indices_array, np.arange(self.n_rows))
                             and np.all(self.values_array == 1.0))
        self.indptr = <const int64_t*>cnp.PyArray_DATA(self.indptr_array)
        self.indices = <const int32_t*>cnp.PyArray_DATA(self.indices_array)
        self.values = <const double*>cnp.PyArray_DATA(self.values_array)

    def __reduce__(self):
        return _feature_bags, (self.matrix,)

    def __repr__(self):
        return f"FeatureBags({self.n_rows} rows x {self.n_features} features, {self.matrix.nnz} weights)"

    @cython.final
    cdef void represent(self, int64_t row, const floating* table, Py_ssize_t dim,
                        floating* out) noexcept nogil:
        """out = sum_f w[row, f] * table[f] (dim values a row), in the table's precision."""
        cdef int64_t start = self.indptr[row], count = self.indptr[row + 1] - start
        if floating is float:
            fa_bag_sum_feature_f(out, table, self.indices + start, self.values + start, count, dim)
        else:
            fa_bag_sum_feature_d(out, table, self.indices + start, self.values + start, count, dim)

    @cython.final
    cdef double score(self, int64_t row, const floating* user_row, const floating* table,
                      const floating* bias, Py_ssize_t dim) noexcept nogil:
        """The score of row `row` (an item) for a user's representation `user_row`: its
        representation sum_f w[row, f] * table[f] dotted with user_row, plus
        sum_f w[row, f] * bias[f] (no bias when bias is NULL)."""
        if floating is float:
            return fa_bag_score_cloned_f(user_row, table, bias, self.indptr, self.indices, self.values, row, dim)
        return fa_bag_score_cloned_d(user_row, table, bias, self.indptr, self.indices, self.values, row, dim)

    @cython.final
    cdef Py_ssize_t first_above(self, const floating* user_row, const floating* table, const floating* bias,
                                const int64_t* rows, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                double threshold) noexcept nogil:
        """The first k in [start, n) whose row rows[k] scores above `threshold` (`score`), else
        n, loading the rows of the features of rows[k + FA_BAG_AHEAD] as it goes."""
        if floating is float:
            return fa_bag_first_above_f(user_row, table, bias, self.indptr, self.indices, self.values, rows,
                                        start, n, dim, threshold)
        return fa_bag_first_above_d(user_row, table, bias, self.indptr, self.indices, self.values, rows,
                                    start, n, dim, threshold)

    @cython.final
    cdef void prefetch(self, int64_t row, const char* table, Py_ssize_t row_bytes) noexcept nogil:
        """Start loading the table rows of row `row`'s features."""
        cdef int64_t p
        for p in range(self.indptr[row], self.indptr[row + 1]):
            fa_prefetch_span(table + <int64_t>self.indices[p] * row_bytes, row_bytes)

    @cython.final
    cdef void prefetch_bag(self, int64_t row) noexcept nogil:
        """Start loading row `row`'s feature ids and weights (its offsets read)."""
        cdef int64_t start = self.indptr[row], count = self.indptr[row + 1] - start
        if count:
            fa_prefetch_span(self.indices + start, count * sizeof(int32_t))
            fa_prefetch_span(self.values + start, count * sizeof(double))

    @cython.final
    cdef Py_ssize_t write(self, int64_t row, int64_t* ids, floating* weights, Py_ssize_t at,
                          double sign) noexcept nogil:
        """Write row `row`'s feature ids into ids[at:] and sign * their weights into
        weights[at:]; returns the position past them (the identity's bag without reading it)."""
        cdef int64_t p
        if self.identity:
            ids[at] = row
            weights[at] = <floating>sign
            return at + 1
        for p in range(self.indptr[row], self.indptr[row + 1]):
            ids[at] = self.indices[p]
            weights[at] = <floating>(sign * self.values[p])
            at += 1
        return at


def _feature_bags(matrix):
    """FeatureBags rebuilt from its matrix on arrival (pickling)."""
    return FeatureBags(matrix, matrix.shape[0])


cdef class PairwiseSampler(Sampler):
    """(user, liked item, other item) triples from implicit feedback, for ranking
    losses such as BPR's `-logsigmoid(U[u].(V[i] - V[j]))`.

    interactions  a scipy sparse user x item matrix (a stored value > 0 is an
                  interaction), or a (user_ids, item_ids) tuple of arrays with
                  optional `n_users`, `n_items` (default: the largest id + 1), or
                  `Interactions` made from either: samplers made from one
                  `Interactions` (each epoch's, each worker's) share its arrays.
    users, pos, neg  IndexInput leaves: each example fills b triples, b = users' size;
                  pos holds b ids, and neg b * K: each positive's K >= 1 negatives, drawn
                  independently (neg of shape (b, K), or (b * K,) in that order). With neg
                  left out, pos holds b * (1 + K) ids: each example's positive then its K
                  negatives (shape (b, 1 + K)), so one node scores them together:
                  `fa.gather_dot(U, users, V, pos)` gives the (b, 1 + K) scores of
                  [positive, K negatives] (softmax or WARP-style losses over the block).
    sample        "interaction": a liked (user, item) pair drawn uniformly (a
                  user weighs by activity, as implicit's BPR does); "user": a user
                  drawn uniformly, then one of their items.
    negatives     the negatives' law: "uniform" over the items, or "popularity" (in
                  proportion to each item's interactions). A negative the user liked is
                  redrawn (never skipped); `redraws` counts them. (How many negatives an
                  example has is neg's size, not this.)
    examples      examples per epoch for this worker (default: interactions / (b * workers)).
    weights       optional, an `Input` of b values in a float dtype: each triple's weight, its
                  positive's stored value in the interactions (LightFM's sample_weight; every
                  stored value of `Interactions` is > 0), for a loss that multiplies each
                  triple's by it. Without it the stored values are not read.
    seed, rank, workers  the stream: workers draw independent streams; the same seed
                  gives the same triples. Worker `rank` draws its positives from its
                  contiguous 1/workers share of the interactions (or of the users, with
                  sample="user"), which in user order is a share of the users: no
                  other Hogwild worker updates those users' rows. The shares together
                  are drawn as one worker draws the whole; negatives come from all items.

    Ids are held as int32 (n_users and n_items up to 2**31 - 1), each interaction as
    one (user, item) pair, so a draw reads one cache line. The interactions of an
    example are drawn two calls ahead and read one call ahead, with prefetches, so
    their cache misses overlap the training step between calls; each epoch still
    draws exactly `examples` examples. Under `fastad.train`, reading them ahead also
    starts loading the rows of the graph's tables that the example's ids select
    (U[user], V[item] and V[candidate negative], biases: a row gather's `row_sources`).

    >>> u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    >>> loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])).sum()
    >>> fa.train(loss, opt, fa.data.PairwiseSampler(csr, u, i, j, seed=0), epochs=5)
    >>> u, items = fa.IndexInput([0]), fa.IndexInput([[0] * 11])      # a positive, 10 negatives
    >>> scores = fa.gather_dot(U, u, V, items)                        # (1, 11)
    >>> loss = -fa.log_softmax(scores, axis=1)[:, 0].sum()
    >>> fa.train(loss, opt, fa.data.PairwiseSampler(csr, u, items, seed=0), epochs=5)
    """
    cdef readonly Interactions data   # the interactions, shared with every sampler made from them
    cdef const int64_t* indptr        # data's arrays, read without the GIL
    cdef const int32_t* indices
    cdef const fa_pair* pairs
    cdef object ahead_array, next_array, ahead_noise_array, next_noise_array
    cdef int64_t* ahead_k             # the interactions drawn for the example after next
    cdef int64_t* ahead_noise_k       # its first negative candidates (b * negs): by popularity the
                                      # interactions whose items they are, else the items
    cdef fa_pair* next_pairs          # the next example's (user, item) pairs, read ahead
    cdef int32_t* next_noise          # and its first negative candidates
    cdef bint primed                  # whether those hold this epoch's next examples
    cdef int64_t* out_users
    cdef int64_t* out_pos
    cdef int64_t* out_neg             # triple b's negative k at out_neg[b * neg_stride + k]
    cdef Py_ssize_t batch
    cdef readonly Py_ssize_t negs     # K: negatives a positive
    cdef Py_ssize_t pos_stride, neg_stride, neg_leaf   # 1, K, 2; or with pos and negatives in one leaf: 1 + K, 1 + K, 1
    cdef int64_t n_users, n_items, nnz
    cdef int64_t first_pair, shard_pairs, first_user, shard_users   # this worker's positives
    cdef bint by_user, by_popularity
    cdef readonly Py_ssize_t examples_per_epoch
    cdef readonly int64_t redraws
    cdef Py_ssize_t id_leaves        # the leaves of ids (users, pos, neg), before any weights leaf
    cdef char* out_weights           # the weights leaf (WarpSampler: the rank weights), or NULL
    cdef bint weights_f64
    cdef object pair_weights_array   # weighted: the interactions' stored values, pair k's at k
    cdef const double* pair_weights
    cdef object next_weights_array   # weights=: the next example's triples' weights, read ahead
    cdef double* next_weights

    def __init__(self, interactions, users, pos, neg=None, *, sample="interaction", negatives="uniform",
                 examples=None, n_users=None, n_items=None, seed=None, rank=0, workers=1, weights=None):
        who = "PairwiseSampler"
        if sample not in ("interaction", "user"):
            raise ValueError(f"{who}: sample must be 'interaction' or 'user', got {sample!r}")
        if isinstance(negatives, int):
            raise TypeError(f"{who}: negatives names the negatives' law, 'uniform' or 'popularity', "
                            f"got {negatives!r}; for {negatives} negatives a positive give neg "
                            f"{negatives} ids per id of users (shape (b, {negatives}))")
        if negatives not in ("uniform", "popularity"):
            raise ValueError(f"{who}: negatives must be 'uniform' or 'popularity', got {negatives!r}")
        _seed_stream(self, who, seed, rank, workers)
        self.batch = (<Variable>users).size if isinstance(users, Variable) else 0
        self.out_users = _index_leaf(who, "users", users, -1)
        if self.batch == 0:
            raise ValueError(f"{who}: the leaves hold no ids; give IndexInputs of at least one id")
        if neg is None:       # pos holds each positive and its negatives: b * (1 + K) ids
            self.out_pos = _index_leaf(who, "pos", pos, -1)
            self.negs = (<Variable>pos).size // self.batch - 1
            if self.negs < 1 or (<Variable>pos).size % self.batch:
                raise ValueError(f"{who}: without neg, pos holds each positive and its K >= 1 "
                                 f"negatives, b * (1 + K) ids for b = {self.batch} (users' size), "
                                 f"got {(<Variable>pos).size} ids")
            self.out_neg = self.out_pos + 1
            self.pos_stride = self.neg_stride = 1 + self.negs
            self.neg_leaf = 1
            self.leaves = (users, pos)
        else:
            self.out_pos = _index_leaf(who, "pos", pos, self.batch)
            self.out_neg = _index_leaf(who, "neg", neg, -1)
            self.negs = (<Variable>neg).size // self.batch
            if self.negs < 1 or (<Variable>neg).size % self.batch:
                raise ValueError(f"{who}: neg holds {(<Variable>neg).size} ids, expected K >= 1 "
                                 f"negatives for each of the {self.batch} ids of users (b * K ids)")
            self.pos_stride, self.neg_stride, self.neg_leaf = 1, self.negs, 2
            self.leaves = (users, pos, neg)
        if isinstance(interactions, Interactions):
            if n_users is not None or n_items is not None:
                raise ValueError(f"{who}: n_users and n_items are the Interactions' own "
                                 f"({interactions!r}); give them only with (user_ids, item_ids) arrays")
            self.data = interactions
        else:
            self.data = Interactions.__new__(Interactions)
            self.data.prepare(who, interactions, n_users, n_items)
        self.n_users, self.n_items, self.nnz = self.data.n_users, self.data.n_items, self.data.nnz
        self.indptr, self.indices, self.pairs = self.data.indptr, self.data.indices, self.data.pairs
        self.by_user = sample == "user"
        self.first_pair, self.shard_pairs = _drawable_share(self.nnz, self.rank, self.workers)
        self.first_user, self.shard_users = _drawable_share(self.n_users, self.rank, self.workers)
        if self.by_user and np.any(self.data.degree == 0):
            raise ValueError(f"{who}: with sample='user' every user needs an interaction; users "
                             f"{_first_ids(np.flatnonzero(self.data.degree == 0))} have none (use "
                             f"sample='interaction', or leave them out of the matrix)")
        self.ahead_array = empty_buffer((self.batch,), np.int64)       # written every example:
        self.next_array = empty_buffer((self.batch, 2), np.int32)      # this thread's own memory
        self.ahead_noise_array = empty_buffer((self.batch * self.negs,), np.int64)
        self.next_noise_array = empty_buffer((self.batch * self.negs,), np.int32)
        self.ahead_k = <int64_t*>cnp.PyArray_DATA(self.ahead_array)
        self.next_pairs = <fa_pair*>cnp.PyArray_DATA(self.next_array)
        self.ahead_noise_k = <int64_t*>cnp.PyArray_DATA(self.ahead_noise_array)
        self.next_noise = <int32_t*>cnp.PyArray_DATA(self.next_noise_array)
        self.primed = False
        self.by_popularity = negatives == "popularity"
        no_negative = self.data.users_without_negative(self.by_popularity)
        if no_negative.size:
            raise ValueError(f"{who}: users {_first_ids(no_negative)} liked every item that can be "
                             f"drawn as a negative, so no negative exists for them")
        if examples is None:
            self.examples_per_epoch = max(1, self.nnz // (self.batch * self.workers))
        else:
            self.examples_per_epoch = check_int(who, "examples", examples, 1)
        self.id_leaves = len(self.leaves)
        if weights is not None:
            w = require_float(who, weights, "weights")
            if not isinstance(w, Input) or w.size != self.batch or w.device != "cpu":
                raise ValueError(f"{who}: weights must be an Input of {self.batch} values on the CPU "
                                 f"(one per triple, as users holds), got a {type(w).__name__} of shape "
                                 f"{w._shape} on {w.device}")
            self.out_weights, self.weights_f64 = (<Variable>w).val_ptr, (<Variable>w).f64
            self.leaves = self.leaves + (weights,)
            self.weigh_pairs()
            self.next_weights_array = empty_buffer((self.batch,), np.float64)
            self.next_weights = <double*>cnp.PyArray_DATA(self.next_weights_array)

    cdef int weigh_pairs(self) except -1:
        """Read each interaction's stored value as the weight of its positive's triples."""
        self.pair_weights_array = np.ascontiguousarray(self.data.matrix.data, dtype=np.float64)
        self.pair_weights = <const double*>cnp.PyArray_DATA(self.pair_weights_array)
        return 0

    @cython.final      # called directly, not through the vtable, so it can be inlined
    cdef bint liked(self, int64_t user, int64_t item) noexcept nogil:
        """Whether `item` is among the user's sorted items: a binary search whose steps
        select rather than branch (the compiler's conditional move), as a random item
        would mispredict about half of the branches."""
        cdef const int32_t* base = &self.indices[self.indptr[user]]
        cdef int64_t n = self.indptr[user + 1] - self.indptr[user], half
        if n == 0:
            return False
        while n > 1:
            half = n >> 1
            base = base + half if <int64_t>base[half] <= item else base
            n -= half
        return <int64_t>base[0] == item

    @cython.final
    cdef int64_t unliked_item(self, int64_t user) noexcept nogil:
        """An item the user did not like, uniformly: the r-th gap in their sorted items."""
        cdef int64_t start = self.indptr[user], end = self.indptr[user + 1], k
        cdef int64_t item = fa_rng_below(&self.rng, self.n_items - (end - start))
        for k in range(start, end):
            if self.indices[k] <= item:
                item += 1
            else:
                break
        return item

    @cython.final
    cdef int64_t negative(self, int64_t user, int64_t candidate) noexcept nogil:
        """A negative for `user`: `candidate` (drawn by the rule) unless they liked it, else
        a redraw. By popularity, an item is the item of an interaction drawn uniformly (in
        proportion to its interactions, as implicit draws it)."""
        cdef int64_t item = candidate
        cdef int tries
        for tries in range(32):
            if not self.liked(user, item):
                return item
            self.redraws += 1
            item = (self.pairs[fa_rng_below(&self.rng, self.nnz)].item if self.by_popularity
                    else fa_rng_below(&self.rng, self.n_items))
        if not self.by_popularity:
            return self.unliked_item(user)
        while True:      # terminates: every user has a drawable negative (checked when made)
            if not self.liked(user, item):
                return item
            self.redraws += 1
            item = self.pairs[fa_rng_below(&self.rng, self.nnz)].item

    @cython.final
    cdef void draw_ahead(self) noexcept nogil:
        """Draw the interactions of the example after next (an interaction uniformly, or a
        user uniformly and then one of theirs) and its negative candidates (an item
        uniformly, or by popularity the item of an interaction drawn uniformly), and start
        loading their pairs."""
        cdef Py_ssize_t b, n
        cdef int64_t k, user
        for b in range(self.batch):
            if self.by_user:
                user = self.first_user + fa_rng_below(&self.rng, self.shard_users)
                k = self.indptr[user] + fa_rng_below(&self.rng, self.indptr[user + 1] - self.indptr[user])
            else:
                k = self.first_pair + fa_rng_below(&self.rng, self.shard_pairs)
            self.ahead_k[b] = k
            fa_prefetch(&self.pairs[k])
            if self.next_weights != NULL:
                fa_prefetch(&self.pair_weights[k])
            for n in range(b * self.negs, (b + 1) * self.negs):
                if self.by_popularity:
                    k = fa_rng_below(&self.rng, self.nnz)
                    self.ahead_noise_k[n] = k
                    fa_prefetch(&self.pairs[k])
                else:
                    self.ahead_noise_k[n] = fa_rng_below(&self.rng, self.n_items)

    @cython.final
    cdef void read_ahead(self) noexcept nogil:
        """Read the pairs drawn by draw_ahead (loaded since) as the next example's, and
        start loading each user's items, where `negative` searches, and the table rows
        its ids select."""
        cdef Py_ssize_t b, n
        cdef fa_pair pair
        cdef int64_t start, end
        for b in range(self.batch):
            pair = self.pairs[self.ahead_k[b]]
            self.next_pairs[b] = pair
            if self.next_weights != NULL:
                self.next_weights[b] = self.pair_weights[self.ahead_k[b]]
            start = self.indptr[pair.user]
            end = self.indptr[pair.user + 1]        # > start: the user has this interaction
            fa_prefetch(&self.indices[start])
            fa_prefetch(&self.indices[(start + end) >> 1])     # the binary search's first probe
            fa_prefetch(&self.indices[end - 1])
            self.prefetch_rows(0, pair.user)
            self.prefetch_rows(1, pair.item)
            for n in range(b * self.negs, (b + 1) * self.negs):
                self.next_noise[n] = (self.pairs[self.ahead_noise_k[n]].item if self.by_popularity
                                      else <int32_t>self.ahead_noise_k[n])
                self.prefetch_rows(self.neg_leaf, self.next_noise[n])

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.primed = False         # the epoch's first example draws its own interactions
        return Sampler.begin_epoch(self, epoch)

    cdef bint next_example(self) noexcept nogil:
        """Fill the leaves with the next example's triples. Its interactions were read by
        the previous call (a pipeline two examples deep: draw, read, use), so their
        cache misses overlap the training step in between; it reads the next example's
        and draws the one after's, never past the epoch's last example."""
        cdef Py_ssize_t b, k, negs = self.negs
        cdef int64_t* neg
        cdef Py_ssize_t left = self.examples_per_epoch - self.epoch_examples
        if left <= 0:
            return False
        if not self.primed:
            self.draw_ahead()
            self.read_ahead()
            if left > 1:
                self.draw_ahead()
            self.primed = True
        for b in range(self.batch):
            self.out_users[b] = self.next_pairs[b].user
            self.out_pos[b * self.pos_stride] = self.next_pairs[b].item
            if self.next_weights != NULL:
                if self.weights_f64:
                    (<double*>self.out_weights)[b] = self.next_weights[b]
                else:
                    (<float*>self.out_weights)[b] = <float>self.next_weights[b]
            neg = self.out_neg + b * self.neg_stride
            for k in range(negs):
                neg[k] = self.next_noise[b * negs + k]    # read ahead: read_ahead overwrites it
        if left > 1:
            self.read_ahead()
            if left > 2:
                self.draw_ahead()
        for b in range(self.batch):
            neg = self.out_neg + b * self.neg_stride
            for k in range(negs):
                neg[k] = self.negative(self.out_users[b], neg[k])
        self.epoch_examples += 1
        return True

    cdef double epoch_progress(self) noexcept nogil:
        return self.epoch_examples / <double>self.examples_per_epoch

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        if k >= self.id_leaves:
            return -1           # the weights leaf: no ids
        return self.n_users - 1 if k == 0 else self.n_items - 1

    def where(self):
        return f"triple {self.epoch_examples} of the epoch"


cdef inline Py_ssize_t _first_above(const floating* user_row, const floating* V, const floating* bias,
                                    const int64_t* items, Py_ssize_t start, Py_ssize_t n, Py_ssize_t dim,
                                    double threshold) noexcept nogil:
    if floating is float:
        return fa_first_above_f(user_row, V, bias, items, start, n, dim, threshold)
    return fa_first_above_d(user_row, V, bias, items, start, n, dim, threshold)


cdef inline double _score(const floating* user_row, const floating* V, const floating* bias, int64_t item,
                          Py_ssize_t dim) noexcept nogil:
    """The model's score of `item` for the user of `user_row`: its dot with V[item] (fa_row_dot,
    as the scans score), plus the item's bias when there are biases."""
    if floating is float:
        return fa_id_score_cloned_f(user_row, V, bias, item, dim)
    return fa_id_score_cloned_d(user_row, V, bias, item, dim)


cdef enum:
    CANDIDATES = 16         # WarpSampler draws its candidate negatives, and loads their rows, this many at a time


cpdef double warp_weight(int64_t n_items, int64_t tries) noexcept nogil:
    """The rank weight of a WARP triple whose violating negative came at draw `tries` (>= 1)
    of `n_items` items: log(max(1, floor((n_items - 1) / tries))), at most WARP_MAX_WEIGHT
    (LightFM's rule: (n_items - 1) / tries estimates how many items outscore the positive).

    >>> warp_weight(1001, 1)        # log(1000)
    6.907755278982137
    """
    return _capped_log_rank((n_items - 1) / <double>tries)


cpdef double online_weight(int64_t n_items, double rate) noexcept nogil:
    """The rank weight of a WARP triple under the online rank estimate, for a user whose
    running rate of violating draws is `rate`: log(max(1, floor((n_items - 1) * rate))), at most
    WARP_MAX_WEIGHT ((n_items - 1) * rate estimates how many items outscore the positive, as
    (n_items - 1) / tries does when tries is about 1 / rate).

    >>> online_weight(1001, 0.5)    # log(500)
    6.214608098422191
    """
    return _capped_log_rank((n_items - 1) * rate)


cdef inline double _capped_log_rank(double rank) noexcept nogil:
    """log(max(1, floor(rank))), at most WARP_MAX_WEIGHT."""
    cdef double weight = log(max(1.0, floor(rank)))
    return weight if weight < MAX_WEIGHT else MAX_WEIGHT


@cython.final
cdef class WarpSampler(PairwiseSampler):
    """WARP's triples (Weston et al. 2011), and k-OS WARP's (Weston et al. 2013), drawn
    against the model's current scores inside `fastad.train`'s loop, each with its rank
    weight, for `fa.ranking_loss(..., loss="hinge", weights=weights)` over the same tables.

    For each positive (user u, liked item i), with score s(u, x) = U[u] . V[x] (+ b[x]):
    draw candidate negatives j (uniformly, or by popularity) up to `max_sampled` times,
    until one violates the margin, s(u, j) > s(u, i) - 1, and is not liked by u (a liked
    one counts as a draw); then fill the leaves with (u, i, j) and its weight
    log(max(1, floor((n_items - 1) / tries))) (capped at WARP_MAX_WEIGHT), LightFM's
    rule. A positive that finds no violating negative in `max_sampled` draws takes no
    update: the sampler moves on to the next positive without filling the leaves.

    `rank_estimate="online"` (the online rank estimate, for large catalogues where most
    positives draw all `max_sampled` candidates): each positive draws one candidate, as
    BPR does, and each user keeps a running rate r of their draws that violated (an
    exponential average, ONLINE_RATE_STEP a draw, from 1); a violating draw trains with
    weight log(max(1, floor((n_items - 1) * r))) (`online_weight`), r counting that draw.
    The rates live in `rates` (n_users float32s), each thread's or process's its own: the
    array given (a model's workers keep one across a fit's epochs), or new ones from 1.
    `max_sampled` is then unused.

    interactions, users, pos, neg, negatives, n_users, n_items, seed, rank, workers
                  as PairwiseSampler's. The positives are the worker's share of the
                  interactions, walked in an order shuffled at each pass: each once a
                  pass, as LightFM's epoch takes its interactions (drawing them with
                  repetition instead cost 0.01 of test AUC on a documents x words set).
    weights       an `Input` of the leaves' size and the tables' dtype: each triple's weight.
    user_table, item_table, item_bias  the model's U (n_users, dim), V (n_items, dim) and
                  optional item biases b (n_items,) or (n_items, 1): the graph's tables,
                  read as they train (Hogwild threads and processes included).
    user_features, item_features  None (ids: row u of U is user u), or `FeatureBags` (or a
                  scipy matrix made into one) of one row per user (item): then the tables
                  have a row per feature, a user's representation is sum_f w[u, f] * U[f]
                  and an item's score sum_f w[i, f] * (user . V[f] + b[f]): LightFM's
                  hybrid model. The leaves still take ids; `FeatureSampler` writes them
                  as the graph's feature bags. Scores are made LightFM's way: a row's
                  representation once, then one dot (identity bags are scored as ids).
    max_sampled   the most candidate negatives a positive draws (>= 1; LightFM's 10).
    rank_estimate "sampled" (default, LightFM's) or "online", as above.
    rates         "online": the users' rates to update (a writeable float32 array of n_users),
                  or None for new ones from 1.
    weighted      WARP (not k-OS): each triple's weight times its positive's stored value in
                  the interactions (LightFM's sample_weight; which must then be > 0, as
                  every stored value of `Interactions` is). Default False: the values are
                  ignored.
    kos_k, kos_n  k-OS WARP (kos_k given): a positive is a user drawn uniformly from the
                  worker's share of the users, then kos_n (>= 1) of their items drawn
                  uniformly (with repetition; all of them when they have fewer), and the
                  one of the kos_k-th highest score among those (the lowest, when fewer
                  were drawn) is the positive. A user with no item takes no update.
                  LightFM's k and n.
    examples      positives tried per epoch, in steps of b (the leaves' size): default
                  interactions / (b * workers), or with kos_k users / (b * workers). A
                  step fills b triples from the positives that find a violating negative;
                  when the epoch's positives run out before b are found, the slots left
                  get weight 0 (no update). `epoch_examples` counts steps' worth of
                  positives tried, so fastad.train's mean loss is per positive tried.

    `skipped` counts the positives of the last epochs that took no update (no violating
    negative in max_sampled draws, or a user with no item). Under `fastad.train` the next
    positive's rows of the tables load ahead as it draws; the rows of an optimizer's state
    beside them (Adagrad's sums) load only for a positive that found its triple (the
    negative's too), as most positives of a trained model find none.

    >>> u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    >>> w = fa.Input([0.0])
    >>> loss = fa.ranking_loss(U, u, V, i, j, loss="hinge", weights=w, reduction="sum")
    >>> fa.train(loss, opt, fa.data.WarpSampler(csr, u, i, j, w, U, V, seed=0), epochs=5)
    """
    cdef Variable user_table, item_table, item_bias
    cdef readonly FeatureBags user_features, item_features     # None: ids
    cdef FeatureBags user_bags, item_bags     # the bags its scores read: None for ids or identity bags
    cdef object user_row_array       # with user features: the drawn user's representation
    cdef char* user_row
    cdef Py_ssize_t dim
    cdef readonly Py_ssize_t max_sampled, kos_k, kos_n       # kos_k 0: WARP
    cdef int64_t candidates[CANDIDATES]   # the candidate negatives being scanned
    cdef fa_pair ahead_pair          # the positive after next, read, its bags' offsets loading
    cdef int64_t ahead_k             # its interaction
    cdef int64_t drawn_k             # the positive after that (an interaction), drawn, its pair loading
    cdef object order_array          # WARP: the worker's share of the interactions in a shuffled order,
    cdef int32_t* order              # each once a pass (offsets from first_pair)
    cdef int64_t cursor              # the next of `order` to take
    cdef fa_pair next_pair           # the next positive, read, its rows loading
    cdef int64_t next_k              # its interaction
    cdef object kos_scores_array, kos_items_array    # k-OS: a user's kos_n drawn items and scores
    cdef double* kos_scores
    cdef int64_t* kos_items
    cdef int64_t budget              # positives to try this epoch
    cdef int64_t tried               # positives tried this epoch
    cdef readonly int64_t skipped
    cdef readonly str rank_estimate
    cdef readonly object rates       # online: each user's running rate of violating draws (else None)
    cdef float* user_rates
    cdef readonly bint weighted
    cdef int64_t positive_k          # the interaction of the positive last drawn (WARP)
    cdef RowPrefetch state_prefetches[MAX_ROW_PREFETCHES]   # an optimizer's state rows beside the tables,
    cdef int n_state_prefetches      # loaded for a triple once found (leaf 0: the user's side, 1: the items')

    def __init__(self, interactions, users, pos, neg, weights, user_table, item_table, item_bias=None, *,
                 max_sampled=10, kos_k=None, kos_n=10, negatives="uniform", examples=None, n_users=None,
                 n_items=None, seed=None, rank=0, workers=1, user_features=None, item_features=None,
                 rank_estimate="sampled", weighted=False, rates=None):
        who = "WarpSampler"
        self.max_sampled = check_int(who, "max_sampled", max_sampled, 1)
        if rank_estimate not in RANK_ESTIMATES:
            raise ValueError(f"{who}: rank_estimate must be one of {', '.join(map(repr, RANK_ESTIMATES))}, "
                             f"got {rank_estimate!r}")
        self.rank_estimate = rank_estimate
        self.weighted = check_flag(who, "weighted", weighted)
        if self.weighted and kos_k is not None:
            raise ValueError(f"{who}: weighted positives are WARP's: k-OS WARP (kos_k given) draws "
                             f"its positive among a user's items, not an interaction")
        if kos_k is not None:
            self.kos_k = check_int(who, "kos_k", kos_k, 1)
            self.kos_n = check_int(who, "kos_n", kos_n, 1)
            if self.kos_k > self.kos_n:
                raise ValueError(f"{who}: kos_k ({kos_k}) must be <= kos_n ({kos_n}): the positive is "
                                 f"the kos_k-th best of kos_n sampled items")
        PairwiseSampler.__init__(self, interactions, users, pos, neg, negatives=negatives,
                                 examples=1 if examples is None else examples, n_users=n_users,
                                 n_items=n_items, seed=seed, rank=rank, workers=workers)
        if self.negs != 1:
            raise ValueError(f"{who}: neg holds {(<Variable>neg).size} ids, expected {self.batch}: "
                             f"WARP draws one violating negative a positive")
        if examples is None:
            drawn = self.n_users if self.kos_k else self.nnz
            self.examples_per_epoch = max(1, drawn // (self.batch * self.workers))
        cdef Variable U = require_float(who, user_table, "user_table")
        cdef Variable V = require_float(who, item_table, "item_table")
        if len(U._shape) != 2 or len(V._shape) != 2 or U._shape[1] != V._shape[1]:
            raise ValueError(f"{who}: user_table and item_table must be (n_users, dim) and (n_items, dim) "
                             f"tables of one dim, got shapes {U._shape} and {V._shape}")
        if user_features is not None:
            self.user_features = _bags_of(who, "user_features", user_features, self.n_users)
        if item_features is not None:
            self.item_features = _bags_of(who, "item_features", item_features, self.n_items)
        self.user_bags = None if self.user_features is None or self.user_features.identity else self.user_features
        self.item_bags = None if self.item_features is None or self.item_features.identity else self.item_features
        user_rows = self.n_users if user_features is None else self.user_features.n_features
        item_rows = self.n_items if item_features is None else self.item_features.n_features
        if U._shape[0] != user_rows or V._shape[0] != item_rows:
            raise ValueError(f"{who}: the tables have {U._shape[0]} user rows and {V._shape[0]} item "
                             f"rows, but the {'user features' if user_features is not None else 'interactions'} "
                             f"have {user_rows} and the {'item features' if item_features is not None else 'interactions'} "
                             f"{item_rows}")
        cdef Variable w = require_float(who, weights, "weights")
        cdef Variable b = None
        if item_bias is not None:
            b = require_float(who, item_bias, "item_bias")
            if b._shape not in ((item_rows,), (item_rows, 1)):
                raise ValueError(f"{who}: item_bias must have shape ({item_rows},) or "
                                 f"({item_rows}, 1), got {b._shape}")
        for name, x in (("item_table", V), ("item_bias", b), ("weights", w)):
            if x is not None and x.f64 != U.f64:
                raise TypeError(f"{who}: {name} is {x.dtype} but user_table is {U.dtype}: give "
                                f"them one dtype")
        if not isinstance(w, Input) or w.size != self.batch or w.device != "cpu":
            raise ValueError(f"{who}: weights must be an Input of {self.batch} values on the CPU "
                             f"(one per triple, as users holds), got a {type(w).__name__} of shape "
                             f"{w._shape} on {w.device}")
        if any(x is not None and x.device != "cpu" for x in (U, V, b)):
            raise ValueError(f"{who}: the tables must be on the CPU, where the loop draws")
        self.user_table, self.item_table, self.item_bias = U, V, b
        self.dim = U._shape[1]
        self.out_weights = w.val_ptr
        self.leaves = (users, pos, neg, weights)
        self.user_row_array = empty_buffer((self.dim,), U.dtype)
        self.user_row = <char*>cnp.PyArray_DATA(self.user_row_array)
        if self.kos_k:
            self.kos_scores_array = empty_buffer((self.kos_n,), np.float64)
            self.kos_items_array = empty_buffer((self.kos_n,), np.int64)
            self.kos_scores = <double*>cnp.PyArray_DATA(self.kos_scores_array)
            self.kos_items = <int64_t*>cnp.PyArray_DATA(self.kos_items_array)
        if self.weighted:
            self.weigh_pairs()
        if rank_estimate == "online":
            if rates is None:
                rates = np.ones(self.n_users, dtype=np.float32)
            elif (not isinstance(rates, np.ndarray) or rates.dtype != np.float32 or rates.shape != (self.n_users,)
                  or not rates.flags.c_contiguous or not rates.flags.writeable):
                raise ValueError(f"{who}: rates must be a writeable C-contiguous float32 array of "
                                 f"{self.n_users} values (one per user), got {type(rates).__name__} "
                                 f"{getattr(rates, 'dtype', '')} of shape {np.shape(rates)}")
            self.rates = rates
            self.user_rates = <float*>cnp.PyArray_DATA(self.rates)

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.budget = self.examples_per_epoch * self.batch
        self.tried = 0
        self.primed = False
        if not self.kos_k and self.order_array is None:     # made at the first epoch, kept
            self.order_array = np.arange(self.shard_pairs, dtype=np.int32)
            self.order = <int32_t*>cnp.PyArray_DATA(self.order_array)
        self.cursor = self.shard_pairs          # the epoch's first positive shuffles the order
        return Sampler.begin_epoch(self, epoch)

    cdef bint next_example(self) noexcept nogil:
        """Fill each slot of the leaves with the next positive that finds a violating negative
        (and its weight); slots left when the epoch's positives run out get weight 0. False
        once the epoch's positives are all tried and no slot was filled."""
        if self.user_table.f64:
            return self._next(<double*>self.out_weights)
        return self._next(<float*>self.out_weights)

    cdef bint _next(self, floating* weights) noexcept nogil:
        cdef Py_ssize_t b = 0
        while b < self.batch and self.tried < self.budget:
            self.tried += 1
            if self._draw(b, weights):
                if self.pair_weights != NULL:
                    weights[b] *= <floating>self.pair_weights[self.positive_k]
                b += 1
            else:
                self.skipped += 1
        self.epoch_examples = (self.tried + self.batch - 1) // self.batch
        if b == 0:
            return False
        while b < self.batch:           # the epoch ran out: slots that change nothing
            self.out_users[b] = self.out_users[0]
            self.out_pos[b] = self.out_neg[b] = self.out_pos[0]
            weights[b] = 0
            b += 1
        return True

    cdef bint _draw(self, Py_ssize_t b, floating* weights) noexcept nogil:
        """Draw a positive and its negatives into slot b; False when it takes no update."""
        cdef const floating* U = <const floating*>self.user_table.val_ptr
        cdef const floating* V = <const floating*>self.item_table.val_ptr
        cdef const floating* bias = (<const floating*>self.item_bias.val_ptr if self.item_bias is not None
                                     else NULL)
        cdef int64_t user, item
        cdef Py_ssize_t drawn = 0, chunk, k, found
        cdef Py_ssize_t row_bytes = self.dim * sizeof(floating)
        cdef double threshold
        cdef fa_rng rng
        cdef const floating* user_row
        if self.kos_k:
            user = self.first_user + fa_rng_below(&self.rng, self.shard_users)
            if self.indptr[user + 1] == self.indptr[user]:
                return False
            user_row = self._user_row(user, U)
            item = self._kth_positive(user, user_row, V, bias)
        else:
            user, item = self._next_positive()
            user_row = self._user_row(user, U)
        threshold = self._score_of(item, user_row, V, bias) - 1.0
        if self.user_rates != NULL:
            return self._draw_online(b, weights, user, item, user_row, V, bias, threshold)
        while drawn < self.max_sampled:         # the candidates, a chunk at a time, in draw order
            chunk = min(<Py_ssize_t>CANDIDATES, self.max_sampled - drawn)
            rng = self.rng          # in registers for the draws, not through the object's memory
            for k in range(chunk):
                self.candidates[k] = (self.pairs[fa_rng_below(&rng, self.nnz)].item if self.by_popularity
                                      else fa_rng_below(&rng, self.n_items))
                if self.item_bags is None:
                    fa_prefetch_span(<const char*>V + self.candidates[k] * row_bytes, row_bytes)
                elif k < FA_BAG_AHEAD:         # the later ones' rows as the scan reaches them
                    self.item_bags.prefetch(self.candidates[k], <const char*>V, row_bytes)
                elif k < 2 * FA_BAG_AHEAD:     # their bags' ids and weights: the scan loads
                    self.item_bags.prefetch_bag(self.candidates[k])      # the later ones'
                else:                          # their offsets
                    fa_prefetch(&self.item_bags.indptr[self.candidates[k]])
            self.rng = rng
            found = -1
            while True:
                found = self._first_violating(user_row, V, bias, found + 1, chunk, threshold)
                if found == chunk:
                    break
                if not self.liked(user, self.candidates[found]):   # a liked violator counts as a draw
                    self.out_users[b] = user
                    self.out_pos[b] = item
                    self.out_neg[b] = self.candidates[found]
                    weights[b] = <floating>warp_weight(self.n_items, drawn + found + 1)
                    self._prefetch_states(user, item, self.candidates[found])
                    return True
            drawn += chunk
        return False

    cdef bint _draw_online(self, Py_ssize_t b, floating* weights, int64_t user, int64_t item,
                           const floating* user_row, const floating* V, const floating* bias,
                           double threshold) noexcept nogil:
        """The online rank estimate: one candidate for the positive (user, item) whose score
        less 1 is `threshold`; it moves the user's violation rate, and a violating one (not
        liked by the user) fills slot b with the rate's weight. False when it does not violate."""
        cdef int64_t candidate = (self.pairs[fa_rng_below(&self.rng, self.nnz)].item if self.by_popularity
                                  else fa_rng_below(&self.rng, self.n_items))
        cdef bint violates = (self._score_of(candidate, user_row, V, bias) > threshold
                              and not self.liked(user, candidate))
        self.user_rates[user] += <float>(RATE_STEP * (violates - self.user_rates[user]))
        if not violates:
            return False
        self.out_users[b] = user
        self.out_pos[b] = item
        self.out_neg[b] = candidate
        weights[b] = <floating>online_weight(self.n_items, self.user_rates[user])
        self._prefetch_states(user, item, candidate)
        return True

    cdef void _prefetch_states(self, int64_t user, int64_t item, int64_t neg) noexcept nogil:
        """Start loading, for writing, the optimizer's state rows that the triple found will update:
        the user's and the two items' (their features' rows, with feature bags)."""
        cdef int t
        for t in range(self.n_state_prefetches):
            if self.state_prefetches[t].leaf == 0:
                _prefetch_rows_for_write(&self.state_prefetches[t], self.user_bags, user)
            else:
                _prefetch_rows_for_write(&self.state_prefetches[t], self.item_bags, item)
                _prefetch_rows_for_write(&self.state_prefetches[t], self.item_bags, neg)

    cdef int set_row_prefetches(self, list targets) except -1:
        """`targets` as Sampler takes them, split: the rows of its own tables (the graph's) load
        ahead for the next positive, by the users' and positives' leaves (0 and 1); the other
        arrays, an optimizer's state beside the tables, only for a positive that found its
        triple (most positives of a trained model find none), the negative's rows included:
        leaf 0's on the user's side, the other leaves' on the items'."""
        cdef cnp.ndarray array
        cdef Variable table
        tables = set()
        for table in (self.user_table, self.item_table, self.item_bias):
            if table is not None:
                tables.add(<size_t>table.val_ptr)
        ahead, states = [], {}
        for leaf, array in targets:
            if <size_t>cnp.PyArray_DATA(array) in tables:
                if leaf < 2:
                    ahead.append((leaf, array))
            elif array.ndim and array.nbytes and len(states) < MAX_ROW_PREFETCHES:
                states.setdefault((min(leaf, 1), <size_t>cnp.PyArray_DATA(array)), array)
        Sampler.set_row_prefetches(self, ahead)
        for t, ((side, _), array) in enumerate(states.items()):
            self.state_prefetches[t].base = <const char*>cnp.PyArray_DATA(array)
            self.state_prefetches[t].row_bytes = array.nbytes // array.shape[0]
            self.state_prefetches[t].leaf = side
        self.n_state_prefetches = len(states)
        return 0

    def _state_prefetch_targets(self):
        """The state arrays whose rows it loads for each triple found, as (side: 0 the user's, 1
        the items'; array address, row bytes): those `fastad.train` set for the run in
        progress, else none (for checks)."""
        return [(self.state_prefetches[t].leaf, <size_t>self.state_prefetches[t].base,
                 self.state_prefetches[t].row_bytes) for t in range(self.n_state_prefetches)]

    cdef (int64_t, int64_t) _next_positive(self) noexcept nogil:
        """The next positive (user, item): the worker's share of the interactions is walked in
        an order shuffled each pass, each interaction once (LightFM's epoch over its
        interactions). A pipeline three positives deep, so that each load's cache miss overlaps
        the work in between: the positive drawn three ahead has its pair loading, the one two
        ahead (its pair read) the offsets of its bags and of its user's items, the next (its
        offsets read) its table rows and its user's items."""
        cdef fa_pair pair
        cdef int64_t first, end
        if not self.primed:
            self.next_k = self._walk()
            self.next_pair = self.pairs[self.next_k]
            self.ahead_k = self._walk()
            self.ahead_pair = self.pairs[self.ahead_k]
            self.drawn_k = self._walk()
            self.primed = True
        pair = self.next_pair
        self.positive_k = self.next_k
        self.next_pair, self.next_k = self.ahead_pair, self.ahead_k
        self._prefetch_rows_of(0, self.user_bags, self.next_pair.user)
        self._prefetch_rows_of(1, self.item_bags, self.next_pair.item)
        first, end = self.indptr[self.next_pair.user], self.indptr[self.next_pair.user + 1]
        fa_prefetch(&self.indices[first])           # where `liked` searches: its first probe and ends
        fa_prefetch(&self.indices[(first + end) >> 1])
        fa_prefetch(&self.indices[end - 1])
        self.ahead_pair, self.ahead_k = self.pairs[self.drawn_k], self.drawn_k
        fa_prefetch(&self.indptr[self.ahead_pair.user])
        if self.user_bags is not None:
            fa_prefetch(&self.user_bags.indptr[self.ahead_pair.user])
        if self.item_bags is not None:
            fa_prefetch(&self.item_bags.indptr[self.ahead_pair.item])
        if self.tried + 2 < self.budget:     # past the epoch's last positive it would shuffle a pass for nothing
            self.drawn_k = self._walk()
        fa_prefetch(&self.pairs[self.drawn_k])
        if self.pair_weights != NULL:
            fa_prefetch(&self.pair_weights[self.drawn_k])
        return pair.user, pair.item

    cdef void _prefetch_rows_of(self, Py_ssize_t leaf, FeatureBags bags, int64_t row) noexcept nogil:
        """Start loading the table rows of `leaf`'s id `row`: that row, or with feature bags the
        rows of its features (`FeatureSampler` passes its bags' tables on to these leaves)."""
        cdef int64_t p
        if bags is None:
            self.prefetch_rows(leaf, row)
            return
        for p in range(bags.indptr[row], bags.indptr[row + 1]):
            self.prefetch_rows(leaf, bags.indices[p])

    cdef const floating* _user_row(self, int64_t user, const floating* U) noexcept nogil:
        """The user's representation: row `user` of U (by id, or the identity's bag), or with
        user features their weighted sum, made in this sampler's own buffer."""
        if self.user_bags is None:
            return U + user * self.dim
        self.user_bags.represent(user, U, self.dim, <floating*>self.user_row)
        return <const floating*>self.user_row

    cdef double _score_of(self, int64_t item, const floating* user_row, const floating* V,
                          const floating* bias) noexcept nogil:
        """The model's score of `item` for the user of `user_row` (through its features, with
        item features)."""
        if self.item_bags is None:
            return _score(user_row, V, bias, item, self.dim)
        return self.item_bags.score(item, user_row, V, bias, self.dim)

    cdef Py_ssize_t _first_violating(self, const floating* user_row, const floating* V, const floating* bias,
                                     Py_ssize_t start, Py_ssize_t n, double threshold) noexcept nogil:
        """The first of candidates[start:n] that scores above `threshold`, else n."""
        if self.item_bags is None:
            return _first_above(user_row, V, bias, self.candidates, start, n, self.dim, threshold)
        return self.item_bags.first_above(user_row, V, bias, self.candidates, start, n, self.dim, threshold)

    cdef int64_t _walk(self) noexcept nogil:
        """The next interaction of the shuffled walk (a pass done, the order is shuffled anew:
        Fisher-Yates, from the sampler's stream)."""
        cdef int64_t k, j
        cdef int32_t swap
        if self.cursor == self.shard_pairs:
            for k in range(self.shard_pairs - 1, 0, -1):
                j = fa_rng_below(&self.rng, k + 1)
                swap = self.order[k]
                self.order[k] = self.order[j]
                self.order[j] = swap
            self.cursor = 0
        self.cursor += 1
        return self.first_pair + self.order[self.cursor - 1]

    cdef int64_t _kth_positive(self, int64_t user, const floating* user_row, const floating* V,
                               const floating* bias) noexcept nogil:
        """k-OS: the item of the kos_k-th highest score among min(kos_n, the user's items)
        of their items drawn uniformly (of the lowest, when fewer than kos_k were drawn)."""
        cdef int64_t start = self.indptr[user], count = self.indptr[user + 1] - start
        cdef Py_ssize_t n = self.kos_n if self.kos_n < count else count, k = self.kos_k if self.kos_k < n else n
        cdef Py_ssize_t a, c, best
        for a in range(n):
            self.kos_items[a] = self.indices[start + fa_rng_below(&self.rng, count)]
            self.kos_scores[a] = self._score_of(self.kos_items[a], user_row, V, bias)
        for a in range(k):          # selection: the k highest first, in order
            best = a
            for c in range(a + 1, n):
                if self.kos_scores[c] > self.kos_scores[best]:
                    best = c
            self.kos_scores[a], self.kos_scores[best] = self.kos_scores[best], self.kos_scores[a]
            self.kos_items[a], self.kos_items[best] = self.kos_items[best], self.kos_items[a]
        return self.kos_items[k - 1]

    cdef double epoch_progress(self) noexcept nogil:
        return self.tried / <double>self.budget if self.budget else 0.0

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        return -1 if k == 3 else PairwiseSampler.largest_id(self, k)

    def where(self):
        return f"positive {self.tried} of the epoch"


cdef inline void _prefetch_rows_for_write(const RowPrefetch* target, FeatureBags bags, int64_t row) noexcept nogil:
    """Start loading, for writing, row `row` of `target`'s array, or with feature bags the rows
    of row `row`'s features."""
    cdef int64_t p
    if bags is None:
        fa_prefetch_span_for_write(target.base + row * target.row_bytes, target.row_bytes)
        return
    for p in range(bags.indptr[row], bags.indptr[row + 1]):
        fa_prefetch_span_for_write(target.base + <int64_t>bags.indices[p] * target.row_bytes, target.row_bytes)


cdef FeatureBags _bags_of(str who, str name, object features, int64_t rows):
    """`features` as FeatureBags of `rows` rows: itself when it is one (its rows checked),
    else made from a scipy matrix."""
    if isinstance(features, FeatureBags):
        if (<FeatureBags>features).n_rows != rows:
            raise ValueError(f"{who}: {name} has {(<FeatureBags>features).n_rows} rows, expected {rows} "
                             f"(one per row of the interactions' {'users' if 'user' in name else 'items'})")
        return features
    return FeatureBags(features, rows, who, name)


cdef FeatureBags _covering_bags(str who, str name, object features, Sampler sampler, object leaf):
    """`features` as FeatureBags of its own rows, which must cover every id `sampler` writes
    into `leaf`."""
    bags = features if isinstance(features, FeatureBags) else FeatureBags(
        features, getattr(features, "shape", (0,))[0], who, name)
    top = sampler.largest_ids()[[x is leaf for x in sampler.leaves].index(True)]
    if top >= (<FeatureBags>bags).n_rows:
        raise ValueError(f"{who}: the sampler writes ids up to {top}, but {name} has "
                         f"{(<FeatureBags>bags).n_rows} rows")
    return bags


cdef tuple _bag_leaves(str who, str name, object leaves, Py_ssize_t capacity, Py_ssize_t bags):
    """The (ids, offsets, weights) leaves of an `embedding_bag(table, ids, offsets,
    per_sample_weights=weights, mode="sum", include_last_offset=True)` of `bags` bags whose
    ids take up to `capacity` positions: their buffers, checked."""
    if not isinstance(leaves, tuple) or len(leaves) != 3:
        raise TypeError(f"{who}: {name} must be an (ids, offsets, weights) tuple of leaves, got {leaves!r:.60}")
    ids, offsets, weights = leaves
    cdef int64_t* ids_buffer = _index_leaf(who, f"{name}[0] (ids)", ids, -1)
    cdef int64_t* offsets_buffer = _index_leaf(who, f"{name}[1] (offsets)", offsets, bags + 1)
    if (<Variable>ids).size < capacity:
        raise ValueError(f"{who}: {name}[0] (ids) holds {(<Variable>ids).size} ids, fewer than the "
                         f"{capacity} its longest bags can take; make it at least that long")
    require_float(who, weights, f"{name}[2] (weights)")
    if not isinstance(weights, Input) or (<Variable>weights).size != (<Variable>ids).size or \
            weights.device != "cpu":
        raise ValueError(f"{who}: {name}[2] (weights) must be an Input on the CPU of the ids' "
                         f"{(<Variable>ids).size} values, got {weights!r:.80}")
    return <size_t>ids_buffer, <size_t>offsets_buffer


@cython.final
cdef class FeatureSampler(Sampler):
    """A sampler's users and items written as their bags of weighted features: LightFM's
    hybrid model in `fastad.train`'s compiled loop.

    `FeatureSampler(sampler, user_features, item_features, user_bags, item_bags, users, pos,
    neg=None)` runs `sampler` (a `PairwiseSampler`, a `WarpSampler` or a `FeedSampler`),
    which draws ids into its own leaves `users`, `pos` (and `neg`), b of each an example,
    and writes each example into the graph's leaves as bags:

    user_features, item_features  `FeatureBags` (or scipy matrices) of one row per user and
                  per item (feature ids below the tables' rows).
    user_bags     (ids, offsets, weights) leaves of `fa.embedding_bag(U, ids, offsets,
                  per_sample_weights=weights, mode="sum", include_last_offset=True)`: bag
                  k is user k's features and their weights, offsets b + 1 entries;
    item_bags     the same for the items: bag k is pos[k]'s features with their weights
                  followed, when there is `neg`, by neg[k]'s with their weights negated,
                  so that its sum is the representation of pos[k] minus that of neg[k]
                  (and over a bias table the bias difference).

    The ids leaves must hold b times the longest bag (twice that for items with `neg`);
    positions past the last offset are not read. Other leaves of `sampler` that the graph
    reads (WarpSampler's weights, a FeedSampler's labels) are filled by it directly and
    are leaves of this sampler too. Threads and Hogwild processes each run their own
    FeatureSampler over their own `sampler`, as they run the sampler.

    >>> inner = fa.data.PairwiseSampler(likes, u, i, j, seed=0)
    >>> sampler = fa.data.FeatureSampler(inner, user_features, item_features,
    ...                                  (uids, uoffs, uw), (iids, ioffs, iw), u, i, j)
    """
    cdef Sampler inner
    cdef readonly FeatureBags user_features, item_features
    cdef const int64_t* users
    cdef const int64_t* pos
    cdef const int64_t* neg             # NULL: items are pos alone
    cdef int64_t* user_ids
    cdef int64_t* user_offsets
    cdef char* user_weights
    cdef int64_t* item_ids
    cdef int64_t* item_offsets
    cdef char* item_weights
    cdef Py_ssize_t batch
    cdef bint f64

    def __init__(self, sampler, user_features, item_features, user_bags, item_bags, users, pos,
                 neg=None):
        who = "FeatureSampler"
        if not isinstance(sampler, Sampler) or isinstance(sampler, FeatureSampler):
            raise TypeError(f"{who}: sampler must be a sampler of ids (PairwiseSampler, WarpSampler, "
                            f"FeedSampler), got {type(sampler).__name__}")
        self.inner = sampler
        inner_leaves = list(sampler.leaves)
        for name, leaf in (("users", users), ("pos", pos), ("neg", neg)):
            if leaf is not None and not any(leaf is x for x in inner_leaves):
                raise ValueError(f"{who}: {name} must be one of the sampler's leaves, which it draws "
                                 f"ids into")
        self.batch = (<Variable>users).size if isinstance(users, Variable) else 0
        self.users = _index_leaf(who, "users", users, -1)
        self.pos = _index_leaf(who, "pos", pos, self.batch)
        self.neg = NULL if neg is None else _index_leaf(who, "neg", neg, self.batch)
        if isinstance(sampler, PairwiseSampler):
            self.user_features = _bags_of(who, "user_features", user_features, (<PairwiseSampler>sampler).n_users)
            self.item_features = _bags_of(who, "item_features", item_features, (<PairwiseSampler>sampler).n_items)
        else:
            self.user_features = _covering_bags(who, "user_features", user_features, sampler, users)
            self.item_features = _covering_bags(who, "item_features", item_features, sampler, pos)
        item_capacity = self.batch * self.item_features.longest * (1 if neg is None else 2)
        user_pointers = _bag_leaves(who, "user_bags", user_bags, self.batch * self.user_features.longest,
                                    self.batch)
        item_pointers = _bag_leaves(who, "item_bags", item_bags, item_capacity, self.batch)
        self.user_ids, self.user_offsets = <int64_t*><size_t>user_pointers[0], <int64_t*><size_t>user_pointers[1]
        self.item_ids, self.item_offsets = <int64_t*><size_t>item_pointers[0], <int64_t*><size_t>item_pointers[1]
        self.user_weights = (<Variable>user_bags[2]).val_ptr
        self.item_weights = (<Variable>item_bags[2]).val_ptr
        self.f64 = (<Variable>user_bags[2]).f64
        if (<Variable>item_bags[2]).f64 != self.f64:
            raise TypeError(f"{who}: the user and item weights leaves have dtypes {user_bags[2].dtype} "
                            f"and {item_bags[2].dtype}; give them one dtype")
        # until the first example, one bag over every id: fastad.train's check of the largest ids
        # (and a bag's offsets) then reads the whole ids leaves
        cdef Py_ssize_t k
        self.user_offsets[0] = self.item_offsets[0] = 0
        for k in range(1, self.batch + 1):
            self.user_offsets[k] = (<Variable>user_bags[0]).size
            self.item_offsets[k] = (<Variable>item_bags[0]).size
        self.leaves = tuple(user_bags) + tuple(item_bags) + tuple(
            x for x in inner_leaves if not any(x is y for y in (users, pos, neg)))
        self.rank, self.workers = sampler.rank, sampler.workers

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        Sampler.begin_epoch(self, epoch)
        return self.inner.begin_epoch(epoch)

    cdef bint next_example(self) noexcept nogil:
        """The inner sampler's next example, its ids written as their feature bags."""
        if not self.inner.next_example():
            return False
        if self.f64:
            self._write(<double*>self.user_weights, <double*>self.item_weights)
        else:
            self._write(<float*>self.user_weights, <float*>self.item_weights)
        self.epoch_examples = self.inner.epoch_examples
        return True

    cdef void _write(self, floating* user_weights, floating* item_weights) noexcept nogil:
        cdef Py_ssize_t b, at_user = 0, at_item = 0
        for b in range(self.batch):
            at_user = self.user_features.write(self.users[b], self.user_ids, user_weights, at_user, 1.0)
            self.user_offsets[b + 1] = at_user
            at_item = self.item_features.write(self.pos[b], self.item_ids, item_weights, at_item, 1.0)
            if self.neg != NULL:
                at_item = self.item_features.write(self.neg[b], self.item_ids, item_weights, at_item, -1.0)
            self.item_offsets[b + 1] = at_item

    cdef int end_epoch(self) except -1:
        return self.inner.end_epoch()

    cdef int set_row_prefetches(self, list targets) except -1:
        """A WarpSampler loads the next positive's feature rows ahead: the tables of the user
        bags' ids (leaf 0) go to its users leaf, those of the item bags' ids (leaf 3) to its
        pos leaf. Other samplers load nothing ahead here (their ids are not feature ids)."""
        if isinstance(self.inner, WarpSampler):
            moved = {0: 0, 3: 1}
            self.inner.set_row_prefetches([(moved[leaf], table) for leaf, table in targets if leaf in moved])
        return 0

    cdef double epoch_progress(self) noexcept nogil:
        return self.inner.epoch_progress()

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        if k == 0:
            return self.user_features.n_features - 1
        if k == 3:
            return self.item_features.n_features - 1
        return -1

    def where(self):
        return self.inner.where()

"""Samplers: the examples of `fastad.train`, drawn inside its compiled loop.

A sampler is bound to the leaves of a graph (`IndexInput`s, and `Input`s for
feeds) and writes one example into them per call, with no Python between
examples. Everything it draws is checked when it is made, so the loop runs
without bounds checks:

- `FeedSampler`: rows of arrays given up front (`fa.train(loss, opt, {leaf: array})`).
- `PairwiseSampler`: (user, liked item, other item) triples from implicit
  feedback, for BPR-style ranking losses.
- `SkipGramSampler`, `CbowSampler`: word2vec's examples from a token stream,
  skip-gram (centre, context word, negatives) or CBOW (context words, centre,
  negatives), with negative sampling, reduced windows and subsampling.

Each sampler draws from its own stream, seeded from `seed` and its `rank`
(numpy's SeedSequence), so Hogwild workers (`rank`, `workers`) draw
independent, reproducible streams over their own shard without copying data.
A seed is None (fresh entropy, or `fastad.manual_seed`'s stream), an int >= 0
or a sequence of them (e.g. [seed, epoch]); `rank` is in [0, workers).
"""
import math
import numbers

import numpy as np
cimport cython
cimport numpy as cnp
from libc.math cimport sqrt
from libc.stdint cimport int32_t, int64_t, uint64_t
from libc.stdlib cimport free, malloc
from libc.string cimport memcpy
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from fastad_cy.graph cimport Variable, IndexInput, Input, empty_buffer

cnp.import_array()

cdef extern from *:
    """
    static inline int64_t fa_claim_next(int64_t* counter) {
        return __atomic_fetch_add(counter, (int64_t)1, __ATOMIC_RELAXED);
    }
    """
    int64_t fa_claim_next(int64_t* counter) noexcept nogil

cdef extern from *:
    """
    /* One interaction of PairwiseSampler: its user and item, one 8-byte load. */
    typedef struct { int32_t user, item; } fa_pair;
    /* Ask for the cache line holding p (for reading, kept in every level) without waiting. */
    static inline void fa_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
    /* The same, for a line about to be written: loaded in a state this core may write. */
    static inline void fa_prefetch_for_write(const void* p) { __builtin_prefetch(p, 1, 3); }
    """
    ctypedef struct fa_pair:
        int32_t user
        int32_t item
    void fa_prefetch(const void* p) noexcept nogil
    void fa_prefetch_for_write(const void* p) noexcept nogil

cdef int64_t INT32_LIMIT = 2147483647      # the largest user or item id count PairwiseSampler holds

__all__ = ["set_default_seed", "Sampler", "FeedSampler", "Interactions", "PairwiseSampler", "WindowSampler",
           "SkipGramSampler", "CbowSampler", "AliasTable"]


# ---------------------------------------------------------------- checks shared by the samplers

cdef Py_ssize_t _whole(str who, str name, object value, Py_ssize_t low) except? -1:
    if isinstance(value, bool) or not isinstance(value, numbers.Integral):
        raise TypeError(f"{who}: {name} must be an integer, got {value!r}")
    if value < low:
        raise ValueError(f"{who}: {name} must be >= {low}, got {value}")
    return value


cdef double _real(str who, str name, object value, object at_least) except? -1.0:
    """`value` as a float: a finite real number (not a bool), >= `at_least` unless None."""
    expected = "a finite number" + ("" if at_least is None else f" >= {at_least:g}")
    if isinstance(value, (bool, np.bool_)) or not isinstance(value, numbers.Real):
        raise TypeError(f"{who}: {name} must be {expected}, got {value!r} ({type(value).__name__})")
    if not (math.isfinite(value) and (at_least is None or value >= at_least)):
        raise ValueError(f"{who}: {name} must be {expected}, got {value!r}")
    return float(value)


cdef bint _flag(str who, str name, object value) except -1:
    """`value` as a bool: True or False (numpy's too), or the ints 0 and 1, as the flags of
    fastad's Python side take them; anything else is a TypeError, not a guess."""
    if not isinstance(value, (bool, np.bool_)) and not (
            isinstance(value, numbers.Integral) and value in (0, 1)):
        raise TypeError(f"{who}: {name} must be True or False, got {value!r} ({type(value).__name__})")
    return bool(value)


cdef tuple _share(int64_t n, Py_ssize_t rank, Py_ssize_t workers):
    """[lo, hi): worker `rank`'s contiguous 1/workers share of n things."""
    return n * rank // workers, n * (rank + 1) // workers


cdef tuple _drawable_share(int64_t n, Py_ssize_t rank, Py_ssize_t workers):
    """(first, count) of worker `rank`'s share of n things to draw from, or all n when that
    share is empty (fewer things than workers)."""
    lo, hi = _share(n, rank, workers)
    return (lo, hi - lo) if hi > lo else (0, n)


_default_seeds = None      # set by fastad.manual_seed: where samplers made with seed=None draw from


def set_default_seed(sequence):
    """Make samplers made with seed=None draw their seeds from `sequence` (a numpy
    SeedSequence), in order; None restores fresh entropy. `fastad.manual_seed` calls this."""
    global _default_seeds
    if sequence is not None and not isinstance(sequence, np.random.SeedSequence):
        raise TypeError(f"set_default_seed: expected a numpy SeedSequence or None, got {type(sequence).__name__}")
    _default_seeds = sequence


cdef object _entropy(str who, object seed):
    """The entropy of a stream: `seed` itself, checked to be what numpy's SeedSequence takes
    (an int >= 0, or a sequence of them, not bools), or with seed=None the next seed of
    fastad.manual_seed's (None without one: fresh entropy)."""
    if seed is None:
        return _default_seeds.spawn(1)[0].entropy if _default_seeds is not None else None
    expected = "None, an int >= 0 or a sequence of ints >= 0"
    words = (seed,)             # what is no sequence of numbers is checked as one number
    if not isinstance(seed, (numbers.Integral, str, bytes)) and hasattr(seed, "__len__") and not (
            isinstance(seed, np.ndarray) and seed.ndim == 0):
        try:
            words = np.asarray(seed, dtype=object).ravel()
        except ValueError:      # a ragged sequence
            pass
    for word in words:
        if isinstance(word, bool) or not isinstance(word, numbers.Integral):
            raise TypeError(f"{who}: seed must be {expected}, got {seed!r} ({type(seed).__name__})")
        if word < 0:
            raise ValueError(f"{who}: seed must be {expected}, got {seed!r}")
    return seed


cdef object _seed_stream(Sampler sampler, str who, object seed, object rank, object workers):
    """Check `seed`, `rank` and `workers` and seed the sampler's stream; returns the entropy
    it was seeded from (see _entropy)."""
    entropy = _entropy(who, seed)
    sampler.workers = _whole(who, "workers", workers, 1)
    sampler.rank = _whole(who, "rank", rank, 0)
    if sampler.rank >= sampler.workers:
        raise ValueError(f"{who}: rank must be below workers ({sampler.workers}), got {rank}")
    state = np.random.SeedSequence(entropy, spawn_key=(sampler.rank,)).generate_state(4, np.uint64)
    for k in range(4):
        sampler.rng.s[k] = <uint64_t>int(state[k])
    if sampler.rng.s[0] == 0 and sampler.rng.s[1] == 0 and sampler.rng.s[2] == 0 and sampler.rng.s[3] == 0:
        sampler.rng.s[0] = 1          # xoshiro's one forbidden state
    return entropy


cdef int64_t* _index_leaf(str who, str name, object leaf, Py_ssize_t size) except NULL:
    """The id buffer of an IndexInput on the CPU, of `size` ids (any size when size < 0)."""
    if not isinstance(leaf, IndexInput):
        raise TypeError(f"{who}: {name} must be an IndexInput leaf of the graph, got {type(leaf).__name__}")
    if leaf.device != "cpu":
        raise ValueError(f"{who}: {name} is on {leaf.device}; the compiled loop samples on the CPU")
    if size >= 0 and (<Variable>leaf).size != size:
        raise ValueError(f"{who}: {name} holds {(<Variable>leaf).size} ids, expected {size}")
    return <int64_t*>(<Variable>leaf).val_ptr


cdef char* _input_leaf(str who, str name, object leaf, Py_ssize_t size) except NULL:
    """The value buffer of a CPU Input of `size` values."""
    if not isinstance(leaf, Input):
        raise TypeError(f"{who}: {name} must be a CPU Input of {size} values, got "
                        f"{type(leaf).__name__} {leaf!r}")
    if (<Variable>leaf).size != size or leaf.device != "cpu":
        raise ValueError(f"{who}: {name} must be a CPU Input of {size} values, got {leaf!r}")
    return (<Variable>leaf).val_ptr


cdef char* _mask_leaf(str who, str what, object mask, Py_ssize_t slots) except? NULL:
    """The buffer of the `mask` Input of a sampler that fills `slots` examples (`what`) a
    replay, or NULL when there is one (then no mask is needed)."""
    if mask is None:
        if slots > 1:
            raise ValueError(f"{who}: with {slots} {what} an example, give mask (an Input of "
                             f"{slots} values, 0 for the slots of the epoch's last, partial "
                             f"example) and multiply each one's loss by it")
        return NULL
    return _input_leaf(who, "mask", mask, slots)


cdef inline void _put_weight(char* weights, bint f64, Py_ssize_t k, double value) noexcept nogil:
    if f64:
        (<double*>weights)[k] = value
    else:
        (<float*>weights)[k] = <float>value


cdef object _integer_array(str who, str name, object data):
    """`data` as a C-contiguous int64 array of non-negative ids."""
    arr = np.asarray(data)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{who}: {name} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        raise IndexError(f"{who}: {name} holds an id too large for int64 ({arr.max()})")
    arr = np.ascontiguousarray(arr, dtype=np.int64)
    if arr.size and arr.min() < 0:
        raise IndexError(f"{who}: {name} holds a negative id ({arr.min()}) at position "
                         f"{int(np.argmin(arr))}")
    return arr


cdef str _first_ids(object ids):
    shown = ", ".join(str(int(i)) for i in ids[:5])
    return shown + (f", ... ({len(ids)} in all)" if len(ids) > 5 else "")


# ---------------------------------------------------------------- the protocol

cdef class Sampler:
    """Base of the samplers: `fastad.train` calls `begin_epoch`, then `next_example`
    (which fills the leaves and counts `epoch_examples`) until it returns False. `epoch()` runs the same steps from Python, for a look
    at what a sampler draws."""

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is a base class; use FeedSampler, PairwiseSampler, "
                        f"SkipGramSampler or CbowSampler")

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.epoch_examples = 0
        return 0

    cdef bint next_example(self) noexcept nogil:
        return False

    cdef double epoch_progress(self) noexcept nogil:
        return 1.0

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        return -1

    def where(self):
        """Where the last example came from, for error messages."""
        return f"example {self.epoch_examples}"

    def progress(self):
        """The share of the current epoch drawn so far, in [0, 1] (what a run-long
        `LinearDecay` inside `fastad.train` follows)."""
        return self.epoch_progress()

    def origin_of(self, k, id):
        """Where leaf k's id `id` comes from, for error messages (" (row 7 of its feed)")."""
        return ""

    def epoch(self, epoch=0):
        """Yield each example of an epoch as a tuple of copies of the leaves' values.

        >>> users, pos, neg = next(sampler.epoch())
        """
        self.begin_epoch(_whole(type(self).__name__, "epoch", epoch, 0))
        while self.next_example():
            yield tuple(np.array(leaf.value) for leaf in self.leaves)

    def largest_ids(self):
        """For each leaf, the largest id this sampler can write into it (-1 for an Input).

        `fastad.train` checks these against the graph before its first example.
        """
        return tuple(self.largest_id(k) for k in range(len(self.leaves)))

    cdef int set_row_prefetches(self, list targets) except -1:
        """Load rows ahead for `targets`, (leaf index, table array) pairs: each table's row
        of the next example's id in that leaf, wherever the sampler knows it one example
        ahead (`prefetch_rows`). The tables are borrowed: `fastad.train` sets them for its
        run and clears them (an empty list) at its end. Only the first MAX_ROW_PREFETCHES
        targets of the first MAX_PREFETCHED_LEAVES leaves are kept: loading more rows
        ahead than that would evict what the current step is using."""
        cdef Py_ssize_t leaf
        cdef cnp.ndarray table
        cdef int t = 0, k
        kept = sorted([(leaf, table) for leaf, table in targets
                       if leaf < MAX_PREFETCHED_LEAVES and table.ndim and table.nbytes]
                      [:MAX_ROW_PREFETCHES], key=lambda target: target[0])
        for leaf, table in kept:
            self.row_prefetches[t].base = <const char*>cnp.PyArray_DATA(table)
            self.row_prefetches[t].row_bytes = table.nbytes // table.shape[0]
            self.row_prefetches[t].leaf = leaf
            t += 1
        self.n_row_prefetches = t
        t = 0
        for k in range(MAX_PREFETCHED_LEAVES + 1):      # where each leaf's targets begin
            while t < self.n_row_prefetches and self.row_prefetches[t].leaf < k:
                t += 1
            self.leaf_prefetches[k] = t
        return 0

    def _row_prefetch_targets(self):
        """The tables it loads rows of ahead, as (leaf index, table address, row bytes):
        those `fastad.train` set for the run in progress, else none (for checks)."""
        return [(self.row_prefetches[t].leaf, <size_t>self.row_prefetches[t].base,
                 self.row_prefetches[t].row_bytes) for t in range(self.n_row_prefetches)]

    cdef void prefetch_rows(self, Py_ssize_t leaf, int64_t row) noexcept nogil:
        """Start loading, for writing, the cache lines of row `row` of each table that
        `leaf`'s ids select (the graph's gathers read and then update them)."""
        cdef int t
        cdef size_t line, last
        if leaf >= MAX_PREFETCHED_LEAVES:
            return
        for t in range(self.leaf_prefetches[leaf], self.leaf_prefetches[leaf + 1]):
            line = <size_t>(self.row_prefetches[t].base + row * self.row_prefetches[t].row_bytes)
            last = (line + <size_t>self.row_prefetches[t].row_bytes - 1) & ~(<size_t>63)
            line &= ~(<size_t>63)
            while line <= last:
                fa_prefetch_for_write(<const void*>line)
                line += 64


# ---------------------------------------------------------------- rows of given arrays

cdef object _feed_array(str who, object leaf, object data):
    """`data` as a C-contiguous array of shape (N,) + leaf.shape, checked."""
    if not isinstance(leaf, (Input, IndexInput)):
        # A Parameter too is a leaf, but feeding it would overwrite what the optimizer learns.
        kind = leaf.op_name if isinstance(leaf, Variable) else type(leaf).__name__
        raise TypeError(f"{who}: feeds must be keyed by Input or IndexInput leaves, got '{kind}'")
    if leaf.device != "cpu":
        raise ValueError(f"{who}: the compiled loop runs on the CPU; the fed leaf {leaf!r} "
                         f"is on {leaf.device}")
    if np.ndim(data) == 0:
        raise ValueError(f"{who}: the feed for a leaf of shape {leaf.shape} is a scalar; "
                         f"expected an array of shape (N,) + {leaf.shape}")
    if isinstance(leaf, IndexInput):
        arr = _integer_array(who, "the feed for an IndexInput", data)
    else:
        try:
            arr = np.ascontiguousarray(data, dtype=leaf.dtype)
        except (TypeError, ValueError) as e:
            raise TypeError(f"{who}: the feed for an Input of shape {leaf.shape} must hold real "
                            f"numbers ({e})") from None
    shape = leaf.shape
    if arr.shape[1:] != shape and not (arr.ndim == 1 and shape == (1,)):
        raise ValueError(f"{who}: a feed of shape {arr.shape} does not fit a leaf of shape {shape}; "
                         f"expected (N,) + {shape}")
    return arr


cdef class FeedSampler(Sampler):
    """Rows of arrays given up front: row e of every feed goes into its leaf.

    feeds    {leaf: array}: an array of shape (N,) + leaf.shape per leaf
             (IndexInput or Input), or (N,) for a leaf of shape (1,).
    shuffle  True (or 1) to visit the rows in a new random order each epoch (the
             shard is copied in that order once per epoch: memory for one copy).
    rank, workers  this worker's shard: rows rank, rank + workers, ... (no copy).

    `fa.train(loss, opt, {leaf: array}, shuffle=..., seed=...)` makes one.

    >>> fa.train(loss, opt, fa.data.FeedSampler({u: users, i: items}, shuffle=True, seed=0))
    """
    cdef list arrays, epoch_arrays
    cdef object order, generator
    cdef char** src
    cdef char** dst
    cdef Py_ssize_t* width
    cdef Py_ssize_t* stride
    cdef Py_ssize_t* prefetched_ids   # per feed: the ids of the next row whose table rows are
                                      # loaded ahead (its leaf's size, or 0: see set_row_prefetches)
    cdef Py_ssize_t n_feeds, n_rows, shard_rows, row
    cdef bint shuffle

    def __dealloc__(self):
        PyMem_Free(self.src)
        PyMem_Free(self.dst)
        PyMem_Free(self.width)
        PyMem_Free(self.stride)
        PyMem_Free(self.prefetched_ids)

    def __init__(self, feeds, shuffle=False, seed=None, rank=0, workers=1):
        who = "FeedSampler"
        if not hasattr(feeds, "items"):
            raise TypeError(f"{who}: feeds must be a dict {{leaf: array}}, got {type(feeds).__name__}")
        if not feeds:
            raise ValueError(f"{who}: `feeds` is empty; give at least one {{leaf: array}}")
        entropy = _seed_stream(self, who, seed, rank, workers)
        self.shuffle = _flag(who, "shuffle", shuffle)
        self.generator = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(self.rank,)))
        leaves, self.arrays = [], []
        self.n_rows = -1
        for leaf, data in feeds.items():
            arr = _feed_array(who, leaf, data)
            if self.n_rows >= 0 and arr.shape[0] != self.n_rows:
                raise ValueError(f"{who}: feeds hold different numbers of examples "
                                 f"({self.n_rows} and {arr.shape[0]})")
            self.n_rows = arr.shape[0]
            leaves.append(leaf)
            self.arrays.append(arr)
        if self.n_rows == 0:
            raise ValueError(f"{who}: the feeds have 0 rows (arrays of shape "
                             f"{self.arrays[0].shape}); give at least one example")
        self.leaves = tuple(leaves)
        self.n_feeds = len(leaves)
        self.shard_rows = max(0, (self.n_rows - self.rank + self.workers - 1) // self.workers)
        self.src = <char**>PyMem_Malloc(self.n_feeds * sizeof(char*))
        self.dst = <char**>PyMem_Malloc(self.n_feeds * sizeof(char*))
        self.width = <Py_ssize_t*>PyMem_Malloc(self.n_feeds * sizeof(Py_ssize_t))
        self.stride = <Py_ssize_t*>PyMem_Malloc(self.n_feeds * sizeof(Py_ssize_t))
        self.prefetched_ids = <Py_ssize_t*>PyMem_Malloc(self.n_feeds * sizeof(Py_ssize_t))
        if self.src == NULL or self.dst == NULL or self.width == NULL or self.stride == NULL \
                or self.prefetched_ids == NULL:
            raise MemoryError()
        for k in range(self.n_feeds):
            self.dst[k] = (<Variable>self.leaves[k]).val_ptr
            self.width[k] = (<Variable>self.leaves[k]).size * (<cnp.ndarray>self.arrays[k]).itemsize
            self.prefetched_ids[k] = 0
        self.begin_epoch(0)

    @property
    def examples_per_epoch(self):
        """The rows of this worker's shard."""
        return self.shard_rows

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        cdef Py_ssize_t k
        self.epoch_examples = 0
        self.row = 0
        if self.shuffle:
            # Copy the shard in this epoch's order, so that the loop reads it sequentially.
            self.order = self.rank + self.workers * self.generator.permutation(self.shard_rows)
            self.epoch_arrays = [arr[self.order] for arr in self.arrays]
            for k in range(self.n_feeds):
                self.src[k] = <char*>cnp.PyArray_DATA(self.epoch_arrays[k])
                self.stride[k] = self.width[k]
        else:
            self.order = None
            for k in range(self.n_feeds):
                self.src[k] = <char*>cnp.PyArray_DATA(self.arrays[k]) + self.rank * self.width[k]
                self.stride[k] = self.workers * self.width[k]
        return 0

    cdef int set_row_prefetches(self, list targets) except -1:
        """As Sampler's; the ids of a feed whose leaf a target names are its row's ids
        (an IndexInput's feed: int64)."""
        cdef int t
        Sampler.set_row_prefetches(self, targets)
        for t in range(self.n_feeds):
            self.prefetched_ids[t] = 0
        for t in range(self.n_row_prefetches):
            self.prefetched_ids[self.row_prefetches[t].leaf] = (
                <Variable>self.leaves[self.row_prefetches[t].leaf]).size
        return 0

    cdef bint next_example(self) noexcept nogil:
        cdef Py_ssize_t k, j
        cdef const int64_t* ids
        if self.row >= self.shard_rows:
            return False
        for k in range(self.n_feeds):
            if self.width[k] == 8:      # one id: a constant size, which the compiler inlines
                memcpy(self.dst[k], self.src[k] + self.row * self.stride[k], 8)
            else:
                memcpy(self.dst[k], self.src[k] + self.row * self.stride[k], self.width[k])
        self.row += 1
        self.epoch_examples += 1
        if self.n_row_prefetches and self.row < self.shard_rows:     # the next row's table rows
            for k in range(self.n_feeds):
                ids = <const int64_t*>(self.src[k] + self.row * self.stride[k])
                for j in range(self.prefetched_ids[k]):
                    self.prefetch_rows(k, ids[j])
        return True

    cdef double epoch_progress(self) noexcept nogil:
        return self.row / <double>self.shard_rows if self.shard_rows else 1.0

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        if isinstance(self.leaves[k], IndexInput) and self.arrays[k].size:
            return int(self.arrays[k].max())
        return -1

    def origin_of(self, k, id):
        rows = np.flatnonzero((self.arrays[k] == id).reshape(self.n_rows, -1).any(axis=1))
        return f" (row {int(rows[0])} of its feed)" if rows.size else ""

    def where(self):
        if self.row == 0:
            return "before the first row"
        last = self.row - 1
        row = int(self.order[last]) if self.order is not None else self.rank + self.workers * last
        return f"row {row} of the feeds"


# ---------------------------------------------------------------- weighted draws

cdef int _vose(double[::1] scaled, const double[::1] w, double[::1] prob,
               int64_t[::1] alias) except -1 nogil:
    """Vose's pairing: each column below 1 (small) is topped up by one above (large),
    which loses what it gave. What is left holds probability 1 up to rounding; a
    weightless item left over by rounding hands its draws to the heaviest one."""
    cdef Py_ssize_t n = scaled.shape[0], n_small = 0, n_large = 0, i, s, l, heaviest = 0
    cdef int64_t* small = <int64_t*>malloc(n * sizeof(int64_t))
    cdef int64_t* large = <int64_t*>malloc(n * sizeof(int64_t))
    if small == NULL or large == NULL:
        free(small)
        free(large)
        with gil:
            raise MemoryError()
    for i in range(n):
        _file(i, scaled, small, &n_small, large, &n_large)
        if w[i] > w[heaviest]:
            heaviest = i
    while n_small and n_large:
        n_small -= 1
        n_large -= 1
        s, l = small[n_small], large[n_large]
        prob[s], alias[s] = scaled[s], l
        scaled[l] -= 1.0 - scaled[s]
        _file(l, scaled, small, &n_small, large, &n_large)
    for i in range(n_small):
        _settle(small[i], w, prob, alias, heaviest)
    for i in range(n_large):
        _settle(large[i], w, prob, alias, heaviest)
    free(small)
    free(large)
    return 0


cdef inline void _file(Py_ssize_t i, const double[::1] scaled, int64_t* small, Py_ssize_t* n_small,
                       int64_t* large, Py_ssize_t* n_large) noexcept nogil:
    """Push column i on the stack of those below 1 (small) or the other (large)."""
    if scaled[i] < 1.0:
        small[n_small[0]] = i
        n_small[0] += 1
    else:
        large[n_large[0]] = i
        n_large[0] += 1


cdef inline void _settle(Py_ssize_t i, const double[::1] w, double[::1] prob, int64_t[::1] alias,
                         Py_ssize_t heaviest) noexcept nogil:
    prob[i] = 1.0 if w[i] > 0 else 0.0
    alias[i] = i if w[i] > 0 else heaviest


cdef class AliasTable:
    """Draws i with probability weights[i] / sum(weights), in constant time
    (Vose's alias method). Built once from non-negative finite weights.

    >>> table = AliasTable(counts ** 0.75)       # word2vec's noise distribution
    """

    def __init__(self, weights):
        w = np.asarray(weights, dtype=np.float64)
        if w.ndim != 1 or w.size == 0:
            raise ValueError(f"AliasTable: weights must be a non-empty 1-D array, got shape {w.shape}")
        if not np.all(np.isfinite(w)) or w.min() < 0:
            raise ValueError("AliasTable: weights must be finite and >= 0")
        total = w.sum()
        if total <= 0:
            raise ValueError("AliasTable: the weights sum to 0; nothing can be drawn")
        self.n = w.size
        w = np.ascontiguousarray(w)
        scaled = w * (self.n / total)
        prob = np.ones(self.n)
        alias = np.arange(self.n, dtype=np.int64)
        _vose(scaled, w, prob, alias)
        self.prob = prob
        self.alias = alias

    cdef int64_t draw(self, fa_rng* rng) noexcept nogil:
        cdef int64_t i = fa_rng_below(rng, self.n)
        return i if fa_rng_uniform(rng) < self.prob[i] else self.alias[i]

    def probabilities(self):
        """The distribution the table draws from (for checks)."""
        p = np.asarray(self.prob).copy()
        np.add.at(p, np.asarray(self.alias), 1.0 - np.asarray(self.prob))
        return p / self.n


# ---------------------------------------------------------------- ranking triples

cdef int _check_int32(str who, str name, object size) except -1:
    if size > INT32_LIMIT:
        raise ValueError(f"{who}: {name} is {size}, above 2**31 - 1 = {INT32_LIMIT}: the sampler "
                         f"holds user and item ids as int32")
    return 0


cdef object _interactions_csr(str who, object interactions, object n_users, object n_items):
    """The user x item matrix as canonical CSR (each row's items sorted and unique), its
    user and item counts checked to fit int32."""
    import scipy.sparse as sp
    if sp.issparse(interactions):
        for name, size in (("n_users (the matrix's rows)", interactions.shape[0]),
                           ("n_items (the matrix's columns)", interactions.shape[1])):
            _check_int32(who, name, size)
        matrix = sp.csr_matrix(interactions, copy=True)
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
        rows = _whole(who, "n_users", n_users, 1) if n_users is not None else (int(users.max()) + 1 if users.size else 0)
        cols = _whole(who, "n_items", n_items, 1) if n_items is not None else (int(items.max()) + 1 if items.size else 0)
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


cdef class Interactions:
    """A user x item interaction matrix made ready for `PairwiseSampler`, once.

    `Interactions(interactions, n_users=None, n_items=None)` takes what
    PairwiseSampler takes (a scipy matrix, or a (user_ids, item_ids) tuple) and
    holds it as canonical CSR (`matrix`), each interaction as one int32 (user,
    item) pair, and each user's sorted items. Samplers made from it (every
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
    cdef object no_popular_negative   # the users users_without_negative(True) gives, once found

    def __init__(self, interactions, n_users=None, n_items=None):
        self.prepare("Interactions", interactions, n_users, n_items)

    cdef int prepare(self, str who, object interactions, object n_users, object n_items) except -1:
        """Check and lay out the interactions; errors name `who`, the caller made for them."""
        self.matrix = _interactions_csr(who, interactions, n_users, n_items)
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
        return 0

    def __reduce__(self):
        return Interactions, (self.matrix,)

    def __repr__(self):
        return f"Interactions({self.n_users} users x {self.n_items} items, {self.nnz} interactions)"

    cdef object users_without_negative(self, bint by_popularity):
        """The users for whom no negative can be drawn: they liked every item (uniform
        negatives) or every item with an interaction (popularity)."""
        if not by_popularity:
            return np.flatnonzero(self.degree >= self.n_items)
        if self.no_popular_negative is None:
            # a user's liked mass (the interactions of the items they liked), from a running sum
            # over their slices: it reaches nnz when they liked every item that has one
            counts = np.bincount(self.indices_array, minlength=self.n_items)
            running = np.zeros(self.nnz + 1, dtype=np.int64)
            np.cumsum(counts[self.indices_array], out=running[1:])
            liked_mass = running[self.indptr_array[1:]] - running[self.indptr_array[:self.n_users]]
            self.no_popular_negative = np.flatnonzero((self.degree > 0) & (liked_mass == self.nnz))
        return self.no_popular_negative


cdef class PairwiseSampler(Sampler):
    """(user, liked item, other item) triples from implicit feedback, for ranking
    losses such as BPR's `-logsigmoid(U[u].(V[i] - V[j]))`.

    interactions  a scipy sparse user x item matrix (a stored value > 0 is an
                  interaction), or a (user_ids, item_ids) tuple of arrays with
                  optional `n_users`, `n_items` (default: the largest id + 1), or
                  `Interactions` made from either: samplers made from one
                  `Interactions` (each epoch's, each worker's) share its arrays.
    users, pos, neg  IndexInput leaves of one size b: each example fills b triples.
    sample        "interaction": a liked (user, item) pair drawn uniformly (a
                  user weighs by activity, as implicit's BPR does); "user": a user
                  drawn uniformly, then one of their items.
    negatives     "uniform" over the items, or "popularity" (in proportion to
                  each item's interactions). A negative the user liked is redrawn
                  (never skipped); `redraws` counts them.
    examples      examples per epoch for this worker (default: interactions / (b * workers)).
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
    (U[user], V[item] and V[candidate negative], biases: see `_row_sources`).

    >>> u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    >>> loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])).sum()
    >>> fa.train(loss, opt, fa.data.PairwiseSampler(csr, u, i, j, seed=0), epochs=5)
    """
    cdef readonly Interactions data   # the interactions, shared with every sampler made from them
    cdef const int64_t* indptr        # data's arrays, read without the GIL
    cdef const int32_t* indices
    cdef const fa_pair* pairs
    cdef object ahead_array, next_array, ahead_noise_array, next_noise_array
    cdef int64_t* ahead_k             # the interactions drawn for the example after next
    cdef int64_t* ahead_noise_k       # its first negative candidates: by popularity the interactions
                                      # whose items they are, else the items
    cdef fa_pair* next_pairs          # the next example's (user, item) pairs, read ahead
    cdef int32_t* next_noise          # and its first negative candidates
    cdef bint primed                  # whether those hold this epoch's next examples
    cdef int64_t* out_users
    cdef int64_t* out_pos
    cdef int64_t* out_neg
    cdef Py_ssize_t batch
    cdef int64_t n_users, n_items, nnz
    cdef int64_t first_pair, shard_pairs, first_user, shard_users   # this worker's positives
    cdef bint by_user, by_popularity
    cdef readonly Py_ssize_t examples_per_epoch
    cdef readonly int64_t redraws

    def __init__(self, interactions, users, pos, neg, *, sample="interaction", negatives="uniform",
                 examples=None, n_users=None, n_items=None, seed=None, rank=0, workers=1):
        who = "PairwiseSampler"
        if sample not in ("interaction", "user"):
            raise ValueError(f"{who}: sample must be 'interaction' or 'user', got {sample!r}")
        if negatives not in ("uniform", "popularity"):
            raise ValueError(f"{who}: negatives must be 'uniform' or 'popularity', got {negatives!r}")
        _seed_stream(self, who, seed, rank, workers)
        self.batch = (<Variable>users).size if isinstance(users, Variable) else 0
        self.out_users = _index_leaf(who, "users", users, -1)
        self.out_pos = _index_leaf(who, "pos", pos, self.batch)
        self.out_neg = _index_leaf(who, "neg", neg, self.batch)
        if self.batch == 0:
            raise ValueError(f"{who}: the leaves hold no ids; give IndexInputs of at least one id")
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
        self.ahead_noise_array = empty_buffer((self.batch,), np.int64)
        self.next_noise_array = empty_buffer((self.batch,), np.int32)
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
            self.examples_per_epoch = _whole(who, "examples", examples, 1)

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
        cdef Py_ssize_t b
        cdef int64_t k, user
        for b in range(self.batch):
            if self.by_user:
                user = self.first_user + fa_rng_below(&self.rng, self.shard_users)
                k = self.indptr[user] + fa_rng_below(&self.rng, self.indptr[user + 1] - self.indptr[user])
            else:
                k = self.first_pair + fa_rng_below(&self.rng, self.shard_pairs)
            self.ahead_k[b] = k
            fa_prefetch(&self.pairs[k])
            if self.by_popularity:
                k = fa_rng_below(&self.rng, self.nnz)
                self.ahead_noise_k[b] = k
                fa_prefetch(&self.pairs[k])
            else:
                self.ahead_noise_k[b] = fa_rng_below(&self.rng, self.n_items)

    @cython.final
    cdef void read_ahead(self) noexcept nogil:
        """Read the pairs drawn by draw_ahead (loaded since) as the next example's, and
        start loading each user's items, where `negative` searches, and the table rows
        its ids select."""
        cdef Py_ssize_t b
        cdef fa_pair pair
        cdef int64_t start, end
        for b in range(self.batch):
            pair = self.pairs[self.ahead_k[b]]
            self.next_pairs[b] = pair
            self.next_noise[b] = (self.pairs[self.ahead_noise_k[b]].item if self.by_popularity
                                  else <int32_t>self.ahead_noise_k[b])
            start = self.indptr[pair.user]
            end = self.indptr[pair.user + 1]        # > start: the user has this interaction
            fa_prefetch(&self.indices[start])
            fa_prefetch(&self.indices[(start + end) >> 1])     # the binary search's first probe
            fa_prefetch(&self.indices[end - 1])
            self.prefetch_rows(0, pair.user)
            self.prefetch_rows(1, pair.item)
            self.prefetch_rows(2, self.next_noise[b])

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.primed = False         # the epoch's first example draws its own interactions
        return Sampler.begin_epoch(self, epoch)

    cdef bint next_example(self) noexcept nogil:
        """Fill the leaves with the next example's triples. Its interactions were read by
        the previous call (a pipeline two examples deep: draw, read, use), so their
        cache misses overlap the training step in between; it reads the next example's
        and draws the one after's, never past the epoch's last example."""
        cdef Py_ssize_t b
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
            self.out_pos[b] = self.next_pairs[b].item
            self.out_neg[b] = self.next_noise[b]      # read ahead: read_ahead overwrites it
        if left > 1:
            self.read_ahead()
            if left > 2:
                self.draw_ahead()
        for b in range(self.batch):
            self.out_neg[b] = self.negative(self.out_users[b], self.out_neg[b])
        self.epoch_examples += 1
        return True

    cdef double epoch_progress(self) noexcept nogil:
        return self.epoch_examples / <double>self.examples_per_epoch

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        return self.n_users - 1 if k == 0 else self.n_items - 1

    def where(self):
        return f"triple {self.epoch_examples} of the epoch"


# ---------------------------------------------------------------- word2vec's windows

cdef class WindowSampler(Sampler):
    """The corpus walk word2vec's two models share: sentences of this worker's shard,
    frequent words subsampled, a reduced window drawn per centre, and negatives
    from the unigram distribution ** ns_exponent. Subclasses fill the leaves."""
    cdef object tokens_array, ends_array, keep_array, buffer_array
    cdef const int64_t[::1] tokens
    cdef const int64_t[::1] ends
    cdef const double[::1] keep
    cdef int64_t[::1] buffer         # the kept tokens of the current sentence
    cdef AliasTable noise_table
    cdef Py_ssize_t window, vocab_size
    cdef Py_ssize_t first_sentence, end_sentence, sentence, token_lo, token_hi
    cdef Py_ssize_t length, center_pos, sentence_start, window_lo, window_hi
    cdef bint subsample
    cdef readonly double sample
    cdef Py_ssize_t items             # pairs (skip-gram) or centres (CBOW) an example
    cdef object claim_array, block_first_array
    cdef int64_t* claim               # the shared counter of the next block to claim, or NULL
    cdef const int64_t[::1] block_first   # the first sentence of each block (and the end)
    cdef Py_ssize_t n_blocks, block_tokens
    cdef bint exhausted               # every block claimed (by this sampler or the others)
    cdef Py_ssize_t epoch_items       # of those, drawn in the current (or last) epoch
    cdef char* out_mask               # the mask Input's buffer, or NULL
    cdef bint mask_f64

    cdef int read_mask(self, str who, str what, object mask) except -1:
        """Check `mask` against the items an example holds (see _mask_leaf)."""
        self.out_mask = _mask_leaf(who, what, mask, self.items)
        if mask is not None:
            self.mask_f64 = (<Variable>mask).f64
            self.leaves = self.leaves + (mask,)
        return 0

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next item into `slot` of the leaves; False at the epoch's end."""
        return False

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        """Copy the item in slot `source` of the leaves into `slot`."""
        pass

    cdef bint next_example(self) noexcept nogil:
        cdef Py_ssize_t slot, drawn = 0
        while drawn < self.items and self.draw_item(drawn):
            drawn += 1
        if drawn == 0:
            return False
        for slot in range(self.items):
            if slot >= drawn:       # the epoch ended mid-example: repeat the last item, mask 0
                self.repeat_item(slot, drawn - 1)
            if self.out_mask != NULL:
                _put_weight(self.out_mask, self.mask_f64, slot, 1.0 if slot < drawn else 0.0)
        self.epoch_items += drawn
        self.epoch_examples += 1
        return True

    cdef int read_corpus(self, str who, object tokens, object sentence_ends, object window,
                         object ns_exponent, object sample, object vocab_size) except -1:
        self.window = _whole(who, "window", window, 1)
        arr = np.asarray(tokens)
        if arr.ndim != 1:
            raise ValueError(f"{who}: tokens must be a 1-D array of word ids, got shape {arr.shape}")
        self.tokens_array = _integer_array(who, "tokens", arr)
        n = self.tokens_array.size
        if n == 0:
            raise ValueError(f"{who}: tokens is empty")
        largest = int(self.tokens_array.max())
        self.vocab_size = largest + 1 if vocab_size is None else _whole(who, "vocab_size", vocab_size, 1)
        if largest >= self.vocab_size:
            raise ValueError(f"{who}: token id {largest} (at position {int(np.argmax(self.tokens_array))}) "
                             f"is out of range for vocab_size {self.vocab_size}")
        self.tokens = self.tokens_array
        if sentence_ends is None:
            ends = np.array([n], dtype=np.int64)
        else:
            ends = _integer_array(who, "sentence_ends", sentence_ends).ravel()
            if ends.size == 0 or ends[ends.size - 1] != n or np.any(np.diff(ends) < 0):
                raise ValueError(f"{who}: sentence_ends must be non-decreasing offsets ending at "
                                 f"len(tokens) = {n}")
        self.ends_array = ends
        self.ends = ends
        exponent = _real(who, "ns_exponent", ns_exponent, None)
        self.sample = _real(who, "sample", sample, 0)
        counts = np.bincount(self.tokens_array, minlength=self.vocab_size).astype(np.float64)
        weights = np.zeros(self.vocab_size)
        weights[counts > 0] = counts[counts > 0] ** exponent
        if np.count_nonzero(weights) < 2:
            raise ValueError(f"{who}: the tokens hold fewer than 2 distinct words; a negative "
                             f"must differ from the word it is drawn against")
        self.noise_table = AliasTable(weights)
        self.subsample = self.sample > 0
        # word2vec's keep probability: (sqrt(c / t) + 1) * t / c with t = sample * total.
        threshold = self.sample * n
        with np.errstate(divide="ignore", invalid="ignore"):
            keep = np.where(counts > 0, (np.sqrt(counts / threshold) + 1) * threshold / counts, 1.0) \
                if self.subsample else np.ones(self.vocab_size)
        self.keep_array = np.minimum(keep, 1.0)
        self.keep = self.keep_array
        starts = np.concatenate(([0], ends[:-1]))
        if self.claim != NULL:      # the whole corpus, in blocks claimed as the walk goes
            self.n_blocks = max(1, round(n / self.block_tokens))
            bounds = n * np.arange(self.n_blocks + 1, dtype=np.int64) // self.n_blocks
            self.block_first_array = np.searchsorted(starts, bounds, side="left").astype(np.int64)
            self.block_first = self.block_first_array
            self.token_lo, self.token_hi = 0, n
            self.first_sentence = self.end_sentence = 0
        else:
            self.token_lo, self.token_hi = _share(n, self.rank, self.workers)
            self.first_sentence = int(np.searchsorted(starts, self.token_lo, side="left"))
            self.end_sentence = int(np.searchsorted(starts, self.token_hi, side="left"))
        self.buffer_array = np.zeros(max(int(np.max(ends - starts)), 1), dtype=np.int64)
        self.buffer = self.buffer_array
        return 0

    cdef int read_claim(self, str who, object claim, object block_tokens) except -1:
        """Check `claim` (None, or a writable int64 array whose first element counts the
        blocks claimed) and `block_tokens` (also when there is no claim, which ignores it);
        read_corpus then cuts the blocks."""
        self.block_tokens = _whole(who, "block_tokens", block_tokens, 1)
        if claim is None:
            return 0
        if not isinstance(claim, np.ndarray) or claim.dtype != np.int64 or claim.size < 1 \
                or not claim.flags.writeable or not claim.flags.c_contiguous:
            raise TypeError(f"{who}: claim must be a writable, contiguous int64 numpy array "
                            f"(its first element counts the blocks claimed), got {claim!r}")
        self.claim_array = claim
        self.claim = <int64_t*>cnp.PyArray_DATA(claim)
        return 0

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.epoch_examples = self.epoch_items = 0
        self.sentence = self.first_sentence
        if self.claim != NULL:
            self.end_sentence = self.first_sentence     # no block yet: the first load claims one
            self.exhausted = False
        self.length = self.center_pos = self.sentence_start = self.window_lo = self.window_hi = 0
        return 0

    cdef bint claim_block(self) noexcept nogil:
        """Claim the next block of the corpus from the shared counter; False once all are taken."""
        cdef int64_t k
        if self.exhausted:
            return False
        k = fa_claim_next(self.claim)
        if k < 0 or k >= self.n_blocks:
            self.exhausted = True
            return False
        self.sentence = self.block_first[k]
        self.end_sentence = self.block_first[k + 1]
        return True

    cdef bint load_sentence(self) noexcept nogil:
        """Read the next sentence of the shard (or of the claimed blocks) into the buffer,
        subsampled; False at the end."""
        cdef Py_ssize_t start, end, t
        cdef int64_t word
        while self.sentence < self.end_sentence or self.claim != NULL and self.claim_block():
            if self.sentence >= self.end_sentence:      # an empty block
                continue
            start = self.ends[self.sentence - 1] if self.sentence > 0 else 0
            end = self.ends[self.sentence]
            self.sentence += 1
            self.sentence_start = start
            self.length = 0
            for t in range(start, end):
                word = self.tokens[t]
                if not self.subsample or self.keep[word] >= 1.0 or fa_rng_uniform(&self.rng) < self.keep[word]:
                    self.buffer[self.length] = word
                    self.length += 1
            if self.length > 1:
                return True
        return False

    cdef bint next_center(self) noexcept nogil:
        """Move to the next centre, in this sentence or the next one, and draw its reduced
        window [window_lo, window_hi) (the centre included); False at the epoch's end."""
        cdef Py_ssize_t reach
        self.center_pos += 1
        if self.center_pos >= self.length:
            if not self.load_sentence():
                return False
            self.center_pos = 0
        reach = self.window - fa_rng_below(&self.rng, self.window)
        self.window_lo = self.center_pos - reach if self.center_pos > reach else 0
        self.window_hi = min(self.center_pos + reach + 1, self.length)
        return True

    cdef int draw_negatives(self, int64_t* out, Py_ssize_t k, int64_t avoid) noexcept nogil:
        cdef Py_ssize_t i
        for i in range(k):
            out[i] = self.noise_table.draw(&self.rng)
            while out[i] == avoid:
                out[i] = self.noise_table.draw(&self.rng)
        return 0

    cdef double epoch_progress(self) noexcept nogil:
        cdef double span = self.token_hi - self.token_lo
        cdef double done = self.sentence_start - self.token_lo
        if self.length:
            done += (self.ends[self.sentence - 1] - self.sentence_start) * self.center_pos / <double>self.length
        if span <= 0 or self.exhausted or \
                self.claim == NULL and self.sentence >= self.end_sentence and self.center_pos >= self.length:
            return 1.0
        return min(1.0, max(0.0, done / span))

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        return self.vocab_size - 1 if isinstance(self.leaves[k], IndexInput) else -1

    def where(self):
        return f"example {self.epoch_examples} of the epoch (sentence {self.sentence - 1})"


cdef class SkipGramSampler(WindowSampler):
    """Skip-gram pairs with negative sampling from a token stream, drawn as
    word2vec (and gensim) draws them, B pairs per example.

    tokens         1-D integer array of word ids in [0, vocab_size).
    center         IndexInput of B ids: the centre word of each of the B pairs.
    context        IndexInput of B * (1 + k) ids: for each pair in turn, a word
                   within its centre's window, then k negatives from the unigram
                   distribution ** ns_exponent (a negative equal to that word is
                   redrawn).
    mask           Input of B values, needed when B > 1: 1 for each pair drawn, 0
                   for the slots the epoch's last, partial example leaves over
                   (they repeat the last pair drawn); multiply each pair's loss by
                   it so that no pair is lost or counted twice.
    sentence_ends  increasing end offsets of the sentences (the last is
                   len(tokens)); windows never cross a sentence end. Default:
                   one sentence.
    window         the largest window; each centre draws a reduced window
                   uniformly from 1..window, as word2vec does.
    ns_exponent    the power of the counts the negatives are drawn by (a finite
                   number; word2vec's 0.75).
    sample         frequent-word subsampling threshold (word2vec's `sample`,
                   e.g. 1e-3; 0 keeps every token), redrawn every epoch: a
                   finite number >= 0.
    vocab_size     default: the largest id + 1.
    seed, rank, workers  the stream, and this worker's shard: the sentences that
                   start in its 1/workers of the tokens (no copy).
    claim          None, or a shared int64 array (e.g. the int64 view of a one-element
                   array in `fa.hogwild.share`) whose first element counts the blocks
                   claimed: the walk then covers the whole corpus in blocks of about
                   `block_tokens` tokens (the sentences that start in each), taking the
                   next unclaimed block (an atomic increment) whenever it finishes one,
                   and its progress (what LinearDecay follows) is its position in the
                   corpus. Workers sharing one counter walk the corpus side by side in
                   order, whatever their speeds, as gensim's threads take its jobs from
                   one queue; rank and workers then only pick the stream. Set the
                   counter to 0 before each epoch.

    The noise distribution counts the tokens given (all shards). B pairs per
    replay share the cost of a replay among them (the gradients of one example
    are applied together, as a minibatch of B); `epoch_pairs` counts the pairs.

    >>> c, ctx = fa.IndexInput([0]), fa.IndexInput([0] * 6)
    >>> scores = C[ctx] @ W[c].T                  # (6, 1): the word, then 5 negatives
    >>> loss = -fa.logsigmoid(scores * signs).sum()     # signs: Input [[1], [-1], ...]
    >>> fa.train(loss, opt, fa.data.SkipGramSampler(tokens, c, ctx, window=5, seed=0))

    With B = 16 pairs an example:

    >>> c, ctx, m = fa.IndexInput([0] * 16), fa.IndexInput(np.zeros((16, 6), int)), fa.Input(np.ones((16, 1)))
    >>> scores = fa.gather_dot(W, c, C, ctx)        # (16, 6): W[c[b]] . C[ctx[b, j]]
    >>> loss = -(fa.logsigmoid(scores * signs) * m).sum()            # signs: (6,) of 1, -1, ...
    >>> fa.train(loss, opt, fa.data.SkipGramSampler(tokens, c, ctx, mask=m, seed=0))
    """
    cdef int64_t* out_center
    cdef int64_t* out_context
    cdef Py_ssize_t negative, context_pos

    def __init__(self, tokens, center, context, *, mask=None, sentence_ends=None, window=5,
                 ns_exponent=0.75, sample=0.0, vocab_size=None, seed=None, rank=0, workers=1,
                 claim=None, block_tokens=10_000):
        who = "SkipGramSampler"
        _seed_stream(self, who, seed, rank, workers)
        self.out_center = _index_leaf(who, "center", center, -1)
        self.items = (<Variable>center).size
        if self.items == 0:
            raise ValueError(f"{who}: center holds no ids; give an IndexInput of at least one id")
        self.out_context = _index_leaf(who, "context", context, -1)
        if (<Variable>context).size % self.items:
            raise ValueError(f"{who}: context must hold (1 + k) ids for each of the {self.items} "
                             f"centre ids, got {(<Variable>context).size}")
        self.negative = (<Variable>context).size // self.items - 1
        if self.negative < 1:
            raise ValueError(f"{who}: context must hold the context word and at least one negative "
                             f"(1 + k ids) for each centre id, got {(<Variable>context).size} for "
                             f"{self.items}")
        self.leaves = (center, context)
        self.read_mask(who, "pairs", mask)
        self.read_claim(who, claim, block_tokens)
        self.read_corpus(who, tokens, sentence_ends, window, ns_exponent, sample, vocab_size)
        self.begin_epoch(0)

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        WindowSampler.begin_epoch(self, epoch)
        self.context_pos = 0
        return 0

    @property
    def epoch_pairs(self):
        """The pairs drawn in the current (or last) epoch."""
        return self.epoch_items

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next pair into `slot`; False at the epoch's end."""
        cdef int64_t* context = self.out_context + slot * (1 + self.negative)
        while True:
            if self.context_pos == self.center_pos:
                self.context_pos += 1
            if self.context_pos < self.window_hi:
                break
            if not self.next_center():
                return False
            self.context_pos = self.window_lo
        self.out_center[slot] = self.buffer[self.center_pos]
        context[0] = self.buffer[self.context_pos]
        self.draw_negatives(context + 1, self.negative, context[0])
        self.context_pos += 1
        return True

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        cdef Py_ssize_t width = 1 + self.negative
        self.out_center[slot] = self.out_center[source]
        memcpy(self.out_context + slot * width, self.out_context + source * width,
               width * sizeof(int64_t))


cdef class CbowSampler(WindowSampler):
    """CBOW examples with negative sampling: the words around a centre predict it,
    drawn as word2vec draws them (same corpus walk and arguments as
    SkipGramSampler), B centres per example.

    context   IndexInput of B * 2 * window ids: for each centre in turn, the words
              of its reduced window (padded with id 0).
    weights   Input of B * 2 * window values (e.g. shape (B, 2 * window, 1)): 1 / n
              for each of the n real context words of a centre, 0 for padding, so
              that `fa.sum(W[context] * weights, axis=-2)` is their mean.
    target    IndexInput of B * (1 + k) ids: for each centre in turn, the centre,
              then k negatives (redrawn when equal to the centre).
    mask      Input of B values, needed when B > 1: 1 for each centre drawn, 0 for
              the slots the epoch's last, partial example leaves over (they repeat
              the last centre); multiply each centre's loss by it.

    >>> h = fa.sum(W[ctx] * wts, axis=0, keepdims=True)       # wts: Input (2 * window, 1)
    >>> loss = -fa.logsigmoid((C[target] @ h.T) * signs).sum()
    >>> fa.train(loss, opt, fa.data.CbowSampler(tokens, ctx, wts, target, window=5, seed=0))
    """
    cdef int64_t* out_context
    cdef char* out_weights
    cdef bint weights_f64
    cdef int64_t* out_target
    cdef Py_ssize_t negative, slots

    def __init__(self, tokens, context, weights, target, *, mask=None, sentence_ends=None,
                 window=5, ns_exponent=0.75, sample=0.0, vocab_size=None, seed=None, rank=0,
                 workers=1, claim=None, block_tokens=10_000):
        who = "CbowSampler"
        _seed_stream(self, who, seed, rank, workers)
        self.slots = 2 * _whole(who, "window", window, 1)
        self.out_context = _index_leaf(who, "context", context, -1)
        self.items = (<Variable>context).size // self.slots
        if self.items == 0 or (<Variable>context).size % self.slots:
            raise ValueError(f"{who}: context must hold 2 * window = {self.slots} ids for each "
                             f"centre, got {(<Variable>context).size}")
        self.out_weights = _input_leaf(who, "weights (2 * window a centre)", weights,
                                       self.items * self.slots)
        self.weights_f64 = (<Variable>weights).f64
        self.out_target = _index_leaf(who, "target", target, -1)
        if (<Variable>target).size % self.items:
            raise ValueError(f"{who}: target must hold (1 + k) ids for each of the {self.items} "
                             f"centres, got {(<Variable>target).size}")
        self.negative = (<Variable>target).size // self.items - 1
        if self.negative < 1:
            raise ValueError(f"{who}: target must hold the centre and at least one negative "
                             f"(1 + k ids) for each centre, got {(<Variable>target).size} for "
                             f"{self.items}")
        self.leaves = (context, weights, target)
        self.read_mask(who, "centres", mask)
        self.read_claim(who, claim, block_tokens)
        self.read_corpus(who, tokens, sentence_ends, window, ns_exponent, sample, vocab_size)
        self.begin_epoch(0)

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        WindowSampler.begin_epoch(self, epoch)
        self.center_pos = -1
        return 0

    @property
    def epoch_centres(self):
        """The centres drawn in the current (or last) epoch."""
        return self.epoch_items

    cdef bint draw_item(self, Py_ssize_t slot) noexcept nogil:
        """Draw the next centre with its window into `slot`; False at the epoch's end."""
        cdef Py_ssize_t j, n = 0
        cdef int64_t* context = self.out_context + slot * self.slots
        cdef int64_t* target = self.out_target + slot * (1 + self.negative)
        cdef Py_ssize_t first = slot * self.slots
        cdef double share
        while n == 0:
            if not self.next_center():
                return False
            n = self.window_hi - self.window_lo - 1
        share = 1.0 / n
        for j in range(self.slots):
            context[j] = 0
            _put_weight(self.out_weights, self.weights_f64, first + j, 0.0)
        n = 0
        for j in range(self.window_lo, self.window_hi):
            if j == self.center_pos:
                continue
            context[n] = self.buffer[j]
            _put_weight(self.out_weights, self.weights_f64, first + n, share)
            n += 1
        target[0] = self.buffer[self.center_pos]
        self.draw_negatives(target + 1, self.negative, target[0])
        return True

    cdef void repeat_item(self, Py_ssize_t slot, Py_ssize_t source) noexcept nogil:
        cdef Py_ssize_t width = 1 + self.negative
        cdef size_t weight_bytes = sizeof(double) if self.weights_f64 else sizeof(float)
        memcpy(self.out_context + slot * self.slots, self.out_context + source * self.slots,
               self.slots * sizeof(int64_t))
        memcpy(self.out_weights + slot * self.slots * weight_bytes,
               self.out_weights + source * self.slots * weight_bytes, self.slots * weight_bytes)
        memcpy(self.out_target + slot * width, self.out_target + source * width,
               width * sizeof(int64_t))

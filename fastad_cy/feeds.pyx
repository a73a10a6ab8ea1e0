"""`FeedSampler`: rows of arrays given up front, one row an example
(`fa.train(loss, opt, {leaf: array})` makes one)."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t
from libc.string cimport memcpy
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from fastad_cy.graph cimport Variable, IndexInput, Input, check_flag
from fastad_cy.sampler cimport Sampler, _seed_stream, _integer_array

cnp.import_array()

__all__ = ["FeedSampler"]


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
        self.shuffle = check_flag(who, "shuffle", shuffle, True)
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

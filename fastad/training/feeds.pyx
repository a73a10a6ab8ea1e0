"""`FeedSampler`: rows of arrays given up front, one row an example
(`fa.train(loss, opt, {leaf: array})` makes one); `BagSampler`: bags of ids of any
length (CSR ids and offsets) for embedding_bag, with rows of feeds beside them."""
import numpy as np
cimport numpy as cnp
from libc.stdint cimport int32_t, int64_t
from libc.string cimport memcpy, memset
from cpython.mem cimport PyMem_Malloc, PyMem_Free

from fastad._engine.graph cimport Variable, IndexInput, Input, check_flag, check_int
from fastad.training.sampler cimport Sampler, _seed_stream, _integer_array

cnp.import_array()

__all__ = ["FeedSampler", "BagSampler"]


# ---------------------------------------------------------------- rows of given arrays

cdef object _feed_array(str who, object leaf, object data):
    """`data` as a C-contiguous array of shape (N,) + leaf.shape, checked."""
    if not isinstance(leaf, (Input, IndexInput)) or not (<Variable>leaf).is_leaf:
        # A Parameter too is a leaf, but feeding it would overwrite what the optimizer learns;
        # an IndexInput made by an op (a reshape of ids, an argmax) is not one to write.
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
    cdef const int64_t* order_ptr    # this epoch's rows, when shuffled (the data of `order`)
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
        self._bind(who, feeds, -1, (), shuffle, seed, rank, workers)

    cdef int _bind(self, str who, object feeds, Py_ssize_t n_rows, tuple more_leaves, object shuffle,
                   object seed, object rank, object workers) except -1:
        """Check and bind the feeds (rows of one count, `n_rows` unless it is -1), seed the
        stream and start epoch 0; `more_leaves` are a subclass's, after the feeds' leaves."""
        entropy = _seed_stream(self, who, seed, rank, workers)
        self.shuffle = check_flag(who, "shuffle", shuffle, True)
        self.generator = np.random.default_rng(np.random.SeedSequence(entropy, spawn_key=(self.rank,)))
        leaves, self.arrays = [], []
        self.n_rows = n_rows
        for leaf, data in feeds.items():
            arr = _feed_array(who, leaf, data)
            if self.n_rows >= 0 and arr.shape[0] != self.n_rows:
                raise ValueError(f"{who}: the feeds hold different numbers of examples "
                                 f"({self.n_rows} and {arr.shape[0]})")
            self.n_rows = arr.shape[0]
            leaves.append(leaf)
            self.arrays.append(arr)
        if self.n_rows == 0:
            raise ValueError(f"{who}: the feeds have 0 rows (arrays of shape {self.arrays[0].shape}); "
                             f"give at least one example")
        self.leaves = tuple(leaves) + more_leaves
        if len(set(map(id, self.leaves))) != len(self.leaves):
            raise ValueError(f"{who}: a leaf is filled twice; give each leaf one feed")
        self.n_feeds = len(leaves)
        self.shard_rows = max(0, (self.n_rows - self.rank + self.workers - 1) // self.workers)
        n = max(self.n_feeds, 1)
        self.src = <char**>PyMem_Malloc(n * sizeof(char*))
        self.dst = <char**>PyMem_Malloc(n * sizeof(char*))
        self.width = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.stride = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        self.prefetched_ids = <Py_ssize_t*>PyMem_Malloc(n * sizeof(Py_ssize_t))
        if self.src == NULL or self.dst == NULL or self.width == NULL or self.stride == NULL \
                or self.prefetched_ids == NULL:
            raise MemoryError()
        for k in range(self.n_feeds):
            self.dst[k] = (<Variable>self.leaves[k]).val_ptr
            self.width[k] = (<Variable>self.leaves[k]).size * (<cnp.ndarray>self.arrays[k]).itemsize
            self.prefetched_ids[k] = 0
        self.begin_epoch(0)
        return 0

    @property
    def examples_per_epoch(self):
        """The examples of this worker's shard: its rows (a BagSampler's bags)."""
        return self.shard_rows

    @property
    def shuffled(self):
        """Whether the rows come in a new random order each epoch (else in their order)."""
        return bool(self.shuffle)

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        cdef Py_ssize_t k
        self.epoch_examples = 0
        self.row = 0
        if self.shuffle:
            # Copy the shard in this epoch's order, so that the loop reads it sequentially.
            self.order = self.rank + self.workers * self.generator.permutation(self.shard_rows)
            self.order_ptr = <const int64_t*>cnp.PyArray_DATA(self.order)
            self.epoch_arrays = [arr[self.order] for arr in self.arrays]
            for k in range(self.n_feeds):
                self.src[k] = <char*>cnp.PyArray_DATA(self.epoch_arrays[k])
                self.stride[k] = self.width[k]
        else:
            self.order = None
            self.order_ptr = NULL
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
            if self.row_prefetches[t].leaf < self.n_feeds:      # a subclass's leaves come after
                self.prefetched_ids[self.row_prefetches[t].leaf] = (
                    <Variable>self.leaves[self.row_prefetches[t].leaf]).size
        return 0

    cdef inline Py_ssize_t _row_of(self, Py_ssize_t row) noexcept nogil:
        """The row of the feeds (a BagSampler's bag) that is this epoch's row `row`."""
        return self.order_ptr[row] if self.order_ptr != NULL else self.rank + self.workers * row

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
        return f"row {self._row_of(self.row - 1)} of the feeds"


# ---------------------------------------------------------------- bags of ids of any length

cdef object _bag_arrays(str who, object ids, object offsets):
    """(ids as int32 or int64, offsets as int64, the bags' lengths), checked: CSR bags, bag r
    being ids[offsets[r]:offsets[r + 1]], ids >= 0."""
    ids = _integer_array(who, "ids", ids, keep_int32=True)
    if ids.ndim != 1:
        raise ValueError(f"{who}: ids must be 1-D (every bag's ids one after another), got shape {ids.shape}")
    offsets = np.ascontiguousarray(_integer_array(who, "offsets", offsets), dtype=np.int64)
    if offsets.ndim != 1 or offsets.shape[0] < 2:
        raise ValueError(f"{who}: offsets must be 1-D with one entry per bag and one more (where "
                         f"the last bag ends), got shape {offsets.shape}")
    last = offsets[offsets.shape[0] - 1]
    if offsets[0] != 0 or last != ids.shape[0]:
        raise ValueError(f"{who}: offsets must start at 0 and end at len(ids) = {ids.shape[0]}, "
                         f"got {offsets[0]} and {last}")
    steps = np.diff(offsets)
    if steps.size and steps.min() < 0:
        b = int(np.argmax(steps < 0))
        raise ValueError(f"{who}: offsets must not decrease, got offsets[{b}] = {offsets[b]} and "
                         f"offsets[{b + 1}] = {offsets[b + 1]}")
    return ids, offsets, steps


cdef class BagSampler(FeedSampler):
    """Examples of variable length without padding: bag r of CSR `ids` and `offsets` goes
    into an ids leaf and a two-entry offsets leaf per example, for
    `fa.embedding_bag(table, ids_leaf, offsets_leaf, include_last_offset=True)`; the
    other leaves take row r of their feeds, as in FeedSampler.

    ids_leaf      IndexInput of shape (capacity,), capacity >= the longest bag: the bag's
                  ids go first, the positions after them are not part of the bag
    offsets_leaf  IndexInput of shape (2,): [0, the bag's length] each example
    ids, offsets  the bags: bag r is ids[offsets[r]:offsets[r + 1]] (int32 ids are read
                  as they are, without a copy); len(offsets) = the examples + 1
    feeds         {leaf: array of shape (examples,) + leaf.shape}: labels, weights, ...
    shuffle, seed, rank, workers   as FeedSampler's: a new order each epoch (only the
                  feeds' rows are copied in it; the bags are read in place), the
                  shard rank, rank + workers, ...
    weights_leaf, weights   per-id values, for `embedding_bag(...,
                  per_sample_weights=weights_leaf)`: an Input of ids_leaf's shape and
                  the values (float, one per id of `ids`, in the Input's dtype), each
                  bag's going into the leaf beside its ids (a feature's value, a
                  normalised row's weight)
    pad           None, or an id written into ids_leaf past each bag's ids (and 0 into
                  weights_leaf past its values): for ops over the whole leaf, such as
                  `fa.embedding(table, ids_leaf, padding_idx=pad)`, where the positions
                  past the bag then gather the padding row and weigh nothing

    The sampler owns its leaves while it trains: it zeroes the ids leaf when made, and sets
    the offsets leaf to [0, capacity] until the first example (without `pad`, the positions
    past a bag keep ids of earlier bags, all in range). An empty bag is
    an example whose embedding_bag is zeros.

    >>> ids = fa.IndexInput(np.zeros(longest, np.int64)); offs = fa.IndexInput([0, 0])
    >>> hidden = fa.embedding_bag(E, ids, offs, mode="mean", include_last_offset=True)
    >>> loss = fa.nn.cross_entropy(fa.linear(hidden, W), label)
    >>> fa.train(loss, opt, fa.data.BagSampler(ids, offs, text_ids, text_offsets, {label: labels}))
    """
    cdef object bag_ids_array, bag_offsets_array, bag_weights_array
    cdef const int32_t* ids32        # the bags' ids: one of these two is set
    cdef const int64_t* ids64
    cdef const int64_t* offsets
    cdef int64_t* ids_dst
    cdef int64_t* offsets_dst
    cdef const char* weights_src     # the bags' per-id values, or NULL
    cdef char* weights_dst
    cdef Py_ssize_t weight_size
    cdef Py_ssize_t capacity
    cdef int64_t pad                 # the id past each bag, or -1: the ids of earlier bags
    cdef Py_ssize_t padded_to        # the ids leaf holds pad from here on (with pad)
    cdef bint prefetch_bag

    def __init__(self, ids_leaf, offsets_leaf, ids, offsets, feeds=None, shuffle=False, seed=None,
                 rank=0, workers=1, weights_leaf=None, weights=None, pad=None):
        who = "BagSampler"
        for name, leaf in (("ids_leaf", ids_leaf), ("offsets_leaf", offsets_leaf)):
            if not isinstance(leaf, IndexInput):
                raise TypeError(f"{who}: {name} must be an IndexInput, got {type(leaf).__name__}")
            if leaf.device != "cpu":
                raise ValueError(f"{who}: the compiled loop runs on the CPU; {name} {leaf!r} is "
                                 f"on {leaf.device}")
        if len(ids_leaf.shape) != 1:
            raise ValueError(f"{who}: ids_leaf must be 1-D (capacity,), got shape {ids_leaf.shape}")
        if offsets_leaf.shape != (2,):
            raise ValueError(f"{who}: offsets_leaf must have shape (2,) ([0, the bag's length], "
                             f"for embedding_bag's include_last_offset=True), got {offsets_leaf.shape}")
        if ids_leaf is offsets_leaf:
            raise ValueError(f"{who}: ids_leaf and offsets_leaf must be two leaves")
        if feeds is None:
            feeds = {}
        if not hasattr(feeds, "items"):
            raise TypeError(f"{who}: feeds must be a dict {{leaf: array}}, got {type(feeds).__name__}")
        ids, offsets, lengths = _bag_arrays(who, ids, offsets)
        self.capacity = ids_leaf.size
        if lengths.max() > self.capacity:
            b = int(np.argmax(lengths))
            raise ValueError(f"{who}: bag {b} holds {lengths[b]} ids, more than ids_leaf's "
                             f"capacity of {self.capacity} (shape {ids_leaf.shape}); make the "
                             f"leaf at least as long as the longest bag")
        self.bag_ids_array, self.bag_offsets_array = ids, offsets
        if ids.dtype == np.int32:
            self.ids32 = <const int32_t*>cnp.PyArray_DATA(ids)
        else:
            self.ids64 = <const int64_t*>cnp.PyArray_DATA(ids)
        self.offsets = <const int64_t*>cnp.PyArray_DATA(offsets)
        self.ids_dst = <int64_t*>(<Variable>ids_leaf).val_ptr
        self.offsets_dst = <int64_t*>(<Variable>offsets_leaf).val_ptr
        memset(self.ids_dst, 0, self.capacity * sizeof(int64_t))
        # until the first example the whole leaf is one bag: the check of the sampled ids
        # before training (fa.train fills the leaf with the largest id) reaches every position
        # through embedding_bag, which checks only the ids its bags hold
        self.offsets_dst[0], self.offsets_dst[1] = 0, self.capacity
        self.pad = -1
        if pad is not None:
            self.pad = check_int(who, "pad", pad, 0)
            for k in range(self.capacity):
                self.ids_dst[k] = self.pad
        own = (ids_leaf, offsets_leaf)
        if (weights_leaf is None) != (weights is None):
            raise ValueError(f"{who}: weights_leaf and weights come together (the leaf that "
                             f"per_sample_weights reads and the values of every id)")
        if weights is not None:
            self._bind_weights(who, weights_leaf, weights, ids_leaf, ids.shape[0])
            own += (weights_leaf,)
        self._bind(who, feeds, lengths.shape[0], own, shuffle, seed, rank, workers)

    cdef int _bind_weights(self, str who, object weights_leaf, object weights, object ids_leaf,
                           Py_ssize_t n_ids) except -1:
        """The values of every id, checked against their leaf (an Input of ids_leaf's shape):
        one per id, finite, in the leaf's dtype."""
        if not isinstance(weights_leaf, Input) or isinstance(weights_leaf, IndexInput):
            raise TypeError(f"{who}: weights_leaf must be an Input (float values), got "
                            f"{type(weights_leaf).__name__}")
        if weights_leaf.shape != ids_leaf.shape:
            raise ValueError(f"{who}: weights_leaf has shape {weights_leaf.shape}, expected "
                             f"ids_leaf's {ids_leaf.shape}")
        if weights_leaf.device != "cpu":
            raise ValueError(f"{who}: the compiled loop runs on the CPU; weights_leaf "
                             f"{weights_leaf!r} is on {weights_leaf.device}")
        values = np.asarray(weights)
        if values.ndim != 1 or values.shape[0] != n_ids:
            raise ValueError(f"{who}: weights must be 1-D with one value per id ({n_ids}), got "
                             f"shape {values.shape}")
        if values.dtype.kind not in "fiu":
            raise TypeError(f"{who}: weights must be numbers, got dtype {values.dtype}")
        values = np.ascontiguousarray(values, dtype=weights_leaf.dtype)
        if not np.isfinite(values).all():
            k = int(np.flatnonzero(~np.isfinite(values))[0])
            raise ValueError(f"{who}: weights[{k}] is {values[k]}; every weight must be finite")
        self.bag_weights_array = values
        self.weights_src = <const char*>cnp.PyArray_DATA(values)
        self.weights_dst = (<Variable>weights_leaf).val_ptr
        self.weight_size = values.itemsize
        memset(self.weights_dst, 0, self.capacity * self.weight_size)
        return 0

    cdef int set_row_prefetches(self, list targets) except -1:
        FeedSampler.set_row_prefetches(self, targets)
        self.prefetch_bag = any(self.row_prefetches[t].leaf == self.n_feeds
                                for t in range(self.n_row_prefetches))
        return 0

    cdef bint next_example(self) noexcept nogil:
        cdef Py_ssize_t k, b, lo, n
        if self.row >= self.shard_rows:
            return False
        b = self._row_of(self.row)
        lo, n = self.offsets[b], self.offsets[b + 1] - self.offsets[b]
        if self.ids32 != NULL:
            for k in range(n):
                self.ids_dst[k] = self.ids32[lo + k]
        else:
            memcpy(self.ids_dst, self.ids64 + lo, n * sizeof(int64_t))
        if self.weights_src != NULL:
            memcpy(self.weights_dst, self.weights_src + lo * self.weight_size, n * self.weight_size)
        if self.pad >= 0:
            self._pad_after(n)
        self.offsets_dst[1] = n
        FeedSampler.next_example(self)
        if self.prefetch_bag and self.row < self.shard_rows:     # the next bag's table rows
            b = self._row_of(self.row)
            for k in range(self.offsets[b], self.offsets[b + 1]):
                self.prefetch_rows(self.n_feeds, self.ids32[k] if self.ids32 != NULL else self.ids64[k])
        return True

    cdef void _pad_after(self, Py_ssize_t n) noexcept nogil:
        """The padding id in the ids leaf's positions past the bag's n ids (0 in the weights
        leaf's), up to where the last bag's ended: past that they hold it already."""
        cdef Py_ssize_t k
        for k in range(n, self.padded_to):
            self.ids_dst[k] = self.pad
        if self.weights_src != NULL and self.padded_to > n:
            memset(self.weights_dst + n * self.weight_size, 0, (self.padded_to - n) * self.weight_size)
        self.padded_to = n

    cdef int64_t largest_id(self, Py_ssize_t k) except? -2:
        if k == self.n_feeds:
            top = int(self.bag_ids_array.max()) if self.bag_ids_array.size else -1
            return max(top, self.pad)
        if k > self.n_feeds:
            return -1         # offsets (embedding_bag checks them each pass) and weights: no ids
        return FeedSampler.largest_id(self, k)

    def origin_of(self, k, id):
        if k == self.n_feeds:
            at = np.flatnonzero(self.bag_ids_array == id)
            return (f" (bag {int(np.searchsorted(self.bag_offsets_array, at[0], side='right')) - 1})"
                    if at.size else "")
        return FeedSampler.origin_of(self, k, id) if k < self.n_feeds else ""

    def where(self):
        if self.row == 0:
            return "before the first bag"
        return f"bag {self._row_of(self.row - 1)}"

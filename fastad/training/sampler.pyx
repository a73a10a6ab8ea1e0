"""The sampler protocol: the examples of `fastad.train`, drawn inside its compiled loop.

A sampler is bound to the leaves of a graph (`IndexInput`s, and `Input`s for
feeds) and writes one example into them per call, with no Python between
examples. Everything it draws is checked when it is made, so the loop runs
without bounds checks:

- `FeedSampler` (feeds.pyx): rows of arrays given up front (`fa.train(loss, opt, {leaf: array})`).
- `PairwiseSampler` (pairs.pyx): (user, liked item, other item) triples from implicit
  feedback, for BPR-style ranking losses.
- `SkipGramSampler`, `CbowSampler` (windows.pyx): word2vec's examples from a token stream,
  skip-gram (centre, context word, negatives) or CBOW (context words, centre,
  negatives), with negative sampling, reduced windows and subsampling.

This module holds what they share: the base class `Sampler` (declared in
sampler.pxd, so that the samplers of other modules subclass it), the stream's
seeding and the checks of their arguments.

Each sampler draws from its own stream, seeded from `seed` and its `rank`
(numpy's SeedSequence), so Hogwild workers (`rank`, `workers`) draw
independent, reproducible streams over their own shard without copying data.
A seed is None (fresh entropy, or `fastad.manual_seed`'s stream), an int >= 0
or a sequence of them (e.g. [seed, epoch]); `rank` is in [0, workers).
"""
import numbers

import numpy as np
cimport numpy as cnp
from libc.stdint cimport int64_t, uint64_t

from fastad._engine.graph cimport Variable, IndexInput, check_int

cnp.import_array()

__all__ = ["set_default_seed", "Sampler"]


# ---------------------------------------------------------------- checks shared by the samplers

cdef tuple _share(int64_t n, Py_ssize_t rank, Py_ssize_t workers):
    """[lo, hi): worker `rank`'s contiguous 1/workers share of n things."""
    return n * rank // workers, n * (rank + 1) // workers


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
    sampler.workers = check_int(who, "workers", workers, 1)
    sampler.rank = check_int(who, "rank", rank, 0)
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
    if not isinstance(leaf, IndexInput) or not (<Variable>leaf).is_leaf:
        kind = type(leaf).__name__ if not isinstance(leaf, Variable) else f"'{leaf.op_name}'"
        raise TypeError(f"{who}: {name} must be an IndexInput leaf of the graph, got {kind}")
    if leaf.device != "cpu":
        raise ValueError(f"{who}: {name} is on {leaf.device}; the compiled loop samples on the CPU")
    if size >= 0 and (<Variable>leaf).size != size:
        raise ValueError(f"{who}: {name} holds {(<Variable>leaf).size} ids, expected {size}")
    return <int64_t*>(<Variable>leaf).val_ptr


cdef object _integer_array(str who, str name, object data, bint keep_int32=False):
    """`data` as a C-contiguous int64 array of non-negative ids (an int32 one kept as it is,
    without a copy when it is contiguous, with `keep_int32`)."""
    arr = np.asarray(data)
    if arr.dtype.kind not in "iu":
        raise TypeError(f"{who}: {name} must hold integers, got dtype {arr.dtype}")
    if arr.size and arr.dtype.kind == "u" and arr.max() > np.iinfo(np.int64).max:
        raise IndexError(f"{who}: {name} holds an id too large for int64 ({arr.max()})")
    arr = np.ascontiguousarray(arr, dtype=np.int32 if keep_int32 and arr.dtype == np.int32 else np.int64)
    if arr.size and arr.min() < 0:
        raise IndexError(f"{who}: {name} holds a negative id ({arr.min()}) at position "
                         f"{int(np.argmin(arr))}")
    return arr


# ---------------------------------------------------------------- the protocol

cdef class Sampler:
    """Base of the samplers: `fastad.train` calls `begin_epoch`, then `next_example`
    (which fills the leaves and counts `epoch_examples`) until it returns False, then
    `end_epoch` (which raises what ended the epoch early, such as a corpus a sampler reads
    as it goes that failed). `epoch()` runs the same steps from Python, for a look at what
    a sampler draws."""

    def __init__(self, *args, **kwargs):
        raise TypeError(f"{type(self).__name__} is a base class; use FeedSampler, PairwiseSampler, "
                        f"SkipGramSampler or CbowSampler")

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1:
        self.epoch_examples = 0
        return 0

    cdef bint next_example(self) noexcept nogil:
        return False

    cdef int end_epoch(self) except -1:
        return 0

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
        self.begin_epoch(check_int(type(self).__name__, "epoch", epoch, 0))
        while self.next_example():
            yield tuple(np.array(leaf.value) for leaf in self.leaves)
        self.end_epoch()

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
        cdef int t, k
        kept = sorted([(leaf, table) for leaf, table in targets
                       if leaf < MAX_PREFETCHED_LEAVES and table.ndim and table.nbytes]
                      [:MAX_ROW_PREFETCHES], key=lambda target: target[0])
        for t, (leaf, table) in enumerate(kept):
            self.row_prefetches[t].base = <const char*>cnp.PyArray_DATA(table)
            self.row_prefetches[t].row_bytes = table.nbytes // table.shape[0]
            self.row_prefetches[t].leaf = leaf
        self.n_row_prefetches = len(kept)
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

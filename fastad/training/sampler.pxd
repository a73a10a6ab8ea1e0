# Samplers fill a graph's leaves with one example at a time inside `fastad.train`'s
# compiled loop: no Python between examples.
cimport cython
from libc.stdint cimport int64_t, uint64_t

from fastad._engine.rng cimport fa_rng

cdef extern from *:
    """
    /* Ask for the cache line holding p (for reading, kept in every level) without waiting. */
    static inline void fa_prefetch(const void* p) { __builtin_prefetch(p, 0, 3); }
    /* The same, for a line about to be written: loaded in a state this core may write. */
    static inline void fa_prefetch_for_write(const void* p) { __builtin_prefetch(p, 1, 3); }
    /* Every cache line of the n bytes at p, from the line holding the first byte to the
     * line holding the last: fa_prefetch_span (for reading), fa_prefetch_span_for_write. */
    #define FA_PREFETCH_SPAN(name, prefetch)                                                \
    static inline void name(const void* p, size_t n) {                                   \
        size_t line = (size_t)p & ~(size_t)63, last = ((size_t)p + n - 1) & ~(size_t)63;  \
        for (; line <= last; line += 64) prefetch((const void*)line);                     \
    }
    FA_PREFETCH_SPAN(fa_prefetch_span, fa_prefetch)
    FA_PREFETCH_SPAN(fa_prefetch_span_for_write, fa_prefetch_for_write)
    """
    void fa_prefetch(const void* p) noexcept nogil
    void fa_prefetch_for_write(const void* p) noexcept nogil
    void fa_prefetch_span(const void* p, size_t n) noexcept nogil
    void fa_prefetch_span_for_write(const void* p, size_t n) noexcept nogil


# A table whose rows a leaf's ids select (a row gather of the graph being trained): the
# sampler starts loading the rows of the next example's ids while this one trains.
cdef struct RowPrefetch:
    const char* base
    Py_ssize_t row_bytes
    Py_ssize_t leaf                   # the index of the leaf in `leaves`

cdef enum:
    MAX_ROW_PREFETCHES = 8
    MAX_PREFETCHED_LEAVES = 8         # a leaf past these gets no rows loaded ahead


cdef class Sampler:
    cdef fa_rng rng
    cdef RowPrefetch row_prefetches[MAX_ROW_PREFETCHES]   # set by fastad.train for its run, by leaf
    cdef int n_row_prefetches
    cdef int leaf_prefetches[MAX_PREFETCHED_LEAVES + 1]   # leaf k's: [leaf_prefetches[k], [k + 1])
    cdef readonly tuple leaves            # the leaves it fills, in the order of its arguments
    cdef readonly Py_ssize_t rank, workers
    cdef readonly Py_ssize_t epoch_examples   # examples drawn in the current (or last) epoch

    cdef int begin_epoch(self, Py_ssize_t epoch) except -1
    cdef bint next_example(self) noexcept nogil    # fill the leaves; False once the epoch is over
    cdef int end_epoch(self) except -1             # raise what ended the epoch early, if anything did
    cdef double epoch_progress(self) noexcept nogil   # the share of this epoch done, in [0, 1]
    cdef int64_t largest_id(self, Py_ssize_t k) except? -2   # leaf k's largest possible id, -1 if none
    cdef int set_row_prefetches(self, list targets) except -1
    @cython.final
    cdef inline void prefetch_rows(self, Py_ssize_t leaf, int64_t row) noexcept nogil:
        """Start loading, for writing, the cache lines of row `row` of each table that
        `leaf`'s ids select (the graph's gathers read and then update them)."""
        cdef int t
        if leaf >= MAX_PREFETCHED_LEAVES:
            return
        for t in range(self.leaf_prefetches[leaf], self.leaf_prefetches[leaf + 1]):
            fa_prefetch_span_for_write(self.row_prefetches[t].base + row * self.row_prefetches[t].row_bytes,
                                       self.row_prefetches[t].row_bytes)


# The checks of the samplers' arguments and the seeding of their streams (sampler.pyx).
cdef tuple _share(int64_t n, Py_ssize_t rank, Py_ssize_t workers)
cdef object _seed_stream(Sampler sampler, str who, object seed, object rank, object workers)
cdef int64_t* _index_leaf(str who, str name, object leaf, Py_ssize_t size) except NULL
cdef object _integer_array(str who, str name, object data, bint keep_int32=*)

# Samplers fill a graph's leaves with one example at a time inside `fastad.train`'s
# compiled loop: no Python between examples.
cimport cython
from libc.stdint cimport int64_t, uint64_t

from fastad_cy.rng cimport fa_rng, fa_rng_next, fa_rng_below, fa_rng_uniform


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
    cdef double epoch_progress(self) noexcept nogil   # the share of this epoch done, in [0, 1]
    cdef int64_t largest_id(self, Py_ssize_t k) except? -2   # leaf k's largest possible id, -1 if none
    cdef int set_row_prefetches(self, list targets) except -1
    @cython.final
    cdef void prefetch_rows(self, Py_ssize_t leaf, int64_t row) noexcept nogil


cdef class AliasTable:
    """Draws i with probability weights[i] / sum(weights) in O(1) (Vose's alias method)."""
    cdef double[::1] prob
    cdef int64_t[::1] alias
    cdef int64_t n
    cdef int64_t draw(self, fa_rng* rng) noexcept nogil

# The random streams of the samplers and the random nodes: xoshiro256** (rng.h).
from libc.stdint cimport int64_t, uint64_t

cdef extern from "rng.h":
    ctypedef struct fa_rng:
        uint64_t s[4]
    uint64_t fa_rng_next(fa_rng* r) noexcept nogil
    int64_t fa_rng_below(fa_rng* r, int64_t n) noexcept nogil
    double fa_rng_uniform(fa_rng* r) noexcept nogil

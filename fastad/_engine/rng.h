/* The samplers' random numbers: xoshiro256** (Blackman and Vigna), one state per
 * stream. Seeded from numpy's SeedSequence, so each Hogwild worker's stream is
 * independent and reproducible. Plain C, used from Cython through cdef extern. */
#ifndef FASTAD_RNG_H
#define FASTAD_RNG_H

#include <stdint.h>

typedef struct { uint64_t s[4]; } fa_rng;

static inline uint64_t fa_rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static inline uint64_t fa_rng_next(fa_rng* r) {
    uint64_t* s = r->s;
    uint64_t result = fa_rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = fa_rotl(s[3], 45);
    return result;
}

/* Uniform in [0, n) for n >= 1 (Lemire's multiply-shift: no division, bias < n / 2**64). */
static inline int64_t fa_rng_below(fa_rng* r, int64_t n) {
    return (int64_t)(((unsigned __int128)fa_rng_next(r) * (uint64_t)n) >> 64);
}

/* Uniform in [0, 1) with 53 random bits. */
static inline double fa_rng_uniform(fa_rng* r) {
    return (double)(fa_rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
}

#endif

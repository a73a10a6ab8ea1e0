/* FA_CLONED: a loop function that also gets an AVX2 clone, picked when the module is
 * loaded on a CPU that has AVX2 (gcc's target_clones, through an ifunc: x86-64 with
 * glibc). The clone runs the same multiplies and adds eight floats at a time instead
 * of four, without FMA, so the values are the same on every CPU. Elsewhere (another
 * compiler, another C library or architecture) the function is a plain static inline. */
#ifndef FASTAD_CLONES_H
#define FASTAD_CLONES_H

/* FA_CLONED_WIDE: an AVX-512 clone too, for loops bound by how fast the caches move their
 * rows (64-byte vectors double that); products are not fused into adds (fp-contract off),
 * so that every clone gives the same values. */
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define FA_CLONED __attribute__((target_clones("avx2", "default"))) static
#define FA_CLONED_WIDE __attribute__((target_clones("avx512f", "avx2", "default"), optimize("fp-contract=off"))) static
#else
#define FA_CLONED static inline
#define FA_CLONED_WIDE static inline
#endif

#endif

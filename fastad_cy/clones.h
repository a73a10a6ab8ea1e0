/* FA_CLONED: a loop function that also gets an AVX2 clone, picked when the module is
 * loaded on a CPU that has AVX2 (gcc's target_clones, through an ifunc: x86-64 with
 * glibc). The clone runs the same multiplies and adds eight floats at a time instead
 * of four, without FMA, so the values are the same on every CPU. Elsewhere (another
 * compiler, another C library or architecture) the function is a plain static inline. */
#ifndef FASTAD_CLONES_H
#define FASTAD_CLONES_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__GLIBC__)
#define FA_CLONED __attribute__((target_clones("avx2", "default"))) static
#else
#define FA_CLONED static inline
#endif

#endif

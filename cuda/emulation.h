// CPU emulation of the CUDA features fastad's kernels may use, so that a family's
// program (common.cuh + <family>.cu, see fastad/cuda/kernels.py) compiles as plain C++17
// with g++ and runs on the CPU (fastad/cuda/emulator.py).
//
// Threads run one after another, in a scrambled order: the launcher sets
// blockIdx/threadIdx and calls the kernel once per (block, thread) pair. That is a valid CUDA schedule only for kernels
// that never wait on another thread, which is the rule for fastad's kernels; so the
// features that need cooperating threads (__syncthreads, __shared__, warp intrinsics)
// are made compile errors here, and a kernel that uses them fails the CPU tests.
//
// Only what CUDA itself offers is provided (e.g. CUDA has no atomicAdd on a signed
// `long long*`, so neither does this header): code that builds here also builds with
// NVRTC, apart from the forbidden features above.
#pragma once

#include <cmath>
#include <cstddef>
#include <math.h>
#include <numeric>
#include <type_traits>
#include <utility>

// ---- execution-space and function qualifiers ------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__ __attribute__((noinline))
#define __launch_bounds__(...)
// __restrict__ is a g++ keyword already, with the meaning CUDA gives it.

// ---- thread coordinates ---------------------------------------------------------------
// CUDA's blockIdx/threadIdx are uint3 and blockDim/gridDim dim3; all fields are unsigned
// int, so `blockIdx.x * blockDim.x` is a 32-bit unsigned product exactly as on a GPU.
struct dim3 {
    unsigned int x, y, z;
};
typedef dim3 uint3;

// Set by the launcher before each emulated thread; thread_local so that two host threads
// can run kernels at the same time.
static thread_local uint3 blockIdx;
static thread_local uint3 threadIdx;
static thread_local dim3 blockDim;
static thread_local dim3 gridDim;

// ---- math ---------------------------------------------------------------------------
// <math.h> puts expf, logf, log1pf, tanhf, sqrtf, powf, fabsf and the double versions in
// the global namespace, as CUDA's device math does; isfinite is overloaded for float and
// double there too.
using std::isfinite;

// ---- atomics (sequential: read, modify, write, return the old value) ---------------------
// The overload set is CUDA's, restricted to the 32- and 64-bit integer and float types.
#define FA_EMULATED_ATOMIC(NAME, TYPE, NEW_VALUE)               \
    inline TYPE NAME(TYPE* address, TYPE val) {                  \
        TYPE old = *address;                                      \
        *address = (NEW_VALUE);                                   \
        return old;                                               \
    }

FA_EMULATED_ATOMIC(atomicAdd, int, old + val)
FA_EMULATED_ATOMIC(atomicAdd, unsigned int, old + val)
FA_EMULATED_ATOMIC(atomicAdd, unsigned long long, old + val)
FA_EMULATED_ATOMIC(atomicAdd, float, old + val)
FA_EMULATED_ATOMIC(atomicAdd, double, old + val)

FA_EMULATED_ATOMIC(atomicExch, int, val)
FA_EMULATED_ATOMIC(atomicExch, unsigned int, val)
FA_EMULATED_ATOMIC(atomicExch, unsigned long long, val)
FA_EMULATED_ATOMIC(atomicExch, float, val)

FA_EMULATED_ATOMIC(atomicMin, int, val < old ? val : old)
FA_EMULATED_ATOMIC(atomicMin, unsigned int, val < old ? val : old)
FA_EMULATED_ATOMIC(atomicMin, long long, val < old ? val : old)
FA_EMULATED_ATOMIC(atomicMin, unsigned long long, val < old ? val : old)

FA_EMULATED_ATOMIC(atomicMax, int, val > old ? val : old)
FA_EMULATED_ATOMIC(atomicMax, unsigned int, val > old ? val : old)
FA_EMULATED_ATOMIC(atomicMax, long long, val > old ? val : old)
FA_EMULATED_ATOMIC(atomicMax, unsigned long long, val > old ? val : old)

#undef FA_EMULATED_ATOMIC

#define FA_EMULATED_ATOMIC_CAS(TYPE)                                 \
    inline TYPE atomicCAS(TYPE* address, TYPE compare, TYPE val) {   \
        TYPE old = *address;                                          \
        if (old == compare) *address = val;                           \
        return old;                                                   \
    }

FA_EMULATED_ATOMIC_CAS(int)
FA_EMULATED_ATOMIC_CAS(unsigned int)
FA_EMULATED_ATOMIC_CAS(unsigned long long)

#undef FA_EMULATED_ATOMIC_CAS

// ---- forbidden: features that need threads to cooperate ---------------------------------
// Each expands to a failing static_assert whose message names the feature, so g++ stops
// with a clear error wherever a kernel uses one.
#define FA_FORBIDDEN(what)                                                                  \
    ([] { static_assert(false, "fastad kernels must not use " what ": every kernel must be " \
                               "correct for any grid and block size, with threads run in "   \
                               "any order (see cuda/emulation.h)"); }(), 0)

#define __syncthreads() FA_FORBIDDEN("__syncthreads")
#define __syncwarp(...) FA_FORBIDDEN("__syncwarp")
#define __shared__ static_assert(false, "fastad kernels must not use __shared__ memory: " \
                                        "threads run one after another (see cuda/emulation.h)");
#define __shfl_sync(...) FA_FORBIDDEN("__shfl_sync")
#define __shfl_up_sync(...) FA_FORBIDDEN("__shfl_up_sync")
#define __shfl_down_sync(...) FA_FORBIDDEN("__shfl_down_sync")
#define __shfl_xor_sync(...) FA_FORBIDDEN("__shfl_xor_sync")
#define __ballot_sync(...) FA_FORBIDDEN("__ballot_sync")
#define __any_sync(...) FA_FORBIDDEN("__any_sync")
#define __all_sync(...) FA_FORBIDDEN("__all_sync")
#define __activemask() FA_FORBIDDEN("__activemask")
#define __reduce_add_sync(...) FA_FORBIDDEN("__reduce_add_sync")
#define __reduce_min_sync(...) FA_FORBIDDEN("__reduce_min_sync")
#define __reduce_max_sync(...) FA_FORBIDDEN("__reduce_max_sync")
#define warpSize FA_FORBIDDEN("warpSize")

// ---- the launcher and parameter description used by fastad/cuda/emulator.py ------------
namespace fa_emulation {

// Run every (block, thread) pair of a one-dimensional launch, one after another, in a
// scrambled order (thread k * step mod total, step coprime to total) rather than 0, 1,
// 2, ...: a kernel that needs any particular order of its threads fails the tests. As
// with cudaLaunchKernel, args[i] points at the value of the kernel's i-th parameter,
// whose type is deduced from the kernel's function type.
template <typename... P, std::size_t... I>
void run(void (*kernel)(P...), void** args, unsigned int grid, unsigned int block,
         std::index_sequence<I...>) {
    (void)args;
    gridDim = dim3{grid, 1, 1};
    blockDim = dim3{block, 1, 1};
    const unsigned long long total = (unsigned long long)grid * block;
    unsigned long long step = total / 2 + 1;
    while (std::gcd(step, total) != 1) ++step;
    for (unsigned long long k = 0; k < total; ++k) {
        unsigned long long j = k * step % total;
        blockIdx = uint3{(unsigned int)(j / block), 0, 0};
        threadIdx = uint3{(unsigned int)(j % block), 0, 0};
        kernel(*static_cast<P*>(args[I])...);
    }
}

template <typename... P>
void launch(void (*kernel)(P...), void** args, unsigned int grid, unsigned int block) {
    run(kernel, args, grid, block, std::index_sequence_for<P...>{});
}

// sizeof, with 0 for void (the pointee of a void* parameter).
template <typename T> struct size_of { static constexpr long long value = sizeof(T); };
template <> struct size_of<void> { static constexpr long long value = 0; };
template <> struct size_of<const void> { static constexpr long long value = 0; };

// The numpy dtype kind matching a C type: 'f' floating, 'i' signed or 'u' unsigned integer,
// 'b' bool, 'v' void, 'o' anything else (a struct).
template <typename T> constexpr char kind() {
    using U = std::remove_cv_t<T>;
    return std::is_void<U>::value ? 'v'
         : std::is_same<U, bool>::value ? 'b'
         : std::is_floating_point<U>::value ? 'f'
         : std::is_integral<U>::value ? (std::is_signed<U>::value ? 'i' : 'u')
         : 'o';
}

template <typename... P>
int param_count(void (*)(P...)) { return static_cast<int>(sizeof...(P)); }

// For each parameter: whether it is a pointer; its sizeof; for a pointer its pointee's
// sizeof and kind, else its own kind.
template <typename... P>
void param_info(void (*)(P...), int* is_pointer, long long* size, long long* pointee_size,
                char* kinds) {
    const int pointer[] = {0, (std::is_pointer<P>::value ? 1 : 0)...};
    const long long sizes[] = {0, (long long)sizeof(P)...};
    const long long pointee[] = {0, size_of<std::remove_pointer_t<P>>::value...};
    const char kind_of[] = {0, kind<std::remove_pointer_t<P>>()...};
    for (std::size_t i = 0; i < sizeof...(P); ++i) {
        is_pointer[i] = pointer[i + 1];
        size[i] = sizes[i + 1];
        pointee_size[i] = pointer[i + 1] ? pointee[i + 1] : 0;
        kinds[i] = kind_of[i + 1];
    }
}

}  // namespace fa_emulation

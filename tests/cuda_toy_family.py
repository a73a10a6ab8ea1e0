"""A throwaway kernel family for testing the CUDA emulator and the compile checks.

It follows the rules of the real families (common.cuh prepended, templates on T,
grid-stride loops, atomics for cross-thread sums) but lives here, not in cuda/,
so fastad never loads it.
"""
from fastad.cuda import kernels

TOY_BODY = r"""
// y = a * x + y
template <typename T>
__global__ void toy_axpy(i64 n, T a, const T* __restrict__ x, T* __restrict__ y) {
    FA_GRID_STRIDE(i, n) { y[i] = a * x[i] + y[i]; }
}

// out[0] += sum(x), by atomicAdd from every thread
template <typename T>
__global__ void toy_sum(i64 n, const T* __restrict__ x, T* __restrict__ out) {
    T partial = 0;
    FA_GRID_STRIDE(i, n) { partial += x[i]; }
    atomicAdd(out, partial);
}

// out[idx[i]] += x[i] (repeated ids add), and count[0] += 1 per element
template <typename T>
__global__ void toy_scatter_add(i64 n, const i64* __restrict__ idx, const T* __restrict__ x,
                                T* __restrict__ out, int* __restrict__ count) {
    FA_GRID_STRIDE(i, n) {
        atomicAdd(out + idx[i], x[i]);
        atomicAdd(count, 1);
    }
}

// The math helpers of common.cuh, both types.
template <typename T>
__global__ void toy_math(i64 n, const T* __restrict__ x, T* __restrict__ out, double scale) {
    FA_GRID_STRIDE(i, n) {
        T v = x[i];
        T r = fa_exp(-v) + fa_log(v) + fa_log1p(v) + fa_tanh(v) + fa_sqrt(v)
              + fa_pow(v, (T)1.5) + fa_abs(-v) + fa_max(v, (T)1) + fa_min(v, (T)1);
        fa_put(out + i, (T)(scale * r), (int)(i % 2));
        if (!fa_isfinite(v)) out[i] = (T)-1;
    }
}

// Each thread records its coordinates and the launch shape.
template <typename T>
__global__ void toy_coords(unsigned int* __restrict__ where, unsigned int* __restrict__ shape) {
    unsigned int t = blockIdx.x * blockDim.x + threadIdx.x;
    where[2 * t] = blockIdx.x;
    where[2 * t + 1] = threadIdx.x;
    shape[0] = gridDim.x;
    shape[1] = blockDim.x;
}

// Run by one thread: every atomic once, writing the old values it returns to `old`.
template <typename T>
__global__ void toy_atomics(int* ints, i64* longs, unsigned long long* ulongs, T* values,
                            i64* old) {
    old[0] = atomicMax(ints, 7);          // ints[0]: 3 -> 7
    old[1] = atomicMin(ints + 1, -2);     // ints[1]: 5 -> -2
    old[2] = atomicCAS(ints + 2, 4, 9);   // ints[2]: 4 -> 9 (matches)
    old[3] = atomicCAS(ints + 3, 0, 9);   // ints[3]: 1 stays (does not match)
    old[4] = atomicExch(ints + 4, 11);    // ints[4]: 8 -> 11
    old[5] = atomicMax(longs, (i64)1 << 40);                       // 2 -> 2^40
    old[6] = atomicMin(longs + 1, (i64)-5);                        // 6 -> -5
    old[7] = (i64)atomicAdd(ulongs, 10ull);                        // 1 -> 11
    old[8] = (i64)atomicCAS(ulongs + 1, 2ull, 12ull);              // 2 -> 12
    old[9] = (i64)atomicAdd(values, (T)0.5);                       // 1.5 -> 2.0
}
"""

TOY_KERNELS = ("toy_axpy", "toy_sum", "toy_scatter_add", "toy_math", "toy_coords", "toy_atomics")

TOY_EXPRESSIONS = [f"{k}<{t}>" for k in TOY_KERNELS for t in ("float", "double")]


def toy_source() -> str:
    """The toy family's program: common.cuh, then the toy kernels (as program_source does)."""
    common = (kernels.source_dir() / "common.cuh").read_text()
    return f'{common}\n#line 1 "toy.cu"\n{TOY_BODY}'


def one_kernel_program(body: str) -> tuple[str, list[str]]:
    """A program of common.cuh and one kernel `k<T>(T* x)` with the given body."""
    common = (kernels.source_dir() / "common.cuh").read_text()
    return (f"{common}\ntemplate <typename T>\n__global__ void k(T* x) {{\n{body}\n}}\n",
            ["k<float>", "k<double>"])

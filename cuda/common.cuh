// Shared by every kernel family: prepended, with fastad/ops/rules.h (the scalar rules the
// CPU kernels share), to each .cu file to make one NVRTC program (see
// fastad/cuda/kernels.py). No #include: NVRTC gets no CUDA headers.

// rules.h compiles its rules as device templates on the fa_* math below.
#define FA_RULES_ON_DEVICE 1

typedef long long i64;

// Grid-stride loop over [0, n) with 64-bit indices: correct for any grid and block size.
#define FA_GRID_STRIDE(i, n) \
    for (i64 i = (i64)blockIdx.x * blockDim.x + threadIdx.x; i < (n); \
         i += (i64)blockDim.x * gridDim.x)

// One spelling of each math function for float and double, so templates stay generic.
__device__ __forceinline__ float fa_exp(float x) { return expf(x); }
__device__ __forceinline__ double fa_exp(double x) { return exp(x); }
__device__ __forceinline__ float fa_log(float x) { return logf(x); }
__device__ __forceinline__ double fa_log(double x) { return log(x); }
__device__ __forceinline__ float fa_log1p(float x) { return log1pf(x); }
__device__ __forceinline__ double fa_log1p(double x) { return log1p(x); }
__device__ __forceinline__ float fa_expm1(float x) { return expm1f(x); }
__device__ __forceinline__ double fa_expm1(double x) { return expm1(x); }
__device__ __forceinline__ float fa_erf(float x) { return erff(x); }
__device__ __forceinline__ double fa_erf(double x) { return erf(x); }
__device__ __forceinline__ float fa_tanh(float x) { return tanhf(x); }
__device__ __forceinline__ double fa_tanh(double x) { return tanh(x); }
__device__ __forceinline__ float fa_sqrt(float x) { return sqrtf(x); }
__device__ __forceinline__ double fa_sqrt(double x) { return sqrt(x); }
__device__ __forceinline__ float fa_pow(float x, float y) { return powf(x, y); }
__device__ __forceinline__ double fa_pow(double x, double y) { return pow(x, y); }
__device__ __forceinline__ float fa_abs(float x) { return fabsf(x); }
__device__ __forceinline__ double fa_abs(double x) { return fabs(x); }
__device__ __forceinline__ bool fa_isfinite(float x) { return isfinite(x); }
__device__ __forceinline__ bool fa_isfinite(double x) { return isfinite(x); }
template <typename T> __device__ __forceinline__ T fa_max(T a, T b) { return a > b ? a : b; }
template <typename T> __device__ __forceinline__ T fa_min(T a, T b) { return a < b ? a : b; }

// Write-then-add: the first gradient contribution of a pass overwrites, later ones add.
template <typename T>
__device__ __forceinline__ void fa_put(T* dst, T value, int accumulate) {
    *dst = accumulate ? *dst + value : value;
}

// sigmoid without overflow for large |x|.
template <typename T> __device__ __forceinline__ T fa_sigmoid(T x) {
    if (x >= 0) return T(1) / (T(1) + fa_exp(-x));
    T e = fa_exp(x);
    return e / (T(1) + e);
}

// Broadcasting: the offset, in an operand with element strides `strides` (0 along
// broadcast axes), of the element at flat index `i` of a contiguous array of shape `dims`.
#define FA_MAX_DIMS 8
__device__ __forceinline__ i64 fa_offset(i64 i, const i64* dims, const i64* strides, int nd) {
    i64 offset = 0;
    for (int k = nd - 1; k >= 0; --k) {
        offset += (i % dims[k]) * strides[k];
        i /= dims[k];
    }
    return offset;
}

// Folding (reductions, and gradients of broadcast operands): the elements of a
// contiguous array of shape dims that go to one output slot. keep[k] != 0 marks
// the axes a slot keeps; the others fold. Slots number the kept axes row-major.
struct FaFold {
    i64 stride[FA_MAX_DIMS];  // the input's contiguous element strides
    i64 count;                // elements per slot
};

__device__ __forceinline__ void fa_fold_init(FaFold* f, const i64* dims, const i64* keep, int nd) {
    i64 s = 1;
    f->count = 1;
    for (int k = nd - 1; k >= 0; --k) {
        f->stride[k] = s;
        s *= dims[k];
        if (!keep[k]) f->count *= dims[k];
    }
}

// The input offset of a slot's first element.
__device__ __forceinline__ i64 fa_fold_base(const FaFold* f, i64 slot, const i64* dims,
                                            const i64* keep, int nd) {
    i64 base = 0;
    for (int k = nd - 1; k >= 0; --k) {
        if (keep[k]) {
            base += (slot % dims[k]) * f->stride[k];
            slot /= dims[k];
        }
    }
    return base;
}

// The offset of a slot's r-th element from the slot's first one.
__device__ __forceinline__ i64 fa_fold_step(const FaFold* f, i64 r, const i64* dims,
                                            const i64* keep, int nd) {
    i64 offset = 0;
    for (int k = nd - 1; k >= 0; --k) {
        if (!keep[k]) {
            offset += (r % dims[k]) * f->stride[k];
            r /= dims[k];
        }
    }
    return offset;
}

// The slot input element i folds into.
__device__ __forceinline__ i64 fa_fold_slot(i64 i, const i64* dims, const i64* keep, int nd) {
    i64 slot = 0, scale = 1;
    for (int k = nd - 1; k >= 0; --k) {
        i64 c = i % dims[k];
        i /= dims[k];
        if (keep[k]) {
            slot += c * scale;
            scale *= dims[k];
        }
    }
    return slot;
}

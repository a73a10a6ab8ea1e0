// Shared by every kernel family: prepended to each .cu file to make one NVRTC program
// (see fastad/cuda/kernels.py). No #include: NVRTC gets no CUDA headers.

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

// sigmoid and softplus without overflow for large |x|.
template <typename T> __device__ __forceinline__ T fa_sigmoid(T x) {
    if (x >= 0) return T(1) / (T(1) + fa_exp(-x));
    T e = fa_exp(x);
    return e / (T(1) + e);
}
template <typename T> __device__ __forceinline__ T fa_softplus(T x) {
    return fa_max(x, T(0)) + fa_log1p(fa_exp(-fa_abs(x)));
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

// Fused optimizer updates and gradient clipping (the GPU side of fastad/optim/optimizers.pyx).
//
// The element updates are the rules of fastad/ops/rules.h, which the CPU kernels share,
// types included. On a GPU results still differ in the last bits (fused multiply-adds,
// CUDA's libm).
//
// Every optimizer has two kernels with one argument layout (FA_DENSE_PARAMS, FA_ROWS_PARAMS):
//   NAME_dense(p, g, s0, s1, n, lr, steps, index, h0, h1, h2, h3, flag, running, h4)
//   NAME_rows (p, g, s0, s1, ids, owner, base, n_ids, row_len, lr, steps, index, h0..h3,
//              flag, running, h4)
// p: the value; g: the dense gradient buffer; s0, s1: the state arrays (an unused one
// is any valid pointer, never read); lr: a 1-element device array; steps[index]: the
// Parameter's step count (already advanced by count_step); h0..h4, flag: the
// optimizer's hyperparameters, named at each optimizer; running[index]: a running
// value per Parameter (NAdam's product; read by NAdam only).
//
// The rows form updates the rows listed in `ids` (int64 row ids, repeats allowed):
// work item i is element j of listed row k (k = i / row_len). Before it runs,
// claim_rows has stored in owner[r] the smallest position base + k listing row r; only
// that item's thread updates the element, so each distinct row is updated exactly once
// from its accumulated gradient row. release_rows then resets owner to FA_NO_OWNER.
// A gradient listed in several id arrays uses one base per array (the running count of
// ids before it), all claimed before any update and released after.

#define FA_NO_OWNER 2147483647

// The flat element a rows-form work item updates, or -1 when another item owns its row.
__device__ __forceinline__ i64 fa_owned_element(i64 i, const i64* ids, const int* owner,
                                                i64 base, i64 row_len) {
    i64 k = i / row_len;
    i64 row = ids[k];
    if (owner[row] != (int)(base + k)) return -1;
    return row * row_len + (i - k * row_len);
}

// owner[ids[k]] = min(owner[ids[k]], base + k) for k in [0, n_ids).
template <typename T>
__global__ void claim_rows(const i64* ids, int* owner, i64 base, i64 n_ids) {
    FA_GRID_STRIDE(k, n_ids) {
        atomicMin(owner + ids[k], (int)(base + k));
    }
}

// owner[ids[k]] = FA_NO_OWNER for k in [0, n_ids).
template <typename T>
__global__ void release_rows(const i64* ids, int* owner, i64 n_ids) {
    FA_GRID_STRIDE(k, n_ids) {
        owner[ids[k]] = FA_NO_OWNER;
    }
}

// steps[index] += 1 (launched over one work item).
template <typename T>
__global__ void count_step(i64* steps, i64 index) {
    FA_GRID_STRIDE(i, 1) {
        steps[index] += 1;
    }
}

// ------------------------------------------------------------------ update kernels
// One skeleton for every optimizer (fa_update_dense, fa_update_rows) over its Step: the
// launch's scalars, the step's coefficients and the element rule of rules.h.

// One launch's scalars: the lr, the Parameter's step count t, the hyperparameters,
// the running value (NAdam's product; 1 and unread for the others) and the form.
struct FaLaunch {
    double lr;
    i64 t;
    double h0, h1, h2, h3;
    int flag;
    double running, h4;
    bool dense;
};

// Every update kernel's parameters, and the arguments that pass them on.
#define FA_DENSE_PARAMS                                                                        \
    T *p, const T *g, T *s0, T *s1, i64 n, const double *lr, const i64 *steps, i64 index,     \
        double h0, double h1, double h2, double h3, int flag, const double *running, double h4
#define FA_ROWS_PARAMS                                                                         \
    T *p, const T *g, T *s0, T *s1, const i64 *ids, const int *owner, i64 base, i64 n_ids,    \
        i64 row_len, const double *lr, const i64 *steps, i64 index, double h0, double h1,      \
        double h2, double h3, int flag, const double *running, double h4
#define FA_DENSE_ARGS p, g, s0, s1, n, lr, steps, index, h0, h1, h2, h3, flag, running, h4
#define FA_ROWS_ARGS                                                                           \
    p, g, s0, s1, ids, owner, base, n_ids, row_len, lr, steps, index, h0, h1, h2, h3, flag,    \
        running, h4

// The skeleton of every NAME_dense kernel: Step on every element.
template <typename Step, typename T>
__device__ __forceinline__ void fa_update_dense(FA_DENSE_PARAMS) {
    const Step step{FaLaunch{*lr, steps[index], h0, h1, h2, h3, flag, running[index], h4, true}};
    FA_GRID_STRIDE(i, n) {
        step(p, g, s0, s1, i);
    }
}

// The skeleton of every NAME_rows kernel: Step on the elements of the rows a work item owns.
template <typename Step, typename T>
__device__ __forceinline__ void fa_update_rows(FA_ROWS_PARAMS) {
    const Step step{FaLaunch{*lr, steps[index], h0, h1, h2, h3, flag, running[index], h4, false}};
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 e = fa_owned_element(i, ids, owner, base, row_len);
        if (e >= 0) step(p, g, s0, s1, e);
    }
}

// An optimizer's Step: the launch's scalars (FaLaunch), the coefficients its rule needs
// for the step (default member initializers, computed once per launch and thread), and
// its element update step(p, g, s0, s1, e), the rule of rules.h. Its h0..h4 and flag:
//   SGD:      weight_decay, momentum, dampening; flag nesterov; s0 the momentum buffer (a
//             dense step with t == 1 starts it at d; the rows form never does: the sparse rule)
//   Adagrad:  weight_decay, eps; s0 the sum
//   Adam:     beta1, beta2, eps, weight_decay; flag decoupled; s0 exp_avg, s1 exp_avg_sq
//   RMSprop:  alpha, eps, weight_decay, momentum; s0 square_avg, s1 the momentum buffer
//   Adadelta: rho, eps, weight_decay; s0 square_avg, s1 acc_delta
//   Adamax:   beta1, beta2, eps, weight_decay; s0 exp_avg, s1 exp_inf
//   RAdam:    beta1, beta2, eps, weight_decay; flag decoupled weight decay; s0, s1 as Adam's
//   FTRL:     beta, l1, l2 (lr its alpha); s0 z, s1 n
//   NAdam:    beta1, beta2, eps, weight_decay, h4 momentum_decay; flag decoupled weight
//             decay; running P_t = mu_1 * ... * mu_t (nadam_product_step advances it after
//             count_step); s0, s1 as Adam's
#define FA_ELEMENT_UPDATE \
    template <typename T> __device__ void operator()(T* p, const T* g, T* s0, T* s1, i64 e) const

struct FaSgdStep : FaLaunch {
    bool first = dense && t == 1;
    FA_ELEMENT_UPDATE { fa_sgd_element(p, g, s0, e, lr, h0, h1, h2, flag, first); }
};
struct FaAdagradStep : FaLaunch {
    FA_ELEMENT_UPDATE { fa_adagrad_element(p, g, s0, e, lr, h0, h1); }
};
struct FaAdamKernelStep : FaLaunch {
    FaAdamStep c = fa_adam_step(lr, t, h0, h1, h3, flag);
    FA_ELEMENT_UPDATE { fa_adam_element(p, g, s0, s1, e, &c, h0, h1, h2); }
};
struct FaRmspropStep : FaLaunch {
    FA_ELEMENT_UPDATE { fa_rmsprop_element(p, g, s0, s1, e, lr, h0, h1, h2, h3); }
};
struct FaAdadeltaStep : FaLaunch {
    FA_ELEMENT_UPDATE { fa_adadelta_element(p, g, s0, s1, e, lr, h0, h1, h2); }
};
struct FaAdamaxStep : FaLaunch {
    double step_size = fa_adamax_step_size(lr, t, h0);
    FA_ELEMENT_UPDATE { fa_adamax_element(p, g, s0, s1, e, step_size, h0, h1, h2, h3); }
};
struct FaRAdamKernelStep : FaLaunch {
    FaRAdamStep c = fa_radam_step(lr, t, h0, h1, h3, flag);
    FA_ELEMENT_UPDATE { fa_radam_element(p, g, s0, s1, e, &c, lr, h0, h1, h2); }
};
struct FaFtrlStep : FaLaunch {
    FA_ELEMENT_UPDATE { fa_ftrl_element(p, g, s0, s1, e, lr, h0, h1, h2); }
};
struct FaNAdamKernelStep : FaLaunch {
    FaNAdamStep c = fa_nadam_step(lr, t, h0, h1, h3, flag, h4, running);
    FA_ELEMENT_UPDATE { fa_nadam_element(p, g, s0, s1, e, &c, h0, h1, h2); }
};

template <typename T>
__global__ void nadam_product_step(double* products, const i64* steps, i64 index, double beta1,
                                   double beta2, double eps, double weight_decay, int decoupled,
                                   double momentum_decay) {
    FA_GRID_STRIDE(i, 1) {
        products[index] *= fa_nadam_mu(beta1, steps[index], momentum_decay);
    }
}

// The kernels: NAME_dense and NAME_rows run fa_update_dense and fa_update_rows with NAME's Step.
template <typename T>
__global__ void sgd_dense(FA_DENSE_PARAMS) { fa_update_dense<FaSgdStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void sgd_rows(FA_ROWS_PARAMS) { fa_update_rows<FaSgdStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void adagrad_dense(FA_DENSE_PARAMS) { fa_update_dense<FaAdagradStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void adagrad_rows(FA_ROWS_PARAMS) { fa_update_rows<FaAdagradStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void adam_dense(FA_DENSE_PARAMS) { fa_update_dense<FaAdamKernelStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void adam_rows(FA_ROWS_PARAMS) { fa_update_rows<FaAdamKernelStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void rmsprop_dense(FA_DENSE_PARAMS) { fa_update_dense<FaRmspropStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void rmsprop_rows(FA_ROWS_PARAMS) { fa_update_rows<FaRmspropStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void adadelta_dense(FA_DENSE_PARAMS) { fa_update_dense<FaAdadeltaStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void adadelta_rows(FA_ROWS_PARAMS) { fa_update_rows<FaAdadeltaStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void adamax_dense(FA_DENSE_PARAMS) { fa_update_dense<FaAdamaxStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void adamax_rows(FA_ROWS_PARAMS) { fa_update_rows<FaAdamaxStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void radam_dense(FA_DENSE_PARAMS) { fa_update_dense<FaRAdamKernelStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void radam_rows(FA_ROWS_PARAMS) { fa_update_rows<FaRAdamKernelStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void nadam_dense(FA_DENSE_PARAMS) { fa_update_dense<FaNAdamKernelStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void nadam_rows(FA_ROWS_PARAMS) { fa_update_rows<FaNAdamKernelStep>(FA_ROWS_ARGS); }
template <typename T>
__global__ void ftrl_dense(FA_DENSE_PARAMS) { fa_update_dense<FaFtrlStep>(FA_DENSE_ARGS); }
template <typename T>
__global__ void ftrl_rows(FA_ROWS_PARAMS) { fa_update_rows<FaFtrlStep>(FA_ROWS_ARGS); }

// ------------------------------------------------------------------ gradient clipping
// The norm accumulates into acc[0] (a float64 array starting at 0), as norm_accumulate:
// q = inf: the largest |g| (NaN wins), through atomicMax on the bit pattern, which orders
// non-negative doubles (and a positive NaN above +inf) as unsigned integers;
// q = 2: sum of g*g in double; q = 1: sum of |g|; else sum of |g|**q.

// The bit pattern of a double (a union: no intrinsic, so the emulator needs none).
__device__ __forceinline__ unsigned long long fa_double_bits(double x) {
    union { double d; unsigned long long u; } v;
    v.d = x;
    return v.u;
}

// One element's part of the q-norm: |x|**q, or |x| for the max norm (q = inf).
__device__ __forceinline__ double fa_norm_term(double x, double q) {
    double a = fa_abs(x);
    if (q == 2) return x * x;
    if (q == 1 || isinf(q)) return a;
    return fa_pow(a, q);
}

// Fold one thread's terms into acc: a sum, or a max for q = inf (the bit pattern of a
// non-negative double orders as the double does). One atomic per thread, not per element.
__device__ __forceinline__ void fa_norm_fold(double* acc, double part, double q) {
    if (isinf(q)) atomicMax((unsigned long long*)acc, fa_double_bits(part));
    else atomicAdd(acc, part);
}

__device__ __forceinline__ double fa_norm_merge(double part, double term, double q) {
    if (isinf(q)) return term > part || term != term ? term : part;
    return part + term;
}

template <typename T>
__global__ void grad_norm_dense(const T* g, i64 n, double* acc, double q) {
    double part = 0;
    FA_GRID_STRIDE(i, n) { part = fa_norm_merge(part, fa_norm_term((double)g[i], q), q); }
    fa_norm_fold(acc, part, q);
}

template <typename T>
__global__ void grad_norm_rows(const T* g, const i64* ids, const int* owner, i64 base,
                               i64 n_ids, i64 row_len, double* acc, double q) {
    double part = 0;
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 e = fa_owned_element(i, ids, owner, base, row_len);
        if (e >= 0) part = fa_norm_merge(part, fa_norm_term((double)g[e], q), q);
    }
    fa_norm_fold(acc, part, q);
}

// g *= factor (scale_values).
template <typename T>
__global__ void scale_dense(T* g, i64 n, double factor) {
    T f = (T)factor;
    FA_GRID_STRIDE(i, n) {
        g[i] = g[i] * f;
    }
}

template <typename T>
__global__ void scale_rows(T* g, const i64* ids, const int* owner, i64 base, i64 n_ids,
                           i64 row_len, double factor) {
    T f = (T)factor;
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 e = fa_owned_element(i, ids, owner, base, row_len);
        if (e >= 0) g[e] = g[e] * f;
    }
}

// g = clamp(g, -limit, limit) (clamp_values; NaN stays NaN).
template <typename T>
__device__ __forceinline__ void fa_clamp(T* g, i64 e, T lo, T hi) {
    T x = g[e];
    if (x > hi) x = hi;
    if (x < lo) x = lo;
    g[e] = x;
}

template <typename T>
__global__ void clamp_dense(T* g, i64 n, double limit) {
    T hi = (T)limit, lo = (T)(-limit);
    FA_GRID_STRIDE(i, n) {
        fa_clamp(g, i, lo, hi);
    }
}

// Clamping twice changes nothing, so a row listed several times needs no owner:
// every thread reaching an element writes the same clamped value.
template <typename T>
__global__ void clamp_rows(T* g, const i64* ids, i64 n_ids, i64 row_len, double limit) {
    T hi = (T)limit, lo = (T)(-limit);
    FA_GRID_STRIDE(i, n_ids * row_len) {
        i64 k = i / row_len;
        fa_clamp(g, ids[k] * row_len + (i - k * row_len), lo, hi);
    }
}

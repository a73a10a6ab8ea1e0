/* The engine's per-thread state: grad mode, anomaly mode and the current backward
 * pass. Each thread starts with gradients on, anomaly detection off and no pass.
 * Pass ids are handed to each thread in blocks of 2**20 from one process-wide atomic
 * counter: a node stamped by a pass in one thread never matches a pass of another, and
 * threads share no counter that every pass would write. Included by graph.pyx only. */
#ifndef FASTAD_THREADSTATE_H
#define FASTAD_THREADSTATE_H

/* initial-exec: a plain offset from the thread pointer instead of a __tls_get_addr call
 * on every read (prepare_grad reads the pass id once per gradient contribution); the
 * 24 bytes fit in the static TLS space the C library keeps for loaded modules. */
#define FA_TLS __thread __attribute__((tls_model("initial-exec")))

#define FA_PASS_BLOCK (1UL << 20)

static unsigned long fa_passes_handed_out = 0;
static FA_TLS unsigned long fa_pass = 0;      /* this thread's current pass */
static FA_TLS unsigned long fa_pass_end = 0;  /* the last id of its block */
static FA_TLS int fa_grad_off = 0;
static FA_TLS int fa_anomaly_on = 0;

static inline unsigned long fa_begin_pass(void) {
    if (fa_pass == fa_pass_end) {
        fa_pass = __atomic_fetch_add(&fa_passes_handed_out, FA_PASS_BLOCK, __ATOMIC_RELAXED);
        fa_pass_end = fa_pass + FA_PASS_BLOCK;
    }
    return ++fa_pass;
}
static inline unsigned long fa_current_pass(void) { return fa_pass; }
static inline int fa_grad_enabled(void) { return !fa_grad_off; }
static inline void fa_set_grad_enabled(int on) { fa_grad_off = !on; }
static inline int fa_anomaly(void) { return fa_anomaly_on; }
static inline void fa_set_anomaly(int on) { fa_anomaly_on = on; }

#endif

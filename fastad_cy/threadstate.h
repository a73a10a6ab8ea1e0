/* The engine's per-thread state: grad mode, anomaly mode and the current backward
 * pass. Each thread starts with gradients on, anomaly detection off and no pass.
 * Pass ids come from one process-wide atomic counter, so a node stamped by a pass in
 * one thread never matches a pass of another. Included by graph.pyx only. */
#ifndef FASTAD_THREADSTATE_H
#define FASTAD_THREADSTATE_H

/* initial-exec: a plain offset from the thread pointer instead of a __tls_get_addr call
 * on every read (prepare_grad reads the pass id once per gradient contribution); the
 * 16 bytes fit in the static TLS space the C library keeps for loaded modules. */
#define FA_TLS __thread __attribute__((tls_model("initial-exec")))

static unsigned long fa_pass_counter = 0;
static FA_TLS unsigned long fa_pass = 0;
static FA_TLS int fa_grad_off = 0;
static FA_TLS int fa_anomaly_on = 0;

static inline unsigned long fa_begin_pass(void) {
    fa_pass = __atomic_add_fetch(&fa_pass_counter, 1, __ATOMIC_RELAXED);
    return fa_pass;
}
static inline unsigned long fa_current_pass(void) { return fa_pass; }
static inline int fa_grad_enabled(void) { return !fa_grad_off; }
static inline void fa_set_grad_enabled(int on) { fa_grad_off = !on; }
static inline int fa_anomaly(void) { return fa_anomaly_on; }
static inline void fa_set_anomaly(int on) { fa_anomaly_on = on; }

#endif

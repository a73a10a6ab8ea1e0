# The learning-rate rules of the schedulers, compiled: fastad.train's loop applies them
# between examples without the GIL.

cdef enum Rule:
    RULE_NONE, RULE_STEP, RULE_COSINE, RULE_WARMUP, RULE_LINEAR_STEPS, RULE_LINEAR_RUN

cdef struct Schedule:
    Rule rule
    double base, a, b          # the rule's numbers, as a scheduler's compiled_rule() gives them

# The lr after `step` scheduler steps, `run_progress` (0..1) of the way through the run.
cdef double scheduled_rate(const Schedule* s, long long step, double run_progress) noexcept nogil

# `scheduler`'s rule into `out`: a TypeError or ValueError naming `who` unless it is a fastad
# scheduler of `optimizer`.
cdef int read_schedule(str who, object scheduler, object optimizer, Schedule* out) except -1

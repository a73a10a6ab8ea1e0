"""The learning-rate rules of the schedulers (`fastad.optim.schedulers`), compiled once: a
scheduler's `lr_at` and `fastad.train`'s loop (between examples, without the GIL) compute
the lr by the same C function."""
from libc.math cimport cos, pi, floor, pow

from fastad.optim.optimizers cimport Optimizer

_RULES = {"step": RULE_STEP, "cosine": RULE_COSINE, "warmup": RULE_WARMUP,
          "linear_steps": RULE_LINEAR_STEPS, "linear_run": RULE_LINEAR_RUN}


cdef double scheduled_rate(const Schedule* s, long long step, double run_progress) noexcept nogil:
    cdef double t
    if s.rule == RULE_STEP:             # a = gamma, b = step_size
        return s.base * pow(s.a, floor(step / s.b))
    if s.rule == RULE_COSINE:           # a = eta_min, b = T_max
        return s.a + (s.base - s.a) * (1 + cos(pi * step / s.b)) / 2
    if s.rule == RULE_WARMUP:           # a = start_factor, b = warmup_steps
        t = step / s.b if step < s.b else 1.0
        return s.base * (s.a + (1 - s.a) * t)
    if s.rule == RULE_LINEAR_STEPS:     # a = min_lr, b = total_steps
        t = step / s.b if step < s.b else 1.0
        return s.base - (s.base - s.a) * t
    if s.rule == RULE_LINEAR_RUN:       # a = min_lr
        t = run_progress if run_progress < 1.0 else 1.0
        return s.base - (s.base - s.a) * t
    return s.base


def scheduled_lr(str rule, double base, double a, double b, long long step, double run_progress=0.0):
    """The lr of a scheduler's rule ("step", "cosine", "warmup", "linear_steps",
    "linear_run") after `step` steps, `run_progress` (0..1) through a run: the
    same C function the loop of `train` calls (the schedulers' lr_at uses it)."""
    cdef Schedule s
    if rule not in _RULES:
        raise ValueError(f"scheduled_lr: rule must be one of {sorted(_RULES)}, got {rule!r}")
    s.rule, s.base, s.a, s.b = _RULES[rule], base, a, b
    return scheduled_rate(&s, step, run_progress)


cdef int read_schedule(str who, object scheduler, object optimizer, Schedule* out) except -1:
    if not hasattr(scheduler, "compiled_rule"):
        raise TypeError(f"{who}: lr_schedule must be a fastad scheduler (fa.optim.StepLR, "
                        f"CosineAnnealingLR, LinearWarmup, LinearDecay), got {type(scheduler).__name__}")
    if not isinstance(optimizer, Optimizer) or getattr(scheduler, "optimizer", None) is not optimizer:
        raise ValueError(f"{who}: lr_schedule must schedule the optimizer given to {who}")
    name, out.base, out.a, out.b = scheduler.compiled_rule()
    out.rule = _RULES[name]
    return 0

"""Type stubs for fastad/optim/schedule.pyx: the schedulers' compiled learning-rate rules."""

def scheduled_lr(rule: str, base: float, a: float, b: float, step: int,
                 run_progress: float = 0.0) -> float: ...

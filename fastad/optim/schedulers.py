"""Learning-rate schedulers: each sets an optimizer's `lr` between steps, with torch's
formulas, or inside `fastad.train`'s compiled loop (`lr_schedule=`), by the same compiled
rule (`schedule.pyx`)."""
from fastad.optim.optimizers import Optimizer
from fastad.optim.schedule import scheduled_lr
from fastad.checks import check_int, check_number

__all__ = ["LRScheduler", "StepLR", "CosineAnnealingLR", "LinearWarmup", "LinearDecay"]


class LRScheduler:
    """Base of the schedulers: sets `optimizer.lr = lr_at(epoch)` at construction
    (epoch 0) and on each `step()` (epoch + 1). `base_lr` is the optimizer's lr
    when the scheduler is made. Subclasses define `lr_at(epoch)`.

    Example::

        sched = fa.optim.StepLR(opt, step_size=10, gamma=0.5)
        for epoch in range(30):
            train_one_epoch(); sched.step()      # lr halves every 10 epochs
    """

    _rule, _numbers = None, ()      # compiled_rule's rule and the attributes that give its a, b

    def __init__(self, optimizer):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(self).__name__}: optimizer must be a fastad optimizer "
                            f"(fa.optim.SGD, Adam, ...), got {optimizer!r} "
                            f"({type(optimizer).__name__})")
        self.optimizer = optimizer
        self.base_lr = optimizer.lr
        self.last_epoch = 0
        self.optimizer.lr = self.lr_at(0)

    def lr_at(self, epoch):
        """The lr after `epoch` steps, from the same compiled rule `fastad.train` runs."""
        return scheduled_lr(*self.compiled_rule(), epoch)

    def compiled_rule(self):
        """(rule, base_lr, a, b): the rule and its numbers, as `fastad.training.loop.scheduled_lr`
        takes them; `fastad.train` evaluates it in its loop every `schedule_every` examples."""
        if self._rule is None:
            raise NotImplementedError(f"{type(self).__name__} does not define compiled_rule()")
        a, b = self._numbers
        return self._rule, self.base_lr, getattr(self, a), float(getattr(self, b))

    def step(self):
        """Advance one epoch (or step) and set the optimizer's lr for it.

        >>> opt.step(); sched.step()
        """
        self.last_epoch += 1
        self.optimizer.lr = self.lr_at(self.last_epoch)

    def get_last_lr(self):
        """The lr this scheduler last set (a float: fastad has no parameter groups).

        >>> sched.get_last_lr()
        0.1
        """
        return self.optimizer.lr

    def state_dict(self):
        """{"base_lr": float, "last_epoch": int}, for checkpoints.

        >>> fa.save({"scheduler": sched.state_dict()}, "ckpt.npz")
        """
        return {"base_lr": self.base_lr, "last_epoch": self.last_epoch}

    def load_state_dict(self, state):
        """Restore a state_dict() and set the optimizer's lr to match it.

        >>> sched.load_state_dict(fa.load("ckpt.npz")["scheduler"])
        """
        who = f"{type(self).__name__}.load_state_dict"
        try:
            base_lr, last_epoch = float(state["base_lr"]), state["last_epoch"]
        except (KeyError, TypeError, ValueError) as e:
            raise ValueError(f"{who}: expected a dict with 'base_lr' and 'last_epoch' ({e!r})") from None
        if int(last_epoch) != last_epoch or last_epoch < 0:
            raise ValueError(f"{who}: last_epoch must be an integer >= 0, got {last_epoch!r}")
        self.base_lr, self.last_epoch = base_lr, int(last_epoch)
        self.optimizer.lr = self.lr_at(self.last_epoch)


class StepLR(LRScheduler):
    """lr = base_lr * gamma ** (epoch // step_size) (torch.optim.lr_scheduler.StepLR).

    >>> sched = fa.optim.StepLR(opt, step_size=30, gamma=0.1)
    """
    _rule, _numbers = "step", ("gamma", "step_size")

    def __init__(self, optimizer, step_size, gamma=0.1):
        self.step_size = check_int("StepLR", "step_size", step_size)
        self.gamma = check_number("StepLR", "gamma", gamma, at_least=0)
        super().__init__(optimizer)


class CosineAnnealingLR(LRScheduler):
    """lr = eta_min + (base_lr - eta_min) * (1 + cos(pi * epoch / T_max)) / 2
    (torch.optim.lr_scheduler.CosineAnnealingLR; past T_max the cosine goes on).

    >>> sched = fa.optim.CosineAnnealingLR(opt, T_max=100, eta_min=1e-5)
    """
    _rule, _numbers = "cosine", ("eta_min", "T_max")

    def __init__(self, optimizer, T_max, eta_min=0.0):
        self.T_max = check_int("CosineAnnealingLR", "T_max", T_max)
        self.eta_min = check_number("CosineAnnealingLR", "eta_min", eta_min, at_least=0)
        super().__init__(optimizer)


class LinearWarmup(LRScheduler):
    """lr = base_lr * (start_factor + (1 - start_factor) * min(epoch, warmup_steps) / warmup_steps):
    a linear ramp from start_factor * base_lr to base_lr over warmup_steps steps, then
    constant (torch.optim.lr_scheduler.LinearLR with end_factor=1, total_iters=warmup_steps).

    >>> sched = fa.optim.LinearWarmup(opt, warmup_steps=1000)
    """
    _rule, _numbers = "warmup", ("start_factor", "warmup_steps")

    def __init__(self, optimizer, warmup_steps, start_factor=0.0):
        self.warmup_steps = check_int("LinearWarmup", "warmup_steps", warmup_steps)
        self.start_factor = check_number("LinearWarmup", "start_factor", start_factor, at_least=0,
                                         at_most=1)
        super().__init__(optimizer)


class LinearDecay(LRScheduler):
    """lr falls linearly from base_lr to min_lr, then stays there (word2vec's schedule).

    With `total_steps`, over that many steps (lr_at(step)). Without it, only
    inside `fastad.train(..., lr_schedule=...)`, over that whole run (all its
    epochs), following the sampler's progress.

    >>> opt = fa.optim.SGD(params, lr=0.025)
    >>> fa.train(loss, opt, sampler, epochs=5, lr_schedule=fa.optim.LinearDecay(opt, min_lr=1e-4))
    """

    def __init__(self, optimizer, min_lr=0.0, total_steps=None):
        self.min_lr = check_number("LinearDecay", "min_lr", min_lr, at_least=0)
        self.total_steps = None if total_steps is None else check_int("LinearDecay", "total_steps",
                                                                      total_steps)
        super().__init__(optimizer)         # checks that it is an optimizer; its lr stays as it was
        if self.min_lr > self.base_lr:
            raise ValueError(f"LinearDecay: min_lr ({min_lr}) is above the optimizer's lr "
                             f"({self.base_lr}): the decay would end above where it starts")

    def lr_at(self, epoch):
        if self.total_steps is None and epoch > 0:
            raise ValueError("LinearDecay: without total_steps it decays over a fastad.train run "
                             "(lr_schedule=); give total_steps to step it by hand")
        return super().lr_at(epoch)

    def compiled_rule(self):
        if self.total_steps is None:
            return "linear_run", self.base_lr, self.min_lr, 1.0
        return "linear_steps", self.base_lr, self.min_lr, float(self.total_steps)

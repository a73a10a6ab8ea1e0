"""Synchronized mode (`run(..., mode="synchronized")`): the workers step in lockstep.

For the run of a worker's function (`call`), every optimizer made in the worker gets
a step hook (fastad.optim.optimizers.set_step_hooks) that takes over each of its steps,
`optimizer.step()` and `fastad.train`'s alike: the workers' gradients (the touched
rows only of sparse ones) go through segments of the run, are summed in rank order
(and averaged, with reduce="mean"), and one update is applied to the shared
Parameters, each Parameter by one worker, before any worker goes on. The hook reads
every step's gradients, so `fastad.train` keeps them (no update inside backward).
"""
import numpy as np

from fastad._engine.graph import Parameter
from fastad.optim.optimizers import set_step_hooks
from fastad.parallel import segments
from fastad.parallel.arrays import as_rows

__all__ = ["REDUCTIONS", "call", "sync_step"]

REDUCTIONS = ["mean", "sum"]     # how a synchronized run reduces the workers' gradients
_GRAD_MODES = ("none", "sparse", "dense")


# Gradients moved between processes: a synchronized worker reads each Parameter's gradient
# and adds the others' into its own, through the Parameters' public face (their gradient
# views, and backward passes seeded with the rows to add), as any backward would.

def _grad_mode(p):
    """How CPU Parameter `p` holds its gradient: "none" (its grad reads None), "sparse" (rows
    only) or "dense"."""
    if not isinstance(p, Parameter):
        raise TypeError(f"synchronized mode: expected a Parameter, got {type(p).__name__}")
    if p.device != "cpu":
        raise ValueError(f"synchronized mode: the Parameter is on {p.device}; this works on "
                         f"CPU Parameters")
    if p.is_sparse_grad:
        return "sparse"
    return "none" if p.grad is None else "dense"


def _aligned(nbytes):
    return (nbytes + 7) // 8 * 8


class _GradSlot:
    """One worker's gradients in a shared segment it made, laid out for the Parameters of
    one optimizer: a header of int64 (mode, touched rows) per Parameter, then per Parameter
    its row ids (int64, rows) and values (size)."""

    def __init__(self, mapping, params):
        self.mapping = mapping
        self.header = segments.view(mapping, (len(params), 2), np.int64)
        self.ids, self.values = [], []
        offset = self.header.nbytes
        for p in params:
            rows = p.shape[0] if p.shape else 1
            self.ids.append(segments.view(mapping, rows, np.int64, offset))
            offset += _aligned(8 * rows)
            self.values.append(segments.view(mapping, p.shape, p.dtype, offset))
            offset += _aligned(p.value.nbytes)

    @staticmethod
    def nbytes(params):
        return 16 * len(params) + sum(
            _aligned(8 * (p.shape[0] if p.shape else 1)) + _aligned(p.value.nbytes) for p in params)

    def write(self, params):
        """Copy each Parameter's gradient in: the touched rows of a sparse one only."""
        for i, p in enumerate(params):
            mode = _grad_mode(p)
            self.header[i, 0] = _GRAD_MODES.index(mode)
            if mode == "sparse":
                rows, values = p.sparse_grad()
                self.header[i, 1] = rows.size
                self.ids[i][:rows.size] = rows
                as_rows(self.values[i])[:rows.size] = values
            elif mode == "dense":
                self.values[i][...] = p.grad

    def add_into(self, params, indices):
        """Add this slot's gradients of Parameters `indices` into them (as backward passes would)."""
        for i in indices:
            p = params[i]
            mode, touched = _GRAD_MODES[self.header[i, 0]], int(self.header[i, 1])
            if mode == "sparse":
                p._accumulate_grad(as_rows(self.values[i])[:touched], self.ids[i][:touched])
            elif mode == "dense":
                p._accumulate_grad(self.values[i])


class _SyncGroup:
    """One worker's side of a synchronized run, and the step hook of every optimizer made
    in the worker meanwhile (the first one to step is the one the workers step together)."""

    needs_gradients = True       # the hook reads every step's gradients: no row step in backward

    def __init__(self, rank, prefix, tags, barrier, workers, reduction):
        """Worker `rank`'s side of the run of segment `prefix`, with every rank's `tags`, and
        the `barrier` (which only process creation may pass on), `workers` and `reduction`
        that `run` hands it."""
        self.rank, self.prefix, self.tags, self.barrier = rank, prefix, tags, barrier
        self.workers, self.reduction = workers, reduction
        self.steps = 0
        self.optimizer = None
        self.params = None
        self.owned = None        # the indices of the Parameters this worker updates
        self.own = None          # this worker's gradient slot
        self.slots = None        # every worker's gradient slot, in rank order

    def _arrive(self, tag):
        """Wait for every worker; all must have arrived with the same tag (step number, or
        -1 - steps when a worker's function has returned)."""
        self.tags[self.rank] = tag
        self.barrier.wait()
        tags = self.tags.copy()
        if (tags != tag).any():
            where = ", ".join(f"worker {r} is at step {t}" if t > 0 else
                              f"worker {r} finished after {-t - 1} steps" for r, t in enumerate(tags))
            raise RuntimeError(f"synchronized workers fell out of step ({where}): every worker "
                               f"must take the same number of optimizer steps, with the same "
                               f"optimizer")

    def hook_for(self, optimizer):
        """The step hook of `optimizer`, made in the worker (see set_step_hooks): this group,
        once its Parameters are found to be CPU Parameters (else a clear error, there and
        then)."""
        for p in optimizer.params:
            _grad_mode(p)
        return self

    def _open(self, optimizer):
        params = optimizer.params
        self.optimizer, self.params = optimizer, params
        # Each Parameter is reduced and updated by one worker: the largest first, to the
        # least loaded worker, the same way in every worker and every run.
        load, self.owned = [0] * self.workers, []
        for i in sorted(range(len(params)), key=lambda i: -params[i].size):
            owner = load.index(min(load))
            load[owner] += params[i].size
            if owner == self.rank:
                self.owned.append(i)
        name = f"{self.prefix}slot{self.rank}"
        self.own = _GradSlot(segments.create_segment(name, _GradSlot.nbytes(params)), params)

    def _attach_peers(self):
        self.slots = []
        size = _GradSlot.nbytes(self.params)
        for r in range(self.workers):
            if r == self.rank:
                self.slots.append(self.own)
                continue
            mapping = segments.attach_segment(f"{self.prefix}slot{r}")
            if len(mapping) != size:
                raise RuntimeError(f"synchronized step: worker {r}'s optimizer holds Parameters of "
                                   f"other shapes or dtypes than worker {self.rank}'s ({len(mapping)} "
                                   f"bytes of gradients against {size}); every worker must build "
                                   f"the same model")
            self.slots.append(_GradSlot(mapping, self.params))

    def __call__(self, optimizer, steps):
        """The step hook: one lockstep step of `optimizer` (every step: returns 1)."""
        if self.optimizer is None:
            self._open(optimizer)
        elif optimizer is not self.optimizer:
            raise ValueError("synchronized step: a synchronized worker steps one optimizer; "
                             "this is another one than in its first step")
        self.own.write(self.params)
        self.steps += 1
        self._arrive(self.steps)
        if self.slots is None:
            self._attach_peers()
        optimizer.zero_grad()
        if self.owned:
            for slot in self.slots:              # in rank order: the same sums in every run
                slot.add_into(self.params, self.owned)
            if self.reduction == "mean" and self.workers > 1:
                for i in self.owned:
                    self.params[i]._scale_grad(1.0 / self.workers)
            optimizer.apply_update()             # only the owned Parameters hold gradients
        self.barrier.wait()                      # nobody reads the Parameters mid-update
        optimizer.zero_grad()
        return 1

    def finish(self):
        """Wait for every worker's function to return after as many steps as this one's."""
        self._arrive(-1 - self.steps)


def call(fn, rank, args, prefix, tags, barrier, workers, reduction):
    """`fn(rank, *args)` run as worker `rank` of a synchronized run (see `_SyncGroup.__init__`
    for the rest): every optimizer made meanwhile steps in lockstep with the other workers',
    and when `fn` returns, every worker must have taken as many steps."""
    group = _SyncGroup(rank, prefix, tags, barrier, workers, reduction)
    set_step_hooks(group.hook_for)
    try:
        result = fn(rank, *args)
    finally:
        set_step_hooks(None)
    group.finish()
    return result


def sync_step(optimizer):
    """`optimizer.step(); optimizer.zero_grad()`: one training step after backward, then the
    gradients cleared, equivalent everywhere.

    In a worker of `run(..., mode="synchronized")` every step of an optimizer made in
    the worker (this one, a bare `optimizer.step()`, or `fa.train`'s) is a lockstep
    step: every worker's gradients (the touched rows only of sparse ones) are summed
    in rank order (and divided by the number of workers with reduce="mean"), and
    that one update is applied to the shared Parameters, each Parameter by one
    worker (the work split by size), before any worker goes on, so every step sees
    the same Parameters everywhere and the result does not depend on timing. Every
    worker must take the same number of steps, of one optimizer over the same
    Parameters (from the same shared arrays). Anywhere else (one process, a Hogwild
    worker) it is a plain step, so the same training function runs in every mode.

    >>> loss.forward(); loss.backward()
    >>> fa.hogwild.sync_step(opt)
    """
    optimizer.step()
    optimizer.zero_grad()

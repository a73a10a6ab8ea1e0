"""Parallel training: lock-free (Hogwild) workers across processes or threads on one
machine, lockstep ones, and (`fastad.parallel.distributed`, `fa.distributed`) workers on
a Ray cluster. `fa.hogwild` is this package under the name the docs use.

Parameters live in POSIX shared-memory segments made by the parent; workers
attach to them by name without copying and update them without locks::

    import fastad as fa

    def train(rank, shared, data):
        U = fa.Parameter(shared["U"])          # zero-copy view of the segment
        ...                                   # per-example SGD writes U.value in place
        fa.hogwild.report(len(data[rank]))    # optional progress count

    with fa.hogwild.share({"U": U0}) as shared:
        fa.hogwild.run(train, workers=2, args=(shared, data))
        U_trained = shared["U"].numpy().copy()

One idea a module:

- `segments`: shared-memory segments and their lifetime (made by an owner, attached
  by name, unlinked when the owner's block ends, swept when their owner died);
- `arrays`: the array handles a worker's Parameter adopts, and `share`;
- `workers`: `run` (processes or threads), `WorkerError`, `report`, `train_progress`;
- `lockstep`: `run(..., mode="synchronized")`, whose workers' optimizers step in
  lockstep on the workers' reduced gradients, and `sync_step`;
- `distributed` (`fa.distributed`): the same workers on Ray, with parameter shards (not
  imported by this package; Ray is imported on first use).

Segments are files under /dev/shm (Linux), named
`fastad_<owner pid>_<owner pid namespace>_<random>_<n>`. The process that called
`share` owns them and unlinks them all when its block ends, whatever happened;
a worker never unlinks anything nor registers anything with a resource
tracker. If the owner dies without cleanup (SIGKILL), its resource tracker
unlinks the segments it made, and the next `share` call on the machine sweeps
any fastad segment whose owner (in the same pid namespace) no longer exists.
Optimizer state (`SharedArray.state_array`) lives in segments of the same block
and is freed with it; a synchronized run's gradient exchange goes through
segments of the run, unlinked by `run` when it ends.
"""
from fastad.parallel.arrays import (ArrayHandle, InProcessArray, InProcessArrays, SharedArray,
                                    SharedArrays, in_place, share, share_for)
from fastad.parallel.lockstep import sync_step
from fastad.parallel.workers import WorkerError, report, run, start_methods, train_progress
from fastad.progress import progress_bar

__all__ = ["share", "run", "sync_step", "report", "train_progress", "progress_bar", "ArrayHandle",
           "SharedArray", "SharedArrays", "InProcessArray", "InProcessArrays", "share_for",
           "in_place", "WorkerError", "start_methods"]

"""Worker functions for tests/test_distributed.py: module level, importable by Ray workers."""
import os
import time

import numpy as np

import fastad as fa
from fastad import distributed, hogwild


def add_ones(rank, shared, times):
    """Add 1 to every element of shared["w"] and of its "count" state, `times` times."""
    w = fa.Parameter(shared["w"])
    count = shared["w"].state_array("count", fill=0.5)
    for _ in range(times):
        w.value[...] += 1.0
        count += 1.0
        hogwild.report(1)
    return rank


def read_state(rank, shared):
    """The worker's view of shared["w"]'s "count" state (asking with another fill)."""
    return shared["w"].state_array("count", fill=-7.0).copy()


def exchange(rank, shared, seconds):
    """Rank r adds 10 + r to w[r] and waits (syncing) until it sees the other rank's addition."""
    w = fa.Parameter(shared["w"])
    w.value[rank] += 10.0 + rank
    other = 1 - rank
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        distributed.sync()
        if w.value[other] == 10.0 + other:
            return True
        time.sleep(0.01)
    return False


def fail_or_wait(rank, action, bad_rank=1):
    """Rank `bad_rank` fails as `action` says; the others wait to be stopped."""
    if rank != bad_rank:
        time.sleep(60)
        return rank
    if action == "raise":
        raise ValueError(f"worker {rank} found bad data")
    if action == "exit":
        os._exit(3)
    raise AssertionError(action)


def die_once(rank, marker):
    """Rank 1 kills its process the first time (leaving `marker`), then returns its rank."""
    if rank == 1 and not os.path.exists(marker):
        open(marker, "w").close()
        os._exit(1)
    return rank


def sleep_forever(rank):
    while True:
        time.sleep(0.05)


def train_on_replica(rank, shared):
    """Touch the replica through numpy() and a Parameter: both are the same array."""
    p = fa.Parameter(shared["w"])
    return shared["w"].numpy() is p.value, np.shares_memory(shared["w"].numpy(), p.value)


def make_state(rank, shared, key, fill):
    return shared["w"].state_array(key, fill).copy()

"""Worker functions for tests/test_distributed.py: module level, importable by Ray workers."""
import os
import sys
import time

import numpy as np
from ray import cloudpickle

import fastad as fa
from fastad import distributed, hogwild
from fastad.parallel import segments

# The Hogwild BPR worker as a user writes it (a Python loop of set_value, forward, backward,
# step and zero_grad that calls neither report nor sync): the one bench/distributed_bpr.py
# times, sent to Ray's workers by value (bench/ is not on their path).
sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "bench"))
import distributed_bpr  # noqa: E402
cloudpickle.register_pickle_by_value(distributed_bpr)
bpr_loop_worker = distributed_bpr.bpr_loop_worker


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


def add_ones_to_own_rows(rank, shared, times, workers=2):
    """Add 1 to rows rank, rank + workers, ... of shared["w"] and of its "count" state, `times`
    times: workers that share one replica write disjoint elements, so none of their writes race."""
    w = fa.Parameter(shared["w"])
    count = shared["w"].state_array("count", fill=0.5)
    for _ in range(times):
        w.value[rank::workers] += 1.0
        count[rank::workers] += 1.0
        hogwild.report(1)
    return rank


def see_without_sync(rank, shared, seconds):
    """Rank r adds 10 + r to w[r] and, never syncing, waits until its replica holds the other
    rank's addition. Returns (seen, the writer id the shards know this worker by)."""
    w = fa.Parameter(shared["w"])
    w.value[rank] += 10.0 + rank
    other = 1 - rank
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and w.value[other] != 10.0 + other:
        time.sleep(0.01)
    return bool(w.value[other] == 10.0 + other), distributed._session.id


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


def push_then_die_once(rank, shared, folder, own_row=False):
    """Add 3 to shared["w"] (or, with `own_row`, to its row `rank`) and push; rank 1 then
    kills its process the first time."""
    w = fa.Parameter(shared["w"])
    w.value[rank if own_row else ...] += 3.0
    distributed.sync()
    marker = os.path.join(folder, "died")
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


def bpr_train_worker(rank, shared, triples, workers, lr):
    """BPR by fa.train without a progress callback: no report, no sync call."""
    model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    shard = {key: ids[rank::workers] for key, ids in triples.items()}
    fa.train(loss, fa.optim.SGD(model.parameters(), lr=lr), feeds(shard), shuffle=True, seed=rank)
    return rank


def step_ones(rank, shared, steps, seconds_per_step=0.0, one_row_a_step=False):
    """`steps` optimizer steps that each add 1 to every element of shared["w"] (SGD, lr 1, on
    a gradient of -1), or with `one_row_a_step` to one row in turn (a gather: a sparse
    gradient); returns how many syncs the worker started by itself."""
    w = fa.Parameter(shared["w"])
    row = fa.IndexInput([0])
    loss = -fa.sum(w[row] if one_row_a_step else w)
    opt = fa.optim.SGD([w], lr=1.0)
    session = distributed._session
    synced = 0
    for step in range(steps):
        row.set_value([step % w.shape[0]])
        loss.forward()
        loss.backward()
        before = session.synced_at
        opt.step()
        opt.zero_grad()
        synced += session.synced_at != before
        time.sleep(seconds_per_step)
    return synced


def merge_between_syncs(rank, shared, folder):
    """Rank 0 adds 1 to shared["w"] and syncs once rank 1 holds its replica. Rank 1 then takes
    optimizer steps that change nothing (5 ms apart) and returns how many steps after its
    first sync by count it saw that addition in its replica (None: not before the next one)."""
    w = fa.Parameter(shared["w"])
    if rank == 0:
        wait_for(os.path.join(folder, "replica"))
        w.value[...] += 1.0
        distributed.sync()
        open(os.path.join(folder, "pushed"), "w").close()
        return None
    open(os.path.join(folder, "replica"), "w").close()
    wait_for(os.path.join(folder, "pushed"))
    loss = -fa.sum(w)
    opt = fa.optim.SGD([w], lr=0.0)
    session = distributed._session
    syncs, since_sync = 0, 0
    while syncs < 2:
        loss.forward()
        loss.backward()
        before = session.synced_at
        opt.step()
        opt.zero_grad()
        if session.synced_at != before:
            syncs, since_sync = syncs + 1, 0
        elif syncs == 1:
            since_sync += 1
            if w.value[0] == 1.0:
                return since_sync
        time.sleep(0.005)
    return None


def wait_for(path, seconds=60):
    deadline = time.monotonic() + seconds
    while not os.path.exists(path):
        assert time.monotonic() < deadline, f"{path} did not appear"
        time.sleep(0.01)


def kill_a_shard_midway(rank, shared, steps, folder, seconds_per_step):
    """Both ranks add 1 to every element of shared["w"] `steps` times, sync, meet, and sync
    again (each replica then holds every push); rank 0 then kills shard 0 and reads its last
    checkpoint, and both add `steps` more. Returns (rank, shard 0's rows of w in its last
    checkpoint before the kill, or None)."""
    w = fa.Parameter(shared["w"])

    def add_ones():
        for _ in range(steps):
            w.value[...] += 1.0
            hogwild.report(1)
            time.sleep(seconds_per_step)

    add_ones()
    for meeting in ("pushed", "merged"):
        distributed.sync()
        open(os.path.join(folder, f"{meeting}-{rank}"), "w").close()
        wait_for(os.path.join(folder, f"{meeting}-{1 - rank}"))
    checkpointed = None
    if rank == 0:
        import ray
        pid = ray.get(shared._block.shards[0].place.remote())[2]
        ray.kill(shared._block.shards[0], no_restart=False)
        while segments.pid_alive(pid):    # ray.kill returns before the process is gone
            time.sleep(0.01)
        checkpointed = fa.load(shared._block.checkpoint_path(0))["arrays"]["w"]
        open(os.path.join(folder, "killed"), "w").close()
    wait_for(os.path.join(folder, "killed"))
    add_ones()
    return rank, checkpointed


def node_of(rank):
    """The id of the Ray node this worker runs on (it holds its CPU until the other starts)."""
    import ray
    time.sleep(1.0)
    return ray.get_runtime_context().get_node_id()


def add_halves_around_a_move(rank, shared, steps, folder):
    """Add 1 to rows rank, rank + 2, ... of shared["w"] `steps` // 2 times, sync, meet the
    other rank (folder/half-<rank>) and sync again (each replica then holds both halves),
    say so (folder/merged-<rank>), wait for folder/moved, then add the other half."""
    w = fa.Parameter(shared["w"])
    for half in (0, 1):
        for _ in range(steps // 2):
            w.value[rank::2] += 1.0
            hogwild.report(1)
            time.sleep(0.001)
        if half == 0:
            for meeting in ("half", "merged"):
                distributed.sync()
                open(os.path.join(folder, f"{meeting}-{rank}"), "w").close()
                wait_for(os.path.join(folder, f"{meeting}-{1 - rank}"))
            wait_for(os.path.join(folder, "moved"))
    return rank


def log_buckets(rank, shared, seconds_per_bucket):
    """One pass over the buckets of [["U"], ["V"]]: in each, add 1 to the bucket's
    partitions of U and V. Returns, per bucket, (bucket, the value its U and V partitions
    held when it began, start, end) on the machine's monotonic clock."""
    U, V = fa.Parameter(shared["U"]), fa.Parameter(shared["V"])
    bounds = shared._block.bounds
    log = []
    for i, j in distributed.buckets(shared, [["U"], ["V"]]):
        u, v = slice(*bounds["U"][i:i + 2]), slice(*bounds["V"][j:j + 2])
        start = time.monotonic()
        seen = (float(U.value[u].min()), float(U.value[u].max()),
                float(V.value[v].min()), float(V.value[v].max()))
        time.sleep(seconds_per_bucket)
        U.value[u] += 1.0
        V.value[v] += 1.0
        log.append(((i, j), seen, start, time.monotonic()))
    return log


def bucket_errors(rank, shared):
    """The errors `buckets` raises for bad axes, in a worker."""
    errors = []
    for axes in ([["U"], ["nope"]], [["U"], ["U"]], [["U", "V"]], "U", []):
        try:
            distributed.buckets(shared, axes)
        except (TypeError, KeyError, ValueError) as exc:
            errors.append(f"{type(exc).__name__}: {exc}")
    return errors


def bpr_bucket_worker(rank, shared, parts, lr):
    """BPR on the buckets of `parts` (fa.data.partition_triples), one pass, with fa.train."""
    model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    opt = fa.optim.SGD(model.parameters(), lr=lr)
    for bucket in distributed.buckets(shared, [["U"], ["V"]]):
        if len(parts[bucket]["users"]):
            fa.train(loss, opt, feeds(parts[bucket]), shuffle=True, seed=rank)
    return rank


def held_bytes_per_bucket(rank, shared):
    """Add 1 to each user partition of shared["U"] in its bucket (axes [["U"]]); the bytes
    the node's replica of U holds in memory when opened, in each bucket and after the pass."""
    U = fa.Parameter(shared["U"])
    block = shared._block
    prefix = distributed._session.home.prefix
    if prefix is None:              # memory of its own (node_replicas=False): nothing to stat
        for (i,) in distributed.buckets(shared, [["U"]]):
            U.value[slice(*block.bounds["U"][i:i + 2])] += 1.0
        return None
    path = os.path.join("/dev/shm", distributed._segment_name(prefix, f"{block.id}/U"))
    held = [os.stat(path).st_blocks * 512]
    for (i,) in distributed.buckets(shared, [["U"]]):
        U.value[slice(*block.bounds["U"][i:i + 2])] += 1.0
        held.append(os.stat(path).st_blocks * 512)
    held.append(os.stat(path).st_blocks * 512)
    return held

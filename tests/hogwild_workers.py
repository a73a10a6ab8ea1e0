"""Worker functions for tests/test_hogwild.py: module level, so spawned workers can import them."""
import os
import signal
import time

import numpy as np

import fastad as fa
from fastad import hogwild


def rank_and_arg(rank, arg):
    return rank, arg


def thread_settings(rank):
    env = {key: os.environ.get(key) for key in hogwild._THREAD_ENV}
    try:
        from threadpoolctl import threadpool_info
    except ImportError:
        return env, None
    return env, [pool["num_threads"] for pool in threadpool_info()]


def record_pid_then(rank, pids, action, bad_rank=1):
    """Write this worker's pid into pids[rank]; rank `bad_rank` then fails as `action` says."""
    pids.numpy()[rank] = os.getpid()
    if rank != bad_rank:
        time.sleep(60)
        return rank
    deadline = time.monotonic() + 10
    while not pids.numpy().all() and time.monotonic() < deadline:    # let the others start
        time.sleep(0.001)
    if action == "raise":
        raise ValueError(f"worker {rank} found bad data")
    if action == "exit":
        os._exit(3)
    if action == "exit0":
        os._exit(0)
    if action == "sigkill":
        os.kill(os.getpid(), signal.SIGKILL)
    if action == "unpicklable":
        return lambda: None
    raise AssertionError(action)


def write_then_fail(rank, shared):
    """Each rank writes 10 + rank; rank 0 then hangs (to be terminated), rank 1 raises."""
    w = shared["w"].numpy()
    w[rank] = 10.0 + rank
    if rank == 0:
        time.sleep(60)
    deadline = time.monotonic() + 10
    while w[0] == 0.0 and time.monotonic() < deadline:
        time.sleep(0.001)
    raise RuntimeError("after writing")


def race_for_state(rank, shared, barrier, keys, fill):
    """Every worker asks for the same state keys at the same moment, then adds 1 to its element."""
    for key in keys:
        barrier.wait()
        state = shared["w"].state_array(key, fill)
        state[rank] += 1.0
    return rank


def report_examples(rank, times):
    for _ in range(times):
        hogwild.report(1)
        time.sleep(0.002)
    return rank


def sgd_line_fit(rank, shared, xs, ys, epochs, lr):
    """Per-example SGD on (a * x + b - y)^2 over this worker's half of the data, lock-free."""
    a = fa.Parameter(shared["a"])
    b = fa.Parameter(shared["b"])
    x = fa.Input(np.zeros(()), dtype=np.float64)
    y = fa.Input(np.zeros(()), dtype=np.float64)
    residual = a * x + b - y
    loss = residual * residual
    mine = range(rank, len(xs), 2)
    for _ in range(epochs):
        for i in mine:
            x.set_value(xs[i])
            y.set_value(ys[i])
            loss.forward()
            loss.backward()
            a.value[...] -= lr * a.grad
            b.value[...] -= lr * b.grad
            a.zero_grad()
            b.zero_grad()
        hogwild.report(len(mine))
    return len(mine) * epochs


def attach_everything(rank, shared):
    """Touch every way a worker uses a segment: Parameter, numpy view, optimizer state."""
    p = fa.Parameter(shared["w"])
    p.value[rank] += 1.0
    shared["w"].state_array("adagrad_sum", 0.5)[rank] += 1.0
    return float(shared["w"].numpy().sum())


def sleep_forever(rank, pids):
    pids.numpy()[rank] = os.getpid()
    while True:
        time.sleep(0.05)

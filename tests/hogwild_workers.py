"""Worker functions for tests/test_hogwild.py: module level, so spawned workers can import them."""
import os
import signal
import time

import numpy as np

import fastad as fa
from fastad import hogwild
from fastad.parallel.workers import _THREAD_ENV


def rank_and_arg(rank, arg):
    return rank, arg


def thread_settings(rank):
    env = {key: os.environ.get(key) for key in _THREAD_ENV}
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


def sync_regression(rank, shared, ids, X, Y, workers, batch, steps, optimizer="adam", lr=0.05,
                    fail_at=None, skip_last=False):
    """Fit y = E[id] . (x * w) with `steps` synchronized steps: at step s, worker `rank`
    takes the examples [(s * workers + rank) * batch, ... + batch), so the workers'
    minibatches of a step, together, are the combined minibatch of one process with
    workers=1 and batch * workers. E gets sparse gradients, w a dense one. Returns the
    final (E, w) (rank 0's view of the shared arrays, or its own copies)."""
    E, w = (fa.Parameter(shared[k], dtype=shared[k].dtype) for k in ("E", "w"))
    ix = fa.IndexInput(np.zeros(batch, np.int64))
    x, y = fa.Input(np.zeros((batch, X.shape[1])), dtype=E.dtype), fa.Input(np.zeros(batch), dtype=E.dtype)
    loss = fa.mean(fa.square(fa.vector_dot(E[ix], x * w) - y))
    opt = {"adam": lambda: fa.optim.Adam([E, w], lr=lr),
           "sgd": lambda: fa.optim.SGD([E, w], lr=lr, momentum=0.5),
           "plain_sgd": lambda: fa.optim.SGD([E, w], lr=lr)}[optimizer]()
    for s in range(steps - (1 if skip_last and rank == 1 else 0)):
        if fail_at is not None and rank == 1 and s == fail_at:
            os._exit(3)
        start = (s * workers + rank) * batch
        ix.set_value(ids[start:start + batch])
        x.set_value(X[start:start + batch])
        y.set_value(Y[start:start + batch])
        loss.forward()
        loss.backward()
        hogwild.sync_step(opt)
    return E.value.copy(), w.value.copy()


def sync_linear_fit(rank, shared, X, Y, workers, lr, loop):
    """Fit y = x . w (w: the dense shared 3-element "w") with plain SGD, one example a
    step, on this worker's rows (every `workers`-th from `rank`): by `fa.train`
    (loop="train") or by a Python loop of forward, backward and a bare `opt.step()`
    (loop="step"). Returns the final w."""
    w = fa.Parameter(shared["w"], dtype=shared["w"].dtype)
    x, y = fa.Input(np.zeros(3), dtype=w.dtype), fa.Input(np.zeros(1), dtype=w.dtype)
    loss = fa.sum(fa.square(fa.sum(w * x) - y))
    opt = fa.optim.SGD([w], lr=lr)
    mine_x, mine_y = X[rank::workers], Y[rank::workers]
    if loop == "train":
        fa.train(loss, opt, {x: mine_x, y: mine_y})
    else:
        for i in range(len(mine_x)):
            x.set_value(mine_x[i])
            y.set_value(mine_y[i:i + 1])
            loss.forward()
            loss.backward()
            opt.step()
            opt.zero_grad()
    return w.value.copy()


def sync_bpr_train(rank, shared, triples, workers, lr):
    """BPR factors over the shared "U" and "V" trained by `fa.train` with plain SGD (which
    offers a row step), one triple a step, on this worker's triples (every `workers`-th
    from `rank`) in order."""
    model = fa.models.BPR(1, 1, U=shared["U"], V=shared["V"])
    loss, feeds = model.example_graph()
    shard = {key: ids[rank::workers] for key, ids in triples.items()}
    fa.train(loss, fa.optim.SGD(model.parameters(), lr=lr), feeds(shard))
    return rank


def step_two_optimizers(rank, shared):
    """One step of an optimizer, then one of a second optimizer over the same Parameter."""
    w = fa.Parameter(shared["w"])
    loss = fa.sum(w * w)
    for opt in (fa.optim.SGD([w], lr=0.1), fa.optim.SGD([w], lr=0.1)):
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
    return rank


def optimizer_on_a_device(rank):
    """Make an optimizer over a Parameter on the device (the CPU emulator's)."""
    from fastad.cuda import backend
    backend.set_emulation(True)
    fa.optim.SGD([fa.Parameter(np.zeros(2), device="cuda")], lr=0.1)
    return rank

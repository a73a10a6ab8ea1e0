"""Threads: per-thread modes, concurrent graphs, replays without the GIL, Hogwild in threads."""
import math
import sys
import threading
import time

import numpy as np
import pytest

import fastad as fa


def run_in_threads(*targets):
    """Run each target in its own thread; re-raise the first failure here."""
    errors = []

    def guarded(target):
        try:
            target()
        except BaseException as exc:      # noqa: BLE001 - handed to the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=guarded, args=(t,)) for t in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
        assert not t.is_alive(), "a test thread did not finish"
    if errors:
        raise errors[0]


# ------------------------------------------------------------------ modes

def test_no_grad_in_one_thread_leaves_another_training():
    w = fa.Parameter(np.arange(3.0), dtype=np.float64)
    inside, leave = threading.Event(), threading.Event()

    def server():
        with fa.no_grad():
            inside.set()
            assert leave.wait(30)
            assert not fa.is_grad_enabled()
            y = w * 2
            assert not y.requires_grad

    def trainer():
        assert inside.wait(30)
        try:
            assert fa.is_grad_enabled()
            (w * w).sum().backward()
            np.testing.assert_allclose(w.grad, 2 * np.arange(3.0))
        finally:
            leave.set()

    run_in_threads(server, trainer)


def test_a_new_thread_starts_with_gradients_on_and_anomaly_off():
    seen = {}
    with fa.no_grad(), fa.detect_anomaly():
        run_in_threads(lambda: seen.update(grad=fa.is_grad_enabled(),
                                           anomaly=fa.is_anomaly_enabled()))
        assert not fa.is_grad_enabled() and fa.is_anomaly_enabled()
    assert seen == {"grad": True, "anomaly": False}
    assert fa.is_grad_enabled() and not fa.is_anomaly_enabled()


def test_enable_grad_inside_no_grad():
    w = fa.Parameter(np.ones(2))
    with fa.no_grad():
        with fa.enable_grad():
            y = (w * 3).sum()
        z = w * 3
    assert y.requires_grad and not z.requires_grad
    y.backward()
    np.testing.assert_allclose(w.grad, [3, 3])


def test_detect_anomaly_is_per_thread():
    inside, leave = threading.Event(), threading.Event()

    def watcher():
        with fa.detect_anomaly():
            inside.set()
            assert leave.wait(30)
            with pytest.raises(FloatingPointError, match="log"):
                fa.log(fa.Input([-1.0]))

    def other():
        assert inside.wait(30)
        try:
            with np.errstate(invalid="ignore"):
                assert np.isnan(fa.log(fa.Input([-1.0])).value[0])   # no anomaly mode here
        finally:
            leave.set()

    run_in_threads(watcher, other)


def test_no_grad_as_a_decorator_runs_in_two_threads_at_once():
    barrier = threading.Barrier(2, timeout=30)
    w = fa.Parameter(np.ones(2))

    @fa.no_grad()
    def predict():
        barrier.wait()                   # both threads are inside the decorated call
        out = w * 2
        barrier.wait()
        return out

    def call():
        assert not predict().requires_grad
        assert fa.is_grad_enabled()      # each call restored its own thread's mode

    run_in_threads(call, call)


# ---------------------------------------------------- concurrent graphs

def _train_a_graph(seed, steps=150):
    """Build, replay and backpropagate a small graph with dense and sparse parts."""
    rng = np.random.default_rng(seed)
    E = fa.Parameter(rng.normal(size=(30, 4)), dtype=np.float64)
    W = fa.Parameter(rng.normal(size=(4, 3)), dtype=np.float64)
    ix = fa.IndexInput([0, 1, 1])
    x = fa.Input(np.zeros((3, 4)), dtype=np.float64)
    loss = (fa.tanh((E[ix] + x) @ W) ** 2).sum() + fa.logsigmoid(fa.vector_dot(E[ix], x)).sum()
    opt = fa.optim.SGD([E, W], lr=0.01)
    losses = []
    for _ in range(steps):
        ix.set_value(rng.integers(0, 30, 3))
        x.set_value(rng.normal(size=(3, 4)))
        loss.forward()
        loss.backward()
        opt.step()
        opt.zero_grad()
        losses.append(loss.item())
        if rng.random() < 0.05:           # build a fresh graph now and then, as an eager user does
            fresh = (W * W).sum() + (E[fa.IndexInput([3])] * 2).sum()
            fresh.backward()
            opt.zero_grad()
    return E.numpy().copy(), W.numpy().copy(), np.array(losses)


def test_independent_graphs_in_several_threads_match_one_thread():
    seeds = [0, 1, 2, 3]
    alone = {seed: _train_a_graph(seed) for seed in seeds}
    together = {}
    run_in_threads(*[lambda seed=seed: together.__setitem__(seed, _train_a_graph(seed))
                     for seed in seeds])
    for seed in seeds:
        for a, b in zip(alone[seed], together[seed]):
            np.testing.assert_array_equal(a, b)


# ---------------------------------------------------- replays without the GIL

def _bpr_graph(users=200, items=100, dim=16, seed=0):
    rng = np.random.default_rng(seed)
    U = fa.Parameter(rng.normal(0, 0.1, (users, dim)))
    V = fa.Parameter(rng.normal(0, 0.1, (items, dim)))
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])).sum()
    return U, V, (u, i, j), loss


def test_train_releases_the_gil_while_it_replays():
    U, V, (u, i, j), loss = _bpr_graph()
    opt = fa.optim.SGD([U, V], lr=0.01)
    rng = np.random.default_rng(0)
    n = 400_000
    feeds = {u: rng.integers(0, 200, n), i: rng.integers(0, 100, n), j: rng.integers(0, 100, n)}
    inside = threading.Event()
    finished = threading.Event()

    def trainer():
        inside.set()
        try:
            fa.train(loss, opt, feeds, epochs=1)
        finally:
            finished.set()

    thread = threading.Thread(target=trainer)
    thread.start()
    inside.wait(30)
    seen = set()
    while not finished.is_set():     # V changes only inside the loop of the one epoch
        seen.add(float(V.value.sum()))
    thread.join()
    # Holding the GIL through its loop, the trainer would let this thread look at most
    # before the loop and after it: two values. Released, it sees V move many times.
    assert len(seen) > 10


def test_parameters_in_another_threads_training_loop_are_refused():
    # The loop's gradient rows, slab and marks are one thread's at a time: a second loop,
    # a backward, a step or a zero_grad on the same Parameter objects from another thread
    # would write them at once (memory errors, not just Hogwild noise). They are refused.
    U, V, (u, i, j), loss = _bpr_graph()
    rng = np.random.default_rng(0)
    n = 1_500_000
    feeds = {u: rng.integers(0, 200, n), i: rng.integers(0, 100, n), j: rng.integers(0, 100, n)}
    other_u, other_i, other_j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    other = -fa.logsigmoid(fa.vector_dot(U[other_u], V[other_i] - V[other_j])).sum()
    other_opt = fa.optim.Adagrad([U, V], lr=0.1)
    start = V.numpy().copy()
    thread = threading.Thread(target=fa.train, args=(loss, fa.optim.SGD([U, V], lr=0.01), feeds))
    thread.start()
    while thread.is_alive() and np.array_equal(V.numpy(), start):
        time.sleep(0.0002)
    refused = []
    for name, call in (("train", lambda: fa.train(other, other_opt, {other_u: [1], other_i: [2],
                                                                      other_j: [3]})),
                       ("backward()", other.backward), ("Adagrad.step()", other_opt.step),
                       ("Adagrad.zero_grad()", other_opt.zero_grad), ("zero_grad()", U.zero_grad),
                       ("zero_grad()", other.zero_grad)):
        with pytest.raises(RuntimeError, match="is being trained by fa.train in another thread"):
            call()
        refused.append(name if thread.is_alive() else None)
    thread.join(120)
    assert None not in refused, "the training thread ended before every call was tried"
    # released when the loop ends: this thread trains the same Parameters now
    fa.train(other, other_opt, {other_u: [1], other_i: [2], other_j: [3]})
    other.forward()
    other.backward()
    assert np.isfinite(U.value).all() and np.isfinite(V.value).all()


def test_a_failed_training_loop_releases_its_parameters():
    U, V, (u, i, j), loss = _bpr_graph()
    opt = fa.optim.SGD([U, V], lr=0.01)
    bad = {u: np.array([1, 2, 300]), i: np.array([1, 2, 3]), j: np.array([1, 2, 3])}
    errors = []

    def trainer():
        try:
            fa.train(loss, opt, bad)
        except IndexError as exc:
            errors.append(exc)

    run_in_threads(trainer)
    assert len(errors) == 1 and "nothing was trained" in str(errors[0])
    fa.train(loss, opt, {u: np.array([1]), i: np.array([2]), j: np.array([3])})   # not claimed


def _train_own_model(seed, n=60_000):
    """fa.train on a model of its own (shared rows within an example: repeated ids)."""
    U, V, (u, i, j), loss = _bpr_graph(users=50, items=20, seed=seed)
    opt = fa.optim.Adagrad([U, V], lr=0.1)
    rng = np.random.default_rng(seed)
    feeds = {u: rng.integers(0, 50, n), i: rng.integers(0, 20, n), j: rng.integers(0, 20, n)}
    means = fa.train(loss, opt, feeds, epochs=2)
    return U.numpy().copy(), V.numpy().copy(), np.array(means)


def test_compiled_loops_in_threads_at_once_match_each_alone():
    # The loops run without the GIL at the same time; each backward pass must keep its
    # own pass id (write-then-add), or gradients mix and the results drift.
    alone = [_train_own_model(seed) for seed in range(3)]
    together = [None] * 3
    run_in_threads(*[lambda seed=seed: together.__setitem__(seed, _train_own_model(seed))
                     for seed in range(3)])
    for a, b in zip(alone, together):
        for x, y in zip(a, b):
            np.testing.assert_array_equal(x, y)


def test_concat_trains_exactly_inside_the_released_loop():
    rng = np.random.default_rng(1)
    E = fa.Parameter(rng.normal(size=(10, 3)), dtype=np.float64)
    ix = fa.IndexInput([0])
    loss = fa.concat([E[ix], E[ix] * 2], axis=1).sum()
    opt = fa.optim.SGD([E], lr=0.1)
    before = E.numpy().copy()
    fa.train(loss, opt, {ix: np.array([[3], [3]])})
    expected = before.copy()
    expected[3] -= 2 * 0.1 * 3
    np.testing.assert_allclose(E.value, expected)


def _rows_graph(join):
    rng = np.random.default_rng(1)
    E = fa.Parameter(rng.normal(size=(10, 3)))
    ix = fa.IndexInput([0])
    return E, join([E[ix], E[ix] * 2]).sum(), {ix: rng.integers(0, 10, (200_000, 1))}


def _image_graph(layer):
    rng = np.random.default_rng(2)
    x = fa.Input(np.zeros((2, 2, 6, 6)))
    W = fa.Parameter(rng.normal(0, 0.3, (3, 2, 3, 3)))
    loss = fa.tanh(layer(fa.nn.functional.conv2d(x, W, padding=1))).sum()
    return W, loss, {x: rng.normal(size=(5000, 2, 2, 6, 6))}


def _batch_norm(h):
    return fa.nn.functional.batch_norm(h, np.zeros(3, np.float32), np.ones(3, np.float32), training=True)


def _conv1d_graph():
    rng = np.random.default_rng(3)
    x = fa.Input(np.zeros((2, 2, 8)))
    W = fa.Parameter(rng.normal(0, 0.3, (3, 2, 3)))
    b = fa.Parameter(np.zeros(3))
    return W, fa.tanh(fa.conv1d(x, W, b)).sum(), {x: rng.normal(size=(20_000, 2, 2, 8))}


def _cell_graph(cell_class):
    rng = np.random.default_rng(4)
    cell = cell_class(3, 4)
    x = fa.Input(np.zeros((2, 3)))
    out = cell(x)
    h = out[0] if isinstance(out, tuple) else out
    return cell.parameters()[0], fa.tanh(h).sum(), {x: rng.normal(size=(20_000, 2, 3))}


def _class_loss_graph(loss_fn):
    rng = np.random.default_rng(5)
    W = fa.Parameter(rng.normal(0, 0.3, (4, 5)))
    x, y = fa.Input(np.zeros((3, 4))), fa.IndexInput([0, 0, 0])
    n = 100_000
    return W, loss_fn(x @ W, y), {x: rng.normal(size=(n, 3, 4)), y: rng.integers(0, 5, (n, 3))}


def _bag_graph(with_offsets):
    rng = np.random.default_rng(6)
    E = fa.Parameter(rng.normal(size=(20, 3)))
    if with_offsets:
        ids, offsets = fa.IndexInput([0] * 6), fa.IndexInput([0, 2, 5])
        feeds = {ids: rng.integers(0, 20, (200_000, 6)), offsets: np.tile([0, 2, 5], (200_000, 1))}
        return E, fa.tanh(fa.embedding_bag(E, ids, offsets)).sum(), feeds
    ids = fa.IndexInput(np.zeros((2, 3), dtype=np.int64))
    return E, fa.tanh(fa.embedding_bag(E, ids)).sum(), {ids: rng.integers(0, 20, (200_000, 2, 3))}


def _take_along_graph():
    rng = np.random.default_rng(7)
    P = fa.Parameter(rng.normal(size=(3, 6)))
    ids = fa.IndexInput(np.zeros((3, 2), dtype=np.int64))
    return P, fa.tanh(fa.take_along_axis(P, ids, axis=1)).sum(), {ids: rng.integers(0, 6, (200_000, 3, 2))}


def _bpr_with(optimizer):
    U, V, (u, i, j), loss = _bpr_graph()
    rng = np.random.default_rng(8)
    n = 200_000
    feeds = {u: rng.integers(0, 200, n), i: rng.integers(0, 100, n), j: rng.integers(0, 100, n)}
    return V, loss, feeds, optimizer


GRAPHS_OF_OPS = {
    "concat": lambda: _rows_graph(lambda xs: fa.concat(xs, axis=1)),
    "stack": lambda: _rows_graph(fa.stack),
    "conv2d": lambda: _image_graph(lambda h: h),
    "conv1d with bias": _conv1d_graph,
    "batch_norm": lambda: _image_graph(_batch_norm),
    "max_pool2d": lambda: _image_graph(lambda h: fa.nn.functional.max_pool2d(h, 2)),
    "avg_pool2d": lambda: _image_graph(lambda h: fa.nn.functional.avg_pool2d(h, 2)),
    "lstm_cell": lambda: _cell_graph(fa.nn.LSTMCell),
    "gru_cell": lambda: _cell_graph(fa.nn.GRUCell),
    "cross_entropy": lambda: _class_loss_graph(fa.nn.functional.cross_entropy),
    "nll_loss": lambda: _class_loss_graph(
        lambda z, y: fa.nn.functional.nll_loss(fa.nn.functional.log_softmax(z, axis=1), y)),
    "embedding_bag with offsets": lambda: _bag_graph(True),
    "embedding_bag of rows": lambda: _bag_graph(False),
    "take_along_axis": _take_along_graph,
    "NAdam": lambda: _bpr_with(fa.optim.NAdam),
    "Adam": lambda: _bpr_with(fa.optim.Adam),
}


@pytest.mark.parametrize("name", list(GRAPHS_OF_OPS))
def test_every_cpu_op_replays_without_the_gil(name):
    # Once fa.train's loop runs in another thread (the watched Parameter has moved), this
    # thread keeps the GIL (a switch interval of a minute) and watches on. A node or
    # optimizer that takes the GIL in its passes stops the trainer at its next example until
    # this thread lets go; one that runs without it lets the trainer move the Parameter
    # again and again. (The loop's setup may take the GIL: the watch starts after it.)
    built = GRAPHS_OF_OPS[name]()
    watched, loss, feeds = built[:3]
    optimizer = built[3] if len(built) > 3 else fa.optim.SGD
    opt = optimizer(loss.parameters(), lr=0.01)
    errors = []
    # The watched run is one epoch of at least half a second, however fast one pass over
    # the feeds is (some take 30 ms): the feeds repeated, so that the watch has time to see
    # it move (one epoch: between epochs the loop takes the GIL, which the watch holds).
    start = time.perf_counter()
    fa.train(loss, opt, feeds)
    repeats = max(1, math.ceil(0.5 / (time.perf_counter() - start)))
    feeds = {leaf: np.concatenate([rows] * repeats) for leaf, rows in feeds.items()}

    def trainer():
        try:
            fa.train(loss, opt, feeds)
        except BaseException as exc:       # noqa: BLE001 - reported by the test's thread
            errors.append(exc)

    start = watched.numpy().tobytes()
    thread = threading.Thread(target=trainer)
    thread.start()
    while thread.is_alive() and watched.numpy().tobytes() == start:
        time.sleep(0.0002)
    seen = set()
    interval = sys.getswitchinterval()
    sys.setswitchinterval(60)
    try:
        deadline = time.monotonic() + 5
        while len(seen) <= 10 and time.monotonic() < deadline and thread.is_alive():
            seen.add(watched.numpy().tobytes())
    finally:
        sys.setswitchinterval(interval)
    thread.join(120)
    assert not errors, errors
    assert len(seen) > 10, f"{name}: the trainer stood still while this thread held the GIL"


EPOCHS = 5


def _hogwild_bpr_worker(rank, shared, data, workers):
    U, V = fa.Parameter(shared["U"]), fa.Parameter(shared["V"])
    u, i, j = fa.IndexInput([0]), fa.IndexInput([0]), fa.IndexInput([0])
    loss = -fa.logsigmoid(fa.vector_dot(U[u], V[i] - V[j])).sum()
    opt = fa.optim.SGD([U, V], lr=0.1)
    feeds = {leaf: data[key][rank::workers] for leaf, key in ((u, "u"), (i, "i"), (j, "j"))}
    fa.train(loss, opt, feeds, epochs=EPOCHS, progress=fa.hogwild.train_progress(), report_every=1000)
    return rank


def _planted_bpr(seed=0):
    likes = fa.data.planted_interactions(600, 200, per_user=30, rank=4, seed=seed)
    train, test = fa.data.train_test_split(likes, test_fraction=0.2, seed=seed)
    triples = fa.data.sample_triples(train, train.nnz, seed=seed)
    data = {"u": triples["users"], "i": triples["pos"], "j": triples["neg"]}
    return train, test, data


class _Factors:
    def __init__(self, U, V):
        self.U, self.V = U, V

    def scores(self, users):
        return self.U[users] @ self.V.T


def _auc(U, V, train, test):
    return fa.metrics.evaluate(_Factors(U, V), test, train=train, k=10)["auc"]


def test_hogwild_in_threads_trains_as_well_as_processes_and_reports_progress():
    train, test, data = _planted_bpr()
    rng = np.random.default_rng(0)
    U0 = rng.normal(0, 0.1, (600, 16)).astype(np.float32)
    V0 = rng.normal(0, 0.1, (200, 16)).astype(np.float32)
    aucs, totals = {}, {}
    for method in ("threads", "fork"):
        seen = []
        with fa.hogwild.share({"U": U0, "V": V0}) as shared:
            ranks = fa.hogwild.run(_hogwild_bpr_worker, workers=2, args=(shared, data, 2),
                                   start_method=method, progress=lambda done, rate: seen.append(done),
                                   progress_interval=0.01)
            aucs[method] = _auc(shared["U"].numpy(), shared["V"].numpy(), train, test)
        assert ranks == [0, 1]
        totals[method] = seen[-1]
    assert totals["threads"] == totals["fork"] == EPOCHS * len(data["u"])
    assert aucs["threads"] > 0.7
    assert abs(aucs["threads"] - aucs["fork"]) < 0.04      # Hogwild runs differ by ~0.02


def _failing_worker(rank, shared):
    if rank == 1:
        raise ValueError("worker one gives up")
    return rank


def test_a_failing_worker_thread_raises_worker_error_and_frees_the_segments():
    with pytest.raises(fa.hogwild.WorkerError, match="worker one gives up") as info:
        with fa.hogwild.share({"w": np.zeros(4)}) as shared:
            fa.hogwild.run(_failing_worker, workers=2, args=(shared,), start_method="threads")
    assert info.value.rank == 1
    assert "ValueError" in info.value.traceback
    # the conftest leak check fails this test if a segment is left behind


@pytest.mark.parametrize("workers", [0, -1, True, 10**6])
def test_bad_worker_counts_for_threads(workers):
    with pytest.raises(ValueError, match="workers"):
        fa.hogwild.run(_failing_worker, workers=workers, args=(None,), start_method="threads")


def test_bpr_fit_in_threads():
    train, test, _ = _planted_bpr(1)
    model = fa.models.BPR(600, 200, dim=16, seed=0)
    losses = model.fit(train, epochs=3, workers=2, lr=0.1, start_method="threads").history
    assert len(losses) == 3 and losses[-1] < losses[0]
    assert fa.metrics.evaluate(model, test, train=train, k=10)["auc"] > 0.7


def test_synchronized_mode_refuses_threads():
    with pytest.raises(ValueError, match="synchronized.*processes"):
        fa.hogwild.run(_failing_worker, workers=2, args=(None,), start_method="threads",
                       mode="synchronized")


# ------------------------------------------------------------------ memory of each thread

def test_a_threads_graph_buffers_are_not_blocks_another_thread_freed():
    """Small buffers that a training loop writes on every example (leaf values, node values
    and gradients) come from the building thread's own memory. numpy keeps freed small
    blocks for the next array of any thread; a Hogwild thread's buffer made from a block
    another thread freed sits among that thread's buffers, and the cache lines they share
    move between the cores on every write."""
    freed = {}

    def free_a_block():
        block = np.empty(24, dtype=np.uint8)        # 24 bytes: a (2, 3) float32 buffer
        freed["address"] = block.ctypes.data
        del block                                   # kept by numpy for the next 24-byte array

    def build_a_graph():
        w = fa.Parameter(np.ones((2, 3)))           # float32: 24-byte value
        x = fa.Input(np.ones((2, 3)))
        loss = fa.sum(w * x)
        loss.backward()
        freed["buffers"] = [a.ctypes.data for a in (w.value, x.value, (w * x).value, w.grad)]

    run_in_threads(free_a_block)
    run_in_threads(build_a_graph)
    assert freed["address"] not in freed["buffers"]
